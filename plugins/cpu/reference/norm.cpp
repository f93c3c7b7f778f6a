// Reference kernels: layer_norm (F.layer_norm), batch_norm and batchnorm_channel_first
// (F.batch_norm; both normalise over dim 1 of an [N, C, *] input, as shape inference defines).
// Statistics and parameter-gradient sums are accumulated in double for either dtype.
#include <cmath>

#include "linalg_common.hpp"
#include "parallel.hpp"

namespace capsule::reference {

// =============================================================================================
// layer_norm: x [..., *normalized_shape]; y = (x - mean) / sqrt(var + eps) * weight + bias, the
// mean and biased variance taken over the trailing normalized_shape dims. Parameters (when
// elementwise_affine, default true): weight [normalized_shape], then bias [normalized_shape]
// when attribute bias (default true).

namespace {

struct LayerNormDims {
    int64_t rows = 0, n = 0;
    double eps = 1e-5;
    bool affine = true, bias = true;
};

template <typename Call>
LayerNormDims layer_norm_dims(const Call& call) {
    const auto attrs = call.attrs();
    LayerNormDims d;
    require(attrs.has("normalized_shape"), "layer_norm: missing attribute 'normalized_shape'");
    const auto normalized = attrs.get_ints_view("normalized_shape");
    require(!normalized.empty(), "layer_norm: attribute 'normalized_shape' is empty");
    d.eps = attrs.get_float("eps", 1e-5);
    require(d.eps > 0 && std::isfinite(d.eps), "layer_norm: attribute 'eps' must be > 0");
    d.affine = attrs.get_bool("elementwise_affine", true);
    d.bias = d.affine && attrs.get_bool("bias", true);
    require_arity(call, 1, d.affine ? (d.bias ? 2 : 1) : 0, "layer_norm");
    const Tensor x = call.input(0);
    check_view(x, "layer_norm input");
    const auto shape = x.shape();
    require(normalized.size() <= shape.size() &&
                std::equal(normalized.begin(), normalized.end(),
                           shape.end() - std::ptrdiff_t(normalized.size())),
            [&] {
                return "layer_norm: normalized_shape " + shape_string(normalized) +
                       " does not match the trailing dimensions of " + shape_string(shape);
            });
    d.n = checked_product(normalized, "layer_norm normalized_shape");
    d.rows = checked_product(shape.first(shape.size() - normalized.size()), "layer_norm input");
    if (d.affine) check_tensor(call.param(0), x.dtype(), normalized, "layer_norm weight");
    if (d.bias) check_tensor(call.param(1), x.dtype(), normalized, "layer_norm bias");
    return d;
}

/// Mean and 1/sqrt(biased variance + eps) of one row (two passes, in double).
template <typename T>
void row_stats(const T* x, int64_t n, double eps, double& mean, double& rstd) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(x[i]);
    mean = s / double(n);
    double v = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double c = double(x[i]) - mean;
        v += c * c;
    }
    rstd = 1.0 / std::sqrt(v / double(n) + eps);
}

template <typename T>
void layer_norm_fwd(const ForwardCall& call, const LayerNormDims& d) {
    const Tensor x = call.input(0), out = call.output(0);
    check_tensor(out, x.dtype(), x.shape(), "layer_norm output");
    if (d.n == 0 || d.rows == 0) return;
    const T* X = x.data<T>();
    T* Y = out.data<T>();
    const T* w = d.affine ? call.param(0).data<T>() : nullptr;
    const T* b = d.bias ? call.param(1).data<T>() : nullptr;
    for (int64_t r = 0; r < d.rows; ++r) {
        const T* xr = X + r * d.n;
        T* yr = Y + r * d.n;
        double mean, rstd;
        row_stats(xr, d.n, d.eps, mean, rstd);
        for (int64_t i = 0; i < d.n; ++i) {
            double v = (double(xr[i]) - mean) * rstd;
            if (w) v *= double(w[i]);
            if (b) v += double(b[i]);
            yr[i] = T(v);
        }
    }
}

