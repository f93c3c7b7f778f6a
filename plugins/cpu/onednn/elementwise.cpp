// onednn eltwise (relu, gelu, sigmoid, tanh, clamp, abs, sqrt, leaky_relu, hardswish), softmax /
// log_softmax, binary add / sub / mul with broadcasting, and batch_norm.
#include <algorithm>
#include <cmath>
#include <limits>

#include "capsule/shape_math.hpp"
#include "kernels.hpp"

namespace capsule::onednn {

namespace {

/// A state holding one primitive and the plain descriptors of its operands.
struct PrimitiveState : NodeState {
    using NodeState::NodeState;
    bool empty = false;
    memory::desc src_md, src1_md, dst_md;
    bool swapped = false;  // binary: operands exchanged (see prepare_binary)
    bool expand = false;   // binary: both operands broadcast; a is first expanded into the output
    std::vector<int64_t> out_dims, a_strides;  // for the expansion (a's strides, 0 on broadcast dims)
    dnnl::primitive primitive;
};

// ---- eltwise --------------------------------------------------------------------------------

/// relu (torch.relu), gelu (torch.nn.functional.gelu: approximate none = oneDNN gelu_erf,
/// tanh = gelu_tanh), sigmoid (torch.sigmoid = oneDNN logistic), tanh, clamp (torch.clamp =
/// oneDNN clip, see clamp_post_op), abs, sqrt (torch's, NaN below 0), leaky_relu
/// (F.leaky_relu(x, negative_slope) = oneDNN relu with alpha), hardswish (F.hardswish):
/// elementwise over the tensor seen as one flat vector, any rank. exp, log, elu and mish are not
/// among them: oneDNN 2.6's eltwise approximations of those miss PyTorch's values by more than
/// the 1e-4 of the output scale its capsules claim (log(1) = -1.4e-6, exp of -88 and below and
/// elu of subnormals flushed to 0, elu's exp(x) - 1 for tiny x, mish below -12), so those ops
/// run on the reference capsules in onednn_cpu's plans.
enum class Unary { relu, gelu, sigmoid, tanh, clamp, abs, sqrt, leaky_relu, hardswish };

constexpr const char* unary_name(Unary op) {
    switch (op) {
        case Unary::relu: return "onednn.relu";
        case Unary::gelu: return "onednn.gelu";
        case Unary::sigmoid: return "onednn.sigmoid";
        case Unary::tanh: return "onednn.tanh";
        case Unary::clamp: return "onednn.clamp";
        case Unary::abs: return "onednn.abs";
        case Unary::sqrt: return "onednn.sqrt";
        case Unary::leaky_relu: return "onednn.leaky_relu";
        case Unary::hardswish: return "onednn.hardswish";
    }
    return "onednn.unary";
}

/// A finite number attribute (leaky_relu's negative_slope, elu's alpha) with its default;
/// raises INVALID_ARGUMENT naming it when it is not finite.
float finite_attribute(const plugin::Attributes& attrs, const char* capsule, const char* name, double fallback) {
    const double v = attrs.get_float(name, fallback);
    plugin::require(std::isfinite(v), [&] {
        return std::string(capsule) + ": attribute '" + name + "' must be a finite number";
    });
    return static_cast<float>(v);
}

/// F.gelu's `approximate`: true for "tanh", false for "none" (the default); raises
/// INVALID_ARGUMENT for anything else.
bool gelu_tanh(const plugin::Attributes& attrs) {
    const auto approximate = attrs.get_string("approximate", "none");
    plugin::require(approximate == "none" || approximate == "tanh", [&] {
        return "onednn.gelu: attribute 'approximate' must be 'none' or 'tanh', got '" + approximate + "'";
    });
    return approximate == "tanh";
}

template <Unary Op>
std::unique_ptr<PrimitiveState> prepare_unary(const PrepareCall& call) {
    constexpr const char* name = unary_name(Op);
    auto s = std::make_unique<PrimitiveState>(name, call);
    const Tensor x = call.input(0);
    require_float32(name, x, "input x");
    s->empty = x.numel() == 0;
    s->limit_threads(8.0 * double(x.numel()));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->empty) return s;
    dnnl::algorithm algo = dnnl::algorithm::eltwise_relu;
    float alpha = 0.0f, beta = 0.0f;
    if constexpr (Op == Unary::clamp) {
        const PostOp clip = clamp_post_op(call.attrs());
        algo = clip.algorithm;
        alpha = clip.alpha;
        beta = clip.beta;
    } else if constexpr (Op == Unary::gelu) {
        algo = gelu_tanh(call.attrs()) ? dnnl::algorithm::eltwise_gelu_tanh : dnnl::algorithm::eltwise_gelu_erf;
    } else if constexpr (Op == Unary::sigmoid) {
        algo = dnnl::algorithm::eltwise_logistic;
    } else if constexpr (Op == Unary::tanh) {
        algo = dnnl::algorithm::eltwise_tanh;
    } else if constexpr (Op == Unary::abs) {
        algo = dnnl::algorithm::eltwise_abs;
    } else if constexpr (Op == Unary::sqrt) {
        algo = dnnl::algorithm::eltwise_sqrt;
    } else if constexpr (Op == Unary::leaky_relu) {
        alpha = finite_attribute(call.attrs(), name, "negative_slope", 0.01);
    } else if constexpr (Op == Unary::hardswish) {
        algo = dnnl::algorithm::eltwise_hardswish;
    }
    s->src_md = plain_desc({x.numel()});
    s->dst_md = s->src_md;
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, algo, s->src_md, alpha, beta),
        scratchpad_attr(), cpu_engine());
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::eltwise_forward(pd);
    return s;
}

