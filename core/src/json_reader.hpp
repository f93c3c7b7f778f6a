// Strict reading of JSON documents (manifests, profiles) with errors that name the file, the JSON
// path and the reason. Internal to the core.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "capsule/vocabulary.hpp"

namespace capsule::detail {

/// A position in a document: the source file and a JSON path such as `$.capsules[3].op`.
class JsonCursor {
public:
    JsonCursor(const nlohmann::json& value, std::string source, std::string path = "$")
        : value_(value), source_(std::move(source)), path_(std::move(path)) {}

    const nlohmann::json& value() const { return value_; }
    const std::string& path() const { return path_; }

    [[noreturn]] void fail(const std::string& reason) const {
        throw InputError(source_ + ": " + path_ + ": " + reason);
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
        if (!value_.contains(key)) fail("missing required key '" + std::string(key) + "'");
        return JsonCursor(value_.at(std::string(key)), source_, path_ + "." + std::string(key));
    }
    JsonCursor at(std::size_t index) const {
        return JsonCursor(value_.at(index), source_, path_ + "[" + std::to_string(index) + "]");
    }

    std::string string() const {
        if (!value_.is_string()) fail("expected a string, got " + type_name());
        return value_.get<std::string>();
    }
    bool boolean() const {
        if (!value_.is_boolean()) fail("expected true or false, got " + type_name());
        return value_.get<bool>();
    }
    std::int64_t integer() const {
        if (!value_.is_number_integer()) fail("expected an integer, got " + type_name());
        return value_.get<std::int64_t>();
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
        } catch (const VocabularyError& e) {
            fail(e.what());
        }
    }

    std::string type_name() const { return value_.type_name(); }

private:
    const nlohmann::json& value_;
    std::string source_;
    std::string path_;
};

/// Parses JSON text; malformed text raises InputError naming the source and parser's position.
inline nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
        throw InputError(source + ": malformed JSON: " + e.what());
    }
}

/// Reads a whole file; raises InputError naming the path when it cannot be read.
std::string read_text_file(const std::filesystem::path& path, std::string_view what);

}  // namespace capsule::detail
