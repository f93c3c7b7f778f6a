// Reference kernel of cast(to): converts every element to the dtype named by `to` (ONNX Cast,
// `Tensor.to(dtype)`). float -> int64 truncates toward zero (ONNX, C++); a NaN, infinite or
// out-of-range float has no int64 value and is refused with a message naming the element (ONNX
// leaves it undefined). Anything -> bool is `x != 0` (NaN -> true); bool -> number is 0 or 1;
// float64 -> float32 rounds to nearest (overflow gives ±inf). The backward kernel converts the
// gradient back between float dtypes; an integer or bool side carries no gradient.
#include <algorithm>
#include <cmath>
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
    if (to == "float32") return CAPSULE_DTYPE_FLOAT32;
    if (to == "float64") return CAPSULE_DTYPE_FLOAT64;
    if (to == "int64") return CAPSULE_DTYPE_INT64;
    if (to == "bool") return CAPSULE_DTYPE_BOOL;
    fail("cast: attribute 'to' = '" + std::string(to) +
         "' must be one of float32, float64, int64, bool");
}

template <typename To, typename From>
To convert(From v, int64_t i) {
    if constexpr (std::is_same_v<To, bool>) {
        return v != From(0);
    } else if constexpr (std::is_same_v<To, int64_t> && std::is_floating_point_v<From>) {
        // [-2^63, 2^63) holds exactly the floats whose truncation fits in int64.
        if (!(v >= From(-9223372036854775808.0) && v < From(9223372036854775808.0))) [[unlikely]]
            fail(CAPSULE_ERROR_INVALID_DATA, "cast: element " + std::to_string(i) + " = " + std::to_string(double(v)) +
                 " has no int64 value");
        return static_cast<int64_t>(v);
    } else {
        return static_cast<To>(v);
    }
}

/// Converts n elements of `src` (dtype `from`) into `dst` (dtype `to`).
void convert_all(const void* src, capsule_dtype from, void* dst, capsule_dtype to, int64_t n) {
    dispatch_all(from, [&]<typename F>(F) {
        dispatch_all(to, [&]<typename T>(T) {
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
    if (is_float(to)) {
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
