// ABI glue for the data-movement and reduction capsules: reshape and flatten (a device copy:
// row-major order is unchanged), concat (one strided 2-D copy per input), reduce_sum and
// reduce_mean (the reduction kernel, then a scale). Semantics per op: docs/ops.md
// (torch.reshape, torch.flatten, torch.cat, torch.sum / torch.mean with dim and keepdim); float32
// and float64 like every kernel of this plugin.
#include <string>

#include "capsule/shape_math.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

void require_one_input(const ForwardCall& call, const char* op) {
    plugin::require(call.num_inputs() == 1, std::string(op) + " expects 1 input, got " + std::to_string(call.num_inputs()));
}

/// `bytes` from `src` to `dst` on the call's stream (nothing when they are the same buffer).
void copy_device(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what) {
    if (bytes == 0 || dst == src) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), what);
}

// ---- reshape, flatten: the same elements in the same order -------------------------------------

void same_elements_forward(const ForwardCall& call, const char* op) {
    require_one_input(call, op);
    const Tensor x = call.input(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    plugin::require(x.numel() == y.numel(), std::string(op) + " output " + dims_text(dims_of(y)) +
                                                " does not hold the " + std::to_string(x.numel()) +
                                                " elements of " + dims_text(dims_of(x)));
    copy_device(y.view->data, x.view->data, size_t(x.numel()) * dtype_bytes(dtype), stream_of(call.args->stream), op);
}

void same_elements_backward(const BackwardCall& call, const char* op) {
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    const Tensor gy = call.grad_output(0);
    require_cuda_tensor(gy, "grad output");
    require_cuda_tensor(gx, "grad input 0");
    const auto dtype = common_float_dtype({{gy, "grad output"}, {gx, "grad input 0"}});
    require_shape(gx, dims_of(call.input(0)), "grad input 0");
    plugin::require(gx.numel() == gy.numel(), std::string(op) + " grad output has " + std::to_string(gy.numel()) +
                                                  " elements, the input " + std::to_string(gx.numel()));
    copy_device(gx.view->data, gy.view->data, size_t(gx.numel()) * dtype_bytes(dtype), stream_of(call.args->stream), op);
}

// ---- concat ------------------------------------------------------------------------------------

/// The inputs and output of a concat as [outer, axis extent, inner] blocks.
struct ConcatView {
    int64_t outer = 1, inner = 1, out_axis = 0;
    std::vector<int64_t> axis;  // each input's extent along the axis
};

template <typename Call>
ConcatView concat_view(const Call& call, const Dims& out) {
    plugin::require(call.num_inputs() >= 1, "concat expects at least 1 input");
    const Dims first = dims_of(call.input(0));
    const int64_t rank = static_cast<int64_t>(first.size());
    const int64_t given = call.attrs().get_int("axis", 0);
    plugin::require(call.attrs().has("axis"), "concat needs attribute 'axis'");
    const auto axis = try_normalize_axis(given, rank);
    plugin::require(rank >= 1 && axis.has_value(),
                    "attribute 'axis' = " + std::to_string(given) + " is out of range for rank " + std::to_string(rank));
    const auto a = static_cast<size_t>(*axis);
    ConcatView v;
    for (size_t d = 0; d < a; ++d) v.outer *= first[d];
    for (size_t d = a + 1; d < first.size(); ++d) v.inner *= first[d];
    Dims want = first;
    want[a] = 0;
    for (size_t i = 0; i < call.num_inputs(); ++i) {
        Dims s = dims_of(call.input(i));
        plugin::require(s.size() == first.size(), "concat input " + std::to_string(i) + " " + dims_text(s) +
                                                      " has another rank than input 0 " + dims_text(first));
        const int64_t extent = s[a];
        s[a] = first[a];
        plugin::require(s == first, "concat input " + std::to_string(i) + " " + dims_text(dims_of(call.input(i))) +
                                        " differs from input 0 " + dims_text(first) + " off the axis");
        v.axis.push_back(extent);
        want[a] += extent;
    }
    plugin::require(out == want, "output has shape " + dims_text(out) + ", expected " + dims_text(want));
    v.out_axis = want[a];
    return v;
}

/// One input's block inside the output: `outer` rows of `width` bytes, `pitch` bytes apart.
void copy_block(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, int64_t outer,
                cudaStream_t stream) {
    if (width == 0 || outer == 0) return;
    check_cuda(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, size_t(outer), cudaMemcpyDeviceToDevice, stream),
               "concat copy");
}

// ---- reduce_sum, reduce_mean -------------------------------------------------------------------

/// The reduction's shapes: x, the result with the reduced axes kept as 1, and the element count
/// of each group.
struct Reduction {
    Dims x, kept, out;
    int64_t count = 1;
};

