// Value-for-value comparison of JSON documents, types included: the check of the core's JSON
// readers against each other (tests/fuzz/fuzz_json.cpp, tests/test_json_reader.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "../../core/src/json_reader.hpp"

namespace capsule::testing {

/// Bit-identical doubles (-0.0 and 0.0 differ; NaN equals NaN).
inline bool same_double(double x, double y) {
    return std::signbit(x) == std::signbit(y) && (x == y || (x != x && y != y));
}

/// Equal values of equal types (nlohmann's == treats 1 and 1u, or 1 and 1.0, as equal).
inline bool same(const nlohmann::json& a, const nlohmann::json& b) {
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
    if (a.is_number_float()) return same_double(a.get<double>(), b.get<double>());
    return a == b;
}

/// Whether `c` reads what nlohmann's document `j` holds: the same type, members and elements;
/// integer() gives an integer's value (and refuses one above 2^63 - 1 or a float), number() a
/// float's bits.
inline bool same(const detail::JsonCursor& c, const nlohmann::json& j) {
    auto refuses = [](auto&& read) {
        try {
            read();
        } catch (const Error&) {
            return true;
        }
        return false;
    };
    if (c.type_name() != std::string(j.type_name())) return false;
    if (j.is_object()) {
        std::size_t members = 0;
        bool all = true;
        c.each_member([&](std::string_view key, const detail::JsonCursor& value) {
            const auto it = j.find(std::string(key));
            all = all && it != j.end() && same(value, *it) && c.at(key).path() == value.path();
            ++members;
        });
        return all && members == j.size();
    }
    if (j.is_array()) {
        if (c.array_size() != j.size()) return false;
        bool all = true;
        c.each([&](const detail::JsonCursor& element, std::size_t i) { all = all && same(element, j[i]); });
        return all;
    }
    if (j.is_string()) return c.string() == j.get<std::string>();
    if (j.is_boolean()) return c.boolean() == j.get<bool>();
    if (j.is_null()) return c.is_null();
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        return refuses([&] { c.integer(); });
    if (j.is_number_integer()) return c.integer() == j.get<std::int64_t>();
    return refuses([&] { c.integer(); }) && same_double(c.number(), j.get<double>());
}

}  // namespace capsule::testing