template <const char* Name>
void run_unary(const ForwardCall& call) {
    const auto& s = state_of<PrimitiveState>(call, Name);
    if (s.empty) return;
    execute(s, s.primitive,
            {{DNNL_ARG_SRC, wrap(s.src_md, call.input(0).data<float>())},
             {DNNL_ARG_DST, wrap(s.dst_md, call.output().data<float>())}});
}

/// relu and clamp: oneDNN's eltwise_relu and eltwise_clip map NaN to a bound where torch.relu and
/// torch.clamp keep NaN, so a second pass copies NaN inputs to the output (one extra read of x;
/// both are memory-bound either way).
template <const char* Name>
void run_keeping_nan(const ForwardCall& call) {
    run_unary<Name>(call);
    const Tensor x = call.input(0);
    const float* in = x.data<float>();
    float* out = call.output().data<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i)
        if (in[i] != in[i]) out[i] = in[i];
}

/// leaky_relu: with negative_slope 0, oneDNN's relu maps NaN and -inf to 0 where PyTorch's
/// x · slope gives NaN (and -0 for a negative x): a second pass computes the elements not above 0
/// as x · 0.
template <const char* Name>
void run_leaky_relu(const ForwardCall& call) {
    run_unary<Name>(call);
    if (finite_attribute(call.attrs(), Name, "negative_slope", 0.01) != 0.0f) return;
    const Tensor x = call.input(0);
    const float* in = x.data<float>();
    float* out = call.output().data<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i)
        if (!(in[i] > 0.0f)) out[i] = in[i] * 0.0f;
}

/// hardswish: oneDNN computes x · clip(x/6 + 1/2, 0, 1), which stays finite where PyTorch's
/// x · min(max(x + 3, 0), 6) / 6 overflows (x above FLT_MAX / 6, about 5.7e37): a second pass
/// computes such elements as PyTorch does (+inf).
template <const char* Name>
void run_hardswish(const ForwardCall& call) {
    run_unary<Name>(call);
    const Tensor x = call.input(0);
    const float* in = x.data<float>();
    float* out = call.output().data<float>();
    constexpr float kOverflows = std::numeric_limits<float>::max() / 6.0f;
    for (int64_t i = 0, n = x.numel(); i < n; ++i)
        if (in[i] > kOverflows) out[i] = in[i] * std::fmin(std::fmax(in[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
}

// ---- softmax --------------------------------------------------------------------------------

/// torch.softmax / torch.log_softmax(x, dim=axis) (axis may be negative; a rank-0 x is one
/// element): oneDNN softmax_forward / logsoftmax_forward over the plain row-major tensor.
/// PyTorch computes exp(x - max) with the slice's maximum, so a slice along the axis gives NaN
/// throughout when it holds a NaN or its maximum is infinite (+inf - +inf, and -inf - -inf when
/// every element is -inf, are NaN). oneDNN skips NaN when taking the maximum, and on the last
/// axis gives 0 and -inf beside a +inf ([inf, 1, 2] -> [nan, 0, 0]); a second pass sets such
/// slices to NaN (softmax_slice_is_nan).
struct SoftmaxState : PrimitiveState {
    using PrimitiveState::PrimitiveState;
    int64_t outer = 1, length = 1, inner = 1;  // dims before, along and after the axis
};

template <bool Log>
std::unique_ptr<SoftmaxState> prepare_softmax(const PrepareCall& call) {
    const char* name = Log ? "onednn.log_softmax" : "onednn.softmax";
    auto s = std::make_unique<SoftmaxState>(name, call);
    const Tensor x = call.input(0);
    require_float32(name, x, "input x");
    const int rank = std::max(x.rank(), 1);
    const auto normalized = try_normalize_axis(call.attrs().get_int("axis", -1), rank);
    plugin::require(normalized.has_value(), [&] {
        return std::string(name) + ": axis out of range for rank " + std::to_string(x.rank());
    });
    const int64_t axis = *normalized;
    s->empty = x.numel() == 0;
    s->limit_threads(8.0 * double(x.numel()));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->empty) return s;
    const memory::dims dims = dims_of(x);
    for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i)
        (i < axis ? s->outer : i == axis ? s->length : s->inner) *= dims[i];
    s->src_md = plain_desc(dims);
    s->dst_md = s->src_md;
    const auto kind = dnnl::prop_kind::forward_inference;
    if constexpr (Log) {
        dnnl::logsoftmax_forward::primitive_desc pd(
            dnnl::logsoftmax_forward::desc(kind, s->src_md, static_cast<int>(axis)), scratchpad_attr(),
            cpu_engine());
        s->scratchpad = pd.scratchpad_desc();
        s->primitive = dnnl::logsoftmax_forward(pd);
    } else {
        dnnl::softmax_forward::primitive_desc pd(
            dnnl::softmax_forward::desc(kind, s->src_md, static_cast<int>(axis)), scratchpad_attr(),
            cpu_engine());
        s->scratchpad = pd.scratchpad_desc();
        s->primitive = dnnl::softmax_forward(pd);
    }
    return s;
}

/// Whether torch.softmax gives NaN for the whole slice x[0], x[stride], ... (length >= 1): it
/// holds a NaN or a +inf, or every element is -inf.
bool softmax_slice_is_nan(const float* x, int64_t length, int64_t stride) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    bool all_minus_inf = true;
    for (int64_t k = 0; k < length; ++k) {
        const float v = x[k * stride];
        if (v != v || v == inf) return true;
        all_minus_inf = all_minus_inf && v == -inf;
    }
    return all_minus_inf;
}

