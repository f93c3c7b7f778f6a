#include "capsule/lowering.hpp"

namespace capsule {

const std::array<std::pair<LoweringMode, std::string_view>, 2> Spellings<LoweringMode>::values{{
    {LoweringMode::singleton, "singleton"}, {LoweringMode::coalesced, "coalesced"},
}};
const std::array<std::pair<GroupingKind, std::string_view>, 2> Spellings<GroupingKind>::values{{
    {GroupingKind::singleton, "singleton"}, {GroupingKind::same_capsule_run, "same-capsule-run"},
}};

GraphLoweringPlan lower(const ExecutionPlan& plan, LoweringMode mode) {
    GraphLoweringPlan lowered;
    lowered.mode = mode;
    lowered.groups.reserve(plan.nodes.size());
    for (const auto& node : plan.nodes) {
        if (mode == LoweringMode::coalesced && !lowered.groups.empty()) {
            auto& last = lowered.groups.back();
            if (last.op == node.op && last.capsule->same_identity(*node.capsule)) {
                last.node_ids.push_back(node.node_id);
                last.grouping = GroupingKind::same_capsule_run;
                continue;
            }
        }
        lowered.groups.push_back({{node.node_id}, node.op, node.capsule, GroupingKind::singleton});
    }
    return lowered;
}

}  // namespace capsule
