#include "capsule/planner.hpp"

#include <algorithm>
#include <array>
#include <optional>

namespace capsule {

using std::string;

namespace {

/// Availability filter, then preference order: for prefer:<p>, p's capsules first, order
/// otherwise kept.
std::vector<const CapsuleRef*> ordered_candidates(const CapsuleRegistry& registry,
                                                  const Availability& availability,
                                                  const ExecutionConfig& config, BackendOp op) {
    std::vector<const CapsuleRef*> preferred, rest;
    const bool prefer = config.backend.kind == BackendPreference::Kind::prefer;
    for (const auto& k : registry.capsules) {
        if (k->op != op || !availability.admits(k->device, k->provider)) continue;
        (prefer && k->provider == config.backend.provider ? preferred : rest).push_back(&k);
    }
    preferred.insert(preferred.end(), rest.begin(), rest.end());
    return preferred;
}

CapsuleRef pick(const CapsuleRegistry& registry, const Availability& availability,
                const ExecutionConfig& config, BackendOp op) {
    for (const CapsuleRef* k : ordered_candidates(registry, availability, config, op))
        if (admissible(config, **k)) return *k;
    return nullptr;
}

string planning_failure(const CapsuleRegistry& registry, const Availability& availability,
                        const ExecutionConfig& config, BackendOp op, const string& where) {
    string msg = "no admissible backend capsule for op " + string(to_string(op)) + " on device " +
                 string(to_string(config.device)) + where;
    auto lines = refusal_lines(registry, availability, config, op);
    auto broken = failed_plugin_lines(registry, config, op);
    if (lines.empty() && broken.empty())
        msg += "\n  no capsule for op " + string(to_string(op)) + " in registry mode '" +
               registry.mode + "'";
    for (const auto& line : lines) msg += "\n  " + line;
    for (const auto& line : broken) msg += "\n  " + line;
    return msg;
}

/// Per-op memo of the planner's choice: planning is a pure function of (registry, availability,
/// config, op), so each distinct op is resolved once per call.
class PlanCache {
public:
    PlanCache(const CapsuleRegistry& r, const Availability& a, const ExecutionConfig& c)
        : registry_(r), availability_(a), config_(c) {}

    /// The capsule for `op`; `node` (when planning a graph) is named in the failure.
    const CapsuleRef& get(BackendOp op, std::optional<std::int64_t> node) {
        auto i = static_cast<std::size_t>(op);
        if (!resolved_[i]) {
            choice_[i] = pick(registry_, availability_, config_, op);
            resolved_[i] = true;
        }
        if (!choice_[i])
            throw Error(ErrorCode::planning, planning_failure(registry_, availability_, config_, op,
                                                 node ? " (node " + std::to_string(*node) + ")" : ""));
        return choice_[i];
    }

private:
    const CapsuleRegistry& registry_;
    const Availability& availability_;
    const ExecutionConfig& config_;
    std::array<CapsuleRef, Spellings<BackendOp>::values.size()> choice_{};
    std::array<bool, Spellings<BackendOp>::values.size()> resolved_{};
};

}  // namespace

std::vector<string> refusal_lines(const CapsuleRegistry& registry,
                                  const Availability& availability,
                                  const ExecutionConfig& config, BackendOp op) {
    std::vector<string> lines;
    for (const auto& k : registry.capsules) {
        if (k->op != op) continue;
        std::vector<string> reasons;
        if (!availability.devices.count(k->device))
            reasons.push_back("device " + string(to_string(k->device)) +
                              " not available on target");
        if (!availability.providers.count(k->provider))
            reasons.push_back("provider " + string(to_string(k->provider)) +
                              " not available on target");
        for (auto& r : admissibility_refusals(config, *k)) reasons.push_back(std::move(r));
        if (reasons.empty()) continue;  // admissible (can only happen for a later candidate)
        string line = k->name + " (provider " + string(to_string(k->provider)) + ", device " +
                      string(to_string(k->device)) + "): ";
        for (std::size_t i = 0; i < reasons.size(); ++i) line += (i ? "; " : "") + reasons[i];
        lines.push_back(std::move(line));
    }
    return lines;
}

std::vector<string> failed_plugin_lines(const CapsuleRegistry& registry, const ExecutionConfig& config,
                                        BackendOp op) {
    std::vector<string> lines;
    for (const auto& f : registry.failed_plugins) {
        const bool declares_op = std::find(f.ops.begin(), f.ops.end(), op) != f.ops.end();
        const bool serves_device = f.device == config.device;
        const bool has_provider =
            config.backend.kind != BackendPreference::Kind::automatic &&
            std::find(f.providers.begin(), f.providers.end(), config.backend.provider) != f.providers.end();
        if (f.device && !declares_op && !serves_device && !has_provider) continue;
        string what = !f.device     ? "its manifest could not be read"
                      : declares_op ? "it declares op " + string(to_string(op))
                      : serves_device ? "it serves device " + string(to_string(config.device))
                                      : "it provides " + string(to_string(config.backend.provider));
        lines.push_back("plugin " + f.name + " failed to load (" + what + "): " + f.reason);
    }
    return lines;
}

ExecutionPlan plan_ops(const CapsuleRegistry& registry, const Availability& availability,
                       const ExecutionConfig& config, std::span<const BackendOp> ops) {
    PlanCache cache(registry, availability, config);
    ExecutionPlan plan;
    plan.nodes.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i)
        plan.nodes.push_back({static_cast<std::int64_t>(i), ops[i], cache.get(ops[i], std::nullopt)});
    return plan;
}

GraphExecutionPlan plan_graph(const CapsuleRegistry& registry, const Availability& availability,
                              const ExecutionConfig& config, const Graph& graph) {
    check_graph(graph);
    PlanCache cache(registry, availability, config);
    GraphExecutionPlan plan;
    plan.nodes.reserve(graph.nodes.size());
    for (const auto& node : graph.nodes) {
        if (node.is_structural()) continue;
        const auto& capsule = cache.get(*node.op, node.id);
        plan.nodes.push_back({node.id, *node.op, capsule});
    }
    return plan;
}

}  // namespace capsule
