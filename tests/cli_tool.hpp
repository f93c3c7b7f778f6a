// Runs the built `capsule` tool as a user does, for the CLI tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace capsule_test {

struct ToolResult {
    int code = -1;
    std::string out;  // stdout (and stderr when the command line redirects it)
};

/// Runs a shell command line; `out` is what it writes to stdout, `code` its exit status.
inline ToolResult capsule_tool_raw(const std::string& cmd) {
    ToolResult r;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) return r;
    char buffer[4096];
    while (std::size_t n = fread(buffer, 1, sizeof buffer, pipe)) r.out.append(buffer, n);
    int status = pclose(pipe);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

/// `capsule ARGS` with stdout and stderr together.
inline ToolResult capsule_tool(const std::string& args) {
    return capsule_tool_raw(std::string(CAPSULE_TOOL) + " " + args + " 2>&1");
}

inline bool contains(const std::string& s, const std::string& needle) {
    return s.find(needle) != std::string::npos;
}

/// A fresh directory for one test under the system temp directory.
inline std::filesystem::path temp_dir(const std::string& name) {
    auto d = std::filesystem::temp_directory_path() /
             ("capsule-cli-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::create_directories(d);
    return d;
}

}  // namespace capsule_test
