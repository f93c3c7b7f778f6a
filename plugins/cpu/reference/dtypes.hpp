// Dtypes of the reference kernels: the sets a kernel implements (CAPSULE_DTYPE_BIT masks; the
// kernel table in plugin.cpp declares them, so the planner only hands a kernel these), the
// dispatcher that instantiates a kernel body for exactly the members of a set, element sizes,
// and the storage -> compute type mapping (float16 and bfloat16 compute in float).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "capsule/plugin.hpp"
#include "check_util.hpp"
#include "capsule/float16.hpp"

namespace capsule::reference {

constexpr uint64_t dtype_bit(capsule_dtype d) { return CAPSULE_DTYPE_BIT(d); }

constexpr uint64_t kFloatDtypes = dtype_bit(CAPSULE_DTYPE_FLOAT32) | dtype_bit(CAPSULE_DTYPE_FLOAT64);
constexpr uint64_t kHalfDtypes = dtype_bit(CAPSULE_DTYPE_FLOAT16) | dtype_bit(CAPSULE_DTYPE_BFLOAT16);
constexpr uint64_t kSignedDtypes = dtype_bit(CAPSULE_DTYPE_INT8) | dtype_bit(CAPSULE_DTYPE_INT16) |
                                   dtype_bit(CAPSULE_DTYPE_INT32) | dtype_bit(CAPSULE_DTYPE_INT64);
constexpr uint64_t kUnsignedDtypes = dtype_bit(CAPSULE_DTYPE_UINT8) | dtype_bit(CAPSULE_DTYPE_UINT16) |
                                     dtype_bit(CAPSULE_DTYPE_UINT32) | dtype_bit(CAPSULE_DTYPE_UINT64);
constexpr uint64_t kIntegerDtypes = kSignedDtypes | kUnsignedDtypes;
constexpr uint64_t kBoolDtype = dtype_bit(CAPSULE_DTYPE_BOOL);
constexpr uint64_t kAllDtypes = kFloatDtypes | kHalfDtypes | kIntegerDtypes | kBoolDtype;
// The sets several kernels share: a kernel's dispatch and its table entry's mask use the same one.
constexpr uint64_t kFloating = kFloatDtypes | kHalfDtypes;                    // exp, sigmoid, ... (halves in float)
constexpr uint64_t kArithmetic = kFloating | kIntegerDtypes;                  // add, div, clamp, ...
constexpr uint64_t kOrdered = kFloatDtypes | kIntegerDtypes | kHalfDtypes;    // max, min, mod, abs
constexpr uint64_t kNegates = kFloatDtypes | kSignedDtypes | kHalfDtypes;     // neg

constexpr bool in_set(uint64_t set, capsule_dtype d) {
    return d >= 0 && d < 64 && (set & dtype_bit(d)) != 0;
}

/// "float32, float64": the members of a set, for messages.
inline std::string dtype_list(uint64_t set) {
    std::string out;
    for (int d = 0; d < 64; ++d)
        if (set & (uint64_t(1) << d)) {
            if (!out.empty()) out += ", ";
            out += dtype_name(static_cast<capsule_dtype>(d));
        }
    return out;
}

/// Size in bytes of one element; raises for an unknown dtype.
inline std::size_t element_size(capsule_dtype d) {
    switch (d) {
        case CAPSULE_DTYPE_BOOL:
        case CAPSULE_DTYPE_INT8:
        case CAPSULE_DTYPE_UINT8: return 1;
        case CAPSULE_DTYPE_INT16:
        case CAPSULE_DTYPE_UINT16:
        case CAPSULE_DTYPE_FLOAT16:
        case CAPSULE_DTYPE_BFLOAT16: return 2;
        case CAPSULE_DTYPE_FLOAT32:
        case CAPSULE_DTYPE_INT32:
        case CAPSULE_DTYPE_UINT32: return 4;
        case CAPSULE_DTYPE_FLOAT64:
        case CAPSULE_DTYPE_INT64:
        case CAPSULE_DTYPE_UINT64: return 8;
    }
    plugin::fail(CAPSULE_ERROR_UNSUPPORTED, "unknown dtype " + std::to_string(static_cast<int>(d)));
}

namespace dispatch_detail {
template <uint64_t Set, capsule_dtype D, typename T, typename F>
bool call_if([[maybe_unused]] capsule_dtype d, [[maybe_unused]] F& f) {
    if constexpr ((Set & CAPSULE_DTYPE_BIT(D)) != 0) {
        if (d == D) {
            f(T{});
            return true;
        }
    }
    return false;
}
}  // namespace dispatch_detail

/// Calls `f(T{})` with the storage type T of `dtype` when it is in `Set` (float, double,
/// int8_t..uint64_t, bool, Float16, BFloat16); only the members of `Set` are instantiated.
/// Another dtype raises UNSUPPORTED.
template <uint64_t Set, typename F>
void dispatch(capsule_dtype dtype, F&& f) {
    using namespace dispatch_detail;
    if (call_if<Set, CAPSULE_DTYPE_FLOAT32, float>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_FLOAT64, double>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_INT64, int64_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_BOOL, bool>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_INT32, int32_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_INT8, int8_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_UINT8, uint8_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_INT16, int16_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_UINT16, uint16_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_UINT32, uint32_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_UINT64, uint64_t>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_FLOAT16, Float16>(dtype, f) ||
        call_if<Set, CAPSULE_DTYPE_BFLOAT16, BFloat16>(dtype, f))
        return;
    plugin::fail(CAPSULE_ERROR_UNSUPPORTED, std::string("dtype ") + dtype_name(dtype) +
                                                " is not supported by this kernel (it takes " +
                                                dtype_list(Set) + ")");
}

/// The dtype whose storage type is T (dispatch's mapping).
template <typename T>
constexpr capsule_dtype dtype_of() {
    if constexpr (std::is_same_v<T, float>) return CAPSULE_DTYPE_FLOAT32;
    else if constexpr (std::is_same_v<T, double>) return CAPSULE_DTYPE_FLOAT64;
    else if constexpr (std::is_same_v<T, int64_t>) return CAPSULE_DTYPE_INT64;
    else if constexpr (std::is_same_v<T, bool>) return CAPSULE_DTYPE_BOOL;
    else if constexpr (std::is_same_v<T, int32_t>) return CAPSULE_DTYPE_INT32;
    else if constexpr (std::is_same_v<T, int8_t>) return CAPSULE_DTYPE_INT8;
    else if constexpr (std::is_same_v<T, uint8_t>) return CAPSULE_DTYPE_UINT8;
    else if constexpr (std::is_same_v<T, int16_t>) return CAPSULE_DTYPE_INT16;
    else if constexpr (std::is_same_v<T, uint16_t>) return CAPSULE_DTYPE_UINT16;
    else if constexpr (std::is_same_v<T, uint32_t>) return CAPSULE_DTYPE_UINT32;
    else if constexpr (std::is_same_v<T, uint64_t>) return CAPSULE_DTYPE_UINT64;
    else if constexpr (std::is_same_v<T, Float16>) return CAPSULE_DTYPE_FLOAT16;
    else {
        static_assert(std::is_same_v<T, BFloat16>, "not a storage type");
        return CAPSULE_DTYPE_BFLOAT16;
    }
}

/// Calls `f(U{})` with an unsigned integer type U of the element size of `dtype`, for kernels
/// that only move elements (every dtype).
template <typename F>
void dispatch_bytes(capsule_dtype dtype, F&& f) {
    switch (element_size(dtype)) {
        case 1: f(uint8_t{}); return;
        case 2: f(uint16_t{}); return;
        case 4: f(uint32_t{}); return;
        case 8: f(uint64_t{}); return;
    }
    plugin::fail(CAPSULE_ERROR_UNSUPPORTED, std::string("dtype ") + dtype_name(dtype) + " is not supported");
}

/// The type a kernel computes an element of storage type T in: float for Float16 and BFloat16,
/// T itself otherwise. load widens exactly; store rounds to nearest even.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <typename T>
compute_t<T> load(T v) {
    if constexpr (is_half_v<T>) return to_float(v);
    else return v;
}
template <typename T>
T store(compute_t<T> v) {
    if constexpr (is_half_v<T>) return half_from<T>(double(v));
    else return v;
}

}  // namespace capsule::reference
