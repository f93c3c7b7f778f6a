// ABI glue for the capsules that move elements without arithmetic, on the kernels of
// index_map.cu: permute and its fixed forms (transpose2d, swapAdjacentAtDepth,
// transpose3d_first_to_last / last_to_first / last_two), slice (ONNX Slice), pad (ONNX Pad:
// constant, reflect, edge; negative pads crop) and gather (ONNX Gather). Semantics, attributes and
// error cases as docs/ops.md and the reference capsules (plugins/cpu/reference/shape_ops.cpp,
// slicing.cpp, gather_scatter.cpp); float32 and float64 like every kernel of this plugin; at most
// kMaxLayoutRank (8) dimensions, more are refused as UNSUPPORTED.
// Backward: each output gradient is added onto the input element it was read from (zeros
// elsewhere); the atomic additions make reflect/edge padding and repeated gather indices sum in an
// unspecified order.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "capsule/shape_math.hpp"
#include "cuda_common.hpp"
#include "index_map.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

Dims contiguous(const Dims& shape) {
    Dims strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    return strides;
}

void require_rank_fits(const Dims& shape, const char* op) {
    if (shape.size() > size_t(kMaxLayoutRank))
        throw KernelError(CAPSULE_ERROR_UNSUPPORTED, std::string(op) + ": native_cuda moves elements of tensors of at most " +
                                                         std::to_string(kMaxLayoutRank) + " dimensions, got " +
                                                         dims_text(shape));
}

/// The one float input of `call`, checked.
template <typename Call>
Tensor single_input(const Call& call, const char* op) {
    plugin::require(call.num_inputs() == 1, std::string(op) + " expects 1 input, got " + std::to_string(call.num_inputs()));
    const Tensor x = call.input(0);
    require_cuda_tensor(x, "input 0");
    require_rank_fits(dims_of(x), op);
    return x;
}

/// An index map together with the output shape it fills.
struct Movement {
    IndexMap map;
    Dims out;
};

Movement permutation(const Dims& in, const Dims& perm) {
    Movement m;
    const Dims strides = contiguous(in);
    m.map.rank = int(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) {
        m.out.push_back(in[size_t(perm[d])]);
        m.map.out_shape[d] = in[size_t(perm[d])];
        m.map.in_size[d] = in[size_t(perm[d])];
        m.map.in_stride[d] = strides[size_t(perm[d])];
    }
    return m;
}

/// y = x moved by `m` (checked against the call's output).
void move_forward(const ForwardCall& call, const Tensor& x, const Movement& m) {
    const Tensor y = call.output(0);
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    require_shape(y, m.out, "output");
    check_cuda(launch_index_map_forward(dtype, m.map, x.view->data, y.view->data, y.numel(), stream_of(call.args->stream)),
               "launching the element move");
}

/// gx = zeros, then gx[source(o)] += gy[o].
void move_backward(const BackwardCall& call, const Tensor& x, const Movement& m) {
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    const Tensor gy = call.grad_output(0);
    const auto dtype = require_unary_grads(x, gy, gx, m.out);
    const cudaStream_t stream = stream_of(call.args->stream);
    check_cuda(cudaMemsetAsync(gx.view->data, 0, size_t(gx.numel()) * dtype_bytes(dtype), stream), "clearing the gradient");
    check_cuda(launch_index_map_backward(dtype, m.map, gy.view->data, gx.view->data, gy.numel(), stream),
               "launching the gradient of the element move");
}

// ---- permutations ---------------------------------------------------------------------------------

Dims permute_dims(const plugin::Attributes& attrs, int rank) {
    plugin::require(attrs.has("dims"), "permute: missing attribute 'dims' (list of integers)");
    const auto dims = attrs.get_ints("dims", {});
    plugin::require(dims.size() == size_t(rank), "permute: attribute 'dims' = " + dims_text(Dims(dims.begin(), dims.end())) +
                                                     " has " + std::to_string(dims.size()) + " entries for rank " +
                                                     std::to_string(rank));
    Dims perm;
    std::vector<bool> seen(size_t(rank), false);
    for (const int64_t d : dims) {
        const auto axis = try_normalize_axis(d, rank);
        plugin::require(axis.has_value(), "permute: attribute 'dims' entry " + std::to_string(d) +
                                              " is out of range for rank " + std::to_string(rank));
        plugin::require(!seen[size_t(*axis)], "permute: attribute 'dims' = " +
                                                  dims_text(Dims(dims.begin(), dims.end())) + " repeats axis " +
                                                  std::to_string(*axis));
        seen[size_t(*axis)] = true;
        perm.push_back(*axis);
    }
    return perm;
}

