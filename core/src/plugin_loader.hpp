// Loading one plugin library and checking it against its manifest. Internal to the core.
#pragma once

#include <set>
#include <string>

#include "capsule/registry.hpp"

namespace capsule::detail {

/// Refuses a world-writable file or directory (plugins are code: anyone could replace them).
/// Returns the reason, or "" when the path is acceptable.
std::string world_writable_reason(const std::filesystem::path& path);

/// SHA-256 of a file, lowercase hex (OpenSSL EVP). Raises InputError when unreadable.
std::string sha256_file(const std::filesystem::path& path);

/// Loads `record`'s library (its manifest must declare one) and fills library_path, sha256,
/// probe and loaded; on any failure sets status failed with the reason. Never throws.
void load_plugin_library(PluginRecord& record, const PluginHostOptions& options);

}  // namespace capsule::detail
