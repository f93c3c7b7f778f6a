// Acceptance policies and the gate (DESIGN.md section 2).
//
// The gate audits a lowered plan and collects failures in a fixed order: missing-evidence,
// runtime-guard-evidence, test-evidence, trusted-boundary, fuzz-evidence, each with the offending
// obligation reports. proved and checked dispositions are always admitted. Only the gate can make
// an AcceptedPlan, and the executor accepts nothing else.
#pragma once

#include <optional>
#include <vector>

#include "capsule/audit.hpp"

namespace capsule {

struct AcceptancePolicy {
    bool require_evidence = true;
    bool allow_runtime_guards = false;
    bool allow_test_evidence = false;
    bool allow_trusted_boundaries = false;
    bool allow_fuzz_evidence = false;

    static AcceptancePolicy strict() { return {true, false, false, false, false}; }
    static AcceptancePolicy checked_runtime() { return {true, true, true, false, true}; }
    static AcceptancePolicy allow_trusted_runtime() { return {true, true, true, true, true}; }

    /// The named policy's spelling (`strict`, `checked-runtime`, `allow-trusted-runtime`), or
    /// nullopt for a custom combination.
    std::optional<std::string_view> name() const;
    bool operator==(const AcceptancePolicy&) const = default;
};
/// Reads a named policy; raises Error(input) listing the three names.
AcceptancePolicy parse_acceptance_policy(std::string_view name);

enum class GateFailureKind : std::uint8_t { missing_evidence, runtime_guard_evidence,
                                            test_evidence, trusted_boundary, fuzz_evidence };
template <> struct Spellings<GateFailureKind> {
    static constexpr std::string_view kind = "gate failure kind";
    static const std::array<std::pair<GateFailureKind, std::string_view>, 5> values;
};

struct GateFailure {
    GateFailureKind kind = GateFailureKind::missing_evidence;
    std::vector<ObligationReport> obligations;
};

struct GateResult {
    GraphLoweringPlan plan;
    std::vector<ObligationReport> reports;  // audit of every group
    std::vector<GateFailure> failures;      // in the fixed kind order; empty ⇒ accepted
    bool trusted_external = false;          // plan has a trusted-external capsule
    bool accepted() const { return failures.empty(); }
};

struct AcceptedPlanResult;

/// A lowered plan the gate accepted under a policy. Only `gate` constructs one.
class AcceptedPlan {
public:
    const GraphLoweringPlan& plan() const { return plan_; }
    const std::vector<ObligationReport>& reports() const { return reports_; }
    const AcceptancePolicy& policy() const { return policy_; }

private:
    friend AcceptedPlanResult gate(GraphLoweringPlan&&, const AcceptancePolicy&);
    AcceptedPlan(GraphLoweringPlan plan, std::vector<ObligationReport> reports,
                 AcceptancePolicy policy)
        : plan_(std::move(plan)), reports_(std::move(reports)), policy_(policy) {}
    GraphLoweringPlan plan_;
    std::vector<ObligationReport> reports_;
    AcceptancePolicy policy_;
};

/// The gate's verdict, plus the accepted plan when there were no failures.
struct AcceptedPlanResult {
    GateResult gate;
    std::optional<AcceptedPlan> accepted;
};

/// The disposition's failure kind under `policy`, or nullopt when the policy admits it.
std::optional<GateFailureKind> gate_failure_kind(const AcceptancePolicy& policy, Disposition d);

/// Rechecks, audits and gates `plan` under `policy`. Raises Error(planning) only when recheck finds
/// a malformed plan.
AcceptedPlanResult gate(const GraphLoweringPlan& plan, const AcceptancePolicy& policy);
/// The same, taking the plan over instead of copying it.
AcceptedPlanResult gate(GraphLoweringPlan&& plan, const AcceptancePolicy& policy);

}  // namespace capsule
