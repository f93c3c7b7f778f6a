// Reference kernels of the elementwise ops: binary ops with NumPy broadcasting (add, sub, mul,
// max, min, div, pow) and unary ops (scale, abs, sqrt, clamp, relu, gelu, sigmoid, tanh, softplus,
// exp, log, sin, cos, inv, safe_log, neg, erf). float32 and float64; values follow PyTorch
// (docs/ops.md), each computed in the tensor's own dtype as PyTorch's CPU kernels do. The ops ONNX
// defines on integers (add, sub, mul, div, mod, pow, max, min, abs, neg, clamp) also take every
// integer dtype (integer_ops.hpp: wrap-around), and max, min, mod, abs and neg float16 and
// bfloat16 (computed in float; their results are exact, so rounding back changes nothing).
//
// Backward kernels overwrite grad_inputs; a binary op's gradient for a broadcast operand is summed
// over the broadcast dimensions (accumulated in double). Tie and edge conventions follow
// PyTorch's derivatives.yaml and are stated at each kernel.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "elementwise_kernels.hpp"
#include "epilogue.hpp"
#include "integer_ops.hpp"

namespace capsule::reference {
namespace {

using namespace ew;

constexpr double kSqrt1_2 = 0.70710678118654752440;    // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794; // 1/sqrt(2*pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2/pi)
constexpr double kGeluKappa = 0.044715;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390; // 2/sqrt(pi)

bool gelu_tanh(const plugin::Attributes& attrs) {
    const std::string_view a = attrs.get_string_view("approximate", "none");
    require(a == "none" || a == "tanh", [&] {
        return "gelu: attribute 'approximate' = '" + std::string(a) +
               "' must be one of none, tanh";
    });
    return a == "tanh";
}

struct SoftplusParams {
    double beta, threshold;
};
SoftplusParams softplus_params(const plugin::Attributes& attrs) {
    const double beta = optional_number(attrs, "softplus", "beta", 1.0);
    require(beta > 0 && std::isfinite(beta), "softplus: attribute 'beta' must be a finite number > 0");
    return {beta, optional_number(attrs, "softplus", "threshold", 20.0)};
}

double safe_log_eps(const plugin::Attributes& attrs) {
    const double eps = optional_number(attrs, "safe_log", "eps", 1e-12);
    require(eps > 0 && std::isfinite(eps), "safe_log: attribute 'eps' must be a finite number > 0");
    return eps;
}



/// 1 + tanh(u) without cancellation for u < 0: 1 + tanh(u) = 2 sigmoid(2u) = 2 e^(2u) / (1 + e^(2u)).
/// For u >= 0 the sum has no cancellation and is PyTorch's expression.
template <typename T>
T one_plus_tanh(T u) {
    if (!(u < T(0))) return T(1) + std::tanh(u);
    const T e = std::exp(T(2) * u);
    return T(2) * e / (T(1) + e);
}

/// 1 - tanh(u)^2 = sech(u)^2 = 4 s (1 - s) with s = sigmoid(2u): no cancellation as |tanh u| -> 1.
template <typename T>
T sech_squared(T u) {
    const T a = T(2) * std::abs(u);
    return T(4) * sigmoid_of(a) * sigmoid_of(-a);  // 1 - sigmoid(a) = sigmoid(-a)
}

template <typename T>
T max_of(T a, T b) {  // torch.maximum: NaN if either is NaN
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
    }
    return a < b ? b : a;
}
template <typename T>
T min_of(T a, T b) {  // torch.minimum: NaN if either is NaN
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
    }
    return b < a ? b : a;
}