template <typename T>
void layer_norm_bwd(const BackwardCall& call, const LayerNormDims& d) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), x.shape(), "layer_norm grad output");
    T* gX = grad_target<T>(call.grad_input(0), x, "layer_norm grad input");
    T* gW = d.affine ? grad_target<T>(call.grad_param(0), call.param(0), "layer_norm grad weight")
                     : nullptr;
    T* gB = d.bias ? grad_target<T>(call.grad_param(1), call.param(1), "layer_norm grad bias")
                   : nullptr;
    const T* X = x.data<T>();
    const T* G = gout.data<T>();
    const T* w = d.affine ? call.param(0).data<T>() : nullptr;
    SmallBuffer<double> accW(gW ? std::size_t(d.n) : 0, 0.0);
    SmallBuffer<double> accB(gB ? std::size_t(d.n) : 0, 0.0);
    for (int64_t r = 0; r < d.rows && d.n > 0; ++r) {
        const T* xr = X + r * d.n;
        const T* gr = G + r * d.n;
        double mean, rstd;
        row_stats(xr, d.n, d.eps, mean, rstd);
        double sum_g = 0, sum_gx = 0;  // Σ g and Σ g·x̂ with g = dy·w
        for (int64_t i = 0; i < d.n; ++i) {
            const double xhat = (double(xr[i]) - mean) * rstd;
            const double g = double(gr[i]) * (w ? double(w[i]) : 1.0);
            sum_g += g;
            sum_gx += g * xhat;
            if (gW) accW[i] += double(gr[i]) * xhat;
            if (gB) accB[i] += double(gr[i]);
        }
        if (gX) {
            const double mg = sum_g / double(d.n), mgx = sum_gx / double(d.n);
            T* dx = gX + r * d.n;
            for (int64_t i = 0; i < d.n; ++i) {
                const double xhat = (double(xr[i]) - mean) * rstd;
                const double g = double(gr[i]) * (w ? double(w[i]) : 1.0);
                dx[i] = T(rstd * (g - mg - xhat * mgx));
            }
        }
    }
    for (int64_t i = 0; i < (gW ? d.n : 0); ++i) gW[i] = T(accW[i]);
    for (int64_t i = 0; i < (gB ? d.n : 0); ++i) gB[i] = T(accB[i]);
}

}  // namespace

void layer_norm_forward(const ForwardCall& call) {
    const auto d = layer_norm_dims(call);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { layer_norm_fwd<decltype(t)>(call, d); });
}

void layer_norm_backward(const BackwardCall& call) {
    const auto d = layer_norm_dims(call);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { layer_norm_bwd<decltype(t)>(call, d); });
}

// =============================================================================================
// batch_norm / batchnorm_channel_first: x [N, C, *]. Parameters: weight [C], bias [C] (when
// affine, default true), then running_mean [C], running_var [C].
//   training = false: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias.
//   training = true:  the per-channel batch mean and biased variance over N and the spatial dims
//                     replace the running statistics.
// As docs/ops.md specifies (and unlike F.batch_norm, which with training = true also updates
// running_mean / running_var in place with `momentum` and the unbiased variance), the kernel never
// writes the running statistics: parameters are read-only inputs (the host calls kernels
// concurrently on shared parameters); `momentum` is validated and otherwise ignored here. Running
// statistics get a zero gradient (they are buffers in PyTorch, not differentiable), also with
// training = false where the output does depend on them.