template <const char* Name>
void run_softmax(const ForwardCall& call) {
    const auto& s = state_of<SoftmaxState>(call, Name);
    if (s.empty) return;
    const float* x = call.input(0).data<float>();
    float* y = call.output().data<float>();
    execute(s, s.primitive, {{DNNL_ARG_SRC, wrap(s.src_md, x)}, {DNNL_ARG_DST, wrap(s.dst_md, y)}});
    for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < s.inner; ++i) {
            const int64_t base = o * s.length * s.inner + i;
            if (softmax_slice_is_nan(x + base, s.length, s.inner))
                for (int64_t k = 0; k < s.length; ++k) y[base + k * s.inner] = std::numeric_limits<float>::quiet_NaN();
        }
}

// ---- binary ---------------------------------------------------------------------------------

/// torch.add / torch.sub / torch.mul(a, b) with NumPy broadcasting. oneDNN's binary primitive
/// broadcasts its second source only (its first source has the output's shape), so: when a has
/// the output's shape, dst = a op b; when b has it and a broadcasts, the operands are exchanged
/// (add and mul commute; sub computes -(b - a) with an eltwise post-op, exact in IEEE arithmetic).
/// When both operands broadcast (e.g. [3, 1] + [1, 4]), a is first copied, broadcast, into the
/// output buffer and the primitive runs in place there: dst = dst op b.
enum class Binary { add, sub, mul };

template <Binary Op>
std::unique_ptr<PrimitiveState> prepare_binary(const PrepareCall& call) {
    const char* name = Op == Binary::add ? "onednn.add" : Op == Binary::sub ? "onednn.sub" : "onednn.mul";
    auto s = std::make_unique<PrimitiveState>(name, call);
    const Tensor a = call.input(0), b = call.input(1), y = call.output();
    require_float32(name, a, "input a");
    require_float32(name, b, "input b");
    s->empty = y.numel() == 0;
    s->limit_threads(double(y.numel()));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->empty) return s;
    const std::size_t rank = std::max<std::size_t>(y.rank(), 1);
    auto aligned = [&](const Tensor& t) {
        memory::dims d(t.shape().begin(), t.shape().end());
        d.insert(d.begin(), rank - d.size(), 1);
        return d;
    };
    const memory::dims ad = aligned(a), bd = aligned(b), yd = dims_of(y);
    if (ad != yd) {
        if (bd == yd) {
            s->swapped = true;
        } else {
            s->expand = true;
            s->out_dims.assign(yd.begin(), yd.end());
            s->a_strides.assign(rank, 0);
            int64_t stride = 1;
            for (std::size_t i = rank; i-- > 0;) {
                s->a_strides[i] = ad[i] == 1 ? 0 : stride;
                stride *= ad[i];
            }
        }
    }
    s->src_md = plain_desc(s->swapped ? bd : s->expand ? yd : ad);
    s->src1_md = plain_desc(s->swapped ? ad : bd);
    s->dst_md = plain_desc(yd);
    const auto algo = Op == Binary::add   ? dnnl::algorithm::binary_add
                      : Op == Binary::sub ? dnnl::algorithm::binary_sub
                                          : dnnl::algorithm::binary_mul;
    dnnl::primitive_attr attr = scratchpad_attr();
    if (Op == Binary::sub && s->swapped) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, -1.f, 0.f);
        attr.set_post_ops(ops);
    }
    dnnl::binary::primitive_desc pd(dnnl::binary::desc(algo, s->src_md, s->src1_md, s->dst_md), attr,
                                    cpu_engine());
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::binary(pd);
    return s;
}

/// Copies `a` (strides `a_strides`, 0 on broadcast dims) broadcast into the row-major `y` of dims
/// `dims`.
void broadcast_copy(const float* a, const std::vector<int64_t>& a_strides,
                    const std::vector<int64_t>& dims, float* y) {
    const std::size_t rank = dims.size();
    const int64_t last = dims[rank - 1], last_stride = a_strides[rank - 1];
    std::vector<int64_t> index(rank, 0);
    int64_t rows = 1;
    for (std::size_t i = 0; i + 1 < rank; ++i) rows *= dims[i];
    for (int64_t r = 0; r < rows; ++r) {
        int64_t offset = 0;
        for (std::size_t i = 0; i + 1 < rank; ++i) offset += index[i] * a_strides[i];
        for (int64_t j = 0; j < last; ++j) y[r * last + j] = a[offset + j * last_stride];
        for (std::size_t i = rank - 1; i-- > 0;) {
            if (++index[i] < dims[i]) break;
            index[i] = 0;
        }
    }
}

template <const char* Name>
void run_binary(const ForwardCall& call) {
    const auto& s = state_of<PrimitiveState>(call, Name);
    if (s.empty) return;
    const float* a = call.input(0).data<float>();
    const float* b = call.input(1).data<float>();
    if (s.expand) {
        float* y = call.output().data<float>();
        broadcast_copy(a, s.a_strides, s.out_dims, y);
        a = y;  // in place: dst = dst op b
    }
    execute(s, s.primitive,
            {{DNNL_ARG_SRC_0, wrap(s.src_md, s.swapped ? b : a)},
             {DNNL_ARG_SRC_1, wrap(s.src1_md, s.swapped ? a : b)},
             {DNNL_ARG_DST, wrap(s.dst_md, call.output().data<float>())}});
}

// ---- batch_norm -----------------------------------------------------------------------------

/// torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training, eps) on
/// x [N, C, ...] (rank 2 to 5; plain, or nhwc inside a compiled group): y = (x - mean) /
/// sqrt(var + eps) * weight + bias, with the running statistics (training = false) or the batch's
/// per-channel mean and biased variance over N and the spatial dims (training = true; as
/// docs/ops.md and the reference capsule, the running statistics are never written). The
/// statistics, var + eps and scale = weight / sqrt(var + eps) are formed in double, as the
/// reference capsule does (so a running variance of -1e-5 with eps 1e-5 is not 0, and eps 1e-45
/// is not a float32 denormal), and handed to oneDNN's use_global_stats primitive as float32 mean,
/// variance 1 with epsilon 0, and that scale, which computes (x - mean) * scale + bias as the
/// reference capsule's batch_norm_of. Parameters in docs/ops.md order: weight, bias
/// (when affine), running_mean, running_var.
struct BatchNormState : NodeState {
    using NodeState::NodeState;
    bool empty = false, affine = true, training = false;
    double eps = 1e-5;
    memory::desc x_md, c_md;
    dnnl::batch_normalization_forward primitive;
};

