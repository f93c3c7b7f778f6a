// ABI glue for the pointwise and softmax capsules: argument guards, attributes, launches.
// Semantics per op: docs/ops.md (PyTorch semantics); attribute conventions as in
// core/src/shape_inference/ (scale: factor; clamp: min and/or max; gelu: approximate
// none|tanh; softplus: beta > 0, threshold; softmax/log_softmax: axis, default -1).
#include <cmath>
#include <optional>

#include "capsule/shape_math.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

void require_arity(size_t got, size_t want, const char* what) {
    plugin::require(got == want, std::string("expected ") + std::to_string(want) + " " + what +
                                     ", got " + std::to_string(got));
}

// ---------------------------------------------------------------------------------------------
// Unary ops

/// The kernel op and its parameters from the node's attributes.
std::pair<Unary, UnaryParams> unary_op(Unary op, const plugin::Attributes& attrs) {
    UnaryParams p;
    switch (op) {
        case Unary::scale:
            plugin::require(attrs.has("factor"), "scale needs attribute 'factor'");
            p.a = attrs.get_float("factor", 1.0);
            break;
        case Unary::clamp:
            p.has_a = attrs.has("min");
            p.has_b = attrs.has("max");
            plugin::require(p.has_a || p.has_b, "clamp needs attribute 'min' or 'max' (or both)");
            p.a = attrs.get_float("min", 0.0);
            p.b = attrs.get_float("max", 0.0);
            break;
        case Unary::softplus:
            p.a = attrs.get_float("beta", 1.0);
            p.b = attrs.get_float("threshold", 20.0);
            plugin::require(p.a > 0 && std::isfinite(p.a), "softplus attribute 'beta' must be > 0");
            break;
        case Unary::gelu: {
            const auto approximate = attrs.get_string("approximate", "none");
            plugin::require(approximate == "none" || approximate == "tanh",
                            "gelu attribute 'approximate' must be 'none' or 'tanh', got '" +
                                approximate + "'");
            if (approximate == "tanh") op = Unary::gelu_tanh;
            break;
        }
        default: break;
    }
    return {op, p};
}

template <Unary kOp>
void unary_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "input");
    const Tensor x = call.input(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    require_shape(y, dims_of(x), "output");
    const auto [op, params] = unary_op(kOp, call.attrs());
    check_cuda(launch_unary_forward(op, dtype, x.view->data, y.view->data, x.numel(), params,
                                    stream_of(call.args->stream)),
               "launching the forward kernel");
}

template <Unary kOp>
void unary_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    const Tensor x = call.input(0), gy = call.grad_output(0);
    const auto dtype = require_unary_grads(x, gy, gx, dims_of(x));
    const auto [op, params] = unary_op(kOp, call.attrs());
    check_cuda(launch_unary_backward(op, dtype, x.view->data, gy.view->data, gx.view->data,
                                     x.numel(), params, stream_of(call.args->stream)),
               "launching the backward kernel");
}

// ---------------------------------------------------------------------------------------------
// Broadcasting binary ops

template <Binary kOp>
void binary_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "inputs");
    const Tensor a = call.input(0), b = call.input(1), out = call.output(0);
    require_cuda_tensor(a, "input 0");
    require_cuda_tensor(b, "input 1");
    require_cuda_tensor(out, "output");
    const auto dtype = common_float_dtype({{a, "input 0"}, {b, "input 1"}, {out, "output"}});
    const Dims shape = broadcast_shapes(dims_of(a), dims_of(b));
    require_shape(out, shape, "output");
    check_cuda(launch_binary_forward(kOp, dtype, a.view->data, b.view->data, out.view->data,
                                     broadcast_layout(dims_of(a), dims_of(b), shape),
                                     stream_of(call.args->stream)),
               "launching the forward kernel");
}

template <Binary kOp>
void binary_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 2, "inputs");
    const Tensor a = call.input(0), b = call.input(1), gout = call.grad_output(0);
    const Tensor grads[2] = {call.grad_input(0), call.grad_input(1)};
    if (!grads[0].present() && !grads[1].present()) return;
    require_cuda_tensor(a, "input 0");
    require_cuda_tensor(b, "input 1");
    require_cuda_tensor(gout, "grad output");
    const auto dtype = common_float_dtype({{a, "input 0"}, {b, "input 1"}, {gout, "grad output"}});
    const Dims shape = broadcast_shapes(dims_of(a), dims_of(b));
    require_shape(gout, shape, "grad output");
    const BroadcastLayout layout = broadcast_layout(dims_of(a), dims_of(b), shape);
    const cudaStream_t stream = stream_of(call.args->stream);
    for (int which = 0; which < 2; ++which) {
        const Tensor& g = grads[which];
        if (!g.present()) continue;
        const std::string name = "grad input " + std::to_string(which);
        require_cuda_tensor(g, name);
        common_float_dtype({{gout, "grad output"}, {g, name.c_str()}});
        const Dims operand = dims_of(which == 0 ? a : b);
        require_shape(g, operand, name);
        if (element_count(operand) == element_count(shape)) {  // not broadcast: write in place
            check_cuda(launch_binary_backward(kOp, which, dtype, a.view->data, b.view->data,
                                              gout.view->data, g.view->data, layout, stream),
                       "launching the backward kernel");
            continue;
        }
        Scratch full(static_cast<size_t>(element_count(shape)) * dtype_bytes(dtype), stream);
        check_cuda(launch_binary_backward(kOp, which, dtype, a.view->data, b.view->data,
                                          gout.view->data, full.get(), layout, stream),
                   "launching the backward kernel");
        check_cuda(launch_reduce_sum(dtype, full.get(), g.view->data, reduce_layout(shape, operand),
                                     stream),
                   "launching the broadcast-gradient reduction");
    }
}

