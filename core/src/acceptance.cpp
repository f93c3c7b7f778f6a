#include "capsule/acceptance.hpp"

namespace capsule {

const std::array<std::pair<GateFailureKind, std::string_view>, 5>
    Spellings<GateFailureKind>::values{{
        {GateFailureKind::missing_evidence, "missing-evidence"},
        {GateFailureKind::runtime_guard_evidence, "runtime-guard-evidence"},
        {GateFailureKind::test_evidence, "test-evidence"},
        {GateFailureKind::trusted_boundary, "trusted-boundary"},
        {GateFailureKind::fuzz_evidence, "fuzz-evidence"},
    }};

namespace {
constexpr std::array<std::pair<std::string_view, AcceptancePolicy (*)()>, 3> kNamedPolicies{{
    {"strict", &AcceptancePolicy::strict},
    {"checked-runtime", &AcceptancePolicy::checked_runtime},
    {"allow-trusted-runtime", &AcceptancePolicy::allow_trusted_runtime},
}};
}  // namespace

std::optional<std::string_view> AcceptancePolicy::name() const {
    for (const auto& [name, make] : kNamedPolicies)
        if (make() == *this) return name;
    return std::nullopt;
}

AcceptancePolicy parse_acceptance_policy(std::string_view name) {
    for (const auto& [n, make] : kNamedPolicies)
        if (n == name) return make();
    throw Error(ErrorCode::input, "unknown acceptance policy '" + std::string(name) +
                          "'; valid: strict, checked-runtime, allow-trusted-runtime");
}

std::optional<GateFailureKind> gate_failure_kind(const AcceptancePolicy& policy, Disposition d) {
    switch (d) {
        case Disposition::proved:
        case Disposition::checked: return std::nullopt;
        case Disposition::missing:
            return policy.require_evidence ? std::optional(GateFailureKind::missing_evidence)
                                           : std::nullopt;
        case Disposition::guarded:
            return policy.allow_runtime_guards
                       ? std::nullopt
                       : std::optional(GateFailureKind::runtime_guard_evidence);
        case Disposition::tested:
            return policy.allow_test_evidence ? std::nullopt
                                              : std::optional(GateFailureKind::test_evidence);
        case Disposition::trusted:
            return policy.allow_trusted_boundaries
                       ? std::nullopt
                       : std::optional(GateFailureKind::trusted_boundary);
        case Disposition::fuzzed:
            return policy.allow_fuzz_evidence ? std::nullopt
                                              : std::optional(GateFailureKind::fuzz_evidence);
    }
    return GateFailureKind::missing_evidence;
}

AcceptedPlanResult gate(const GraphLoweringPlan& plan, const AcceptancePolicy& policy) {
    return gate(GraphLoweringPlan(plan), policy);
}

AcceptedPlanResult gate(GraphLoweringPlan&& plan, const AcceptancePolicy& policy) {
    recheck(plan);
    GateResult result;
    result.reports = audit(plan);
    result.trusted_external = has_trusted_external(plan);
    result.plan = std::move(plan);

    std::array<std::vector<ObligationReport>, Spellings<GateFailureKind>::values.size()> by_kind;
    for (const auto& r : result.reports)
        if (auto kind = gate_failure_kind(policy, r.disposition))
            by_kind[static_cast<std::size_t>(*kind)].push_back(r);
    for (auto kind : all_values<GateFailureKind>()) {
        auto& offending = by_kind[static_cast<std::size_t>(kind)];
        if (!offending.empty()) result.failures.push_back({kind, std::move(offending)});
    }

    AcceptedPlanResult out{std::move(result), std::nullopt};
    if (out.gate.accepted())
        out.accepted = AcceptedPlan(out.gate.plan, out.gate.reports, policy);
    return out;
}

}  // namespace capsule
