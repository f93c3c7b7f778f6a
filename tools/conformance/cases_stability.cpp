// Conformance cases for numerical stability: inputs where a textbook formula overflows,
// underflows or cancels, for every reference kernel whose formula can (sigmoid, softplus, gelu,
// softsign, mish, softmax, log_softmax, cross_entropy, layer_norm, batch_norm, attention).
//
// Expected values are hand-derived or published numbers, or the op's definition rewritten into a
// form that is exact in double for these inputs (e.g. sigmoid(-100) = e^-100 / (1 + e^-100),
// Φ(-10) from tables), never the kernel's own expression. Tolerances are relative with atol 0,
// so a tiny expected value (3.7e-44) is not passed by an output of 0.
#include <cmath>
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
using builders::V;
using builders::with_grad;

/// `c` compared with relative tolerance `rtol` only (atol 0).
KernelCase relative(KernelCase c, double rtol) {
    c.rtol = rtol;
    c.atol = 0;
    return c;
}

// float32 subnormals are multiples of 2^-149 (1.4e-45): a float32 value near 3.7e-44 is up to
// half a step (1.9%) from the real number, and exp's own error may add a step; 4% still tells
// 3.7e-44 from 0.
constexpr double kSubnormalRtol = 0.04;

void sigmoid_cases(std::vector<KernelCase>& out) {
    // sigmoid(x) = e^x / (1 + e^x) = 1 / (1 + e^-x); e^-100 = 3.720075976020836e-44.
    const double e100 = std::exp(-100.0);
    out.push_back(relative(make("stability/sigmoid_tails_f64", BackendOp::sigmoid,
                                {f64({4}, {-100, 100, -30, 30})},
                                f64({4}, {e100 / (1 + e100), 1 / (1 + e100), std::exp(-30.0) / (1 + std::exp(-30.0)),
                                          1 / (1 + std::exp(-30.0))})),
                           1e-14));
    out.push_back(relative(make("stability/sigmoid_tails_f32", BackendOp::sigmoid,
                                {f32({3}, {-100, 100, -1000})}, f32({3}, {e100, 1, 0})),
                           kSubnormalRtol));
}

void softplus_cases(std::vector<KernelCase>& out) {
    // softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): softplus(100) = 100 + 3.7e-44,
    // softplus(-100) = e^-100 (to 1e-44 relative), softplus(0) = log 2. A threshold of 1000 keeps
    // every x here on the log1p branch, where log1p(exp(100)) would overflow float32 (e^100 >
    // 3.4e38) and exp(800) float64.
    const double e100 = std::exp(-100.0);
    out.push_back(relative(make("stability/softplus_large_threshold_f32", BackendOp::softplus,
                                {f32({4}, {100, -100, 0, 50})},
                                f32({4}, {100, e100, std::numbers::ln2, 50}), {{"threshold", 1000.0}}),
                           kSubnormalRtol));
    out.push_back(relative(make("stability/softplus_large_threshold_f64", BackendOp::softplus,
                                {f64({4}, {800, -100, -800, 30})},
                                f64({4}, {800, e100, 0, 30 + std::log1p(std::exp(-30.0))}),
                                {{"threshold", 1e4}}),
                           1e-14));
    // beta = 2: softplus(x) = log(1 + e^(2x)) / 2; at x = 60, 2x = 120 overflows float32's exp;
    // at x = -45 it is e^-90 / 2 = 4.1e-40 (to 1e-40 relative), a float32 subnormal.
    out.push_back(relative(make("stability/softplus_beta_f32", BackendOp::softplus,
                                {f32({2}, {60, -45})}, f32({2}, {60, std::exp(-90.0) / 2}),
                                {{"beta", 2.0}, {"threshold", 1000.0}}),
                           kSubnormalRtol));
    // The gradient g·sigmoid(βx) at ±800 (where exp(800) / (exp(800) + 1) is inf / inf = NaN),
    // against finite differences.
    out.push_back(with_grad(relative(make("stability/softplus_grad_large_threshold_f64", BackendOp::softplus,
                                          {f64({3}, {800, -800, 3})},
                                          f64({3}, {800, 0, 3 + std::log1p(std::exp(-3.0))}),
                                          {{"threshold", 1e4}}),
                                     1e-14)));
}

