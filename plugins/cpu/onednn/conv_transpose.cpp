// onednn.conv_transpose2d: torch.nn.functional.conv_transpose2d(x, weight, bias, stride, padding,
// output_padding, groups, dilation) on x [N, C_in, H, W] with weight [C_in, C_out/groups, kh, kw]
// (PyTorch's layout), giving y [N, C_out, OH, OW] with OH = (H - 1)·stride - 2·padding +
// dilation·(kh - 1) + output_padding + 1.
//
// A transposed convolution is the backward-data pass of the convolution that maps y's shape to
// x's with the same weights (as oihw: C_in output channels of C_out/groups inputs), so the forward
// runs oneDNN's convolution_backward_data, its backward runs that convolution forward (dx) and
// its backward_weights (dweight). Its right padding is padding - output_padding; where that is
// negative (output_padding > padding, possible when output_padding < dilation), the last
// output_padding - padding rows (columns) of y lie beyond every window: the convolution covers
// the first OH - (output_padding - padding) rows through y's own strides and those rows get the
// bias alone.
#include <algorithm>

#include "kernels.hpp"

namespace capsule::onednn {

namespace {

constexpr const char* kName = "onednn.conv_transpose2d";

/// The geometry of a conv_transpose2d call, checked as the reference capsule checks it (shapes,
/// divisibility by groups, output_padding smaller than stride or dilation, y's shape); raises
/// INVALID_ARGUMENT naming what disagrees.
struct TransposedGeometry {
    int64_t groups = 1, in_c = 0, out_c = 0;
    bool bias = true;
    bool empty = false;                // no product: x or y empty, or no row of y reached
    std::array<int64_t, 2> covered{};  // rows, columns of y the windows reach
    memory::dims strides, dilates, pad_l, pad_r;  // the convolution y -> x, as oneDNN takes them
    memory::desc x_md, y_md, w_md, w_user;
};

template <typename Call>
TransposedGeometry transposed_geometry(const Call& call, const Tensor& y) {
    const auto attrs = call.attrs();
    TransposedGeometry g;
    g.bias = attrs.get_bool("bias", true);
    plugin::require(call.num_params() == (g.bias ? 2u : 1u),
                    "onednn.conv_transpose2d: expects parameters weight and (with bias) bias");
    const Tensor x = call.input(0), w = call.param(0);
    require_plain_float32(kName, x, "input x");
    require_plain_float32(kName, w, "weight");
    plugin::require(x.rank() == 4 && w.rank() == 4 && y.rank() == 4,
                    "onednn.conv_transpose2d: expects x [N, C_in, H, W], weight [C_in, C_out/groups, kh, kw] "
                    "and y [N, C_out, OH, OW]");
    const auto stride = pair_attr(attrs, "stride", 1, kName), padding = pair_attr(attrs, "padding", 0, kName);
    const auto dilation = pair_attr(attrs, "dilation", 1, kName);
    const auto output_padding = pair_attr(attrs, "output_padding", 0, kName);
    g.groups = attrs.get_int("groups", 1);
    g.in_c = x.dim(1);
    g.out_c = y.dim(1);
    const std::array<int64_t, 2> kernel{w.dim(2), w.dim(3)};
    plugin::require(g.groups >= 1 && g.in_c % g.groups == 0 && g.out_c % g.groups == 0 && w.dim(0) == g.in_c &&
                        w.dim(1) * g.groups == g.out_c && attrs.get_int("out_channels", g.out_c) == g.out_c,
                    [&] {
                        return std::string(kName) + ": weight " + shape_string(w.shape()) + " with groups " +
                               std::to_string(g.groups) + " does not match x " + shape_string(x.shape()) +
                               " and y " + shape_string(y.shape());
                    });
    if (g.bias) {
        require_plain_float32(kName, call.param(1), "bias");
        const int64_t bias_shape[] = {g.out_c};
        require_shape(kName, call.param(1), bias_shape, "bias");
    }
    for (int i = 0; i < 2; ++i) {
        const int64_t s = stride[i], p = padding[i], d = dilation[i], op = output_padding[i];
        plugin::require(s >= 1 && d >= 1 && p >= 0 && op >= 0 && (op < s || op < d), [&] {
            return std::string(kName) + ": stride and dilation must be >= 1, padding >= 0 and output_padding "
                                        "smaller than stride or dilation";
        });
        const int64_t span = (kernel[i] - 1) * d + 1;
        const int64_t out = (x.dim(2 + i) - 1) * s - 2 * p + span + op;
        plugin::require(out == y.dim(2 + i), [&] {
            return std::string(kName) + ": y " + shape_string(y.shape()) + " is not the output of x " +
                   shape_string(x.shape()) + " (" + (i == 0 ? "height " : "width ") + std::to_string(out) + ")";
        });
        g.strides.push_back(s);
        g.dilates.push_back(d - 1);
        g.pad_l.push_back(p);
        g.pad_r.push_back(std::max<int64_t>(0, p - op));
        g.covered[i] = out - std::max<int64_t>(0, op - p);
    }
    g.empty = x.numel() == 0 || y.numel() == 0 || g.covered[0] <= 0 || g.covered[1] <= 0;
    using tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    const int64_t n = x.dim(0), oh = y.dim(2), ow = y.dim(3);
    g.x_md = memory::desc(dims_of(x), f32, tag::nchw);
    // y's first covered rows and columns, through y's own strides.
    g.y_md = memory::desc({n, g.out_c, g.covered[0], g.covered[1]}, f32,
                          memory::dims{g.out_c * oh * ow, oh * ow, ow, 1});
    const memory::dims w_dims = g.groups == 1
                                    ? memory::dims{g.in_c, g.out_c, kernel[0], kernel[1]}
                                    : memory::dims{g.groups, g.in_c / g.groups, g.out_c / g.groups, kernel[0], kernel[1]};
    g.w_user = memory::desc(w_dims, f32, g.groups == 1 ? tag::oihw : tag::goihw);
    g.w_md = memory::desc(w_dims, f32, tag::any);
    return g;
}

/// The forward descriptor of the convolution y -> x (its src is y, its dst x).
dnnl::convolution_forward::desc convolution_of(const TransposedGeometry& g, const memory::desc& weights,
                                               dnnl::prop_kind kind) {
    return dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, g.y_md, weights, g.x_md,
                                           g.strides, g.dilates, g.pad_l, g.pad_r);
}

struct TransposedState : NodeState {
    using NodeState::NodeState;
    TransposedGeometry geometry;
    memory weights;
    dnnl::convolution_backward_data primitive;
};

std::unique_ptr<TransposedState> prepare_conv_transpose2d(const PrepareCall& call) {
    auto s = std::make_unique<TransposedState>(kName, call);
    const Tensor x = call.input(0), w = call.param(0), y = call.output();
    s->geometry = transposed_geometry(call, y);
    const TransposedGeometry& g = s->geometry;
    s->limit_threads(2.0 * double(x.numel()) * double(w.numel() / std::max<int64_t>(g.in_c, 1)));
    const ThreadScope scope(s->threads);
    if (g.empty) return s;
    const auto hint = dnnl::convolution_forward::primitive_desc(
        convolution_of(g, g.w_md, dnnl::prop_kind::forward_training), cpu_engine());
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, g.y_md, g.w_md, g.x_md, g.strides,
                                              g.dilates, g.pad_l, g.pad_r),
        scratchpad_attr(), cpu_engine(), hint);
    s->scratchpad = pd.scratchpad_desc();
    s->weights = reorder_once(g.w_user, w.data<float>(), pd.weights_desc());
    s->primitive = dnnl::convolution_backward_data(pd);
    return s;
}

