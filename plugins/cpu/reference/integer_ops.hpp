// Integer arithmetic of the reference kernels, for every integer storage type (int8_t..int64_t,
// uint8_t..uint64_t): results wrap modulo 2^bits (two's complement), as NumPy, PyTorch and ONNX
// Runtime compute them. C++ arithmetic is done in an unsigned type at least as wide as `unsigned`
// (signed overflow is undefined, and int8 or uint16 operands would be promoted to int); the
// conversion back to T is modular (C++20).
#pragma once

#include <string>
#include <type_traits>

#include "capsule/plugin.hpp"
#include "dtypes.hpp"

namespace capsule::reference {

/// The unsigned type integer arithmetic on T is done in.
template <typename T>
using wide_unsigned_t = std::make_unsigned_t<std::common_type_t<T, unsigned>>;

/// op(a, b) modulo 2^bits (add, sub, mul); floats: op(a, b) itself.
template <typename T, typename Op>
T wrapping(T a, T b, Op op) {
    if constexpr (std::is_integral_v<T>) {
        using U = wide_unsigned_t<T>;
        return static_cast<T>(op(static_cast<U>(a), static_cast<U>(b)));
    } else {
        return op(a, b);
    }
}

/// -x modulo 2^bits (so -INT_MIN = INT_MIN, as numpy).
template <typename T>
T wrapping_neg(T x) {
    using U = wide_unsigned_t<T>;
    return static_cast<T>(U(0) - static_cast<U>(x));
}

/// |x| modulo 2^bits (abs(INT_MIN) = INT_MIN, as numpy); the identity for unsigned T.
template <typename T>
T wrapping_abs(T x) {
    if constexpr (std::is_signed_v<T>) return x < 0 ? wrapping_neg(x) : x;
    else return x;
}

[[noreturn]] inline void integer_division_by_zero(const char* op, capsule_dtype dtype) {
    plugin::fail(CAPSULE_ERROR_INVALID_DATA,
                 std::string(op) + ": " + dtype_name(dtype) +
                     " division by zero (input 1 holds 0; ONNX leaves it undefined)");
}

/// a / b truncated toward zero (C; ONNX Runtime's Div of integers, and the ONNX reference's
/// true division cast back to the integer type). b = 0 is refused as bad input; INT_MIN / -1
/// wraps to INT_MIN.
template <typename T>
T integer_div(T a, T b) {
    if (b == 0) [[unlikely]]
        integer_division_by_zero("div", dtype_of<T>());
    if constexpr (std::is_signed_v<T>)
        if (b == -1) return wrapping_neg(a);
    return static_cast<T>(a / b);
}

/// base^exponent by repeated squaring, modulo 2^bits. A negative exponent gives 1 / base^|e|
/// truncated toward zero, as ONNX Runtime's static_cast<T>(std::pow(double(x), double(y))):
/// 1 for base 1, ±1 for base -1, 0 for |base| >= 2; base 0 (a division by zero) is refused.
template <typename T>
T integer_pow(T base, T exponent) {
    if constexpr (std::is_signed_v<T>) {
        if (exponent < 0) {
            if (base == 0) [[unlikely]]
                plugin::fail(CAPSULE_ERROR_INVALID_DATA,
                             std::string("pow: 0 to a negative power has no ") +
                                 dtype_name(dtype_of<T>()) + " value");
            if (base == 1) return 1;
            if (base == -1) return (exponent & 1) ? T(-1) : T(1);
            return 0;
        }
    }
    using U = wide_unsigned_t<T>;
    U result = 1, b = static_cast<U>(base);
    for (auto e = static_cast<std::make_unsigned_t<T>>(exponent); e != 0; e >>= 1) {
        if (e & 1) result *= b;
        b *= b;
    }
    return static_cast<T>(result);
}

}  // namespace capsule::reference