void gelu_cases(std::vector<KernelCase>& out) {
    // gelu(x) = x Φ(x). Φ(-5) = 2.866515718791939e-7, Φ(-10) = 7.619853024160527e-24 (standard
    // normal tail, Abramowitz & Stegun 26.2); 1 + erf(-10/√2) cancels to 0 in any precision.
    out.push_back(relative(make("stability/gelu_negative_tail_f64", BackendOp::gelu,
                                {f64({2}, {-5, -10})},
                                f64({2}, {-5 * 2.866515718791939e-7, -10 * 7.619853024160527e-24})),
                           1e-12));
    out.push_back(relative(make("stability/gelu_negative_tail_f32", BackendOp::gelu, {f32({1}, {-10})},
                                f32({1}, {-10 * 7.619853024160527e-24})),
                           1e-5));
    // tanh form: 0.5 x (1 + tanh(u)) with u = √(2/π)(x + 0.044715 x³) = x / (1 + e^(-2u)).
    auto tanh_form = [](double x) {
        const double u = std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
        return x / (1 + std::exp(-2 * u));
    };
    out.push_back(relative(make("stability/gelu_tanh_negative_tail_f64", BackendOp::gelu,
                                {f64({3}, {-10, -5, 3})}, f64({3}, {tanh_form(-10), tanh_form(-5), tanh_form(3)}),
                                {{"approximate", std::string("tanh")}}),
                           1e-12));
    out.push_back(with_grad(make("stability/gelu_tanh_grad_tail_f64", BackendOp::gelu, {f64({3}, {-6, -4, 2})},
                                 f64({3}, {tanh_form(-6), tanh_form(-4), tanh_form(2)}),
                                 {{"approximate", std::string("tanh")}})));
}

void activation_cases(std::vector<KernelCase>& out) {
    // softsign → ±1 at ±inf (the limit of x / (1 + |x|)); 3e38 / (1 + 3e38) rounds to 1.
    out.push_back(make("stability/softsign_infinite", BackendOp::softsign, {f32({3}, {kInf, -kInf, 3e38})},
                       f32({3}, {1, -1, 1})));
    // mish(-100) = -100 tanh(softplus(-100)) = -100 tanh(e^-100) = -3.720075976020836e-42.
    out.push_back(relative(make("stability/mish_negative_tail_f64", BackendOp::mish, {f64({1}, {-100})},
                                f64({1}, {-100 * std::exp(-100.0)})),
                           1e-14));
}

void softmax_cases(std::vector<KernelCase>& out) {
    // Shifted by the row maximum: [1000, 0] → [1, e^-1000 = 0]; [-1000, -1000] → [1/2, 1/2].
    out.push_back(relative(make("stability/softmax_extreme_rows", BackendOp::softmax,
                                {f32({2, 2}, {1000, 0, -1000, -1000})}, f32({2, 2}, {1, 0, 0.5, 0.5})),
                           1e-6));
    // log_softmax: [1000, 0] → [0, -1000]; [-1000, -1000] → [-log 2, -log 2].
    out.push_back(relative(make("stability/log_softmax_extreme_rows", BackendOp::log_softmax,
                                {f32({2, 2}, {1000, 0, -1000, -1000})},
                                f32({2, 2}, {0, -1000, -std::numbers::ln2, -std::numbers::ln2})),
                           1e-6));
}

void cross_entropy_cases(std::vector<KernelCase>& out) {
    // loss = logsumexp(x) - x[t]. Logits [1000, 0, -1000]: logsumexp = 1000 (+ e^-1000), so the
    // loss is 0 for t = 0 and 1000 for t = 1 (exp(1000) overflows any float).
    out.push_back(relative(make("stability/cross_entropy_logits_1000", BackendOp::cross_entropy,
                                {f32({2, 3}, {1000, 0, -1000, 1000, 0, -1000}), i64({2}, {0, 1})},
                                f32({2}, {0, 1000}), {{"reduction", std::string("none")}}),
                           1e-6));
    // Logits 1e10 + [0, 1], t = 0: loss = 1 + log(1 + e^-1) = 1.3132616875182228, exactly
    // representable up to rounding; adding log Σ to 1e10 first would lose 1e-6 of it.
    out.push_back(relative(make("stability/cross_entropy_large_offset_f64", BackendOp::cross_entropy,
                                {f64({1, 2}, {1e10, 1e10 + 1}), i64({1}, {0})},
                                f64({1}, {1 + std::log1p(std::exp(-1.0))}), {{"reduction", std::string("none")}}),
                           1e-14));
}