/// A clamp bound for integer dtype T: rounded into the integers (up for the lower bound, down
/// for the upper one, which keeps the integers of [lo, hi]) and saturated to T's range. An
/// integer attribute is read exactly (a double holds int64 values only up to 2^53).
template <typename T>
T integer_bound(const capsule_attribute* attr, double value, bool lower) {
    using L = std::numeric_limits<T>;
    if (attr != nullptr && attr->kind == CAPSULE_ATTR_INT) {
        const int64_t i = attr->int_value;
        if constexpr (std::is_signed_v<T>) return T(std::clamp<int64_t>(i, L::min(), L::max()));
        else return i < 0 ? T(0) : (uint64_t(i) > L::max() ? L::max() : T(i));
    }
    value = lower ? std::ceil(value) : std::floor(value);
    const double top = std::ldexp(1.0, L::digits);  // the first integer above T's range
    if (value >= top) return L::max();
    if (value < (std::is_signed_v<T> ? -top : 0.0)) return L::min();
    return static_cast<T>(value);
}

}  // namespace

ClampBounds clamp_bounds(const plugin::Attributes& attrs) {
    ClampBounds b{attrs.has("min"), attrs.has("max"), 0, 0};
    require(b.has_lo || b.has_hi, "clamp: needs attribute 'min' or 'max' (or both)");
    if (b.has_lo) b.lo = required_number(attrs, "clamp", "min");
    if (b.has_hi) b.hi = required_number(attrs, "clamp", "max");
    return b;
}

// ---- binary ----

// add, sub, mul, max, min: float32, float64 and every integer dtype (ONNX allows integers;
// integers wrap around); max and min also float16 and bfloat16.
void add_forward(const ForwardCall& call) {
    binary_forward<kArithmetic>(call, "add", [](auto a, auto b) { return wrapping(a, b, std::plus<>{}); });
}
void add_backward(const BackwardCall& call) {
    binary_backward(call, "add", [](auto, auto, auto g) { return g; },
                    [](auto, auto, auto g) { return g; });
}

void sub_forward(const ForwardCall& call) {
    binary_forward<kArithmetic>(call, "sub", [](auto a, auto b) { return wrapping(a, b, std::minus<>{}); });
}
void sub_backward(const BackwardCall& call) {
    binary_backward(call, "sub", [](auto, auto, auto g) { return g; },
                    [](auto, auto, auto g) { return -g; });
}

void mul_forward(const ForwardCall& call) {
    binary_forward<kArithmetic>(call, "mul", [](auto a, auto b) { return wrapping(a, b, std::multiplies<>{}); });
}
void mul_backward(const BackwardCall& call) {
    binary_backward(call, "mul", [](auto, auto b, auto g) { return g * b; },
                    [](auto a, auto, auto g) { return g * a; });
}

// torch.maximum backward (derivatives.yaml): at a == b each side gets g / 2; otherwise the larger
// side gets g. With a NaN operand neither `<` nor `>` holds, so both sides get g, as in PyTorch.
void max_forward(const ForwardCall& call) {
    binary_forward<kOrdered>(call, "max", [](auto a, auto b) { return max_of(a, b); });
}
void max_backward(const BackwardCall& call) {
    binary_backward(
        call, "max",
        [](auto a, auto b, auto g) { return a < b ? decltype(g)(0) : (a == b ? g / 2 : g); },
        [](auto a, auto b, auto g) { return a > b ? decltype(g)(0) : (a == b ? g / 2 : g); });
}

// torch.minimum backward: the mirror image of max.
void min_forward(const ForwardCall& call) {
    binary_forward<kOrdered>(call, "min", [](auto a, auto b) { return min_of(a, b); });
}
void min_backward(const BackwardCall& call) {
    binary_backward(
        call, "min",
        [](auto a, auto b, auto g) { return a > b ? decltype(g)(0) : (a == b ? g / 2 : g); },
        [](auto a, auto b, auto g) { return a < b ? decltype(g)(0) : (a == b ? g / 2 : g); });
}

// ---- unary ----

