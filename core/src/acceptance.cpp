#include "capsule/acceptance.hpp"

#include <map>

namespace capsule {

const std::array<std::pair<GateFailureKind, std::string_view>, 6>
    Spellings<GateFailureKind>::values{{
        {GateFailureKind::missing_evidence, "missing-evidence"},
        {GateFailureKind::runtime_guard_evidence, "runtime-guard-evidence"},
        {GateFailureKind::test_evidence, "test-evidence"},
        {GateFailureKind::trusted_boundary, "trusted-boundary"},
        {GateFailureKind::fuzz_evidence, "fuzz-evidence"},
        {GateFailureKind::unverified_evidence, "unverified-evidence"},
    }};

namespace {
constexpr std::array<std::pair<std::string_view, AcceptancePolicy (*)()>, 4> kNamedPolicies{{
    {"strict", &AcceptancePolicy::strict},
    {"checked-runtime", &AcceptancePolicy::checked_runtime},
    {"allow-trusted-runtime", &AcceptancePolicy::allow_trusted_runtime},
    {"verified", &AcceptancePolicy::verified},
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
                          "'; valid: strict, checked-runtime, allow-trusted-runtime, verified");
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

AcceptedPlanResult gate(const GraphLoweringPlan& plan, const AcceptancePolicy& policy,
                        const EvidenceLookup& verified) {
    return gate(GraphLoweringPlan(plan), policy, verified);
}

AcceptedPlanResult gate(GraphLoweringPlan&& plan, const AcceptancePolicy& policy,
                        const EvidenceLookup& verified) {
    recheck(plan);
    GateResult result;
    result.reports = audit(plan);
    result.trusted_external = has_trusted_external(plan);
    result.plan = std::move(plan);

    std::array<std::vector<ObligationReport>, Spellings<GateFailureKind>::values.size()> by_kind;
    std::vector<std::string> unverified_reasons;
    // One lookup per capsule: a lookup may hash the capsule's library.
    std::map<const KernelCapsule*, std::optional<std::string>> lookups;
    auto unverified = [&](const KernelCapsule& capsule) -> const std::optional<std::string>& {
        auto [it, fresh] = lookups.try_emplace(&capsule);
        if (fresh) {
            it->second = verified ? verified(capsule)
                                  : std::optional<std::string>("no evidence records were consulted");
            if (it->second) unverified_reasons.push_back(capsule.name + ": " + *it->second);
        }
        return it->second;
    };
    for (const auto& r : result.reports) {
        auto kind = gate_failure_kind(policy, r.disposition);
        if (!kind && policy.require_verified_tests && r.disposition == Disposition::tested &&
            unverified(*r.capsule))
            kind = GateFailureKind::unverified_evidence;
        if (kind) by_kind[static_cast<std::size_t>(*kind)].push_back(r);
    }
    for (auto kind : all_values<GateFailureKind>()) {
        auto& offending = by_kind[static_cast<std::size_t>(kind)];
        if (offending.empty()) continue;
        result.failures.push_back({kind, std::move(offending), {}});
        if (kind == GateFailureKind::unverified_evidence)
            result.failures.back().reasons = std::move(unverified_reasons);
    }

    AcceptedPlanResult out{std::move(result), std::nullopt};
    if (out.gate.accepted())
        out.accepted = AcceptedPlan(out.gate.plan, out.gate.reports, policy);
    return out;
}

}  // namespace capsule
