// Reading and checking the table a plugin library returns from `capsule_plugin_entry`
// (capsule/plugin_abi.h): what the host does when it opens a library, and what the manifest
// generator (tools/manifest_gen) uses so that the manifests it writes are ones the host accepts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "capsule/manifest.hpp"
#include "capsule/plugin_abi.h"

namespace capsule {

/// The largest distance between kernel entries a host accepts: far above any ABI 1.x entry
/// (sizeof(capsule_kernel) is under 100 bytes), low enough that a garbage size is caught.
inline constexpr std::size_t kMaxKernelEntrySize = 4096;

/// Copies the table's kernel entries, each with the fields both sides know (read at the table's
/// `kernel_entry_size`, ABI 1.1; fields a newer plugin appended are skipped, unknown ones zeroed).
/// Refuses, with `why` set and nothing returned: a table smaller than ABI 1.0's, an entry size
/// below 1.0's or above kMaxKernelEntrySize, more than `max_kernels` entries, an array that is not
/// all mapped memory (checked with mincore before it is read, so a lying size cannot fault the
/// host), and an entry whose struct_size is out of range or which has no capsule name.
std::vector<capsule_kernel> read_kernel_entries(const capsule_plugin* table, std::size_t max_kernels,
                                                std::string& why);

/// Checks the table against `manifest` as the host does when it opens the library (ABI, name,
/// version, device and its device interface, every eager/test-only capsule implemented once and
/// nothing else, a forward kernel each, release beside prepare) and fills `kernels`. Returns the
/// reason for refusal, or "".
std::string check_plugin_table(const capsule_plugin* table, const PluginManifest& manifest,
                               std::vector<capsule_kernel>& kernels);

}  // namespace capsule
