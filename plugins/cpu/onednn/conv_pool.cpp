// onednn.conv2d and the 2-D pools (max_pool2d, max_pool2d_pad, avg_pool2d, avg_pool2d_pad).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "kernels.hpp"

namespace capsule::onednn {

namespace {

/// The right (bottom) padding that makes oneDNN's output size `out` along one spatial dim equal
/// the host's, which takes floor division with `padding` on both sides (a ceil-mode pool's last
/// window may need more): out = (in + padding + right - ((kernel - 1)·dilation + 1)) / stride + 1.
int64_t right_padding(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation = 1) {
    const int64_t span = (kernel - 1) * dilation + 1;
    return std::max<int64_t>(padding, (out - 1) * stride + span - in - padding);
}

/// Activations stay in the layout of their view (the host's plain nchw; nhwc for a value a
/// compiled group keeps channels-last), while the primitive may prefer another (nChw16c, nhwc):
/// when it does, forward reorders in and out through per-thread scratch buffers. `plain` is the
/// view's layout, `inner` the primitive's.
struct Staged {
    memory::desc plain, inner;
    dnnl::reorder to_inner, to_plain;
    bool reordered = false;

    /// `to_inner` for a source, `to_plain` for a destination; both for a destination that is
    /// read before it is written (the sum post-op).
    void init(const memory::desc& host, const memory::desc& wanted, bool is_source, bool is_read = false) {
        plain = host;
        inner = wanted;
        reordered = wanted != host;
        if (!reordered) return;
        if (is_source || is_read)
            to_inner = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), host, cpu_engine(), wanted));
        if (!is_source)
            to_plain = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), wanted, cpu_engine(), host));
    }
};

/// Runs `primitive` with src/dst in the host's layout, reordering through scratch buffers where
/// the primitive's layouts differ. `extra` holds the other arguments (weights, bias). With
/// `addend` (laid out as y), the destination holds it when the primitive starts (for its sum
/// post-op).
void run_staged(const NodeState& state, const dnnl::primitive& primitive, const Staged& src,
                const Staged& dst, const void* x, void* y, std::unordered_map<int, memory> extra,
                const void* addend = nullptr) {
    add_scratchpad(state, extra);
    ThreadScope scope(state.threads);
    auto& stream = thread_stream();
    memory x_plain = wrap(src.plain, x), y_plain = wrap(dst.plain, y);
    memory x_inner = x_plain, y_inner = y_plain;
    if (src.reordered) {
        x_inner = wrap(src.inner, scratch(0, src.inner.get_size()));
        src.to_inner.execute(stream, x_plain, x_inner);
    }
    if (dst.reordered) y_inner = wrap(dst.inner, scratch(1, dst.inner.get_size()));
    if (addend && dst.reordered) {
        memory addend_plain = wrap(dst.plain, addend);
        dst.to_inner.execute(stream, addend_plain, y_inner);
    } else if (addend) {
        std::memcpy(y, addend, dst.plain.get_size());
    }
    extra.emplace(DNNL_ARG_SRC, x_inner);
    extra.emplace(DNNL_ARG_DST, y_inner);
    primitive.execute(stream, extra);
    if (dst.reordered) dst.to_plain.execute(stream, y_inner, y_plain);
    stream.wait();
}

// ---- conv2d ---------------------------------------------------------------------------------

struct ConvBackward;

/// torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation, groups)
/// (cross-correlation, zero padding on both sides): x [N, C_in, H, W] (nchw), weight
/// [out_channels, C_in/groups, kh, kw] (oihw; goihw with groups > 1, which is the same memory),
/// bias [out_channels] when the `bias` attribute holds. oneDNN's dilation is PyTorch's minus 1.
/// Runs as a oneDNN direct convolution (forward_inference) in the layouts it prefers; the weights
/// are reordered once in prepare, activations per call (see Staged).
struct ConvState : NodeState {
    using NodeState::NodeState;
    bool empty = false;
    bool has_bias = false;
    bool bf16 = false;  // input and weights computed in bfloat16 (fpmath bf16)
    bool sum_input1 = false;             // a fused residual add of input 1 (Fusion)
    bool reference = false;              // oneDNN's unoptimised implementation was picked
    bool winograd = false;               // convolution_winograd (Fusion::winograd)
    bool no_input_channels = false;      // C = 0: every output is its channel's bias (or 0)
    /// Outputs (o, oy, ox) of every image that a NaN or infinite weight on the zero padding
    /// makes NaN (padding_nan_outputs); empty for finite weights.
    std::vector<std::array<int64_t, 3>> padding_nan;
    Staged src, dst;
    memory weights;
    memory::desc bias_md;
    dnnl::convolution_forward primitive;
    /// The backward primitives (conv2d_backward), built on the node's first backward call.
    mutable std::mutex backward_mutex;
    mutable std::shared_ptr<const ConvBackward> backward;
};

/// The outputs (o, oy, ox) that F.conv2d makes NaN and oneDNN does not: the definition multiplies
/// every tap by its input, the zero padding included, so a NaN or infinite weight whose tap lands
/// on the padding gives 0 · inf = NaN there, while oneDNN skips padded taps. Empty when every
/// weight is finite (the usual case); otherwise only border outputs.
std::vector<std::array<int64_t, 3>> padding_nan_outputs(const Tensor& x, const Tensor& w, const Tensor& y,
                                                        const std::array<int64_t, 2>& stride,
                                                        const std::array<int64_t, 2>& padding,
                                                        const std::array<int64_t, 2>& dilation) {
    std::vector<std::array<int64_t, 3>> outputs;
    const int64_t O = w.dim(0), per_out = w.numel() / std::max<int64_t>(O, 1), kh = w.dim(2), kw = w.dim(3);
    const float* wd = w.data<float>();
    for (int64_t o = 0; o < O; ++o) {
        std::vector<std::array<int64_t, 2>> taps;  // (i, j) with a non-finite weight
        for (int64_t e = 0; e < per_out; ++e)
            if (!std::isfinite(wd[o * per_out + e])) taps.push_back({e / kw % kh, e % kw});
        if (taps.empty()) continue;
        for (int64_t oy = 0; oy < y.dim(2); ++oy)
            for (int64_t ox = 0; ox < y.dim(3); ++ox)
                for (const auto& [i, j] : taps) {
                    const int64_t iy = oy * stride[0] - padding[0] + i * dilation[0];
                    const int64_t ix = ox * stride[1] - padding[1] + j * dilation[1];
                    if (iy < 0 || iy >= x.dim(2) || ix < 0 || ix >= x.dim(3)) {
                        outputs.push_back({o, oy, ox});
                        break;
                    }
                }
    }
    return outputs;
}