/// The permutation of a fixed-form transpose; `op` names it in messages.
Dims fixed_permutation(const char* op, int rank, const plugin::Attributes& attrs) {
    const std::string name = op;
    const auto of_rank = [&](Dims perm) {
        plugin::require(size_t(rank) == perm.size(), name + " expects a rank-" + std::to_string(perm.size()) +
                                                         " input, got rank " + std::to_string(rank));
        return perm;
    };
    if (name == "permute") return permute_dims(attrs, rank);
    if (name == "transpose2d") return of_rank({1, 0});
    if (name == "transpose3d_first_to_last") return of_rank({1, 2, 0});
    if (name == "transpose3d_last_to_first") return of_rank({2, 0, 1});
    if (name == "transpose3d_last_two") return of_rank({0, 2, 1});
    // swapAdjacentAtDepth
    plugin::require(attrs.has("depth"), "swapAdjacentAtDepth: missing attribute 'depth' (integer)");
    const int64_t depth = attrs.get_int("depth", 0);
    plugin::require(depth >= 0 && depth < int64_t(rank) - 1,
                    "swapAdjacentAtDepth: attribute 'depth' = " + std::to_string(depth) + " is out of range for rank " +
                        std::to_string(rank) + " (needs 0 <= depth <= rank - 2)");
    Dims perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[size_t(depth)], perm[size_t(depth) + 1]);
    return perm;
}

template <typename Call>
Movement permute_movement(const Call& call, const Tensor& x, const char* op) {
    const Dims in = dims_of(x);
    return permutation(in, fixed_permutation(op, int(in.size()), call.attrs()));
}

void permute_forward_as(const ForwardCall& call, const char* op) {
    const Tensor x = single_input(call, op);
    move_forward(call, x, permute_movement(call, x, op));
}

void permute_backward_as(const BackwardCall& call, const char* op) {
    const Tensor x = single_input(call, op);
    move_backward(call, x, permute_movement(call, x, op));
}

// ---- slice (ONNX Slice, with its clamping rules) ----------------------------------------------------

Movement slice_movement(const Tensor& x, const plugin::Attributes& attrs) {
    const Dims in = dims_of(x);
    const int rank = int(in.size());
    plugin::require(rank >= 1, "slice: input has shape " + dims_text(in) + "; expected rank >= 1");
    plugin::require(attrs.has("starts"), "slice: missing attribute 'starts' (list of integers)");
    plugin::require(attrs.has("ends"), "slice: missing attribute 'ends' (list of integers)");
    const auto starts = attrs.get_ints("starts", {}), ends = attrs.get_ints("ends", {});
    const size_t k = starts.size();
    plugin::require(ends.size() == k, "slice: attributes 'starts' and 'ends' have different lengths");
    const bool has_axes = attrs.has("axes"), has_steps = attrs.has("steps");
    const auto axes = attrs.get_ints("axes", {}), steps = attrs.get_ints("steps", {});
    plugin::require(has_axes ? axes.size() == k : k <= size_t(rank),
                    "slice: attribute 'axes' (or, without it, the rank) does not match 'starts'");
    plugin::require(!has_steps || steps.size() == k, "slice: attribute 'steps' does not have one entry per entry of 'starts'");
    Movement m;
    m.out = in;
    m.map.rank = rank;
    const Dims strides = contiguous(in);
    std::vector<bool> seen(size_t(rank), false);
    for (int d = 0; d < rank; ++d) m.map.in_stride[d] = strides[size_t(d)];
    for (size_t i = 0; i < k; ++i) {
        const auto axis = has_axes ? try_normalize_axis(axes[i], rank) : std::optional<int64_t>(int64_t(i));
        plugin::require(axis.has_value(), [&] {  // only ever false for a listed axis
            return "slice: attribute 'axes' entry " + std::to_string(axes[i]) + " is out of range for rank " +
                   std::to_string(rank);
        });
        const auto a = size_t(*axis);
        plugin::require(!seen[a], "slice: attribute 'axes' repeats axis " + std::to_string(a));
        seen[a] = true;
        const int64_t step = has_steps ? steps[i] : 1;
        plugin::require(step != 0, "slice: attribute 'steps' has a 0 step");
        const int64_t n = in[a];
        int64_t start = starts[i], end = ends[i];
        if (start < 0) start += n;  // no overflow: start >= INT64_MIN, n >= 0
        if (end < 0) end += n;
        int64_t diff = 0;
        if (step > 0) {
            start = std::clamp<int64_t>(start, 0, n);
            diff = std::clamp<int64_t>(end, 0, n) - start;
        } else if (n > 0) {
            start = std::clamp<int64_t>(start, 0, n - 1);
            diff = start - std::clamp<int64_t>(end, -1, n - 1);
        }
        const uint64_t magnitude = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
        const int64_t length = diff > 0 ? int64_t((uint64_t(diff) - 1) / magnitude) + 1 : 0;
        m.out[a] = length;
        if (length > 0) m.map.base += start * strides[a];
        m.map.in_stride[a] = length > 1 ? strides[a] * step : 0;  // |step| < n when length > 1: no overflow
    }
    for (int d = 0; d < rank; ++d) m.map.out_shape[d] = m.out[size_t(d)];
    return m;
}

