// onednn.reduce_mean.
#include <algorithm>
#include <limits>

#include "capsule/shape_math.hpp"
#include "kernels.hpp"
#include "value_bounds.hpp"

namespace capsule::onednn {

namespace {

/// torch.mean(x, dim=axes, keepdim=keepdims) / ONNX ReduceMean (and GlobalAveragePool, which the
/// importer makes a mean over the spatial axes with keepdims): the mean over `axes` (negative
/// counts from the end; absent: every axis), the reduced axes kept as 1 with `keepdims`, else
/// removed. y is written as y's dims with the reduced axes as 1s, which is y's memory with or
/// without them. Paths:
/// - the spatial axes (2, 3) of a rank-4 x: oneDNN's average pooling over the whole plane, in
///   x's layout (nhwc inside a compiled group; oneDNN 2.6's reduction has only its unoptimised
///   reference implementation for nhwc: 0.28 ms against the pool's few microseconds on
///   ResNet-18's last stage);
/// - other axes: oneDNN's reduction primitive (reduction_mean, a float32 sum divided by the
///   count) where it has an optimised implementation (innermost axes of a row-major x), else
///   the double-accumulating loop below (mean_in_double);
/// - a mean over zero elements is NaN (0 / 0, as torch.mean); over one element, a copy.
///
/// torch.mean accumulates float32 in double on CPU (ATen's acc_type), so a mean whose float32
/// partial sums overflow is still finite there (3e38 from 3e38 and 3e38). Each call measures
/// max|x| (one pass): when count · max|x| may exceed FLT_MAX, or x holds a NaN or an infinity,
/// the mean is summed in double here instead (mean_in_double), which gives torch's value.
struct ReduceMeanState : NodeState {
    using NodeState::NodeState;
    enum class Path { primitive, loop, copy, nan_fill, empty } path = Path::primitive;
    memory::desc src_md, dst_md;
    dnnl::primitive primitive;  // the pool or the reduction
    dnnl::reorder copy;
    int64_t count = 1;  // elements per mean
    /// For mean_in_double: x's dims, x's strides and each dim's stride in y (0 for a reduced
    /// one), in elements.
    std::vector<int64_t> dims, x_strides, y_strides;
};

/// y = the mean of x over the reduced dims, each output's sum accumulated in double (see
/// ReduceMeanState), visiting x in row-major index order; y is `outputs` dense values.
void mean_in_double(const ReduceMeanState& s, const float* x, float* y, int64_t outputs) {
    std::vector<double> sums(static_cast<std::size_t>(outputs), 0.0);
    const std::size_t rank = s.dims.size();
    std::vector<int64_t> index(rank, 0);
    int64_t xo = 0, yo = 0, total = 1;
    for (const auto d : s.dims) total *= d;
    for (int64_t e = 0; e < total; ++e) {
        sums[static_cast<std::size_t>(yo)] += double(x[xo]);
        for (std::size_t d = rank; d-- > 0;) {  // odometer: the next index in row-major order
            xo += s.x_strides[d];
            yo += s.y_strides[d];
            if (++index[d] < s.dims[d]) break;
            xo -= s.x_strides[d] * s.dims[d];
            yo -= s.y_strides[d] * s.dims[d];
            index[d] = 0;
        }
    }
    // y is dense (row-major, or nhwc inside a compiled group): its offsets are 0 .. outputs - 1.
    for (int64_t o = 0; o < outputs; ++o)
        y[o] = static_cast<float>(sums[static_cast<std::size_t>(o)] / double(s.count));
}

std::unique_ptr<ReduceMeanState> prepare_reduce_mean(const PrepareCall& call) {
    const char* name = "onednn.reduce_mean";
    auto s = std::make_unique<ReduceMeanState>(name, call);
    const Tensor x = call.input(0), y = call.output();
    require_float32(name, x, "input x");
    plugin::require(x.rank() <= DNNL_MAX_NDIMS, [&] {
        return std::string(name) + ": input rank " + std::to_string(x.rank()) + " is above oneDNN's " +
               std::to_string(DNNL_MAX_NDIMS);
    });
    // Dims of y with the reduced axes kept as 1 (oneDNN's reduction keeps the rank); a rank-0 x
    // is {1}, its own mean.
    memory::dims kept = dims_of(x);
    std::vector<char> reduced(static_cast<std::size_t>(x.rank()), call.attrs().has("axes") ? 0 : 1);
    for (const int64_t a : x.rank() == 0 ? std::vector<int64_t>{} : call.attrs().get_ints("axes", {})) {
        const auto axis = try_normalize_axis(a, x.rank());
        plugin::require(axis.has_value(), [&] {
            return std::string(name) + ": axis " + std::to_string(a) + " out of range for rank " + std::to_string(x.rank());
        });
        reduced[static_cast<std::size_t>(*axis)] = 1;
    }
    int64_t count = 1, outputs = 1;
    for (std::size_t d = 0; d < reduced.size(); ++d)
        if (reduced[d]) {
            count *= kept[d];
            kept[d] = 1;
        }
    for (const auto k : kept) outputs *= k;
    s->count = count;
    // y: x's dims with the reduced ones kept as 1 (keepdims) or removed.
    std::vector<int64_t> removed;
    for (std::size_t d = 0; d < reduced.size(); ++d)
        if (!reduced[d]) removed.push_back(kept[d]);
    const auto y_shape = y.shape();
    const bool keeps_dims = x.rank() > 0 && std::equal(y_shape.begin(), y_shape.end(), kept.begin(), kept.end());
    const bool drops_dims = std::equal(y_shape.begin(), y_shape.end(), removed.begin(), removed.end());
    plugin::require(outputs == y.numel() && (keeps_dims || drops_dims || x.rank() == 0), [&] {
        return std::string(name) + ": output " + shape_string(y.shape()) + " does not match input " +
               shape_string(x.shape()) + " reduced over the given axes";
    });
    s->limit_threads(double(x.numel()));
    const ThreadScope scope(s->threads);
    if (y.numel() == 0) {
        s->path = ReduceMeanState::Path::empty;
        return s;
    }
    if (count == 0) {
        s->path = ReduceMeanState::Path::nan_fill;
        return s;
    }
    s->src_md = x.rank() == 0 ? plain_desc(kept) : view_desc(x);
    // y's own strides when it keeps the rank (nhwc inside a compiled group), else row-major.
    s->dst_md = keeps_dims ? view_desc(y) : plain_desc(kept);
    // Where each x element's output lies in y (mean_in_double).
    s->dims.assign(kept.size(), 1);
    for (int d = 0; d < x.rank(); ++d) s->dims[std::size_t(d)] = x.dim(d);
    s->x_strides = x.rank() == 0 ? std::vector<int64_t>{1} : strides_of(x);
    const std::vector<int64_t> y_kept = keeps_dims ? strides_of(y) : row_major_strides(kept);
    s->y_strides.assign(kept.size(), 0);
    for (std::size_t d = 0; d < kept.size(); ++d)
        if (!reduced.empty() && !reduced[d]) s->y_strides[d] = y_kept[d];
    if (count == 1) {
        s->path = ReduceMeanState::Path::copy;
        s->copy = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), s->src_md, cpu_engine(), s->dst_md));
        return s;
    }
    if (x.rank() == 4 && !reduced[0] && !reduced[1] && reduced[2] && reduced[3]) {
        // Global average pooling; the [N, C, 1, 1] result has the same memory in either layout.
        s->dst_md = memory::desc(kept, memory::data_type::f32,
                                 is_channels_last(x) ? memory::format_tag::nhwc : memory::format_tag::nchw);
        const dnnl::pooling_forward::primitive_desc pd(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding,
                                        s->src_md, s->dst_md, {1, 1}, {x.dim(2), x.dim(3)}, {0, 0}, {0, 0}),
            scratchpad_attr(), cpu_engine());
        s->scratchpad = pd.scratchpad_desc();
        s->primitive = dnnl::pooling_forward(pd);
        return s;
    }
    const dnnl::reduction::primitive_desc pd(
        dnnl::reduction::desc(dnnl::algorithm::reduction_mean, s->src_md, s->dst_md, 0.0f, 0.0f), scratchpad_attr(),
        cpu_engine());
    if (is_reference(pd)) {
        s->path = ReduceMeanState::Path::loop;
        return s;
    }
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::reduction(pd);
    return s;
}