/// Offsets, in elements through x's view strides, of the positions of one (image, channel) plane
/// of x [N, C, ...]: the spatial dims in row-major order.
std::vector<int64_t> plane_offsets(const Tensor& x) {
    std::vector<int64_t> offsets{0};
    for (int d = 2; d < x.rank(); ++d) {
        std::vector<int64_t> next;
        next.reserve(offsets.size() * static_cast<std::size_t>(x.dim(d)));
        for (int64_t base : offsets)
            for (int64_t i = 0; i < x.dim(d); ++i) next.push_back(base + i * x.view->strides[d]);
        offsets = std::move(next);
    }
    return offsets;
}

/// Batch statistics need more than one value per channel (PyTorch's "Expected more than 1 value
/// per channel when training"; the reference capsule's check): raises INVALID_ARGUMENT.
void require_values_per_channel(const Tensor& x) {
    plugin::require(x.dim(1) == 0 || x.numel() != x.dim(1), [&] {
        return "onednn.batch_norm: training needs more than 1 value per channel, got x " + shape_string(x.shape());
    });
}

/// Per-channel mean and var + eps of batch_norm, in double: the running statistics, or with
/// `training` the batch's mean and biased variance over N and the spatial dims (two passes, as
/// the reference capsule's channel_stats).
void batch_norm_statistics(const Tensor& x, const float* running_mean, const float* running_var, bool training,
                           double eps, std::vector<double>& mean, std::vector<double>& var_eps) {
    const int64_t n = x.dim(0), c = x.dim(1);
    mean.assign(static_cast<std::size_t>(c), 0.0);
    var_eps.assign(static_cast<std::size_t>(c), eps);
    if (!training) {
        for (int64_t ch = 0; ch < c; ++ch) {
            mean[std::size_t(ch)] = running_mean[ch];
            var_eps[std::size_t(ch)] = double(running_var[ch]) + eps;
        }
        return;
    }
    const std::vector<int64_t> plane = plane_offsets(x);
    const float* X = x.data<float>();
    const int64_t* st = x.view->strides;
    const double count = double(n) * double(plane.size());
    for (int64_t ch = 0; ch < c && count > 0; ++ch) {
        double sum = 0;
        for (int64_t b = 0; b < n; ++b)
            for (int64_t off : plane) sum += X[b * st[0] + ch * st[1] + off];
        const double m = sum / count;
        double squares = 0;
        for (int64_t b = 0; b < n; ++b)
            for (int64_t off : plane) {
                const double t = X[b * st[0] + ch * st[1] + off] - m;
                squares += t * t;
            }
        mean[std::size_t(ch)] = m;
        var_eps[std::size_t(ch)] = squares / count + eps;
    }
}

std::unique_ptr<BatchNormState> prepare_batch_norm(const PrepareCall& call) {
    const char* name = "onednn.batch_norm";
    auto s = std::make_unique<BatchNormState>(name, call);
    const Tensor x = call.input(0);
    require_float32(name, x, "input x");
    const auto attrs = call.attrs();
    s->training = attrs.get_bool("training", false);
    s->affine = attrs.get_bool("affine", true);
    s->eps = attrs.get_float("eps", 1e-5);
    plugin::require(s->eps > 0 && std::isfinite(s->eps), "onednn.batch_norm: attribute 'eps' must be > 0");
    plugin::require(call.num_params() == (s->affine ? 4u : 2u),
                    "onednn.batch_norm: expects parameters [weight, bias,] running_mean, running_var");
    plugin::require(x.rank() >= 2, [&] {
        return std::string(name) + ": expects x [N, C, ...] of rank >= 2, got " + shape_string(x.shape());
    });
    // oneDNN's batch normalization takes rank 2 to 5: a higher rank (always row-major: compiled
    // groups keep only rank-4 values channels-last) is the same computation on [N, C, rest].
    if (x.rank() > 5) require_plain_float32(name, x, "input x");
    for (std::size_t i = 0; i < call.num_params(); ++i) {
        require_float32(name, call.param(i), "a parameter");
        plugin::require(call.param(i).numel() == x.dim(1), "onednn.batch_norm: parameters must be [C]");
    }
    s->empty = x.numel() == 0;
    if (s->training) require_values_per_channel(x);
    s->limit_threads(8.0 * double(x.numel()));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->empty) return s;
    // x and y share a layout: plain, or nhwc inside a compiled group.
    s->x_md = x.rank() <= 5 ? view_desc(x) : plain_desc({x.dim(0), x.dim(1), x.numel() / (x.dim(0) * x.dim(1))});
    s->c_md = plain_desc({x.dim(1)});
    const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                       dnnl::normalization_flags::use_shift;
    // epsilon 0 and variance 1: the scale handed over already holds 1 / sqrt(var + eps).
    dnnl::batch_normalization_forward::primitive_desc pd(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, s->x_md, 0.0f, flags),
        scratchpad_attr(), cpu_engine());
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::batch_normalization_forward(pd);
    return s;
}

