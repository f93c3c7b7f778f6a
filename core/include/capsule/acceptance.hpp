// Acceptance policies and the gate (DESIGN.md section 2).
//
// The gate audits a lowered plan and collects failures in a fixed order: missing-evidence,
// runtime-guard-evidence, test-evidence, trusted-boundary, fuzz-evidence, unverified-evidence, each
// with the offending obligation reports. proved and checked dispositions are always admitted. Only
// the gate can make an AcceptedPlan, and the executor accepts nothing else.
//
// The `verified` policy (DESIGN.md section 10, "Evidence is earned") counts test-suite evidence
// only when `capsule verify` left a passing evidence record for the exact library that would run
// the capsule; the gate asks an EvidenceLookup (the RegistrySource's) for each tested obligation.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capsule/audit.hpp"

namespace capsule {

struct AcceptancePolicy {
    bool require_evidence = true;
    bool allow_runtime_guards = false;
    bool allow_test_evidence = false;
    bool allow_trusted_boundaries = false;
    bool allow_fuzz_evidence = false;
    /// Test-suite evidence counts only with a passing `capsule verify` record for the capsule's
    /// library (by SHA-256); without one the obligation fails as unverified-evidence.
    bool require_verified_tests = false;

    static AcceptancePolicy strict() { return {true, false, false, false, false, false}; }
    static AcceptancePolicy checked_runtime() { return {true, true, true, false, true, false}; }
    static AcceptancePolicy allow_trusted_runtime() { return {true, true, true, true, true, false}; }
    /// checked-runtime, with test-suite evidence earned by `capsule verify` on this machine.
    static AcceptancePolicy verified() { return {true, true, true, false, true, true}; }

    /// The named policy's spelling (`strict`, `checked-runtime`, `allow-trusted-runtime`,
    /// `verified`), or nullopt for a custom combination.
    std::optional<std::string_view> name() const;
    bool operator==(const AcceptancePolicy&) const = default;
};
/// Reads a named policy; raises Error(input) listing the four names.
AcceptancePolicy parse_acceptance_policy(std::string_view name);

enum class GateFailureKind : std::uint8_t { missing_evidence, runtime_guard_evidence,
                                            test_evidence, trusted_boundary, fuzz_evidence,
                                            unverified_evidence };
template <> struct Spellings<GateFailureKind> {
    static constexpr std::string_view kind = "gate failure kind";
    static const std::array<std::pair<GateFailureKind, std::string_view>, 6> values;
};

struct GateFailure {
    GateFailureKind kind = GateFailureKind::missing_evidence;
    std::vector<ObligationReport> obligations;
    /// unverified-evidence: one line per capsule saying why its test evidence is not verified and
    /// which command would verify it; empty for the other kinds.
    std::vector<std::string> reasons;
};

/// For the `verified` policy: nullopt when a passing `capsule verify` record backs `capsule`'s
/// test-suite evidence for the library that would run it, else why not (e.g. `no evidence record
/// for libcapsule_reference.so sha256 ab12...; run: capsule verify --plugin reference`).
using EvidenceLookup = std::function<std::optional<std::string>(const KernelCapsule& capsule)>;

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
    friend AcceptedPlanResult gate(GraphLoweringPlan&&, const AcceptancePolicy&,
                                   const EvidenceLookup&);
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

/// Rechecks, audits and gates `plan` under `policy`. Under a policy with require_verified_tests, a
/// tested obligation is admitted only when `verified` returns nullopt for its capsule (no lookup:
/// never). Raises Error(planning) only when recheck finds a malformed plan.
AcceptedPlanResult gate(const GraphLoweringPlan& plan, const AcceptancePolicy& policy,
                        const EvidenceLookup& verified = {});
/// The same, taking the plan over instead of copying it.
AcceptedPlanResult gate(GraphLoweringPlan&& plan, const AcceptancePolicy& policy,
                        const EvidenceLookup& verified = {});

}  // namespace capsule
