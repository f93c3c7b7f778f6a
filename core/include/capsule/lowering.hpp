// Lowering (DESIGN.md section 2): group planned nodes into backend calls.
//
// `singleton` makes one group per planned node. `coalesced` merges a node into the previous group
// when it has the same op and the same capsule identity (name, op, provider, device); such a group
// is a `same-capsule-run`. Coalescing is a scheduling/audit grouping, not a claim of fusion.
#pragma once

#include <vector>

#include "capsule/planner.hpp"

namespace capsule {

enum class LoweringMode : std::uint8_t { singleton, coalesced };
enum class GroupingKind : std::uint8_t { singleton, same_capsule_run };
template <> struct Spellings<LoweringMode> {
    static constexpr std::string_view kind = "lowering mode";
    static const std::array<std::pair<LoweringMode, std::string_view>, 2> values;
};
template <> struct Spellings<GroupingKind> {
    static constexpr std::string_view kind = "grouping kind";
    static const std::array<std::pair<GroupingKind, std::string_view>, 2> values;
};

/// One backend call: the planned nodes it covers (ids in plan order) and their capsule.
struct LoweredGroup {
    std::vector<std::int64_t> node_ids;
    BackendOp op = BackendOp::add;
    CapsuleRef capsule;
    GroupingKind grouping = GroupingKind::singleton;
};

struct GraphLoweringPlan {
    LoweringMode mode = LoweringMode::coalesced;
    std::vector<LoweredGroup> groups;
};

/// Groups `plan` according to `mode`. Pure; keeps every node id exactly once, in plan order.
GraphLoweringPlan lower(const ExecutionPlan& plan, LoweringMode mode);

}  // namespace capsule
