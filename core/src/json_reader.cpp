// The strict JSON reader (json_reader.hpp): nlohmann's SAX parser feeding a document builder that
// refuses repeated keys and reports where a number overflowed, by JSON path; simdjson first reads
// the texts it accepts exactly as the strict reader would (parse_fast), for speed.
#include "json_reader.hpp"

#include "capsule/json_document.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include <simdjson.h>

namespace capsule::detail {

namespace {

using nlohmann::json;

/// User text inside a message: quoted, shortened when long.
std::string quote_text(std::string_view text) {
    constexpr std::size_t kMax = 64;
    if (text.size() <= kMax) return "'" + std::string(text) + "'";
    return "'" + std::string(text.substr(0, kMax)) + "...'";
}

bool is_identifier(std::string_view key) {
    if (key.empty() || key.size() > 64) return false;
    for (std::size_t i = 0; i < key.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(key[i]);
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
    }
    return true;
}

/// Builds the document like nlohmann's own DOM parser (json_sax_dom_parser), with two checks:
/// a key already present in its object stops the parse, and so does a number out of range. Both
/// are recorded with the JSON path; the parse then stops (the handler returns false).
class StrictBuilder {
public:
    StrictBuilder(json& root, const StreamedArray* streamed) : root_(root), streamed_(streamed) {}

    bool null() { return value(nullptr); }
    bool boolean(bool v) { return value(v); }
    bool number_integer(json::number_integer_t v) { return value(v); }
    bool number_unsigned(json::number_unsigned_t v) { return value(v); }
    bool number_float(json::number_float_t v, const json::string_t&) { return value(v); }
    bool string(json::string_t& v) { return value(std::move(v)); }
    bool binary(json::binary_t& v) { return value(std::move(v)); }

    bool start_object(std::size_t) {
        frames_.push_back({place(json::value_t::object), {}});
        max_depth_ = std::max(max_depth_, frames_.size());
        return true;
    }
    bool key(json::string_t& k) {
        auto& frame = frames_.back();
        frame.key = std::move(k);
        auto& object = frame.value->get_ref<json::object_t&>();
        auto [it, fresh] = object.try_emplace(frame.key);
        if (!fresh) {
            error_ = path() + ": duplicate key " + quote_text(frame.key) +
                     " (each key may appear once in an object)";
            return false;
        }
        slot_ = &it->second;
        return true;
    }
    bool end_object() {
        frames_.pop_back();
        deliver_if_streamed();
        return true;
    }
    bool start_array(std::size_t) {
        frames_.push_back({place(json::value_t::array), {}});
        max_depth_ = std::max(max_depth_, frames_.size());
        return true;
    }
    bool end_array() {
        frames_.pop_back();
        deliver_if_streamed();
        return true;
    }

    bool parse_error(std::size_t, const std::string& token, const json::exception& e) {
        if (e.id == 406)
            error_ = path() + ": number overflow: " + quote_text(token) +
                     " is outside the range of a double";
        else
            error_ = std::string("malformed JSON: ") + e.what();
        return false;
    }

    /// Why the parse stopped (empty when it did not).
    const std::string& error() const { return error_; }
    /// The most containers open at once (`[]` is 1, `[[1]]` is 2).
    std::size_t max_depth() const { return max_depth_; }

private:
    struct Frame {
        json* value;
        std::string key;  // objects: the key of the member being read
    };

    template <typename V>
    bool value(V&& v) {
        place(std::forward<V>(v));
        deliver_if_streamed();
        return true;
    }

    /// When a complete element of the streamed array was just stored, hands it to the sink and
    /// drops it.
    void deliver_if_streamed() {
        if (frames_.size() != 2 || !is_streamed_array(1)) return;
        auto& array = frames_[1].value->get_ref<json::array_t&>();
        if (array.empty()) return;
        streamed_->sink(array.back(), delivered_++);
        array.pop_back();
    }

