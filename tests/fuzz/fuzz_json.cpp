// libFuzzer target: the core's JSON readers, differentially. parse_json_text reads with simdjson
// first and falls back to the strict nlohmann reader (parse_json_text_strict) for anything it does
// not read exactly as that reader would; both must give the same document, value types included,
// or the same error message, for every text. JsonDocument (simdjson's document read through
// cursors, for manifests, profiles and records) must read the same values or refuse with the same
// message, except that it refuses nesting deeper than JsonDocument::kMaxNesting.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "json_reader.hpp"
#include "json_same.hpp"

using nlohmann::json;

namespace {

using capsule::testing::same;

/// The most brackets open at once outside strings: documents deeper than JsonDocument's limit are
/// compared by outcome only (the comparisons below recurse once per level).
std::size_t nesting_depth(std::string_view text) {
    std::size_t depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char ch : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (ch == '\\') escaped = true;
            else if (ch == '"') in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '[' || ch == '{') {
            deepest = std::max(deepest, ++depth);
        } else if ((ch == ']' || ch == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

struct Outcome {
    std::optional<json> doc;
    std::string error;
};

template <typename F>
Outcome outcome(F&& parse) {
    try {
        return {parse(), ""};
    } catch (const capsule::Error& e) {
        return {std::nullopt, e.what()};
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto fast = outcome([&] { return capsule::detail::parse_json_text(text, "fuzz.json"); });
    const auto strict =
        outcome([&] { return capsule::detail::parse_json_text_strict(text, "fuzz.json"); });
    const bool deep = nesting_depth(text) > capsule::detail::JsonDocument::kMaxNesting;
    const bool agree = fast.doc ? strict.doc && (deep || same(*fast.doc, *strict.doc))
                                : !strict.doc && fast.error == strict.error;
    if (!agree) {
        std::fprintf(stderr, "fuzz: the fast and strict JSON readers disagree:\n%s\n---\n%s\n",
                     fast.doc ? (deep ? "(a deep document)" : fast.doc->dump().c_str()) : fast.error.c_str(),
                     strict.doc ? (deep ? "(a deep document)" : strict.doc->dump().c_str()) : strict.error.c_str());
        std::abort();
    }
    std::string cursor_error;
    bool cursor_agrees = false;
    try {
        const capsule::detail::JsonDocument doc(text, "fuzz.json");
        cursor_agrees = strict.doc && same(doc.root(), *strict.doc);
    } catch (const capsule::Error& e) {
        cursor_error = e.what();
        cursor_agrees = strict.doc ? deep && cursor_error.find("JSON nested deeper than") != std::string::npos
                                   : cursor_error == strict.error;
    }
    if (!cursor_agrees) {
        std::fprintf(stderr, "fuzz: JsonDocument and the strict reader disagree:\n%s\n---\n%s\n",
                     cursor_error.empty() ? "(read other values)" : cursor_error.c_str(),
                     strict.doc ? (deep ? "(a deep document)" : strict.doc->dump().c_str()) : strict.error.c_str());
        std::abort();
    }
    return 0;
}
