// The plugin host: discovery, lazy loading and capsule registries (DESIGN.md sections 2, 4, 10).
//
// The PluginHost discovers plugin manifests in directories (next to the binaries, then each
// directory of CAPSULE_PLUGIN_PATH, then explicit paths). Discovery reads manifests and checks the
// files on disk (trust on disk: no group- or world-writable file or ancestor directory, no file
// owned by another non-root user, a library that resolves under its manifest's directory); it runs
// no vendor code. A plugin's library is opened with Boost.DLL (local symbols, immediate binding),
// checked against its manifest, initialised and probed only when a session needs it
// (PluginHost::library), or in a child process by probe_isolated, so that a crashing or hanging
// probe cannot take the host down. A plugin that fails (bad JSON, schema error, ABI mismatch,
// untrusted file or directory, unpinned hash, loader error, missing entry symbol,
// manifest/library mismatch, duplicate plugin or capsule name, init error) is recorded with its
// reason and skipped; the others still load; nothing crashes. The manifests and registries are
// immutable after discovery; the only state that changes later is each library's load cell,
// which is filled once under a lock.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "capsule/capsule_registry.hpp"
#include "capsule/evidence.hpp"
#include "capsule/manifest.hpp"
#include "capsule/plugin_abi.h"

namespace capsule {

/// `available`: manifest valid, library found and trusted on disk, not opened yet (loading is
/// lazy); `loaded`: library opened, checked and initialised; `stub`: manifest only (no library,
/// or a manifests-only host); `failed`: refused, with a reason.
enum class PluginStatus : std::uint8_t { available, loaded, stub, failed };
template <> struct Spellings<PluginStatus> {
    static constexpr std::string_view kind = "plugin status";
    static const std::array<std::pair<PluginStatus, std::string_view>, 4> values;
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
    /// The table's kernel entries, read with the table's entry size (ABI 1.1) and copied with the
    /// fields this host knows; fields a newer plugin appended are skipped, unknown ones zeroed.
    std::vector<capsule_kernel> kernels;
    /// The compiled-groups extension (ABI 1.1), or nullptr when the plugin offers none.
    const capsule_compiled_groups_extension* compiled_groups = nullptr;
    /// The group-autograd extension (ABI 1.1, VJP mode external-autograd), or nullptr.
    const capsule_group_autograd_extension* group_autograd = nullptr;
    bool initialized = false;  // init succeeded: shutdown is called before unloading
    std::string sha256;        // of the library file when it was opened, lowercase hex

    LoadedPlugin() = default;
    LoadedPlugin(const LoadedPlugin&) = delete;
    LoadedPlugin& operator=(const LoadedPlugin&) = delete;
    ~LoadedPlugin();

    /// The kernel entry for a capsule declared by the manifest, or nullptr.
    const capsule_kernel* kernel(std::string_view capsule_name) const;
    /// Calls the plugin's probe. A probe that throws a C++ exception across the C ABI is reported
    /// as unusable with the exception's text.
    ProbeResult probe() const;
};

/// The outcome of opening a plugin's library in this process: the plugin, or why it failed.
struct LoadOutcome {
    std::shared_ptr<const LoadedPlugin> plugin;  // set on success
    std::string failure;                         // the reason, on failure
};

namespace detail {
struct LibraryCell;    // one plugin's lazily filled LoadOutcome (plugin_loader.cpp)
struct LibraryLookup;  // a plugin's library located (and perhaps hashed) on a discovery thread
struct EvidenceCache;  // library hashes and evidence records read for the gate (evidence.cpp)
}

/// One discovered plugin.
struct PluginRecord {
    std::filesystem::path manifest_path;
    std::string name;                         // from the manifest, else the file name
    /// Absent when the manifest could not be read. Shared, never modified after discovery: the
    /// registry's capsules and the library loader point into it (no copy of its capsules).
    std::shared_ptr<const PluginManifest> manifest;
    PluginStatus status = PluginStatus::failed;
    std::string failure;                      // reason, when status == failed
    std::optional<std::filesystem::path> library_path;  // resolved library file, if declared
    /// SHA-256 of the library file, lowercase hex, taken at discovery only when hashes are pinned
    /// (PluginHostOptions::trusted_sha256) or asked for (hash_libraries); otherwise empty: see
    /// PluginHost::library_sha256 and LoadedPlugin::sha256.
    std::string sha256;
    /// Probe result, when the library was loaded eagerly or probed (probe_isolated); absent for a
    /// library that was not opened.
    std::optional<ProbeResult> probe;
    std::shared_ptr<detail::LibraryCell> library_cell;  // set for plugins with a library

    /// `available`, `loaded`, `stub` or `failed: <reason>`.
    std::string status_text() const;
};

/// Where to look for plugins, in order.
struct PluginSearchPath {
    std::vector<std::filesystem::path> entries;  // directories or manifest files