// ---------------------------------------------------------------------------------------------
// Softmax and log-softmax over one axis

struct AxisView {
    int64_t outer = 1, axis = 1, inner = 1;
};

AxisView axis_view(const Tensor& x, const plugin::Attributes& attrs) {
    const Dims dims = dims_of(x);
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t given = attrs.get_int("axis", -1);
    const int64_t effective_rank = rank == 0 ? 1 : rank;  // a scalar is one row of one element
    const auto normalized = try_normalize_axis(given, effective_rank);
    plugin::require(normalized.has_value(),
                    "attribute 'axis' = " + std::to_string(given) + " is out of range for rank " +
                        std::to_string(rank));
    const int64_t axis = *normalized;
    AxisView v;
    for (int64_t d = 0; d < rank; ++d) {
        if (d < axis) v.outer *= dims[d];
        else if (d == axis) v.axis = dims[d];
        else v.inner *= dims[d];
    }
    return v;
}

template <bool kLog>
void softmax_forward_impl(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "input");
    const Tensor x = call.input(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    require_shape(y, dims_of(x), "output");
    const AxisView v = axis_view(x, call.attrs());
    check_cuda(launch_softmax_forward(kLog, dtype, x.view->data, y.view->data, v.outer, v.axis,
                                      v.inner, stream_of(call.args->stream)),
               "launching the forward kernel");
}

template <bool kLog>
void softmax_backward_impl(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    const Tensor x = call.input(0), gy = call.grad_output(0);
    const auto dtype = require_unary_grads(x, gy, gx, dims_of(x));
    const AxisView v = axis_view(x, call.attrs());
    const cudaStream_t stream = stream_of(call.args->stream);
    // The VJP needs the forward output; recompute it when the host does not pass it.
    const void* y = nullptr;
    std::optional<Scratch> recomputed;
    if (call.args->num_outputs > 0 && call.output(0).present()) {
        const Tensor out = call.output(0);
        require_cuda_tensor(out, "output");
        common_float_dtype({{x, "input 0"}, {out, "output"}});
        require_shape(out, dims_of(x), "output");
        y = out.view->data;
    } else {
        recomputed.emplace(static_cast<size_t>(x.numel()) * dtype_bytes(dtype), stream);
        check_cuda(launch_softmax_forward(kLog, dtype, x.view->data, recomputed->get(), v.outer,
                                          v.axis, v.inner, stream),
                   "launching the forward kernel (recomputing the output)");
        y = recomputed->get();
    }
    check_cuda(launch_softmax_backward(kLog, dtype, y, gy.view->data, gx.view->data, v.outer,
                                       v.axis, v.inner, stream),
               "launching the backward kernel");
}

}  // namespace

#define CAPSULE_CUDA_UNARY(op)                                                         \
    void op##_forward(const ForwardCall& call) { unary_forward<Unary::op>(call); }    \
    void op##_backward(const BackwardCall& call) { unary_backward<Unary::op>(call); }
#define CAPSULE_CUDA_BINARY(op)                                                        \
    void op##_forward(const ForwardCall& call) { binary_forward<Binary::op>(call); }  \
    void op##_backward(const BackwardCall& call) { binary_backward<Binary::op>(call); }

CAPSULE_CUDA_BINARY(add)
CAPSULE_CUDA_BINARY(sub)
CAPSULE_CUDA_BINARY(mul)
CAPSULE_CUDA_BINARY(max)
CAPSULE_CUDA_BINARY(min)
CAPSULE_CUDA_UNARY(scale)
CAPSULE_CUDA_UNARY(abs)
CAPSULE_CUDA_UNARY(sqrt)
CAPSULE_CUDA_UNARY(clamp)
CAPSULE_CUDA_UNARY(relu)
CAPSULE_CUDA_UNARY(gelu)
CAPSULE_CUDA_UNARY(sigmoid)
CAPSULE_CUDA_UNARY(tanh)
CAPSULE_CUDA_UNARY(softplus)
CAPSULE_CUDA_UNARY(exp)
CAPSULE_CUDA_UNARY(log)
CAPSULE_CUDA_UNARY(sin)
CAPSULE_CUDA_UNARY(cos)
CAPSULE_CUDA_UNARY(inv)

#undef CAPSULE_CUDA_UNARY
#undef CAPSULE_CUDA_BINARY

void softmax_forward(const ForwardCall& call) { softmax_forward_impl<false>(call); }
void softmax_backward(const BackwardCall& call) { softmax_backward_impl<false>(call); }
void log_softmax_forward(const ForwardCall& call) { softmax_forward_impl<true>(call); }
void log_softmax_backward(const BackwardCall& call) { softmax_backward_impl<true>(call); }

}  // namespace capsule::cuda
