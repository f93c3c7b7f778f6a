// Elementwise capsules of the LibTorch plugin: arithmetic with NumPy broadcasting, activations,
// comparisons, logic, where, cast and random sampling. Each follows the PyTorch (or ONNX) op that
// docs/ops.md names; where ATen's op differs from that contract (torch.sign of NaN, softsign at
// infinity, ONNX's HardSigmoid and Selu parameters) the difference is handled here and said so.
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "ops.hpp"

namespace capsule::libtorch {

namespace {
const at::Tensor& x0(const OpArgs& a) { return a.inputs.at(0); }
const at::Tensor& x1(const OpArgs& a) { return a.inputs.at(1); }

/// `value` where `x` is NaN (no gradient flows there), else `y`: docs/ops.md keeps NaN, and a
/// NaN input gets a zero gradient, as the reference capsules give.
at::Tensor keep_nan(const at::Tensor& x, const at::Tensor& y) { return at::where(at::isnan(x), x.detach(), y); }

/// `y` (an op of x that is NaN where x is) with a NaN gradient where x is NaN, as the reference
/// capsules' formulas give for the exponential activations; ATen's elu/celu backward and the
/// clamped softplus branches give g, a finite value or 0 there.
at::Tensor nan_gradient(const at::Tensor& x, const at::Tensor& y) {
    return y + at::where(at::isnan(x), x * x.detach(), at::zeros_like(x));
}
}  // namespace

at::Tensor op_add(const OpArgs& a) { return at::add(x0(a), x1(a)); }
at::Tensor op_sub(const OpArgs& a) { return at::sub(x0(a), x1(a)); }
at::Tensor op_mul(const OpArgs& a) { return at::mul(x0(a), x1(a)); }
/// int64 `b`'s entries as a divisor: a 0 is the caller's data, refused as such (ATen raises a
/// ZeroDivisionError of its own wording), and -1 becomes 1 (the caller negates those quotients:
/// INT64_MIN / -1 traps on x86 and wraps to INT64_MIN in the reference capsule).
at::Tensor int64_divisor(const char* op, const at::Tensor& b) {
    if (b.eq(0).any().item<bool>())
        plugin::fail(CAPSULE_ERROR_INVALID_DATA,
                     std::string(op) + ": int64 division by zero (input 1 holds 0; ONNX leaves it undefined)");
    return at::where(b.eq(-1), at::ones_like(b), b);
}

/// ONNX Div: true division of floats, truncating division of integers (C's `/`, which
/// at::div's rounding_mode "trunc" computes; plain at::div would give a float quotient).
at::Tensor op_div(const OpArgs& a) {
    const at::Tensor x = x0(a), y = x1(a);
    if (!at::isIntegralType(x.scalar_type(), /*includeBool=*/false)) return at::div(x, y);
    const at::Tensor q = at::div(x, int64_divisor("div", y), "trunc");
    return at::where(y.eq(-1), at::neg(x), q);
}
at::Tensor op_pow(const OpArgs& a) { return at::pow(x0(a), x1(a)); }

/// ONNX Mod as at::fmod (`fmod`) or at::remainder. int64: b = 0 is refused as the caller's
/// data, and b = -1 is computed as b = 1 (both give 0; ATen's INT64_MIN % -1 traps on x86).
at::Tensor op_mod(const OpArgs& a) {
    const at::Tensor x = x0(a);
    at::Tensor y = x1(a);
    if (y.scalar_type() == at::kLong) y = int64_divisor("mod", y);
    return a.attrs.get_bool("fmod", false) ? at::fmod(x, y) : at::remainder(x, y);
}
at::Tensor op_max(const OpArgs& a) { return at::maximum(x0(a), x1(a)); }
at::Tensor op_min(const OpArgs& a) { return at::minimum(x0(a), x1(a)); }
at::Tensor op_scale(const OpArgs& a) { return at::mul(x0(a), a.attrs.get_float("factor", 1.0)); }

at::Tensor op_clamp(const OpArgs& a) {
    c10::optional<at::Scalar> lo, hi;
    const double min = a.attrs.get_float("min", 0.0), max = a.attrs.get_float("max", 0.0);
    if (a.attrs.has("min")) lo = min;
    if (a.attrs.has("max")) hi = max;
    if (!lo && !hi) plugin::fail("clamp needs 'min' or 'max'");
    return at::clamp(fitting(x0(a), {min, max}), lo, hi).to(x0(a).scalar_type());
}

at::Tensor op_abs(const OpArgs& a) { return at::abs(x0(a)); }
at::Tensor op_sqrt(const OpArgs& a) { return at::sqrt(x0(a)); }
at::Tensor op_relu(const OpArgs& a) { return at::relu(x0(a)); }
// docs/ops.md: ½x·erfc(−x/√2), and for `tanh` x·σ(2u) (= ½x(1 + tanh u)), so that the negative
// tail is not cancelled to 0 (ATen's gelu computes ½x(1 + erf(x/√2))).
at::Tensor op_gelu(const OpArgs& a) {
    const std::string approximate = a.attrs.get_string("approximate", "none");
    const at::Tensor& x = x0(a);
    if (approximate == "none") return 0.5 * x * at::erfc(x * -M_SQRT1_2);
    if (approximate == "tanh") {
        const double k = std::sqrt(2.0 / M_PI);
        return x * at::sigmoid(2.0 * k * (x + 0.044715 * x * x * x));
    }
    plugin::fail("gelu: attribute 'approximate' must be 'none' or 'tanh', got '" + approximate + "'");
}
// float32 in double: ATen's vectorised float sigmoid flushes results below 2^-126 to 0.
at::Tensor op_sigmoid(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    return x.scalar_type() == at::kFloat ? at::sigmoid(x.to(at::kDouble)).to(at::kFloat) : at::sigmoid(x);
}
at::Tensor op_tanh(const OpArgs& a) { return at::tanh(x0(a)); }
// log(1 + exp(βx))/β evaluated as docs/ops.md says, max(z, 0) + log1p(exp(−|z|)) with z = βx,
// in float64 (float32 tails such as 3.7e-44 are subnormal, and ATen's vectorised exp flushes
// them), and x where z > threshold. ATen's softplus overflows to inf when 88 < z < threshold.
// Each branch sees its own half of z (clamped), so that the unused branch's gradient is finite.
at::Tensor op_softplus(const OpArgs& a) {
    const double beta = a.attrs.get_float("beta", 1.0), threshold = a.attrs.get_float("threshold", 20.0);
    const at::Tensor& x = x0(a);
    const at::Tensor z = x.to(at::kDouble) * beta;
    const at::Tensor up = at::clamp_min(z, 0.0), down = at::clamp_max(z, 0.0);
    const at::Tensor soft = at::where(z > 0, up + at::log1p(at::exp(-up)), at::log1p(at::exp(down))) / beta;
    return nan_gradient(x, at::where(z > threshold, x.to(at::kDouble), soft).to(x.scalar_type()));
}
at::Tensor op_exp(const OpArgs& a) { return at::exp(x0(a)); }
at::Tensor op_log(const OpArgs& a) { return at::log(x0(a)); }
at::Tensor op_sin(const OpArgs& a) { return at::sin(x0(a)); }
at::Tensor op_cos(const OpArgs& a) { return at::cos(x0(a)); }
at::Tensor op_inv(const OpArgs& a) { return at::reciprocal(x0(a)); }
at::Tensor op_safe_log(const OpArgs& a) {
    const double eps = a.attrs.get_float("eps", 1e-12);
    return at::log(at::clamp_min(fitting(x0(a), {eps}), eps)).to(x0(a).scalar_type());
}
at::Tensor op_neg(const OpArgs& a) { return at::neg(x0(a)); }
at::Tensor op_erf(const OpArgs& a) { return at::erf(x0(a)); }
at::Tensor op_floor(const OpArgs& a) { return at::floor(x0(a)); }
at::Tensor op_ceil(const OpArgs& a) { return at::ceil(x0(a)); }
// torch.sign gives 0 for NaN in LibTorch 1.13; docs/ops.md keeps NaN.
at::Tensor op_sign(const OpArgs& a) { return keep_nan(x0(a), at::sign(x0(a))); }
at::Tensor op_tan(const OpArgs& a) { return at::tan(x0(a)); }
at::Tensor op_asin(const OpArgs& a) { return at::asin(x0(a)); }
at::Tensor op_acos(const OpArgs& a) { return at::acos(x0(a)); }
at::Tensor op_atan(const OpArgs& a) { return at::atan(x0(a)); }
namespace {
/// sinh (odd) or cosh of x in float64 (float32 widened), with e^|x|/2 for |x| > 20 (exact to
/// float64 there, as e^-|x| < 1e-17 of it): ATen's vectorised kernels compute e^x first, which
/// overflows just below the largest float (sinh(89) in float32, sinh(710) in float64) where
/// the result itself is finite; some elements of one tensor took that path and others not.
at::Tensor hyperbolic(const at::Tensor& x, bool odd) {
    const at::Tensor d = x.to(at::kDouble);
    const at::Tensor large = at::abs(d) > 20.0;
    const at::Tensor tail = at::exp(at::abs(at::where(large, d, at::zeros_like(d))) - M_LN2);
    const at::Tensor small = at::where(large, at::zeros_like(d), d);
    const at::Tensor y = odd ? at::where(large, at::sign(d) * tail, at::sinh(small))
                             : at::where(large, tail, at::cosh(small));
    return y.to(x.scalar_type());
}
}  // namespace
at::Tensor op_sinh(const OpArgs& a) { return hyperbolic(x0(a), true); }
at::Tensor op_cosh(const OpArgs& a) { return hyperbolic(x0(a), false); }
at::Tensor op_asinh(const OpArgs& a) { return at::asinh(x0(a)); }
at::Tensor op_acosh(const OpArgs& a) { return at::acosh(x0(a)); }
at::Tensor op_atanh(const OpArgs& a) { return at::atanh(x0(a)); }
at::Tensor op_leaky_relu(const OpArgs& a) {
    const double slope = a.attrs.get_float("negative_slope", 0.01);
    return at::leaky_relu(fitting(x0(a), {slope}), slope).to(x0(a).scalar_type());
}
at::Tensor op_elu(const OpArgs& a) {
    const double alpha = a.attrs.get_float("alpha", 1.0);
    return nan_gradient(x0(a), at::elu(fitting(x0(a), {alpha}), alpha).to(x0(a).scalar_type()));
}
// ONNX Selu: gamma * elu(x, alpha), i.e. torch's elu with scale = gamma.
at::Tensor op_selu(const OpArgs& a) {
    const double alpha = a.attrs.get_float("alpha", 1.6732632423543772848);
    const double gamma = a.attrs.get_float("gamma", 1.0507009873554804934);
    return nan_gradient(x0(a), at::elu(fitting(x0(a), {alpha, gamma, alpha * gamma}), alpha, gamma, 1.0)
                                   .to(x0(a).scalar_type()));
}
at::Tensor op_celu(const OpArgs& a) {
    const double alpha = a.attrs.get_float("alpha", 1.0);
    return nan_gradient(x0(a), at::celu(fitting(x0(a), {alpha, 1.0 / alpha}), alpha).to(x0(a).scalar_type()));
}
// ONNX HardSigmoid: max(0, min(1, alpha*x + beta)) with gradient alpha·g only strictly inside
// (0, 1) (docs/ops.md; torch.clamp's gradient also passes at the bounds); NaN stays NaN.
at::Tensor op_hardsigmoid(const OpArgs& a) {
    const double alpha = a.attrs.get_float("alpha", 0.2), beta = a.attrs.get_float("beta", 0.5);
    const at::Tensor z = x0(a) * alpha + beta;
    return at::where((z > 0).logical_and(z < 1), z, at::clamp(z, 0.0, 1.0).detach());
}
// x·clamp(x/6 + 1/2, 0, 1) written out: the gradient is g·(x/3 + 1/2) on [−3, 3] bounds included
// (docs/ops.md), where ATen's hardswish_backward gave g or 1.5·g at x = 3 depending on whether
// the element fell on its vectorised path.
at::Tensor op_hardswish(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    return x * at::clamp(x / 6.0 + 0.5, 0.0, 1.0);
}
// x / (1 + |x|), with its limit ±1 at ±inf (the formula alone gives inf/inf = NaN, and so would
// its gradient: the formula sees 0 there, the limit has gradient 0).
at::Tensor op_softsign(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    const at::Tensor inf = at::isinf(x);
    const at::Tensor finite = at::where(inf, at::zeros_like(x), x);
    return at::where(inf, at::sign(x).detach(), finite / (at::abs(finite) + 1));
}
// x > alpha ? x : 0; NaN stays NaN with a zero gradient.
at::Tensor op_thresholded_relu(const OpArgs& a) {
    const double alpha = a.attrs.get_float("alpha", 1.0);
    const at::Tensor x = fitting(x0(a), {alpha});
    return keep_nan(x, at::where(x > alpha, x, at::zeros_like(x))).to(x0(a).scalar_type());
}
at::Tensor op_mish(const OpArgs& a) { return at::mish(x0(a)); }
// ONNX Shrink; NaN stays NaN (both comparisons are false for it).
at::Tensor op_shrink(const OpArgs& a) {
    const double l = a.attrs.get_float("lambd", 0.5), b = a.attrs.get_float("bias", 0.0);
    const at::Tensor& x = x0(a);
    const at::Tensor inner = at::where(at::isnan(x), x, at::zeros_like(x));
    return at::where(x < -l, x + b, at::where(x > l, x - b, inner));
}

at::Tensor op_equal(const OpArgs& a) { return at::eq(x0(a), x1(a)); }
at::Tensor op_less(const OpArgs& a) { return at::lt(x0(a), x1(a)); }
at::Tensor op_less_equal(const OpArgs& a) { return at::le(x0(a), x1(a)); }
at::Tensor op_greater(const OpArgs& a) { return at::gt(x0(a), x1(a)); }
at::Tensor op_greater_equal(const OpArgs& a) { return at::ge(x0(a), x1(a)); }
at::Tensor op_logical_not(const OpArgs& a) { return at::logical_not(x0(a)); }
at::Tensor op_logical_and(const OpArgs& a) { return at::logical_and(x0(a), x1(a)); }
at::Tensor op_logical_or(const OpArgs& a) { return at::logical_or(x0(a), x1(a)); }
at::Tensor op_logical_xor(const OpArgs& a) { return at::logical_xor(x0(a), x1(a)); }
// ONNX IsInf: torch.isposinf / torch.isneginf as the detect_* flags ask.
at::Tensor op_is_inf(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    at::Tensor y = at::zeros(x.sizes(), x.options().dtype(at::kBool));
    if (a.attrs.get_bool("detect_positive", true)) y = y.logical_or(at::isposinf(x));
    if (a.attrs.get_bool("detect_negative", true)) y = y.logical_or(at::isneginf(x));
    return y;
}
at::Tensor op_where(const OpArgs& a) { return at::where(a.inputs.at(0), a.inputs.at(1), a.inputs.at(2)); }

// ONNX Cast / x.to(dtype). A float to int64 conversion of a NaN, an infinity or a value outside
// int64's range is an error (ONNX leaves it undefined; C++ makes it undefined behaviour).
at::Tensor op_cast(const OpArgs& a) {
    const std::string to = a.attrs.get_string("to", "");
    at::ScalarType target;
    if (to == "float32") target = at::kFloat;
    else if (to == "float64") target = at::kDouble;
    else if (to == "int64") target = at::kLong;
    else if (to == "bool") target = at::kBool;
    else plugin::fail("cast: attribute 'to' must be float32, float64, int64 or bool, got '" + to + "'");
    const at::Tensor& x = x0(a);
    if (target == at::kLong && at::isFloatingType(x.scalar_type()) && x.numel() > 0) {
        const at::Tensor t = at::trunc(x.to(at::kDouble));
        // 2^63 is the first double above int64's range; -2^63 is its lowest value.
        const bool ok = at::isfinite(t).all().item<bool>() && (t < 9223372036854775808.0).all().item<bool>() &&
                        (t >= -9223372036854775808.0).all().item<bool>();
        if (!ok)
            plugin::fail("cast: a NaN, infinite or out-of-range value cannot be converted to int64");
    }
    return x.to(target);
}

// Random sampling through LibTorch's CPU generator seeded with `seed`: the same seed gives the
// same values on this capsule (docs/ops.md promises no bitwise equality across providers).
at::Tensor op_rand_uniform(const OpArgs& a) {
    const std::vector<int64_t> shape = a.attrs.get_ints("shape", {});
    const std::string dtype = a.attrs.get_string("dtype", "float32");
    if (dtype != "float32" && dtype != "float64")
        plugin::fail("rand_uniform: attribute 'dtype' must be float32 or float64, got '" + dtype + "'");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(a.attrs.get_int("seed", 0)));
    return at::rand(shape, gen, at::TensorOptions().dtype(dtype == "float32" ? at::kFloat : at::kDouble));
}

at::Tensor op_bernoulli_mask(const OpArgs& a) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(a.attrs.get_int("seed", 0)));
    return at::bernoulli(x0(a), gen);
}

}  // namespace capsule::libtorch