Reduction reduction_of(const Tensor& x, const plugin::Attributes& attrs, const char* op) {
    Reduction r;
    r.x = dims_of(x);
    const int64_t rank = static_cast<int64_t>(r.x.size());
    std::vector<bool> reduced(r.x.size(), !attrs.has("axes"));
    if (attrs.has("axes")) {
        const auto axes = attrs.get_ints("axes", {});
        plugin::require(!axes.empty(), std::string(op) + " attribute 'axes' must not be empty");
        for (int64_t a : axes) {
            const auto n = try_normalize_axis(a, rank);
            plugin::require(n.has_value(), std::string(op) + " axis " + std::to_string(a) +
                                               " is out of range for rank " + std::to_string(rank));
            plugin::require(!reduced[size_t(*n)], std::string(op) + " axis " + std::to_string(a) + " is repeated");
            reduced[size_t(*n)] = true;
        }
    }
    const bool keepdims = attrs.get_bool("keepdims", false);
    for (size_t d = 0; d < r.x.size(); ++d) {
        r.kept.push_back(reduced[d] ? 1 : r.x[d]);
        if (reduced[d]) r.count *= r.x[d];
        if (!reduced[d] || keepdims) r.out.push_back(reduced[d] ? 1 : r.x[d]);
    }
    return r;
}

template <bool Mean>
void reduce_forward(const ForwardCall& call, const char* op) {
    require_one_input(call, op);
    const Tensor x = call.input(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    const Reduction r = reduction_of(x, call.attrs(), op);
    require_shape(y, r.out, "output");
    if (y.numel() == 0) return;
    const cudaStream_t stream = stream_of(call.args->stream);
    check_cuda(launch_reduce_sum(dtype, x.view->data, y.view->data, reduce_layout(r.x, r.kept), stream), op);
    if (Mean) {  // 0 elements: 0 · (1 / 0) = NaN, as torch.mean
        UnaryParams p;
        p.a = 1.0 / double(r.count);
        check_cuda(launch_unary_forward(Unary::scale, dtype, y.view->data, y.view->data, y.numel(), p, stream), op);
    }
}

template <bool Mean>
void reduce_backward(const BackwardCall& call, const char* op) {
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    const Tensor x = call.input(0), gy = call.grad_output(0);
    require_cuda_tensor(gy, "grad output");
    require_cuda_tensor(gx, "grad input 0");
    const auto dtype = common_float_dtype({{gy, "grad output"}, {gx, "grad input 0"}});
    const Reduction r = reduction_of(x, call.attrs(), op);
    require_shape(gy, r.out, "grad output");
    require_shape(gx, r.x, "grad input 0");
    if (gx.numel() == 0) return;
    // gx = gy (its reduced axes as 1, broadcast back over x) · factor.
    const cudaStream_t stream = stream_of(call.args->stream);
    const DeviceScalar factor(dtype, Mean ? 1.0 / double(r.count) : 1.0, stream);
    check_cuda(launch_binary_forward(Binary::mul, dtype, gy.view->data, factor.get(), gx.view->data,
                                     broadcast_layout(r.kept, {1}, r.x), stream),
               op);
}

}  // namespace

void reshape_forward(const ForwardCall& call) { same_elements_forward(call, "reshape"); }
void reshape_backward(const BackwardCall& call) { same_elements_backward(call, "reshape"); }
void flatten_forward(const ForwardCall& call) { same_elements_forward(call, "flatten"); }
void flatten_backward(const BackwardCall& call) { same_elements_backward(call, "flatten"); }

void concat_forward(const ForwardCall& call) {
    const Tensor y = call.output(0);
    require_cuda_tensor(y, "output");
    const ConcatView v = concat_view(call, dims_of(y));
    const size_t width = dtype_bytes(y.dtype()), out_row = size_t(v.out_axis * v.inner) * width;
    const cudaStream_t stream = stream_of(call.args->stream);
    size_t offset = 0;  // bytes into each output row
    for (size_t i = 0; i < call.num_inputs(); ++i) {
        const Tensor x = call.input(i);
        const std::string name = "input " + std::to_string(i);
        require_cuda_tensor(x, name);
        common_float_dtype({{y, "output"}, {x, name.c_str()}});
        const size_t row = size_t(v.axis[i] * v.inner) * width;
        copy_block(static_cast<char*>(y.view->data) + offset, out_row, x.view->data, row, row, v.outer, stream);
        offset += row;
    }
}

void concat_backward(const BackwardCall& call) {
    const Tensor gy = call.grad_output(0);
    require_cuda_tensor(gy, "grad output");
    const ConcatView v = concat_view(call, dims_of(gy));
    const size_t width = dtype_bytes(gy.dtype()), out_row = size_t(v.out_axis * v.inner) * width;
    const cudaStream_t stream = stream_of(call.args->stream);
    size_t offset = 0;
    for (size_t i = 0; i < call.num_inputs(); ++i) {
        const size_t row = size_t(v.axis[i] * v.inner) * width;
        if (const Tensor g = call.grad_input(i); g.present()) {
            const std::string name = "grad input " + std::to_string(i);
            require_cuda_tensor(g, name);
            common_float_dtype({{gy, "grad output"}, {g, name.c_str()}});
            require_shape(g, dims_of(call.input(i)), name);
            copy_block(g.view->data, row, static_cast<const char*>(gy.view->data) + offset, out_row, row, v.outer,
                       stream);
        }
        offset += row;
    }
}

void reduce_sum_forward(const ForwardCall& call) { reduce_forward<false>(call, "reduce_sum"); }
void reduce_sum_backward(const BackwardCall& call) { reduce_backward<false>(call, "reduce_sum"); }
void reduce_mean_forward(const ForwardCall& call) { reduce_forward<true>(call, "reduce_mean"); }
void reduce_mean_backward(const BackwardCall& call) { reduce_backward<true>(call, "reduce_mean"); }

}  // namespace capsule::cuda
