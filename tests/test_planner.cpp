// Admissibility, planner ordering, lowering and the gate (DESIGN.md section 2), pinned rule by
// rule on hand-built registries.
#include <gtest/gtest.h>

#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;

namespace {
const ExecutionConfig kTape{};  // cpu, auto, checked, torchlean-tape

bool refused_for(const ExecutionConfig& c, const KernelCapsule& k, const std::string& needle) {
    for (const auto& r : admissibility_refusals(c, k))
        if (r.find(needle) != std::string::npos) return true;
    return false;
}
}  // namespace

TEST(Admissibility, BaselineCapsuleIsAdmissible) {
    EXPECT_TRUE(admissible(kTape, make_capsule("a", BackendOp::relu)));
}

TEST(Admissibility, ForwardUnsupportedAlone) {
    auto k = make_capsule("a", BackendOp::relu);
    k.supports_forward = false;
    auto reasons = admissibility_refusals(kTape, k);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_EQ(reasons[0], "forward unsupported");
}

TEST(Admissibility, MisalignedClaimAlone) {
    auto wrong_op = make_capsule("a", BackendOp::relu);
    wrong_op.value.claim.op = BackendOp::gelu;
    EXPECT_FALSE(aligned(wrong_op));
    auto reasons = admissibility_refusals(kTape, wrong_op);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_NE(reasons[0].find("misaligned contracts: value claim"), std::string::npos) << reasons[0];

    auto wrong_kind = make_capsule("b", BackendOp::relu);
    wrong_kind.shape.claim.kind = ClaimKind::value_refinement;
    EXPECT_FALSE(aligned(wrong_kind));
    EXPECT_TRUE(refused_for(kTape, wrong_kind, "is not a shape-safety claim"));

    auto wrong_vjp = make_capsule("c", BackendOp::relu);
    wrong_vjp.vjp.claim.vjp_mode = VJPMode::backend_vjp;
    EXPECT_FALSE(aligned(wrong_vjp));
    EXPECT_TRUE(refused_for(kTape, wrong_vjp, "does not carry the capsule's VJP mode"));
}

TEST(Admissibility, TrustPolicyAlone) {
    auto k = make_capsule("a", BackendOp::relu, Provider::reference, Device::cpu,
                          TrustLevel::fuzzed);
    auto reasons = admissibility_refusals(kTape, k);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_EQ(reasons[0], "trust policy checked refuses trust level fuzzed");
    auto fuzzed_ok = kTape;
    fuzzed_ok.trust_policy = TrustPolicy::fuzzed_ok;
    EXPECT_TRUE(admissible(fuzzed_ok, k));
}

TEST(Admissibility, OnlyPreferenceAlone) {
    auto k = make_capsule("a", BackendOp::relu);
    auto only = kTape;
    only.backend = BackendPreference::only(Provider::onednn);
    auto reasons = admissibility_refusals(only, k);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_EQ(reasons[0], "only: preference only:onednn refuses provider reference");
    auto prefer = kTape;
    prefer.backend = BackendPreference::prefer(Provider::onednn);
    EXPECT_TRUE(admissible(prefer, k)) << "prefer: never refuses";
}

TEST(Admissibility, DeviceAlone) {
    auto k = make_capsule("a", BackendOp::relu, Provider::reference, Device::cuda);
    auto reasons = admissibility_refusals(kTape, k);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_EQ(reasons[0], "wrong device (capsule cuda, config cpu)");
}

TEST(Admissibility, EveryVjpCombination) {
    using V = VJPMode;
    // rows: config mode; columns: capsule mode none, torchlean-tape, backend-vjp, external.
    struct Row { V config; bool none, tape, backend, external; };
    const Row rows[] = {
        {V::none, true, true, true, true},  // inference admits capsules that also have a VJP
        {V::torchlean_tape, false, true, true, false},
        {V::backend_vjp, false, false, true, false},
        {V::external_autograd, false, false, false, true},
    };
    for (const auto& r : rows) {
        SCOPED_TRACE(std::string(to_string(r.config)));
        auto config = kTape;
        config.vjp_mode = r.config;
        const bool expected[] = {r.none, r.tape, r.backend, r.external};
        int i = 0;
        for (auto capsule_mode : all_values<V>()) {
            auto k = make_capsule("a", BackendOp::relu, Provider::reference, Device::cpu,
                                  TrustLevel::checked, capsule_mode);
            EXPECT_EQ(admissible(config, k), expected[i++]) << to_string(capsule_mode);
        }
    }
}