void norm_cases(std::vector<KernelCase>& out) {
    // Values 1e7 + {0, 1, 2} (exact in float32): mean 1e7 + 1, biased variance 2/3, so
    // y = {-1, 0, 1} / sqrt(2/3 + eps). E[x²] - E[x]² would be lost entirely (1e14 ± 1 in float).
    const double eps = 1e-5, r = 1 / std::sqrt(2.0 / 3.0 + eps);
    out.push_back(relative(make("stability/layer_norm_large_mean_f32", BackendOp::layer_norm,
                                {f32({2, 3}, {1e7, 1e7 + 1, 1e7 + 2, 1e4, 1e4 + 1, 1e4 + 2})}, {},
                                f32({2, 3}, {-r, 0, r, -r, 0, r}),
                                {{"normalized_shape", std::int64_t(3)}, {"elementwise_affine", false}},
                                {1e-6, 1e-6}),
                           1e-6));
    // batch_norm, training: the same three values as one channel.
    out.push_back(relative(make("stability/batch_norm_training_large_mean_f32", BackendOp::batch_norm,
                                {f32({3, 1}, {1e7, 1e7 + 1, 1e7 + 2})},
                                {f32({1}, {0}), f32({1}, {1})},
                                f32({3, 1}, {-r, 0, r}),
                                {{"training", true}, {"affine", false}}, {1e-6, 1e-6}),
                           1e-6));
    // batch_norm, eval, float64: running mean 1e10 + 1, running variance 1, eps 1e-5:
    // y = (x - mean) / sqrt(1 + eps), exact to rounding; x·s - mean·s loses 1e-6 of it.
    const double s = 1 / std::sqrt(1 + eps);
    out.push_back(relative(make("stability/batch_norm_eval_large_mean_f64", BackendOp::batch_norm,
                                {f64({3, 1}, {1e10, 1e10 + 1, 1e10 + 3})},
                                {f64({1}, {1e10 + 1}), f64({1}, {1})},
                                f64({3, 1}, {-s, 0, 2 * s}),
                                {{"affine", false}}, {1e-12, 1e-12}),
                           1e-12));
}

void attention_cases(std::vector<KernelCase>& out) {
    // One query, two keys, E = 1 (scale 1): scores 1e4 and 0 → probabilities [1, 0] after the max
    // shift (e^10000 overflows), so the output is the first value row.
    out.push_back(relative(make("stability/attention_large_scores", BackendOp::scaled_dot_product_attention,
                                {f32({1, 1}, {100}), f32({2, 1}, {100, 0}), f32({2, 2}, {1, 2, 3, 4})},
                                f32({1, 2}, {1, 2})),
                           1e-6));
}

}  // namespace

