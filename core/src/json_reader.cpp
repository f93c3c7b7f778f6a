// The strict JSON reader (json_reader.hpp): nlohmann's SAX parser feeding a document builder that
// refuses repeated keys and reports where a number overflowed, by JSON path; simdjson first reads
// the texts it accepts exactly as the strict reader would (parse_fast), for speed.
#include "json_reader.hpp"

#include "capsule/json_document.hpp"

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
    json* slot_ = nullptr;
    std::string error_;
};

}  // namespace

namespace {

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
    thread_local simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
    json doc;
    if (!convert(root, doc)) return std::nullopt;
    return doc;
}

json parse_strict(std::string_view text, const std::string& source, const StreamedArray* streamed) {
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
    return doc;
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