    /// Stores a new value where the parser is: the root, the next array element or the member
    /// whose key was just read. Returns it.
    template <typename V>
    json* place(V&& v) {
        if (frames_.empty()) {
            root_ = json(std::forward<V>(v));
            return &root_;
        }
        json& parent = *frames_.back().value;
        if (parent.is_array()) {
            auto& array = parent.get_ref<json::array_t&>();
            array.emplace_back(std::forward<V>(v));
            return &array.back();
        }
        *slot_ = json(std::forward<V>(v));
        return slot_;
    }

    /// Whether frame `i` is the streamed array (whose delivered elements are gone).
    bool is_streamed_array(std::size_t i) const {
        return streamed_ && i == 1 && frames_[0].value->is_object() &&
               frames_[1].value->is_array() && frames_[0].key == streamed_->key;
    }

    /// The JSON path of the value being read, e.g. `$.capsules[2].contracts.shape.evidence`.
    std::string path() const {
        std::string out = "$";
        for (std::size_t i = 0; i < frames_.size(); ++i) {
            const auto& f = frames_[i];
            if (f.value->is_array()) {
                // Below the top frame an element is being read (it is the last one); at the top,
                // the next element (not yet stored).
                auto n = f.value->size();
                if (i + 1 < frames_.size() && n > 0) --n;
                if (is_streamed_array(i)) n += delivered_;
                out += "[" + std::to_string(n) + "]";
            } else if (is_identifier(f.key)) {
                out += "." + f.key;
            } else {
                out += "[" + quote_text(f.key) + "]";
            }
        }
        return out;
    }

