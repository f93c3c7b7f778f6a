#include "compiled_groups.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "kernel_binding.hpp"

namespace capsule::detail {
namespace {

using std::string;

/// "nodes 4..9 (conv2d, relu, max_pool2d)": the nodes of steps [first, first + count).
string group_label(const Session::Impl& impl, std::size_t first, std::size_t count) {
    const auto& steps = impl.steps;
    string ops;
    for (std::size_t s = first; s < first + count; ++s)
        ops += (ops.empty() ? "" : ", ") + string(to_string(steps[s].capsule->op));
    return "compiled group of nodes " + std::to_string(steps[first].node_id) + ".." +
           std::to_string(steps[first + count - 1].node_id) + " (" + ops + ")";
}

/// For each slot, the index of the last step that reads it as an input (-1: none), and whether
/// it is a graph output: a value made inside a group must leave it when read after it.
struct SlotUse {
    std::vector<std::ptrdiff_t> last_reader;
    std::vector<bool> graph_output;
};

SlotUse slot_use(const Session::Impl& impl) {
    SlotUse use{std::vector<std::ptrdiff_t>(impl.slots.size(), -1), std::vector<bool>(impl.slots.size(), false)};
    for (std::size_t s = 0; s < impl.steps.size(); ++s) {
        const auto& step = impl.steps[s];
        for (std::size_t i = 0; i < step.num_inputs; ++i)
            use.last_reader[impl.view_slot[step.first_input + i]] = static_cast<std::ptrdiff_t>(s);
    }
    for (auto slot : impl.output_slots) use.graph_output[slot] = true;
    for (const auto& length : impl.output_lengths)  // read when the outputs are collected
        if (length) use.graph_output[length->slot] = true;
    return use;
}

/// The argument arrays of one compile call; they must outlive it.
struct GroupArgs {
    std::vector<capsule_group_node> nodes;
    std::vector<std::vector<std::size_t>> node_inputs;
    std::vector<std::vector<capsule_tensor_view>> node_params;
    std::vector<std::int32_t> roles;
};

/// Builds the group of steps [first, end): its values (slots in first-use order, with roles) in
/// `group`, and its nodes in `args`. An autograd group has one value per node id instead of one
/// per slot, so that a detached read of a value (the same slot) never carries its gradient.
void describe_group(const Session::Impl& impl, const SlotUse& use, std::size_t first, std::size_t end,
                    CompiledGroup& group, GroupArgs& args) {
    const bool by_node = group.autograd != nullptr;
    std::unordered_map<std::int64_t, std::size_t> value_of;  // slot (or node id) -> value index
    auto add_value = [&](std::size_t view, std::int64_t node_id, std::int32_t role) {
        const std::size_t slot = impl.view_slot[view];
        const auto key = by_node ? node_id : static_cast<std::int64_t>(slot);
        auto [it, fresh] = value_of.emplace(key, group.value_slots.size());
        if (fresh) {
            group.value_slots.push_back(slot);
            group.values.push_back(impl.views[view]);
            group.values.back().data = nullptr;
            args.roles.push_back(role);
            if (by_node) {
                group.value_nodes.push_back(node_id);
                group.value_views.push_back(view);
            }
        }
        return it->second;
    };
    const auto count = end - first;
    args.nodes.resize(count);
    args.node_inputs.resize(count);
    args.node_params.resize(count);
    for (std::size_t k = 0; k < count; ++k) {
        const auto& step = impl.steps[first + k];
        for (std::size_t i = 0; i < step.num_inputs; ++i)
            args.node_inputs[k].push_back(add_value(step.first_input + i, step.parents[i], CAPSULE_VALUE_INPUT));
        for (std::size_t p = 0; p < step.num_params; ++p) {
            if (by_node) group.param_views.push_back(step.first_param + p);
            capsule_tensor_view view = impl.views[step.first_param + p];
            view.data = const_cast<void*>(impl.slots[impl.view_slot[step.first_param + p]].fixed);
            args.node_params[k].push_back(view);
        }
        const std::size_t out_slot = impl.view_slot[step.output];
        const bool leaves = use.graph_output[out_slot] ||
                            use.last_reader[out_slot] >= static_cast<std::ptrdiff_t>(end);
        const std::size_t output =
            add_value(step.output, step.node_id, leaves ? CAPSULE_VALUE_OUTPUT : CAPSULE_VALUE_INTERNAL);
        auto& node = args.nodes[k];
        node.struct_size = sizeof node;
        node.node_id = step.node_id;
        node.capsule_name = step.capsule->name.c_str();
        node.inputs = args.node_inputs[k].data();
        node.num_inputs = args.node_inputs[k].size();
        node.output = output;
        node.params = args.node_params[k].data();
        node.num_params = args.node_params[k].size();
        node.attrs = step.attrs ? step.attrs->data() : nullptr;
        node.num_attrs = step.attrs ? step.attrs->size() : 0;
    }
}

}  // namespace

namespace {

/// Under VJP mode external-autograd, the group-autograd extension that runs `step`, or null.
const capsule_group_autograd_extension* autograd_of(const Session::Impl& impl, const Step& step) {
    return impl.vjp_mode == VJPMode::external_autograd && step.groups ? step.autograd : nullptr;
}

/// Whether `step` reads a detached value: under external autograd such a step starts a group, so
/// that the value enters its group from outside and stays out of the provider's autograd graph.
bool reads_detached(const Session::Impl& impl, const Step& step) {
    for (auto parent : step.parents)
        if (impl.detach_nodes.count(parent)) return true;
    return false;
}

}  // namespace

namespace {
/// compile_groups' loop: each compiled group goes into `groups` as soon as it exists, so that
/// the caller can release them when a later one fails.
void compile_each_group(const Session::Impl& impl, int threads, std::vector<CompiledGroup>& groups) {
    const auto use = slot_use(impl);
    const auto& steps = impl.steps;
    for (std::size_t first = 0; first < steps.size();) {
        std::size_t end = first + 1;
        const auto* extension = steps[first].groups;
        const auto* autograd = autograd_of(impl, steps[first]);
        while (extension && end < steps.size() && steps[end].groups == extension &&
               !(autograd && reads_detached(impl, steps[end])))
            ++end;
        // An autograd group may have one node: its backward is the provider's all the same.
        if (!extension || end - first < (autograd ? 1u : 2u)) {
            first = end;
            continue;
        }
        CompiledGroup group;
        group.first_step = first;
        group.num_steps = end - first;
        group.extension = extension;
        group.autograd = autograd;
        GroupArgs parts;
        describe_group(impl, use, first, end, group, parts);
        group.roles = parts.roles;
        capsule_group_args args{};
        args.struct_size = sizeof args;
        args.nodes = parts.nodes.data();
        args.num_nodes = parts.nodes.size();
        args.node_entry_size = sizeof(capsule_group_node);
        args.values = group.values.data();
        args.value_roles = parts.roles.data();
        args.num_values = group.values.size();
        args.num_threads = threads;
        args.fpmath = impl.fpmath == FpMath::bf16 ? CAPSULE_FPMATH_BF16 : CAPSULE_FPMATH_STRICT;
        std::array<char, 512> description{};
        void* executable = nullptr;
        if (auto failure = call_plugin([&](capsule_status* st) {
                return extension->compile(&args, &executable, description.data(), description.size(), st);
            })) {
            throw Error(ErrorCode::other, "compiling the " + group_label(impl, first, end - first) + " failed in plugin " +
                                 *steps[first].plugin + ": " + *failure);
        }
        description.back() = '\0';
        first = end;
        if (!executable) continue;  // declined: the steps run one by one
        group.executable = executable;
        groups.push_back(std::move(group));
        groups.back().fused = description.data();
    }
}
}  // namespace

std::vector<CompiledGroup> compile_groups(const Session::Impl& impl, int threads) {
    std::vector<CompiledGroup> groups;
    try {
        compile_each_group(impl, threads, groups);
    } catch (...) {
        release_groups(groups);  // those compiled before the failure
        throw;
    }
    return groups;
}

namespace {
/// The group's value views with one run's buffers.
std::vector<capsule_tensor_view> bound_values(const CompiledGroup& group, const std::vector<void*>& slot_data) {
    std::vector<capsule_tensor_view> values(group.values);
    for (std::size_t v = 0; v < values.size(); ++v) values[v].data = slot_data[group.value_slots[v]];
    return values;
}
}  // namespace

void run_group(const Session::Impl& impl, const CompiledGroup& group, const std::vector<void*>& slot_data) {
    const auto values = bound_values(group, slot_data);
    if (auto failure = call_plugin_coded([&](capsule_status* st) {
            return group.extension->run(group.executable, values.data(), values.size(), nullptr, st);
        }))
        throw Error(run_failure_code(failure->code), group_label(impl, group.first_step, group.num_steps) +
                                                         " failed in plugin " + *impl.steps[group.first_step].plugin +
                                                         ": " + failure->text);
}

void* record_group(const Session::Impl& impl, const CompiledGroup& group, const GroupRecordFlags& flags,
                   const std::vector<void*>& slot_data) {
    const auto values = bound_values(group, slot_data);
    capsule_group_record_args args{};
    args.struct_size = sizeof args;
    args.values = values.data();
    args.num_values = values.size();
    args.value_needs_grad = flags.values.data();
    args.param_needs_grad = flags.params.data();
    args.num_params = flags.params.size();
    void* record = nullptr;
    if (auto failure = call_plugin_coded([&](capsule_status* st) {
            return group.autograd->record(group.executable, &args, &record, st);
        })) {
        if (record) group.autograd->release_record(record);
        throw Error(run_failure_code(failure->code), group_label(impl, group.first_step, group.num_steps) +
                                                         " failed in plugin " + *impl.steps[group.first_step].plugin +
                                                         " while recording for autograd: " + failure->text);
    }
    if (!record)
        throw Error(ErrorCode::other, group_label(impl, group.first_step, group.num_steps) + ": plugin " +
                                          *impl.steps[group.first_step].plugin +
                                          " reported success but returned no record (the ABI requires one)");
    return record;
}

void backward_group(const Session::Impl& impl, const CompiledGroup& group, void* record,
                    const std::vector<capsule_tensor_view>& grad_values,
                    const std::vector<capsule_tensor_view>& grad_params) {
    capsule_group_backward_args args{};
    args.struct_size = sizeof args;
    args.record = record;
    args.grad_values = grad_values.data();
    args.num_values = grad_values.size();
    args.grad_params = grad_params.data();
    args.num_params = grad_params.size();
    if (auto failure = call_plugin_coded([&](capsule_status* st) {
            return group.autograd->backward(group.executable, &args, st);
        }))
        throw Error(run_failure_code(failure->code), "backward of the " +
                                                         group_label(impl, group.first_step, group.num_steps) +
                                                         " failed in plugin " + *impl.steps[group.first_step].plugin +
                                                         ": " + failure->text);
}

void release_groups(std::vector<CompiledGroup>& groups) {
    for (auto it = groups.rbegin(); it != groups.rend(); ++it)
        if (it->executable) it->extension->release(it->executable);
    groups.clear();
}

}  // namespace capsule::detail
