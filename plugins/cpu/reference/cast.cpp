// Reference kernel of cast(to): converts every element to the dtype named by `to` (ONNX Cast,
// `Tensor.to(dtype)`, numpy's astype), between any two of the 13 dtypes:
//   - integer -> integer keeps the value modulo 2^bits (two's complement, as numpy);
//   - float -> integer truncates toward zero (ONNX, C++); a NaN, infinite or out-of-range float
//     has no value of the integer dtype and is refused with a message naming the element (ONNX
//     leaves it undefined);
//   - anything -> bool is `x != 0` (NaN -> true); bool -> number is 0 or 1;
//   - -> float32 / float64 rounds to nearest (float64 -> float32 overflow gives ±inf);
//   - -> float16 and bfloat16 round once to nearest even, from float64 and integers too (numpy,
//     PyTorch's .half() / .bfloat16(), ONNX Runtime; onnx/onnx#3876). onnx 1.12's backend data
//     test_cast_FLOAT_to_BFLOAT16 truncates instead, and capsule onnx-test lists it as disputed;
//     NaN stays a quiet NaN;
//   - float16 / bfloat16 -> anything goes through their exact float value.
// The backward kernel converts the gradient back between float dtypes (float16 and bfloat16
// results included); an integer or bool side carries no gradient.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

capsule_dtype target_dtype(const plugin::Attributes& attrs) {
    require(attrs.has("to"), "cast: missing attribute 'to' (string)");
    const std::string_view to = attrs.get_string_view("to", "");
    for (int d = 0; d < 64; ++d)
        if (in_set(kAllDtypes, static_cast<capsule_dtype>(d)) && to == dtype_name(static_cast<capsule_dtype>(d)))
            return static_cast<capsule_dtype>(d);
    fail("cast: attribute 'to' = '" + std::string(to) + "' must be one of " + dtype_list(kAllDtypes));
}

/// 2^bits of T's value bits: the first integer above T's range (its minimum is -that, or 0).
template <typename T>
constexpr double integer_limit() {
    return static_cast<double>(uint64_t(1) << (std::numeric_limits<T>::digits - 1)) * 2.0;
}

/// One element of the cast (rules in the file comment); `i` names it in messages.
template <typename To, typename From>
To convert(From v, int64_t i) {
    if constexpr (std::is_same_v<To, From>) {
        return v;
    } else if constexpr (is_half_v<From>) {
        return convert<To>(to_float(v), i);  // exact
    } else if constexpr (std::is_same_v<To, bool>) {
        return v != From(0);
    } else if constexpr (is_half_v<To>) {
        if constexpr (std::is_integral_v<From>) return half_from_integer<To>(v);
        else return half_from<To>(double(v));
    } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
        // The truncation must lie in [-2^bits, 2^bits) (signed) or [0, 2^bits) (unsigned).
        constexpr double top = integer_limit<To>();
        const double t = std::trunc(double(v));
        if (!(t >= (std::is_signed_v<To> ? -top : 0.0) && t < top)) [[unlikely]]
            fail(CAPSULE_ERROR_INVALID_DATA, "cast: element " + std::to_string(i) + " = " +
                                                 std::to_string(double(v)) + " has no " +
                                                 dtype_name(dtype_of<To>()) + " value");
        return static_cast<To>(v);
    } else {
        return static_cast<To>(v);  // integers modulo 2^bits (C++20); to floats to nearest
    }
}

/// Converts n elements of `src` (dtype `from`) into `dst` (dtype `to`).
void convert_all(const void* src, capsule_dtype from, void* dst, capsule_dtype to, int64_t n) {
    dispatch<kAllDtypes>(from, [&]<typename F>(F) {
        dispatch<kAllDtypes>(to, [&]<typename T>(T) {
            const F* s = static_cast<const F*>(src);
            T* d = static_cast<T*>(dst);
            for (int64_t i = 0; i < n; ++i) d[i] = convert<T>(s[i], i);
        });
    });
}

}  // namespace

void cast_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "cast");
    const Tensor x = call.input(0);
    check_view(x, "cast: input");
    const capsule_dtype to = target_dtype(call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "cast: output", to);
    check_shape(y, "cast: output", x.shape());
    convert_all(x.view->data, x.dtype(), y.view->data, to, x.numel());
}
void cast_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "cast");
    const Tensor x = call.input(0);
    check_view(x, "cast: input");
    const capsule_dtype to = target_dtype(call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "cast: grad output", to);
    check_shape(g, "cast: grad output", x.shape());
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_float(x, "cast: input");
    check_like(gx, "cast: grad input", x, "the input");
    if (is_float(to) || in_set(kHalfDtypes, to)) {
        convert_all(g.view->data, to, gx.view->data, x.dtype(), x.numel());
    } else {
        // No gradient flows through an integer or bool result.
        dispatch_float(x.dtype(), [&]<typename T>(T) {
            T* out = gx.data<T>();
            std::fill(out, out + x.numel(), T(0));
        });
    }
}

}  // namespace capsule::reference