/// y = (x - mean) · scale + shift per channel in double (the reference capsule's batch_norm_of),
/// through x's and y's view strides (one layout: plain, or nhwc inside a compiled group): where
/// the primitive's float32 terms would not hold the statistics (a batch mean of 1e4 + noise that
/// rounds by more than 1e-6 of its standard deviation, a scale beyond float32).
void batch_norm_in_double(const Tensor& x, const Tensor& y, const std::vector<double>& mean,
                          const std::vector<double>& scale, const std::vector<float>& shift) {
    const std::vector<int64_t> plane = plane_offsets(x);
    const float* in = x.data<float>();
    float* out = y.data<float>();
    const int64_t* st = x.view->strides;
    for (int64_t b = 0; b < x.dim(0); ++b)
        for (int64_t ch = 0; ch < x.dim(1); ++ch) {
            const auto i = std::size_t(ch);
            for (int64_t off : plane) {
                const int64_t at = b * st[0] + ch * st[1] + off;
                out[at] = static_cast<float>((double(in[at]) - mean[i]) * scale[i] + double(shift[i]));
            }
        }
}

void batch_norm(const ForwardCall& call) {
    const auto& s = state_of<BatchNormState>(call, "onednn.batch_norm");
    if (s.empty) return;
    const std::size_t stats = s.affine ? 2 : 0;
    const Tensor x = call.input(0);
    std::vector<double> mean, var_eps;
    batch_norm_statistics(x, call.param(stats).data<float>(), call.param(stats + 1).data<float>(), s.training, s.eps,
                          mean, var_eps);
    const std::size_t c = mean.size();
    std::vector<float> mean_f(mean.begin(), mean.end()), ones(c, 1.0f), scale(c), shift(c, 0.0f);
    std::vector<double> scale_d(c);
    const float* weight = s.affine ? call.param(0).data<float>() : nullptr;
    bool float_terms = true;  // every channel's mean within 1e-6 of its std, its scale finite
    for (std::size_t ch = 0; ch < c; ++ch) {
        scale_d[ch] = (weight ? double(weight[ch]) : 1.0) / std::sqrt(var_eps[ch]);
        scale[ch] = static_cast<float>(scale_d[ch]);
        float_terms = float_terms && float32_holds_mean(mean_f[ch], mean[ch], var_eps[ch]) &&
                      std::isfinite(scale[ch]) == std::isfinite(scale_d[ch]);
    }
    if (s.affine) std::copy_n(call.param(1).data<float>(), c, shift.begin());
    if (!float_terms) return batch_norm_in_double(x, call.output(), mean, scale_d, shift);
    execute(s, s.primitive,
            {{DNNL_ARG_SRC, wrap(s.x_md, x.data<float>())},
             {DNNL_ARG_DST, wrap(s.x_md, call.output().data<float>())},
             {DNNL_ARG_MEAN, wrap(s.c_md, mean_f.data())},
             {DNNL_ARG_VARIANCE, wrap(s.c_md, ones.data())},
             {DNNL_ARG_SCALE, wrap(s.c_md, scale.data())},
             {DNNL_ARG_SHIFT, wrap(s.c_md, shift.data())}});
}

// ---- backward -------------------------------------------------------------------------------
// PyTorch's derivative formulas (tools/autograd/derivatives.yaml), element by element in float32;
// memory-bound loops, so plain C++ rather than oneDNN primitives (whose relu and clip backward
// would map a NaN input's gradient differently from PyTorch's threshold_backward).

/// A one-input op's backward operands, checked: x, the forward output y (nullptr when the host
/// passed none), dy, and dx (nullptr when the host does not want it).
struct UnaryGrads {
    const float* x;
    const float* y;
    const float* g;
    float* dx;
    int64_t n;
};
UnaryGrads unary_grads(const BackwardCall& call, const char* name) {
    const Tensor x = call.input(0), dy = call.grad_output();
    require_plain_float32(name, x, "input x");
    require_plain_float32(name, dy, "grad output");
    require_shape(name, dy, x.shape(), "grad output");
    const Tensor y = call.output();
    if (y.present()) {
        require_plain_float32(name, y, "output");
        require_shape(name, y, x.shape(), "output");
    }
    return {x.data<float>(), y.present() ? y.data<float>() : nullptr, dy.data<float>(),
            grad_buffer(name, call.grad_input(0), x, "grad input"), x.numel()};
}

/// dx = f(x, y, dy) element by element.
template <typename F>
void unary_backward(const BackwardCall& call, const char* name, bool needs_output, F f) {
    const UnaryGrads u = unary_grads(call, name);
    if (!u.dx) return;
    plugin::require(!needs_output || u.y, [&] { return std::string(name) + ": backward needs the forward output"; });
    for (int64_t i = 0; i < u.n; ++i) u.dx[i] = f(u.x[i], needs_output ? u.y[i] : 0.0f, u.g[i]);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f, kGeluKappa = 0.044715f;
constexpr float kSqrt1_2 = 0.7071067811865476f, kInvSqrt2Pi = 0.3989422804014327f;

/// torch.relu's threshold_backward: 0 where x <= 0 (so at 0), else dy (a NaN x passes dy).
void relu_backward(const BackwardCall& call) {
    unary_backward(call, "onednn.relu", false, [](float x, float, float g) { return x <= 0.0f ? 0.0f : g; });
}

/// torch.clamp: dy where min <= x <= max (bounds inclusive; NaN x gives 0), else 0.
void clamp_backward(const BackwardCall& call) {
    const auto attrs = call.attrs();
    const float inf = std::numeric_limits<float>::infinity();
    const float lo = static_cast<float>(attrs.get_float("min", -inf)), hi = static_cast<float>(attrs.get_float("max", inf));
    unary_backward(call, "onednn.clamp", false,
                   [lo, hi](float x, float, float g) { return x >= lo && x <= hi ? g : 0.0f; });
}

/// F.gelu's GeluBackward: erf form dy (Φ(x) + x φ(x)), with 1 + erf(z) as erfc(-z) so the negative
/// tail keeps its size; tanh form dy (½(1 + tanh u) + ½x sech²(u) √(2/π)(1 + 3κx²)), u = √(2/π)(x + κx³).
void gelu_backward(const BackwardCall& call) {
    if (gelu_tanh(call.attrs()))
        unary_backward(call, "onednn.gelu", false, [](float x, float, float g) {
            const float u = kSqrt2OverPi * (x + kGeluKappa * x * x * x);
            const float one_plus_tanh = 2.0f / (1.0f + std::exp(-2.0f * u));
            // sech²(u) = 4 e^{-2|u|} / (1 + e^{-2|u|})²: 1 - tanh²(u) cancels to 0 in the tails.
            const float e = std::exp(-2.0f * std::fabs(u));
            const float sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));
            return g * (0.5f * one_plus_tanh + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluKappa * x * x));
        });
    else
        unary_backward(call, "onednn.gelu", false, [](float x, float, float g) {
            return g * (0.5f * std::erfc(-x * kSqrt1_2) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
        });
}

