// `capsule run --profile P GRAPH --input NAME=FILE.npy ... [--output-dir D]`: plan, gate, build a
// session and execute; names the library and SHA-256 of each plugin that runs; writes one .npy per
// graph output.
#include <cctype>
#include <iostream>
#include <set>

#include "capsule/onnx_import.hpp"
#include "capsule/plan_lock.hpp"
#include "capsule/report.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "context.hpp"

namespace capsule::cli {

namespace {
struct RunArgs {
    std::string profile = "checked_cpu";
    std::string graph;
    std::vector<std::string> inputs;
    std::string output_dir = ".";
    bool quiet = false;
    std::string lock;
};

std::map<std::string, Tensor> read_inputs(const std::vector<std::string>& specs) {
    std::map<std::string, Tensor> inputs;
    for (const auto& spec : specs) {
        auto eq = spec.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
            throw Error(ErrorCode::input, "--input '" + spec + "': expected NAME=FILE.npy");
        auto name = spec.substr(0, eq);
        if (inputs.count(name)) throw Error(ErrorCode::input, "--input '" + name + "' given twice");
        inputs.emplace(name, read_npy(spec.substr(eq + 1)));
    }
    return inputs;
}

/// One file per output inside `dir`. Output names come from the graph, so they are reduced to
/// [A-Za-z0-9_.-] (an untrusted graph must not write outside `dir`); two outputs that would share
/// a file are an error before anything is written.
std::vector<std::filesystem::path> output_files(const Session& session, const std::string& dir) {
    std::vector<std::filesystem::path> files;
    std::set<std::string> seen;
    for (const auto& out : session.outputs()) {
        std::string name = out.name;
        for (auto& c : name)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
        if (name.empty() || name.find_first_not_of('.') == std::string::npos)
            name = "output_" + std::to_string(out.node_id);
        if (!seen.insert(name).second)
            throw Error(ErrorCode::input, "graph outputs would both be written to " + name +
                             ".npy; give the output nodes distinct names");
        files.push_back(std::filesystem::path(dir) / (name + ".npy"));
    }
    return files;
}

/// Which code runs: the library file and SHA-256 (taken when it was opened) of every plugin whose
/// kernels the session calls.
void print_libraries(const Session& session, const PluginHost& host) {
    std::set<std::string> used;
    for (const auto& step : session.steps()) used.insert(step.plugin);
    for (const auto& record : host.plugins()) {
        if (!used.count(record.name) || !record.library_path) continue;
        const auto outcome = host.library(record);  // already open: the session holds it
        if (outcome.plugin)
            std::cout << "plugin " << record.name << " " << record.manifest->version << ": "
                      << record.library_path->string() << " sha256 " << outcome.plugin->sha256 << "\n";
    }
}

}  // namespace

Command add_run_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand(
        "run", "execute a graph under a profile; names the library and SHA-256 of each plugin that runs; writes outputs as .npy");
    auto args = std::make_shared<RunArgs>();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")
        ->capture_default_str();
    sub->add_option("graph", args->graph, "JSON IR graph file or ONNX model (.onnx)")->required();
    sub->add_option("--input", args->inputs, "graph input as NAME=FILE.npy (repeatable)");
    sub->add_option("--output-dir", args->output_dir, "directory for the output .npy files")
        ->capture_default_str();
    sub->add_flag("--quiet", args->quiet, "print only the written files");
    sub->add_option("--lock", args->lock,
                    "refuse to run (exit 4, with a diff) unless the plan, its plugins' versions and "
                    "library SHA-256s and the import folding equal this lockfile's (`plan --lock`)")
        ->check(CLI::ExistingFile);
    return [&options, args]() {
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        auto given = read_inputs(args->inputs);
        // ONNX inputs take their static shapes from the given arrays (dynamic dims are fixed).
        OnnxImportOptions import_options;
        for (const auto& [name, t] : given) import_options.input_shapes[name] = t.shape();
        LoadedModel model = load_model(args->graph, import_options);
        const Graph& graph = model.graph;
        for (const auto& node : graph.nodes)  // a bfloat16 input arrives as its uint16 bits
            if (auto it = given.find(node.parameter_prefix()); node.kind == NodeKind::input && it != given.end())
                it->second = bfloat16_from_bits(it->second, node.dtype);
        ParameterMap parameters = std::move(model.parameters);
        const auto inputs = bind_model_inputs(model, given, parameters);
        auto result = profile.accept_graph(ctx.host(), graph);
        SessionOptions session_options;
        session_options.threads = options.threads;
        if (!args->lock.empty() && result.accepted) {  // a drifted plan is refused before it is shown
            auto locked = std::make_shared<const PlanLock>(load_plan_lock(args->lock));
            auto current = make_plan_lock(profile, result.gate.plan, ctx.host(), model.folded);
            current.model_files = model_files(args->graph, graph);
            require_plan_lock(*locked, current, args->lock);
            session_options.lock = locked;
            session_options.lock_source = args->lock;
        }
        if (!args->quiet) std::cout << gate_report(profile, result.gate, false);
        if (!result.accepted) return int(kGateRejected);
        auto session = Session::create(profile, *result.accepted, graph, ctx.host(), parameters, session_options);
        if (!args->quiet) print_libraries(session, ctx.host());
        const auto files = output_files(session, args->output_dir);
        auto outputs = session.run(inputs);
        std::filesystem::create_directories(args->output_dir);
        for (std::size_t i = 0; i < outputs.size(); ++i) {
            const auto& path = files[i];
            write_npy(path, bfloat16_as_bits(outputs[i]));
            std::cout << "wrote " << path.string() << " " << to_string(outputs[i].dtype())
                      << to_string(outputs[i].shape())
                      << (outputs[i].dtype() == DType::bfloat16 ? " (its bits as uint16: .npy has no bfloat16)" : "")
                      << "\n";
        }
        return int(kOk);
    };
}

}  // namespace capsule::cli