    json& root_;
    const StreamedArray* streamed_;
    std::size_t delivered_ = 0;
    std::vector<Frame> frames_;
    std::size_t max_depth_ = 0;
    json* slot_ = nullptr;
    std::string error_;
};

}  // namespace

namespace {

/// Each thread's simdjson parser. Its buffers (the padded copy of the text, the document) grow to
/// the largest text read and are reused: fresh memory costs a page fault per 4 KiB, which is most
/// of the time reading the plugin manifests takes. `busy` while a JsonDocument reads from the
/// parser's own document; a second reader on the thread then uses memory of its own.
struct ThreadParser {
    /// simdjson refuses a non-empty container at its maximum depth but not an empty one; one
    /// level more, and the depth limit is JsonDocument's, checked exactly by check_structure.
    ThreadParser() {
        // A failed allocation fails the first parse, and the strict reader then decides.
        [[maybe_unused]] const auto error =
            parser.allocate(simdjson::dom::MINIMAL_DOCUMENT_CAPACITY, JsonDocument::kMaxNesting + 1);
    }
    simdjson::dom::parser parser;
    bool busy = false;
};
ThreadParser& thread_parser() {
    thread_local ThreadParser p;
    return p;
}

/// Whether `text` holds `-0` not followed by a digit, `.`, `e` or `E` (also inside strings:
/// the caller only loses speed there).
bool has_negative_zero_integer(std::string_view text) {
    for (auto at = text.find("-0"); at != std::string_view::npos; at = text.find("-0", at + 1)) {
        const char next = at + 2 < text.size() ? text[at + 2] : ' ';
        if (!(next >= '0' && next <= '9') && next != '.' && next != 'e' && next != 'E') return true;
    }
    return false;
}

/// simdjson's DOM element as nlohmann's value, the way nlohmann's own parser stores it (a
/// non-negative integer as number_unsigned, a negative one as number_integer). False when an
/// object repeats a key: the slow path then reports it with its JSON path.
bool convert(simdjson::dom::element e, json& out) {
    switch (e.type()) {
        case simdjson::dom::element_type::ARRAY: {
            const simdjson::dom::array array(e);
            auto& items = (out = json::array()).get_ref<json::array_t&>();
            items.reserve(array.size());
            for (const auto item : array)
                if (!convert(item, items.emplace_back())) return false;
            return true;
        }
        case simdjson::dom::element_type::OBJECT: {
            auto& members = (out = json::object()).get_ref<json::object_t&>();
            for (const auto field : simdjson::dom::object(e)) {
                auto [it, fresh] = members.try_emplace(std::string(field.key));
                if (!fresh || !convert(field.value, it->second)) return false;
            }
            return true;
        }
        case simdjson::dom::element_type::INT64: {
            const std::int64_t v = e.get_int64().value_unsafe();
            out = v < 0 ? json(v) : json(static_cast<std::uint64_t>(v));
            return true;
        }
        case simdjson::dom::element_type::UINT64: out = e.get_uint64().value_unsafe(); return true;
        case simdjson::dom::element_type::DOUBLE: out = e.get_double().value_unsafe(); return true;
        case simdjson::dom::element_type::STRING:
            out = std::string(e.get_string().value_unsafe());
            return true;
        case simdjson::dom::element_type::BOOL: out = e.get_bool().value_unsafe(); return true;
        case simdjson::dom::element_type::NULL_VALUE: out = nullptr; return true;
    }
    return false;
}

/// The fast path of parse_json_text: simdjson (about ten times faster than nlohmann's lexer on
/// the plugin manifests every command reads) builds the same document when the text is one the
/// strict reader accepts as is. Anything else returns nullopt and goes to the strict reader,
/// which alone words the errors: a syntax error, a duplicate key, a number out of range (simdjson
/// refuses 1e400 and integers beyond 64 bits), a byte-order mark, and every text holding a
/// `\u` escape (simdjson and nlohmann differ on unpaired surrogates; manifests never need one).
/// An integer `-0` too: simdjson cannot tell it from 0, which nlohmann stores unsigned.
std::optional<json> parse_fast(std::string_view text) {
    if (text.find("\\u") != std::string_view::npos || has_negative_zero_integer(text))
        return std::nullopt;
    auto& shared = thread_parser();
    std::optional<simdjson::dom::parser> own;  // when a JsonDocument holds the thread's parser
    auto& parser = shared.busy ? own.emplace() : shared.parser;
    simdjson::dom::element root;
    if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
    json doc;
    if (!convert(root, doc)) return std::nullopt;
    return doc;
}

json parse_strict(std::string_view text, const std::string& source, const StreamedArray* streamed,
                  std::size_t* max_depth = nullptr) {
    json doc;
    StrictBuilder builder(doc, streamed);
    bool ok = false;
    try {
        ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json, true,
                             false);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::input, source + ": malformed JSON: " + e.what());
    }
    if (!ok || !builder.error().empty())
        throw Error(ErrorCode::input, source + ": " +
                         (builder.error().empty() ? std::string("malformed JSON")
                                                  : builder.error()));
    if (max_depth) *max_depth = builder.max_depth();
    return doc;
}

/// Whether an object in `e` repeats a key, or containers nest deeper than
/// JsonDocument::kMaxNesting (`depth`: the containers around `e`). `keys` is scratch space shared
/// down the recursion (which simdjson's own depth limit bounds).
simdjson::error_code check_structure(simdjson::dom::element e, std::vector<std::string_view>& keys,
                                     std::size_t depth) {
    if (!e.is_array() && !e.is_object()) return simdjson::SUCCESS;
    if (++depth > JsonDocument::kMaxNesting) return simdjson::DEPTH_ERROR;
    if (e.is_array()) {
        for (const auto item : simdjson::dom::array(e))
            if (auto error = check_structure(item, keys, depth)) return error;
        return simdjson::SUCCESS;
    }
    const simdjson::dom::object object(e);
    const auto first = keys.size();
    for (const auto field : object) keys.push_back(field.key);
    const auto begin = keys.begin() + static_cast<std::ptrdiff_t>(first);
    bool repeated = false;
    if (keys.size() - first <= 16) {  // most objects: pairwise is cheaper than sorting
        for (auto a = begin; a != keys.end() && !repeated; ++a)
            for (auto b = a + 1; b != keys.end() && !repeated; ++b) repeated = *a == *b;
    } else {
        std::sort(begin, keys.end());
        repeated = std::adjacent_find(begin, keys.end()) != keys.end();
    }
    keys.resize(first);
    if (repeated) return simdjson::TAPE_ERROR;
    for (const auto field : object)
        if (auto error = check_structure(field.value, keys, depth)) return error;
    return simdjson::SUCCESS;
}