/// torch.sigmoid's sigmoid_backward: dy y (1 - y) from the output y.
void sigmoid_backward(const BackwardCall& call) {
    unary_backward(call, "onednn.sigmoid", true, [](float, float y, float g) { return g * y * (1.0f - y); });
}

/// torch.tanh's tanh_backward: dy (1 - y²) from the output y.
void tanh_backward(const BackwardCall& call) {
    unary_backward(call, "onednn.tanh", true, [](float, float y, float g) { return g * (1.0f - y * y); });
}

/// torch.abs's backward: dy · sign(x), 0 at 0 and at NaN (torch.sign).
void abs_backward(const BackwardCall& call) {
    unary_backward(call, "onednn.abs", false,
                   [](float x, float, float g) { return g * float((0.0f < x) - (x < 0.0f)); });
}

/// torch.sqrt's backward: dy / (2 sqrt(x)) (+inf at 0, NaN below).
void sqrt_backward(const BackwardCall& call) {
    unary_backward(call, "onednn.sqrt", false, [](float x, float, float g) { return g / (2.0f * std::sqrt(x)); });
}

/// F.leaky_relu's leaky_relu_backward: dy where x > 0, else dy · negative_slope (so at 0).
void leaky_relu_backward(const BackwardCall& call) {
    const float slope = finite_attribute(call.attrs(), "onednn.leaky_relu", "negative_slope", 0.01);
    unary_backward(call, "onednn.leaky_relu", false,
                   [slope](float x, float, float g) { return x > 0.0f ? g : g * slope; });
}

/// F.hardswish's hardswish_backward: 0 below -3, dy (x/3 + 1/2) on [-3, 3], dy above.
void hardswish_backward(const BackwardCall& call) {
    unary_backward(call, "onednn.hardswish", false, [](float x, float, float g) {
        if (x < -3.0f) return 0.0f;
        return x <= 3.0f ? g * (x / 3.0f + 0.5f) : g;
    });
}

/// torch.softmax's _softmax_backward_data: dx = y (dy - Σ_axis dy y); log_softmax's
/// _log_softmax_backward_data: dx = dy - exp(y) Σ_axis dy; y the forward output.
template <bool Log>
void softmax_backward(const BackwardCall& call) {
    const char* name = Log ? "onednn.log_softmax" : "onednn.softmax";
    const UnaryGrads u = unary_grads(call, name);
    if (!u.dx || u.n == 0) return;
    plugin::require(u.y != nullptr, [&] { return std::string(name) + ": backward needs the forward output"; });
    const Tensor x = call.input(0);
    const int rank = std::max(x.rank(), 1);
    const auto axis = try_normalize_axis(call.attrs().get_int("axis", -1), rank);
    plugin::require(axis.has_value(), [&] {
        return std::string(name) + ": axis out of range for rank " + std::to_string(x.rank());
    });
    int64_t outer = 1, length = 1, inner = 1;
    for (int i = 0; i < x.rank(); ++i) (i < *axis ? outer : i == *axis ? length : inner) *= x.dim(i);
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            const int64_t base = o * length * inner + i;
            double total = 0.0;
            for (int64_t k = 0; k < length; ++k) {
                const int64_t at = base + k * inner;
                total += Log ? double(u.g[at]) : double(u.g[at]) * double(u.y[at]);
            }
            const float sum = static_cast<float>(total);
            for (int64_t k = 0; k < length; ++k) {
                const int64_t at = base + k * inner;
                u.dx[at] = Log ? u.g[at] - std::exp(u.y[at]) * sum : u.y[at] * (u.g[at] - sum);
            }
        }
}

/// Row-major strides of an operand of `shape` read broadcast against `out` (0 on its broadcast
/// and missing leading dims).
std::vector<int64_t> broadcast_strides(std::span<const int64_t> shape, const std::vector<int64_t>& out) {
    std::vector<int64_t> strides(out.size(), 0);
    int64_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        const std::size_t o = out.size() - shape.size() + i;
        strides[o] = shape[i] == 1 ? 0 : stride;
        stride *= shape[i];
    }
    return strides;
}

