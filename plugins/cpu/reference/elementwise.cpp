// Reference kernels of the elementwise ops: binary ops with NumPy broadcasting (add, sub, mul,
// max, min) and unary ops (scale, abs, sqrt, clamp, relu, gelu, sigmoid, tanh, softplus, exp,
// log, sin, cos, inv, safe_log). float32 and float64; values follow PyTorch (docs/ops.md), each
// computed in the tensor's own dtype as PyTorch's CPU kernels do.
//
// Backward kernels overwrite grad_inputs; a binary op's gradient for a broadcast operand is summed
// over the broadcast dimensions (accumulated in double). Tie and edge conventions follow
// PyTorch's derivatives.yaml and are stated at each kernel.
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

// ---------------------------------------------------------------------------------------------
// Unary

/// y = f(x) elementwise; `f` is a generic callable evaluated in the tensor's dtype.
template <typename F>
void unary_forward(const ForwardCall& call, const char* op, F f) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const Tensor y = call.output(0);
    check_like(y, {op, ": output"}, x, "the input");
    const int64_t n = x.numel();
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        for (int64_t i = 0; i < n; ++i) yp[i] = f(xp[i]);
    });
}

/// grad_x = d(x, g) elementwise, where d returns g * f'(x).
template <typename D>
void unary_backward(const BackwardCall& call, const char* op, D d) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const Tensor g = call.grad_output(0);
    check_like(g, {op, ": grad output"}, x, "the input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    const int64_t n = x.numel();
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        for (int64_t i = 0; i < n; ++i) out[i] = d(xp[i], gp[i]);
    });
}

/// A float attribute that must be present and not NaN.
double required_number(const plugin::Attributes& attrs, const char* op, const char* name) {
    require(attrs.has(name),
            [&] { return std::string(op) + ": missing attribute '" + name + "' (number)"; });
    const double v = attrs.get_float(name, 0.0);
    require(!std::isnan(v),
            [&] { return std::string(op) + ": attribute '" + name + "' must not be NaN"; });
    return v;
}

double optional_number(const plugin::Attributes& attrs, const char* op, const char* name,
                       double fallback) {
    const double v = attrs.get_float(name, fallback);
    require(!std::isnan(v),
            [&] { return std::string(op) + ": attribute '" + name + "' must not be NaN"; });
    return v;
}

template <typename T>
T sign_of(T x) {  // torch.sign: 0 at 0 (and at NaN)
    return static_cast<T>((T(0) < x) - (x < T(0)));
}

template <typename T>
T sigmoid_of(T x) {  // stable on both tails
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
}

constexpr double kSqrt1_2 = 0.70710678118654752440;    // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794; // 1/sqrt(2*pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2/pi)
constexpr double kGeluKappa = 0.044715;

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

struct ClampBounds {
    bool has_lo, has_hi;
    double lo, hi;
};
ClampBounds clamp_bounds(const plugin::Attributes& attrs) {
    ClampBounds b{attrs.has("min"), attrs.has("max"), 0, 0};
    require(b.has_lo || b.has_hi, "clamp: needs attribute 'min' or 'max' (or both)");
    if (b.has_lo) b.lo = required_number(attrs, "clamp", "min");
    if (b.has_hi) b.hi = required_number(attrs, "clamp", "max");
    return b;
}

// ---------------------------------------------------------------------------------------------
// Binary with broadcasting

struct BinaryShapes {
    Tensor a, b;
    Dims out;
};

BinaryShapes binary_inputs(std::size_t num_inputs, const Tensor& a, const Tensor& b,
                           const char* op) {
    require_arity(num_inputs, 2, op);
    check_float(a, {op, ": input 0"});
    check_view(b, {op, ": input 1"}, a.dtype());
    return {a, b, broadcast_shapes(a.shape(), b.shape(), op)};
}

/// out = f(a, b) with NumPy broadcasting.
template <typename F>
void binary_forward(const ForwardCall& call, const char* op, F f) {
    const auto s = binary_inputs(call.num_inputs(), call.input(0),
                                 call.num_inputs() > 1 ? call.input(1) : call.input(0), op);
    const Tensor out = call.output(0);
    check_view(out, {op, ": output"}, s.a.dtype());
    check_shape(out, {op, ": output"}, s.out);
    dispatch_float(s.a.dtype(), [&]<typename T>(T) {
        const T* ap = s.a.template data<const T>();
        const T* bp = s.b.template data<const T>();
        T* op_ = out.data<T>();
        if (std::ranges::equal(s.a.shape(), s.out) && std::ranges::equal(s.b.shape(), s.out)) {
            const int64_t n = out.numel();
            for (int64_t i = 0; i < n; ++i) op_[i] = f(ap[i], bp[i]);
            return;
        }
        const Dims os = contiguous_strides(s.out);
        const Dims as = broadcast_strides(s.a.shape(), s.out);
        const Dims bs = broadcast_strides(s.b.shape(), s.out);
        for_each_strided<3>(s.out, {os.data(), as.data(), bs.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* st) {
                                T* o = op_ + off[0];
                                const T* x = ap + off[1];
                                const T* y = bp + off[2];
                                const int64_t so = st[0], sa = st[1], sb = st[2];
                                if (so == 1 && sa == 1 && sb == 0) {
                                    const T yv = *y;
                                    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
                                } else if (so == 1 && sa == 0 && sb == 1) {
                                    const T xv = *x;
                                    for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
                                } else if (so == 1 && sa == 1 && sb == 1) {
                                    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
                                } else {
                                    for (int64_t i = 0; i < n; ++i) o[i * so] = f(x[i * sa], y[i * sb]);
                                }
                            });
    });
}

