// The strict JSON reader every document of the project goes through (manifests, profiles, graphs,
// evidence records, lockfiles, manifest declarations), for tools built on the core.
#pragma once

#include <filesystem>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace capsule {

/// Parses one JSON document. Raises Error(input) `<source>: ...` for malformed JSON, a duplicate
/// key in an object (the key and its JSON path named: a later duplicate would otherwise silently
/// win), nesting deeper than the reader allows, and a number out of the range of a double.
nlohmann::json parse_json_document(std::string_view text, const std::filesystem::path& source);

}  // namespace capsule