/// The vector-Jacobian product of torch.add / torch.sub / torch.mul with broadcasting: each
/// operand's gradient is dy (add; -dy for sub's b; dy times the other operand for mul) summed
/// over the dims that operand was broadcast along, back to its own shape.
template <Binary Op>
void binary_backward(const BackwardCall& call) {
    const char* name = Op == Binary::add ? "onednn.add" : Op == Binary::sub ? "onednn.sub" : "onednn.mul";
    const Tensor a = call.input(0), b = call.input(1), dy = call.grad_output();
    require_plain_float32(name, a, "input a");
    require_plain_float32(name, b, "input b");
    require_plain_float32(name, dy, "grad output");
    // dy must be exactly the NumPy broadcast of a and b.
    const int out_rank = std::max(a.rank(), b.rank());
    std::vector<int64_t> out(static_cast<std::size_t>(out_rank));
    for (int i = 1; i <= out_rank; ++i) {
        const int64_t da_ = i <= a.rank() ? a.dim(-i) : 1, db_ = i <= b.rank() ? b.dim(-i) : 1;
        plugin::require(da_ == db_ || da_ == 1 || db_ == 1, [&] {
            return std::string(name) + ": inputs " + shape_string(a.shape()) + " and " + shape_string(b.shape()) +
                   " do not broadcast";
        });
        out[std::size_t(out_rank - i)] = da_ == 1 ? db_ : da_;
    }
    require_shape(name, dy, out, "grad output");
    float* da = grad_buffer(name, call.grad_input(0), a, "grad a");
    float* db = grad_buffer(name, call.grad_input(1), b, "grad b");
    if (da) std::fill(da, da + a.numel(), 0.0f);
    if (db) std::fill(db, db + b.numel(), 0.0f);
    const int64_t total = dy.numel();
    if ((!da && !db) || total == 0) return;
    const float* A = a.data<float>();
    const float* B = b.data<float>();
    const float* G = dy.data<float>();
    const auto as = broadcast_strides(a.shape(), out), bs = broadcast_strides(b.shape(), out);
    const std::size_t rank = out.size();
    if (rank == 0) {  // scalars
        if (da) da[0] = Op == Binary::mul ? G[0] * B[0] : G[0];
        if (db) db[0] = Op == Binary::mul ? G[0] * A[0] : Op == Binary::sub ? -G[0] : G[0];
        return;
    }
    // Rows of the last dim, each at offsets (ao, bo) into a and b.
    const int64_t last = out[rank - 1], rows = total / last;
    std::vector<int64_t> index(rank, 0);
    for (int64_t r = 0; r < rows; ++r) {
        int64_t ao = 0, bo = 0;
        for (std::size_t i = 0; i + 1 < rank; ++i) {
            ao += index[i] * as[i];
            bo += index[i] * bs[i];
        }
        const float* g = G + r * last;
        for (int64_t j = 0; j < last; ++j) {
            const int64_t ai = ao + j * as[rank - 1], bi = bo + j * bs[rank - 1];
            if (da) da[ai] += Op == Binary::mul ? g[j] * B[bi] : g[j];
            if (db) db[bi] += Op == Binary::mul ? g[j] * A[ai] : Op == Binary::sub ? -g[j] : g[j];
        }
        for (std::size_t i = rank - 1; i-- > 0;) {
            if (++index[i] < out[i]) break;
            index[i] = 0;
        }
    }
}

/// The vector-Jacobian product of batch norm (native_batch_norm_backward): with the statistics of
/// the forward (batch_norm_statistics), r = 1 / sqrt(var + eps) and x̂ = (x - mean) r, dweight =
/// Σ dy x̂, dbias = Σ dy (sums over N and the spatial dims, in double), and dx = weight · r · dy
/// with the running statistics, weight · r · (dy - mean(dy) - x̂ · mean(dy x̂)) with the batch's
/// (training = true, where mean and var depend on x); the running statistics get zero gradients.
void batch_norm_backward(const BackwardCall& call) {
    const char* name = "onednn.batch_norm";
    const auto attrs = call.attrs();
    const bool training = attrs.get_bool("training", false);
    const bool affine = attrs.get_bool("affine", true);
    const double eps = attrs.get_float("eps", 1e-5);
    plugin::require(eps > 0 && std::isfinite(eps), "onednn.batch_norm: attribute 'eps' must be > 0");
    const Tensor x = call.input(0), dy = call.grad_output();
    require_plain_float32(name, x, "input x");
    require_plain_float32(name, dy, "grad output");
    plugin::require(call.num_params() == (affine ? 4u : 2u) && x.rank() >= 2,
                    "onednn.batch_norm: expects x [N, C, ...], its grad, and parameters [weight, bias,] "
                    "running_mean, running_var");
    require_shape(name, dy, x.shape(), "grad output");
    if (training) require_values_per_channel(x);
    const int64_t n = x.dim(0), c = x.dim(1), spatial = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
    const std::size_t stats = affine ? 2 : 0;
    const int64_t channels[] = {c};
    for (std::size_t i = 0; i < call.num_params(); ++i) {
        require_plain_float32(name, call.param(i), "a parameter");
        require_shape(name, call.param(i), channels, "a parameter");
    }
    std::vector<double> mean, var_eps;
    if (n * spatial > 0)
        batch_norm_statistics(x, call.param(stats).data<float>(), call.param(stats + 1).data<float>(), training, eps,
                              mean, var_eps);
    const float* weight = affine ? call.param(0).data<float>() : nullptr;
    float* dx = grad_buffer(name, call.grad_input(0), x, "grad input");
    float* dw = affine ? grad_buffer(name, call.grad_param(0), call.param(0), "grad weight") : nullptr;
    float* db = affine ? grad_buffer(name, call.grad_param(1), call.param(1), "grad bias") : nullptr;
    for (std::size_t i = stats; i < stats + 2; ++i)
        if (float* g = grad_buffer(name, call.grad_param(i), call.param(i), "grad running statistic"))
            std::fill(g, g + c, 0.0f);
    const float* X = x.data<float>();
    const float* G = dy.data<float>();
    const double count = double(n * spatial);
    for (int64_t ch = 0; ch < c; ++ch) {
        if (count == 0) {  // no values: zero sums, nothing to write in dx
            if (dw) dw[ch] = 0.0f;
            if (db) db[ch] = 0.0f;
            continue;
        }
        const double r = 1.0 / std::sqrt(var_eps[std::size_t(ch)]), m = mean[std::size_t(ch)];
        double sum_dy = 0, sum_dyx = 0;
        for (int64_t bi = 0; bi < n; ++bi) {
            const int64_t base = (bi * c + ch) * spatial;
            for (int64_t i = 0; i < spatial; ++i) {
                sum_dy += G[base + i];
                sum_dyx += double(G[base + i]) * (double(X[base + i]) - m) * r;
            }
        }
        if (dw) dw[ch] = static_cast<float>(sum_dyx);
        if (db) db[ch] = static_cast<float>(sum_dy);
        if (!dx) continue;
        const double k = (weight ? double(weight[ch]) : 1.0) * r;
        const double mean_dy = training ? sum_dy / count : 0.0, mean_dyx = training ? sum_dyx / count : 0.0;
        for (int64_t bi = 0; bi < n; ++bi) {
            const int64_t base = (bi * c + ch) * spatial;
            for (int64_t i = 0; i < spatial; ++i) {
                const double xhat = (double(X[base + i]) - m) * r;
                dx[base + i] = static_cast<float>(k * (double(G[base + i]) - mean_dy - xhat * mean_dyx));
            }
        }
    }
}

