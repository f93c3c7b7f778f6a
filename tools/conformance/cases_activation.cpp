// Conformance cases of the unary ops added for ONNX import: floor, ceil, sign, the trigonometric
// and hyperbolic functions, and the activations leaky_relu, elu, selu, celu, hardsigmoid,
// hardswish, softsign, thresholded_relu, mish.
//
// Expected values are literal numbers worked out by hand (or published values, e.g. SELU's and
// Mish's at ±1), or the op's defining formula evaluated here with std:: math in double on the
// values the kernel sees; never a kernel. Gradient cases keep away from kinks.
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

namespace capsule::conformance {
namespace {

using builders::kInf;
using builders::kNaN;
using builders::make;
using builders::seen;
using builders::V;
using builders::with_grad;
using S = std::string;
constexpr double kPi = std::numbers::pi;

/// The case `op(x)` with the expected output f applied to each value as the kernel sees it.
KernelCase formula(std::string name, BackendOp op, CaseTensor x,
                   const std::function<double(double)>& f, Attributes attrs = {}) {
    V out = seen(x);
    for (auto& v : out) v = f(v);
    CaseTensor expected{x.dtype, x.shape, out};
    return make(std::move(name), op, {std::move(x)}, std::move(expected), std::move(attrs));
}

void rounding_cases(std::vector<KernelCase>& out) {
    out.push_back(make("floor/values", BackendOp::floor, {f32({5}, {-1.5, -0.5, 0, 0.5, 2})},
                       f32({5}, {-2, -1, 0, 0, 2})));
    out.push_back(with_grad(make("floor/zero_gradient_f64", BackendOp::floor,
                                 {f64({3}, {-1.25, 0.5, 3.75})}, f64({3}, {-2, 0, 3}))));
    out.push_back(make("floor/special", BackendOp::floor, {f32({3}, {kInf, -kInf, kNaN})},
                       f32({3}, {kInf, -kInf, kNaN})));
    out.push_back(make("ceil/values", BackendOp::ceil, {f32({5}, {-1.5, -0.5, 0, 0.5, 2})},
                       f32({5}, {-1, 0, 0, 1, 2})));
    out.push_back(with_grad(make("ceil/zero_gradient_f64", BackendOp::ceil,
                                 {f64({3}, {-1.25, 0.5, 3.75})}, f64({3}, {-1, 1, 4}))));
    out.push_back(make("sign/values", BackendOp::sign, {f32({6}, {-3, -0.0, 0, 2, kNaN, -kInf})},
                       f32({6}, {-1, 0, 0, 1, kNaN, -1})));
    out.push_back(with_grad(make("sign/zero_gradient", BackendOp::sign, {f32({3}, {-2, 0.5, 4})},
                                 f32({3}, {-1, 1, 1}))));
}

void trig_cases(std::vector<KernelCase>& out) {
    const auto tan_in = f32({4}, {-1, -0.5, 0.25, 1.2});
    out.push_back(with_grad(formula("tan/values", BackendOp::tan, tan_in, [](double x) { return std::tan(x); })));
    out.push_back(make("tan/quarter_pi_f64", BackendOp::tan, {f64({2}, {kPi / 4, -kPi / 4})},
                       f64({2}, {1, -1})));
    const auto unit = f32({4}, {-0.75, -0.25, 0.125, 0.5});
    out.push_back(with_grad(formula("asin/values", BackendOp::asin, unit, [](double x) { return std::asin(x); })));
    out.push_back(make("asin/edges", BackendOp::asin, {f64({4}, {1, -1, 2, 0.5})},
                       f64({4}, {kPi / 2, -kPi / 2, kNaN, kPi / 6})));
    out.push_back(with_grad(formula("acos/values", BackendOp::acos, unit, [](double x) { return std::acos(x); })));
    out.push_back(make("acos/edges", BackendOp::acos, {f64({4}, {1, -1, -2, 0.5})},
                       f64({4}, {0, kPi, kNaN, kPi / 3})));
    out.push_back(with_grad(formula("atan/values", BackendOp::atan, f32({4}, {-3, -0.5, 0, 2}),
                                    [](double x) { return std::atan(x); })));
    out.push_back(make("atan/edges", BackendOp::atan, {f64({3}, {1, kInf, -kInf})},
                       f64({3}, {kPi / 4, kPi / 2, -kPi / 2})));
    const auto hyp = f32({4}, {-2, -0.5, 0, 1});
    out.push_back(with_grad(formula("sinh/values", BackendOp::sinh, hyp, [](double x) { return std::sinh(x); })));
    // sinh(1) = (e - 1/e) / 2, cosh(1) = (e + 1/e) / 2
    out.push_back(make("sinh/one_f64", BackendOp::sinh, {f64({2}, {1, -1})},
                       f64({2}, {(std::numbers::e - 1 / std::numbers::e) / 2,
                                 -(std::numbers::e - 1 / std::numbers::e) / 2})));
    out.push_back(with_grad(formula("cosh/values", BackendOp::cosh, hyp, [](double x) { return std::cosh(x); })));
    out.push_back(make("cosh/one_f64", BackendOp::cosh, {f64({2}, {1, 0})},
                       f64({2}, {(std::numbers::e + 1 / std::numbers::e) / 2, 1})));
    out.push_back(with_grad(formula("asinh/values", BackendOp::asinh, hyp, [](double x) { return std::asinh(x); })));
    out.push_back(with_grad(formula("acosh/values", BackendOp::acosh, f32({3}, {1.5, 2, 10}),
                                    [](double x) { return std::acosh(x); })));
    out.push_back(make("acosh/edges", BackendOp::acosh, {f64({3}, {1, 0.5, kInf})},
                       f64({3}, {0, kNaN, kInf})));
    out.push_back(with_grad(formula("atanh/values", BackendOp::atanh, f32({3}, {-0.875, -0.25, 0.5}),
                                    [](double x) { return std::atanh(x); })));
    out.push_back(make("atanh/edges", BackendOp::atanh, {f64({4}, {1, -1, 2, 0})},
                       f64({4}, {kInf, -kInf, kNaN, 0})));
}

void activation_function_cases(std::vector<KernelCase>& out) {
    const auto xs = f32({5}, {-2, -0.5, 0.25, 1, 3});
    out.push_back(with_grad(make("leaky_relu/default_slope", BackendOp::leaky_relu, {xs},
                                 f32({5}, {-0.02, -0.005, 0.25, 1, 3}))));
    out.push_back(with_grad(make("leaky_relu/slope_f64", BackendOp::leaky_relu,
                                 {f64({3}, {-4, 0.5, 2})}, f64({3}, {-0.8, 0.5, 2}),
                                 {{"negative_slope", 0.2}})));
    auto elu = [](double alpha) { return [alpha](double x) { return x > 0 ? x : alpha * std::expm1(x); }; };
    out.push_back(with_grad(formula("elu/default_alpha", BackendOp::elu, xs, elu(1.0))));
    out.push_back(with_grad(formula("elu/alpha_f64", BackendOp::elu, f64({3}, {-1, -0.25, 2}), elu(2.0),
                                    {{"alpha", 2.0}})));
    // SELU's published values: selu(1) = 1.0507009873554805, selu(-1) = -1.1113307378125625
    out.push_back(make("selu/published_values_f64", BackendOp::selu, {f64({3}, {1, -1, 0})},
                       f64({3}, {1.0507009873554805, -1.1113307378125625, 0})));
    out.push_back(with_grad(formula("selu/attributes", BackendOp::selu, xs,
                                    [](double x) { return 2 * (x > 0 ? x : 1.5 * std::expm1(x)); },
                                    {{"alpha", 1.5}, {"gamma", 2.0}})));
    auto celu = [](double a) { return [a](double x) { return std::max(0.0, x) + std::min(0.0, a * std::expm1(x / a)); }; };
    out.push_back(with_grad(formula("celu/default_alpha", BackendOp::celu, xs, celu(1.0))));
    out.push_back(with_grad(formula("celu/alpha_half_f64", BackendOp::celu, f64({3}, {-1, -0.25, 2}), celu(0.5),
                                    {{"alpha", 0.5}})));
    // max(0, min(1, 0.2 x + 0.5))
    out.push_back(make("hardsigmoid/default", BackendOp::hardsigmoid,
                       {f32({5}, {-5, -1, 0, 1, 5})}, f32({5}, {0, 0.3, 0.5, 0.7, 1})));
    out.push_back(with_grad(make("hardsigmoid/gradient_inside_and_outside", BackendOp::hardsigmoid,
                                 {f64({5}, {-3, -1, 0.5, 2, 4})}, f64({5}, {0, 0.3, 0.6, 0.9, 1}))));
    out.push_back(with_grad(make("hardsigmoid/attributes", BackendOp::hardsigmoid,
                                 {f32({3}, {-2, 0, 4})}, f32({3}, {0, 0.25, 1}),
                                 {{"alpha", 0.25}, {"beta", 0.25}})));
    out.push_back(make("hardsigmoid/nan", BackendOp::hardsigmoid, {f32({1}, {kNaN})}, f32({1}, {kNaN})));
    // x * min(max(x + 3, 0), 6) / 6
    out.push_back(make("hardswish/values", BackendOp::hardswish,
                       {f32({7}, {-4, -3, -1, 0, 1, 3, 4})},
                       f32({7}, {0, 0, -1.0 / 3, 0, 2.0 / 3, 3, 4})));
    out.push_back(with_grad(make("hardswish/gradient", BackendOp::hardswish,
                                 {f64({4}, {-4, -1.5, 0.75, 4})},
                                 f64({4}, {0, -0.375, 0.46875, 4}))));
    out.push_back(with_grad(make("softsign/values", BackendOp::softsign,
                                 {f32({4}, {-3, -0.5, 0, 2})}, f32({4}, {-0.75, -1.0 / 3, 0, 2.0 / 3}))));
    out.push_back(make("thresholded_relu/default_alpha", BackendOp::thresholded_relu,
                       {f32({5}, {-1, 0.5, 1, 1.5, 3})}, f32({5}, {0, 0, 0, 1.5, 3})));
    out.push_back(with_grad(make("thresholded_relu/alpha_f64", BackendOp::thresholded_relu,
                                 {f64({4}, {-1, 0.25, 0.75, 3})}, f64({4}, {0, 0, 0.75, 3}),
                                 {{"alpha", 0.5}})));
    // shrink: ONNX's test_shrink_hard (lambd 1.5, bias 0) and test_shrink_soft (bias = lambd).
    const auto ramp = f32({5}, {-2, -1, 0, 1, 2});
    out.push_back(make("shrink/onnx_hard", BackendOp::shrink, {ramp}, f32({5}, {-2, 0, 0, 0, 2}),
                       {{"lambd", 1.5}}));
    out.push_back(make("shrink/onnx_soft", BackendOp::shrink, {ramp}, f32({5}, {-0.5, 0, 0, 0, 0.5}),
                       {{"lambd", 1.5}, {"bias", 1.5}}));
    out.push_back(with_grad(make("shrink/defaults_f64", BackendOp::shrink, {f64({4}, {-3, -0.25, 0.3, 0.75})},
                                 f64({4}, {-3, 0, 0, 0.75}))));
    out.push_back(make("shrink/nan_inf", BackendOp::shrink, {f32({3}, {kNaN, kInf, -kInf})},
                       f32({3}, {kNaN, kInf, -kInf}), {{"bias", 2.0}}));
    // Mish's values at ±1: 1 * tanh(ln(1 + e)), -1 * tanh(ln(1 + 1/e))
    out.push_back(make("mish/published_values_f64", BackendOp::mish, {f64({3}, {1, -1, 0})},
                       f64({3}, {0.8650983882673103, -0.30340146137410895, 0})));
    out.push_back(with_grad(formula("mish/values", BackendOp::mish, xs,
                                    [](double x) { return x * std::tanh(std::log1p(std::exp(x))); })));
    out.push_back(make("mish/large_f32", BackendOp::mish, {f32({2}, {100, -100})}, f32({2}, {100, 0})));
}

void error_cases(std::vector<KernelCase>& out) {
    out.push_back(error_case("celu/error_zero_alpha", BackendOp::celu, {f32({2}, {1, 2})},
                             "celu: attribute 'alpha' must be a finite nonzero number",
                             f32({2}, {}), {{"alpha", 0.0}}));
    out.push_back(error_case("leaky_relu/error_nan_slope", BackendOp::leaky_relu,
                             {f32({2}, {1, 2})},
                             "leaky_relu: attribute 'negative_slope' must not be NaN", f32({2}, {}),
                             {{"negative_slope", kNaN}}));
    out.push_back(error_case("floor/error_int64", BackendOp::floor, {i64({2}, {1, 2})},
                             "floor: input has dtype int64; expected one of float32, float64, float16, bfloat16",
                             i64({2}, {})));
    out.push_back(error_case("hardsigmoid/error_infinite_alpha", BackendOp::hardsigmoid,
                             {f32({2}, {1, 2})},
                             "hardsigmoid: attribute 'alpha' must be a finite number", f32({2}, {}),
                             {{"alpha", kInf}}));
}

}  // namespace

std::vector<KernelCase> activation_cases() {
    std::vector<KernelCase> out;
    rounding_cases(out);
    trig_cases(out);
    activation_function_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
