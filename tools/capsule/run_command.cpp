// `capsule run --profile P GRAPH --input NAME=FILE.npy ... [--output-dir D]`: plan, gate, build a
// session and execute; writes one .npy per graph output.
#include <iostream>

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
};

std::map<std::string, Tensor> read_inputs(const std::vector<std::string>& specs) {
    std::map<std::string, Tensor> inputs;
    for (const auto& spec : specs) {
        auto eq = spec.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
            throw InputError("--input '" + spec + "': expected NAME=FILE.npy");
        auto name = spec.substr(0, eq);
        if (inputs.count(name)) throw InputError("--input '" + name + "' given twice");
        inputs.emplace(name, read_npy(spec.substr(eq + 1)));
    }
    return inputs;
}
}  // namespace

Command add_run_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("run", "execute a graph under a profile; writes outputs as .npy");
    auto args = std::make_shared<RunArgs>();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")
        ->capture_default_str();
    sub->add_option("graph", args->graph, "JSON IR graph file")->required();
    sub->add_option("--input", args->inputs, "graph input as NAME=FILE.npy (repeatable)");
    sub->add_option("--output-dir", args->output_dir, "directory for the output .npy files")
        ->capture_default_str();
    sub->add_flag("--quiet", args->quiet, "print only the written files");
    return [&options, args]() {
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        const Graph graph = load_graph(args->graph);
        const auto inputs = read_inputs(args->inputs);
        auto result = profile.accept_graph(ctx.host(), graph);
        if (!args->quiet) std::cout << gate_report(profile, result.gate, false);
        if (!result.accepted) return int(kGateRejected);
        auto session = Session::create(profile, *result.accepted, graph, ctx.host(),
                                       load_graph_parameters(graph));
        auto outputs = session.run(inputs);
        std::filesystem::create_directories(args->output_dir);
        for (std::size_t i = 0; i < outputs.size(); ++i) {
            auto path = std::filesystem::path(args->output_dir) / (session.outputs()[i].name + ".npy");
            write_npy(path, outputs[i]);
            std::cout << "wrote " << path.string() << " " << to_string(outputs[i].dtype())
                      << to_string(outputs[i].shape()) << "\n";
        }
        return int(kOk);
    };
}

}  // namespace capsule::cli