// scale: torch.mul(x, factor); the factor is converted to the tensor's dtype first (as PyTorch
// does with a Python scalar).
void scale_forward(const ForwardCall& call) {
    const double factor = required_number(call.attrs(), "scale", "factor");
    unary_forward(call, "scale", [factor](auto x) { return x * decltype(x)(factor); });
}
void scale_backward(const BackwardCall& call) {
    const double factor = required_number(call.attrs(), "scale", "factor");
    unary_backward(call, "scale", [factor](auto, auto g) { return g * decltype(g)(factor); });
}

// abs: gradient g * sign(x), 0 at x == 0 (PyTorch). Integers: abs(INT_MIN) = INT_MIN (numpy).
void abs_forward(const ForwardCall& call) {
    unary_forward<kOrdered>(call, "abs", [](auto x) {
        if constexpr (std::is_integral_v<decltype(x)>) return wrapping_abs(x);
        else return std::abs(x);
    });
}
void abs_backward(const BackwardCall& call) {
    unary_backward(call, "abs", [](auto x, auto g) { return g * sign_of(x); });
}

// sqrt: sqrt(-1) = NaN; gradient g / (2 sqrt(x)), +inf at 0 (PyTorch).
void sqrt_forward(const ForwardCall& call) {
    unary_forward(call, "sqrt", [](auto x) { return std::sqrt(x); });
}
void sqrt_backward(const BackwardCall& call) {
    unary_backward(call, "sqrt", [](auto x, auto g) { return g / (2 * std::sqrt(x)); });
}

// clamp: torch.clamp(x, min, max) = min(max(x, lo), hi), so with lo > hi every value is hi; NaN
// stays NaN. Gradient passes where lo <= x <= hi (bounds inclusive), else 0 (PyTorch). The bounds
// are converted to the tensor's dtype first; for an integer dtype by integer_bound (ONNX Clip of
// integers, whose bounds are of the input's type).
void clamp_forward(const ForwardCall& call) {
    const auto b = clamp_bounds(call.attrs());
    if (call.num_inputs() == 1 && call.input(0).view != nullptr &&
        in_set(kIntegerDtypes, call.input(0).dtype())) {
        dispatch<kIntegerDtypes>(call.input(0).dtype(), [&]<typename T>(T) {
            using L = std::numeric_limits<T>;
            const T lo = b.has_lo ? integer_bound<T>(call.attrs().find("min"), b.lo, true) : L::min();
            const T hi = b.has_hi ? integer_bound<T>(call.attrs().find("max"), b.hi, false) : L::max();
            unary_forward<dtype_bit(dtype_of<T>())>(call, "clamp", [lo, hi](T x) { return clamp_of(x, lo, hi); });
        });
        return;
    }
    // A missing bound is an infinite one; the bounds are converted once per dtype, and the
    // comparisons (false for NaN, which so passes through) compile to vector min/max blends.
    constexpr double inf = std::numeric_limits<double>::infinity();
    const double lo = b.has_lo ? b.lo : -inf, hi = b.has_hi ? b.hi : inf;
    const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
    unary_forward(call, "clamp", [lo, hi, lo_f, hi_f](auto x) {
        using T = decltype(x);
        T l, h;
        if constexpr (sizeof(T) == sizeof(float)) {
            l = lo_f;
            h = hi_f;
        } else {
            l = lo;
            h = hi;
        }
        return clamp_of(x, l, h);
    });
}
void clamp_backward(const BackwardCall& call) {
    const auto b = clamp_bounds(call.attrs());
    unary_backward(call, "clamp", [b](auto x, auto g) {
        using T = decltype(x);
        const bool pass = (!b.has_lo || x >= T(b.lo)) && (!b.has_hi || x <= T(b.hi));
        return pass ? g : T(0);
    });
}