/// The Winograd primitive descriptor `make(type, convolution_winograd)` when `fusion` asks for
/// it, the convolution computes in float32 and oneDNN has an optimised implementation here (it
/// has none for most shapes and CPUs: then none, and the caller uses convolution_direct).
template <class Make>
auto winograd_primitive_desc(const Fusion& fusion, memory::data_type type, const Make& make)
    -> std::optional<decltype(make(type, dnnl::algorithm::convolution_winograd))> {
    if (!fusion.winograd || type != memory::data_type::f32) return std::nullopt;
    try {
        auto pd = make(type, dnnl::algorithm::convolution_winograd);
        if (!is_reference(pd)) return pd;
    } catch (const dnnl::error&) {  // unimplemented for these shapes or this CPU
    }
    return std::nullopt;
}

/// The conv2d state of `call`, with `fusion` applied to the result inside the primitive.
std::unique_ptr<ConvState> build_conv2d(const PrepareCall& call, const Fusion& fusion) {
    const char* name = "onednn.conv2d";
    auto s = std::make_unique<ConvState>(name, call);
    const Tensor x = call.input(0), w = call.param(0), y = call.output();
    require_float32(name, x, "input x");
    require_float32(name, w, "weight");
    const auto attrs = call.attrs();
    const auto stride = pair_attr(attrs, "stride", 1, name);
    const auto padding = pair_attr(attrs, "padding", 0, name);
    const auto dilation = pair_attr(attrs, "dilation", 1, name);
    const int64_t groups = attrs.get_int("groups", 1);
    s->has_bias = attrs.get_bool("bias", true);
    plugin::require(call.num_params() == (s->has_bias ? 2u : 1u),
                    "onednn.conv2d: expects parameters weight and (with bias) bias");
    if (s->has_bias) require_float32(name, call.param(1), "bias");
    if (fusion.add_input1) {
        plugin::require(call.num_inputs() == 2 && call.input(1).dtype() == CAPSULE_DTYPE_FLOAT32 &&
                            view_desc(call.input(1)) == view_desc(y),
                        "onednn.conv2d: a fused addend must be a float32 input 1 of the output's shape and layout");
        s->sum_input1 = true;
    }
    plugin::require(x.rank() == 4 && w.rank() == 4 && y.rank() == 4,
                    "onednn.conv2d: expects x [N, C, H, W] and weight [O, C/groups, kh, kw]");
    const int64_t c = x.dim(1), o = w.dim(0);
    plugin::require(groups >= 1 && c % groups == 0 && o % groups == 0 && w.dim(1) * groups == c, [&] {
        return std::string(name) + ": weight " + shape_string(w.shape()) + " with groups " +
               std::to_string(groups) + " does not match input " + shape_string(x.shape());
    });
    s->empty = y.numel() == 0;
    s->limit_threads(2.0 * double(y.numel()) * double(w.numel() / std::max<int64_t>(o, 1)));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    // With no input channels every product sum is empty: F.conv2d gives the bias (oneDNN has no
    // primitive for C = 0).
    s->no_input_channels = c == 0;
    if (s->empty || s->no_input_channels) return s;
    using tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    const memory::dims x_dims = dims_of(x), y_dims = dims_of(y);
    memory::dims w_dims = groups == 1 ? memory::dims{o, c, w.dim(2), w.dim(3)}
                                      : memory::dims{groups, o / groups, c / groups, w.dim(2), w.dim(3)};
    const memory::desc w_user(w_dims, f32, groups == 1 ? tag::oihw : tag::goihw);
    const memory::desc y_any(y_dims, f32, tag::any);
    s->bias_md = memory::desc({o}, f32, tag::x);
    const memory::dims strides{stride[0], stride[1]}, dil{dilation[0] - 1, dilation[1] - 1},
        pad{padding[0], padding[1]};
    memory::dims pad_r(2);
    for (int i = 0; i < 2; ++i)
        pad_r[i] = right_padding(x.dim(2 + i), y.dim(2 + i), w.dim(2 + i), stride[i], padding[i], dilation[i]);
    // Input and weights in input_type (bfloat16 under fpmath bf16, unless only oneDNN's
    // reference implementation has it here), bias and output float32.
    auto primitive_desc = [&](memory::data_type type, dnnl::algorithm algorithm) {
        const memory::desc x_any(x_dims, type, tag::any), w_any(w_dims, type, tag::any);
        auto desc = s->has_bias
                        ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, x_any,
                                                          w_any, s->bias_md, y_any, strides, dil, pad, pad_r)
                        : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, x_any,
                                                          w_any, y_any, strides, dil, pad, pad_r);
        return dnnl::convolution_forward::primitive_desc(desc, scratchpad_attr(fusion.activation, s->sum_input1), cpu_engine());
    };
    auto pd = winograd_primitive_desc(fusion, input_type(call), primitive_desc);
    s->winograd = pd.has_value();
    if (!pd) pd = primitive_desc(input_type(call), dnnl::algorithm::convolution_direct);
    if (is_bf16(pd->src_desc()) && is_reference(*pd)) pd = primitive_desc(f32, dnnl::algorithm::convolution_direct);
    s->bf16 = is_bf16(pd->src_desc());
    s->reference = is_reference(*pd);
    s->scratchpad = pd->scratchpad_desc();
    s->src.init(view_desc(x), pd->src_desc(), true);
    s->dst.init(view_desc(y), pd->dst_desc(), false, s->sum_input1);
    s->weights = reorder_once(w_user, w.data<float>(), pd->weights_desc());
    s->primitive = dnnl::convolution_forward(*pd);
    s->padding_nan = padding_nan_outputs(x, w, y, stride, padding, dilation);
    return s;
}