TEST(Admissibility, ForwardOnlyCapsuleRefusedUnderTapeButNotForRandomOps) {
    auto fwd_only = make_capsule("a", BackendOp::relu, Provider::reference, Device::cpu,
                                 TrustLevel::checked, VJPMode::none);
    EXPECT_TRUE(refused_for(kTape, fwd_only,
                            "VJP mode none is not compatible with config VJP mode torchlean-tape"));
    auto rand = make_capsule("r", BackendOp::rand_uniform, Provider::reference, Device::cpu,
                             TrustLevel::checked, VJPMode::none);
    auto mask = make_capsule("m", BackendOp::bernoulli_mask, Provider::reference, Device::cpu,
                             TrustLevel::checked, VJPMode::none);
    for (auto mode : all_values<VJPMode>()) {
        auto config = kTape;
        config.vjp_mode = mode;
        EXPECT_TRUE(admissible(config, rand)) << to_string(mode);
        EXPECT_TRUE(admissible(config, mask)) << to_string(mode);
    }
}

namespace {
CapsuleRegistry registry_of(std::vector<PluginManifest> manifests,
                            const std::string& mode = "default") {
    return PluginHost::from_manifests(std::move(manifests)).registry(mode);
}
const Availability kCpuOnly = Target::portable_cpu().availability();
}  // namespace

TEST(Planner, FirstAdmissibleInRegistryOrder) {
    auto reg = registry_of({make_manifest(
        "p", {make_capsule("first", BackendOp::relu), make_capsule("second", BackendOp::relu)})});
    const BackendOp ops[] = {BackendOp::relu};
    EXPECT_EQ(plan_ops(reg, kCpuOnly, kTape, ops).nodes[0].capsule->name, "first");
}

TEST(Planner, SkipsInadmissibleEarlierCandidates) {
    auto bad = make_capsule("bad", BackendOp::relu);
    bad.supports_forward = false;
    auto reg = registry_of({make_manifest("p", {bad, make_capsule("good", BackendOp::relu)})});
    const BackendOp ops[] = {BackendOp::relu};
    EXPECT_EQ(plan_ops(reg, kCpuOnly, kTape, ops).nodes[0].capsule->name, "good");
}

TEST(Planner, PluginPriorityOrdersTheRegistry) {
    auto low = make_manifest("low", {make_capsule("low.relu", BackendOp::relu)}, 10);
    auto high = make_manifest("high", {make_capsule("high.relu", BackendOp::relu)}, 90);
    auto reg = registry_of({low, high});
    ASSERT_EQ(reg.capsules.size(), 2u);
    EXPECT_EQ(reg.capsules[0]->name, "high.relu");
    EXPECT_EQ(reg.plugin_of[0], "high");
    // Equal priority: by plugin name, then declaration order.
    auto b = make_manifest("b", {make_capsule("b.x", BackendOp::relu), make_capsule("b.y", BackendOp::add)});
    auto a = make_manifest("a", {make_capsule("a.x", BackendOp::relu)});
    auto reg2 = registry_of({b, a});
    EXPECT_EQ(reg2.capsules[0]->name, "a.x");
    EXPECT_EQ(reg2.capsules[1]->name, "b.x");
    EXPECT_EQ(reg2.capsules[2]->name, "b.y");
}