void reduce_mean(const ForwardCall& call) {
    const auto& s = state_of<ReduceMeanState>(call, "onednn.reduce_mean");
    const Tensor y = call.output();
    switch (s.path) {
        case ReduceMeanState::Path::empty: return;
        case ReduceMeanState::Path::nan_fill: {
            float* out = y.data<float>();
            std::fill(out, out + y.numel(), std::numeric_limits<float>::quiet_NaN());
            return;
        }
        case ReduceMeanState::Path::copy: {
            memory from = wrap(s.src_md, call.input(0).data<float>()), to = wrap(s.dst_md, y.data<float>());
            const ThreadScope scope(s.threads);
            s.copy.execute(thread_stream(), from, to);
            thread_stream().wait();
            return;
        }
        case ReduceMeanState::Path::loop:
            mean_in_double(s, call.input(0).data<float>(), y.data<float>(), y.numel());
            return;
        case ReduceMeanState::Path::primitive:
            // |a float32 partial sum| <= count · max|x| · (1 + count · 2^-24) (rounding).
            if (!(max_magnitude(*call.input(0).view) * double(s.count) * (1.0 + double(s.count) * 0x1p-23) <=
                  std::numeric_limits<float>::max())) {
                mean_in_double(s, call.input(0).data<float>(), y.data<float>(), y.numel());
                return;
            }
            execute(s, s.primitive,
                    {{DNNL_ARG_SRC, wrap(s.src_md, call.input(0).data<float>())}, {DNNL_ARG_DST, wrap(s.dst_md, y.data<float>())}});
            return;
    }
}

