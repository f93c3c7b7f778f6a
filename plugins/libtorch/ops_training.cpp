// The optimizer steps of the LibTorch plugin, sgd and adam (torch.optim.SGD and torch.optim.Adam
// update rules, as docs/ops.md gives them), as ATen expressions on the host's buffers. They write
// two or three outputs (the parameter and its state buffers), which may be the very buffers passed
// as inputs: every result is computed before any output is written.
#include <cmath>

#include "ops.hpp"

namespace capsule::libtorch {

namespace {

/// The inputs (parameter, gradient, `states` state buffers) and outputs (parameter, state
/// buffers) of an optimizer step, checked to have the parameter's float dtype and shape.
struct StepViews {
    std::vector<at::Tensor> inputs, outputs;
};

StepViews step_views(const capsule_forward_args& args, const char* op, std::size_t states) {
    if (args.num_inputs != 2 + states || args.num_outputs != 1 + states)
        plugin::fail(std::string(op) + " takes " + std::to_string(2 + states) + " inputs and writes " +
                     std::to_string(1 + states) + " outputs, got " + std::to_string(args.num_inputs) + " and " +
                     std::to_string(args.num_outputs));
    StepViews v;
    for (std::size_t i = 0; i < args.num_inputs; ++i) v.inputs.push_back(wrap(args.inputs[i]));
    for (std::size_t i = 0; i < args.num_outputs; ++i) v.outputs.push_back(wrap(args.outputs[i]));
    const at::Tensor& p = v.inputs[0];
    if (!at::isFloatingType(p.scalar_type()))
        plugin::fail(std::string(op) + ": the parameter must be float32 or float64");
    for (const auto* list : {&v.inputs, &v.outputs})
        for (const auto& t : *list)
            if (t.sizes() != p.sizes() || t.scalar_type() != p.scalar_type())
                plugin::fail(std::string(op) + ": every input and output must have the parameter's shape and dtype");
    return v;
}

double finite_attr(const Attributes& attrs, const char* op, const char* name, double fallback, double min) {
    const double v = attrs.get_float(name, fallback);
    if (!std::isfinite(v) || v < min)
        plugin::fail(std::string(op) + ": attribute '" + name + "' = " + std::to_string(v) +
                     " must be a finite number >= " + std::to_string(min));
    return v;
}

int64_t step_attr(const Attributes& attrs, const char* op) {
    if (!attrs.has("step")) plugin::fail(std::string(op) + ": attribute 'step' (1-based step number) is missing");
    const int64_t step = attrs.get_int("step", 1);
    if (step < 1) plugin::fail(std::string(op) + ": attribute 'step' = " + std::to_string(step) + " must be >= 1");
    return step;
}

void write(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& results) {
    for (std::size_t i = 0; i < outputs.size(); ++i)
        if (outputs[i].numel() > 0) at::Tensor(outputs[i]).copy_(results[i]);
}

// torch.optim.SGD: g = grad + wd·p; buf = g (first step) or momentum·buf + (1 − dampening)·g;
// g = g + momentum·buf (nesterov) or buf; p = p − lr·g.
void sgd(const capsule_forward_args& args) {
    ThreadScope threads(args.state);
    at::NoGradGuard no_grad;
    const Attributes attrs(args.attrs, args.num_attrs);
    if (!attrs.has("lr")) plugin::fail("sgd: attribute 'lr' (learning rate) is missing");
    const double lr = finite_attr(attrs, "sgd", "lr", 0, 0);
    const double momentum = finite_attr(attrs, "sgd", "momentum", 0, 0);
    const double dampening = finite_attr(attrs, "sgd", "dampening", 0, -INFINITY);
    const double decay = finite_attr(attrs, "sgd", "weight_decay", 0, 0);
    const bool nesterov = attrs.get_bool("nesterov", false);
    const bool first = step_attr(attrs, "sgd") == 1;
    if (nesterov && (momentum <= 0 || dampening != 0))
        plugin::fail("sgd: nesterov momentum requires momentum > 0 and dampening = 0 (as torch.optim.SGD)");
    const StepViews v = step_views(args, "sgd", 1);
    const at::Tensor &p = v.inputs[0], &grad = v.inputs[1], &buf_in = v.inputs[2];
    at::Tensor g = grad + decay * p;
    at::Tensor buf = buf_in.clone();
    if (momentum != 0) {
        buf = first ? g : momentum * buf_in + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf : buf;
    }
    write(v.outputs, {p - lr * g, buf});
}

// torch.optim.Adam (amsgrad off), step t: m = β1·m + (1 − β1)·g; v = β2·v + (1 − β2)·g²;
// p = p − lr/(1 − β1^t) · m / (√v/√(1 − β2^t) + eps), with g = grad + wd·p.
void adam(const capsule_forward_args& args) {
    ThreadScope threads(args.state);
    at::NoGradGuard no_grad;
    const Attributes attrs(args.attrs, args.num_attrs);
    const double lr = finite_attr(attrs, "adam", "lr", 1e-3, 0);
    const auto betas = attrs.get_floats("betas", {0.9, 0.999});
    if (betas.size() != 2 || !(betas[0] >= 0 && betas[0] < 1) || !(betas[1] >= 0 && betas[1] < 1))
        plugin::fail("adam: attribute 'betas' must be two numbers in [0, 1)");
    const double eps = finite_attr(attrs, "adam", "eps", 1e-8, 0);
    const double decay = finite_attr(attrs, "adam", "weight_decay", 0, 0);
    const auto step = double(step_attr(attrs, "adam"));
    const double step_size = lr / (1 - std::pow(betas[0], step));
    const double correction2_sqrt = std::sqrt(1 - std::pow(betas[1], step));
    const StepViews v = step_views(args, "adam", 2);
    const at::Tensor& p = v.inputs[0];
    const at::Tensor g = v.inputs[1] + decay * p;
    const at::Tensor m = betas[0] * v.inputs[2] + (1 - betas[0]) * g;
    const at::Tensor s = betas[1] * v.inputs[3] + (1 - betas[1]) * g * g;
    write(v.outputs, {p - step_size * m / (at::sqrt(s) / correction2_sqrt + eps), m, s});
}

}  // namespace

int32_t sgd_kernel(const capsule_forward_args* args, capsule_status* status) noexcept {
    return guarded("libtorch.sgd", status, [&] { sgd(*args); });
}

int32_t adam_kernel(const capsule_forward_args* args, capsule_status* status) noexcept {
    return guarded("libtorch.adam", status, [&] { adam(*args); });
}

}  // namespace capsule::libtorch