TEST(Planner, PreferencePutsProviderFirstAndKeepsOrderOtherwise) {
    auto reg = registry_of({make_manifest(
        "p", {make_capsule("ref1", BackendOp::relu), make_capsule("dnn1", BackendOp::relu, Provider::onednn),
              make_capsule("dnn2", BackendOp::relu, Provider::onednn)})});
    Availability avail = kCpuOnly;
    avail.providers.insert(Provider::onednn);
    const BackendOp ops[] = {BackendOp::relu};
    EXPECT_EQ(plan_ops(reg, avail, kTape, ops).nodes[0].capsule->name, "ref1");
    auto prefer = kTape;
    prefer.backend = BackendPreference::prefer(Provider::onednn);
    EXPECT_EQ(plan_ops(reg, avail, prefer, ops).nodes[0].capsule->name, "dnn1");
    // Preferring a provider with no capsule for the op falls through to registry order.
    prefer.backend = BackendPreference::prefer(Provider::cublas);
    EXPECT_EQ(plan_ops(reg, avail, prefer, ops).nodes[0].capsule->name, "ref1");
}

TEST(Planner, AvailabilityFiltersProvidersNotOnTheTarget) {
    auto reg = registry_of({make_manifest(
        "p", {make_capsule("dnn", BackendOp::relu, Provider::onednn), make_capsule("ref", BackendOp::relu)})});
    const BackendOp ops[] = {BackendOp::relu};
    // onednn is first in the registry and admissible, but the portable target lacks the feature.
    EXPECT_EQ(plan_ops(reg, kCpuOnly, kTape, ops).nodes[0].capsule->name, "ref");
    auto with_dnn = Target::linux_cpu();
    with_dnn.features.push_back(BuildFeature::onednn);
    EXPECT_EQ(plan_ops(reg, with_dnn.availability(), kTape, ops).nodes[0].capsule->name, "dnn");
}

TEST(Planner, FailureListsEveryRefusedCandidateWithReasons) {
    auto fwd = make_capsule("nofwd", BackendOp::matmul);
    fwd.supports_forward = false;
    auto reg = registry_of({make_manifest("p", {fwd, make_capsule("dnn", BackendOp::matmul, Provider::onednn),
                                                make_capsule("other", BackendOp::relu)})});
    const BackendOp ops[] = {BackendOp::relu, BackendOp::matmul};
    auto msg = error_of([&] { plan_ops(reg, kCpuOnly, kTape, ops); });
    EXPECT_EQ(msg,
              "no admissible backend capsule for op matmul on device cpu\n"
              "  nofwd (provider reference, device cpu): forward unsupported\n"
              "  dnn (provider onednn, device cpu): provider onednn not available on target");
}

TEST(Planner, FailureWithNoCandidateSaysSo) {
    auto reg = registry_of({make_manifest("p", {make_capsule("relu", BackendOp::relu)})});
    const BackendOp ops[] = {BackendOp::fft_fno};
    auto msg = error_of([&] { plan_ops(reg, kCpuOnly, kTape, ops); });
    EXPECT_EQ(msg, "no admissible backend capsule for op fft_fno on device cpu\n"
                   "  no capsule for op fft_fno in registry mode 'default'");
}

namespace {
/// x (input, `dtype`) -> add(x, x): one runtime node whose parents and output have `dtype`.
Graph add_graph(const std::string& dtype) {
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [{"id": 0, "op": "input", "name": "x", "shape": [2], "dtype": ")" + dtype +
                       R"("}, {"id": 1, "op": "add", "parents": [0, 0], "shape": [2], "dtype": ")" + dtype +
                       R"("}], "outputs": [1]})");
}
}  // namespace

