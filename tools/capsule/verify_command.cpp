// `capsule verify [--plugin NAME] [--json]`: runs the shared conformance suite against plugin
// libraries on this machine and writes one evidence record per library (DESIGN.md section 10,
// "Evidence is earned"). Each library is loaded, probed and run in a child process, so a kernel
// or probe that crashes or hangs becomes that plugin's outcome, not the tool's.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capsule/child_process.hpp"
#include "conformance/verify.hpp"
#include "context.hpp"

namespace capsule::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct VerifyArgs {
    std::string plugin;
    bool json = false;
    double timeout = 600;
};

/// Where a record of `record`'s library goes: the first --evidence-dir, else `evidence/` beside
/// its manifest when that can be written, else the user's cache directory. Checked (created,
/// trusted on disk, writable) before the suite runs.
fs::path evidence_dir_for(const PluginHost& host, const PluginRecord& record, bool explicit_dirs) {
    const auto dirs = host.evidence_dirs(record);
    if (explicit_dirs) return prepare_evidence_dir(dirs.front());
    try {
        return prepare_evidence_dir(dirs.front());
    } catch (const Error& beside) {
        if (dirs.size() < 2)
            throw Error(ErrorCode::other, std::string(beside.what()) +
                                              "; no user cache directory is known (HOME unset): give --evidence-dir");
        return prepare_evidence_dir(dirs[1]);
    }
}

/// What running the suite against one plugin gave.
struct PluginOutcome {
    std::optional<EvidenceRecord> record;
    int exit_code = kOk;  // kProbeFailed: not run here; kOther: the plugin failed
    std::string message;  // why, when there is no record
};

/// The child: load, probe, run the suite; report on `fd` as lines `P <capsule>` (about to run its
/// cases), then `R <record JSON>` or `E <exit code> <message>`.
void verify_in_child(const PluginHost& host, const PluginRecord& record, bool progress_line, int fd) {
    auto report = [&](int code, const std::string& why) {
        write_all(fd, "E " + std::to_string(code) + " " + why + "\n");
    };
    const auto loaded = host.library(record);
    if (!loaded.plugin) return report(kProbeFailed, "cannot be loaded: " + loaded.failure);
    if (auto probe = loaded.plugin->probe(); !probe.usable)
        return report(kProbeFailed, "skipped: its device is not usable here: " + probe.reason);
    const std::string driver = record.manifest->device == Device::cpu
                                   ? conformance::describe_cpu()
                                   : std::string(to_string(record.manifest->device)) + " (probe: usable)";
    auto evidence = conformance::verify_plugin(
        record, *loaded.plugin, driver, [&](std::string_view capsule, std::size_t i, std::size_t n) {
            write_all(fd, "P " + std::string(capsule) + "\n");
            if (progress_line)
                std::cerr << "\rverify " << record.name << ": " << (i + 1) << "/" << n << " " << capsule << "\033[K"
                          << std::flush;
        });
    if (progress_line) std::cerr << "\r\033[K" << std::flush;
    write_all(fd, "R " + evidence_record_to_json(evidence).dump() + "\n");
}

PluginOutcome verify_isolated(const PluginHost& host, const PluginRecord& record, std::chrono::milliseconds timeout,
                              bool progress_line) {
    const auto child = run_in_child_process(
        timeout, [&](int fd) { verify_in_child(host, record, progress_line, fd); });
    PluginOutcome out;
    std::string running;  // the capsule whose cases were running last
    std::istringstream lines(child.output);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("P ", 0) == 0) running = line.substr(2);
        if (line.rfind("E ", 0) == 0) {
            const auto space = line.find(' ', 2);
            out.exit_code = std::stoi(line.substr(2, space - 2));
            out.message = line.substr(space + 1);
        }
        if (line.rfind("R ", 0) == 0) out.record = parse_evidence_record(line.substr(2), record.name + " (verify child)");
    }
    if (auto why = child.describe(timeout); !why.empty() || (!out.record && out.message.empty())) {
        out.record.reset();
        out.exit_code = kOther;
        out.message = (why.empty() ? "reported nothing" : why) +
                      (running.empty() ? std::string(" while loading or probing")
                                       : " while running the cases of " + running);
    }
    return out;
}

std::string fraction(int passed, int run) { return std::to_string(passed) + "/" + std::to_string(run); }

