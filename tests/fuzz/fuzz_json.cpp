// libFuzzer target: the core's JSON reader, differentially. parse_json_text reads with simdjson
// first and falls back to the strict nlohmann reader (parse_json_text_strict) for anything it does
// not read exactly as that reader would; both must give the same document, value types included,
// or the same error message, for every text.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "json_reader.hpp"

using nlohmann::json;

namespace {

/// Equal values of equal types (nlohmann's == treats 1 and 1u, or 1 and 1.0, as equal).
bool same(const json& a, const json& b) {
    if (a.type() != b.type()) return false;
    if (a.is_object()) {
        if (a.size() != b.size()) return false;
        for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
            if (ia.key() != ib.key() || !same(*ia, *ib)) return false;
        return true;
    }
    if (a.is_array()) {
        if (a.size() != b.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i)
            if (!same(a[i], b[i])) return false;
        return true;
    }
    if (a.is_number_float()) {  // bit-identical doubles (-0.0 and 0.0 differ)
        const double x = a.get<double>(), y = b.get<double>();
        return std::signbit(x) == std::signbit(y) && (x == y || (x != x && y != y));
    }
    return a == b;
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
    const bool agree = fast.doc ? strict.doc && same(*fast.doc, *strict.doc)
                                : !strict.doc && fast.error == strict.error;
    if (!agree) {
        std::fprintf(stderr, "fuzz: the fast and strict JSON readers disagree:\n%s\n---\n%s\n",
                     fast.doc ? fast.doc->dump().c_str() : fast.error.c_str(),
                     strict.doc ? strict.doc->dump().c_str() : strict.error.c_str());
        std::abort();
    }
    return 0;
}