TEST(Planner, CapsulesServeOnlyTheDtypesTheyDeclare) {
    auto narrow = make_capsule("abi10.add", BackendOp::add);  // float32, float64, int64, bool
    auto wide = make_capsule("wide.add", BackendOp::add);
    wide.dtypes = kDTypes1_0 | (1u << static_cast<unsigned>(DType::int32));
    auto reg = registry_of({make_manifest("p", {narrow, wide})});
    // The first admissible capsule that accepts the node's dtypes, per node.
    EXPECT_EQ(plan_graph(reg, kCpuOnly, kTape, add_graph("float32")).nodes[0].capsule->name, "abi10.add");
    EXPECT_EQ(plan_graph(reg, kCpuOnly, kTape, add_graph("int32")).nodes[0].capsule->name, "wide.add");
    auto msg = error_of([&] { plan_graph(reg, kCpuOnly, kTape, add_graph("uint8")); });
    EXPECT_EQ(msg,
              "no admissible backend capsule for op add on device cpu (node 1) with dtypes uint8\n"
              "  abi10.add (provider reference, device cpu): does not accept dtype uint8 (it accepts float32, "
              "float64, int64, bool)\n"
              "  wide.add (provider reference, device cpu): does not accept dtype uint8 (it accepts float32, "
              "float64, int64, bool, int32)");
}

TEST(Planner, RegistryModesSelectPlugins) {
    auto base = make_manifest("base", {make_capsule("base.relu", BackendOp::relu)}, 0,
                              {"default", "with-libtorch"});
    auto extra = make_manifest("extra", {make_capsule("extra.add", BackendOp::add)}, 0,
                               {"with-libtorch"});
    auto host = PluginHost::from_manifests({base, extra});
    EXPECT_EQ(host.registry("default").capsules.size(), 1u);
    EXPECT_EQ(host.registry("with-libtorch").capsules.size(), 2u);
    EXPECT_EQ(host.registry("nobody").capsules.size(), 0u);
}

namespace {
ExecutionPlan sample_plan() {
    auto reg = registry_of({make_manifest(
        "p", {make_capsule("r.relu", BackendOp::relu), make_capsule("r.add", BackendOp::add)})});
    const BackendOp ops[] = {BackendOp::relu, BackendOp::relu, BackendOp::add, BackendOp::relu,
                             BackendOp::relu, BackendOp::relu};
    return plan_ops(reg, kCpuOnly, kTape, ops);
}
}  // namespace

TEST(Lowering, SingletonMakesOneGroupPerNode) {
    auto lowered = lower(sample_plan(), LoweringMode::singleton);
    ASSERT_EQ(lowered.groups.size(), 6u);
    for (std::size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(lowered.groups[i].node_ids, std::vector<std::int64_t>{std::int64_t(i)});
        EXPECT_EQ(lowered.groups[i].grouping, GroupingKind::singleton);
    }
}

TEST(Lowering, CoalescedMergesRunsOfTheSameCapsuleKeepingIds) {
    auto lowered = lower(sample_plan(), LoweringMode::coalesced);
    ASSERT_EQ(lowered.groups.size(), 3u);
    EXPECT_EQ(lowered.groups[0].node_ids, (std::vector<std::int64_t>{0, 1}));
    EXPECT_EQ(lowered.groups[0].grouping, GroupingKind::same_capsule_run);
    EXPECT_EQ(lowered.groups[1].node_ids, (std::vector<std::int64_t>{2}));
    EXPECT_EQ(lowered.groups[1].grouping, GroupingKind::singleton);
    EXPECT_EQ(lowered.groups[2].node_ids, (std::vector<std::int64_t>{3, 4, 5}));
    EXPECT_EQ(lowered.groups[2].op, BackendOp::relu);
}

TEST(Lowering, DifferentCapsulesForTheSameOpAreNotMerged) {
    auto a = std::make_shared<const KernelCapsule>(make_capsule("a.relu", BackendOp::relu));
    auto b = std::make_shared<const KernelCapsule>(make_capsule("b.relu", BackendOp::relu));
    ExecutionPlan plan{{{0, BackendOp::relu, a}, {1, BackendOp::relu, b}, {2, BackendOp::relu, b}}};
    auto lowered = lower(plan, LoweringMode::coalesced);
    ASSERT_EQ(lowered.groups.size(), 2u);
    EXPECT_EQ(lowered.groups[1].node_ids, (std::vector<std::int64_t>{1, 2}));
}

