#include "capsule/report.hpp"

#include <nlohmann/json.hpp>

namespace capsule {

using nlohmann::json;
using nlohmann::ordered_json;
using std::string;

namespace {
string group_line(const LoweredGroup& g) {
    const auto& k = *g.capsule;
    string line = "  " + string(to_string(g.op)) + ": " + k.name +
                  " provider=" + string(to_string(k.provider)) +
                  " trust=" + string(to_string(k.trust)) + " vjp=" +
                  string(to_string(k.vjp_mode)) + " runtime=" + string(to_string(k.runtime));
    return line;
}

string node_list(const std::vector<std::int64_t>& ids) {
    string out;
    for (auto id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
    return out;
}
}  // namespace

string group_report(const GraphLoweringPlan& plan, bool detailed) {
    string out;
    for (const auto& g : plan.groups) {
        out += group_line(g);
        if (detailed)
            out += " nodes=" + node_list(g.node_ids) +
                   " grouping=" + string(to_string(g.grouping));
        out += "\n";
        if (!detailed) continue;
        for (auto o : all_values<Obligation>()) {
            const auto& d = g.capsule->contract(o);
            out += "    " + string(to_string(o)) + ": " + to_string(d.claim) + "; " +
                   string(to_string(d.evidence)) + "\n";
        }
    }
    return out;
}

string gate_report(const BackendProfile& profile, const GateResult& result, bool detailed) {
    string out = "profile " + profile.name + ": " + std::to_string(result.plan.groups.size()) +
                 " group(s), lowering " + string(to_string(profile.lowering_mode)) +
                 ", acceptance " +
                 acceptance_policy_to_json(profile.acceptance_policy).dump() +
                 (profile.config.fpmath == FpMath::strict ? "" : ", fpmath " + string(to_string(profile.config.fpmath))) +
                 "\n";
    out += group_report(result.plan, detailed);
    if (result.trusted_external) out += "plan has trusted external capsules\n";
    if (result.accepted()) return out + "gate: accepted\n";
    out += "gate: rejected\n";
    for (const auto& f : result.failures) {
        out += "  " + string(to_string(f.kind)) + ":\n";
        for (const auto& r : f.obligations)
            out += "    " + r.capsule->name + " " + string(to_string(r.obligation)) + " " +
                   to_string(r.claim()) + " is " + string(to_string(r.disposition)) + "\n";
        for (const auto& reason : f.reasons) out += "    why: " + reason + "\n";
    }
    return out;
}

ordered_json plan_json(const BackendProfile& profile, const GateResult& result) {
    ordered_json groups = ordered_json::array();
    for (const auto& g : result.plan.groups) {
        const auto& k = *g.capsule;
        groups.push_back({{"node_ids", g.node_ids},
                          {"op", to_string(g.op)},
                          {"capsule", k.name},
                          {"provider", to_string(k.provider)},
                          {"device", to_string(k.device)},
                          {"trust", to_string(k.trust)},
                          {"vjp", to_string(k.vjp_mode)},
                          {"runtime", to_string(k.runtime)},
                          {"grouping", to_string(g.grouping)}});
    }
    ordered_json failures = ordered_json::array();
    for (const auto& f : result.failures) {
        ordered_json obligations = ordered_json::array();
        for (const auto& r : f.obligations)
            obligations.push_back({{"capsule", r.capsule->name},
                                   {"op", to_string(r.op())},
                                   {"obligation", to_string(r.obligation)},
                                   {"disposition", to_string(r.disposition)}});
        failures.push_back({{"kind", to_string(f.kind)}, {"obligations", obligations}});
        if (!f.reasons.empty()) failures.back()["reasons"] = f.reasons;
    }
    return ordered_json{{"profile", profile.name},
                {"status", result.accepted() ? "accepted" : "rejected"},
                {"error", nullptr},
                {"groups", groups},
                {"failures", failures}};
}

ordered_json planning_failed_json(const BackendProfile& profile, const string& error) {
    return ordered_json{{"profile", profile.name},
                {"status", "planning_failed"},
                {"error", error},
                {"groups", ordered_json::array()},
                {"failures", ordered_json::array()}};
}

}  // namespace capsule