/// Reads `text` into `document` when simdjson reads it as the strict reader would (see
/// parse_fast for the texts it leaves to the strict reader, unless `respelled`: nlohmann's own
/// spelling of a document); false otherwise.
simdjson::error_code read_fast(std::string_view text, simdjson::dom::document& document,
                               simdjson::dom::element& root, bool respelled) {
    if (!respelled &&
        (text.find("\\u") != std::string_view::npos || has_negative_zero_integer(text)))
        return simdjson::UNESCAPED_CHARS;  // any error: the strict reader decides
    const auto error =
        thread_parser().parser.parse_into_document(document, text.data(), text.size()).get(root);
    if (error) return error;
    thread_local std::vector<std::string_view> keys;
    return check_structure(root, keys, 0);
}

const char* type_name_of(simdjson::dom::element e) {
    switch (e.type()) {
        case simdjson::dom::element_type::ARRAY: return "array";
        case simdjson::dom::element_type::OBJECT: return "object";
        case simdjson::dom::element_type::INT64:
        case simdjson::dom::element_type::UINT64:
        case simdjson::dom::element_type::DOUBLE: return "number";
        case simdjson::dom::element_type::STRING: return "string";
        case simdjson::dom::element_type::BOOL: return "boolean";
        case simdjson::dom::element_type::NULL_VALUE: return "null";
    }
    return "value";
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
    if (auto doc = parse_fast(text)) return std::move(*doc);
    return parse_strict(text, source, nullptr);
}

nlohmann::json parse_json_text_strict(std::string_view text, const std::string& source) {
    return parse_strict(text, source, nullptr);
}

nlohmann::json parse_json_text(std::string_view text, const std::string& source,
                               const StreamedArray& streamed) {
    return parse_strict(text, source, &streamed);
}

}  // namespace capsule::detail

namespace capsule {
nlohmann::json parse_json_document(std::string_view text, const std::filesystem::path& source) {
    return detail::parse_json_text(text, source.string());
}
}  // namespace capsule

