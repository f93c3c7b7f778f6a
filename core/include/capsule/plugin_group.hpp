// Plugin SDK helpers for compiled groups (ABI 1.1 extension, plugin_abi.h): reading compile's
// arguments, keeping a node's operands past the compile call, and preparing and calling the
// nodes' own kernels inside an executable. Header-only, like plugin.hpp; used by the reference
// and oneDNN plugins' compiled groups.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "capsule/plugin.hpp"

namespace capsule::plugin {

/// Node `k` of a group (its entries are node_entry_size bytes apart, the host's struct size).
inline const capsule_group_node& group_node(const capsule_group_args& g, std::size_t k) {
    return *reinterpret_cast<const capsule_group_node*>(reinterpret_cast<const unsigned char*>(g.nodes) +
                                                        k * g.node_entry_size);
}

/// How many nodes of the group read value `v` (a node reading it twice counts twice).
inline std::size_t group_readers(const capsule_group_args& g, std::size_t v) {
    std::size_t n = 0;
    for (std::size_t k = 0; k < g.num_nodes; ++k) {
        const auto& node = group_node(g, k);
        for (std::size_t i = 0; i < node.num_inputs; ++i) n += node.inputs[i] == v;
    }
    return n;
}

/// A group node's parameters and attributes, copied out of compile's arrays (which are borrowed
/// for the call only). Parameter data stays the host's (valid for the session); shapes, strides,
/// names, strings and lists are copied into the deques, whose elements never move.
struct NodeOperands {
    std::deque<std::vector<int64_t>> dims;
    std::deque<std::string> strings;
    std::deque<std::vector<double>> floats;
    std::vector<capsule_tensor_view> params;
    std::vector<capsule_attribute> attrs;

    void copy_from(const capsule_group_node& node) {
        for (std::size_t p = 0; p < node.num_params; ++p) {
            capsule_tensor_view v = node.params[p];
            v.shape = dims.emplace_back(v.shape, v.shape + v.rank).data();
            v.strides = dims.emplace_back(v.strides, v.strides + v.rank).data();
            params.push_back(v);
        }
        for (std::size_t a = 0; a < node.num_attrs; ++a) {
            capsule_attribute attr = node.attrs[a];
            attr.name = strings.emplace_back(attr.name ? attr.name : "").c_str();
            if (attr.string_value) attr.string_value = strings.emplace_back(attr.string_value).c_str();
            if (attr.ints) attr.ints = dims.emplace_back(attr.ints, attr.ints + attr.count).data();
            if (attr.floats) attr.floats = floats.emplace_back(attr.floats, attr.floats + attr.count).data();
            attrs.push_back(attr);
        }
    }
};

/// A group node as an executable keeps it: the plugin's kernel for its capsule, the state that
/// kernel's `prepare` made (the executable releases it), its value indices and operands.
struct GroupUnit : NodeOperands {
    const capsule_kernel* kernel = nullptr;
    void* state = nullptr;
    std::vector<std::size_t> inputs;  // value indices
    std::size_t output = 0;           // value index

