// Audit and recheck (DESIGN.md section 2): every lowered group yields four obligation reports
// (shape, layout, value, vjp), each with the claim, the evidence and its disposition.
#pragma once

#include <vector>

#include "capsule/lowering.hpp"

namespace capsule {

/// One obligation of one group. Refers to the capsule (shared, immutable) instead of copying its
/// claim and strings, so auditing a 100k-node plan allocates no strings.
struct ObligationReport {
    std::size_t group = 0;  // index into GraphLoweringPlan::groups
    CapsuleRef capsule;
    Obligation obligation = Obligation::shape;
    Evidence evidence = Evidence::not_provided;
    Disposition disposition = Disposition::missing;

    BackendOp op() const { return capsule->op; }
    const ContractDescriptor& descriptor() const { return capsule->contract(obligation); }
    const ContractClaim& claim() const { return descriptor().claim; }
};

/// Four reports per group, in group order and shape, layout, value, vjp order.
std::vector<ObligationReport> audit(const GraphLoweringPlan& plan);

/// Rechecks a lowered plan before gating: each group is non-empty, its capsule implements the
/// group's op and is aligned. Raises Error(planning) naming the group and capsule otherwise (a plan
/// assembled by hand or tampered with; the planner never produces one).
void recheck(const GraphLoweringPlan& plan);

/// True when any selected capsule is trusted-external.
bool has_trusted_external(const GraphLoweringPlan& plan);

}  // namespace capsule
