// `capsule verify [--plugin NAME] [--json]`: runs the shared conformance suite against plugin
// libraries on this machine and writes one evidence record per library (DESIGN.md section 10,
// "Evidence is earned").
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "conformance/verify.hpp"
#include "context.hpp"

namespace capsule::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct VerifyArgs {
    std::string plugin;
    bool json = false;
};

/// Where a record of `record`'s library goes: the first --evidence-dir, else `evidence/` beside
/// its manifest when that can be written, else the user's cache directory.
fs::path evidence_dir_for(const PluginHost& host, const PluginRecord& record, bool explicit_dirs) {
    const auto dirs = host.evidence_dirs(record);
    if (explicit_dirs) return dirs.front();
    const fs::path beside = dirs.front();
    std::error_code ec;
    const fs::path existing = fs::exists(beside, ec) ? beside : beside.parent_path();
    if (::access(existing.c_str(), W_OK) == 0) return beside;
    if (dirs.size() > 1) return dirs[1];
    throw Error(ErrorCode::input, beside.string() + " is not writable and no user cache directory "
                                  "is known (HOME unset): give --evidence-dir");
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
        "run the shared conformance suite against plugin libraries on this machine and write an "
        "evidence record per library (read by the `verified` acceptance policy); exits 1 when a "
        "capsule failed, 5 when a plugin cannot run here");
    auto args = std::make_shared<VerifyArgs>();
    sub->add_option("--plugin", args->plugin, "verify only this plugin (default: every plugin with a library)");
    sub->add_flag("--json", args->json, "print the evidence records as JSON");
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
        int exit_code = kOk;
        json out = json::array();
        for (const PluginRecord* record : chosen) {
            // A plugin that cannot run here earns nothing: its status says why.
            auto refuse = [&](const std::string& why) {
                std::cerr << "capsule verify: " << record->name << ": " << why << "\n";
                if (args->json) out.push_back({{"plugin", record->name}, {"error", why}});
                exit_code = std::max(exit_code, int(kProbeFailed));
            };
            if (!record->library_path) {
                refuse("no library to verify (" + record->status_text() + ")");
                continue;
            }
            const auto loaded = host.library(*record);
            if (!loaded.plugin) {
                refuse("cannot be loaded: " + loaded.failure);
                continue;
            }
            if (auto probe = loaded.plugin->probe(); !probe.usable) {
                refuse("skipped: its device is not usable here: " + probe.reason);
                continue;
            }
            const std::string driver = record->manifest->device == Device::cpu
                                           ? conformance::describe_cpu()
                                           : std::string(to_string(record->manifest->device)) + " (probe: usable)";
            auto evidence = conformance::verify_plugin(
                *record, *loaded.plugin, driver, [&](std::string_view capsule, std::size_t i, std::size_t n) {
                    if (!progress_line) return;
                    std::cerr << "\rverify " << record->name << ": " << (i + 1) << "/" << n << " " << capsule
                              << "\033[K" << std::flush;
                });
            if (progress_line) std::cerr << "\r\033[K" << std::flush;
            const fs::path file = write_evidence_record(
                evidence, evidence_dir_for(host, *record, !options.evidence_dirs.empty()));
            if (!evidence.passed()) exit_code = std::max(exit_code, int(kOther));
            if (args->json) {
                json j = evidence_record_to_json(evidence);
                j["id"] = evidence.id();
                j["file"] = file.string();
                out.push_back(std::move(j));
            } else {
                print_record(evidence, file);
            }
        }
        if (args->json) std::cout << out.dump(2) << "\n";
        return exit_code;
    };
}

}  // namespace capsule::cli