/// y += bias per output channel (over every position, the uncovered rows included).
void add_bias(const Tensor& y, const float* bias) {
    float* out = y.data<float>();
    const int64_t plane = y.dim(2) * y.dim(3);
    for (int64_t n = 0; n < y.dim(0); ++n)
        for (int64_t c = 0; c < y.dim(1); ++c) {
            float* p = out + (n * y.dim(1) + c) * plane;
            for (int64_t i = 0; i < plane; ++i) p[i] += bias[c];
        }
}

void conv_transpose2d(const ForwardCall& call) {
    const auto& s = state_of<TransposedState>(call, kName);
    const Tensor y = call.output();
    const TransposedGeometry& g = s.geometry;
    float* out = y.data<float>();
    // Rows and columns no window reaches are the bias alone; an empty x leaves all of y so.
    if (g.empty || g.covered[0] < y.dim(2) || g.covered[1] < y.dim(3)) std::fill(out, out + y.numel(), 0.0f);
    if (!g.empty)
        execute(s, s.primitive,
                {{DNNL_ARG_DIFF_DST, wrap(g.x_md, call.input(0).data<float>())},
                 {DNNL_ARG_WEIGHTS, s.weights},
                 {DNNL_ARG_DIFF_SRC, wrap(g.y_md, out)}});
    if (g.bias) add_bias(y, call.param(1).data<float>());
}

