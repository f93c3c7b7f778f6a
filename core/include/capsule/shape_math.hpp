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

/// `axis` counted from 0, for an axis in [-rank, rank) where a negative axis counts from the end
/// (-1 is the last); nullopt when out of range, so always for rank 0 (a scalar has no axis).
/// Callers that treat a scalar as rank 1, as PyTorch does, pass max(rank, 1). Shared by shape
/// inference, the ONNX importer and the plugins, each of which raises its own error.
constexpr std::optional<std::int64_t> try_normalize_axis(std::int64_t axis, std::int64_t rank) noexcept {
    if (axis < -rank || axis >= rank) return std::nullopt;
    return axis < 0 ? axis + rank : axis;
}

/// NumPy broadcasting (numpy.broadcast_shapes; ONNX's multidirectional broadcasting) of shapes
/// `a` and `b`, aligned at the right: each pair of dims is equal or holds a 1, and the result has
/// the other one. Writes the result into `out` (max(a.size(), b.size()) entries) and returns -1,
/// or returns the position in `out` of the first pair from the right that does not broadcast
/// (`out` then partly written). Shared by shape inference, the ONNX importer and the plugins, each
/// of which raises its own error.
constexpr std::ptrdiff_t broadcast_into(std::span<const std::int64_t> a, std::span<const std::int64_t> b,
                                        std::span<std::int64_t> out) noexcept {
    const std::size_t rank = out.size();
    for (std::size_t i = 0; i < rank; ++i) {
        const std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
        const std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
        if (da != db && da != 1 && db != 1) return static_cast<std::ptrdiff_t>(rank - 1 - i);
        out[rank - 1 - i] = da == 1 ? db : da;
    }
    return -1;
}

/// The dim of `shape` (right-aligned in a result of rank `rank`) at result position `position`,
/// 1 where `shape` has no such axis: what broadcast_into compared there.
constexpr std::int64_t broadcast_dim(std::span<const std::int64_t> shape, std::size_t rank,
                                     std::size_t position) noexcept {
    const std::size_t from_right = rank - 1 - position;
    return from_right < shape.size() ? shape[shape.size() - 1 - from_right] : 1;
}

}  // namespace capsule
