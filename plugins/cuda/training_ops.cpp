// ABI glue for the training capsules: cross_entropy (forward and backward) and the optimizer
// steps sgd and adam (forward only: run by capsule::Optimizer, not placed in graphs). Semantics
// and attributes as the reference capsules (docs/ops.md, plugins/cpu/reference/training.cpp):
// cross_entropy is torch.nn.functional.cross_entropy on logits [N, C] and int64 targets [N]
// (reduction mean | sum | none, ignore_index = -100); a target outside [0, C) that is not
// ignore_index is the caller's data error (INVALID_DATA), found by the kernel and read back.
#include <cmath>
#include <string>

#include "cuda_common.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

struct CrossEntropy {
    int64_t n = 0, c = 0, ignore_index = -100;
    enum class Reduction { mean, sum, none } reduction = Reduction::mean;
};

/// The shapes and attributes of a cross_entropy call (input [N, C] float, target [N] int64).
template <typename Call>
CrossEntropy cross_entropy_of(const Call& call, capsule_dtype& dtype) {
    plugin::require(call.num_inputs() == 2, "cross_entropy expects input and target, got " +
                                                std::to_string(call.num_inputs()) + " inputs");
    const Tensor x = call.input(0), t = call.input(1);
    require_cuda_tensor(x, "input 0");
    dtype = x.dtype();
    plugin::require(x.rank() == 2, "cross_entropy input must be [N, C], got " + dims_text(dims_of(x)));
    CrossEntropy ce;
    ce.n = x.dim(0);
    ce.c = x.dim(1);
    const capsule_tensor_view* v = t.view;
    plugin::require(v != nullptr && v->device == CAPSULE_DEVICE_CUDA, "target must be a CUDA tensor");
    plugin::require(v->dtype == CAPSULE_DTYPE_INT64, "target must be int64");
    require_shape(t, {ce.n}, "target");
    plugin::require(v->strides == nullptr || ce.n <= 1 || v->strides[0] == 1, "target is not contiguous");
    plugin::require(v->data != nullptr || ce.n == 0, "target has no device memory");
    plugin::require(ce.c >= 1 || ce.n == 0, "cross_entropy needs at least one class");
    const auto attrs = call.attrs();
    ce.ignore_index = attrs.get_int("ignore_index", -100);
    const auto reduction = attrs.get_string("reduction", "mean");
    if (reduction == "sum") ce.reduction = CrossEntropy::Reduction::sum;
    else if (reduction == "none") ce.reduction = CrossEntropy::Reduction::none;
    else plugin::require(reduction == "mean", "cross_entropy reduction must be mean, sum or none, got '" + reduction + "'");
    return ce;
}

Dims loss_shape(const CrossEntropy& ce) { return ce.reduction == CrossEntropy::Reduction::none ? Dims{ce.n} : Dims{}; }

/// Per-row losses into `loss` and row counts into `counted` (both [N]); raises INVALID_DATA
/// when a target is outside [0, C) (the flag is read back: the stream waits).
void row_losses(const CrossEntropy& ce, capsule_dtype dtype, const Tensor& x, const Tensor& t, void* loss,
                void* counted, cudaStream_t stream) {
    Scratch bad(sizeof(int), stream);
    check_cuda(cudaMemsetAsync(bad.get(), 0, sizeof(int), stream), "cross_entropy");
    check_cuda(launch_cross_entropy_rows(dtype, x.view->data, static_cast<const int64_t*>(t.view->data), loss, counted,
                                         static_cast<int*>(bad.get()), ce.n, ce.c, ce.ignore_index, stream),
               "cross_entropy");
    int flag = 0;
    check_cuda(cudaMemcpyAsync(&flag, bad.get(), sizeof flag, cudaMemcpyDeviceToHost, stream), "cross_entropy");
    check_cuda(cudaStreamSynchronize(stream), "cross_entropy");
    if (flag)
        throw KernelError(CAPSULE_ERROR_INVALID_DATA, "cross_entropy: a target is outside [0, " + std::to_string(ce.c) +
                                                          ") and is not ignore_index " + std::to_string(ce.ignore_index));
}

