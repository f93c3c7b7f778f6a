// Plugin discovery and capsule registries (DESIGN.md sections 2 and 4).
//
// The PluginHost discovers plugin manifests in directories (next to the binaries, then each
// directory of CAPSULE_PLUGIN_PATH, then explicit paths) and records each plugin's status. A
// plugin that fails (bad JSON, ABI major mismatch, duplicate plugin or capsule name) is recorded
// with its reason and skipped; the others still load. After discovery the host is immutable: it is
// the only global state of a running program, and registries are pure functions of it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capsule/manifest.hpp"

namespace capsule {

enum class PluginStatus : std::uint8_t { loaded, stub, failed };
template <> struct Spellings<PluginStatus> {
    static constexpr std::string_view kind = "plugin status";
    static const std::array<std::pair<PluginStatus, std::string_view>, 3> values;
};

/// One discovered plugin.
struct PluginRecord {
    std::filesystem::path manifest_path;
    std::string name;                         // from the manifest, else the file name
    std::optional<PluginManifest> manifest;   // absent when the manifest could not be read
    PluginStatus status = PluginStatus::failed;
    std::string failure;                      // reason, when status == failed

    /// `loaded`, `stub` or `failed: <reason>`.
    std::string status_text() const;
};

using CapsuleRef = std::shared_ptr<const KernelCapsule>;

/// An ordered capsule list: plugins in priority order (higher first, ties by plugin name), then
/// each plugin's declaration order. Registry order is meaningful to the planner.
struct CapsuleRegistry {
    std::string mode;
    std::vector<CapsuleRef> capsules;
    std::vector<std::string> plugin_of;  // plugin name per capsule, same index
};

/// Where to look for plugins, in order.
struct PluginSearchPath {
    std::vector<std::filesystem::path> entries;  // directories or manifest files

    /// `<exe_dir>/plugins`, then each directory of `env_value` (colon-separated, the value of
    /// CAPSULE_PLUGIN_PATH; may be null), then `explicit_paths`.
    static PluginSearchPath standard(const std::filesystem::path& exe_dir, const char* env_value,
                                     const std::vector<std::filesystem::path>& explicit_paths);
};

class PluginHost {
public:
    /// Discovers every `*.capsule.json` under the entries of `search` (a directory is scanned, not
    /// recursively, in file-name order; a file is read directly). A missing directory is skipped.
    static PluginHost discover(const PluginSearchPath& search);
    /// A host over manifests already in memory (tests, embedding programs). Validation as in
    /// discover.
    static PluginHost from_manifests(std::vector<PluginManifest> manifests);

    const std::vector<PluginRecord>& plugins() const { return plugins_; }
    /// The registry of `mode`: capsules of every usable plugin that joins the mode.
    CapsuleRegistry registry(std::string_view mode) const;

private:
    void add(PluginRecord record);
    std::vector<PluginRecord> plugins_;
    std::vector<std::vector<CapsuleRef>> capsules_;  // per plugin, same index as plugins_
};

}  // namespace capsule