std::unique_ptr<ConvState> prepare_conv2d(const PrepareCall& call) { return build_conv2d(call, Fusion{}); }

/// y = bias broadcast over [N, O, OH, OW] (0 without bias): a convolution over no input channels.
void fill_with_bias(const ConvState& s, const ForwardCall& call) {
    const Tensor y = call.output();
    float* out = y.data<float>();
    const float* bias = s.has_bias ? call.param(1).data<float>() : nullptr;
    const int64_t* ys = y.view->strides;  // nchw, or nhwc inside a compiled group
    for (int64_t n = 0; n < y.dim(0); ++n)
        for (int64_t o = 0; o < y.dim(1); ++o)
            for (int64_t h = 0; h < y.dim(2); ++h)
                for (int64_t w = 0; w < y.dim(3); ++w)
                    out[n * ys[0] + o * ys[1] + h * ys[2] + w * ys[3]] = bias ? bias[o] : 0.0f;
}

void conv2d(const ForwardCall& call) {
    const auto& s = state_of<ConvState>(call, "onednn.conv2d");
    if (s.empty) return;
    if (s.no_input_channels) return fill_with_bias(s, call);
    std::unordered_map<int, memory> extra{{DNNL_ARG_WEIGHTS, s.weights}};
    if (s.has_bias) extra.emplace(DNNL_ARG_BIAS, wrap(s.bias_md, call.param(1).data<float>()));
    run_staged(s, s.primitive, s.src, s.dst, call.input(0).data<float>(), call.output().data<float>(),
               std::move(extra), s.sum_input1 ? call.input(1).data<float>() : nullptr);
    if (s.padding_nan.empty()) return;
    const Tensor y = call.output();
    float* out = y.data<float>();
    const int64_t* ys = y.view->strides;  // nchw, or nhwc inside a compiled group
    for (int64_t n = 0; n < y.dim(0); ++n)
        for (const auto& [o, oy, ox] : s.padding_nan)
            out[n * ys[0] + o * ys[1] + oy * ys[2] + ox * ys[3]] = std::numeric_limits<float>::quiet_NaN();
}

// ---- conv2d backward ------------------------------------------------------------------------

/// A conv2d backward call's geometry (attributes and shapes as the forward's).
struct ConvGeometry {
    std::array<int64_t, 2> stride{}, padding{}, dilation{};
    int64_t groups = 1;
    int64_t in_h = 0, in_w = 0, kh = 0, kw = 0;
    int64_t channels_per_group = 0;  // C / groups: the weight's dim 1
};

/// Checks a conv2d backward call's shapes as the reference capsule does: x [N, C, H, W], weight
/// [O, C/groups, kh, kw], bias [O] when the `bias` attribute holds, and dy exactly F.conv2d's
/// output [N, O, OH, OW] with OH = (H + 2·pad - ((kh - 1)·dilation + 1)) / stride + 1 (floor).
/// Raises INVALID_ARGUMENT naming what disagrees.
ConvGeometry check_conv2d_backward(const BackwardCall& call) {
    const char* name = "onednn.conv2d";
    const Tensor x = call.input(0), w = call.param(0), dy = call.grad_output();
    plugin::require(x.rank() == 4 && w.rank() == 4 && dy.rank() == 4,
                    "onednn.conv2d: expects x [N, C, H, W], weight [O, C/groups, kh, kw] and dy [N, O, OH, OW]");
    const auto attrs = call.attrs();
    ConvGeometry g;
    g.stride = pair_attr(attrs, "stride", 1, name);
    g.padding = pair_attr(attrs, "padding", 0, name);
    g.dilation = pair_attr(attrs, "dilation", 1, name);
    g.groups = attrs.get_int("groups", 1);
    g.in_h = x.dim(2);
    g.in_w = x.dim(3);
    g.kh = w.dim(2);
    g.kw = w.dim(3);
    g.channels_per_group = w.dim(1);
    const int64_t c = x.dim(1), o = w.dim(0);
    plugin::require(o >= 1 && attrs.get_int("out_channels", o) == o, [&] {
        return std::string(name) + ": attribute 'out_channels' must be >= 1 and match weight " + shape_string(w.shape());
    });
    plugin::require(g.groups >= 1 && c % g.groups == 0 && o % g.groups == 0 && w.dim(1) * g.groups == c, [&] {
        return std::string(name) + ": weight " + shape_string(w.shape()) + " with groups " + std::to_string(g.groups) +
               " does not match input " + shape_string(x.shape());
    });
    const bool has_bias = attrs.get_bool("bias", true);
    plugin::require(call.num_params() == (has_bias ? 2u : 1u),
                    "onednn.conv2d: expects parameters weight and (with bias) bias");
    if (has_bias) {
        const int64_t bias_shape[] = {o};
        require_shape(name, call.param(1), bias_shape, "bias");
    }
    std::array<int64_t, 4> out{x.dim(0), o, 0, 0};
    for (int i = 0; i < 2; ++i) {
        plugin::require(g.stride[i] >= 1 && g.dilation[i] >= 1 && g.padding[i] >= 0,
                        "onednn.conv2d: stride and dilation must be >= 1, padding >= 0");
        const int64_t span = (w.dim(2 + i) - 1) * g.dilation[i] + 1, room = x.dim(2 + i) + 2 * g.padding[i] - span;
        plugin::require(room >= 0, [&] {
            return std::string(name) + ": the padded input " + shape_string(x.shape()) + " is smaller than the kernel";
        });
        out[std::size_t(2 + i)] = room / g.stride[i] + 1;
    }
    require_shape(name, dy, out, "grad output");
    return g;
}

