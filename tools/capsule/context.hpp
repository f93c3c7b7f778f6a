// What every `capsule` subcommand shares: global options, the discovered plugin host, profile
// lookup, and the mapping of errors to exit codes (DESIGN.md section 7).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "capsule/error.hpp"
#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "capsule/tensor.hpp"

namespace capsule::cli {

/// Exit codes of DESIGN.md section 7: 0 on success, else the ErrorCode of the failure.
enum ExitCode : int {
    kOk = 0,
    kOther = static_cast<int>(ErrorCode::other),
    kBadInput = static_cast<int>(ErrorCode::input),
    kPlanningFailed = static_cast<int>(ErrorCode::planning),
    kGateRejected = static_cast<int>(ErrorCode::gate),
    kProbeFailed = static_cast<int>(ErrorCode::probe),
};

struct GlobalOptions {
    std::vector<std::filesystem::path> plugin_paths;
    std::vector<std::filesystem::path> profile_files;
    std::filesystem::path trusted_hashes;  // sha256sum-format file; empty: no pinning
    std::vector<std::filesystem::path> evidence_dirs;  // empty: each plugin's default directories
    int threads = 0;                       // intra-op threads for kernels; 0: every core
};

class Context {
public:
    explicit Context(const GlobalOptions& options);

    /// The discovered plugins, found on first use (commands that need no plugin never read a
    /// manifest). Discovery runs no vendor code: libraries open when a session needs them.
    const PluginHost& host() const;
    /// Makes host() hash every plugin library while discovering (PluginHostOptions::
    /// hash_libraries), for listings that show the hashes. Call before host().
    void hash_libraries() { hash_libraries_ = true; }
    /// Profiles from --profile-file (first) then built-ins.
    const std::vector<BackendProfile>& profiles() const { return profiles_; }
    /// Looks a profile up by name, or loads it when `name` is a path to a .json file. Raises
    /// Error(input) listing the known names.
    BackendProfile profile(const std::string& name) const;

private:
    /// `prefer:<provider>` lets a plan fall back to other providers; when the preferred
    /// provider's plugin failed to load, says so on stderr (nothing falls back silently).
    const BackendProfile& warn_if_preference_unusable(const BackendProfile& profile) const;

    GlobalOptions options_;
    mutable std::optional<PluginHost> host_;
    bool hash_libraries_ = false;
    std::vector<BackendProfile> profiles_;
};

/// `--input-shape` values: `NAME=1,3,224,224` or `NAME=1x3x224x224` → {NAME, [1, 3, 224, 224]}.
/// Raises Error(input) for a missing `=`, a dimension that is not an integer, or a repeated NAME.
std::map<std::string, Shape> parse_input_shapes(const std::vector<std::string>& specs);

/// .npy has no bfloat16 type: its bits travel as uint16 (numpy's `x.view(np.uint16)`; onnx 1.12's
/// test data does the same). A uint16 tensor given where `declared` is bfloat16 is read as those
/// bits; any other tensor is returned unchanged.
Tensor bfloat16_from_bits(const Tensor& t, DType declared);
/// A bfloat16 tensor's bits as uint16, for .npy; any other tensor unchanged.
Tensor bfloat16_as_bits(const Tensor& t);

/// Directory of the running executable (for plugin discovery next to the binaries).
std::filesystem::path executable_dir();

/// Opens the ONNX import module now rather than at the first ONNX entry point called, for
/// commands that would otherwise report its absence once per model. Raises Error(probe) when it
/// is missing or unusable, Error(input) in a build without ONNX import.
void require_onnx_import();

using Command = std::function<int()>;

// Each registers a subcommand on `app` and returns the function that runs it.
Command add_plugins_command(CLI::App& app, const GlobalOptions& options);
Command add_capsules_command(CLI::App& app, const GlobalOptions& options);
Command add_profiles_command(CLI::App& app, const GlobalOptions& options);
Command add_plan_command(CLI::App& app, const GlobalOptions& options);
Command add_run_command(CLI::App& app, const GlobalOptions& options);
Command add_train_command(CLI::App& app, const GlobalOptions& options);
Command add_eval_command(CLI::App& app, const GlobalOptions& options);
Command add_onnx_test_command(CLI::App& app, const GlobalOptions& options);
Command add_bench_command(CLI::App& app, const GlobalOptions& options);
Command add_verify_command(CLI::App& app, const GlobalOptions& options);
/// `capsule serve ...`: listed in --help; main() runs exec_serve for it before parsing.
Command add_serve_command(CLI::App& app, const GlobalOptions& options);
/// Replaces this process with the capsule-serve executable beside it, passing `argv` (the
/// arguments after `serve`); returns kBadInput, with a message, only when it cannot be run.
int exec_serve(int argc, char** argv);

}  // namespace capsule::cli
