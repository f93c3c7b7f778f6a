// The planner (DESIGN.md section 2): filter the registry by availability, order it by the backend
// preference, and pick the first admissible capsule for each op. No capsule is an error that
// lists every candidate of that op and why it was refused. Planning never falls back.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "capsule/ir.hpp"
#include "capsule/capsule_registry.hpp"
#include "capsule/target.hpp"

namespace capsule {

/// One planned node: which capsule runs the node with this id.
struct PlannedNode {
    std::int64_t node_id = 0;
    BackendOp op = BackendOp::add;
    CapsuleRef capsule;
};

/// Planned nodes in execution order. For a bare op sequence, node ids are the positions 0..n-1.
struct ExecutionPlan {
    std::vector<PlannedNode> nodes;
};
/// A plan of a graph's runtime nodes (structural nodes input/const/detach are skipped).
using GraphExecutionPlan = ExecutionPlan;

/// Why each capsule of `op` in the registry was refused under `availability` and `config`, one
/// line per capsule: `<name> (provider P, device D): reason; reason`. `dtypes` (a capsule_dtype bit
/// mask, 0 for none) are the node's: a capsule that does not accept one of them is refused with
/// `does not accept dtype int32 (it accepts float32, float64, int64, bool)`.
std::vector<std::string> refusal_lines(const CapsuleRegistry& registry,
                                       const Availability& availability,
                                       const ExecutionConfig& config, BackendOp op,
                                       std::uint64_t dtypes = 0);

/// The plugins refused at discovery that could have served `op` under `config`: those that
/// declare the op, serve the config's device, or supply its preferred provider (and those whose
/// manifest could not be read), one line each: `plugin <name> failed to load (<why relevant>):
/// <reason>`.
std::vector<std::string> failed_plugin_lines(const CapsuleRegistry& registry,
                                             const ExecutionConfig& config, BackendOp op);

/// Plans each op in order, with no dtype requirement. Raises Error(planning)
/// `no admissible backend capsule for op <op> on device <device>` followed by one line per refused
/// capsule of that op, then one line per relevant plugin that failed to load. Cost: one registry scan per distinct op, then a lookup per node.
ExecutionPlan plan_ops(const CapsuleRegistry& registry, const Availability& availability,
                       const ExecutionConfig& config, std::span<const BackendOp> ops);

/// Checks the graph (check_graph: ids, parent order, arity, shapes; raises Error(input)), then plans
/// every runtime node, keeping its id: the first admissible capsule of its op (in preference order)
/// that accepts the dtypes of the node's parents and output (KernelCapsule::dtypes). A planning
/// failure names the node:
/// `no admissible backend capsule for op <op> on device <device> (node <id>)`, then
/// ` with dtypes <dtypes>` when the node has a dtype beyond float32, float64, int64 and bool, plus
/// refusals.
GraphExecutionPlan plan_graph(const CapsuleRegistry& registry, const Availability& availability,
                              const ExecutionConfig& config, const Graph& graph);

}  // namespace capsule
