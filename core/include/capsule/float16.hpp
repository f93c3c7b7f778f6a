// The 16-bit float dtypes of ABI 1.1 as storage types: Float16 (IEEE 754 binary16) and BFloat16
// (the upper 16 bits of a float32), with exact widening to float and narrowing from double or
// from an integer in one rounding step. Header-only: the host and the reference kernels (which
// compute in float and narrow the result) share it.
//
// Narrowing rounds once (double and integer sources are not rounded to float first) to nearest,
// ties to even (IEEE 754 roundTiesToEven, as numpy's astype, PyTorch's .half() / .bfloat16() and
// ONNX Runtime's Cast); overflow gives ±inf; subnormals are produced and read; a NaN stays a NaN
// of the same sign, made quiet.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace capsule {

struct Float16 {
    std::uint16_t bits;
};
struct BFloat16 {
    std::uint16_t bits;
};

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

namespace half_detail {

/// Layout and rounding of a 16-bit format: E exponent bits, M fraction bits.
template <typename H>
struct Format;
template <>
struct Format<Float16> {
    static constexpr int E = 5, M = 10;
};
template <>
struct Format<BFloat16> {
    static constexpr int E = 8, M = 7;
};

/// The bits of (-1)^negative * m * 2^e (m > 0) in format H, rounded to nearest even.
template <typename H>
std::uint16_t narrow(bool negative, std::uint64_t m, int e) {
    using F = Format<H>;
    constexpr int bias = (1 << (F::E - 1)) - 1, emin = 1 - bias;
    constexpr std::uint32_t inf = ((1u << F::E) - 1) << F::M;
    const std::uint32_t sign = negative ? 1u << (F::E + F::M) : 0u;
    const std::uint32_t overflow = sign | inf;
    const int lead = e + (63 - std::countl_zero(m));  // exponent of m's leading bit
    if (lead > bias) return std::uint16_t(overflow);
    const int t = lead < emin ? emin : lead;  // exponent of the result (emin for subnormals)
    const int shift = t - F::M - e;           // m * 2^-shift is the result in units of its ulp
    std::uint64_t r;
    if (shift <= 0) {
        r = m << -shift;  // exact: fewer than M + 2 bits
    } else if (shift > 64) {
        r = 0;  // below half an ulp of the smallest subnormal: m < 2^64 <= 2^(shift - 1)
    } else {
        r = shift == 64 ? 0 : m >> shift;
        const std::uint64_t rem = shift == 64 ? m : m & ((std::uint64_t(1) << shift) - 1);
        const std::uint64_t half = std::uint64_t(1) << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
    }
    // r includes the implicit bit, so a carry out of the fraction bumps the exponent, and a
    // subnormal rounding up to 2^M becomes the smallest normal.
    const std::uint64_t bits = (std::uint64_t(t + bias - 1) << F::M) + r;
    if (bits >= inf) return std::uint16_t(overflow);
    return std::uint16_t(sign | bits);
}

template <typename H>
std::uint16_t special(bool negative, bool nan) {  // inf, or the quiet NaN
    using F = Format<H>;
    const std::uint32_t inf = ((1u << F::E) - 1) << F::M;
    return std::uint16_t((negative ? 1u << (F::E + F::M) : 0u) | inf | (nan ? 1u << (F::M - 1) : 0u));
}

}  // namespace half_detail

/// The value of a 16-bit float as a float (exact).
inline float to_float(Float16 h) {
    const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16;
    const std::uint32_t exp = (h.bits >> 10) & 0x1fu, frac = h.bits & 0x3ffu;
    std::uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (frac << 13) | (frac ? 0x00400000u : 0u);
    } else if (exp == 0) {
        const float v = float(frac) * 0x1p-24f;  // subnormal (or zero): exact
        return sign ? -v : v;
    } else {
        bits = sign | ((exp + 112) << 23) | (frac << 13);
    }
    return std::bit_cast<float>(bits);
}
inline float to_float(BFloat16 h) {
    std::uint32_t bits = std::uint32_t(h.bits) << 16;
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) bits |= 0x00400000u;
    return std::bit_cast<float>(bits);
}

/// `v` in format H, rounded once to nearest even.
template <typename H>
H half_from(double v) {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
    const bool negative = bits >> 63;
    const int exp = int((bits >> 52) & 0x7ff);
    const std::uint64_t frac = bits & ((std::uint64_t(1) << 52) - 1);
    if (exp == 0x7ff) return H{half_detail::special<H>(negative, frac != 0)};
    if (exp == 0 && frac == 0) return H{std::uint16_t(negative ? 0x8000u : 0u)};
    // A double subnormal is frac * 2^-1074; a normal one (2^52 + frac) * 2^(exp - 1075).
    return exp == 0 ? H{half_detail::narrow<H>(negative, frac, -1074)}
                    : H{half_detail::narrow<H>(negative, frac | (std::uint64_t(1) << 52), exp - 1075)};
}

/// An integer in format H, rounded once (not through double, which would round first) to
/// nearest even.
template <typename H, typename I>
H half_from_integer(I v) {
    static_assert(std::is_integral_v<I>);
    bool negative = false;
    if constexpr (std::is_signed_v<I>) negative = v < 0;
    // |v| in uint64 (two's complement negation also handles the minimum).
    const std::uint64_t m = negative ? std::uint64_t(0) - std::uint64_t(v) : std::uint64_t(v);
    if (m == 0) return H{0};
    return H{half_detail::narrow<H>(negative, m, 0)};
}

/// float16 bits <-> float / double, for code that holds the bits as std::uint16_t.
inline float float16_to_float(std::uint16_t bits) { return to_float(Float16{bits}); }
inline float bfloat16_to_float(std::uint16_t bits) { return to_float(BFloat16{bits}); }
inline std::uint16_t float16_from_double(double v) { return half_from<Float16>(v).bits; }
inline std::uint16_t float16_from_float(float v) { return half_from<Float16>(v).bits; }
inline std::uint16_t bfloat16_from_double(double v) { return half_from<BFloat16>(v).bits; }
inline std::uint16_t bfloat16_from_float(float v) { return half_from<BFloat16>(v).bits; }

}  // namespace capsule
