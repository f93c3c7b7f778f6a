// The plugin host: discovery, loading and capsule registries (DESIGN.md sections 2 and 4).
//
// The PluginHost discovers plugin manifests in directories (next to the binaries, then each
// directory of CAPSULE_PLUGIN_PATH, then explicit paths), loads each manifest's library with
// Boost.DLL (local symbols, immediate binding), checks it against the manifest, and probes it. A
// plugin that fails (bad JSON, ABI mismatch, world-writable file or directory, unpinned hash,
// loader error, missing entry symbol, manifest/library mismatch, duplicate plugin or capsule name,
// init error) is recorded with its reason and skipped; the others still load; nothing crashes.
// After discovery the host is immutable: it is the only global state of a running program, and
// registries are pure functions of it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "capsule/manifest.hpp"
#include "capsule/plugin_abi.h"

namespace capsule {

enum class PluginStatus : std::uint8_t { loaded, stub, failed };
template <> struct Spellings<PluginStatus> {
    static constexpr std::string_view kind = "plugin status";
    static const std::array<std::pair<PluginStatus, std::string_view>, 3> values;
};

/// Result of a plugin's probe: is its device usable here, and if not, why.
struct ProbeResult {
    bool usable = false;
    std::string reason;  // the plugin's message when not usable
};

/// A plugin library mapped into the process and validated against its manifest. Keeps the
/// library loaded for as long as any copy lives.
struct LoadedPlugin {
    std::shared_ptr<void> library;  // the Boost.DLL handle, type-erased
    const capsule_plugin* table = nullptr;
    bool initialized = false;  // init succeeded: shutdown is called before unloading

    LoadedPlugin() = default;
    LoadedPlugin(const LoadedPlugin&) = delete;
    LoadedPlugin& operator=(const LoadedPlugin&) = delete;
    ~LoadedPlugin();

    /// The kernel entry for a capsule declared by the manifest, or nullptr.
    const capsule_kernel* kernel(std::string_view capsule_name) const;
    /// Calls the plugin's probe.
    ProbeResult probe() const;
};

/// One discovered plugin.
struct PluginRecord {
    std::filesystem::path manifest_path;
    std::string name;                         // from the manifest, else the file name
    std::optional<PluginManifest> manifest;   // absent when the manifest could not be read
    PluginStatus status = PluginStatus::failed;
    std::string failure;                      // reason, when status == failed
    std::optional<std::filesystem::path> library_path;  // resolved library file, if declared
    std::string sha256;                       // of the library file, hex; empty when none
    std::optional<ProbeResult> probe;         // probe at load time (loaded plugins only)
    std::shared_ptr<const LoadedPlugin> loaded;  // set iff status == loaded

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

/// Loading policy.
struct PluginHostOptions {
    /// Load libraries. false: a manifests-only host that runs no vendor code; every plugin is a
    /// `stub` (listed, audited and planned with, never executed).
    bool load_libraries = true;
    /// When set, only libraries whose SHA-256 (lowercase hex) is listed may load; an empty set
    /// refuses every library.
    std::optional<std::set<std::string>> trusted_sha256;
};

/// Reads pinned hashes in `sha256sum` output format (`<hex>  <file name>` per line; `#` starts a
/// comment). Raises InputError naming the file and line of a malformed entry.
std::set<std::string> read_trusted_hashes(const std::filesystem::path& path);

class PluginHost {
public:
    /// Discovers every `*.capsule.json` under the entries of `search` (a directory is scanned, not
    /// recursively, in file-name order; a file is read directly). A missing directory is skipped.
    static PluginHost discover(const PluginSearchPath& search, const PluginHostOptions& options = {});
    /// A host over manifests already in memory (tests, embedding programs). Validation and
    /// loading as in discover; a library is resolved beside the manifest's `source`.
    static PluginHost from_manifests(std::vector<PluginManifest> manifests,
                                     const PluginHostOptions& options = {});

    const std::vector<PluginRecord>& plugins() const { return plugins_; }
    /// The registry of `mode`: capsules of every usable plugin that joins the mode.
    CapsuleRegistry registry(std::string_view mode) const;
    /// The usable plugin that declares capsule `name`, or nullptr.
    const PluginRecord* plugin_of(std::string_view capsule_name) const;

private:
    void add(PluginRecord record, const PluginHostOptions& options);
    std::vector<PluginRecord> plugins_;
    std::vector<std::vector<CapsuleRef>> capsules_;  // per plugin, same index as plugins_
};

}  // namespace capsule