namespace {
GraphLoweringPlan plan_with_evidence(std::vector<Evidence> evidence_per_capsule) {
    ExecutionPlan plan;
    std::int64_t id = 0;
    for (auto e : evidence_per_capsule) {
        auto k = make_capsule("k" + std::to_string(id), BackendOp::relu, Provider::reference,
                              Device::cpu, TrustLevel::checked, VJPMode::torchlean_tape, e);
        plan.nodes.push_back({id++, BackendOp::relu, std::make_shared<const KernelCapsule>(k)});
    }
    return lower(plan, LoweringMode::singleton);
}

std::vector<GateFailureKind> kinds(const GateResult& r) {
    std::vector<GateFailureKind> out;
    for (const auto& f : r.failures) out.push_back(f.kind);
    return out;
}
}  // namespace

TEST(Gate, AuditYieldsFourObligationsPerGroup) {
    auto plan = plan_with_evidence({Evidence::theorem, Evidence::test_suite});
    auto reports = audit(plan);
    ASSERT_EQ(reports.size(), 8u);
    EXPECT_EQ(reports[0].obligation, Obligation::shape);
    EXPECT_EQ(reports[3].obligation, Obligation::vjp);
    EXPECT_EQ(reports[0].disposition, Disposition::proved);
    EXPECT_EQ(reports[4].group, 1u);
    EXPECT_EQ(reports[4].disposition, Disposition::tested);
    EXPECT_EQ(to_string(reports[1].claim()), "layout-compatibility(relu, canonical-tensor)");
}

TEST(Gate, StrictRejectsEveryNonProofKindInOrder) {
    auto plan = plan_with_evidence({Evidence::fuzz_oracle, Evidence::trusted_boundary,
                                    Evidence::test_suite, Evidence::runtime_guard,
                                    Evidence::not_provided, Evidence::theorem, Evidence::checker});
    auto result = gate(plan, AcceptancePolicy::strict());
    EXPECT_FALSE(result.accepted.has_value());
    EXPECT_EQ(kinds(result.gate),
              (std::vector<GateFailureKind>{GateFailureKind::missing_evidence,
                                            GateFailureKind::runtime_guard_evidence,
                                            GateFailureKind::test_evidence,
                                            GateFailureKind::trusted_boundary,
                                            GateFailureKind::fuzz_evidence}));
    for (const auto& f : result.gate.failures) EXPECT_EQ(f.obligations.size(), 4u);
    EXPECT_EQ(result.gate.failures[0].obligations[0].capsule->name, "k4");  // not-provided
    EXPECT_EQ(result.gate.failures[4].obligations[0].capsule->name, "k0");  // fuzz
}

TEST(Gate, EachNamedPolicyOnEachEvidence) {
    struct Row { Evidence e; bool strict, checked_runtime, trusted_runtime; };
    const Row rows[] = {
        {Evidence::theorem, true, true, true},          {Evidence::checker, true, true, true},
        {Evidence::runtime_guard, false, true, true},   {Evidence::test_suite, false, true, true},
        {Evidence::fuzz_oracle, false, true, true},     {Evidence::trusted_boundary, false, false, true},
        {Evidence::not_provided, false, false, false},
    };
    for (const auto& r : rows) {
        SCOPED_TRACE(std::string(to_string(r.e)));
        auto plan = plan_with_evidence({r.e});
        EXPECT_EQ(gate(plan, AcceptancePolicy::strict()).gate.accepted(), r.strict);
        EXPECT_EQ(gate(plan, AcceptancePolicy::checked_runtime()).gate.accepted(), r.checked_runtime);
        EXPECT_EQ(gate(plan, AcceptancePolicy::allow_trusted_runtime()).gate.accepted(),
                  r.trusted_runtime);
    }
}