/// grad_a = reduce(da(a, b, g)), grad_b = reduce(db(a, b, g)), each summed over the dimensions
/// along which its operand was broadcast.
template <typename DA, typename DB>
void binary_backward(const BackwardCall& call, const char* op, DA da, DB db) {
    const auto s = binary_inputs(call.num_inputs(), call.input(0),
                                 call.num_inputs() > 1 ? call.input(1) : call.input(0), op);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, s.a.dtype());
    check_shape(g, {op, ": grad output"}, s.out);
    const Tensor ga = call.grad_input(0), gb = call.grad_input(1);
    const bool want_a = ga.present(), want_b = gb.present();
    if (want_a) check_like(ga, {op, ": grad input 0"}, s.a, "input 0");
    if (want_b) check_like(gb, {op, ": grad input 1"}, s.b, "input 1");
    if (!want_a && !want_b) return;
    dispatch_float(s.a.dtype(), [&]<typename T>(T) {
        const T* ap = s.a.template data<const T>();
        const T* bp = s.b.template data<const T>();
        const T* gp = g.data<const T>();
        if (std::ranges::equal(s.a.shape(), s.out) && std::ranges::equal(s.b.shape(), s.out)) {
            const int64_t n = g.numel();
            if (want_a) {
                T* o = ga.data<T>();
                for (int64_t i = 0; i < n; ++i) o[i] = da(ap[i], bp[i], gp[i]);
            }
            if (want_b) {
                T* o = gb.data<T>();
                for (int64_t i = 0; i < n; ++i) o[i] = db(ap[i], bp[i], gp[i]);
            }
            return;
        }
        const Dims gs = contiguous_strides(s.out);
        const Dims as = broadcast_strides(s.a.shape(), s.out);
        const Dims bs = broadcast_strides(s.b.shape(), s.out);
        const int64_t out_n = numel(s.out);
        // One pass per wanted operand. An operand with as many elements as the output gets each
        // element exactly once and is written directly; a broadcast one is accumulated in double.
        auto pass = [&](auto fn, int which, const Tensor& grad, int64_t operand_n) {
            T* dst = grad.data<T>();
            if (operand_n == out_n) {
                for_each_strided<3>(s.out, {gs.data(), as.data(), bs.data()},
                                    [&](const int64_t* off, int64_t n, const int64_t* st) {
                                        const T* x = ap + off[1];
                                        const T* y = bp + off[2];
                                        const T* gg = gp + off[0];
                                        T* d = dst + off[which];
                                        const int64_t sg = st[0], sa = st[1], sb = st[2], sd = st[which];
                                        for (int64_t i = 0; i < n; ++i)
                                            d[i * sd] = fn(x[i * sa], y[i * sb], gg[i * sg]);
                                    });
                return;
            }
            SmallBuffer<double> acc(static_cast<std::size_t>(operand_n), 0.0);
            for_each_strided<3>(s.out, {gs.data(), as.data(), bs.data()},
                                [&](const int64_t* off, int64_t n, const int64_t* st) {
                                    const T* x = ap + off[1];
                                    const T* y = bp + off[2];
                                    const T* gg = gp + off[0];
                                    double* d = acc.data() + off[which];
                                    const int64_t sg = st[0], sa = st[1], sb = st[2], sd = st[which];
                                    if (sd == 0) {
                                        double sum = 0;
                                        for (int64_t i = 0; i < n; ++i)
                                            sum += double(fn(x[i * sa], y[i * sb], gg[i * sg]));
                                        *d += sum;
                                    } else {
                                        for (int64_t i = 0; i < n; ++i)
                                            d[i * sd] += double(fn(x[i * sa], y[i * sb], gg[i * sg]));
                                    }
                                });
            for (int64_t i = 0; i < operand_n; ++i) dst[i] = static_cast<T>(acc[static_cast<std::size_t>(i)]);
        };
        if (want_a) pass(da, 1, ga, s.a.numel());
        if (want_b) pass(db, 2, gb, s.b.numel());
    });
}

template <typename T>
T max_of(T a, T b) {  // torch.maximum: NaN if either is NaN
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return a < b ? b : a;
}
template <typename T>
T min_of(T a, T b) {  // torch.minimum: NaN if either is NaN
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return b < a ? b : a;
}

}  // namespace