/// The vector-Jacobian product of torch.mean(x, dim=axes, keepdim): dx = dy / count, dy read
/// broadcast along the reduced axes (count = the product of their sizes; `axes` as the forward).
void reduce_mean_backward(const BackwardCall& call) {
    const char* name = "onednn.reduce_mean";
    const Tensor x = call.input(0), dy = call.grad_output();
    require_plain_float32(name, x, "input x");
    require_plain_float32(name, dy, "grad output");
    float* dx = grad_buffer(name, call.grad_input(0), x, "grad input");
    if (!dx) return;
    const std::size_t rank = static_cast<std::size_t>(x.rank());
    std::vector<char> reduced(rank, call.attrs().has("axes") ? 0 : 1);
    const auto axes = rank == 0 ? std::vector<int64_t>{} : call.attrs().get_ints("axes", {});
    plugin::require(!call.attrs().has("axes") || rank == 0 || !axes.empty(),
                    "onednn.reduce_mean: attribute 'axes' is empty; omit it to reduce over every axis");
    for (const int64_t a : axes) {
        const auto axis = try_normalize_axis(a, x.rank());
        plugin::require(axis.has_value(), [&] {
            return std::string(name) + ": axis " + std::to_string(a) + " out of range for rank " + std::to_string(x.rank());
        });
        plugin::require(!reduced[static_cast<std::size_t>(*axis)], [&] {
            return std::string(name) + ": attribute 'axes' repeats axis " + std::to_string(*axis);
        });
        reduced[static_cast<std::size_t>(*axis)] = 1;
    }
    // dy's row-major strides over x's dims (0 along the reduced ones, which dy holds once).
    std::vector<int64_t> strides(rank, 0);
    int64_t count = 1, stride = 1;
    for (std::size_t d = rank; d-- > 0;) {
        if (reduced[d]) {
            count *= x.dim(int(d));
            continue;
        }
        strides[d] = stride;
        stride *= x.dim(int(d));
    }
    // dy is x's shape with the reduced axes kept as 1 (keepdims) or removed, as the forward's y.
    std::vector<int64_t> kept, removed;
    for (std::size_t d = 0; d < rank; ++d) {
        kept.push_back(reduced[d] ? 1 : x.dim(int(d)));
        if (!reduced[d]) removed.push_back(x.dim(int(d)));
    }
    const auto g = dy.shape();
    plugin::require(std::equal(g.begin(), g.end(), kept.begin(), kept.end()) ||
                        std::equal(g.begin(), g.end(), removed.begin(), removed.end()) || (rank == 0 && dy.numel() == 1),
                    [&] {
                        return std::string(name) + ": grad output " + shape_string(dy.shape()) + " does not match input " +
                               shape_string(x.shape()) + " reduced over the given axes";
                    });
    const int64_t n = x.numel();
    if (n == 0) return;
    const float* G = dy.data<float>();
    std::vector<int64_t> index(rank, 0);
    for (int64_t i = 0; i < n; ++i) {
        int64_t at = 0;
        for (std::size_t d = 0; d < rank; ++d) at += index[d] * strides[d];
        dx[i] = static_cast<float>(double(G[at]) / double(count));
        for (std::size_t d = rank; d-- > 0;) {
            if (++index[d] < x.dim(int(d))) break;
            index[d] = 0;
        }
    }
}

}  // namespace

const capsule_kernel reduce_mean_kernel =
    plugin::kernel("onednn.reduce_mean", forward_entry<reduce_mean>, backward_entry<reduce_mean_backward>,
                   prepare_entry<ReduceMeanState, prepare_reduce_mean>, release_entry<ReduceMeanState>, kFloat32Only);

}  // namespace capsule::onednn
