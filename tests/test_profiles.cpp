// Every named profile against the shipped manifests, profile files, and malformed profiles.
#include <gtest/gtest.h>

#include "capsule/op_catalog.hpp"
#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

#include <nlohmann/json.hpp>

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;

namespace {
const PluginHost& host() {
    static const PluginHost h = shipped_host();
    return h;
}

std::string planned_capsule(const BackendProfile& p, BackendOp op) {
    const BackendOp ops[] = {op};
    return p.plan_ops(host(), ops).nodes.at(0).capsule->name;
}

std::string planning_error(const BackendProfile& p, BackendOp op) {
    const BackendOp ops[] = {op};
    return error_of([&] { p.plan_ops(host(), ops); });
}
}  // namespace

TEST(ShippedManifests, AllLoadAndStubsAreLibraryFree) {
    for (const auto& r : host().plugins()) {
        EXPECT_NE(r.status, PluginStatus::failed) << r.name << ": " << r.failure;
    }
    int stubs = 0;
    for (const auto& r : host().plugins()) {
        EXPECT_EQ(r.status, PluginStatus::stub) << r.name << ": a manifests-only host runs no code";
        if (r.manifest && r.manifest->capsules.empty()) {
            ++stubs;
            EXPECT_TRUE(r.manifest->is_stub()) << r.name << ": future targets ship no library";
        }
    }
    EXPECT_EQ(stubs, 7);  // metal rocm wasm tpu trainium custom_chip external
    // Reference: one capsule per op; native CUDA: one per op (sdpa is flash_attention).
    auto reg = host().registry("default");
    int reference = 0, cuda = 0;
    for (const auto& k : reg.capsules) {
        reference += k->provider == Provider::reference;
        cuda += k->provider == Provider::native_cuda;
        EXPECT_NE(k->provider, Provider::libtorch) << "libtorch joins with-libtorch only";
    }
    EXPECT_EQ(reference, static_cast<int>(op_catalog().size()));
    EXPECT_EQ(cuda, static_cast<int>(op_catalog().size()));
}

TEST(ShippedManifests, ReferenceCapsulesFollowTheIssue) {
    for (const auto& k : host().registry("default").capsules) {
        if (k->provider != Provider::reference) continue;
        SCOPED_TRACE(k->name);
        EXPECT_EQ(k->name, "reference." + std::string(to_string(k->op)));
        EXPECT_EQ(k->trust, TrustLevel::checked);
        EXPECT_EQ(k->vjp_mode, op_needs_no_vjp(k->op) ? VJPMode::none : VJPMode::torchlean_tape);
        EXPECT_EQ(k->shape.evidence, Evidence::runtime_guard);
        EXPECT_EQ(k->layout.evidence, Evidence::runtime_guard);
        EXPECT_EQ(k->value.evidence, Evidence::test_suite);
        EXPECT_EQ(k->vjp.evidence, Evidence::test_suite);
        EXPECT_TRUE(aligned(*k));
    }
}

TEST(Profiles, CheckedCpuPlansEveryOpWithReferenceCapsulesAndAccepts) {
    const auto& p = find_builtin_profile("checked_cpu");
    auto ops = all_values<BackendOp>();
    auto result = p.gate_ops(host(), ops);
    EXPECT_TRUE(result.gate.accepted());
    ASSERT_EQ(result.gate.plan.groups.size(), ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i)
        EXPECT_EQ(result.gate.plan.groups[i].capsule->name,
                  "reference." + std::string(to_string(ops[i])));
}

TEST(Profiles, CheckedCpuUnderStrictIsRejectedForGuardsAndTests) {
    auto p = BackendProfile::checked_cpu();
    p.acceptance_policy = AcceptancePolicy::strict();
    const BackendOp ops[] = {BackendOp::relu};
    auto result = p.gate_ops(host(), ops);
    ASSERT_EQ(result.gate.failures.size(), 2u);
    EXPECT_EQ(result.gate.failures[0].kind, GateFailureKind::runtime_guard_evidence);
    EXPECT_EQ(result.gate.failures[1].kind, GateFailureKind::test_evidence);
    EXPECT_FALSE(result.accepted);
}