// relu: relu(NaN) = NaN; gradient 0 where x <= 0 (so 0 at x == 0), else g. As PyTorch's
// threshold_backward (`x <= 0 ? 0 : g`), a NaN input passes the gradient through.
void relu_forward(const ForwardCall& call) {
    unary_forward(call, "relu", [](auto x) { return relu_of(x); });
}
void relu_backward(const BackwardCall& call) {
    unary_backward(call, "relu", [](auto x, auto g) { return x <= decltype(x)(0) ? decltype(x)(0) : g; });
}

// gelu: approximate = "none" (exact erf form, default) or "tanh", as F.gelu; the backward
// formulas are PyTorch's GeluBackward kernels. Two rewrites keep the negative tail, where
// PyTorch's 1 + erf(z) and 1 + tanh(u) cancel to 0 (gelu(-10) = -7.6e-23, not 0): the erf form
// uses 1 + erf(z) = erfc(-z) (Abramowitz & Stegun 7.1.2), the tanh form one_plus_tanh below.
void gelu_forward(const ForwardCall& call) {
    if (gelu_tanh(call.attrs())) {
        unary_forward(call, "gelu", [](auto x) {
            using T = decltype(x);
            const T inner = T(kSqrt2OverPi) * (x + T(kGeluKappa) * x * x * x);
            return T(0.5) * x * one_plus_tanh(inner);
        });
    } else {
        unary_forward(call, "gelu", [](auto x) {
            using T = decltype(x);
            return T(0.5) * x * std::erfc(-x * T(kSqrt1_2));
        });
    }
}
void gelu_backward(const BackwardCall& call) {
    if (gelu_tanh(call.attrs())) {
        unary_backward(call, "gelu", [](auto x, auto g) {
            using T = decltype(x);
            const T x2 = x * x;
            const T u = T(kSqrt2OverPi) * (x + T(kGeluKappa) * x2 * x);
            const T left = T(0.5) * x;
            const T dleft = T(0.5) * one_plus_tanh(u);
            const T dright = left * sech_squared(u) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluKappa) * x2);
            return g * (dleft + dright);
        });
    } else {
        unary_backward(call, "gelu", [](auto x, auto g) {
            using T = decltype(x);
            const T cdf = T(0.5) * std::erfc(-x * T(kSqrt1_2));
            const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
            return g * (cdf + x * pdf);
        });
    }
}

// sigmoid: evaluated without overflow on both tails; gradient g * s * (1 - s).
void sigmoid_forward(const ForwardCall& call) {
    unary_forward(call, "sigmoid", [](auto x) { return sigmoid_of(x); });
}
void sigmoid_backward(const BackwardCall& call) {
    unary_backward(call, "sigmoid", [](auto x, auto g) {
        const auto s = sigmoid_of(x);
        return g * s * (decltype(x)(1) - s);
    });
}

void tanh_forward(const ForwardCall& call) {
    unary_forward(call, "tanh", [](auto x) { return std::tanh(x); });
}
void tanh_backward(const BackwardCall& call) {
    unary_backward(call, "tanh", [](auto x, auto g) {
        const auto t = std::tanh(x);
        return g * (decltype(x)(1) - t * t);
    });
}

// softplus(beta = 1, threshold = 20), as F.softplus: x where beta * x > threshold, else
// log1p(exp(beta * x)) / beta; gradient g where beta * x > threshold, else
// g * exp(beta x) / (exp(beta x) + 1) = g * sigmoid(beta x). Below the threshold the value is
// evaluated as (max(bx, 0) + log1p(exp(-|bx|))) / beta (the same number; exp never overflows),
// and the gradient as the two-sided sigmoid, so a threshold above log(max float) (about 88.7
// for float32) gives softplus(100) = 100 and gradient g where PyTorch's formula gives inf / NaN.
// Where PyTorch's value is finite, it is the same function (bit-identical for bx <= 0).
void softplus_forward(const ForwardCall& call) {
    const auto p = softplus_params(call.attrs());
    unary_forward(call, "softplus", [p](auto x) {
        using T = decltype(x);
        const T bx = x * T(p.beta);
        if (bx > T(p.threshold)) return x;
        const T pos = bx > T(0) ? bx : T(0);
        return (pos + std::log1p(std::exp(-std::abs(bx)))) / T(p.beta);
    });
}
void softplus_backward(const BackwardCall& call) {
    const auto p = softplus_params(call.attrs());
    unary_backward(call, "softplus", [p](auto x, auto g) {
        using T = decltype(x);
        const T bx = x * T(p.beta);
        if (bx > T(p.threshold)) return g;
        return g * sigmoid_of(bx);
    });
}