void print_record(const EvidenceRecord& r, const fs::path& file) {
    std::cout << r.plugin << " " << r.version << " sha256 " << r.library_sha256 << "\n"
              << "  driver " << r.driver << "\n";
    for (const auto& c : r.capsules) {
        std::printf("  %-36s %-8s forward %s gradient %s", c.capsule.c_str(), c.status().c_str(),
                    fraction(c.forward_passed, c.forward_cases).c_str(),
                    fraction(c.gradient_passed, c.gradient_cases).c_str());
        if (c.forward_cases > 0)
            std::printf("  max abs error %.3g (%.2f of tolerance; rtol %.0e atol %.0e)", c.max_abs_error,
                        c.max_error_ratio, c.rtol, c.atol);
        if (!c.unsupported.empty()) std::printf("  %zu unsupported", c.unsupported.size());
        std::printf("\n");
        std::fflush(stdout);
        for (const auto& f : c.failures) std::cout << "      failed: " << f << "\n";
        if (c.forward_cases == 0 && c.unsupported.empty())
            std::cout << "      no conformance case covers this op: it stays unverified\n";
    }
    std::cout << "  " << (r.passed() ? "passed" : "FAILED") << "; record " << r.id() << " written to "
              << file.string() << "\n";
}

}  // namespace

Command add_verify_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand(
        "verify",
        "run the shared conformance suite against plugin libraries on this machine (each in a child "
        "process) and write an evidence record per library, read by the `verified` acceptance policy; "
        "exits 1 when a capsule failed or a plugin crashed or hung, 5 when the plugin named by --plugin "
        "cannot run here (without --plugin such plugins are skipped)");
    auto args = std::make_shared<VerifyArgs>();
    sub->add_option("--plugin", args->plugin, "verify only this plugin (default: every plugin with a library)");
    sub->add_flag("--json", args->json, "print the evidence records as JSON");
    sub->add_option("--timeout", args->timeout, "seconds one plugin's suite may take")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    return [&options, args]() {
        Context ctx(options);
        const PluginHost& host = ctx.host();
        std::vector<const PluginRecord*> chosen;
        for (const auto& r : host.plugins())
            if (args->plugin.empty() ? r.library_path.has_value() : r.name == args->plugin) chosen.push_back(&r);
        if (!args->plugin.empty() && chosen.empty()) {
            std::string names;
            for (const auto& r : host.plugins()) names += (names.empty() ? "" : ", ") + r.name;
            throw Error(ErrorCode::input, "verify: no plugin named '" + args->plugin + "'; discovered: " + names);
        }
        const bool progress_line = ::isatty(STDERR_FILENO) != 0;  // no escape codes in logs
        const auto timeout = std::chrono::milliseconds(static_cast<long long>(args->timeout * 1000));
        bool failed = false, unusable = false;
        json out = json::array();
        for (const PluginRecord* record : chosen) {
            auto refuse = [&](int code, const std::string& why) {
                std::cerr << "capsule verify: " << record->name << ": " << why << "\n";
                // Without --plugin a plugin that cannot run here is skipped; it does not fail the run.
                const bool skipped = code == kProbeFailed && args->plugin.empty();
                if (args->json)
                    out.push_back({{"plugin", record->name}, {"exit_code", code}, {"skipped", skipped}, {"error", why}});
                (code == kProbeFailed ? unusable : failed) = true;
            };
            if (!record->library_path) {
                refuse(kProbeFailed, "no library to verify (" + record->status_text() + ")");
                continue;
            }
            const fs::path dir = evidence_dir_for(host, *record, !options.evidence_dirs.empty());
            auto outcome = verify_isolated(host, *record, timeout, progress_line);
            if (!outcome.record) {
                refuse(outcome.exit_code, outcome.message);
                continue;
            }
            const fs::path file = write_evidence_record(*outcome.record, dir);
            failed = failed || !outcome.record->passed();
            if (args->json) {
                json j = evidence_record_to_json(*outcome.record);
                j["id"] = outcome.record->id();
                j["file"] = file.string();
                out.push_back(std::move(j));
            } else {
                print_record(*outcome.record, file);
            }
        }
        if (args->json) std::cout << out.dump(2) << "\n";
        // A failure wins over a device that is absent; without --plugin, absent devices only skip.
        if (failed) return int(kOther);
        return int(unusable && !args->plugin.empty() ? kProbeFailed : kOk);
    };
}

}  // namespace capsule::cli
