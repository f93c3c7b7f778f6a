// `capsule plan --profile P GRAPH` / `--ops a,b,c`: plan, lower and gate; print the report.
#include <iostream>

#include <nlohmann/json.hpp>

#include "capsule/onnx_import.hpp"
#include "capsule/plan_lock.hpp"
#include "capsule/report.hpp"
#include "context.hpp"

namespace capsule::cli {

namespace {
struct PlanArgs {
    std::string profile = "checked_cpu";
    std::string graph;
    std::string ops;
    bool json = false;
    bool detailed = false;
    std::vector<std::string> input_shapes;
    std::string lock;
};

std::vector<BackendOp> parse_ops(const std::string& list) {
    std::vector<BackendOp> ops;
    std::size_t start = 0;
    while (start <= list.size()) {
        auto end = list.find(',', start);
        if (end == std::string::npos) end = list.size();
        auto item = list.substr(start, end - start);
        if (item.empty()) throw Error(ErrorCode::input, "--ops: empty op name in '" + list + "'");
        ops.push_back(parse<BackendOp>(item));
        start = end + 1;
    }
    return ops;
}
}  // namespace

Command add_plan_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("plan", "plan, lower and gate a graph or an op sequence");
    auto args = std::make_shared<PlanArgs>();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")
        ->capture_default_str();
    auto* graph = sub->add_option("graph", args->graph, "JSON IR graph file or ONNX model (.onnx)");
    sub->add_option("--input-shape", args->input_shapes,
                    "static shape for a dynamic ONNX input, NAME=D0,D1,... (repeatable)");
    auto* ops = sub->add_option("--ops", args->ops, "comma-separated BackendOp sequence");
    graph->excludes(ops);
    sub->add_flag("--json", args->json, "print the plan as JSON (DESIGN.md section 7)");
    sub->add_flag("--detailed", args->detailed, "add one line per contract field");
    sub->add_option("--lock", args->lock,
                    "write the accepted plan to this lockfile (profile; per group the capsule, plugin, "
                    "version, library SHA-256, ABI, evidence record; what import folded away); "
                    "`run --lock` refuses any drift");
    return [&options, args, graph, ops]() {
        if (graph->empty() == ops->empty())
            throw Error(ErrorCode::input, "plan: give exactly one of GRAPH or --ops");
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        AcceptedPlanResult result;
        std::vector<std::string> folded;
        std::vector<LockedFile> files;
        try {
            if (!args->graph.empty()) {
                OnnxImportOptions import_options;
                import_options.input_shapes = parse_input_shapes(args->input_shapes);
                auto model = load_model(args->graph, import_options);
                folded = std::move(model.folded);
                if (!args->lock.empty()) files = model_files(args->graph, model.graph);
                result = profile.accept_graph(ctx.host(), model.graph);
            } else {
                auto list = parse_ops(args->ops);
                result = profile.gate_ops(ctx.host(), list);
            }
        } catch (const Error& e) {
            if (e.code() != ErrorCode::planning || !args->json) throw;
            auto out = planning_failed_json(profile, e.what());
            out["folded"] = folded;
            std::cout << out.dump(2) << "\n";
            return int(kPlanningFailed);
        }
        // The lock first: a lock that cannot be written is this command's only output (under --json,
        // one error object).
        if (result.gate.accepted() && !args->lock.empty()) {
            auto lock = make_plan_lock(profile, result.gate.plan, ctx.host(), folded);
            lock.model_files = std::move(files);
            write_plan_lock(lock, args->lock);
        }
        if (args->json) {
            auto out = plan_json(profile, result.gate);
            out["folded"] = folded;
            std::cout << out.dump(2) << "\n";
        } else {
            std::cout << gate_report(profile, result.gate, args->detailed);
            if (!folded.empty()) {
                std::cout << "folded at import (computed on the host, not by a capsule): " << folded.size()
                          << " ONNX node(s)\n";
                for (const auto& f : folded) std::cout << "  " << f << "\n";
            }
        }
        if (!result.gate.accepted()) return int(kGateRejected);
        if (!args->lock.empty() && !args->json) std::cout << "plan locked in " << args->lock << "\n";
        return int(kOk);
    };
}

}  // namespace capsule::cli