/// oneDNN's convolution_backward_data and convolution_backward_weights for one node's shapes. The
/// primitives compute in the layouts oneDNN prefers (`any`: blocked, for its jit kernels; on the
/// host's plain nchw / oihw it picks a gemm-based implementation, 5x slower on LeNet's
/// convolutions); operands are reordered from and to the host's plain layouts through per-thread
/// buffers where the layouts differ.
struct ConvBackward {
    bool has_bias = false;
    /// The host's plain layouts: x, dx and dy nchw, weight oihw (goihw with groups), bias x.
    memory::desc x_md, w_md, b_md, y_md;
    /// What the primitives take: backward data (dy, weight, dx) and backward weights (x, dy, dw).
    memory::desc data_dy, data_w, data_dx, weights_x, weights_dy, weights_dw;
    /// User-managed scratchpads (per-thread buffers, as the forward's): oneDNN's own would
    /// allocate, and page-fault, on every call.
    memory::desc data_scratchpad, weights_scratchpad;
    dnnl::convolution_backward_data data;
    dnnl::convolution_backward_weights weights;
};

/// The backward primitives of the conv2d node `call` describes, of geometry `g`
/// (check_conv2d_backward).
std::shared_ptr<const ConvBackward> build_conv2d_backward(const BackwardCall& call, const ConvGeometry& g) {
    const Tensor x = call.input(0), w = call.param(0), dy = call.grad_output();
    const auto& stride = g.stride;
    const auto& padding = g.padding;
    const auto& dilation = g.dilation;
    const int64_t groups = g.groups;
    auto b = std::make_shared<ConvBackward>();
    b->has_bias = call.attrs().get_bool("bias", true);
    const int64_t c = x.dim(1), o = w.dim(0);
    using tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    const memory::dims w_dims = groups == 1 ? memory::dims{o, c, w.dim(2), w.dim(3)}
                                            : memory::dims{groups, o / groups, c / groups, w.dim(2), w.dim(3)};
    b->x_md = memory::desc(dims_of(x), f32, tag::nchw);
    b->y_md = memory::desc(dims_of(dy), f32, tag::nchw);
    b->w_md = memory::desc(w_dims, f32, groups == 1 ? tag::oihw : tag::goihw);
    b->b_md = memory::desc({o}, f32, tag::x);
    const memory::desc x_any(dims_of(x), f32, tag::any), y_any(dims_of(dy), f32, tag::any), w_any(w_dims, f32, tag::any);
    const memory::dims strides{stride[0], stride[1]}, dil{dilation[0] - 1, dilation[1] - 1},
        pad{padding[0], padding[1]};
    memory::dims pad_r(2);
    for (int i = 0; i < 2; ++i)
        pad_r[i] = right_padding(x.dim(2 + i), dy.dim(2 + i), w.dim(2 + i), stride[i], padding[i], dilation[i]);
    const auto algo = dnnl::algorithm::convolution_direct;
    const auto forward = b->has_bias
                             ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any,
                                                               w_any, b->b_md, y_any, strides, dil, pad, pad_r)
                             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any,
                                                               w_any, y_any, strides, dil, pad, pad_r);
    const dnnl::convolution_forward::primitive_desc hint(forward, cpu_engine());
    const dnnl::convolution_backward_data::primitive_desc data(
        dnnl::convolution_backward_data::desc(algo, x_any, w_any, y_any, strides, dil, pad, pad_r), scratchpad_attr(),
        cpu_engine(), hint);
    b->data_dy = data.diff_dst_desc();
    b->data_w = data.weights_desc();
    b->data_dx = data.diff_src_desc();
    b->data_scratchpad = data.scratchpad_desc();
    b->data = dnnl::convolution_backward_data(data);
    const auto weights = b->has_bias ? dnnl::convolution_backward_weights::desc(algo, x_any, w_any, b->b_md, y_any,
                                                                                 strides, dil, pad, pad_r)
                                     : dnnl::convolution_backward_weights::desc(algo, x_any, w_any, y_any, strides,
                                                                                 dil, pad, pad_r);
    const dnnl::convolution_backward_weights::primitive_desc weights_pd(weights, scratchpad_attr(), cpu_engine(), hint);
    b->weights_x = weights_pd.src_desc();
    b->weights_dy = weights_pd.diff_dst_desc();
    b->weights_dw = weights_pd.diff_weights_desc();
    b->weights_scratchpad = weights_pd.scratchpad_desc();
    b->weights = dnnl::convolution_backward_weights(weights_pd);
    return b;
}

/// A plain host buffer seen in layout `wanted`: the buffer itself when the layouts agree, else a
/// per-thread buffer (`slot`, see scratch) that the plain values are reordered into when `read`.
memory staged(const memory::desc& plain, const memory::desc& wanted, const void* data, int slot, bool read) {
    memory host = wrap(plain, data);
    if (wanted == plain) return host;
    memory inner = wrap(wanted, scratch(slot, wanted.get_size()));
    if (read) dnnl::reorder(host, inner).execute(thread_stream(), host, inner);
    return inner;
}

/// Reorders `inner` into the plain host buffer `data` unless it is that buffer.
void unstage(memory inner, const memory::desc& plain, void* data) {
    if (inner.get_data_handle() == data) return;
    memory host = wrap(plain, data);
    dnnl::reorder(inner, host).execute(thread_stream(), inner, host);
}

