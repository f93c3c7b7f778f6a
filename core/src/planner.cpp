#include "capsule/planner.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
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

/// Whether the capsule's kernel accepts every dtype of `dtypes` (a mask).
bool accepts(const KernelCapsule& k, std::uint64_t dtypes) { return (k.dtypes & dtypes) == dtypes; }

/// "int32, uint8" for a dtype mask.
string dtype_names(std::uint64_t mask) {
    string out;
    for (const auto& [dtype, name] : Spellings<DType>::values)
        if (mask >> static_cast<unsigned>(dtype) & 1) out += (out.empty() ? "" : ", ") + string(name);
    return out;
}

CapsuleRef pick(const CapsuleRegistry& registry, const Availability& availability,
                const ExecutionConfig& config, BackendOp op, std::uint64_t dtypes) {
    for (const CapsuleRef* k : ordered_candidates(registry, availability, config, op))
        if (admissible(config, **k) && accepts(**k, dtypes)) return *k;
    return nullptr;
}

string planning_failure(const CapsuleRegistry& registry, const Availability& availability,
                        const ExecutionConfig& config, BackendOp op, std::uint64_t dtypes,
                        const string& where) {
    string msg = "no admissible backend capsule for op " + string(to_string(op)) + " on device " +
                 string(to_string(config.device)) + where;
    if (dtypes & ~kDTypes1_0) msg += " with dtypes " + dtype_names(dtypes);
    auto lines = refusal_lines(registry, availability, config, op, dtypes);
    auto broken = failed_plugin_lines(registry, config, op);
    if (lines.empty() && broken.empty())
        msg += "\n  no capsule for op " + string(to_string(op)) + " in registry mode '" +
               registry.mode + "'";
    for (const auto& line : lines) msg += "\n  " + line;
    for (const auto& line : broken) msg += "\n  " + line;
    return msg;
}

/// Memo of the planner's choice per (op, dtypes): planning is a pure function of (registry,
/// availability, config, op, the node's dtypes), so each distinct pair is resolved once per call.
class PlanCache {
public:
    PlanCache(const CapsuleRegistry& r, const Availability& a, const ExecutionConfig& c)
        : registry_(r), availability_(a), config_(c) {}

    /// The capsule for `op` on tensors of `dtypes`; `node` (when planning a graph) is named in the
    /// failure.
    const CapsuleRef& get(BackendOp op, std::uint64_t dtypes, std::optional<std::int64_t> node) {
        auto [it, fresh] = choice_.try_emplace({op, dtypes});
        if (fresh) it->second = pick(registry_, availability_, config_, op, dtypes);
        if (!it->second)
            throw Error(ErrorCode::planning,
                        planning_failure(registry_, availability_, config_, op, dtypes,
                                         node ? " (node " + std::to_string(*node) + ")" : ""));
        return it->second;
    }

private:
    const CapsuleRegistry& registry_;
    const Availability& availability_;
    const ExecutionConfig& config_;
    std::map<std::pair<BackendOp, std::uint64_t>, CapsuleRef> choice_;
};

/// The dtypes a node's kernel sees: its parents' and its own (parameters share the input's).
std::uint64_t node_dtypes(const Graph& graph, const std::unordered_map<std::int64_t, std::size_t>& at,
                          const Node& node) {
    std::uint64_t mask = std::uint64_t{1} << static_cast<unsigned>(node.dtype);
    for (auto p : node.parents) mask |= std::uint64_t{1} << static_cast<unsigned>(graph.nodes[at.at(p)].dtype);
    return mask;
}

}  // namespace

std::vector<string> refusal_lines(const CapsuleRegistry& registry,
                                  const Availability& availability,
                                  const ExecutionConfig& config, BackendOp op, std::uint64_t dtypes) {
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
        if (!accepts(*k, dtypes))
            reasons.push_back("does not accept dtype " + dtype_names(dtypes & ~k->dtypes) + " (it accepts " +
                              dtype_names(k->dtypes) + ")");
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
        plan.nodes.push_back({static_cast<std::int64_t>(i), ops[i], cache.get(ops[i], 0, std::nullopt)});
    return plan;
}

GraphExecutionPlan plan_graph(const CapsuleRegistry& registry, const Availability& availability,
                              const ExecutionConfig& config, const Graph& graph) {
    check_graph(graph);
    PlanCache cache(registry, availability, config);
    GraphExecutionPlan plan;
    plan.nodes.reserve(graph.nodes.size());
    const auto at = node_positions(graph);
    for (const auto& node : graph.nodes) {
        if (node.is_structural()) continue;
        const auto& capsule = cache.get(*node.op, node_dtypes(graph, at, node), node.id);
        plan.nodes.push_back({node.id, *node.op, capsule});
    }
    return plan;
}

}  // namespace capsule
