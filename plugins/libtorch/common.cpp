// Tensor wrapping and kernel adapters of the LibTorch plugin (common.hpp).
#include "common.hpp"

#include <omp.h>

#include <cmath>
#include <limits>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace capsule::libtorch {

at::ScalarType scalar_type(int32_t dtype) {
    switch (dtype) {
        case CAPSULE_DTYPE_FLOAT32: return at::kFloat;
        case CAPSULE_DTYPE_FLOAT64: return at::kDouble;
        case CAPSULE_DTYPE_INT64: return at::kLong;
        case CAPSULE_DTYPE_BOOL: return at::kBool;
        default:
            plugin::fail(CAPSULE_ERROR_UNSUPPORTED,
                         "dtype " + std::to_string(dtype) +
                             " is not supported (float32, float64, int64 and bool are)");
    }
}

at::Tensor wrap(const capsule_tensor_view& view) {
    if (view.device != CAPSULE_DEVICE_CPU)
        plugin::fail(CAPSULE_ERROR_INVALID_ARGUMENT, "a tensor on device " + std::to_string(view.device) +
                                                         " was passed to a CPU capsule");
    const at::IntArrayRef sizes(view.shape, static_cast<std::size_t>(view.rank));
    const at::IntArrayRef strides(view.strides, static_cast<std::size_t>(view.rank));
    const auto options = at::TensorOptions().dtype(scalar_type(view.dtype)).device(at::kCPU);
    // A zero-size tensor may come with a null buffer; from_blob wants a pointer all the same.
    static float empty_storage = 0.0f;
    void* data = view.data ? view.data : &empty_storage;
    return at::from_blob(data, sizes, strides, options);
}

ThreadScope::ThreadScope(const void* state) : previous_(omp_get_max_threads()) {
    const int threads = state ? static_cast<const NodeState*>(state)->threads : 1;
    omp_set_num_threads(threads);
}

ThreadScope::~ThreadScope() { omp_set_num_threads(previous_); }