/// F.conv2d's dweight multiplies every tap by its input, the zero padding included, so a NaN or
/// infinite dy whose window reaches the padding makes the taps that land there NaN (0 · inf);
/// oneDNN skips padded taps. Sets those weight gradients [O, C/groups, kh, kw] to NaN (nothing
/// to do for a finite dy, the usual case).
void padding_nan_weight_grads(const ConvGeometry& g, const Tensor& dy, float* dw) {
    const float* d = dy.data<float>();
    bool finite = true;
    for (int64_t i = 0, n = dy.numel(); i < n && finite; ++i) finite = std::isfinite(d[i]);
    if (finite) return;
    const int64_t batch = dy.dim(0), o = dy.dim(1), oh = dy.dim(2), ow = dy.dim(3);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t c = 0; c < o; ++c)
            for (int64_t y = 0; y < oh; ++y)
                for (int64_t x = 0; x < ow; ++x) {
                    if (std::isfinite(d[((n * o + c) * oh + y) * ow + x])) continue;
                    for (int64_t i = 0; i < g.kh; ++i)
                        for (int64_t j = 0; j < g.kw; ++j) {
                            const int64_t iy = y * g.stride[0] - g.padding[0] + i * g.dilation[0];
                            const int64_t ix = x * g.stride[1] - g.padding[1] + j * g.dilation[1];
                            if (iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w) continue;
                            // Every input channel of the group reads the padding at this tap.
                            for (int64_t k = 0; k < g.channels_per_group; ++k)
                                dw[((c * g.channels_per_group + k) * g.kh + i) * g.kw + j] = nan;
                        }
                }
}

/// The vector-Jacobian product of F.conv2d (PyTorch's ConvolutionBackward): dx = the transposed
/// convolution of dy with the weights (oneDNN convolution_backward_data), dweight = the
/// correlation of x with dy and dbias = Σ_{n, oy, ox} dy (convolution_backward_weights), on
/// x [N, C, H, W], weight [O, C/groups, kh, kw], dy [N, O, OH, OW]. The primitives are built on a
/// node's first backward call and kept in its state. Gradients the host does not want are not
/// computed (dweight is computed into scratch when only dbias is wanted).
void conv2d_backward(const BackwardCall& call) {
    const char* name = "onednn.conv2d";
    const Tensor x = call.input(0), w = call.param(0), dy = call.grad_output();
    require_plain_float32(name, x, "input x");
    require_plain_float32(name, w, "weight");
    require_plain_float32(name, dy, "grad output");
    const auto geometry = check_conv2d_backward(call);
    const bool has_bias = call.attrs().get_bool("bias", true);
    float* dx = grad_buffer(name, call.grad_input(0), x, "grad input");
    float* dw = grad_buffer(name, call.grad_param(0), w, "grad weight");
    float* db = has_bias ? grad_buffer(name, call.grad_param(1), call.param(1), "grad bias") : nullptr;
    if (!dx && !dw && !db) return;
    if (x.numel() == 0 || dy.numel() == 0 || w.numel() == 0) {
        // Nothing multiplies: dx and dweight are zero; dbias is still Σ dy (it does not read x).
        if (dx) std::fill(dx, dx + x.numel(), 0.0f);
        if (dw) std::fill(dw, dw + w.numel(), 0.0f);
        if (db) {
            const int64_t o = w.dim(0), plane = dy.dim(2) * dy.dim(3);
            const float* g = dy.data<float>();
            for (int64_t c = 0; c < o; ++c) {
                double sum = 0;
                for (int64_t n = 0; n < dy.dim(0); ++n)
                    for (int64_t i = 0; i < plane; ++i) sum += g[(n * o + c) * plane + i];
                db[c] = static_cast<float>(sum);
            }
        }
        return;
    }
    const ConvState* state = backward_state<ConvState>(call);
    if (state) {
        // The cached primitives are for the prepared shapes (the forward refuses others too).
        plugin::require(state->input_shapes.size() == 1 &&
                            std::equal(x.shape().begin(), x.shape().end(), state->input_shapes[0].begin(),
                                       state->input_shapes[0].end()) &&
                            std::equal(dy.shape().begin(), dy.shape().end(), state->output_shape.begin(),
                                       state->output_shape.end()),
                        [&] {
                            return std::string(name) + ": backward called with input " + shape_string(x.shape()) +
                                   " and grad output " + shape_string(dy.shape()) +
                                   ", not the shapes the node was prepared for";
                        });
    }
    std::shared_ptr<const ConvBackward> b;
    if (state) {
        const std::lock_guard lock(state->backward_mutex);
        if (!state->backward) {
            const ThreadScope scope(backward_threads(state));
            state->backward = build_conv2d_backward(call, geometry);
        }
        b = state->backward;
    } else {
        b = build_conv2d_backward(call, geometry);
    }
    const ThreadScope scope(backward_threads(state));
    auto& stream = thread_stream();
    auto with_scratchpad = [](std::unordered_map<int, memory> args, const memory::desc& pad) {
        if (pad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, wrap(pad, scratch(2, pad.get_size())));
        return args;
    };
    // Slots 3 to 6 of the per-thread buffers (0 and 1 are the forward's, 2 the scratchpad).
    if (dx) {
        const memory g = staged(b->y_md, b->data_dy, dy.data<float>(), 3, true);
        const memory wt = staged(b->w_md, b->data_w, w.data<float>(), 4, true);
        const memory out = staged(b->x_md, b->data_dx, dx, 5, false);
        b->data.execute(stream, with_scratchpad({{DNNL_ARG_DIFF_DST, g}, {DNNL_ARG_WEIGHTS, wt}, {DNNL_ARG_DIFF_SRC, out}},
                                                b->data_scratchpad));
        unstage(out, b->x_md, dx);
    }
    if (dw || db) {
        std::vector<float> dw_scratch(dw ? 0 : static_cast<std::size_t>(w.numel()));
        std::vector<float> db_scratch(db || !b->has_bias ? 0 : static_cast<std::size_t>(w.dim(0)));
        float* dw_host = dw ? dw : dw_scratch.data();
        const memory src = staged(b->x_md, b->weights_x, x.data<float>(), 3, true);
        const memory g = staged(b->y_md, b->weights_dy, dy.data<float>(), 4, true);
        const memory out = staged(b->w_md, b->weights_dw, dw_host, 5, false);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, g}, {DNNL_ARG_DIFF_WEIGHTS, out}};
        if (b->has_bias) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(b->b_md, db ? db : db_scratch.data()));
        b->weights.execute(stream, with_scratchpad(std::move(args), b->weights_scratchpad));
        unstage(out, b->w_md, dw_host);
        stream.wait();
        if (dw) padding_nan_weight_grads(geometry, dy, dw);
    }
    stream.wait();
}