    /// `<exe_dir>/plugins` (the build tree), `<exe_dir>/../lib/capsule/plugins` (an installed
    /// tree; the library directory the package was configured with), then each directory of
    /// `env_value` (colon-separated, the value of CAPSULE_PLUGIN_PATH; may be null), then
    /// `explicit_paths`. An empty `exe_dir` adds no directory beside an executable.
    static PluginSearchPath standard(const std::filesystem::path& exe_dir, const char* env_value,
                                     const std::vector<std::filesystem::path>& explicit_paths);
};

/// When plugin libraries are opened.
enum class LoadPolicy : std::uint8_t {
    /// Never: every plugin is a `stub` (listed, audited and planned with, never executed).
    manifests_only,
    /// When a session (or PluginHost::library) first needs the library. The default.
    lazy,
    /// During discovery, in this process: every library is opened, checked, initialised and
    /// probed, and the records show `loaded` or `failed` (for embedders that want to fail early).
    eager,
};

/// Loading policy.
struct PluginHostOptions {
    LoadPolicy load = LoadPolicy::lazy;
    /// When set, only libraries whose SHA-256 (lowercase hex) is listed may load; an empty set
    /// refuses every library.
    std::optional<std::set<std::string>> trusted_sha256;
    /// Where the `verified` policy looks for `capsule verify` evidence records, in order; empty:
    /// each plugin's default_evidence_dirs (capsule/evidence.hpp).
    std::vector<std::filesystem::path> evidence_dirs;
    /// Hash every library at discovery (PluginRecord::sha256), on the threads that read the
    /// manifests, for listings that show the hashes (`capsule plugins`). Otherwise a library is
    /// hashed at discovery only when hashes are pinned, and else when it is opened.
    bool hash_libraries = false;
};

/// Reads pinned hashes in `sha256sum` output format (`<hex>  <file name>` per line; `#` starts a
/// comment). Raises Error(input) naming the file and line of a malformed entry.
std::set<std::string> read_trusted_hashes(const std::filesystem::path& path);

class PluginHost : public RegistrySource {
public:
    /// Discovers every `*.capsule.json` under the entries of `search` (a directory is scanned, not
    /// recursively, in file-name order; a file is read directly). A missing directory is skipped.
    static PluginHost discover(const PluginSearchPath& search, const PluginHostOptions& options = {});
    /// A host over manifests already in memory (tests, embedding programs). Validation and
    /// loading as in discover; a library is resolved beside the manifest's `source`.
    static PluginHost from_manifests(std::vector<PluginManifest> manifests,
                                     const PluginHostOptions& options = {});

    const std::vector<PluginRecord>& plugins() const { return plugins_; }
    /// The registry of `mode`: capsules of every plugin that joins the mode and was not refused
    /// at discovery, plus the refused plugins (CapsuleRegistry::failed_plugins).
    CapsuleRegistry registry(std::string_view mode) const override;
    /// The plugin that declares capsule `name` and was not refused at discovery, or nullptr.
    const PluginRecord* plugin_of(std::string_view capsule_name) const;

    /// What the evidence record of the library of the plugin declaring `capsule` (found by the
    /// library's SHA-256 in the evidence directories) says about it. Each plugin's records are
    /// looked up once per host; its library is hashed only when a record file of that plugin
    /// exists. Never throws; thread-safe.
    CapsuleVerification verification(const KernelCapsule& capsule) const;
    /// The `verified` policy's check (RegistrySource::unverified_evidence): nullopt when
    /// `verification` says verified, else its detail.
    std::optional<std::string> unverified_evidence(const KernelCapsule& capsule) const override;
    /// The evidence directories searched for `record`'s evidence (PluginHostOptions::evidence_dirs
    /// or the defaults beside its manifest).
    std::vector<std::filesystem::path> evidence_dirs(const PluginRecord& record) const;

    /// SHA-256 of `record`'s library file (lowercase hex): the one taken at discovery, else read
    /// from the file now (about 1 ms per MB); "" when the plugin has no library. Raises
    /// Error(input) when the file cannot be read.
    std::string library_sha256(const PluginRecord& record) const;

    /// Opens `record`'s library in this process once (thread-safe; later calls return the same
    /// outcome): resolves and re-checks the file on disk, hashes it (LoadedPlugin::sha256) and,
    /// with pinned hashes, requires the hash to be pinned and equal to the one taken at discovery,
    /// loads it, checks its table against the manifest and calls its init. Never throws; a stub,
    /// a refused plugin or a manifests-only host gives a failure.
    LoadOutcome library(const PluginRecord& record) const;

    /// Opens, checks, initialises and probes `record`'s library in a child process and reports
    /// what happened there, so that a probe that crashes or never returns cannot take the host
    /// down: status `loaded` with the probe result, or `failed` with the load failure,
    /// `crashed (signal N)` or `timed out after N s`. The library is not mapped into this
    /// process. Stubs and plugins refused at discovery are returned unchanged.
    PluginRecord probe_isolated(const PluginRecord& record, std::chrono::milliseconds timeout) const;

private:
    /// Adds a discovered record after the checks that need the other plugins; `found` is its
    /// library as a discovery thread located it (null: locate it here).
    void add(PluginRecord record, detail::LibraryLookup* found = nullptr);
    PluginHostOptions options_;
    std::vector<PluginRecord> plugins_;
    std::vector<std::vector<CapsuleRef>> capsules_;  // per plugin, same index as plugins_
    std::unordered_map<std::string, std::size_t> plugin_index_of_capsule_;
    std::shared_ptr<detail::EvidenceCache> evidence_;
};

}  // namespace capsule
