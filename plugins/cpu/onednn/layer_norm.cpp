// onednn.layer_norm: torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps) on
// x [..., *normalized_shape] (row-major): each row of the trailing normalized_shape dims becomes
// y = (x - mean) / sqrt(var + eps) * weight + bias, with the row's mean and biased variance.
// oneDNN's layer_normalization normalises the last axis, so x is seen as [rows, n]. As the
// reference capsule, the statistics and var + eps are formed in double (two passes over each
// row) and handed to the primitive as its global statistics (use_global_stats, epsilon 0), so a
// row of large values close together (1e4 + noise) keeps its variance. The primitive subtracts
// the mean and takes 1/sqrt(var + eps) in float32: where rounding a row's mean to float32 would
// shift its normalised values by more than 1e-6 (1e4 + noise of 1e-2: a shift of 7e-2), or its
// var + eps is not a normal float32 (beyond 3.4e38, below 1.2e-38), the call computes every row
// in double instead, as the reference capsule does. Parameters (docs/ops.md):
// weight [normalized_shape] when elementwise_affine (default true), then bias when attribute
// bias (default true). The backward is PyTorch's layer_norm_backward in double.
#include <algorithm>
#include <cmath>

#include "kernels.hpp"

namespace capsule::onednn {

namespace {

constexpr const char* kName = "onednn.layer_norm";

struct LayerNormDims {
    int64_t rows = 0, n = 0;  // rows of n normalized elements
    double eps = 1e-5;
    bool affine = true, bias = true;
};

/// The attributes and sizes of a layer_norm call, checked as the reference capsule checks them:
/// normalized_shape non-empty and equal to x's trailing dims, eps > 0, the parameters'
/// count and shapes. Raises INVALID_ARGUMENT naming what disagrees.
template <typename Call>
LayerNormDims layer_norm_dims(const Call& call) {
    const auto attrs = call.attrs();
    plugin::require(attrs.has("normalized_shape"), "onednn.layer_norm: missing attribute 'normalized_shape'");
    const std::vector<int64_t> normalized = attrs.get_ints("normalized_shape", {});
    plugin::require(!normalized.empty(), "onednn.layer_norm: attribute 'normalized_shape' is empty");
    LayerNormDims d;
    d.eps = attrs.get_float("eps", 1e-5);
    plugin::require(d.eps > 0 && std::isfinite(d.eps), "onednn.layer_norm: attribute 'eps' must be > 0");
    d.affine = attrs.get_bool("elementwise_affine", true);
    d.bias = d.affine && attrs.get_bool("bias", true);
    plugin::require(call.num_params() == (d.affine ? (d.bias ? 2u : 1u) : 0u),
                    "onednn.layer_norm: expects parameters weight (with elementwise_affine) and bias (with bias)");
    const Tensor x = call.input(0);
    require_float32(kName, x, "input x");
    const auto shape = x.shape();
    plugin::require(normalized.size() <= shape.size() &&
                        std::equal(normalized.begin(), normalized.end(), shape.end() - std::ptrdiff_t(normalized.size())),
                    [&] {
                        return "onednn.layer_norm: normalized_shape " + shape_string(normalized) +
                               " does not match the trailing dimensions of " + shape_string(shape);
                    });
    d.n = 1;
    for (const int64_t v : normalized) d.n *= v;
    d.rows = d.n == 0 ? 0 : x.numel() / d.n;
    for (std::size_t i = 0; i < call.num_params(); ++i) {
        require_float32(kName, call.param(i), i == 0 ? "weight" : "bias");
        require_shape(kName, call.param(i), normalized, i == 0 ? "weight" : "bias");
    }
    return d;
}

/// Mean and var + eps of one row of n values (two passes, in double; the reference capsule's
/// row_stats).
void row_statistics(const float* x, int64_t n, double eps, double& mean, double& var_eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    mean = sum / double(n);
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double c = double(x[i]) - mean;
        squares += c * c;
    }
    var_eps = squares / double(n) + eps;
}

struct LayerNormState : NodeState {
    using NodeState::NodeState;
    LayerNormDims dims;
    memory::desc x_md, stat_md, param_md;
    dnnl::layer_normalization_forward primitive;
};

std::unique_ptr<LayerNormState> prepare_layer_norm(const PrepareCall& call) {
    auto s = std::make_unique<LayerNormState>(kName, call);
    s->dims = layer_norm_dims(call);
    require_plain_float32(kName, call.input(0), "input x");
    s->limit_threads(8.0 * double(call.input(0).numel()));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->dims.rows == 0 || s->dims.n == 0) return s;
    s->x_md = plain_desc({s->dims.rows, s->dims.n});
    s->stat_md = plain_desc({s->dims.rows});
    s->param_md = plain_desc({s->dims.n});
    auto flags = dnnl::normalization_flags::use_global_stats;
    if (s->dims.affine) flags = flags | dnnl::normalization_flags::use_scale;
    if (s->dims.bias) flags = flags | dnnl::normalization_flags::use_shift;
    // epsilon 0: the variance handed over already holds eps (row_statistics).
    dnnl::layer_normalization_forward::primitive_desc pd(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, s->x_md, s->stat_md, 0.0f, flags),
        scratchpad_attr(), cpu_engine());
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::layer_normalization_forward(pd);
    return s;
}

