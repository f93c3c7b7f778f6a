// Checking plugin files on disk and loading one plugin library against its manifest. Internal to
// the core.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "capsule/evidence.hpp"
#include "capsule/registry.hpp"

namespace capsule::detail {

/// Trust on disk (the rule OpenSSH's StrictModes applies): the reason `path` must not be used for
/// plugin code or manifests, or "" when it may. Refused: a path that cannot be resolved; a file
/// or directory, on the path as given or after resolving symbolic links, owned by a user other
/// than root and the current user; the file itself or the directory that holds it group- or
/// world-writable; any higher ancestor group- or world-writable without the sticky bit (with it,
/// as on /tmp, nobody else can rename or replace the entries below). `what` names the file in the
/// message ("manifest", "library", "plugin directory"). `levels_above_file`: 0 judges the file
/// `path`; 1 a directory as the files it holds are judged (it is their holder, its parent an
/// ancestor); 2 a directory two levels above such files (an ancestor: a sticky one is fine).
std::string untrusted_path_reason(const std::filesystem::path& path, std::string_view what,
                                  int levels_above_file = 0);

/// SHA-256 of a file, lowercase hex (sha256.hpp). Raises Error(input) when unreadable.
std::string sha256_file(const std::filesystem::path& path);
/// SHA-256 of the whole file open at `fd` (read with pread from offset 0); `label` names it in
/// errors. Raises Error(input) when unreadable.
std::string sha256_fd(int fd, const std::string& label);

/// One plugin's library: where it is, the hashes it may have, and the outcome of opening it in
/// this process, filled once.
struct LibraryCell {
    std::filesystem::path path;  // resolved, under the manifest's directory
    /// The hash at discovery, taken only when hashes are pinned or asked for (find_library); the
    /// file must still hash to it when opened. Empty otherwise: the library is hashed once, when
    /// it is opened.
    std::string sha256;
    std::optional<std::set<std::string>> trusted_sha256;  // PluginHostOptions::trusted_sha256
    std::shared_ptr<const PluginManifest> manifest;  // the record's
    std::once_flag once;
    LoadOutcome outcome;
};

/// What the `verified` policy found for each plugin's library, filled once per plugin (hashing a
/// library and reading its record is file I/O the gate must not repeat per node).
struct EvidenceCache {
    struct Entry {
        std::string sha256;                   // of the library; empty when it could not be read
        std::optional<EvidenceRecord> record; // the passing or failing record, if found
        std::string record_id;                // record->id(), computed once (it hashes the record)
        std::string problem;                  // why there is no record
    };
    std::mutex mutex;
    std::map<std::string, Entry> by_plugin;
};

/// A plugin's library as discovery found it: `cell` is null when it could not be located;
/// `refusal` says why it may not load (it could not be located, or its hash is not pinned).
struct LibraryLookup {
    std::shared_ptr<LibraryCell> cell;
    std::string refusal;
};
/// Locates the library of `manifest` (locate_library) and hashes it when `hash` is set or hashes
/// are pinned (`trusted`), refusing an unpinned one. Never throws.
LibraryLookup find_library(std::shared_ptr<const PluginManifest> manifest, bool hash,
                           const std::optional<std::set<std::string>>& trusted);

/// Resolves `manifest`'s library (beside the manifest, trusted on disk, under the manifest's
/// directory after resolving links). Returns the reason for refusal, or "" and fills `path`.
/// Does not read the file: hashing a library costs about 1 ms per MB, so it is left to the
/// moment the library is opened or its hash is asked for.
std::string locate_library(const PluginManifest& manifest, std::filesystem::path& path);

/// The reason a library whose SHA-256 is `sha256` may not load under `trusted` (pinned hashes;
/// nullopt: no pinning), or "".
std::string pinned_hash_reason(const std::filesystem::path& library, const std::string& sha256,
                               const std::optional<std::set<std::string>>& trusted);

/// Opens the cell's library in this process after checking it on disk again and hashing it
/// (LoadedPlugin::sha256), checks its table against the manifest and calls init. Never throws.
LoadOutcome open_library(const LibraryCell& cell);

/// The text of a failed call: the plugin's message, or, when it left the status empty, the code
/// it returned. `code` is the function's return value.
std::string status_text(int32_t code, const capsule_status& status);

}  // namespace capsule::detail