namespace capsule::detail {

JsonDocument::JsonDocument(std::string_view text, std::string source) : source_(std::move(source)) {
    auto& shared = thread_parser();
    if (!shared.busy) {
        shared.busy = true;
        borrowed_ = &shared.busy;
    }
    simdjson::dom::document& document = borrowed_ ? shared.parser.doc : own_;
    try {
        if (read_fast(text, document, root_, false) == simdjson::SUCCESS) return;
        // The strict reader words every refusal. A text it accepts that simdjson was not given
        // (one holding a \u escape or an integer -0) is read again as nlohmann spells it, which
        // simdjson reads as the same values.
        std::size_t depth = 0;
        const json strict = parse_strict(text, source_, nullptr, &depth);
        // Before re-spelling: dump() recurses once per level.
        if (depth > kMaxNesting)
            throw Error(ErrorCode::input, source_ + ": JSON nested deeper than " +
                                              std::to_string(kMaxNesting) + " levels");
        const auto error = read_fast(strict.dump(), document, root_, true);
        if (error)
            throw Error(ErrorCode::other, source_ + ": JSON accepted by nlohmann but not by "
                                                    "simdjson after re-spelling (a bug in the "
                                                    "reader): " + simdjson::error_message(error));
    } catch (...) {
        if (borrowed_) *borrowed_ = false;  // no destructor runs for a throwing constructor
        throw;
    }
}

std::string JsonCursor::path() const {
    std::string out = "$";
    for (std::size_t i = 0; i < std::min(depth_, kMaxDepth); ++i) {
        const auto& step = steps_[i];
        if (step.key) out.append(".").append(step.key, step.size);
        else out += "[" + std::to_string(step.size) + "]";
    }
    if (depth_ > kMaxDepth) out += "...";
    return out;
}

void JsonCursor::fail(const std::string& reason) const {
    throw Error(ErrorCode::input, *source_ + ": " + path() + ": " + reason);
}

JsonCursor JsonCursor::child(simdjson::dom::element value, Step step) const {
    JsonCursor c(value, source_);
    std::copy_n(steps_.begin(), std::min(depth_, kMaxDepth), c.steps_.begin());
    if (depth_ < kMaxDepth) c.steps_[depth_] = step;
    c.depth_ = depth_ + 1;
    return c;
}

std::size_t JsonCursor::array_size() const {
    const auto array = as_array();
    constexpr std::size_t kSaturated = 0xFFFFFF;  // simdjson's count stops there
    if (array.size() < kSaturated) return array.size();
    std::size_t n = 0;
    for ([[maybe_unused]] const auto element : array) ++n;
    return n;
}

simdjson::dom::array JsonCursor::as_array() const {
    if (!value_.is_array()) fail("expected an array, got " + type_name());
    return simdjson::dom::array(value_);
}

simdjson::dom::object JsonCursor::as_object() const {
    if (!value_.is_object()) fail("expected an object, got " + type_name());
    return simdjson::dom::object(value_);
}

const JsonCursor& JsonCursor::object(std::initializer_list<std::string_view> allowed) const {
    // The smallest unknown key is named, whatever the members' order (a re-spelled document has
    // its keys sorted).
    std::optional<std::string_view> unknown;
    for (const auto field : as_object())
        if (std::find(allowed.begin(), allowed.end(), field.key) == allowed.end() &&
            (!unknown || field.key < *unknown))
            unknown = field.key;
    if (!unknown) return *this;
    std::string list;
    for (auto a : allowed) list.append(list.empty() ? "" : ", ").append(a);
    constexpr std::size_t kShown = 64;
    const std::string key = unknown->size() <= kShown ? std::string(*unknown)
                                                      : std::string(unknown->substr(0, kShown)) + "...";
    fail("unknown key '" + key + "'; valid keys: " + list);
}

bool JsonCursor::has(std::string_view key) const { return find(key).has_value(); }

JsonCursor JsonCursor::at(std::string_view key) const {
    as_object();  // a value that is not an object is named as such
    if (auto member = find(key)) return *member;
    fail("missing required key '" + std::string(key) + "'");
}

std::optional<JsonCursor> JsonCursor::find(std::string_view key) const {
    if (!value_.is_object()) return std::nullopt;
    for (const auto field : simdjson::dom::object(value_))
        if (field.key == key) return child(field.value, member_step(field.key));
    return std::nullopt;
}

std::string JsonCursor::string() const {
    if (!value_.is_string()) fail("expected a string, got " + type_name());
    return std::string(value_.get_string().value_unsafe());
}

std::string JsonCursor::nonempty_string() const {
    auto text = string();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) fail("must not be empty");
    return text;
}

bool JsonCursor::boolean() const {
    if (!value_.is_bool()) fail("expected true or false, got " + type_name());
    return value_.get_bool().value_unsafe();
}

std::int64_t JsonCursor::integer() const {
    // simdjson reads an integer as INT64 when it fits, as UINT64 only above 2^63 - 1.
    if (value_.type() == simdjson::dom::element_type::UINT64)
        fail("integer " + std::to_string(value_.get_uint64().value_unsafe()) +
             " is out of range (at most 2^63 - 1)");
    if (value_.type() != simdjson::dom::element_type::INT64)
        fail("expected an integer, got " + type_name());
    return value_.get_int64().value_unsafe();
}

double JsonCursor::number() const {
    if (!value_.is_number()) fail("expected a number, got " + type_name());
    const double v = value_.get_double().value_unsafe();
    if (!std::isfinite(v)) fail("expected a finite number, got " + simdjson::minify(value_));
    return v;
}

std::string JsonCursor::dump() const { return nlohmann::json::parse(simdjson::minify(value_)).dump(); }

std::string JsonCursor::type_name() const { return type_name_of(value_); }

}  // namespace capsule::detail