/// The number of rows whose target is not ignore_index, read back to the host.
double counted_rows(const CrossEntropy& ce, capsule_dtype dtype, const void* counted, cudaStream_t stream) {
    Scratch total(dtype_bytes(dtype), stream);
    check_cuda(launch_reduce_sum(dtype, counted, total.get(), reduce_layout({ce.n}, {}), stream), "cross_entropy");
    double value = 0;
    float single = 0;
    check_cuda(cudaMemcpyAsync(dtype == CAPSULE_DTYPE_FLOAT64 ? static_cast<void*>(&value) : &single, total.get(),
                               dtype_bytes(dtype), cudaMemcpyDeviceToHost, stream),
               "cross_entropy");
    check_cuda(cudaStreamSynchronize(stream), "cross_entropy");
    return dtype == CAPSULE_DTYPE_FLOAT64 ? value : double(single);
}

/// torch.optim's attribute checks, as the reference capsules word them.
double finite_attr(const plugin::Attributes& attrs, const char* op, const char* name, double fallback, double min) {
    const double v = attrs.get_float(name, fallback);
    plugin::require(std::isfinite(v) && v >= min, std::string(op) + ": attribute '" + name + "' = " + std::to_string(v) +
                                                      " must be a finite number >= " + std::to_string(min));
    return v;
}

int64_t step_attr(const plugin::Attributes& attrs, const char* op) {
    plugin::require(attrs.has("step"), std::string(op) + ": attribute 'step' (1-based step number) is missing");
    const int64_t step = attrs.get_int("step", 1);
    plugin::require(step >= 1, std::string(op) + ": attribute 'step' = " + std::to_string(step) + " must be >= 1");
    return step;
}

/// The parameter, its gradient and `states` state buffers in; parameter and states out: all CUDA
/// tensors of the parameter's shape and float dtype.
capsule_dtype check_optimizer_views(const ForwardCall& call, const char* op, std::size_t states) {
    plugin::require(call.num_inputs() == 2 + states, std::string(op) + " expects " + std::to_string(2 + states) +
                                                         " inputs, got " + std::to_string(call.num_inputs()));
    plugin::require(call.args->num_outputs == 1 + states,
                    std::string(op) + " writes " + std::to_string(1 + states) + " outputs (parameter and " +
                        std::to_string(states) + " state buffer(s)), got " + std::to_string(call.args->num_outputs));
    const Tensor p = call.input(0);
    require_cuda_tensor(p, "parameter");
    for (std::size_t i = 0; i < 2 + states + 1 + states; ++i) {
        const bool input = i < 2 + states;
        const Tensor t = input ? call.input(i) : call.output(i - 2 - states);
        const std::string what = (input ? "input " : "output ") + std::to_string(input ? i : i - 2 - states);
        require_cuda_tensor(t, what);
        common_float_dtype({{p, "parameter"}, {t, what.c_str()}});
        require_shape(t, dims_of(p), what);
    }
    return p.dtype();
}

}  // namespace

void cross_entropy_forward(const ForwardCall& call) {
    capsule_dtype dtype{};
    const CrossEntropy ce = cross_entropy_of(call, dtype);
    const Tensor x = call.input(0), t = call.input(1), y = call.output(0);
    require_cuda_tensor(y, "output");
    common_float_dtype({{x, "input 0"}, {y, "output"}});
    require_shape(y, loss_shape(ce), "output");
    const cudaStream_t stream = stream_of(call.args->stream);
    const size_t width = dtype_bytes(dtype);
    const bool none = ce.reduction == CrossEntropy::Reduction::none;
    Scratch losses(none ? 0 : size_t(ce.n) * width, stream), counted(size_t(ce.n) * width, stream);
    void* loss = none ? y.view->data : losses.get();
    if (ce.n > 0) row_losses(ce, dtype, x, t, loss, counted.get(), stream);
    if (none) return;
    check_cuda(launch_reduce_sum(dtype, loss, y.view->data, reduce_layout({ce.n}, {}), stream), "cross_entropy");
    if (ce.reduction == CrossEntropy::Reduction::mean) {  // Σ loss / counted rows (NaN for none)
        UnaryParams p;
        p.a = 1.0 / counted_rows(ce, dtype, counted.get(), stream);
        check_cuda(launch_unary_forward(Unary::scale, dtype, y.view->data, y.view->data, 1, p, stream), "cross_entropy");
    }
}

