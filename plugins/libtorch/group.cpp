// Compiled groups and external autograd of the LibTorch plugins (group.hpp).
#include "group.hpp"

#include <exception>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "ops.hpp"

namespace capsule::libtorch {
namespace {

/// One node of a compiled group: its op function and what compile gave (parameter data and
/// attributes stay valid for the session, capsule_group_node).
struct GroupNode {
    NamedOp op;
    std::vector<std::size_t> inputs;
    std::size_t output = 0;
    std::vector<capsule_tensor_view> params;
    const capsule_attribute* attrs = nullptr;
    std::size_t num_attrs = 0;
    /// conv2d: its weight in oneDNN's layout, made once at compile, for runs without autograd
    /// (host-side Session::refresh_parameters compiles again after the weights change).
    at::Tensor packed_weight;
};

struct Executable {
    std::vector<GroupNode> nodes;
    std::vector<int32_t> roles;                // capsule_value_role per value
    std::vector<std::vector<int64_t>> shapes;  // per value
    std::size_t num_params = 0;
    NodeState threads;
};

/// What a backward pass of one recorded run needs: the tensors of the OUTPUT values (with
/// torch's autograd graph behind them) and the leaves whose gradients the host asked for.
struct Record {
    std::vector<at::Tensor> outputs;       // per value; defined for OUTPUT values
    std::vector<at::Tensor> value_leaves;  // per value; defined for INPUT values needing a gradient
    std::vector<at::Tensor> param_leaves;  // per group parameter
};

constexpr const char* kGroupName = "libtorch group";

const capsule_group_node& node_at(const capsule_group_args& args, std::size_t n) {
    return *reinterpret_cast<const capsule_group_node*>(reinterpret_cast<const char*>(args.nodes) +
                                                        n * args.node_entry_size);
}

/// `t` as a leaf of torch's autograd when `wanted` and it is a float tensor (else `t` itself);
/// the leaf is kept in `keep`.
at::Tensor leaf(const at::Tensor& t, bool wanted, at::Tensor* keep) {
    if (!keep || !wanted || !at::isFloatingType(t.scalar_type())) return t;
    *keep = t.detach().requires_grad_(true);
    return *keep;
}

/// Computes every node of the group on `values` (the host's buffers), writing the OUTPUT values.
/// With `record`, INPUT values and parameters whose flag is set become autograd leaves and the
/// OUTPUT tensors are kept. An output with no elements is not computed, as node by node
/// (run_forward).
void compute(const Executable& e, const capsule_tensor_view* values, std::size_t num_values,
             const uint8_t* value_grad, const uint8_t* param_grad, Record* record) {
    if (num_values != e.roles.size())
        plugin::fail(CAPSULE_ERROR_INVALID_ARGUMENT, std::string(kGroupName) + ": " + std::to_string(num_values) +
                                                         " values given, compiled with " +
                                                         std::to_string(e.roles.size()));
    std::vector<at::Tensor> t(num_values);
    for (std::size_t v = 0; v < num_values; ++v)
        if (e.roles[v] == CAPSULE_VALUE_INPUT)
            t[v] = leaf(wrap(values[v]), value_grad && value_grad[v], record ? &record->value_leaves[v] : nullptr);
    std::size_t k = 0;
    for (const auto& node : e.nodes) {
        const capsule_tensor_view& out = values[node.output];
        OpArgs op{{}, {}, Attributes(node.attrs, node.num_attrs), node.op.capsule, e.shapes[node.output]};
        for (auto i : node.inputs) op.inputs.push_back(t[i]);
        for (const auto& p : node.params) {
            op.params.push_back(leaf(wrap(p), param_grad && param_grad[k], record ? &record->param_leaves[k] : nullptr));
            ++k;
        }
        at::Tensor result;
        if (plugin::Tensor{&out}.numel() == 0) {
            result = at::empty(e.shapes[node.output], at::TensorOptions().dtype(scalar_type(out.dtype)));
        } else {
            result = !record && node.packed_weight.defined() ? conv2d_prepacked(op, node.packed_weight)
                                                             : node.op.fn(op);
            check_result(node.op.capsule, "the output", result, out);
        }
        // The next node reads a contiguous tensor, as it reads the host's buffer node by node.
        t[node.output] = result.contiguous();
        if (e.roles[node.output] != CAPSULE_VALUE_OUTPUT) continue;
        if (record) record->outputs[node.output] = t[node.output];
        at::NoGradGuard no_grad;
        write_result(node.op.capsule, "the output", t[node.output], out);
    }
}

/// The prepacked weight of conv2d node `g` (prepack_conv2d_weight), or undefined when it has none
/// or its attributes are malformed (its run then reports them as node by node).
at::Tensor prepacked_weight(const GroupNode& g, const std::vector<int64_t>& out_shape) {
    OpArgs op{{}, {}, Attributes(g.attrs, g.num_attrs), g.op.capsule, out_shape};
    for (const auto& p : g.params) op.params.push_back(wrap(p));
    if (op.params.empty()) return {};
    try {
        return prepack_conv2d_weight(op);
    } catch (const std::exception&) {  // KernelError, c10::Error, ideep's errors: run as node by node
        return {};
    }
}

int32_t compile(const capsule_group_args* args, void** executable, char* description,
                std::size_t description_size, capsule_status* status) noexcept {
    return guarded(kGroupName, status, [&] {
        *executable = nullptr;
        if (description_size) description[0] = '\0';
        auto e = std::make_unique<Executable>();
        e->threads.threads = args->num_threads > 0 ? args->num_threads : 1;
        for (std::size_t v = 0; v < args->num_values; ++v) {
            const auto& view = args->values[v];
            e->roles.push_back(args->value_roles[v]);
            e->shapes.emplace_back(view.shape, view.shape + view.rank);
        }
        for (std::size_t n = 0; n < args->num_nodes; ++n) {
            const auto& node = node_at(*args, n);
            GroupNode g;
            g.op = op_named(node.capsule_name);
            if (!g.op.fn) return;  // e.g. an optimizer step: its own kernel runs it
            g.inputs.assign(node.inputs, node.inputs + node.num_inputs);
            g.output = node.output;
            g.params.assign(node.params, node.params + node.num_params);
            g.attrs = node.attrs;
            g.num_attrs = node.num_attrs;
            if (g.op.fn == &op_conv2d) g.packed_weight = prepacked_weight(g, e->shapes[g.output]);
            e->num_params += node.num_params;
            e->nodes.push_back(std::move(g));
        }
        const std::string text = std::to_string(args->num_nodes) + " node(s) in one LibTorch call";
        if (description_size) std::snprintf(description, description_size, "%s", text.c_str());
        *executable = e.release();
    });
}

int32_t run(void* executable, const capsule_tensor_view* values, std::size_t num_values, void*,
            capsule_status* status) noexcept {
    return guarded(kGroupName, status, [&] {
        const auto& e = *static_cast<const Executable*>(executable);
        ThreadScope threads(&e.threads);
        at::NoGradGuard no_grad;
        compute(e, values, num_values, nullptr, nullptr, nullptr);
    });
}

void release(void* executable) noexcept { delete static_cast<Executable*>(executable); }

int32_t record(void* executable, const capsule_group_record_args* args, void** out,
               capsule_status* status) noexcept {
    return guarded(kGroupName, status, [&] {
        const auto& e = *static_cast<const Executable*>(executable);
        if (args->num_params != e.num_params)
            plugin::fail(CAPSULE_ERROR_INVALID_ARGUMENT, std::string(kGroupName) + ": " +
                                                             std::to_string(args->num_params) +
                                                             " parameter flags given, the group has " +
                                                             std::to_string(e.num_params));
        ThreadScope threads(&e.threads);
        torch::autograd::AutoGradMode grad_mode(true);
        auto r = std::make_unique<Record>();
        r->outputs.resize(e.roles.size());
        r->value_leaves.resize(e.roles.size());
        r->param_leaves.resize(e.num_params);
        compute(e, args->values, args->num_values, args->value_needs_grad, args->param_needs_grad, r.get());
        *out = r.release();
    });
}

/// Writes `grad` (undefined: nothing depends on the leaf, zeros) into the host's buffer.
void write_gradient(const at::Tensor& grad, const capsule_tensor_view& target) {
    if (grad.defined())
        write_result(kGroupName, "a gradient", grad, target);
    else
        wrap(target).zero_();
}

int32_t backward(void* executable, const capsule_group_backward_args* args, capsule_status* status) noexcept {
    return guarded(kGroupName, status, [&] {
        const auto& e = *static_cast<const Executable*>(executable);
        const auto& r = *static_cast<const Record*>(args->record);
        if (args->num_values != r.outputs.size() || args->num_params != r.param_leaves.size())
            plugin::fail(CAPSULE_ERROR_INVALID_ARGUMENT, std::string(kGroupName) +
                                                             ": backward's gradient views do not match the group");
        ThreadScope threads(&e.threads);
        std::vector<at::Tensor> outputs, grad_outputs, leaves;
        std::vector<const capsule_tensor_view*> targets;
        for (std::size_t v = 0; v < args->num_values; ++v) {
            const auto& out = r.outputs[v];
            if (!out.defined() || !out.requires_grad() || !args->grad_values[v].data) continue;
            check_result(kGroupName, "a recorded output", out, args->grad_values[v]);  // its gradient's view
            outputs.push_back(out);
            grad_outputs.push_back(wrap(args->grad_values[v]));
        }
        auto want = [&](const at::Tensor& leaf_tensor, const capsule_tensor_view& grad) {
            if (!grad.data) return;
            if (!leaf_tensor.defined()) {  // an integer value, or no gradient recorded: zeros
                wrap(grad).zero_();
                return;
            }
            leaves.push_back(leaf_tensor);
            targets.push_back(&grad);
        };
        for (std::size_t v = 0; v < args->num_values; ++v)
            if (e.roles[v] == CAPSULE_VALUE_INPUT) want(r.value_leaves[v], args->grad_values[v]);
        for (std::size_t k = 0; k < args->num_params; ++k) want(r.param_leaves[k], args->grad_params[k]);
        std::vector<at::Tensor> grads(leaves.size());
        // retain_graph: the host's tape may be differentiated again.
        if (!outputs.empty() && !leaves.empty())
            grads = torch::autograd::grad(outputs, leaves, grad_outputs, /*retain_graph=*/true,
                                          /*create_graph=*/false, /*allow_unused=*/true);
        at::NoGradGuard no_grad;
        for (std::size_t i = 0; i < leaves.size(); ++i) write_gradient(grads[i], *targets[i]);
    });
}

void release_record(void* record) noexcept { delete static_cast<Record*>(record); }

const capsule_compiled_groups_extension kCompiledGroups{
    {sizeof(capsule_compiled_groups_extension), CAPSULE_EXTENSION_COMPILED_GROUPS, nullptr}, compile, run, release};

const capsule_group_autograd_extension kGroupAutograd{
    {sizeof(capsule_group_autograd_extension), CAPSULE_EXTENSION_GROUP_AUTOGRAD, &kCompiledGroups.base},
    record, backward, release_record};

}  // namespace

const capsule_extension* compiled_groups_extensions() { return &kCompiledGroups.base; }
const capsule_extension* group_autograd_extensions() { return &kGroupAutograd.base; }

}  // namespace capsule::libtorch