/// The vector-Jacobian product (PyTorch's ConvolutionBackward with transposed = true): dx is the
/// convolution y -> x applied to dy, dweight its backward_weights with src dy and diff_dst x, and
/// dbias = Σ dy over N, OH and OW.
void conv_transpose2d_backward(const BackwardCall& call) {
    const Tensor x = call.input(0), w = call.param(0), dy = call.grad_output();
    require_plain_float32(kName, dy, "grad output");
    const TransposedGeometry g = transposed_geometry(call, dy);
    float* dx = grad_buffer(kName, call.grad_input(0), x, "grad input");
    float* dw = grad_buffer(kName, call.grad_param(0), w, "grad weight");
    float* db = g.bias ? grad_buffer(kName, call.grad_param(1), call.param(1), "grad bias") : nullptr;
    if (db) {
        const int64_t plane = dy.dim(2) * dy.dim(3);
        for (int64_t c = 0; c < g.out_c; ++c) {
            double sum = 0;
            for (int64_t n = 0; n < dy.dim(0); ++n)
                for (int64_t i = 0; i < plane; ++i) sum += dy.data<float>()[(n * g.out_c + c) * plane + i];
            db[c] = static_cast<float>(sum);
        }
    }
    if (g.empty) {  // no product: zero gradients
        if (dx) std::fill(dx, dx + x.numel(), 0.0f);
        if (dw) std::fill(dw, dw + w.numel(), 0.0f);
        return;
    }
    const ThreadScope scope(backward_threads(backward_state<TransposedState>(call)));
    dnnl::stream stream(cpu_engine());
    if (dx) {
        const dnnl::convolution_forward::primitive_desc pd(
            convolution_of(g, g.w_user, dnnl::prop_kind::forward_inference), cpu_engine());
        dnnl::convolution_forward(pd).execute(stream, {{DNNL_ARG_SRC, memory(g.y_md, cpu_engine(), dy.data<float>())},
                                                       {DNNL_ARG_WEIGHTS, memory(g.w_user, cpu_engine(), w.data<float>())},
                                                       {DNNL_ARG_DST, memory(g.x_md, cpu_engine(), dx)}});
    }
    if (dw) {
        const auto hint = dnnl::convolution_forward::primitive_desc(
            convolution_of(g, g.w_user, dnnl::prop_kind::forward_training), cpu_engine());
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, g.y_md, g.w_user, g.x_md,
                                                     g.strides, g.dilates, g.pad_l, g.pad_r),
            cpu_engine(), hint);
        dnnl::convolution_backward_weights(pd).execute(
            stream, {{DNNL_ARG_SRC, memory(g.y_md, cpu_engine(), dy.data<float>())},
                     {DNNL_ARG_DIFF_DST, memory(g.x_md, cpu_engine(), x.data<float>())},
                     {DNNL_ARG_DIFF_WEIGHTS, memory(g.w_user, cpu_engine(), dw)}});
    }
    stream.wait();
}

}  // namespace

const capsule_kernel conv_transpose2d_kernel = plugin::kernel(
    kName, forward_entry<conv_transpose2d>, backward_entry<conv_transpose2d_backward>,
    prepare_entry<TransposedState, prepare_conv_transpose2d>, release_entry<TransposedState>, kFloat32Only);

}  // namespace capsule::onednn