// ---- pad (ONNX Pad) ---------------------------------------------------------------------------------

Movement pad_movement(const Tensor& x, const plugin::Attributes& attrs) {
    const Dims in = dims_of(x);
    const size_t rank = in.size();
    plugin::require(attrs.has("pads"), "pad: missing attribute 'pads' (list of integers)");
    const auto pads = attrs.get_ints("pads", {});
    plugin::require(pads.size() == 2 * rank, "pad: attribute 'pads' has " + std::to_string(pads.size()) + " entries; rank " +
                                                 std::to_string(rank) + " needs " + std::to_string(2 * rank));
    Movement m;
    const std::string mode = attrs.get_string("mode", "constant");
    if (mode == "constant") m.map.mode = PadMode::constant;
    else if (mode == "reflect") m.map.mode = PadMode::reflect;
    else if (mode == "edge") m.map.mode = PadMode::edge;
    else throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, "pad: attribute 'mode' = '" + mode +
                                                               "' must be one of constant, reflect, edge");
    plugin::require(m.map.mode == PadMode::constant || !attrs.has("value"),
                    "pad: attribute 'value' is only valid with mode 'constant'");
    m.map.value = attrs.get_float("value", 0.0);
    plugin::require(!std::isnan(m.map.value), "pad: attribute 'value' must not be NaN");
    const Dims strides = contiguous(in);
    m.map.rank = int(rank);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t n = in[d], begin = pads[d], end = pads[d + rank];
        int64_t out = 0;
        plugin::require(!__builtin_add_overflow(n, begin, &out) && !__builtin_add_overflow(out, end, &out) && out >= 0,
                        "pad: attribute 'pads' crops axis " + std::to_string(d) + " (size " + std::to_string(n) +
                            ") below 0");
        const int64_t grow = std::max(begin, end);
        plugin::require(m.map.mode != PadMode::reflect || grow <= 0 || grow < n,
                        "pad: mode 'reflect' needs pads smaller than the padded axis: axis " + std::to_string(d) +
                            " has size " + std::to_string(n));
        plugin::require(m.map.mode != PadMode::edge || grow <= 0 || n > 0,
                        "pad: mode 'edge' cannot pad axis " + std::to_string(d) + " of size 0");
        m.out.push_back(out);
        m.map.out_shape[d] = out;
        m.map.in_size[d] = n;
        m.map.in_stride[d] = strides[d];
        m.map.begin[d] = begin;  // a negative begin crops: position o reads o − begin
    }
    return m;
}

// ---- gather (ONNX Gather) ---------------------------------------------------------------------------

struct GatherCall {
    GatherShape shape;
    Dims out;
    int64_t axis = 0;
    const int64_t* indices = nullptr;
};

template <typename Call>
GatherCall gather_call(const Call& call) {
    plugin::require(call.num_inputs() == 2, "gather expects 2 inputs (data, indices), got " + std::to_string(call.num_inputs()));
    const Tensor data = call.input(0), idx = call.input(1);
    require_cuda_tensor(data, "gather: data (input 0)");
    require_cuda_layout(idx, "gather: indices (input 1)");
    plugin::require(idx.dtype() == CAPSULE_DTYPE_INT64,
                    std::string("gather: indices (input 1) must be int64, got ") + dtype_name(idx.dtype()));
    const Dims in = dims_of(data);
    plugin::require(!in.empty(), "gather: data (input 0) has shape " + dims_text(in) + "; expected rank >= 1");
    const int64_t given = call.attrs().get_int("axis", 0);
    const auto axis = try_normalize_axis(given, int(in.size()));
    plugin::require(axis.has_value(), "gather: attribute 'axis' = " + std::to_string(given) + " is out of range for rank " +
                                          std::to_string(in.size()));
    GatherCall g;
    g.axis = *axis;
    for (size_t d = 0; d < in.size(); ++d) {
        if (int64_t(d) < g.axis) {
            g.shape.outer *= in[d];
            g.out.push_back(in[d]);
        } else if (int64_t(d) == g.axis) {
            g.shape.axis = in[d];
            for (const int64_t e : dims_of(idx)) g.out.push_back(e);
        } else {
            g.shape.inner *= in[d];
            g.out.push_back(in[d]);
        }
    }
    g.shape.count = idx.numel();
    g.indices = static_cast<const int64_t*>(idx.view->data);
    return g;
}