    /// Takes `node`, served by `found` (the plugin's kernel of the node's capsule, or nullptr);
    /// KernelError when the plugin does not implement that capsule or a value index is not below
    /// `num_values`.
    void take(const capsule_group_node& node, const capsule_kernel* found, std::size_t num_values) {
        require(found != nullptr, [&] {
            return std::string("compiled group: node ") + std::to_string(node.node_id) + " names capsule '" +
                   (node.capsule_name ? node.capsule_name : "(null)") + "' that this plugin does not implement";
        });
        kernel = found;
        inputs.assign(node.inputs, node.inputs + node.num_inputs);
        output = node.output;
        bool in_range = output < num_values;
        for (auto i : inputs) in_range = in_range && i < num_values;
        require(in_range, "compiled group: value index out of range");
        copy_from(node);
    }
};

/// Raises KernelError(code, "<stage> of <capsule>: <kernel's message>") unless `code` is
/// CAPSULE_OK: a node's kernel failing inside a group fails the group with its own message.
inline void check_call(int32_t code, const capsule_status& status, const char* stage, const char* capsule) {
    if (code != CAPSULE_OK) fail(code, std::string(stage) + " of " + capsule + ": " + status.message);
}

/// The prepare arguments of a node with operands `ops`, reading `inputs` and writing `*output`
/// (views from compile's values: shapes and dtypes, no data), with the group's thread count and
/// fpmath (STRICT from a host whose group arguments predate the field).
inline capsule_prepare_args group_prepare_args(const NodeOperands& ops, std::span<const capsule_tensor_view> inputs,
                                               const capsule_tensor_view* output, const capsule_group_args& g) {
    capsule_prepare_args args{};
    args.struct_size = sizeof args;
    args.inputs = inputs.data();
    args.num_inputs = inputs.size();
    args.params = ops.params.data();
    args.num_params = ops.params.size();
    args.outputs = output;
    args.num_outputs = 1;
    args.attrs = ops.attrs.data();
    args.num_attrs = ops.attrs.size();
    args.num_threads = g.num_threads;
    const bool has_fpmath = g.struct_size >= offsetof(capsule_group_args, fpmath) + sizeof g.fpmath;
    args.fpmath = has_fpmath ? g.fpmath : CAPSULE_FPMATH_STRICT;
    return args;
}

/// Calls a node's forward `entry` with its prepared `state`, `params` and `attrs`, reading the
/// values `operands` and writing value `output` of a group run's `values`; raises as check_call.
inline void call_forward(capsule_forward_fn entry, void* state, const char* capsule,
                         std::span<const std::size_t> operands, std::span<const capsule_tensor_view> params,
                         std::span<const capsule_attribute> attrs, const capsule_tensor_view* values,
                         std::size_t output) {
    // Views on the stack for up to 8 inputs; a wider node (a concat of many steps) on the heap.
    capsule_tensor_view few[8];
    std::vector<capsule_tensor_view> many;
    if (operands.size() > 8) many.resize(operands.size());
    capsule_tensor_view* inputs = operands.size() > 8 ? many.data() : few;
    for (std::size_t i = 0; i < operands.size(); ++i) inputs[i] = values[operands[i]];
    capsule_forward_args args{};
    args.struct_size = sizeof args;
    args.inputs = inputs;
    args.num_inputs = operands.size();
    args.params = params.data();
    args.num_params = params.size();
    args.outputs = &values[output];
    args.num_outputs = 1;
    args.attrs = attrs.data();
    args.num_attrs = attrs.size();
    args.state = state;
    capsule_status status{sizeof status, 0, {}};
    check_call(entry(&args, &status), status, "forward", capsule);
}

/// The compiled-groups extension of a plugin whose executables are `Executable`s, built by
/// `Compile(const capsule_group_args&, std::string& description)` (a std::unique_ptr; nullptr
/// declines the group) and run by `Run(const Executable&, const capsule_tensor_view* values)`.
/// The entry points turn exceptions into status codes (guarded), write the description (cut to
/// the buffer, NUL-terminated), refuse a run whose value count is not Executable::num_values
/// (compile's), and delete the executable on release. Use: `const capsule_compiled_groups_extension
/// extension = CompiledGroups<Exe, compile, run>::extension;`.
template <typename Executable, auto Compile, auto Run>
struct CompiledGroups {
    static int32_t compile(const capsule_group_args* args, void** executable, char* description,
                           size_t description_size, capsule_status* status) noexcept {
        return guarded(status, [&] {
            std::string text;
            *executable = Compile(*args, text).release();
            if (description && description_size > 0) {
                const auto n = std::min(text.size(), description_size - 1);
                std::memcpy(description, text.data(), n);
                description[n] = '\0';
            }
        });
    }
    static int32_t run(void* executable, const capsule_tensor_view* values, size_t num_values, void*,
                       capsule_status* status) noexcept {
        return guarded(status, [&] {
            const auto& exe = *static_cast<const Executable*>(executable);
            require(num_values == exe.num_values, [&] {
                return "compiled group: run with " + std::to_string(num_values) + " values, compiled with " +
                       std::to_string(exe.num_values);
            });
            Run(exe, values);
        });
    }
    static void release(void* executable) noexcept { delete static_cast<Executable*>(executable); }
    static constexpr capsule_compiled_groups_extension extension{
        {sizeof(capsule_compiled_groups_extension), CAPSULE_EXTENSION_COMPILED_GROUPS, nullptr}, compile, run,
        release};
};

}  // namespace capsule::plugin