// ---- binary ----

void add_forward(const ForwardCall& call) {
    binary_forward(call, "add", [](auto a, auto b) { return a + b; });
}
void add_backward(const BackwardCall& call) {
    binary_backward(call, "add", [](auto, auto, auto g) { return g; },
                    [](auto, auto, auto g) { return g; });
}

void sub_forward(const ForwardCall& call) {
    binary_forward(call, "sub", [](auto a, auto b) { return a - b; });
}
void sub_backward(const BackwardCall& call) {
    binary_backward(call, "sub", [](auto, auto, auto g) { return g; },
                    [](auto, auto, auto g) { return -g; });
}

void mul_forward(const ForwardCall& call) {
    binary_forward(call, "mul", [](auto a, auto b) { return a * b; });
}
void mul_backward(const BackwardCall& call) {
    binary_backward(call, "mul", [](auto, auto b, auto g) { return g * b; },
                    [](auto a, auto, auto g) { return g * a; });
}

// torch.maximum backward (derivatives.yaml): at a == b each side gets g / 2; otherwise the larger
// side gets g. With a NaN operand neither `<` nor `>` holds, so both sides get g, as in PyTorch.
void max_forward(const ForwardCall& call) {
    binary_forward(call, "max", [](auto a, auto b) { return max_of(a, b); });
}
void max_backward(const BackwardCall& call) {
    binary_backward(
        call, "max",
        [](auto a, auto b, auto g) { return a < b ? decltype(g)(0) : (a == b ? g / 2 : g); },
        [](auto a, auto b, auto g) { return a > b ? decltype(g)(0) : (a == b ? g / 2 : g); });
}

// torch.minimum backward: the mirror image of max.
void min_forward(const ForwardCall& call) {
    binary_forward(call, "min", [](auto a, auto b) { return min_of(a, b); });
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

// abs: gradient g * sign(x), 0 at x == 0 (PyTorch).
void abs_forward(const ForwardCall& call) {
    unary_forward(call, "abs", [](auto x) { return std::abs(x); });
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
// are converted to the tensor's dtype first.
void clamp_forward(const ForwardCall& call) {
    const auto b = clamp_bounds(call.attrs());
    unary_forward(call, "clamp", [b](auto x) {
        using T = decltype(x);
        if (std::isnan(x)) return x;
        if (b.has_lo && x < T(b.lo)) x = T(b.lo);
        if (b.has_hi && x > T(b.hi)) x = T(b.hi);
        return x;
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
    unary_forward(call, "relu", [](auto x) { return x < decltype(x)(0) ? decltype(x)(0) : x; });
}
void relu_backward(const BackwardCall& call) {
    unary_backward(call, "relu", [](auto x, auto g) { return x <= decltype(x)(0) ? decltype(x)(0) : g; });
}

// gelu: approximate = "none" (exact erf form, default) or "tanh", as F.gelu; the backward
// formulas are PyTorch's GeluBackward kernels.
void gelu_forward(const ForwardCall& call) {
    if (gelu_tanh(call.attrs())) {
        unary_forward(call, "gelu", [](auto x) {
            using T = decltype(x);
            const T inner = T(kSqrt2OverPi) * (x + T(kGeluKappa) * x * x * x);
            return T(0.5) * x * (T(1) + std::tanh(inner));
        });
    } else {
        unary_forward(call, "gelu", [](auto x) {
            using T = decltype(x);
            return T(0.5) * x * (T(1) + std::erf(x * T(kSqrt1_2)));
        });
    }
}
void gelu_backward(const BackwardCall& call) {
    if (gelu_tanh(call.attrs())) {
        unary_backward(call, "gelu", [](auto x, auto g) {
            using T = decltype(x);
            const T x2 = x * x;
            const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kGeluKappa) * x2 * x));
            const T left = T(0.5) * x;
            const T dleft = T(0.5) * (T(1) + t);
            const T dright = left * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluKappa) * x2);
            return g * (dleft + dright);
        });
    } else {
        unary_backward(call, "gelu", [](auto x, auto g) {
            using T = decltype(x);
            const T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrt1_2)));
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
// g * exp(beta x) / (exp(beta x) + 1).
void softplus_forward(const ForwardCall& call) {
    const auto p = softplus_params(call.attrs());
    unary_forward(call, "softplus", [p](auto x) {
        using T = decltype(x);
        const T bx = x * T(p.beta);
        return bx > T(p.threshold) ? x : std::log1p(std::exp(bx)) / T(p.beta);
    });
}
void softplus_backward(const BackwardCall& call) {
    const auto p = softplus_params(call.attrs());
    unary_backward(call, "softplus", [p](auto x, auto g) {
        using T = decltype(x);
        const T bx = x * T(p.beta);
        if (bx > T(p.threshold)) return g;
        const T z = std::exp(bx);
        return g * z / (z + T(1));
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

}  // namespace capsule::reference