void exp_forward(const ForwardCall& call) {
    unary_forward(call, "exp", [](auto x) { return std::exp(x); });
}
void exp_backward(const BackwardCall& call) {
    unary_backward(call, "exp", [](auto x, auto g) { return g * std::exp(x); });
}

// log: log(0) = -inf, log(x < 0) = NaN; gradient g / x.
void log_forward(const ForwardCall& call) {
    unary_forward(call, "log", [](auto x) { return std::log(x); });
}
void log_backward(const BackwardCall& call) {
    unary_backward(call, "log", [](auto x, auto g) { return g / x; });
}

void sin_forward(const ForwardCall& call) {
    unary_forward(call, "sin", [](auto x) { return std::sin(x); });
}
void sin_backward(const BackwardCall& call) {
    unary_backward(call, "sin", [](auto x, auto g) { return g * std::cos(x); });
}

void cos_forward(const ForwardCall& call) {
    unary_forward(call, "cos", [](auto x) { return std::cos(x); });
}
void cos_backward(const BackwardCall& call) {
    unary_backward(call, "cos", [](auto x, auto g) { return -g * std::sin(x); });
}

// inv: torch.reciprocal, 1/0 = +inf; gradient -g / x^2.
void inv_forward(const ForwardCall& call) {
    unary_forward(call, "inv", [](auto x) { return decltype(x)(1) / x; });
}
void inv_backward(const BackwardCall& call) {
    unary_backward(call, "inv", [](auto x, auto g) {
        const auto y = decltype(x)(1) / x;
        return -g * y * y;
    });
}

// safe_log(eps = 1e-12): torch.log(torch.clamp_min(x, eps)); NaN stays NaN. Gradient g / x where
// x >= eps, else 0 (clamp_min's backward passes at equality).
void safe_log_forward(const ForwardCall& call) {
    const double eps = safe_log_eps(call.attrs());
    unary_forward(call, "safe_log", [eps](auto x) {
        using T = decltype(x);
        return std::log(x < T(eps) ? T(eps) : x);
    });
}
void safe_log_backward(const BackwardCall& call) {
    const double eps = safe_log_eps(call.attrs());
    unary_backward(call, "safe_log", [eps](auto x, auto g) {
        using T = decltype(x);
        return x >= T(eps) ? g / x : T(0);
    });
}

// ---- ONNX import: div, pow, neg, erf ----

// div: torch.div(a, b) true division (IEEE: x/0 = ±inf, 0/0 = NaN). Gradients g / b and
// -g * a / b^2 (derivatives.yaml). Integers: truncated toward zero, b = 0 refused (integer_div).
void div_forward(const ForwardCall& call) {
    binary_forward<kArithmetic>(call, "div", [](auto a, auto b) {
        if constexpr (std::is_integral_v<decltype(a)>) return integer_div(a, b);
        else return a / b;
    });
}
void div_backward(const BackwardCall& call) {
    binary_backward(call, "div", [](auto, auto b, auto g) { return g / b; },
                    [](auto a, auto b, auto g) { return -g * a / (b * b); });
}

