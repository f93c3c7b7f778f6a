// Reports: a thin layer over plan data (DESIGN.md sections 2 and 7). Text for people, JSON for
// tools; both are pure functions of the gate result.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "capsule/profile.hpp"

namespace capsule {

/// One line per group: `  relu: reference.relu provider=reference trust=checked
/// vjp=torchlean-tape runtime=eager`. `detailed` adds one line per contract field
/// (`    shape: <claim>; <evidence>`).
std::string group_report(const GraphLoweringPlan& plan, bool detailed);

/// Full text report: profile line, groups, then `gate: accepted` or `gate: rejected` with each
/// failure kind and its obligations.
std::string gate_report(const BackendProfile& profile, const GateResult& result, bool detailed);

/// `capsule plan --json` object for a gated plan (status accepted or rejected).
nlohmann::ordered_json plan_json(const BackendProfile& profile, const GateResult& result);
/// `capsule plan --json` object for a planning failure (status planning_failed).
nlohmann::ordered_json planning_failed_json(const BackendProfile& profile, const std::string& error);

}  // namespace capsule