namespace {

struct BatchNormDims {
    int64_t n = 0, c = 0, s = 0;  // batch, channels, spatial size
    double eps = 1e-5;
    bool training = false, affine = true;
    int mean_index = 0, var_index = 1;  // parameter indices of the running statistics
};

/// The attributes and sizes of a batch_norm call; KernelError for what the kernel refuses. At
/// prepare time (`with_data` false) the input has a shape but no data yet.
template <typename Call>
BatchNormDims batch_norm_dims(const Call& call, const char* op, bool with_data = true) {
    const auto attrs = call.attrs();
    BatchNormDims d;
    d.eps = attrs.get_float("eps", 1e-5);
    require(d.eps > 0 && std::isfinite(d.eps),
            [&] { return std::string(op) + ": attribute 'eps' must be > 0"; });
    const double momentum = attrs.get_float("momentum", 0.1);
    require(momentum >= 0 && momentum <= 1,
            [&] { return std::string(op) + ": attribute 'momentum' must be in [0, 1]"; });
    d.training = attrs.get_bool("training", false);
    d.affine = attrs.get_bool("affine", true);
    require_arity(call, 1, d.affine ? 4 : 2, op);
    d.mean_index = d.affine ? 2 : 0;
    d.var_index = d.mean_index + 1;
    const Tensor x = call.input(0);
    if (with_data) check_view(x, {op, " input"});
    require(x.rank() >= 2, [&] {
        return std::string(op) + ": input must have rank >= 2 ([N, C, ...]), got " +
               shape_string(x.shape());
    });
    d.n = x.dim(0);
    d.c = x.dim(1);
    d.s = checked_product(x.shape().subspan(2), {op, " input"});
    for (std::size_t i = 0; i < call.num_params(); ++i)
        check_tensor(call.param(i), x.dtype(), {d.c}, {op, " parameter ", int64_t(i)});
    if (d.training)
        require(d.n * d.s != 1 || d.c == 0, [&] {
            return std::string(op) + ": training needs more than 1 value per channel";
        });
    return d;
}

/// Per-channel mean and 1/sqrt(var + eps): batch statistics (training) or the running ones.
template <typename T, typename Call>
void channel_stats(const Call& call, const BatchNormDims& d, const T* X, double* mean,
                   double* rstd) {
    if (!d.training) {
        const T* rm = call.param(d.mean_index).template data<T>();
        const T* rv = call.param(d.var_index).template data<T>();
        for (int64_t ch = 0; ch < d.c; ++ch) {
            mean[ch] = double(rm[ch]);
            rstd[ch] = 1.0 / std::sqrt(double(rv[ch]) + d.eps);
        }
        return;
    }
    const double count = double(d.n * d.s);
    for (int64_t ch = 0; ch < d.c; ++ch) {
        double s = 0;
        for (int64_t b = 0; b < d.n; ++b) {
            const T* p = X + (b * d.c + ch) * d.s;
            for (int64_t i = 0; i < d.s; ++i) s += double(p[i]);
        }
        const double m = count > 0 ? s / count : 0.0;
        double v = 0;
        for (int64_t b = 0; b < d.n; ++b) {
            const T* p = X + (b * d.c + ch) * d.s;
            for (int64_t i = 0; i < d.s; ++i) {
                const double t = double(p[i]) - m;
                v += t * t;
            }
        }
        mean[ch] = m;
        rstd[ch] = 1.0 / std::sqrt((count > 0 ? v / count : 0.0) + d.eps);
    }
}

/// The per-channel terms of batch_norm_of: mean, scale = weight / sqrt(var + eps) (weight 1
/// without affine) and shift = bias (0 without affine), from the batch statistics (training) or
/// the running ones. One computation for the kernel and the convolution epilogue it becomes in a
/// compiled group, so that both give the same bits.
template <typename T, typename Call>
void channel_affine(const Call& call, const BatchNormDims& d, const T* X, double* mean, double* scale,
                    double* shift) {
    channel_stats<T>(call, d, X, mean, scale);  // scale holds 1 / sqrt(var + eps) until below
    const T* w = d.affine ? call.param(0).template data<T>() : nullptr;
    const T* b = d.affine ? call.param(1).template data<T>() : nullptr;
    for (int64_t ch = 0; ch < d.c; ++ch) {
        scale[ch] = scale[ch] * (w ? double(w[ch]) : 1.0);
        shift[ch] = b ? double(b[ch]) : 0.0;
    }
}

template <typename T>
void batch_norm_fwd(const ForwardCall& call, const BatchNormDims& d, const char* op) {
    const Tensor x = call.input(0), out = call.output(0);
    check_tensor(out, x.dtype(), x.shape(), {op, " output"});
    const T* X = x.data<T>();
    T* Y = out.data<T>();
    const auto c = static_cast<std::size_t>(d.c);
    SmallBuffer<double> mean(c), scale(c), shift(c);
    channel_affine<T>(call, d, X, mean.data(), scale.data(), shift.data());
    // Planes (image, channel) are independent: dealt out between the granted threads.
    const int64_t planes = d.n * d.c;
    const int parts = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>({granted_threads(call), planes, planes * d.s / kMinElementsPerPart})));
    run_parts(parts, [&](int part) {
        for (int64_t plane = planes * part / parts; plane < planes * (part + 1) / parts; ++plane) {
            const int64_t ch = plane % d.c;
            const T* p = X + plane * d.s;
            T* q = Y + plane * d.s;
            for (int64_t i = 0; i < d.s; ++i) q[i] = batch_norm_of(p[i], mean[ch], scale[ch], shift[ch]);
        }
    });
}

