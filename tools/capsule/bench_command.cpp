// `capsule bench MODEL [--profile P] [--input-shape NAME=1x3x224x224 ...] [--warmup N]
// [--iterations N] [--json] [--trace FILE]`: plan and gate the model as `capsule run` does, create
// one session, run it on deterministic pseudo-random inputs and report load, plan and
// session-creation times, per-run latency and the time of every kernel call.
#include <fstream>
#include <iostream>
#include <thread>

#include "bench.hpp"
#include "capsule/report.hpp"
#include "context.hpp"

namespace capsule::cli {

namespace {

struct BenchArgs {
    std::string profile = "checked_cpu";
    std::string model;
    std::vector<std::string> input_shapes;
    int warmup = 3;
    int iterations = 20;
    bool json = false;
    bool node_by_node = false;
    std::string trace;
};

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

/// Every `--input-shape` must name a runtime input of the loaded graph and agree with its shape
/// (for JSON IR the declared one; for ONNX the importer fixed it). Raises Error(input).
void check_input_shapes(const Graph& graph, const std::map<std::string, Shape>& shapes) {
    for (const auto& [name, shape] : shapes) {
        const Node* input = nullptr;
        std::string names;
        for (const auto& node : graph.nodes)
            if (node.kind == NodeKind::input) {
                if (node.parameter_prefix() == name) input = &node;
                names += (names.empty() ? "" : ", ") + node.parameter_prefix();
            }
        if (!input)
            throw Error(ErrorCode::input, "--input-shape " + name + ": the model has no runtime input of that name (inputs: " +
                             (names.empty() ? "none" : names) + ")");
        if (input->shape != shape)
            throw Error(ErrorCode::input, "--input-shape " + name + "=" + to_string(shape) + ": the model declares " +
                             to_string(input->shape) + " for this input");
    }
}

std::vector<std::string> node_names(const Graph& graph, const std::vector<SessionStep>& steps) {
    const auto position = node_positions(graph);
    std::vector<std::string> names;
    auto name_of = [&](std::int64_t id) {
        const auto& node = graph.nodes.at(position.at(id));
        return node.name.empty() ? "node " + std::to_string(node.id) : node.name;
    };
    for (const auto& step : steps) {
        if (step.group_nodes.empty()) {
            names.push_back(name_of(step.node_id));
            continue;
        }
        std::string joined;  // a compiled group: every node it runs
        for (auto id : step.group_nodes) joined += (joined.empty() ? "" : "+") + name_of(id);
        names.push_back(std::move(joined));
    }
    return names;
}

}  // namespace

Command add_bench_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand(
        "bench", "time a model under a profile: session creation, latency per run, time per node");
    auto args = std::make_shared<BenchArgs>();
    sub->add_option("model", args->model, "JSON IR graph file or ONNX model (.onnx)")->required();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")
        ->capture_default_str();
    sub->add_option("--input-shape", args->input_shapes,
                    "static shape of an input, NAME=1x3x224x224 or NAME=1,3,224,224 (repeatable)");
    sub->add_option("--warmup", args->warmup, "untimed runs before the timed ones")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    sub->add_option("--iterations", args->iterations, "timed runs")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_flag("--json", args->json, "print the results as one JSON object");
    sub->add_flag("--node-by-node", args->node_by_node,
                  "no compiled groups (SessionOptions::compile_groups off): every node is its own kernel "
                  "call, timed on its own");
    sub->add_option("--trace", args->trace,
                    "write a Chrome trace (chrome://tracing, Perfetto) of every kernel call of the timed runs")
        ->check([](const std::string& path) {
            return path.empty() ? std::string("needs a file name") : std::string();
        });
    return [&options, args]() {
        if (!args->trace.empty() && std::filesystem::weakly_canonical(args->trace) == std::filesystem::weakly_canonical(args->model))
            throw Error(ErrorCode::input, "--trace " + args->trace + " is the model file; give another file name");
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        BenchRecord record;
        record.model = args->model;
        record.profile = profile.name;
        record.warmup = args->warmup;

        const PluginHost& host = ctx.host();  // discovery (manifests, hashes) is not planning
        auto start = std::chrono::steady_clock::now();
        OnnxImportOptions import_options;
        import_options.input_shapes = parse_input_shapes(args->input_shapes);
        LoadedModel model = load_model(args->model, import_options);
        record.load_ms = ms_since(start);
        check_input_shapes(model.graph, import_options.input_shapes);
        ParameterMap parameters = std::move(model.parameters);
        std::size_t drawn = 0;
        const auto values = bench_values(model, parameters, drawn);
        if (drawn)
            std::cerr << "capsule bench: " << drawn << " parameter tensor(s) not supplied by the model "
                      << "were drawn at random\n";
        const auto inputs = bind_model_inputs(model, values, parameters);

        start = std::chrono::steady_clock::now();
        auto result = profile.accept_graph(host, model.graph);
        record.plan_ms = ms_since(start);
        if (!result.accepted) {
            if (args->json)
                std::cout << plan_json(profile, result.gate).dump(2) << "\n";
            else
                std::cout << gate_report(profile, result.gate, false);
            return int(kGateRejected);
        }

        SessionOptions session_options;
        session_options.threads = options.threads;
        session_options.compile_groups = !args->node_by_node;
        record.threads = options.threads > 0 ? options.threads
                                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
        start = std::chrono::steady_clock::now();
        auto session = Session::create(profile, *result.accepted, model.graph, host, parameters, session_options);
        record.session_ms = ms_since(start);
        record.inputs = session.inputs();
        record.steps = session.steps();
        record.node_names = node_names(model.graph, record.steps);

        std::ofstream trace_file;
        if (!args->trace.empty()) {
            trace_file.open(args->trace);
            if (!trace_file) throw Error(ErrorCode::input, "--trace " + args->trace + ": cannot open the file for writing");
        }
        std::cerr << "capsule bench: " << args->model << " under " << profile.name << ": " << args->warmup
                  << " warm-up and " << args->iterations << " timed run(s)\n";
        for (int i = 0; i < args->warmup; ++i) (void)session.run(inputs);
        record.runs.resize(static_cast<std::size_t>(args->iterations));
        for (auto& timings : record.runs) (void)session.run(inputs, timings);

        if (trace_file.is_open() && !(trace_file << bench_trace(record).dump() << "\n" << std::flush))
            throw Error(ErrorCode::input, "--trace " + args->trace + ": cannot write the file");
        if (args->json)
            std::cout << bench_json(record).dump(2) << "\n";
        else
            std::cout << bench_text(record);
        return int(kOk);
    };
}

}  // namespace capsule::cli