namespace {

std::string shape_text(at::IntArrayRef shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

void check_result(const char* capsule, const char* what, const at::Tensor& result,
                  const capsule_tensor_view& view) {
    const at::IntArrayRef sizes(view.shape, static_cast<std::size_t>(view.rank));
    if (result.sizes() != sizes)
        plugin::fail(CAPSULE_ERROR_INTERNAL, std::string(capsule) + ": " + what + " has shape " +
                                                 shape_text(result.sizes()) + " where " +
                                                 shape_text(sizes) + " was expected");
    if (result.scalar_type() != scalar_type(view.dtype))
        plugin::fail(CAPSULE_ERROR_INTERNAL, std::string(capsule) + ": " + what + " has dtype " +
                                                 std::string(c10::toString(result.scalar_type())) +
                                                 " where " + c10::toString(scalar_type(view.dtype)) +
                                                 " was expected");
}

void write_result(const char* capsule, const char* what, const at::Tensor& result,
                  const capsule_tensor_view& view) {
    check_result(capsule, what, result, view);
    at::Tensor out = wrap(view);
    if (out.numel() > 0) out.copy_(result);
}

void run_forward(OpFn fn, const char* capsule, const capsule_forward_args& args) {
    if (args.num_outputs != 1)
        plugin::fail(std::string(capsule) + ": expected one output, got " + std::to_string(args.num_outputs));
    const capsule_tensor_view& out = args.outputs[0];
    if (plugin::Tensor{&out}.numel() == 0) return;
    ThreadScope threads(args.state);
    at::NoGradGuard no_grad;
    OpArgs op{{}, {}, Attributes(args.attrs, args.num_attrs), capsule, {out.shape, out.shape + out.rank}};
    for (std::size_t i = 0; i < args.num_inputs; ++i) op.inputs.push_back(wrap(args.inputs[i]));
    for (std::size_t i = 0; i < args.num_params; ++i) op.params.push_back(wrap(args.params[i]));
    write_result(capsule, "the output", fn(op), args.outputs[0]);
}

void run_backward(OpFn fn, const char* capsule, const capsule_backward_args& args) {
    if (args.num_outputs != 1)
        plugin::fail(std::string(capsule) + ": expected one output, got " + std::to_string(args.num_outputs));
    ThreadScope threads(args.state);
    torch::autograd::AutoGradMode grad_mode(true);
    const capsule_tensor_view& out = args.outputs[0];
    OpArgs op{{}, {}, Attributes(args.attrs, args.num_attrs), capsule, {out.shape, out.shape + out.rank}};
    const bool empty_output = plugin::Tensor{&out}.numel() == 0;  // nothing depends on any input: zero gradients
    // Leaves: every float tensor whose gradient the host asks for (a grad view with data).
    std::vector<at::Tensor> leaves;
    std::vector<const capsule_tensor_view*> targets;
    auto add = [&](std::vector<at::Tensor>& into, const capsule_tensor_view& view,
                   const capsule_tensor_view* grad) {
        at::Tensor t = wrap(view);
        if (grad && grad->data && at::isFloatingType(t.scalar_type()) && !empty_output) {
            t = t.detach().requires_grad_(true);
            leaves.push_back(t);
            targets.push_back(grad);
        }
        into.push_back(t);
    };
    for (std::size_t i = 0; i < args.num_inputs; ++i)
        add(op.inputs, args.inputs[i], args.grad_inputs ? &args.grad_inputs[i] : nullptr);
    for (std::size_t i = 0; i < args.num_params; ++i)
        add(op.params, args.params[i], args.grad_params ? &args.grad_params[i] : nullptr);
    // Integer or bool gradients the host asks for are zero (such tensors have no gradient), and
    // every gradient is when the output has no elements.
    auto zero_others = [&](const capsule_tensor_view* grads, std::size_t n) {
        for (std::size_t i = 0; grads && i < n; ++i)
            if (grads[i].data && (empty_output || !at::isFloatingType(scalar_type(grads[i].dtype))))
                wrap(grads[i]).zero_();
    };
    zero_others(args.grad_inputs, args.num_inputs);
    zero_others(args.grad_params, args.num_params);
    if (leaves.empty()) return;

    at::Tensor output = fn(op);
    std::vector<at::Tensor> grads(leaves.size());
    if (output.requires_grad()) {
        at::Tensor grad_output = wrap(args.grad_outputs[0]);
        if (grad_output.sizes() != output.sizes())
            plugin::fail(CAPSULE_ERROR_INTERNAL, std::string(capsule) + ": the output gradient has shape " +
                                                     shape_text(grad_output.sizes()) + " where the output has " +
                                                     shape_text(output.sizes()));
        grads = torch::autograd::grad({output}, leaves, {grad_output}, /*retain_graph=*/false,
                                      /*create_graph=*/false, /*allow_unused=*/true);
    }
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < leaves.size(); ++i) {
        if (grads[i].defined())
            write_result(capsule, "a gradient", grads[i], *targets[i]);
        else
            wrap(*targets[i]).zero_();
    }
}

int32_t guarded(const char* capsule, capsule_status* status, const std::function<void()>& body) noexcept {
    return plugin::guarded(status, [&] {
        try {
            body();
        } catch (const c10::Error& e) {
            // LibTorch's message without its C++ backtrace (the first line names the cause).
            std::string message = e.what_without_backtrace();
            plugin::fail(CAPSULE_ERROR_INVALID_ARGUMENT, std::string(capsule) + ": LibTorch: " + message);
        }
    });
}

int32_t prepare_node(const capsule_prepare_args* args, void** state, capsule_status* status) noexcept {
    return plugin::guarded(status, [&] {
        auto s = std::make_unique<NodeState>();
        s->threads = args->num_threads > 0 ? args->num_threads : 1;
        *state = s.release();
    });
}

void release_node(void* state) noexcept { delete static_cast<NodeState*>(state); }

at::Tensor fitting(const at::Tensor& x, std::initializer_list<double> values) {
    if (x.scalar_type() != at::kFloat) return x;
    for (double v : values)
        if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max()) return x.to(at::kDouble);
    return x;
}

std::vector<int64_t> spatial(const Attributes& attrs, const char* name, std::size_t n, int64_t fallback) {
    std::vector<int64_t> v = attrs.get_ints(name, {fallback});
    if (v.size() == 1) v.assign(n, v[0]);
    if (v.size() != n)
        plugin::fail("attribute '" + std::string(name) + "' has " + std::to_string(v.size()) +
                     " entries; expected 1 or " + std::to_string(n));
    return v;
}

int64_t axis_of(const Attributes& attrs, const char* name, int64_t rank, int64_t fallback) {
    const int64_t axis = attrs.get_int(name, fallback);
    const int64_t bound = rank == 0 ? 1 : rank;
    if (axis < -bound || axis >= bound)
        plugin::fail("attribute '" + std::string(name) + "' = " + std::to_string(axis) +
                     " out of range for rank " + std::to_string(rank));
    return rank == 0 ? 0 : (axis < 0 ? axis + rank : axis);
}

}  // namespace capsule::libtorch
