// Kernel capsules and their contract descriptors (DESIGN.md section 2).
//
// A KernelCapsule is the unit the planner picks: one op on one device from one provider, with
// four contract descriptors (shape, layout, value, vjp). Each descriptor is a claim, a summary and
// the evidence behind it. Alignment and admissibility are pure functions of a capsule and a
// config; they return the reasons for a refusal so planning errors can list them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/target.hpp"
#include "capsule/vocabulary.hpp"

namespace capsule {

/// Memory layout a capsule claims compatibility with.
enum class Layout : std::uint8_t { canonical_tensor, flat_row_major, libtorch_cuda_view };

/// The kinds of claim, one per contract field.
enum class ClaimKind : std::uint8_t { shape_safety, layout_compatibility, value_refinement,
                                      vjp_refinement };

/// Evidence behind a claim.
enum class Evidence : std::uint8_t { theorem, checker, runtime_guard, test_suite, fuzz_oracle,
                                     trusted_boundary, not_provided };

/// How the gate sees a piece of evidence.
enum class Disposition : std::uint8_t { proved, checked, guarded, tested, fuzzed, trusted,
                                        missing };

/// The four contract fields (obligations) of every capsule and group.
enum class Obligation : std::uint8_t { shape, layout, value, vjp };

template <> struct Spellings<Layout> {
    static constexpr std::string_view kind = "layout";
    static const std::array<std::pair<Layout, std::string_view>, 3> values;
};
template <> struct Spellings<ClaimKind> {
    static constexpr std::string_view kind = "claim kind";
    static const std::array<std::pair<ClaimKind, std::string_view>, 4> values;
};
template <> struct Spellings<Evidence> {
    static constexpr std::string_view kind = "evidence";
    static const std::array<std::pair<Evidence, std::string_view>, 7> values;
};
template <> struct Spellings<Disposition> {
    static constexpr std::string_view kind = "disposition";
    static const std::array<std::pair<Disposition, std::string_view>, 7> values;
};
template <> struct Spellings<Obligation> {
    static constexpr std::string_view kind = "obligation";
    static const std::array<std::pair<Obligation, std::string_view>, 4> values;
};

/// theorem→proved, checker→checked, runtime-guard→guarded, test-suite→tested,
/// fuzz-oracle→fuzzed, trusted-boundary→trusted, not-provided→missing.
Disposition disposition_of(Evidence evidence);

/// The claim kind each contract field must carry.
ClaimKind claim_kind_for(Obligation obligation);

/// A contract claim. Which optional fields are set depends on `kind`:
/// shape-safety(op), layout-compatibility(op, layout), value-refinement(op, spec),
/// vjp-refinement(op, spec, vjp_mode).
struct ContractClaim {
    ClaimKind kind = ClaimKind::shape_safety;
    BackendOp op = BackendOp::add;
    std::optional<Layout> layout;
    std::optional<std::string> spec;
    std::optional<VJPMode> vjp_mode;
    bool operator==(const ContractClaim&) const = default;
};
/// e.g. `shape-safety(relu)`, `vjp-refinement(relu, torch.relu, torchlean-tape)`.
std::string to_string(const ContractClaim& claim);

/// Where a claim's evidence lives.
struct Provenance {
    std::string source_file;
    std::string native_symbol;
    std::string note;
    bool operator==(const Provenance&) const = default;
};

struct ContractDescriptor {
    ContractClaim claim;
    std::string summary;
    Evidence evidence = Evidence::not_provided;
    std::optional<Provenance> provenance;
    bool operator==(const ContractDescriptor&) const = default;
};

/// float32, float64, int64 and bool as a dtype mask (CAPSULE_DTYPES_1_0).
inline constexpr std::uint64_t kDTypes1_0 = 0b1111;

struct KernelCapsule {
    std::string name;
    BackendOp op = BackendOp::add;
    Provider provider = Provider::reference;
    Device device = Device::cpu;
    std::string spec;  // spec name, e.g. "torch.relu"
    TrustLevel trust = TrustLevel::checked;
    bool supports_forward = true;
    VJPMode vjp_mode = VJPMode::none;
    RuntimeSupport runtime = RuntimeSupport::eager;
    ContractDescriptor shape, layout, value, vjp;
    std::string notes;
    /// The dtypes its kernel accepts, as a capsule_dtype bit mask (CAPSULE_DTYPE_BIT: bit d for
    /// DType value d); ABI 1.0's four (float32, float64, int64, bool) unless the manifest's
    /// `dtypes` says otherwise. The planner admits the capsule only for nodes whose parents and
    /// output all have one of these dtypes.
    std::uint64_t dtypes = kDTypes1_0;

    const ContractDescriptor& contract(Obligation o) const;
    /// Capsule identity used by coalesced lowering: name, op, provider, device.
    bool same_identity(const KernelCapsule& other) const {
        return name == other.name && op == other.op && provider == other.provider &&
               device == other.device;
    }
    bool operator==(const KernelCapsule&) const = default;
};

/// Why a descriptor is misaligned, or nullopt when it is aligned: its claim must be of the
/// field's kind and name the capsule's op; the vjp claim must also carry the capsule's VJP mode.
std::optional<std::string> misalignment(const KernelCapsule& capsule, Obligation field);
/// Aligned when no descriptor is misaligned.
bool aligned(const KernelCapsule& capsule);

/// VJP compatibility of a capsule with a config's VJP mode (DESIGN.md section 2): always when the
/// config's mode is none or the op needs no VJP; torchlean-tape needs torchlean-tape or
/// backend-vjp; backend-vjp needs backend-vjp; external-autograd needs external-autograd.
bool vjp_compatible(VJPMode config_mode, const KernelCapsule& capsule);

/// Every reason `capsule` is not admissible under `config` (empty when admissible): forward
/// unsupported, misaligned contracts, trust policy, only: preference, wrong device, VJP mode.
std::vector<std::string> admissibility_refusals(const ExecutionConfig& config,
                                                const KernelCapsule& capsule);
inline bool admissible(const ExecutionConfig& config, const KernelCapsule& capsule) {
    return admissibility_refusals(config, capsule).empty();
}

}  // namespace capsule