template <typename T>
void batch_norm_bwd(const BackwardCall& call, const BatchNormDims& d, const char* op) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), x.shape(), {op, " grad output"});
    T* gX = grad_target<T>(call.grad_input(0), x, {op, " grad input"});
    T* gW = d.affine ? grad_target<T>(call.grad_param(0), call.param(0), {op, " grad weight"})
                     : nullptr;
    T* gB = d.affine ? grad_target<T>(call.grad_param(1), call.param(1), {op, " grad bias"})
                     : nullptr;
    for (int i : {d.mean_index, d.var_index})
        if (T* g = grad_target<T>(call.grad_param(i), call.param(i), {op, " grad running stat"}))
            std::fill(g, g + d.c, T(0));
    const T* X = x.data<T>();
    const T* G = gout.data<T>();
    const T* w = d.affine ? call.param(0).data<T>() : nullptr;
    SmallBuffer<double> mean(static_cast<std::size_t>(d.c)), rstd(static_cast<std::size_t>(d.c));
    channel_stats<T>(call, d, X, mean.data(), rstd.data());
    const double count = double(d.n * d.s);
    for (int64_t ch = 0; ch < d.c; ++ch) {
        // Σ dy and Σ dy·x̂ over the channel.
        double sum_dy = 0, sum_dyx = 0;
        for (int64_t bi = 0; bi < d.n; ++bi) {
            const T* p = X + (bi * d.c + ch) * d.s;
            const T* g = G + (bi * d.c + ch) * d.s;
            for (int64_t i = 0; i < d.s; ++i) {
                sum_dy += double(g[i]);
                sum_dyx += double(g[i]) * (double(p[i]) - mean[ch]) * rstd[ch];
            }
        }
        if (gW) gW[ch] = T(sum_dyx);
        if (gB) gB[ch] = T(sum_dy);
        if (!gX) continue;
        const double wc = w ? double(w[ch]) : 1.0;
        const double k = wc * rstd[ch];
        // training: dx = w·rstd·(dy - mean(dy) - x̂·mean(dy·x̂)); eval: dx = w·rstd·dy.
        const double mdy = d.training && count > 0 ? sum_dy / count : 0.0;
        const double mdyx = d.training && count > 0 ? sum_dyx / count : 0.0;
        for (int64_t bi = 0; bi < d.n; ++bi) {
            const T* p = X + (bi * d.c + ch) * d.s;
            const T* g = G + (bi * d.c + ch) * d.s;
            T* q = gX + (bi * d.c + ch) * d.s;
            for (int64_t i = 0; i < d.s; ++i) {
                const double xhat = (double(p[i]) - mean[ch]) * rstd[ch];
                q[i] = T(k * (double(g[i]) - mdy - xhat * mdyx));
            }
        }
    }
}

template <const char* Op>
void bn_forward(const ForwardCall& call) {
    const auto d = batch_norm_dims(call, Op);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { batch_norm_fwd<decltype(t)>(call, d, Op); });
}

template <const char* Op>
void bn_backward(const BackwardCall& call) {
    const auto d = batch_norm_dims(call, Op);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { batch_norm_bwd<decltype(t)>(call, d, Op); });
}

constexpr char kBatchNorm[] = "batch_norm";
constexpr char kBatchNormChannelFirst[] = "batchnorm_channel_first";

}  // namespace

bool batch_norm_epilogue(const plugin::PrepareCall& call, Epilogue& e) {
    const auto d = batch_norm_dims(call, kBatchNorm, false);
    if (d.training || (call.input(0).dtype() != CAPSULE_DTYPE_FLOAT32 && call.input(0).dtype() != CAPSULE_DTYPE_FLOAT64))
        return false;
    const auto c = static_cast<std::size_t>(d.c);
    e.mean.resize(c);
    e.scale.resize(c);
    e.shift.resize(c);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) {
        using T = decltype(t);
        channel_affine<T>(call, d, static_cast<const T*>(nullptr), e.mean.data(), e.scale.data(), e.shift.data());
    });
    e.batch_norm = true;
    return true;
}

void batch_norm_forward(const ForwardCall& call) { bn_forward<kBatchNorm>(call); }
void batch_norm_backward(const BackwardCall& call) { bn_backward<kBatchNorm>(call); }
void batchnorm_channel_first_forward(const ForwardCall& call) {
    bn_forward<kBatchNormChannelFirst>(call);
}
void batchnorm_channel_first_backward(const BackwardCall& call) {
    bn_backward<kBatchNormChannelFirst>(call);
}

}  // namespace capsule::reference