// ---- pools ----------------------------------------------------------------------------------

/// torch.nn.functional.max_pool2d / avg_pool2d(x, kernel_size, stride, padding, ceil_mode,
/// count_include_pad) on x [N, C, H, W] (nchw). Max pooling never picks padding (PyTorch pads with
/// -inf; oneDNN's pooling_max skips padded positions). oneDNN's pooling_max also skips NaN where
/// torch.max_pool2d returns it, and gives the lowest finite float for a window of -inf alone:
/// when x holds a NaN or -inf, a second pass corrects those outputs (fix_max_pool). With
/// ceil_mode, the last window may run
/// past the explicit padding: oneDNN gets the larger right padding that makes its output size
/// equal the host's. Average pooling with count_include_pad divides by the whole window in
/// oneDNN but, in PyTorch, only by the part within the explicitly padded input; and oneDNN sums a
/// window in float32, where a sum of large finite values (4 x 3e38) overflows to inf although
/// their mean is finite (the reference capsule sums in double). A second pass (fix_avg_pool)
/// computes those outputs, the windows past the padding and every non-finite one, as the
/// reference capsule does.
template <bool Max, bool Padded>
constexpr const char* pool_name() {
    return Max ? (Padded ? "onednn.max_pool2d_pad" : "onednn.max_pool2d")
               : (Padded ? "onednn.avg_pool2d_pad" : "onednn.avg_pool2d");
}

struct PoolState : NodeState {
    using NodeState::NodeState;
    bool empty = false;
    bool divides_by_padded_window = false;  // avg with count_include_pad and explicit padding
    std::array<int64_t, 2> kernel{}, stride{}, padding{};
    Staged src, dst;
    dnnl::pooling_forward primitive;
};

template <bool Max, bool Padded>
std::unique_ptr<PoolState> prepare_pool(const PrepareCall& call) {
    const char* name = pool_name<Max, Padded>();
    auto s = std::make_unique<PoolState>(name, call);
    const Tensor x = call.input(0), y = call.output();
    require_float32(name, x, "input x");
    plugin::require(x.rank() == 4 && y.rank() == 4, [&] {
        return std::string(name) + ": expects x [N, C, H, W], got " + shape_string(x.shape());
    });
    const auto attrs = call.attrs();
    const auto kernel = pair_attr(attrs, "kernel_size", 1, name);
    plugin::require(attrs.has("kernel_size"), [&] { return std::string(name) + ": kernel_size is required"; });
    const auto stride = attrs.has("stride") ? pair_attr(attrs, "stride", 1, name) : kernel;
    const auto padding = Padded ? pair_attr(attrs, "padding", 0, name) : std::array<int64_t, 2>{0, 0};
    const bool include_pad = Padded ? attrs.get_bool("count_include_pad", true) : true;
    s->kernel = kernel;
    s->stride = stride;
    s->padding = padding;
    s->empty = y.numel() == 0;
    s->limit_threads(double(y.numel()) * double(kernel[0] * kernel[1]));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->empty) return s;
    // Without explicit padding, a window past the input (ceil_mode) averages its valid part in
    // PyTorch, which is oneDNN's exclude-padding average.
    const bool any_pad = padding[0] > 0 || padding[1] > 0;
    s->divides_by_padded_window = !Max && include_pad && any_pad;
    memory::dims pad_r(2);
    for (int i = 0; i < 2; ++i)
        pad_r[i] = right_padding(x.dim(2 + i), y.dim(2 + i), kernel[i], stride[i], padding[i]);
    const auto algo = Max ? dnnl::algorithm::pooling_max
                          : (include_pad && any_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                    : dnnl::algorithm::pooling_avg_exclude_padding);
    // In x's layout (nchw, or nhwc inside a compiled group) on both sides: oneDNN's optimised
    // pools need one layout for source and destination (mixed ones take its slow reference
    // implementation); Staged reorders y when its view's layout differs.
    const memory::desc x_md = view_desc(x);
    const memory::desc y_md(dims_of(y), memory::data_type::f32,
                            is_channels_last(x) ? memory::format_tag::nhwc : memory::format_tag::nchw);
    dnnl::pooling_forward::primitive_desc pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, algo, x_md, y_md,
                                    {stride[0], stride[1]}, {kernel[0], kernel[1]},
                                    {padding[0], padding[1]}, pad_r),
        scratchpad_attr(), cpu_engine());
    s->scratchpad = pd.scratchpad_desc();
    s->src.init(x_md, pd.src_desc(), true);
    s->dst.init(view_desc(y), pd.dst_desc(), false);
    s->primitive = dnnl::pooling_forward(pd);
    return s;
}