// Cases a second provider (LibTorch) got wrong when tried from outside: exclusive cumsum computed
// as "inclusive − x" (loses 3 next to 1e20, turns inf into NaN), hyperbolic functions through e^x
// (overflows where the result is finite), float32 sums accumulated in float32, log-sum-exp pooling
// of x/T, attention rows with no attended position, and shapes with a zero dimension whose output
// is not empty (a convolution over 0 input channels is its bias) or is (a pool over 0 channels).
void accumulation_and_degenerate_cases(std::vector<KernelCase>& out) {
    out.push_back(make("stability/cumsum_exclusive_small_after_large", BackendOp::cumsum,
                       {f64({3}, {3, 1e20, 0})}, f64({3}, {0, 3, 1e20}),
                       {{"axis", std::int64_t(0)}, {"exclusive", true}}));
    out.push_back(make("stability/cumsum_exclusive_inf", BackendOp::cumsum, {f32({3}, {kInf, 1, 2})},
                       f32({3}, {0, kInf, kInf}), {{"axis", std::int64_t(0)}, {"exclusive", true}}));
    out.push_back(make("stability/cumsum_exclusive_reverse", BackendOp::cumsum, {f64({3}, {1, 2, 4})},
                       f64({3}, {6, 4, 0}), {{"axis", std::int64_t(0)}, {"exclusive", true}, {"reverse", true}}));
    out.push_back(make("stability/cumsum_exclusive_rank0", BackendOp::cumsum, {f32({}, {3})}, f32({}, {0}),
                       {{"axis", std::int64_t(0)}, {"exclusive", true}}));
    // sinh(89) = 2.2448064095871728e38 < FLT_MAX although e^89 overflows float32; 32 elements so
    // that a vectorised path is taken; cosh(±710) = 1.1169973830808557e308 in float64.
    out.push_back(relative(make("stability/sinh_near_float_max_f32", BackendOp::sinh, {f32({32}, V(32, 89.0))},
                                f32({32}, V(32, 2.2448064095871728e38))),
                           1e-6));
    out.push_back(relative(make("stability/cosh_near_double_max", BackendOp::cosh, {f64({2}, {710, -710})},
                                f64({2}, {1.1169973830808557e308, 1.1169973830808557e308})),
                           1e-12));
    out.push_back(relative(make("stability/sinh_near_double_max", BackendOp::sinh, {f64({2}, {-710, 710})},
                                f64({2}, {-1.1169973830808557e308, 1.1169973830808557e308})),
                           1e-12));
    // float32 3e38 is 3.0000000054977558e38; 3e38 + 3e38 overflows float32, the sum does not.
    const double big = 3.0000000054977558e38;
    out.push_back(relative(make("stability/sum_f32_partial_overflow", BackendOp::sum, {f32({3}, {3e38, 3e38, -3e38})},
                                f32({}, {big})),
                           1e-6));
    out.push_back(relative(make("stability/reduce_sum_f32_partial_overflow", BackendOp::reduce_sum,
                                {f32({3}, {3e38, 3e38, -3e38})}, f32({}, {big})),
                           1e-6));
    out.push_back(relative(make("stability/reduce_mean_f32_partial_overflow", BackendOp::reduce_mean,
                                {f32({2}, {3e38, 3e38})}, f32({}, {big})),
                           1e-6));
    // T·log(e^(x/T) + e^(x/T)) = x + T·log 2: x/T = 6e38 overflows float32.
    out.push_back(relative(make("stability/smooth_max_pool_large", BackendOp::smooth_max_pool,
                                {f32({1, 1, 2}, {3e38, 3e38})}, f32({1, 1, 1}, {big}),
                                {{"kernel_size", std::int64_t(2)}, {"temperature", 0.5}}),
                           1e-6));
    out.push_back(make("stability/smooth_max_pool_nan_window", BackendOp::smooth_max_pool,
                       {f32({1, 1, 3}, {1, kNaN, 3})}, f32({1, 1, 3}, {1, kNaN, 3}),
                       {{"kernel_size", std::int64_t(1)}}));
    // Row 1 attends to nothing (a float mask of −inf): 0, as a bool mask's empty row.
    out.push_back(make("stability/attention_float_mask_empty_row", BackendOp::scaled_dot_product_attention,
                       {f32({1, 2, 2}, {1, 0, 0, 1}), f32({1, 2, 2}, {1, 0, 0, 1}), f32({1, 2, 1}, {10, 20}),
                        f32({2, 2}, {0, -kInf, -kInf, -kInf})},
                       f32({1, 2, 1}, {10, 0})));
    // E = 0: every score is an empty dot product (0), so each row averages v.
    out.push_back(make("stability/attention_empty_embedding", BackendOp::scaled_dot_product_attention,
                       {f32({1, 2, 0}, {}), f32({1, 2, 0}, {}), f32({1, 2, 1}, {10, 20})}, f32({1, 2, 1}, {15, 15})));
    out.push_back(make("stability/conv_zero_input_channels", BackendOp::conv, {f32({1, 0, 5}, {})},
                       {f32({2, 0, 2}, {}), f32({2}, {1, 2})}, f32({1, 2, 4}, {1, 1, 1, 1, 2, 2, 2, 2}),
                       {{"out_channels", std::int64_t(2)}, {"kernel_size", std::int64_t(2)}}, {1e-6, 1e-12}));
    out.push_back(make("stability/max_pool_zero_channels", BackendOp::max_pool, {f32({1, 0, 4}, {})},
                       f32({1, 0, 2}, {}), {{"kernel_size", std::int64_t(2)}}));
    out.push_back(make("stability/fft_fno_zero_length", BackendOp::fft_fno, {f32({1, 1, 0}, {})},
                       {f32({1, 1, 1}, {0.5}), f32({1, 1, 1}, {0.25})}, f32({1, 1, 0}, {}),
                       {{"modes", std::int64_t(1)}, {"out_channels", std::int64_t(1)}}, {1e-6, 1e-12}));
}

std::vector<KernelCase> stability_cases() {
    std::vector<KernelCase> out;
    sigmoid_cases(out);
    softplus_cases(out);
    gelu_cases(out);
    activation_cases(out);
    softmax_cases(out);
    cross_entropy_cases(out);
    norm_cases(out);
    attention_cases(out);
    accumulation_and_degenerate_cases(out);
    return out;
}

}  // namespace capsule::conformance
