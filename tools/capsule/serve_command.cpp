// `capsule serve`: the server is its own executable, capsule-serve (tools/serve), so that this
// tool's other commands do not link the HTTP library and the ONNX importer; this command runs it.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "context.hpp"

namespace capsule::cli {

int exec_serve(int argc, char** argv) {
    const auto server = executable_dir() / "capsule-serve";
    std::vector<char*> args{const_cast<char*>("capsule serve")};
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    ::execv(server.c_str(), args.data());
    std::cerr << "capsule: cannot run " << server.string() << ": " << std::strerror(errno)
              << " (it is built when cpp-httplib and the ONNX importer are found)\n";
    return kBadInput;
}

Command add_serve_command(CLI::App& app, const GlobalOptions&) {
    // Listed for --help only: main() hands `capsule serve ...` to exec_serve before parsing.
    app.add_subcommand("serve", "serve a model repository over the Open Inference Protocol v2 (runs "
                                "capsule-serve; `capsule serve --help` lists its options)");
    return [] { return exec_serve(0, nullptr); };
}

}  // namespace capsule::cli
