// A minimal embedding program: discovers the plugins, plans a two-node graph under the built-in
// `checked_cpu` profile, runs it on the reference CPU plugin and prints the output. It includes
// the runtime's session header and the core's profile header and links capsule::runtime only.
//
// Usage: capsule_embed [PLUGIN_DIR]. Plugins are searched beside the executable, in
// CAPSULE_PLUGIN_PATH, then in PLUGIN_DIR, or, without it, in the directory the build named with
// CAPSULE_PLUGIN_DIR (the installed package's capsule_PLUGIN_DIR).
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "capsule/profile.hpp"
#include "capsule/session.hpp"

namespace {

constexpr const char* kGraph = R"({
  "format": "capsule-ir", "version": 1,
  "nodes": [
    {"id": 0, "op": "input", "name": "x", "shape": [2, 3], "dtype": "float32"},
    {"id": 1, "op": "relu", "parents": [0], "shape": [2, 3]},
    {"id": 2, "op": "softmax", "parents": [1], "attrs": {"axis": -1}, "shape": [2, 3]}
  ],
  "outputs": [2]
})";

std::filesystem::path executable_dir() {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::filesystem::path{} : exe.parent_path();
}

}  // namespace

int main(int argc, char** argv) try {
    std::vector<std::filesystem::path> plugin_dirs;
    if (argc > 1) {
        plugin_dirs.emplace_back(argv[1]);
    } else {
#ifdef CAPSULE_PLUGIN_DIR
        plugin_dirs.emplace_back(CAPSULE_PLUGIN_DIR);
#endif
    }
    const auto host = capsule::PluginHost::discover(capsule::PluginSearchPath::standard(
        executable_dir(), std::getenv("CAPSULE_PLUGIN_PATH"), plugin_dirs));

    const auto graph = capsule::parse_graph(kGraph, "embedded graph");
    const auto profile = capsule::BackendProfile::checked_cpu();
    auto result = profile.accept_graph(host, graph);
    if (!result.accepted) {
        std::cerr << "the gate rejected the plan under " << profile.name << "\n";
        return static_cast<int>(capsule::ErrorCode::gate);
    }
    auto session = capsule::Session::create(profile, *result.accepted, graph, host, {});
    for (const auto& capsule_name : session.kernel_trace()) std::cout << "capsule " << capsule_name << "\n";
    const auto x = capsule::Tensor::from_values(capsule::DType::float32, {2, 3},
                                                {-1.0, 0.0, 1.0, 2.0, 2.0, 2.0});
    const auto outputs = session.run({{"x", x}});
    std::cout << "output:";
    for (float v : outputs.at(0).values<float>()) std::cout << ' ' << v;
    std::cout << "\n";
    return 0;
} catch (const capsule::Error& e) {
    // The code says which stage refused (bad input, planning, gate, probe); its value is the exit
    // code the `capsule` tool would give.
    std::cerr << "capsule_embed: " << capsule::to_string(e.code()) << " error: " << e.what() << "\n";
    return static_cast<int>(e.code());
}