/// Raises INVALID_DATA when the kernel flagged an index (the stream waits for the flag).
void refuse_bad_index(const GatherCall& g, const int* bad_flag, cudaStream_t stream) {
    int bad = 0;
    check_cuda(cudaMemcpyAsync(&bad, bad_flag, sizeof bad, cudaMemcpyDeviceToHost, stream), "gather");
    check_cuda(cudaStreamSynchronize(stream), "gather");
    if (bad)
        throw KernelError(CAPSULE_ERROR_INVALID_DATA,
                          "gather: an index is out of range for axis " + std::to_string(g.axis) + " of size " +
                              std::to_string(g.shape.axis) +
                              (g.shape.axis > 0 ? " (valid: " + std::to_string(-g.shape.axis) + ".." +
                                                      std::to_string(g.shape.axis - 1) + ")"
                                                : std::string()));
}

}  // namespace

#define CAPSULE_CUDA_PERMUTATION(op)                                                                     \
    void op##_forward(const ForwardCall& call) { permute_forward_as(call, #op); }                        \
    void op##_backward(const BackwardCall& call) { permute_backward_as(call, #op); }
CAPSULE_CUDA_PERMUTATION(permute)
CAPSULE_CUDA_PERMUTATION(transpose2d)
CAPSULE_CUDA_PERMUTATION(swapAdjacentAtDepth)
CAPSULE_CUDA_PERMUTATION(transpose3d_first_to_last)
CAPSULE_CUDA_PERMUTATION(transpose3d_last_to_first)
CAPSULE_CUDA_PERMUTATION(transpose3d_last_two)
#undef CAPSULE_CUDA_PERMUTATION

void slice_forward(const ForwardCall& call) {
    const Tensor x = single_input(call, "slice");
    move_forward(call, x, slice_movement(x, call.attrs()));
}

void slice_backward(const BackwardCall& call) {
    const Tensor x = single_input(call, "slice");
    move_backward(call, x, slice_movement(x, call.attrs()));
}

void pad_forward(const ForwardCall& call) {
    const Tensor x = single_input(call, "pad");
    move_forward(call, x, pad_movement(x, call.attrs()));
}

void pad_backward(const BackwardCall& call) {
    const Tensor x = single_input(call, "pad");
    move_backward(call, x, pad_movement(x, call.attrs()));
}

void gather_forward(const ForwardCall& call) {
    const GatherCall g = gather_call(call);
    const Tensor data = call.input(0), y = call.output(0);
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{data, "gather: data (input 0)"}, {y, "output"}});
    require_shape(y, g.out, "output");
    if (y.numel() == 0) return;
    const cudaStream_t stream = stream_of(call.args->stream);
    Scratch bad(sizeof(int), stream);
    check_cuda(cudaMemsetAsync(bad.get(), 0, sizeof(int), stream), "gather");
    check_cuda(launch_gather_forward(dtype, g.shape, data.view->data, g.indices, y.view->data, static_cast<int*>(bad.get()),
                                     y.numel(), stream),
               "launching gather");
    refuse_bad_index(g, static_cast<const int*>(bad.get()), stream);
}

void gather_backward(const BackwardCall& call) {
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;  // the indices have no gradient
    const GatherCall g = gather_call(call);
    const Tensor data = call.input(0), gy = call.grad_output(0);
    require_cuda_tensor(gy, "grad output");
    require_cuda_tensor(gx, "grad input 0");
    const auto dtype = common_float_dtype({{data, "gather: data (input 0)"}, {gy, "grad output"}, {gx, "grad input 0"}});
    require_shape(gy, g.out, "grad output");
    require_shape(gx, dims_of(data), "grad input 0");
    const cudaStream_t stream = stream_of(call.args->stream);
    check_cuda(cudaMemsetAsync(gx.view->data, 0, size_t(gx.numel()) * dtype_bytes(dtype), stream), "clearing the gradient");
    if (gy.numel() == 0) return;
    Scratch bad(sizeof(int), stream);
    check_cuda(cudaMemsetAsync(bad.get(), 0, sizeof(int), stream), "gather");
    check_cuda(launch_gather_backward(dtype, g.shape, g.indices, gy.view->data, gx.view->data, static_cast<int*>(bad.get()),
                                      gy.numel(), stream),
               "launching gather's gradient");
    refuse_bad_index(g, static_cast<const int*>(bad.get()), stream);
}

}  // namespace capsule::cuda
