// Strict reading of JSON documents (manifests, profiles) with errors that name the file, the JSON
// path and the reason. Internal to the core.
#pragma once

#include <array>
#include <cmath>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "capsule/error.hpp"
#include "capsule/vocabulary.hpp"

namespace capsule::detail {

class JsonDocument;

/// A position in a document read through JsonDocument: the value there, and its JSON path such as
/// `$.capsules[3].op` for errors. A cursor holds no memory of its own (it is copied freely: the
/// path's keys point into the document), so reading a manifest allocates only what it keeps.
/// A cursor must not outlive its JsonDocument. Paths deeper than kMaxDepth are spelled with their
/// first kMaxDepth steps and `...`. Every accessor raises Error(input) as
/// `<source>: <path>: <reason>` (fail) when the value is not what it asks for: "expected a string,
/// got number", "missing required key 'op'", "integer 18446744073709551615 is out of range".
class JsonCursor {
public:
    static constexpr std::size_t kMaxDepth = 12;

    /// The JSON path of this value, e.g. `$.capsules[3].op`.
    std::string path() const;
    [[noreturn]] void fail(const std::string& reason) const;

    /// Requires an object whose keys are all in `allowed`; returns *this.
    const JsonCursor& object(std::initializer_list<std::string_view> allowed) const;
    /// Whether this object has member `key` (false for a value that is not an object).
    bool has(std::string_view key) const;
    /// Member `key` of this object; fails when this is not an object or has no such member.
    JsonCursor at(std::string_view key) const;
    /// Member `key` of this object, or nullopt when it has none (or this is not an object).
    std::optional<JsonCursor> find(std::string_view key) const;
    /// Calls `visit(element, index)` for each element of this array, in order (fails when this is
    /// not an array). Linear in the array, unlike indexing element by element.
    template <typename F>
    void each(F&& visit) const {
        std::size_t index = 0;
        for (const auto element : as_array()) {
            visit(child(element, Step{nullptr, index}), index);
            ++index;
        }
    }
    /// Calls `visit(key, value)` for each member of this object, in document order (sorted for a
    /// document JsonDocument re-spelled: callers whose errors name a member visit them sorted).
    template <typename F>
    void each_member(F&& visit) const {
        for (const auto field : as_object()) visit(field.key, child(field.value, member_step(field.key)));
    }
    /// The number of elements of this array (fails when this is not an array).
    std::size_t array_size() const;

    bool is_null() const { return value_.is_null(); }
    bool is_string() const { return value_.is_string(); }
    bool is_object() const { return value_.is_object(); }

    std::string string() const;
    /// A string that is not empty and not only whitespace.
    std::string nonempty_string() const;
    bool boolean() const;
    /// An integer in [-2^63, 2^63 - 1] (not 1.0: a number written with a fraction or exponent is
    /// not an integer here, as in nlohmann::json).
    std::int64_t integer() const;
    /// A finite number (integer or floating point).
    double number() const;
    /// This value as compact JSON text with object keys sorted (nlohmann::json::dump()).
    std::string dump() const;

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

    /// nlohmann::json's name for this value's type: object, array, string, number, boolean, null.
    std::string type_name() const;

private:
    friend class JsonDocument;
    /// One step of the path: the member of an object whose key (in the document) starts at
    /// `key` and has `size` bytes, or, when `key` is null, the element `size` of an array. Small,
    /// because each cursor carries its path's steps.
    struct Step {
        const char* key;
        std::size_t size;
    };
    static Step member_step(std::string_view key) { return Step{key.data(), key.size()}; }
    JsonCursor(simdjson::dom::element value, const std::string* source)
        : value_(value), source_(source) {}
    JsonCursor child(simdjson::dom::element value, Step step) const;
    simdjson::dom::array as_array() const;
    simdjson::dom::object as_object() const;

    simdjson::dom::element value_;
    const std::string* source_;  // the document's source, for errors
    std::array<Step, kMaxDepth> steps_;  // the first min(depth_, kMaxDepth) are set
    std::size_t depth_ = 0;  // may exceed kMaxDepth; only the first kMaxDepth steps are kept
};

/// A document read for JsonCursor, as strictly as parse_json_text: the same texts are accepted
/// (a repeated key, a number outside the range of a double or malformed JSON is an Error(input)
/// naming `source`, with the same message) and the same values are read, except that nesting
/// deeper than kMaxNesting is an Error(input) (no manifest, profile or record comes near it).
/// simdjson holds it: about ten times faster than nlohmann on the plugin manifests every command
/// reads, and reading it allocates nothing. Not copyable: cursors point into it. It must be destroyed on the thread
/// that made it (it may hold that thread's parser).
class JsonDocument {
public:
    /// The deepest nesting read (simdjson's default); a deeper document is an Error(input).
    static constexpr std::size_t kMaxNesting = simdjson::DEFAULT_MAX_DEPTH;

    JsonDocument(std::string_view text, std::string source);
    ~JsonDocument() {
        if (borrowed_) *borrowed_ = false;
    }
    JsonDocument(const JsonDocument&) = delete;
    JsonDocument& operator=(const JsonDocument&) = delete;

    JsonCursor root() const { return JsonCursor(root_, &source_); }

private:
    std::string source_;
    bool* borrowed_ = nullptr;  // the thread parser's busy flag, when the document is its own
    simdjson::dom::document own_;  // used when the thread's parser was busy
    simdjson::dom::element root_;
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
/// read_text_file into `text` (replacing its content, reusing its memory).
void read_text_file_into(const std::filesystem::path& path, std::string_view what, std::string& text);

}  // namespace capsule::detail