/// Calls fix(out, h0, w0, any) for every output of a pool, where (h0, w0) is its window's first
/// position (negative inside the padding) and any(pred) says whether pred holds for a value of the
/// window (padding excluded), visiting them in row-major order until one does. Indexes x and y
/// through their views' strides (nchw, or nhwc inside a compiled group).
template <typename Fix>
void for_each_window(const PoolState& s, const Tensor& x, const Tensor& y, Fix&& fix) {
    const float* in = x.data<float>();
    float* out = y.data<float>();
    const int64_t* xs = x.view->strides;
    const int64_t* ys = y.view->strides;
    const int64_t H = x.dim(2), W = x.dim(3);
    for (int64_t n = 0; n < y.dim(0); ++n)
        for (int64_t c = 0; c < y.dim(1); ++c)
            for (int64_t oh = 0; oh < y.dim(2); ++oh)
                for (int64_t ow = 0; ow < y.dim(3); ++ow) {
                    const int64_t h0 = oh * s.stride[0] - s.padding[0], w0 = ow * s.stride[1] - s.padding[1];
                    auto any = [&](auto&& pred) {
                        for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + s.kernel[0], H); ++h)
                            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + s.kernel[1], W); ++w)
                                if (pred(in[n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3]])) return true;
                        return false;
                    };
                    fix(out[n * ys[0] + c * ys[1] + oh * ys[2] + ow * ys[3]], h0, w0, any);
                }
}

/// Sets each output of a max pool whose window holds a NaN to NaN (see pool_name's comment), and
/// each whose window holds -inf only to -inf: oneDNN's pooling_max starts from the lowest finite
/// float, so it gives -3.4e38 there where torch.max_pool2d gives -inf.
void fix_max_pool(const PoolState& s, const Tensor& x, const Tensor& y) {
    const float* in = x.data<float>();
    bool nan = false, negative_infinity = false;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        nan |= in[i] != in[i];
        negative_infinity |= in[i] == -std::numeric_limits<float>::infinity();
    }
    if (nan)
        for_each_window(s, x, y, [](float& out, int64_t, int64_t, auto&& any) {
            if (any([](float v) { return v != v; })) out = std::numeric_limits<float>::quiet_NaN();
        });
    if (negative_infinity)
        for_each_window(s, x, y, [](float& out, int64_t, int64_t, auto&& any) {
            if (out == std::numeric_limits<float>::lowest() &&
                !any([](float v) { return v != -std::numeric_limits<float>::infinity(); }))
                out = -std::numeric_limits<float>::infinity();
        });
}

/// Recomputes, as the reference capsule does (a double sum of the window's taps inside the input
/// over PyTorch's divisor), each average-pool output that oneDNN computes differently: a window
/// of count_include_pad that runs past the explicit padding (ceil_mode), which oneDNN divides by
/// the whole kernel, and any non-finite output, which may be a float32 sum's overflow (see
/// pool_name's comment). A window holding an infinity or NaN stays non-finite.
void fix_avg_pool(const PoolState& s, const Tensor& x, const Tensor& y) {
    const int64_t H = x.dim(2), W = x.dim(3);
    for_each_window(s, x, y, [&](float& dst, int64_t h0, int64_t w0, auto&& any) {
        const int64_t h1 = std::min(h0 + s.kernel[0], H + s.padding[0]);
        const int64_t w1 = std::min(w0 + s.kernel[1], W + s.padding[1]);
        const bool past_padding = s.divides_by_padded_window && (h1 - h0 < s.kernel[0] || w1 - w0 < s.kernel[1]);
        if (std::isfinite(dst) && !past_padding) return;
        double sum = 0;
        int64_t taps = 0;
        any([&](float v) {
            sum += double(v);
            ++taps;
            return false;  // visit every tap
        });
        const int64_t divisor = s.divides_by_padded_window ? (h1 - h0) * (w1 - w0) : taps;
        if (divisor > 0) dst = static_cast<float>(sum / double(divisor));
    });
}

/// A pool; with `FiniteInput`, for an input known to hold no NaN (see finite_input_forward).
template <bool Max, bool Padded, bool FiniteInput = false>
void pool(const ForwardCall& call) {
    const auto& s = state_of<PoolState>(call, pool_name<Max, Padded>());
    if (s.empty) return;
    run_staged(s, s.primitive, s.src, s.dst, call.input(0).data<float>(), call.output().data<float>(),
               {});
    if constexpr (Max && !FiniteInput) fix_max_pool(s, call.input(0), call.output());
    if constexpr (!Max) fix_avg_pool(s, call.input(0), call.output());
}