TEST(Profiles, CheckedCudaPlansNativeCudaCapsules) {
    const auto& p = find_builtin_profile("checked_cuda");
    EXPECT_EQ(planned_capsule(p, BackendOp::matmul), "native_cuda.matmul");
    EXPECT_EQ(planned_capsule(p, BackendOp::softmax), "native_cuda.softmax");
    EXPECT_EQ(planned_capsule(p, BackendOp::scaled_dot_product_attention),
              "native_cuda.flash_attention");
    const BackendOp ops[] = {BackendOp::matmul, BackendOp::relu};
    EXPECT_TRUE(p.gate_ops(host(), ops).gate.accepted());
}

TEST(Profiles, EachFutureProfileFailsToPlanMatmul) {
    const std::pair<const char*, const char*> futures[] = {
        {"future_metal", "metal"},       {"future_rocm", "rocm"},
        {"future_wasm", "wasm"},         {"future_tpu", "tpu"},
        {"future_trainium", "trainium"}, {"future_custom_chip", "custom"},
        {"future_external", "external"},
    };
    for (const auto& [name, device] : futures) {
        SCOPED_TRACE(name);
        auto msg = planning_error(find_builtin_profile(name), BackendOp::matmul);
        EXPECT_EQ(msg.rfind("no admissible backend capsule for op matmul on device " +
                                std::string(device) + "\n",
                            0),
                  0u)
            << msg;
        // The reference capsule is listed as refused for the wrong device: no silent CPU run.
        EXPECT_NE(msg.find("reference.matmul (provider reference, device cpu): "),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("wrong device (capsule cpu, config " + std::string(device) + ")"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("native_cuda.matmul"), std::string::npos) << msg;
    }
}

TEST(Profiles, LibTorchCudaProfilesPlanOnlyTheSdpaCapsules) {
    const std::pair<const char*, const char*> rows[] = {
        {"libtorch_forward_cuda", "libtorch.sdpa_forward"},
        {"libtorch_autograd_cuda", "libtorch.sdpa_autograd"},
    };
    for (const auto& [name, capsule] : rows) {
        SCOPED_TRACE(name);
        const auto& p = find_builtin_profile(name);
        EXPECT_EQ(planned_capsule(p, BackendOp::scaled_dot_product_attention), capsule);
        auto msg = planning_error(p, BackendOp::matmul);
        EXPECT_NE(msg.find("only: preference only:libtorch refuses provider reference"),
                  std::string::npos)
            << msg;
        const BackendOp ops[] = {BackendOp::scaled_dot_product_attention};
        auto accepted = p.gate_ops(host(), ops);
        EXPECT_TRUE(accepted.gate.trusted_external);
        if (p.config.vjp_mode == VJPMode::external_autograd) {
            EXPECT_TRUE(accepted.gate.accepted());
        } else {
            // The forward capsules' VJP under the tape has no kernel behind it (the manifests are
            // stubs), so it claims no test evidence: missing evidence, until a library exists.
            ASSERT_EQ(accepted.gate.failures.size(), 1u);
            EXPECT_EQ(accepted.gate.failures[0].kind, GateFailureKind::missing_evidence);
            EXPECT_EQ(accepted.gate.failures[0].obligations.at(0).obligation, Obligation::vjp);
        }
        auto strict = p;
        strict.acceptance_policy = AcceptancePolicy::strict();
        auto rejected = strict.gate_ops(host(), ops);
        EXPECT_FALSE(rejected.gate.accepted());
        bool trusted_boundary = false;
        for (const auto& f : rejected.gate.failures)
            trusted_boundary |= f.kind == GateFailureKind::trusted_boundary;
        EXPECT_TRUE(trusted_boundary);
    }
}

// plugins/libtorch/libtorch.capsule.json (generated from the LibTorch plugin's kernel table): its
// capsules have backward kernels (VJP mode backend-vjp), so libtorch_forward_cpu (the tape) plans
// every op on them and its gate accepts them as trusted-external; libtorch_autograd_cpu wants
// external-autograd capsules, which plugin libtorch_autograd (same source, its own manifest)
// provides, and the forward profile refuses those for their VJP mode.
TEST(Profiles, LibTorchCpuProfilesPlanTheLibTorchPlugin) {
    const auto& forward = find_builtin_profile("libtorch_forward_cpu");
    for (BackendOp op : {BackendOp::matmul, BackendOp::conv2d, BackendOp::scaled_dot_product_attention,
                         BackendOp::cross_entropy, BackendOp::sgd, BackendOp::adam})
        EXPECT_EQ(planned_capsule(forward, op), "libtorch." + std::string(to_string(op)));
    const BackendOp ops[] = {BackendOp::conv2d, BackendOp::relu, BackendOp::linear, BackendOp::cross_entropy};
    auto accepted = forward.gate_ops(host(), ops);
    EXPECT_TRUE(accepted.gate.trusted_external);
    EXPECT_TRUE(accepted.gate.accepted());
    auto strict = forward;
    strict.acceptance_policy = AcceptancePolicy::strict();
    auto rejected = strict.gate_ops(host(), ops);
    ASSERT_FALSE(rejected.gate.accepted());
    bool trusted_boundary = false;
    for (const auto& f : rejected.gate.failures) trusted_boundary |= f.kind == GateFailureKind::trusted_boundary;
    EXPECT_TRUE(trusted_boundary);

    const auto& autograd = find_builtin_profile("libtorch_autograd_cpu");
    for (BackendOp op : {BackendOp::matmul, BackendOp::conv2d, BackendOp::cross_entropy})
        EXPECT_EQ(planned_capsule(autograd, op), "libtorch_autograd." + std::string(to_string(op)));
    const auto gated = autograd.gate_ops(host(), ops);
    EXPECT_TRUE(gated.gate.accepted());
    EXPECT_TRUE(gated.gate.trusted_external);
    // strict rejects the external-autograd capsules at the same trusted boundary.
    auto strict_autograd = autograd;
    strict_autograd.acceptance_policy = AcceptancePolicy::strict();
    const auto refused = strict_autograd.gate_ops(host(), ops);
    ASSERT_FALSE(refused.gate.accepted());
    bool autograd_boundary = false;
    for (const auto& f : refused.gate.failures) autograd_boundary |= f.kind == GateFailureKind::trusted_boundary;
    EXPECT_TRUE(autograd_boundary);
}

TEST(Profiles, LibTorchForwardRefusesTheAutogradCapsuleForItsVjpMode) {
    auto msg = planning_error(find_builtin_profile("checked_cpu"), BackendOp::fft_fno);
    EXPECT_EQ(msg, "<no error>");  // reference.fft_fno plans under checked_cpu
    auto p = find_builtin_profile("libtorch_forward_cuda");
    p.registry_mode = "with-libtorch";
    auto only_autograd = p;
    only_autograd.config.vjp_mode = VJPMode::backend_vjp;
    auto err = planning_error(only_autograd, BackendOp::scaled_dot_product_attention);
    EXPECT_NE(err.find("libtorch.sdpa_forward (provider libtorch, device cuda): VJP mode "
                       "torchlean-tape is not compatible with config VJP mode backend-vjp"),
              std::string::npos)
        << err;
}

TEST(Profiles, OnednnCpuAndOsTargets) {
    const auto& dnn = find_builtin_profile("onednn_cpu");
    EXPECT_TRUE(dnn.availability().providers.count(Provider::onednn));
    EXPECT_EQ(dnn.target.os, OperatingSystem::linux_os);
    EXPECT_EQ(dnn.acceptance_policy, AcceptancePolicy::checked_runtime());
    EXPECT_EQ(dnn.config.backend, BackendPreference::prefer(Provider::onednn));
    EXPECT_EQ(dnn.config.vjp_mode, VJPMode::torchlean_tape);  // as checked_cpu: onednn capsules have backward kernels
    EXPECT_EQ(planned_capsule(dnn, BackendOp::matmul), "onednn.matmul");
    EXPECT_EQ(planned_capsule(dnn, BackendOp::conv2d), "onednn.conv2d");
    EXPECT_EQ(planned_capsule(dnn, BackendOp::concat), "onednn.concat");
    EXPECT_EQ(planned_capsule(dnn, BackendOp::reduce_mean), "onednn.reduce_mean");
    // Ops oneDNN lacks stay on reference capsules in the same plan.
    EXPECT_EQ(planned_capsule(dnn, BackendOp::reduce_sum), "reference.reduce_sum");
    // checked_cpu's portable target has no onednn provider: nothing changes there.
    EXPECT_EQ(planned_capsule(find_builtin_profile("checked_cpu"), BackendOp::conv2d), "reference.conv2d");
    auto mac = BackendProfile::checked_cpu_target(OperatingSystem::macos, Architecture::aarch64);
    EXPECT_EQ(mac.name, "checked_macos_aarch64_cpu");
    EXPECT_EQ(mac, find_builtin_profile("checked_macos_aarch64_cpu"));
    EXPECT_NO_THROW(find_builtin_profile("checked_windows_x86_64_cpu"));
    auto f = BackendProfile::future("future_x", Device::rocm, Target::linux_rocm());
    EXPECT_EQ(f.acceptance_policy, AcceptancePolicy::strict());
    EXPECT_EQ(f.config.trust_policy, TrustPolicy::checked);
    EXPECT_EQ(f.config.vjp_mode, VJPMode::torchlean_tape);
}

TEST(Profiles, UnknownNameListsEveryProfile) {
    auto msg = error_of([] { find_builtin_profile("checked_gpu"); });
    EXPECT_NE(msg.find("unknown profile 'checked_gpu'"), std::string::npos);
    EXPECT_NE(msg.find("future_custom_chip"), std::string::npos);
}

TEST(ProfileFiles, EveryBuiltinHasAnEqualJsonFile) {
    const auto dir = std::filesystem::path(CAPSULE_SOURCE_DIR) / "profiles";
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        files += entry.path().extension() == ".json";
    EXPECT_EQ(files, builtin_profiles().size());
    for (const auto& p : builtin_profiles()) {
        SCOPED_TRACE(p.name);
        EXPECT_EQ(load_profile_file(dir / (p.name + ".json")), p);
    }
}

TEST(ProfileFiles, BaseOverridesOnlyGivenFields) {
    auto p = profile_from_json(R"({"name": "checked_cpu_singleton", "base": "checked_cpu",
                                   "lowering_mode": "singleton"})",
                               "x.json");
    auto expected = BackendProfile::checked_cpu();
    expected.name = "checked_cpu_singleton";
    expected.lowering_mode = LoweringMode::singleton;
    EXPECT_EQ(p, expected);
    auto custom = profile_from_json(R"({"name": "c", "base": "checked_cuda",
        "config": {"backend": "prefer:cublas"},
        "acceptance_policy": {"require_evidence": true, "allow_runtime_guards": true,
          "allow_test_evidence": false, "allow_trusted_boundaries": false,
          "allow_fuzz_evidence": false}})",
                                    "y.json");
    EXPECT_EQ(custom.config.backend, BackendPreference::prefer(Provider::cublas));
    EXPECT_EQ(custom.config.device, Device::cuda);
    EXPECT_FALSE(custom.acceptance_policy.allow_test_evidence);
    EXPECT_TRUE(custom.acceptance_policy.allow_runtime_guards);
}