// mod: ONNX Mod. fmod: C fmod (the sign of a); otherwise torch.remainder, computed as PyTorch's
// CPU kernel does: r = fmod(a, b), plus b where r != 0 and the signs of r and b differ (so -0.0
// stays -0.0, and x mod inf for a negative x is inf). Integers (every integer dtype): b = 0
// raises (the C operation is undefined), and a mod -1 is 0 (INT_MIN % -1 overflows in C);
// unsigned operands have no signs to reconcile. float16 / bfloat16 compute in float (fmod is
// exact). Gradients as derivatives.yaml: g w.r.t. a; -g * trunc(a / b) (fmod) or -g * floor(a / b)
// w.r.t. b.
template <bool Fmod>
struct Mod {
    template <typename T>
    T operator()(T a, T b) const {
        T r;
        if constexpr (std::is_integral_v<T>) {
            if (b == 0) [[unlikely]]
                plugin::fail(CAPSULE_ERROR_INVALID_DATA,
                             std::string("mod: ") + dtype_name(dtype_of<T>()) +
                                 " division by zero (input 1 holds 0; ONNX Mod leaves it undefined)");
            if constexpr (std::is_unsigned_v<T>) return static_cast<T>(a % b);
            else {
                if (b == -1) return 0;
                r = static_cast<T>(a % b);
            }
        } else {
            r = std::fmod(a, b);
        }
        if (!Fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
        return r;
    }
};

bool fmod_attr(const plugin::Attributes& attrs) { return attrs.get_bool("fmod", false); }

// pow: torch.pow(a, b) = std::pow (pow(x, 0) = 1 even for NaN x; a negative base with a
// non-integer exponent is NaN). Gradients as derivatives.yaml: w.r.t. a, g * b * a^(b-1), and 0
// where b == 0; w.r.t. b, g * a^b * log(a), and 0 where a == 0 and b >= 0.
void mod_forward(const ForwardCall& call) {
    if (fmod_attr(call.attrs()))
        binary_forward<kOrdered>(call, "mod", Mod<true>{});
    else
        binary_forward<kOrdered>(call, "mod", Mod<false>{});
}
void mod_backward(const BackwardCall& call) {
    const bool fmod = fmod_attr(call.attrs());
    binary_backward(call, "mod", [](auto, auto, auto g) { return g; },
                    [fmod](auto a, auto b, auto g) { return -g * (fmod ? std::trunc(a / b) : std::floor(a / b)); });
}

// Integers (base and exponent of one integer dtype): integer_pow, exact with wrap-around.
void pow_forward(const ForwardCall& call) {
    binary_forward<kArithmetic>(call, "pow", [](auto a, auto b) {
        if constexpr (std::is_integral_v<decltype(a)>) return integer_pow(a, b);
        else return std::pow(a, b);
    });
}
void pow_backward(const BackwardCall& call) {
    binary_backward(
        call, "pow",
        [](auto a, auto b, auto g) {
            using T = decltype(g);
            return b == T(0) ? T(0) : g * b * std::pow(a, b - T(1));
        },
        [](auto a, auto b, auto g) {
            using T = decltype(g);
            return a == T(0) && b >= T(0) ? T(0) : g * std::pow(a, b) * std::log(a);
        });
}

// neg: also signed integers (-INT_MIN = INT_MIN, numpy) and float16 / bfloat16 (exact).
void neg_forward(const ForwardCall& call) {
    unary_forward<kNegates>(call, "neg", [](auto x) {
        if constexpr (std::is_integral_v<decltype(x)>) return wrapping_neg(x);
        else return -x;
    });
}
void neg_backward(const BackwardCall& call) {
    unary_backward(call, "neg", [](auto, auto g) { return -g; });
}

// erf: gradient g * 2/sqrt(pi) * exp(-x^2).
void erf_forward(const ForwardCall& call) {
    unary_forward(call, "erf", [](auto x) { return std::erf(x); });
}
void erf_backward(const BackwardCall& call) {
    unary_backward(call, "erf", [](auto x, auto g) {
        using T = decltype(x);
        return g * T(kTwoOverSqrtPi) * std::exp(-x * x);
    });
}

}  // namespace capsule::reference
