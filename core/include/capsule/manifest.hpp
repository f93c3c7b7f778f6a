// Capsule plugin manifests (`<name>.capsule.json`, DESIGN.md section 4; schema in
// docs/plugins.md).
//
// A manifest can be read, listed and planned with without running any vendor code. Parsing is
// strict: unknown keys, wrong types, unknown spellings, a capsule whose device or provider the
// manifest does not declare, and duplicate capsule names are errors that give the file, the JSON
// path and the reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "capsule/capsule.hpp"
#include "capsule/plugin_abi.h"

namespace capsule {

/// Plugin C ABI version. A different major is refused; a newer minor is accepted.
struct AbiVersion {
    std::uint32_t major = 1;
    std::uint32_t minor = 0;
    bool operator==(const AbiVersion&) const = default;
};
/// The ABI version this host implements.
inline constexpr AbiVersion kHostAbiVersion{CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR};
/// `1.0`
std::string to_string(const AbiVersion& version);

/// How a plugin takes the shared capsule conformance suite (`capsule verify`, DESIGN.md section
/// 10): tolerance floors per op and the cases it does not support, each with a reason. Optional
/// manifest key `conformance` (docs/plugins.md).
struct ConformanceDeclaration {
    /// A case of one of `ops` (every op when empty) is compared with at least these tolerances:
    /// |got - want| <= atol + rtol * |want|. The first matching entry applies.
    struct Tolerance {
        std::vector<BackendOp> ops;
        double rtol = 0;
        double atol = 0;
    };
    /// Cases the plugin does not run: every given field must match (`case_name` exactly; `op`;
    /// `dtype`, a float input of that dtype; `attribute` NAME=VALUE, a bool or integer
    /// attribute; `error_cases`, a case that expects a refusal). Such cases are reported with
    /// `reason`, not run.
    struct Unsupported {
        std::string case_name;
        std::optional<BackendOp> op;
        std::string dtype;
        std::string attribute;
        bool error_cases = false;
        std::string reason;
    };
    std::vector<Tolerance> tolerances;
    std::vector<Unsupported> unsupported;
};

struct PluginManifest {
    std::string name;
    std::string version;
    AbiVersion abi;
    std::optional<std::string> library;  // file name relative to the manifest; none for stubs
    Device device = Device::cpu;
    std::vector<Provider> providers;
    std::vector<std::string> registry_modes;
    std::int64_t priority = 0;  // higher priority plugins come first in a registry
    std::vector<KernelCapsule> capsules;
    ConformanceDeclaration conformance;
    std::filesystem::path source;  // manifest file (empty when parsed from text)

    /// A stub declares no library: it can be listed and planned with, never executed.
    bool is_stub() const { return !library.has_value(); }
};

/// Parses a manifest document. Raises Error(input) `<source>: <json path>: <reason>`, among others
/// when a capsule without a kernel (a stub manifest's, or runtime planner-only / not-wired) claims
/// test-suite or fuzz-oracle evidence: such evidence is earned by running a kernel.
PluginManifest parse_manifest(std::string_view json_text, const std::filesystem::path& source);
/// Reads and parses a manifest file; raises Error(input) when unreadable or malformed.
PluginManifest load_manifest(const std::filesystem::path& path);

/// JSON form of a capsule, as used in manifests and `capsule capsules --json`.
nlohmann::json capsule_to_json(const KernelCapsule& capsule);
/// JSON form of a conformance declaration, as in a manifest's `conformance` key.
nlohmann::json conformance_to_json(const ConformanceDeclaration& declaration);
/// JSON form of a whole manifest (round-trips through parse_manifest).
nlohmann::json manifest_to_json(const PluginManifest& manifest);

/// Registry modes are open-ended names (`default`, `with-libtorch`, ...): lowercase letters,
/// digits and '-'. Raises Error(input) otherwise.
void validate_registry_mode(std::string_view mode);

}  // namespace capsule
