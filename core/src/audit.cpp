#include "capsule/audit.hpp"

#include <unordered_set>

namespace capsule {

std::vector<ObligationReport> audit(const GraphLoweringPlan& plan) {
    std::vector<ObligationReport> reports;
    reports.reserve(plan.groups.size() * 4);
    const auto obligations = all_values<Obligation>();
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
        const auto& k = plan.groups[g].capsule;
        for (auto o : obligations) {
            const auto evidence = k->contract(o).evidence;
            reports.push_back({g, k, o, evidence, disposition_of(evidence)});
        }
    }
    return reports;
}

void recheck(const GraphLoweringPlan& plan) {
    // A plan uses few distinct capsules: each one's alignment is checked once.
    std::unordered_set<const KernelCapsule*> aligned_capsules;
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
        const auto& group = plan.groups[g];
        auto where = [g] { return "group " + std::to_string(g); };  // built only on failure
        if (group.node_ids.empty() || !group.capsule)
            throw Error(ErrorCode::planning, where() + " is empty or has no capsule");
        const auto& k = *group.capsule;
        if (k.op != group.op)
            throw Error(ErrorCode::planning, where() + ": capsule " + k.name + " implements " +
                                std::string(to_string(k.op)) + ", group op is " +
                                std::string(to_string(group.op)));
        if (aligned_capsules.count(&k)) continue;
        for (auto o : all_values<Obligation>())
            if (auto why = misalignment(k, o))
                throw Error(ErrorCode::planning, where() + ": capsule " + k.name + " is misaligned: " + *why);
        aligned_capsules.insert(&k);
    }
}

bool has_trusted_external(const GraphLoweringPlan& plan) {
    for (const auto& g : plan.groups)
        if (g.capsule->trust == TrustLevel::trusted_external) return true;
    return false;
}

}  // namespace capsule