void cross_entropy_backward(const BackwardCall& call) {
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;  // the target has no gradient
    capsule_dtype dtype{};
    const CrossEntropy ce = cross_entropy_of(call, dtype);
    const Tensor x = call.input(0), t = call.input(1), gy = call.grad_output(0);
    require_cuda_tensor(gy, "grad output");
    require_cuda_tensor(gx, "grad input 0");
    common_float_dtype({{x, "input 0"}, {gy, "grad output"}, {gx, "grad input 0"}});
    require_shape(gy, loss_shape(ce), "grad output");
    require_shape(gx, dims_of(x), "grad input 0");
    if (ce.n == 0) return;
    const cudaStream_t stream = stream_of(call.args->stream);
    double scale = 1;
    if (ce.reduction == CrossEntropy::Reduction::mean) {
        Scratch losses(size_t(ce.n) * dtype_bytes(dtype), stream), counted(size_t(ce.n) * dtype_bytes(dtype), stream);
        row_losses(ce, dtype, x, t, losses.get(), counted.get(), stream);
        scale = 1.0 / counted_rows(ce, dtype, counted.get(), stream);
    }
    check_cuda(launch_cross_entropy_grad(dtype, x.view->data, static_cast<const int64_t*>(t.view->data), gy.view->data,
                                         ce.reduction == CrossEntropy::Reduction::none, scale, gx.view->data, ce.n, ce.c,
                                         ce.ignore_index, stream),
               "cross_entropy backward");
}

void sgd_forward(const ForwardCall& call) {
    const capsule_dtype dtype = check_optimizer_views(call, "sgd", 1);
    const auto attrs = call.attrs();
    plugin::require(attrs.has("lr"), "sgd: attribute 'lr' (learning rate) is missing");
    SgdParams s;
    s.lr = finite_attr(attrs, "sgd", "lr", 0, 0);
    s.momentum = finite_attr(attrs, "sgd", "momentum", 0, 0);
    s.dampening = finite_attr(attrs, "sgd", "dampening", 0, -INFINITY);
    s.weight_decay = finite_attr(attrs, "sgd", "weight_decay", 0, 0);
    s.nesterov = attrs.get_bool("nesterov", false);
    s.first = step_attr(attrs, "sgd") == 1;
    plugin::require(!s.nesterov || (s.momentum > 0 && s.dampening == 0),
                    "sgd: nesterov momentum requires momentum > 0 and dampening = 0 (as torch.optim.SGD)");
    check_cuda(launch_sgd_step(dtype, call.input(0).view->data, call.input(1).view->data, call.input(2).view->data,
                               call.output(0).view->data, call.output(1).view->data, call.input(0).numel(), s,
                               stream_of(call.args->stream)),
               "sgd");
}

void adam_forward(const ForwardCall& call) {
    const capsule_dtype dtype = check_optimizer_views(call, "adam", 2);
    const auto attrs = call.attrs();
    const double lr = finite_attr(attrs, "adam", "lr", 1e-3, 0);
    const auto betas = attrs.get_floats("betas", {0.9, 0.999});
    plugin::require(betas.size() == 2 && betas[0] >= 0 && betas[0] < 1 && betas[1] >= 0 && betas[1] < 1,
                    "adam: attribute 'betas' must be two numbers in [0, 1)");
    AdamParams a;
    a.beta1 = betas[0];
    a.beta2 = betas[1];
    a.eps = finite_attr(attrs, "adam", "eps", 1e-8, 0);
    a.weight_decay = finite_attr(attrs, "adam", "weight_decay", 0, 0);
    const auto step = double(step_attr(attrs, "adam"));
    a.step_size = lr / (1 - std::pow(a.beta1, step));
    a.correction2_sqrt = std::sqrt(1 - std::pow(a.beta2, step));
    check_cuda(launch_adam_step(dtype, call.input(0).view->data, call.input(1).view->data, call.input(2).view->data,
                                call.input(3).view->data, call.output(0).view->data, call.output(1).view->data,
                                call.output(2).view->data, call.input(0).numel(), a, stream_of(call.args->stream)),
               "adam");
}

}  // namespace capsule::cuda