/// y = (x - mean) / sqrt(var + eps) · weight + bias for every row in double (the reference
/// capsule's computation), from each row's statistics.
void layer_norm_in_double(const LayerNormDims& d, const float* x, const std::vector<double>& mean,
                          const std::vector<double>& var_eps, const float* w, const float* b, float* y) {
    for (int64_t r = 0; r < d.rows; ++r) {
        const double m = mean[std::size_t(r)], rstd = 1.0 / std::sqrt(var_eps[std::size_t(r)]);
        for (int64_t i = 0; i < d.n; ++i) {
            double v = (double(x[r * d.n + i]) - m) * rstd;
            if (w) v *= double(w[i]);
            if (b) v += double(b[i]);
            y[r * d.n + i] = static_cast<float>(v);
        }
    }
}

void layer_norm(const ForwardCall& call) {
    const auto& s = state_of<LayerNormState>(call, kName);
    const LayerNormDims& d = s.dims;
    if (d.rows == 0 || d.n == 0) return;
    const float* x = call.input(0).data<float>();
    std::vector<double> mean_d(static_cast<std::size_t>(d.rows)), var_d(static_cast<std::size_t>(d.rows));
    std::vector<float> mean(mean_d.size()), variance(var_d.size());
    bool float_statistics = true;  // every row's mean within 1e-6 of its std, var + eps normal
    for (int64_t r = 0; r < d.rows; ++r) {
        const auto i = std::size_t(r);
        row_statistics(x + r * d.n, d.n, d.eps, mean_d[i], var_d[i]);
        mean[i] = static_cast<float>(mean_d[i]);
        variance[i] = static_cast<float>(var_d[i]);
        float_statistics = float_statistics && float32_holds_mean(mean[i], mean_d[i], var_d[i]) &&
                           std::isnormal(variance[i]);
    }
    if (!float_statistics)
        return layer_norm_in_double(d, x, mean_d, var_d, d.affine ? call.param(0).data<float>() : nullptr,
                                    d.bias ? call.param(1).data<float>() : nullptr, call.output().data<float>());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(s.x_md, x)},
                                         {DNNL_ARG_DST, wrap(s.x_md, call.output().data<float>())},
                                         {DNNL_ARG_MEAN, wrap(s.stat_md, mean.data())},
                                         {DNNL_ARG_VARIANCE, wrap(s.stat_md, variance.data())}};
    if (d.affine) args.emplace(DNNL_ARG_SCALE, wrap(s.param_md, call.param(0).data<float>()));
    if (d.bias) args.emplace(DNNL_ARG_SHIFT, wrap(s.param_md, call.param(1).data<float>()));
    execute(s, s.primitive, std::move(args));
}

/// PyTorch's layer_norm_backward (the reference capsule's), per row in double: with r = 1 /
/// sqrt(var + eps), x̂ = (x - mean) r and g = dy · weight, dx = r (g - mean(g) - x̂ mean(g x̂));
/// dweight = Σ_rows dy x̂, dbias = Σ_rows dy.
void layer_norm_backward(const BackwardCall& call) {
    const LayerNormDims d = layer_norm_dims(call);
    const Tensor x = call.input(0), dy = call.grad_output();
    require_plain_float32(kName, x, "input x");
    require_plain_float32(kName, dy, "grad output");
    require_shape(kName, dy, x.shape(), "grad output");
    float* dx = grad_buffer(kName, call.grad_input(0), x, "grad input");
    float* dw = d.affine ? grad_buffer(kName, call.grad_param(0), call.param(0), "grad weight") : nullptr;
    float* db = d.bias ? grad_buffer(kName, call.grad_param(1), call.param(1), "grad bias") : nullptr;
    const float* X = x.data<float>();
    const float* G = dy.data<float>();
    const float* w = d.affine ? call.param(0).data<float>() : nullptr;
    std::vector<double> sum_w(dw ? std::size_t(d.n) : 0, 0.0), sum_b(db ? std::size_t(d.n) : 0, 0.0);
    for (int64_t r = 0; r < d.rows && d.n > 0; ++r) {
        const float* xr = X + r * d.n;
        const float* gr = G + r * d.n;
        double mean, var_eps;
        row_statistics(xr, d.n, d.eps, mean, var_eps);
        const double rstd = 1.0 / std::sqrt(var_eps);
        double sum_g = 0, sum_gx = 0;
        for (int64_t i = 0; i < d.n; ++i) {
            const double xhat = (double(xr[i]) - mean) * rstd;
            const double g = double(gr[i]) * (w ? double(w[i]) : 1.0);
            sum_g += g;
            sum_gx += g * xhat;
            if (dw) sum_w[std::size_t(i)] += double(gr[i]) * xhat;
            if (db) sum_b[std::size_t(i)] += double(gr[i]);
        }
        if (!dx) continue;
        const double mean_g = sum_g / double(d.n), mean_gx = sum_gx / double(d.n);
        for (int64_t i = 0; i < d.n; ++i) {
            const double xhat = (double(xr[i]) - mean) * rstd;
            const double g = double(gr[i]) * (w ? double(w[i]) : 1.0);
            dx[r * d.n + i] = static_cast<float>(rstd * (g - mean_g - xhat * mean_gx));
        }
    }
    for (std::size_t i = 0; i < sum_w.size(); ++i) dw[i] = static_cast<float>(sum_w[i]);
    for (std::size_t i = 0; i < sum_b.size(); ++i) db[i] = static_cast<float>(sum_b[i]);
}

}  // namespace

const capsule_kernel layer_norm_kernel =
    plugin::kernel(kName, forward_entry<layer_norm>, backward_entry<layer_norm_backward>,
                   prepare_entry<LayerNormState, prepare_layer_norm>, release_entry<LayerNormState>, kFloat32Only);

}  // namespace capsule::onednn
