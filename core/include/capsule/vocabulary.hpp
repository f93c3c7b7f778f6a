// The closed vocabularies of DESIGN.md section 2 with their stable spellings.
//
// Every enum here has a spelling table; `to_string` prints the stable spelling used in JSON,
// reports and the CLI, and `parse<E>` reads it back. An unknown spelling raises Error(input)
// whose message lists every valid spelling, so a typo in a manifest or on the command line is
// never guessed at.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capsule/error.hpp"

namespace capsule {

/// Where a capsule's kernels run.
enum class Device : std::uint8_t { cpu, cuda, rocm, metal, wasm, tpu, trainium, custom, external };

/// Who implements a capsule.
enum class Provider : std::uint8_t {
    reference, torchlean, native_cuda, libtorch, aten, mps, webgpu, cublas, cudnn, cufft, xla,
    neuron, custom_chip, external, onednn
};

/// The closed op vocabulary. A graph node whose op is not here is rejected, never guessed.
/// Numeric semantics follow the PyTorch op of the same meaning (see docs/ops.md).
enum class BackendOp : std::uint8_t {
#define CAPSULE_BACKEND_OP(name, ...) name,
#include "capsule/backend_ops.def"
#undef CAPSULE_BACKEND_OP
};
/// The number of BackendOps: the entries of the op catalog (capsule/backend_ops.def).
inline constexpr std::size_t kBackendOpCount = 0
#define CAPSULE_BACKEND_OP(name, ...) + 1
#include "capsule/backend_ops.def"
#undef CAPSULE_BACKEND_OP
    ;

/// How much a capsule's claims are trusted.
enum class TrustLevel : std::uint8_t { verified, checked, fuzzed, trusted_external };

/// Which trust levels an execution config admits (DESIGN.md section 2 table).
enum class TrustPolicy : std::uint8_t { verified_only, checked, fuzzed_ok, trusted_external_ok };

/// Who owns the backward pass.
enum class VJPMode : std::uint8_t { none, torchlean_tape, backend_vjp, external_autograd };

/// The floating-point arithmetic a profile allows kernels to use for float32 ops (oneDNN's
/// fpmath mode): `strict` computes in float32; `bf16` lets a kernel round its float32 inputs and
/// weights to bfloat16 and accumulate in float32, where the CPU computes bfloat16 natively
/// (avx512_bf16, AMX). A permission, not a demand: a kernel may still compute in float32.
enum class FpMath : std::uint8_t { strict, bf16 };

/// Whether a capsule has a kernel that a session can call.
enum class RuntimeSupport : std::uint8_t { eager, test_only, planner_only, not_wired };

/// Stable spelling tables. One specialisation per enum; `values` is in declaration order.
template <typename E>
struct Spellings;

#define CAPSULE_SPELLINGS(E, KIND, N)                                          \
    template <>                                                                \
    struct Spellings<E> {                                                      \
        static constexpr std::string_view kind = KIND;                         \
        static const std::array<std::pair<E, std::string_view>, N> values;     \
    };

CAPSULE_SPELLINGS(Device, "device", 9)
CAPSULE_SPELLINGS(Provider, "provider", 15)
CAPSULE_SPELLINGS(BackendOp, "op", kBackendOpCount)
CAPSULE_SPELLINGS(TrustLevel, "trust level", 4)
CAPSULE_SPELLINGS(TrustPolicy, "trust policy", 4)
CAPSULE_SPELLINGS(VJPMode, "VJP mode", 4)
CAPSULE_SPELLINGS(RuntimeSupport, "runtime support", 4)
CAPSULE_SPELLINGS(FpMath, "fpmath mode", 2)
#undef CAPSULE_SPELLINGS

/// Comma-separated list of every valid spelling of E, for error messages.
template <typename E>
std::string valid_spellings() {
    std::string out;
    for (const auto& [value, name] : Spellings<E>::values) {
        if (!out.empty()) out += ", ";
        out += name;
    }
    return out;
}

/// The stable spelling of `value`.
template <typename E>
std::string_view to_string(E value) {
    return Spellings<E>::values[static_cast<std::size_t>(value)].second;
}

/// Reads a stable spelling. Raises Error(input) naming the kind, the bad text and every valid
/// spelling.
template <typename E>
E parse(std::string_view text) {
    for (const auto& [value, name] : Spellings<E>::values)
        if (name == text) return value;
    throw Error(ErrorCode::input, "unknown " + std::string(Spellings<E>::kind) + " '" + std::string(text) +
                          "'; valid: " + valid_spellings<E>());
}

/// Every value of E in declaration order.
template <typename E>
std::vector<E> all_values() {
    std::vector<E> out;
    for (const auto& [value, name] : Spellings<E>::values) out.push_back(value);
    return out;
}

/// Reads a device name as typed on the command line: a stable spelling or one of the aliases
/// gpu→cuda, amd→rocm, mps→metal, webgpu→wasm, xla→tpu, neuron→trainium, custom-chip→custom.
/// Raises Error(input) listing the valid names and aliases.
Device parse_device_alias(std::string_view text);

/// True for the ops whose backward pass is never needed (the op catalog's `no_vjp`): random
/// sampling (`rand_uniform`, `bernoulli_mask`), ops with integer or bool outputs (`argmax`,
/// `argmin`, the comparisons and the logical ops) and the optimizer steps.
bool op_needs_no_vjp(BackendOp op);

/// True for the optimizer steps `sgd` and `adam`: several outputs (the parameter and its state
/// buffers), updated in place by capsule::Optimizer; never nodes of a graph (docs/ops.md).
bool is_optimizer_step(BackendOp op);

/// Whether `policy` admits a capsule of trust `level` (DESIGN.md section 2):
/// verified-only ⊂ checked ⊂ fuzzed-ok ⊂ trusted-external-ok.
bool trust_policy_admits(TrustPolicy policy, TrustLevel level);

/// Backend preference: `auto`, `prefer:<provider>` or `only:<provider>`.
struct BackendPreference {
    enum class Kind : std::uint8_t { automatic, prefer, only };
    Kind kind = Kind::automatic;
    Provider provider = Provider::reference;  // meaningful for prefer/only

    static BackendPreference automatic() { return {}; }
    static BackendPreference prefer(Provider p) { return {Kind::prefer, p}; }
    static BackendPreference only(Provider p) { return {Kind::only, p}; }

    /// False only for `only:<p>` and a provider other than p.
    bool admits(Provider p) const { return kind != Kind::only || provider == p; }
    bool operator==(const BackendPreference&) const = default;
};

/// Stable spelling: `auto`, `prefer:<provider>`, `only:<provider>`.
std::string to_string(const BackendPreference& preference);
/// Reads `auto`, `prefer:<provider>` or `only:<provider>`; raises Error(input) otherwise.
BackendPreference parse_backend_preference(std::string_view text);

/// ExecutionConfig = device + backend preference + trust policy + VJP mode + fpmath mode.
/// Defaults: cpu, auto, checked, torchlean-tape, strict.
struct ExecutionConfig {
    Device device = Device::cpu;
    BackendPreference backend{};
    TrustPolicy trust_policy = TrustPolicy::checked;
    VJPMode vjp_mode = VJPMode::torchlean_tape;
    FpMath fpmath = FpMath::strict;
    bool operator==(const ExecutionConfig&) const = default;
};

}  // namespace capsule
