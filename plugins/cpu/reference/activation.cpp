// Reference kernels of the unary ops added for ONNX import: rounding and sign (floor, ceil, sign),
// trigonometric and hyperbolic functions (tan, asin, acos, atan, sinh, cosh, asinh, acosh,
// atanh) and activations (leaky_relu, elu, selu, celu, hardsigmoid, hardswish, softsign,
// thresholded_relu, mish). float32 and float64 (sign also integers); values and gradients follow PyTorch's op of the
// same name (derivatives.yaml), or ONNX's where PyTorch has none (docs/ops.md states which).
#include <cmath>
#include <string>
#include <type_traits>

#include "elementwise_kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;

/// A number attribute with a default that must be finite (`nonzero`: and not 0).
double finite_number(const plugin::Attributes& attrs, const char* op, const char* name,
                     double fallback, bool nonzero = false) {
    const double v = optional_number(attrs, op, name, fallback);
    require(std::isfinite(v) && (!nonzero || v != 0), [&] {
        return std::string(op) + ": attribute '" + name + "' must be a finite" +
               (nonzero ? " nonzero" : "") + " number";
    });
    return v;
}

constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluGamma = 1.0507009873554804934193349852946;

template <typename T>
T softplus_of(T x) {  // log(1 + e^x) without overflow
    return x > T(20) ? x : std::log1p(std::exp(x));
}

}  // namespace

// ---- rounding and sign: zero gradient (PyTorch) ----

void floor_forward(const ForwardCall& call) {
    unary_forward(call, "floor", [](auto x) { return std::floor(x); });
}
void floor_backward(const BackwardCall& call) {
    unary_backward(call, "floor", [](auto, auto g) { return decltype(g)(0); });
}
void ceil_forward(const ForwardCall& call) {
    unary_forward(call, "ceil", [](auto x) { return std::ceil(x); });
}
void ceil_backward(const BackwardCall& call) {
    unary_backward(call, "ceil", [](auto, auto g) { return decltype(g)(0); });
}
// sign: -1, 0 or 1; NaN stays NaN (torch.sign). Also every integer dtype (ONNX Sign; unsigned:
// 0 or 1).
void sign_forward(const ForwardCall& call) {
    unary_forward<kArithmetic>(call, "sign", [](auto x) {
        using T = decltype(x);
        if constexpr (std::is_unsigned_v<T>) return T(x != 0);
        else if constexpr (std::is_integral_v<T>) return sign_of(x);
        else return std::isnan(x) ? x : sign_of(x);
    });
}
void sign_backward(const BackwardCall& call) {
    unary_backward(call, "sign", [](auto, auto g) { return decltype(g)(0); });
}

// ---- trigonometric and hyperbolic ----

void tan_forward(const ForwardCall& call) {
    unary_forward(call, "tan", [](auto x) { return std::tan(x); });
}
void tan_backward(const BackwardCall& call) {
    unary_backward(call, "tan", [](auto x, auto g) {
        const auto t = std::tan(x);
        return g * (decltype(x)(1) + t * t);
    });
}
// asin, acos: NaN outside [-1, 1]; gradients ±g / sqrt(1 - x^2).
void asin_forward(const ForwardCall& call) {
    unary_forward(call, "asin", [](auto x) { return std::asin(x); });
}
void asin_backward(const BackwardCall& call) {
    unary_backward(call, "asin", [](auto x, auto g) { return g / std::sqrt(decltype(x)(1) - x * x); });
}
void acos_forward(const ForwardCall& call) {
    unary_forward(call, "acos", [](auto x) { return std::acos(x); });
}
void acos_backward(const BackwardCall& call) {
    unary_backward(call, "acos", [](auto x, auto g) { return -g / std::sqrt(decltype(x)(1) - x * x); });
}
void atan_forward(const ForwardCall& call) {
    unary_forward(call, "atan", [](auto x) { return std::atan(x); });
}
void atan_backward(const BackwardCall& call) {
    unary_backward(call, "atan", [](auto x, auto g) { return g / (decltype(x)(1) + x * x); });
}
void sinh_forward(const ForwardCall& call) {
    unary_forward(call, "sinh", [](auto x) { return std::sinh(x); });
}
void sinh_backward(const BackwardCall& call) {
    unary_backward(call, "sinh", [](auto x, auto g) { return g * std::cosh(x); });
}
void cosh_forward(const ForwardCall& call) {
    unary_forward(call, "cosh", [](auto x) { return std::cosh(x); });
}
void cosh_backward(const BackwardCall& call) {
    unary_backward(call, "cosh", [](auto x, auto g) { return g * std::sinh(x); });
}
void asinh_forward(const ForwardCall& call) {
    unary_forward(call, "asinh", [](auto x) { return std::asinh(x); });
}
void asinh_backward(const BackwardCall& call) {
    unary_backward(call, "asinh", [](auto x, auto g) { return g / std::sqrt(x * x + decltype(x)(1)); });
}
// acosh: NaN below 1; gradient g / sqrt(x^2 - 1).
void acosh_forward(const ForwardCall& call) {
    unary_forward(call, "acosh", [](auto x) { return std::acosh(x); });
}
void acosh_backward(const BackwardCall& call) {
    unary_backward(call, "acosh", [](auto x, auto g) { return g / std::sqrt(x * x - decltype(x)(1)); });
}
// atanh: ±inf at ±1, NaN outside [-1, 1]; gradient g / (1 - x^2).
void atanh_forward(const ForwardCall& call) {
    unary_forward(call, "atanh", [](auto x) { return std::atanh(x); });
}
void atanh_backward(const BackwardCall& call) {
    unary_backward(call, "atanh", [](auto x, auto g) { return g / (decltype(x)(1) - x * x); });
}