template <typename State, std::unique_ptr<State> (*Prepare)(const PrepareCall&),
          void (*Forward)(const ForwardCall&), void (*Backward)(const BackwardCall&)>
constexpr capsule_kernel entry(const char* name) {
    return plugin::kernel(name, forward_entry<Forward>, backward_entry<Backward>, prepare_entry<State, Prepare>,
                          release_entry<State>, kFloat32Only);
}

}  // namespace

namespace {
constexpr char k_relu[] = "onednn.relu";
constexpr char k_gelu[] = "onednn.gelu";
constexpr char k_sigmoid[] = "onednn.sigmoid";
constexpr char k_tanh[] = "onednn.tanh";
constexpr char k_clamp[] = "onednn.clamp";
constexpr char k_abs[] = "onednn.abs";
constexpr char k_sqrt[] = "onednn.sqrt";
constexpr char k_leaky_relu[] = "onednn.leaky_relu";
constexpr char k_hardswish[] = "onednn.hardswish";
constexpr char k_softmax[] = "onednn.softmax";
constexpr char k_log_softmax[] = "onednn.log_softmax";
constexpr char k_add[] = "onednn.add";
constexpr char k_sub[] = "onednn.sub";
constexpr char k_mul[] = "onednn.mul";
}  // namespace

const capsule_kernel relu_kernel =
    entry<PrimitiveState, prepare_unary<Unary::relu>, run_keeping_nan<k_relu>, relu_backward>(k_relu);
const capsule_kernel clamp_kernel =
    entry<PrimitiveState, prepare_unary<Unary::clamp>, run_keeping_nan<k_clamp>, clamp_backward>(k_clamp);
const capsule_kernel gelu_kernel =
    entry<PrimitiveState, prepare_unary<Unary::gelu>, run_unary<k_gelu>, gelu_backward>(k_gelu);
const capsule_kernel sigmoid_kernel =
    entry<PrimitiveState, prepare_unary<Unary::sigmoid>, run_unary<k_sigmoid>, sigmoid_backward>(k_sigmoid);
const capsule_kernel tanh_kernel =
    entry<PrimitiveState, prepare_unary<Unary::tanh>, run_unary<k_tanh>, tanh_backward>(k_tanh);
const capsule_kernel abs_kernel =
    entry<PrimitiveState, prepare_unary<Unary::abs>, run_unary<k_abs>, abs_backward>(k_abs);
const capsule_kernel sqrt_kernel =
    entry<PrimitiveState, prepare_unary<Unary::sqrt>, run_unary<k_sqrt>, sqrt_backward>(k_sqrt);
const capsule_kernel leaky_relu_kernel =
    entry<PrimitiveState, prepare_unary<Unary::leaky_relu>, run_leaky_relu<k_leaky_relu>, leaky_relu_backward>(k_leaky_relu);
const capsule_kernel hardswish_kernel =
    entry<PrimitiveState, prepare_unary<Unary::hardswish>, run_hardswish<k_hardswish>, hardswish_backward>(k_hardswish);
const capsule_kernel softmax_kernel =
    entry<SoftmaxState, prepare_softmax<false>, run_softmax<k_softmax>, softmax_backward<false>>(k_softmax);
const capsule_kernel log_softmax_kernel =
    entry<SoftmaxState, prepare_softmax<true>, run_softmax<k_log_softmax>, softmax_backward<true>>(k_log_softmax);
const capsule_kernel add_kernel =
    entry<PrimitiveState, prepare_binary<Binary::add>, run_binary<k_add>, binary_backward<Binary::add>>(k_add);
const capsule_kernel sub_kernel =
    entry<PrimitiveState, prepare_binary<Binary::sub>, run_binary<k_sub>, binary_backward<Binary::sub>>(k_sub);
const capsule_kernel mul_kernel =
    entry<PrimitiveState, prepare_binary<Binary::mul>, run_binary<k_mul>, binary_backward<Binary::mul>>(k_mul);
const capsule_kernel batch_norm_kernel =
    entry<BatchNormState, prepare_batch_norm, batch_norm, batch_norm_backward>("onednn.batch_norm");

capsule_forward_fn elementwise_finite_input_forward(const capsule_kernel* kernel) {
    // By name: the plugin's table holds copies of these entries.
    const std::string_view name = kernel->capsule_name;
    if (name == k_relu) return forward_entry<run_unary<k_relu>>;
    if (name == k_clamp) return forward_entry<run_unary<k_clamp>>;
    return nullptr;
}

}  // namespace capsule::onednn