// `verified`: checked-runtime, except that test-suite evidence counts only when the lookup (the
// evidence records of `capsule verify`) backs the capsule.
TEST(Gate, VerifiedPolicyAdmitsTestEvidenceOnlyWithAPassingRecord) {
    EXPECT_EQ(parse_acceptance_policy("verified"), AcceptancePolicy::verified());
    EXPECT_EQ(AcceptancePolicy::verified().name(), "verified");
    auto plan = plan_with_evidence({Evidence::test_suite, Evidence::runtime_guard, Evidence::test_suite});
    // k0 is verified, k2 is not; k1's runtime guard needs no record.
    int lookups = 0;
    EvidenceLookup lookup = [&](const KernelCapsule& k) -> std::optional<std::string> {
        ++lookups;
        if (k.name == "k0") return std::nullopt;
        return std::string("no evidence record for k2's library; run: capsule verify --plugin p");
    };
    auto result = gate(plan, AcceptancePolicy::verified(), lookup);
    EXPECT_FALSE(result.accepted.has_value());
    ASSERT_EQ(kinds(result.gate), (std::vector<GateFailureKind>{GateFailureKind::unverified_evidence}));
    const auto& f = result.gate.failures[0];
    ASSERT_EQ(f.obligations.size(), 4u);  // k2's shape, layout, value and vjp are all test-suite
    for (const auto& r : f.obligations) EXPECT_EQ(r.capsule->name, "k2");
    EXPECT_EQ(f.reasons, (std::vector<std::string>{
                             "k2: no evidence record for k2's library; run: capsule verify --plugin p"}));
    EXPECT_EQ(lookups, 2);  // once per capsule with test evidence, not once per obligation
    EXPECT_EQ(to_string(GateFailureKind::unverified_evidence), "unverified-evidence");

    // Without a lookup nothing is verified; the other named policies never consult it.
    EXPECT_FALSE(gate(plan_with_evidence({Evidence::test_suite}), AcceptancePolicy::verified()).gate.accepted());
    lookups = 0;
    EXPECT_TRUE(gate(plan, AcceptancePolicy::checked_runtime(), lookup).gate.accepted());
    EXPECT_EQ(lookups, 0);
    // Every capsule verified: accepted.
    EvidenceLookup all = [](const KernelCapsule&) -> std::optional<std::string> { return std::nullopt; };
    EXPECT_TRUE(gate(plan, AcceptancePolicy::verified(), all).gate.accepted());
}

TEST(Gate, NotRequiringEvidenceAdmitsMissing) {
    auto policy = AcceptancePolicy::allow_trusted_runtime();
    policy.require_evidence = false;
    EXPECT_TRUE(gate(plan_with_evidence({Evidence::not_provided}), policy).gate.accepted());
    EXPECT_EQ(policy.name(), std::nullopt);
    EXPECT_EQ(AcceptancePolicy::checked_runtime().name(), "checked-runtime");
}

TEST(Gate, AcceptedPlanCarriesThePlanAndTrustedExternalIsVisible) {
    auto plan = plan_with_evidence({Evidence::theorem});
    auto result = gate(plan, AcceptancePolicy::strict());
    ASSERT_TRUE(result.accepted.has_value());
    EXPECT_EQ(result.accepted->plan().groups.size(), 1u);
    EXPECT_EQ(result.accepted->reports().size(), 4u);
    EXPECT_FALSE(result.gate.trusted_external);

    ExecutionPlan ext;
    ext.nodes.push_back({0, BackendOp::relu,
                         std::make_shared<const KernelCapsule>(make_capsule(
                             "x", BackendOp::relu, Provider::libtorch, Device::cpu,
                             TrustLevel::trusted_external, VJPMode::torchlean_tape,
                             Evidence::trusted_boundary))});
    auto ext_result = gate(lower(ext, LoweringMode::coalesced), AcceptancePolicy::allow_trusted_runtime());
    EXPECT_TRUE(ext_result.gate.accepted());
    EXPECT_TRUE(ext_result.gate.trusted_external);
}

TEST(Gate, RecheckRefusesAHandMadeMisalignedPlan) {
    auto k = make_capsule("bad", BackendOp::relu);
    k.value.claim.op = BackendOp::add;
    ExecutionPlan plan{{{0, BackendOp::relu, std::make_shared<const KernelCapsule>(k)}}};
    EXPECT_TRUE(raises(ErrorCode::planning, [&] { gate(lower(plan, LoweringMode::singleton), AcceptancePolicy::allow_trusted_runtime()); }));
}