// ---- activations ----

// leaky_relu(negative_slope = 0.01): x > 0 ? x : slope * x; gradient g or slope * g (at 0: slope).
void leaky_relu_forward(const ForwardCall& call) {
    const double s = finite_number(call.attrs(), "leaky_relu", "negative_slope", 0.01);
    unary_forward(call, "leaky_relu", [s](auto x) {
        using T = decltype(x);
        return x > T(0) ? x : x * T(s);
    });
}
void leaky_relu_backward(const BackwardCall& call) {
    const double s = finite_number(call.attrs(), "leaky_relu", "negative_slope", 0.01);
    unary_backward(call, "leaky_relu", [s](auto x, auto g) {
        using T = decltype(x);
        return x > T(0) ? g : g * T(s);
    });
}

// elu(alpha = 1): x > 0 ? x : alpha (e^x - 1); gradient g or g alpha e^x (at 0: alpha g).
void elu_forward(const ForwardCall& call) {
    const double a = finite_number(call.attrs(), "elu", "alpha", 1.0);
    unary_forward(call, "elu", [a](auto x) {
        using T = decltype(x);
        return x > T(0) ? x : T(a) * std::expm1(x);
    });
}
void elu_backward(const BackwardCall& call) {
    const double a = finite_number(call.attrs(), "elu", "alpha", 1.0);
    unary_backward(call, "elu", [a](auto x, auto g) {
        using T = decltype(x);
        return x > T(0) ? g : g * T(a) * std::exp(x);
    });
}

// selu(alpha, gamma) = gamma * elu(x, alpha), defaults the SELU constants (Klambauer et al. 2017).
void selu_forward(const ForwardCall& call) {
    const double a = finite_number(call.attrs(), "selu", "alpha", kSeluAlpha);
    const double s = finite_number(call.attrs(), "selu", "gamma", kSeluGamma);
    unary_forward(call, "selu", [a, s](auto x) {
        using T = decltype(x);
        return T(s) * (x > T(0) ? x : T(a) * std::expm1(x));
    });
}
void selu_backward(const BackwardCall& call) {
    const double a = finite_number(call.attrs(), "selu", "alpha", kSeluAlpha);
    const double s = finite_number(call.attrs(), "selu", "gamma", kSeluGamma);
    unary_backward(call, "selu", [a, s](auto x, auto g) {
        using T = decltype(x);
        return g * T(s) * (x > T(0) ? T(1) : T(a) * std::exp(x));
    });
}

// celu(alpha = 1) = max(0, x) + min(0, alpha (e^(x/alpha) - 1)); gradient g or g e^(x/alpha).
void celu_forward(const ForwardCall& call) {
    const double a = finite_number(call.attrs(), "celu", "alpha", 1.0, true);
    unary_forward(call, "celu", [a](auto x) {
        using T = decltype(x);
        return x > T(0) ? x : T(a) * std::expm1(x / T(a));
    });
}
void celu_backward(const BackwardCall& call) {
    const double a = finite_number(call.attrs(), "celu", "alpha", 1.0, true);
    unary_backward(call, "celu", [a](auto x, auto g) {
        using T = decltype(x);
        return x > T(0) ? g : g * std::exp(x / T(a));
    });
}