/// The vector-Jacobian product of the 2-D pools, as PyTorch's CPU kernels
/// (max_pool2d_with_indices_backward, avg_pool2d_backward): a max pool routes each dy to its
/// window's first maximum in row-major order (a NaN counts as the maximum, the window's last NaN
/// winning, as in the forward), an average pool spreads dy / divisor over the window's taps inside
/// the input, where the divisor counts the explicit padding with count_include_pad (windows past
/// the padding, ceil_mode, are clamped to it). Windows follow dy's shape; x, dx [N, C, H, W].
template <bool Max, bool Padded>
void pool_backward(const BackwardCall& call) {
    const char* name = pool_name<Max, Padded>();
    const Tensor x = call.input(0), dy = call.grad_output();
    require_plain_float32(name, x, "input x");
    require_plain_float32(name, dy, "grad output");
    plugin::require(x.rank() == 4, [&] {
        return std::string(name) + ": expects x [N, C, H, W], got " + shape_string(x.shape());
    });
    float* dx = grad_buffer(name, call.grad_input(0), x, "grad input");
    if (!dx) return;
    const auto attrs = call.attrs();
    plugin::require(attrs.has("kernel_size"), [&] { return std::string(name) + ": kernel_size is required"; });
    const auto kernel = pair_attr(attrs, "kernel_size", 1, name);
    const auto stride = attrs.has("stride") ? pair_attr(attrs, "stride", 1, name) : kernel;
    const auto padding = Padded ? pair_attr(attrs, "padding", 0, name) : std::array<int64_t, 2>{0, 0};
    const bool include_pad = Padded ? attrs.get_bool("count_include_pad", true) : true;
    const bool ceil_mode = Padded && attrs.get_bool("ceil_mode", false);
    // dy must be the pool's output, by PyTorch's rule (the reference capsule's): floor or ceil of
    // (in + 2·pad - kernel) / stride + 1, a ceil-mode window starting past the input and its left
    // padding dropped; padding at most half the kernel.
    std::array<int64_t, 4> out{x.dim(0), x.dim(1), 0, 0};
    for (int i = 0; i < 2; ++i) {
        plugin::require(kernel[i] >= 1 && stride[i] >= 1 && padding[i] >= 0 && padding[i] <= kernel[i] / 2, [&] {
            return std::string(name) + ": kernel and stride must be >= 1 and padding at most half the kernel size";
        });
        const int64_t in = x.dim(2 + i), span = in + 2 * padding[i] - kernel[i];
        plugin::require(span >= 0, [&] {
            return std::string(name) + ": input " + shape_string(x.shape()) + " is smaller than the kernel";
        });
        int64_t o = span / stride[i] + (ceil_mode && span % stride[i] != 0 ? 1 : 0) + 1;
        if (ceil_mode && (o - 1) * stride[i] >= in + padding[i]) --o;
        out[std::size_t(2 + i)] = o;
    }
    require_shape(name, dy, out, "grad output");
    const int64_t H = x.dim(2), W = x.dim(3), OH = dy.dim(2), OW = dy.dim(3);
    const int64_t planes = x.dim(0) * x.dim(1);
    const float* X = x.data<float>();
    const float* G = dy.data<float>();
    std::fill(dx, dx + x.numel(), 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
        const float* plane = X + p * H * W;
        float* dplane = dx + p * H * W;
        for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
                const int64_t ys = oy * stride[0] - padding[0], xs = ox * stride[1] - padding[1];
                const int64_t ye = std::min(ys + kernel[0], H + padding[0]), xe = std::min(xs + kernel[1], W + padding[1]);
                const int64_t y0 = std::max<int64_t>(ys, 0), x0 = std::max<int64_t>(xs, 0);
                const int64_t y1 = std::min(ye, H), x1 = std::min(xe, W);
                if (y0 >= y1 || x0 >= x1) continue;
                const float g = G[(p * OH + oy) * OW + ox];
                if constexpr (Max) {
                    int64_t best_i = y0 * W + x0;
                    float best = -std::numeric_limits<float>::infinity();
                    for (int64_t yy = y0; yy < y1; ++yy)
                        for (int64_t xx = x0; xx < x1; ++xx) {
                            const float v = plane[yy * W + xx];
                            if (v > best || v != v) {
                                best = v;
                                best_i = yy * W + xx;
                            }
                        }
                    dplane[best_i] += g;
                } else {
                    const int64_t divisor = include_pad ? (ye - ys) * (xe - xs) : (y1 - y0) * (x1 - x0);
                    const float share = static_cast<float>(double(g) / double(divisor));
                    for (int64_t yy = y0; yy < y1; ++yy)
                        for (int64_t xx = x0; xx < x1; ++xx) dplane[yy * W + xx] += share;
                }
            }
    }
}

}  // namespace

void* prepare_conv2d_fused(const PrepareCall& call, const Fusion& fusion) {
    std::unique_ptr<ConvState> s;
    try {
        s = build_conv2d(call, fusion);
    } catch (const dnnl::error&) {
        if (fusion.add_input1) return nullptr;  // no convolution with this sum post-op here
        throw;
    }
    // oneDNN's reference convolution is far slower than computing the sum apart.
    if (s->empty || s->no_input_channels || (s->sum_input1 && s->reference)) return nullptr;
    return s.release();
}

capsule_forward_fn pool_finite_input_forward(const capsule_kernel* kernel) {
    // By name: the plugin's table holds copies of these entries.
    const std::string_view name = kernel->capsule_name;
    if (name == pool_name<true, false>()) return forward_entry<pool<true, false, true>>;
    if (name == pool_name<true, true>()) return forward_entry<pool<true, true, true>>;
    return nullptr;
}

bool computes_winograd(const capsule_kernel* kernel, const void* state) {
    return state && std::string_view(kernel->capsule_name) == conv2d_kernel.capsule_name &&
           static_cast<const ConvState*>(state)->winograd;
}

bool computes_in_bf16(const capsule_kernel* kernel, const void* state) {
    if (!state) return false;
    if (std::string_view(kernel->capsule_name) == conv2d_kernel.capsule_name)
        return static_cast<const ConvState*>(state)->bf16;
    return linear_computes_in_bf16(kernel, state);
}

const capsule_kernel conv2d_kernel = plugin::kernel(
    "onednn.conv2d", forward_entry<conv2d>, backward_entry<conv2d_backward>, prepare_entry<ConvState, prepare_conv2d>,
    release_entry<ConvState>, kFloat32Only);
const capsule_kernel max_pool2d_kernel = plugin::kernel(
    "onednn.max_pool2d", forward_entry<pool<true, false>>, backward_entry<pool_backward<true, false>>,
    prepare_entry<PoolState, prepare_pool<true, false>>, release_entry<PoolState>, kFloat32Only);
const capsule_kernel max_pool2d_pad_kernel = plugin::kernel(
    "onednn.max_pool2d_pad", forward_entry<pool<true, true>>, backward_entry<pool_backward<true, true>>,
    prepare_entry<PoolState, prepare_pool<true, true>>, release_entry<PoolState>, kFloat32Only);
const capsule_kernel avg_pool2d_kernel = plugin::kernel(
    "onednn.avg_pool2d", forward_entry<pool<false, false>>, backward_entry<pool_backward<false, false>>,
    prepare_entry<PoolState, prepare_pool<false, false>>, release_entry<PoolState>, kFloat32Only);
const capsule_kernel avg_pool2d_pad_kernel = plugin::kernel(
    "onednn.avg_pool2d_pad", forward_entry<pool<false, true>>, backward_entry<pool_backward<false, true>>,
    prepare_entry<PoolState, prepare_pool<false, true>>, release_entry<PoolState>, kFloat32Only);

}  // namespace capsule::onednn
