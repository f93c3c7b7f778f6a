// Strict reading of JSON documents (manifests, profiles) with errors that name the file, the JSON
// path and the reason. Internal to the core.
#pragma once

#include <cmath>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "capsule/vocabulary.hpp"

namespace capsule::detail {

/// A position in a document: the source file and a JSON path such as `$.capsules[3].op`. The
/// path is spelled only when an error names it: a cursor holds its parent's path as a shared
/// chain of keys and indices (every manifest read on start-up goes through here).
class JsonCursor {
public:
    JsonCursor(const nlohmann::json& value, std::string source)
        : value_(value), source_(std::make_shared<const std::string>(std::move(source))) {}

    const nlohmann::json& value() const { return value_; }
    /// The JSON path of this value, e.g. `$.capsules[3].op`.
    std::string path() const {
        std::string out;
        spell(segment_.get(), out);
        return "$" + out;
    }

    [[noreturn]] void fail(const std::string& reason) const {
        throw Error(ErrorCode::input, *source_ + ": " + path() + ": " + reason);
    }

    /// Requires an object whose keys are all in `allowed`; returns *this.
    const JsonCursor& object(std::initializer_list<std::string_view> allowed) const {
        if (!value_.is_object()) fail("expected an object, got " + type_name());
        for (const auto& [key, _] : value_.items()) {
            bool known = false;
            for (auto a : allowed) known = known || a == key;
            if (!known) {
                std::string list;
                for (auto a : allowed) list += std::string(list.empty() ? "" : ", ") + std::string(a);
                fail("unknown key '" + key + "'; valid keys: " + list);
            }
        }
        return *this;
    }

    bool has(std::string_view key) const { return value_.contains(key); }

    JsonCursor at(std::string_view key) const {
        const auto it = value_.find(key);
        if (it == value_.end()) fail("missing required key '" + std::string(key) + "'");
        return JsonCursor(*it, *this, Segment{segment_, true, std::string(key), 0});
    }
    JsonCursor at(std::size_t index) const {
        return JsonCursor(value_.at(index), *this, Segment{segment_, false, {}, index});
    }

    std::string string() const {
        if (!value_.is_string()) fail("expected a string, got " + type_name());
        return value_.get<std::string>();
    }
    /// A string that is not empty and not only whitespace.
    std::string nonempty_string() const {
        auto text = string();
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) fail("must not be empty");
        return text;
    }
    bool boolean() const {
        if (!value_.is_boolean()) fail("expected true or false, got " + type_name());
        return value_.get<bool>();
    }
    std::int64_t integer() const {
        if (!value_.is_number_integer()) fail("expected an integer, got " + type_name());
        if (value_.is_number_unsigned() &&
            value_.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
            fail("integer " + value_.dump() + " is out of range (at most 2^63 - 1)");
        return value_.get<std::int64_t>();
    }
    /// A finite number (integer or floating point).
    double number() const {
        if (!value_.is_number()) fail("expected a number, got " + type_name());
        const double v = value_.get<double>();
        if (!std::isfinite(v)) fail("expected a finite number, got " + value_.dump());
        return v;
    }
    std::size_t array_size() const {
        if (!value_.is_array()) fail("expected an array, got " + type_name());
        return value_.size();
    }

    /// Reads a vocabulary spelling; an unknown one fails with the list of valid spellings.
    template <typename E>
    E spelling() const {
        auto text = string();
        try {
            return parse<E>(text);
        } catch (const Error& e) {
            fail(e.what());
        }
    }

    std::string type_name() const { return value_.type_name(); }

private:
    /// One step of the path: the member `key` of an object, or the element `index` of an array.
    struct Segment {
        std::shared_ptr<const Segment> parent;
        bool is_member;
        std::string key;
        std::size_t index;
    };
    JsonCursor(const nlohmann::json& value, const JsonCursor& parent, Segment segment)
        : value_(value), source_(parent.source_),
          segment_(std::make_shared<const Segment>(std::move(segment))) {}
    static void spell(const Segment* s, std::string& out) {
        if (!s) return;
        spell(s->parent.get(), out);
        out += s->is_member ? "." + s->key : "[" + std::to_string(s->index) + "]";
    }

    const nlohmann::json& value_;
    std::shared_ptr<const std::string> source_;
    std::shared_ptr<const Segment> segment_;  // null at the root
};

/// The one strict JSON reader of the core: every document the runtime reads (manifests, profiles,
/// graphs, safetensors headers) goes through it. Unlike nlohmann::json::parse it refuses an object
/// that repeats a key (nlohmann keeps the last one silently). Raises Error(input) naming `source`:
/// `<source>: malformed JSON: <parser message>` for a syntax error,
/// `<source>: $.path.key: duplicate key 'key'` for a repeated key, and
/// `<source>: $.path: number overflow: '<token>' is outside the range of a double` for a number
/// such as 1e400. Never raises a nlohmann exception. Linear in the size of the text.
nlohmann::json parse_json_text(std::string_view text, const std::string& source);
/// parse_json_text without its simdjson fast path: nlohmann's SAX parser alone. The two give the
/// same document or the same error for every text (tests/fuzz/fuzz_json.cpp checks it).
nlohmann::json parse_json_text_strict(std::string_view text, const std::string& source);

/// A top-level array read element by element: for a document that is an object with member
/// `key` holding an array, `sink(element, index)` receives each element as soon as it is
/// complete, and the element is then dropped, so that the document (which keeps an empty array
/// there) never holds them all. Used for the node list of large graphs. `sink` must not throw.
struct StreamedArray {
    std::string_view key;
    std::function<void(const nlohmann::json& element, std::size_t index)> sink;
};
/// parse_json_text, streaming the elements of `streamed.key` into `streamed.sink`. The same
/// errors; elements before a syntax error may already have been delivered.
nlohmann::json parse_json_text(std::string_view text, const std::string& source,
                               const StreamedArray& streamed);

/// Reads a whole file; raises Error(input) naming the path when it cannot be read.
std::string read_text_file(const std::filesystem::path& path, std::string_view what);

}  // namespace capsule::detail
