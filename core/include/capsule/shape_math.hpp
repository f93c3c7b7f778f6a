// Checked size arithmetic on tensor shapes. Shapes come from untrusted files (graphs, ONNX models,
// .npy / safetensors / IDX headers), so every element count, byte size and sum of byte sizes is
// computed here, with overflow checks, and nowhere by hand. Small and dependency-light so that
// plugins can include it too (the non-throwing `try_` forms suit code behind the C ABI).
//
// Limits: an element count, a byte size and a sum of byte sizes must each fit in int64
// (2^63 - 1), so that they also fit in size_t and ptrdiff_t and pointer offsets stay defined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "capsule/error.hpp"

namespace capsule {

inline constexpr std::int64_t kMaxTensorSize = std::numeric_limits<std::int64_t>::max();

/// Product of `dims` (1 for no dims); nullopt when a dimension is negative or the product exceeds
/// 2^63 - 1. A zero dimension gives 0, but the other dimensions' product must still fit (their
/// strides are computed from it).
constexpr std::optional<std::int64_t> try_element_count(std::span<const std::int64_t> dims) noexcept {
    std::int64_t nonzero = 1;
    bool empty = false;
    for (auto d : dims) {
        if (d < 0) return std::nullopt;
        if (d == 0) {
            empty = true;
            continue;
        }
        if (__builtin_mul_overflow(nonzero, d, &nonzero)) return std::nullopt;
    }
    return empty ? 0 : nonzero;
}

/// Bytes of a dense tensor of `dims` with `element_size`-byte elements; nullopt when
/// try_element_count fails or the byte count exceeds 2^63 - 1.
constexpr std::optional<std::int64_t> try_byte_size(std::span<const std::int64_t> dims,
                                                    std::size_t element_size) noexcept {
    const auto n = try_element_count(dims);
    if (!n || element_size > static_cast<std::size_t>(kMaxTensorSize)) return std::nullopt;
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(*n, static_cast<std::int64_t>(element_size), &bytes))
        return std::nullopt;
    return bytes;
}

/// a + b for sizes ≥ 0; nullopt when the sum exceeds 2^63 - 1.
constexpr std::optional<std::int64_t> try_add_sizes(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t sum = 0;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &sum)) return std::nullopt;
    return sum;
}

/// `[2, 3]`, for messages about shapes.
inline std::string shape_text(std::span<const std::int64_t> dims) {
    std::string out = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
    return out + "]";
}

/// try_element_count, raising Error(input) that names the shape:
/// `shape [..] has a negative dimension` or `shape [..] has more than 2^63-1 elements`.
inline std::int64_t checked_element_count(std::span<const std::int64_t> dims) {
    if (auto n = try_element_count(dims)) return *n;
    for (auto d : dims)
        if (d < 0) throw Error(ErrorCode::input, "shape " + shape_text(dims) + " has a negative dimension");
    throw Error(ErrorCode::input, "shape " + shape_text(dims) + " has more than 2^63-1 elements");
}

/// try_byte_size, raising Error(input) that names the shape and element size: as
/// checked_element_count, or `shape [..] of <n>-byte elements takes more than 2^63-1 bytes`.
inline std::int64_t checked_byte_size(std::span<const std::int64_t> dims, std::size_t element_size) {
    const auto n = checked_element_count(dims);
    if (auto bytes = try_byte_size(dims, element_size)) return *bytes;
    throw Error(ErrorCode::input, "shape " + shape_text(dims) + " (" + std::to_string(n) + " elements of " +
                     std::to_string(element_size) + " bytes) takes more than 2^63-1 bytes");
}

/// a + b for sizes ≥ 0 (dimensions, element or byte counts), raising Error(input)
/// `<what> exceeds 2^63-1 (a + b)` when a size is negative or the sum overflows.
inline std::int64_t checked_add_sizes(std::int64_t a, std::int64_t b, const std::string& what) {
    if (auto sum = try_add_sizes(a, b)) return *sum;
    throw Error(ErrorCode::input, what + " exceeds 2^63-1 (" + std::to_string(a) + " + " + std::to_string(b) +
                     ")");
}

}  // namespace capsule
