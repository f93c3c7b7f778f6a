#include "capsule/profile.hpp"

#include <nlohmann/json.hpp>

#include "capsule/manifest.hpp"
#include "json_reader.hpp"

namespace capsule {

using detail::JsonCursor;
using nlohmann::json;

namespace {
/// The source's evidence records, consulted only under a policy that asks for them.
EvidenceLookup evidence_lookup(const RegistrySource& source, const AcceptancePolicy& policy) {
    if (!policy.require_verified_tests) return {};
    return [&source](const KernelCapsule& capsule) { return source.unverified_evidence(capsule); };
}
}  // namespace

CapsuleRegistry BackendProfile::registry(const RegistrySource& source) const {
    return source.registry(registry_mode);
}

ExecutionPlan BackendProfile::plan_ops(const RegistrySource& source,
                                       std::span<const BackendOp> ops) const {
    return capsule::plan_ops(registry(source), availability(), config, ops);
}

AcceptedPlanResult BackendProfile::gate_ops(const RegistrySource& source,
                                            std::span<const BackendOp> ops) const {
    return gate(lower(plan_ops(source, ops)), acceptance_policy, evidence_lookup(source, acceptance_policy));
}

GraphExecutionPlan BackendProfile::plan_graph(const RegistrySource& source,
                                              const Graph& graph) const {
    return capsule::plan_graph(registry(source), availability(), config, graph);
}

GraphLoweringPlan BackendProfile::lower(const GraphExecutionPlan& plan) const {
    return capsule::lower(plan, lowering_mode);
}

AcceptedPlanResult BackendProfile::accept_graph(const RegistrySource& source,
                                                const Graph& graph) const {
    return gate(lower(plan_graph(source, graph)), acceptance_policy, evidence_lookup(source, acceptance_policy));
}

namespace {
using OS = OperatingSystem;
using Arch = Architecture;

BackendProfile make(std::string name, ExecutionConfig config, Target target, std::string mode,
                    AcceptancePolicy policy) {
    return BackendProfile{std::move(name), config,   std::move(target), std::move(mode),
                          LoweringMode::coalesced, policy};
}

ExecutionConfig libtorch_config(Device device, VJPMode vjp) {
    return {device, BackendPreference::only(Provider::libtorch), TrustPolicy::trusted_external_ok,
            vjp};
}

Target linux_cpu_with(BuildFeature feature) {
    Target t = Target::linux_cpu();
    t.features.push_back(feature);
    return t;
}
}  // namespace

BackendProfile BackendProfile::checked_cpu() {
    return make("checked_cpu", {}, Target::portable_cpu(), "default",
                AcceptancePolicy::checked_runtime());
}

BackendProfile BackendProfile::checked_cpu_target(OperatingSystem os, Architecture arch) {
    auto p = checked_cpu();
    p.name = "checked_" + std::string(to_string(os)) + "_" + std::string(to_string(arch)) + "_cpu";
    p.target = Target::cpu_for(os, arch);
    return p;
}

BackendProfile BackendProfile::checked_cuda() {
    return make("checked_cuda", {Device::cuda}, Target::linux_cuda(), "default",
                AcceptancePolicy::checked_runtime());
}

BackendProfile BackendProfile::libtorch_forward_cuda() {
    return make("libtorch_forward_cuda", libtorch_config(Device::cuda, VJPMode::torchlean_tape),
                Target::linux_cuda(true), "with-libtorch",
                AcceptancePolicy::allow_trusted_runtime());
}

BackendProfile BackendProfile::libtorch_autograd_cuda() {
    return make("libtorch_autograd_cuda",
                libtorch_config(Device::cuda, VJPMode::external_autograd),
                Target::linux_cuda(true), "with-libtorch",
                AcceptancePolicy::allow_trusted_runtime());
}

BackendProfile BackendProfile::libtorch_forward_cpu() {
    return make("libtorch_forward_cpu", libtorch_config(Device::cpu, VJPMode::torchlean_tape),
                linux_cpu_with(BuildFeature::libtorch), "with-libtorch",
                AcceptancePolicy::allow_trusted_runtime());
}

BackendProfile BackendProfile::libtorch_autograd_cpu() {
    return make("libtorch_autograd_cpu", libtorch_config(Device::cpu, VJPMode::external_autograd),
                linux_cpu_with(BuildFeature::libtorch), "with-libtorch",
                AcceptancePolicy::allow_trusted_runtime());
}

// checked_cpu on oneDNN: its capsules come first (prefer:onednn); ops it lacks stay on the
// reference capsules of the same plan. VJP mode torchlean-tape, as checked_cpu: every oneDNN
// capsule has a backward kernel, so training runs on them too.
BackendProfile BackendProfile::onednn_cpu() {
    auto p = checked_cpu();
    p.name = "onednn_cpu";
    p.config.backend = BackendPreference::prefer(Provider::onednn);
    p.target = linux_cpu_with(BuildFeature::onednn);
    return p;
}

// onednn_cpu with fpmath bf16: float32 convolutions, inner products and matmuls may round their
// inputs and weights to bfloat16 (float32 accumulation) where the CPU computes bfloat16 natively.
BackendProfile BackendProfile::onednn_cpu_bf16() {
    auto p = onednn_cpu();
    p.name = "onednn_cpu_bf16";
    p.config.fpmath = FpMath::bf16;
    return p;
}

// checked_cpu whose test-suite evidence must be earned on this machine: `capsule verify` records
// a passing run of the conformance suite for each plugin library the plan uses (DESIGN.md
// section 10, "Evidence is earned").
BackendProfile BackendProfile::verified_cpu() {
    auto p = checked_cpu();
    p.name = "verified_cpu";
    p.acceptance_policy = AcceptancePolicy::verified();
    return p;
}

BackendProfile BackendProfile::future(std::string name, Device device, Target target,
                                      BackendPreference backend, TrustPolicy trust, VJPMode vjp,
                                      AcceptancePolicy acceptance) {
    return make(std::move(name), {device, backend, trust, vjp}, std::move(target), "default",
                acceptance);
}

const std::vector<BackendProfile>& builtin_profiles() {
    static const std::vector<BackendProfile> profiles = [] {
        using P = BackendProfile;
        return std::vector<P>{
            P::checked_cpu(),
            P::checked_cpu_target(OS::linux_os, Arch::x86_64),
            P::checked_cpu_target(OS::macos, Arch::aarch64),
            P::checked_cpu_target(OS::windows, Arch::x86_64),
            P::checked_cuda(),
            P::libtorch_forward_cuda(),
            P::libtorch_autograd_cuda(),
            P::future("future_metal", Device::metal, Target::macos_metal()),
            P::future("future_rocm", Device::rocm, Target::linux_rocm()),
            P::future("future_wasm", Device::wasm, Target::wasm()),
            P::future("future_tpu", Device::tpu, Target::linux_tpu()),
            P::future("future_trainium", Device::trainium, Target::linux_trainium()),
            P::future("future_custom_chip", Device::custom, Target::custom_chip()),
            P::future("future_external", Device::external, Target::external(),
                      BackendPreference::only(Provider::external),
                      TrustPolicy::trusted_external_ok, VJPMode::external_autograd,
                      AcceptancePolicy::allow_trusted_runtime()),
            P::onednn_cpu(),
            P::onednn_cpu_bf16(),
            P::libtorch_forward_cpu(),
            P::libtorch_autograd_cpu(),
            P::verified_cpu(),
        };
    }();
    return profiles;
}

const BackendProfile& find_builtin_profile(std::string_view name) {
    for (const auto& p : builtin_profiles())
        if (p.name == name) return p;
    std::string names;
    for (const auto& p : builtin_profiles()) names += (names.empty() ? "" : ", ") + p.name;
    throw Error(ErrorCode::input, "unknown profile '" + std::string(name) + "'; valid: " + names);
}

json acceptance_policy_to_json(const AcceptancePolicy& p) {
    if (auto name = p.name()) return std::string(*name);
    return json{{"require_evidence", p.require_evidence},
                {"allow_runtime_guards", p.allow_runtime_guards},
                {"allow_test_evidence", p.allow_test_evidence},
                {"allow_trusted_boundaries", p.allow_trusted_boundaries},
                {"allow_fuzz_evidence", p.allow_fuzz_evidence},
                {"require_verified_tests", p.require_verified_tests}};
}

json profile_to_json(const BackendProfile& p) {
    json features = json::array();
    for (auto f : p.target.features) features.push_back(to_string(f));
    return json{
        {"name", p.name},
        {"config",
         {{"device", to_string(p.config.device)},
          {"backend", to_string(p.config.backend)},
          {"trust_policy", to_string(p.config.trust_policy)},
          {"vjp_mode", to_string(p.config.vjp_mode)},
          {"fpmath", to_string(p.config.fpmath)}}},
        {"target",
         {{"os", to_string(p.target.os)},
          {"arch", to_string(p.target.arch)},
          {"accelerator", accelerator_to_string(p.target.accelerator)},
          {"features", features}}},
        {"registry_mode", p.registry_mode},
        {"lowering_mode", to_string(p.lowering_mode)},
        {"acceptance_policy", acceptance_policy_to_json(p.acceptance_policy)}};
}

namespace {

template <typename F>
auto rethrow_at(const JsonCursor& c, F&& read) {
    try {
        return read();
    } catch (const Error& e) {
        c.fail(e.what());
    }
}

void read_config(const JsonCursor& c, ExecutionConfig& config) {
    c.object({"device", "backend", "trust_policy", "vjp_mode", "fpmath"});
    if (c.has("device")) config.device = c.at("device").spelling<Device>();
    if (c.has("backend")) {
        auto b = c.at("backend");
        config.backend = rethrow_at(b, [&] { return parse_backend_preference(b.string()); });
    }
    if (c.has("trust_policy")) config.trust_policy = c.at("trust_policy").spelling<TrustPolicy>();
    if (c.has("vjp_mode")) config.vjp_mode = c.at("vjp_mode").spelling<VJPMode>();
    if (c.has("fpmath")) config.fpmath = c.at("fpmath").spelling<FpMath>();
}

void read_target(const JsonCursor& c, Target& target) {
    c.object({"os", "arch", "accelerator", "features"});
    if (c.has("os")) target.os = c.at("os").spelling<OperatingSystem>();
    if (c.has("arch")) target.arch = c.at("arch").spelling<Architecture>();
    if (c.has("accelerator")) {
        auto a = c.at("accelerator");
        target.accelerator = rethrow_at(a, [&] { return parse_accelerator(a.string()); });
    }
    if (c.has("features")) {
        target.features.clear();
        c.at("features").each([&](const JsonCursor& item, std::size_t) {
            auto feature = item.spelling<BuildFeature>();
            if (target.has_feature(feature))
                item.fail("duplicate feature " + std::string(to_string(feature)));
            target.features.push_back(feature);
        });
    }
}

AcceptancePolicy read_policy(const JsonCursor& c) {
    if (c.is_string())
        return rethrow_at(c, [&] { return parse_acceptance_policy(c.string()); });
    c.object({"require_evidence", "allow_runtime_guards", "allow_test_evidence",
              "allow_trusted_boundaries", "allow_fuzz_evidence", "require_verified_tests"});
    AcceptancePolicy p;
    p.require_evidence = c.at("require_evidence").boolean();
    p.allow_runtime_guards = c.at("allow_runtime_guards").boolean();
    p.allow_test_evidence = c.at("allow_test_evidence").boolean();
    p.allow_trusted_boundaries = c.at("allow_trusted_boundaries").boolean();
    p.allow_fuzz_evidence = c.at("allow_fuzz_evidence").boolean();
    // Optional: the five booleans of DESIGN.md section 7 keep their meaning without it.
    if (c.has("require_verified_tests"))
        p.require_verified_tests = c.at("require_verified_tests").boolean();
    return p;
}

}  // namespace

BackendProfile profile_from_json(std::string_view json_text, const std::filesystem::path& source) {
    const std::string src = source.empty() ? "profile" : source.string();
    const detail::JsonDocument doc(json_text, src);
    const JsonCursor root = doc.root();
    root.object({"name", "base", "config", "target", "registry_mode", "lowering_mode",
                 "acceptance_policy", "description"});
    BackendProfile p;
    const bool has_base = root.has("base");
    if (has_base) {
        auto b = root.at("base");
        p = rethrow_at(b, [&] { return find_builtin_profile(b.string()); });
    } else {
        // Without a base, a profile must say everything: nothing is defaulted silently.
        for (auto key : {"config", "target", "registry_mode", "lowering_mode",
                         "acceptance_policy"})
            if (!root.has(key))
                root.fail(std::string("missing required key '") + key +
                          "' (or give \"base\": \"<profile>\" to inherit it)");
    }
    p.name = root.at("name").string();
    if (p.name.empty()) root.at("name").fail("profile name must not be empty");
    if (root.has("config")) read_config(root.at("config"), p.config);
    if (root.has("target")) read_target(root.at("target"), p.target);
    if (root.has("registry_mode")) {
        auto m = root.at("registry_mode");
        p.registry_mode = m.string();
        try {
            validate_registry_mode(p.registry_mode);
        } catch (const Error& e) {
            m.fail(e.what());
        }
    }
    if (root.has("lowering_mode")) p.lowering_mode = root.at("lowering_mode").spelling<LoweringMode>();
    if (root.has("acceptance_policy")) p.acceptance_policy = read_policy(root.at("acceptance_policy"));
    return p;
}

BackendProfile load_profile_file(const std::filesystem::path& path) {
    return profile_from_json(detail::read_text_file(path, "profile"), path);
}

}  // namespace capsule
