// `capsule`: list, audit and plan what the Capsule runtime has loaded (DESIGN.md section 7).
#include <iostream>

#include <nlohmann/json.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "../openmp_spinning.hpp"
#include "capsule/session.hpp"
#include "context.hpp"

using namespace capsule;
using namespace capsule::cli;

namespace {
/// What stderr says before an Error's message: `capsule: bad input: <message>`.
const char* error_heading(ErrorCode code) {
    switch (code) {
    case ErrorCode::input: return "bad input";
    case ErrorCode::planning: return "planning failed";
    case ErrorCode::gate: return "gate rejected the plan";
    case ErrorCode::probe: return "cannot run here";
    case ErrorCode::other: break;
    }
    return "error";
}

/// Whether the command line asked for --json: a failure is then also written to stdout as
/// `{"error": {"exit_code": N, "kind": "...", "message": "..."}}`, so that --json output always
/// parses.
bool wants_json(const CLI::App& app) {
    for (const auto* sub : app.get_subcommands())
        if (const auto* option = sub->get_option_no_throw("--json"); option && option->count() > 0) return true;
    return false;
}

/// With --json, writes the failure's error object to stdout. Returns `exit_code`.
int json_error(const CLI::App& app, int exit_code, const char* kind, const std::string& message) {
    if (wants_json(app))
        std::cout << nlohmann::json{{"error", {{"exit_code", exit_code}, {"kind", kind}, {"message", message}}}}.dump(2)
                  << "\n";
    return exit_code;
}

/// Reports a failure: `capsule: <heading>: <message>` on stderr, and as JSON on stdout when asked.
int fail(const CLI::App& app, int exit_code, const char* heading, const std::string& message) {
    std::cerr << "capsule: " << heading << ": " << message << "\n";
    return json_error(app, exit_code, heading, message);
}
}  // namespace

int main(int argc, char** argv) {
    capsule::tools::bound_openmp_spinning();  // before any plugin loads libgomp
    // The server parses its own arguments (capsule-serve --help).
    if (argc > 1 && std::string_view(argv[1]) == "serve") return capsule::cli::exec_serve(argc - 2, argv + 2);
    // Logs go to stderr: stdout carries only results (text, --json documents, written files).
    spdlog::set_default_logger(spdlog::stderr_color_st("capsule"));
    spdlog::set_level(spdlog::level::warn);
    CLI::App app{"capsule: plan, gate, list and audit Capsule runtime plugins and profiles"};
    app.require_subcommand(1);
    app.fallthrough();  // global options may follow the subcommand: `capsule plugins --plugin-path D`
    GlobalOptions options;
    app.add_option("--plugin-path", options.plugin_paths,
                   "extra plugin directory or manifest file (repeatable)");
    app.add_option("--profile-file", options.profile_files,
                   "load a backend profile from a JSON file (repeatable)")
        ->check(CLI::ExistingFile);
    app.add_option("--trusted-hashes", options.trusted_hashes,
                   "only load plugin libraries whose SHA-256 is listed (sha256sum format)")
        ->check(CLI::ExistingFile);
    app.add_option("--evidence-dir", options.evidence_dirs,
                   "where `verify` writes and the `verified` policy reads evidence records "
                   "(repeatable; default: evidence/ beside each plugin's manifest, then "
                   "~/.cache/capsule/evidence)")
        ->check([](const std::string& dir) { return dir.empty() ? std::string("must not be empty") : std::string(); });
    app.add_option("--threads", options.threads,
                   "intra-op threads kernels may use (given to plugins at prepare time); 0: every core")
        ->check(CLI::Range(0, 4096))
        ->capture_default_str();
    app.footer(
        "Exit codes (the same numbers as capsule::ErrorCode):\n"
        "  0  success; the plan was accepted\n"
        "  1  anything else: a kernel or plugin call failed, backward was refused, a file could not\n"
        "     be written; also `plugins` when a plugin failed and `onnx-test` when a case failed or an\n"
        "     --expect case no longer passes, `verify` when a capsule failed its cases\n"
        "  2  usage error or bad input (file, profile, graph, model, option value, or input data\n"
        "     a kernel refuses, such as an index out of range)\n"
        "  3  planning failed: no admissible capsule for an op\n"
        "  4  the acceptance gate rejected the plan\n"
        "  5  cannot run here: device, driver, plugin or library unusable on this machine");
    app.set_version_flag("--version", std::string("capsule ") + CAPSULE_VERSION + ", plugin ABI " +
                                          to_string(kHostAbiVersion));
    const std::vector<std::pair<std::string, Command>> commands{
        {"plugins", add_plugins_command(app, options)},
        {"capsules", add_capsules_command(app, options)},
        {"profiles", add_profiles_command(app, options)},
        {"plan", add_plan_command(app, options)},
        {"run", add_run_command(app, options)},
        {"train", add_train_command(app, options)},
        {"eval", add_eval_command(app, options)},
        {"onnx-test", add_onnx_test_command(app, options)},
        {"bench", add_bench_command(app, options)},
        {"verify", add_verify_command(app, options)},
        {"serve", add_serve_command(app, options)},
    };

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (app.exit(e) == 0) return kOk;  // --help, --version (CLI11 printed the usage error)
        return json_error(app, kBadInput, "usage", e.what());
    }
    try {
        for (const auto& [name, run] : commands)
            if (app.got_subcommand(name)) return run();
    } catch (const Error& e) {
        return fail(app, static_cast<int>(e.code()), error_heading(e.code()), e.what());
    } catch (const std::bad_alloc&) {
        return fail(app, kOther, "error", "out of memory");
    } catch (const std::exception& e) {
        return fail(app, kOther, "error", e.what());
    }
    return kOther;
}
