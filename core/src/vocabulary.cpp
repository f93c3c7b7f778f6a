#include "capsule/vocabulary.hpp"

namespace capsule {

using std::pair;
using std::string_view;

const std::array<pair<Device, string_view>, 9> Spellings<Device>::values{{
    {Device::cpu, "cpu"}, {Device::cuda, "cuda"}, {Device::rocm, "rocm"},
    {Device::metal, "metal"}, {Device::wasm, "wasm"}, {Device::tpu, "tpu"},
    {Device::trainium, "trainium"}, {Device::custom, "custom"}, {Device::external, "external"},
}};

const std::array<pair<Provider, string_view>, 15> Spellings<Provider>::values{{
    {Provider::reference, "reference"}, {Provider::torchlean, "torchlean"},
    {Provider::native_cuda, "native-cuda"}, {Provider::libtorch, "libtorch"},
    {Provider::aten, "aten"}, {Provider::mps, "mps"}, {Provider::webgpu, "webgpu"},
    {Provider::cublas, "cublas"}, {Provider::cudnn, "cudnn"}, {Provider::cufft, "cufft"},
    {Provider::xla, "xla"}, {Provider::neuron, "neuron"}, {Provider::custom_chip, "custom-chip"},
    {Provider::external, "external"}, {Provider::onednn, "onednn"},
}};

const std::array<pair<BackendOp, string_view>, kBackendOpCount> Spellings<BackendOp>::values{{
#define CAPSULE_BACKEND_OP(name, ...) {BackendOp::name, #name},
#include "capsule/backend_ops.def"
#undef CAPSULE_BACKEND_OP
}};

const std::array<pair<TrustLevel, string_view>, 4> Spellings<TrustLevel>::values{{
    {TrustLevel::verified, "verified"}, {TrustLevel::checked, "checked"},
    {TrustLevel::fuzzed, "fuzzed"}, {TrustLevel::trusted_external, "trusted-external"},
}};

const std::array<pair<TrustPolicy, string_view>, 4> Spellings<TrustPolicy>::values{{
    {TrustPolicy::verified_only, "verified-only"}, {TrustPolicy::checked, "checked"},
    {TrustPolicy::fuzzed_ok, "fuzzed-ok"}, {TrustPolicy::trusted_external_ok, "trusted-external-ok"},
}};

const std::array<pair<VJPMode, string_view>, 4> Spellings<VJPMode>::values{{
    {VJPMode::none, "none"}, {VJPMode::torchlean_tape, "torchlean-tape"},
    {VJPMode::backend_vjp, "backend-vjp"}, {VJPMode::external_autograd, "external-autograd"},
}};

const std::array<pair<RuntimeSupport, string_view>, 4> Spellings<RuntimeSupport>::values{{
    {RuntimeSupport::eager, "eager"}, {RuntimeSupport::test_only, "test-only"},
    {RuntimeSupport::planner_only, "planner-only"}, {RuntimeSupport::not_wired, "not-wired"},
}};

const std::array<pair<FpMath, string_view>, 2> Spellings<FpMath>::values{{
    {FpMath::strict, "strict"}, {FpMath::bf16, "bf16"},
}};

namespace {
constexpr std::array<pair<string_view, Device>, 7> kDeviceAliases{{
    {"gpu", Device::cuda}, {"amd", Device::rocm}, {"mps", Device::metal},
    {"webgpu", Device::wasm}, {"xla", Device::tpu}, {"neuron", Device::trainium},
    {"custom-chip", Device::custom},
}};
}  // namespace

Device parse_device_alias(string_view text) {
    for (const auto& [alias, device] : kDeviceAliases)
        if (alias == text) return device;
    for (const auto& [device, name] : Spellings<Device>::values)
        if (name == text) return device;
    std::string aliases;
    for (const auto& [alias, device] : kDeviceAliases)
        aliases += std::string(aliases.empty() ? "" : ", ") + std::string(alias) + "→" +
                   std::string(to_string(device));
    throw Error(ErrorCode::input, "unknown device '" + std::string(text) +
                          "'; valid: " + valid_spellings<Device>() + " (aliases: " + aliases + ")");
}

bool op_needs_no_vjp(BackendOp op) {
    static constexpr std::array<bool, kBackendOpCount> no_vjp{
#define CAPSULE_BACKEND_OP(name, section, no_vjp_reason, ...) std::string_view(no_vjp_reason) != "",
#include "capsule/backend_ops.def"
#undef CAPSULE_BACKEND_OP
    };
    return no_vjp[static_cast<std::size_t>(op)];
}

bool is_optimizer_step(BackendOp op) { return op == BackendOp::sgd || op == BackendOp::adam; }

bool trust_policy_admits(TrustPolicy policy, TrustLevel level) {
    switch (policy) {
        case TrustPolicy::verified_only: return level == TrustLevel::verified;
        case TrustPolicy::checked:
            return level == TrustLevel::verified || level == TrustLevel::checked;
        case TrustPolicy::fuzzed_ok: return level != TrustLevel::trusted_external;
        case TrustPolicy::trusted_external_ok: return true;
    }
    return false;
}

std::string to_string(const BackendPreference& preference) {
    switch (preference.kind) {
        case BackendPreference::Kind::automatic: return "auto";
        case BackendPreference::Kind::prefer:
            return "prefer:" + std::string(to_string(preference.provider));
        case BackendPreference::Kind::only:
            return "only:" + std::string(to_string(preference.provider));
    }
    return "auto";
}

BackendPreference parse_backend_preference(string_view text) {
    if (text == "auto") return BackendPreference::automatic();
    auto colon = text.find(':');
    if (colon != string_view::npos) {
        auto head = text.substr(0, colon);
        if (head == "prefer" || head == "only") {
            Provider provider{};
            try {
                provider = parse<Provider>(text.substr(colon + 1));
            } catch (const Error& e) {
                throw Error(ErrorCode::input, "unknown backend preference '" + std::string(text) +
                                      "': " + e.what());
            }
            return head == "prefer" ? BackendPreference::prefer(provider)
                                    : BackendPreference::only(provider);
        }
    }
    throw Error(ErrorCode::input, "unknown backend preference '" + std::string(text) +
                          "'; valid: auto, prefer:<provider>, only:<provider> with provider one of " +
                          valid_spellings<Provider>());
}

}  // namespace capsule