// hardsigmoid(alpha = 0.2, beta = 0.5) = max(0, min(1, alpha x + beta)) (ONNX HardSigmoid);
// gradient g alpha strictly inside (0, 1), else 0 (as torch's hardsigmoid_backward).
void hardsigmoid_forward(const ForwardCall& call) {
    const double a = finite_number(call.attrs(), "hardsigmoid", "alpha", 0.2);
    const double b = finite_number(call.attrs(), "hardsigmoid", "beta", 0.5);
    unary_forward(call, "hardsigmoid", [a, b](auto x) {
        using T = decltype(x);
        const T v = T(a) * x + T(b);
        return std::isnan(v) ? v : std::fmax(T(0), std::fmin(T(1), v));
    });
}
void hardsigmoid_backward(const BackwardCall& call) {
    const double a = finite_number(call.attrs(), "hardsigmoid", "alpha", 0.2);
    const double b = finite_number(call.attrs(), "hardsigmoid", "beta", 0.5);
    unary_backward(call, "hardsigmoid", [a, b](auto x, auto g) {
        using T = decltype(x);
        const T v = T(a) * x + T(b);
        return v > T(0) && v < T(1) ? g * T(a) : T(0);
    });
}

// hardswish(x) = x * relu6(x + 3) / 6 (torch, ONNX HardSwish); gradient 0 below -3,
// g (x / 3 + 1/2) on [-3, 3], g above (torch's hardswish_backward).
void hardswish_forward(const ForwardCall& call) {
    unary_forward(call, "hardswish", [](auto x) {
        using T = decltype(x);
        if (std::isnan(x)) return x;
        return x * std::fmax(T(0), std::fmin(T(6), x + T(3))) / T(6);
    });
}
void hardswish_backward(const BackwardCall& call) {
    unary_backward(call, "hardswish", [](auto x, auto g) {
        using T = decltype(x);
        if (x < T(-3)) return T(0);
        return x <= T(3) ? g * (x / T(3) + T(0.5)) : g;
    });
}

// softsign(x) = x / (1 + |x|); gradient g / (1 + |x|)^2. At ±inf the value is its limit ±1
// (the formula's inf / inf would be NaN, as in torch's softsign).
void softsign_forward(const ForwardCall& call) {
    unary_forward(call, "softsign", [](auto x) {
        using T = decltype(x);
        return std::isinf(x) ? std::copysign(T(1), x) : x / (T(1) + std::abs(x));
    });
}
void softsign_backward(const BackwardCall& call) {
    unary_backward(call, "softsign", [](auto x, auto g) {
        const auto d = decltype(x)(1) + std::abs(x);
        return g / (d * d);
    });
}

// thresholded_relu(alpha = 1) = x > alpha ? x : 0 (ONNX ThresholdedRelu); gradient g or 0.
void thresholded_relu_forward(const ForwardCall& call) {
    const double a = finite_number(call.attrs(), "thresholded_relu", "alpha", 1.0);
    unary_forward(call, "thresholded_relu", [a](auto x) {
        using T = decltype(x);
        return x > T(a) || std::isnan(x) ? x : T(0);
    });
}
void thresholded_relu_backward(const BackwardCall& call) {
    const double a = finite_number(call.attrs(), "thresholded_relu", "alpha", 1.0);
    unary_backward(call, "thresholded_relu", [a](auto x, auto g) {
        using T = decltype(x);
        return x > T(a) ? g : T(0);
    });
}

// shrink(lambd = 0.5, bias = 0) (ONNX Shrink): x + bias below -lambd, x - bias above lambd, else 0;
// NaN stays NaN. Gradient g outside [-lambd, lambd], 0 inside.
void shrink_forward(const ForwardCall& call) {
    const double l = finite_number(call.attrs(), "shrink", "lambd", 0.5);
    const double b = finite_number(call.attrs(), "shrink", "bias", 0.0);
    unary_forward(call, "shrink", [l, b](auto x) {
        using T = decltype(x);
        if (std::isnan(x)) return x;
        return x < T(-l) ? T(x + T(b)) : x > T(l) ? T(x - T(b)) : T(0);
    });
}
void shrink_backward(const BackwardCall& call) {
    const double l = finite_number(call.attrs(), "shrink", "lambd", 0.5);
    unary_backward(call, "shrink", [l](auto x, auto g) {
        using T = decltype(x);
        return x < T(-l) || x > T(l) ? g : T(0);
    });
}

// mish(x) = x tanh(softplus(x)) (torch, ONNX Mish); gradient
// g (tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)) (torch's mish_backward).
void mish_forward(const ForwardCall& call) {
    unary_forward(call, "mish", [](auto x) { return x * std::tanh(softplus_of(x)); });
}
void mish_backward(const BackwardCall& call) {
    unary_backward(call, "mish", [](auto x, auto g) {
        using T = decltype(x);
        const T t = std::tanh(softplus_of(x));
        return g * (t + x * sigmoid_of(x) * (T(1) - t * t));
    });
}

}  // namespace capsule::reference