TEST(ProfileFiles, FpmathDefaultsToStrictAndReadsBf16) {
    EXPECT_EQ(BackendProfile::onednn_cpu().config.fpmath, FpMath::strict);
    const auto p = profile_from_json(R"({"name": "fast", "base": "onednn_cpu", "config": {"fpmath": "bf16"}})",
                                     "fast.json");
    EXPECT_EQ(p.config.fpmath, FpMath::bf16);
    EXPECT_EQ(p.config.backend, BackendPreference::prefer(Provider::onednn));
    EXPECT_EQ(profile_to_json(p)["config"]["fpmath"], "bf16");
    auto same = BackendProfile::onednn_cpu_bf16();
    same.name = "fast";
    EXPECT_EQ(p, same);
    const auto msg = error_of([] {
        profile_from_json(R"({"name": "x", "base": "checked_cpu", "config": {"fpmath": "tf32"}})", "p.json");
    });
    EXPECT_NE(msg.find("strict, bf16"), std::string::npos) << msg;
}

TEST(ProfileFiles, MalformedProfilesNameFilePathAndReason) {
    struct Case { const char* json; const char* expected; };
    const Case cases[] = {
        {R"({"name": "x", "base": "checked_cpu", "colour": 1})",
         "p.json: $: unknown key 'colour'"},
        {R"({"name": "x", "base": "checked_cpu", "config": {"backend": "only:torch"}})",
         "p.json: $.config.backend: unknown backend preference 'only:torch'"},
        {R"({"name": "x", "base": "checked_cpu", "config": {"device": "gpu"}})",
         "p.json: $.config.device: unknown device 'gpu'"},
        {R"({"name": "x", "base": "checked_cpu", "config": {"fpmath": "fp16"}})",
         "p.json: $.config.fpmath: unknown fpmath mode 'fp16'"},
        {R"({"name": "x", "base": "checked_cpu", "config": {"fpmath": true}})",
         "p.json: $.config.fpmath: expected a string, got boolean"},
        {R"({"name": "x", "base": "no_such"})", "p.json: $.base: unknown profile 'no_such'"},
        {R"({"name": "x", "config": {}})", "p.json: $: missing required key 'target'"},
        {R"({"name": "x", "base": "checked_cpu", "acceptance_policy": "lenient"})",
         "p.json: $.acceptance_policy: unknown acceptance policy 'lenient'"},
        {R"({"name": "x", "base": "checked_cpu", "acceptance_policy": {"require_evidence": true}})",
         "p.json: $.acceptance_policy: missing required key 'allow_runtime_guards'"},
        {R"({"name": "x", "base": "checked_cpu", "target": {"features": ["onednn", "onednn"]}})",
         "p.json: $.target.features[1]: duplicate feature onednn"},
        {R"({"name": "x", "base": "checked_cpu", "registry_mode": "With Torch"})",
         "p.json: $.registry_mode: invalid registry mode 'With Torch'"},
        {R"({"name": 3, "base": "checked_cpu"})", "p.json: $.name: expected a string, got number"},
        {R"({"name": "x", "base": "checked_cpu",)", "p.json: malformed JSON"},
        {R"([1, 2])", "p.json: $: expected an object, got array"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.json);
        auto msg = error_of([&] { profile_from_json(c.json, "p.json"); });
        EXPECT_EQ(msg.rfind(c.expected, 0), 0u) << msg;
    }
    EXPECT_TRUE(raises(ErrorCode::input, [&] { load_profile_file("/nonexistent/profile.json"); }));
}

// A number beyond double's range is an Error(input) naming the file and path, not a raw nlohmann
// exception (found by fuzz_profile).
TEST(ProfileFiles, NumberOutOfRangeIsMalformedJson) {
    auto msg = error_of([] { profile_from_json(R"({"name": "x", "base": "checked_cpu", "z": 1e400})", "p.json"); });
    EXPECT_EQ(msg, "p.json: $.z: number overflow: '1e400' is outside the range of a double") << msg;
    EXPECT_TRUE(raises(ErrorCode::input, [&] { profile_from_json("1e400", "p.json"); }));
}
