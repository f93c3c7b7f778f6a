// The reference plugin's compiled groups (ABI 1.1 extension, plugin_abi.h). A convolution
// (reference.conv2d or reference.conv) whose result is read by one node only, an inference
// batch_norm, a relu or a clamp in the same group (and a batch_norm's result by a relu or clamp
// only), applies those to each block of its output as it writes it (epilogue.hpp), while the
// block is in cache: the intermediate tensors are never read back in a second pass. Such passes
// are memory-bound on large activations (MobileNet-v2's clamps took a fifth of its time). Each
// fused op is its own kernel's formula, element by element, so the group computes the same bits
// as its nodes one by one. Every other node runs its own kernel with its own prepared state. A
// group with nothing to fuse is declined, and the host calls its nodes one by one.
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capsule/plugin_group.hpp"
#include "kernels.hpp"
#include "parallel.hpp"

namespace capsule::reference {
namespace {

/// A node of the executable (its output: the last fused node's when fused); the `fused` nodes
/// after it are computed by it (their kernels are not called).
struct Unit : plugin::GroupUnit {
    std::size_t fused = 0;
};

struct Executable {
    std::deque<Unit> units;
    std::size_t num_values = 0;
    ~Executable() {
        for (auto& u : units)
            if (u.state && u.kernel->release) u.kernel->release(u.state);
    }
};

bool is_convolution(const char* capsule) {
    return std::strcmp(capsule, "reference.conv2d") == 0 || std::strcmp(capsule, "reference.conv") == 0;
}

/// The epilogue computing node `act` (reference.relu or reference.clamp on one input), or none
/// (also for a clamp whose attributes its kernel would refuse: that kernel reports it at run).
Epilogue activation_of(const Unit& act) {
    Epilogue e;
    if (act.inputs.size() != 1) return e;
    if (std::strcmp(act.kernel->capsule_name, "reference.relu") == 0) {
        e.kind = Epilogue::Kind::relu;
    } else if (std::strcmp(act.kernel->capsule_name, "reference.clamp") == 0) {
        try {
            const auto b = clamp_bounds(plugin::Attributes(act.attrs.data(), act.attrs.size()));
            e.kind = Epilogue::Kind::clamp;
            if (b.has_lo) e.lo = b.lo;
            if (b.has_hi) e.hi = b.hi;
        } catch (const plugin::KernelError&) {
            e.kind = Epilogue::Kind::none;
        }
    }
    return e;
}

/// The prepare arguments of unit `u` (`inputs` holds their input views).
capsule_prepare_args prepare_args_of(const Unit& u, const capsule_group_args& g,
                                     std::vector<capsule_tensor_view>& inputs) {
    inputs.clear();
    for (auto i : u.inputs) inputs.push_back(g.values[i]);
    return plugin::group_prepare_args(u, inputs, &g.values[u.output], g);
}

/// Whether `next` may be fused onto the node that makes `value`: its one input, read by no
/// other node and not leaving the group (INTERNAL), and `next`'s result of the same dtype.
bool fusable_reader(const Unit& next, std::size_t value, const capsule_group_args& g) {
    return next.inputs.size() == 1 && next.inputs[0] == value && g.value_roles[value] == CAPSULE_VALUE_INTERNAL &&
           plugin::group_readers(g, value) == 1 && g.values[next.output].dtype == g.values[value].dtype;
}

/// Fuses the units after unit k into it when k is a float convolution: an inference batch_norm
/// that alone reads its result, then a relu or clamp that alone reads the result so far. The
/// convolution then writes the last fused node's output (the values in between stay unwritten,
/// as INTERNAL allows). Returns what it fused ("conv+batch_norm+relu"), or "" for nothing. A
/// batch_norm whose attributes or parameters its kernel would refuse is left to that kernel,
/// which reports it when the group runs.
std::string fuse_at(Executable& exe, std::size_t k, const capsule_group_args& g) {
    Unit& conv = exe.units[k];
    if (!is_convolution(conv.kernel->capsule_name) || !conv.state) return "";
    std::size_t value = conv.output, fused = 0;
    const auto dtype = g.values[value].dtype;
    if (dtype != CAPSULE_DTYPE_FLOAT32 && dtype != CAPSULE_DTYPE_FLOAT64) return "";
    Epilogue e;
    std::string pattern = "conv";
    std::vector<capsule_tensor_view> inputs;
    if (k + 1 < exe.units.size() && std::strcmp(exe.units[k + 1].kernel->capsule_name, "reference.batch_norm") == 0 &&
        fusable_reader(exe.units[k + 1], value, g)) {
        const Unit& bn = exe.units[k + 1];
        const auto args = prepare_args_of(bn, g, inputs);
        bool folded = false;
        try {
            folded = batch_norm_epilogue(plugin::PrepareCall{&args}, e);
        } catch (const plugin::KernelError&) {
            folded = false;
        }
        if (folded) {
            value = bn.output;
            fused = 1;
            pattern += "+batch_norm";
        }
    }
    if (k + 1 + fused < exe.units.size() && fusable_reader(exe.units[k + 1 + fused], value, g)) {
        const Unit& act = exe.units[k + 1 + fused];
        const Epilogue a = activation_of(act);
        if (a.kind != Epilogue::Kind::none) {
            e.kind = a.kind;
            e.lo = a.lo;
            e.hi = a.hi;
            value = act.output;
            ++fused;
            pattern += a.kind == Epilogue::Kind::relu ? "+relu" : "+clamp";
        }
    }
    if (fused == 0) return "";
    static_cast<ThreadGrant*>(conv.state)->epilogue = std::move(e);
    conv.output = value;
    conv.fused = fused;
    return pattern;
}

std::unique_ptr<Executable> compile(const capsule_group_args& g, std::string& description) {
    auto exe = std::make_unique<Executable>();
    exe->num_values = g.num_values;
    std::vector<capsule_tensor_view> inputs;
    for (std::size_t k = 0; k < g.num_nodes; ++k) {
        const auto& node = plugin::group_node(g, k);
        Unit& u = exe->units.emplace_back();
        u.take(node, find_kernel(node.capsule_name ? node.capsule_name : ""), g.num_values);
        const auto args = prepare_args_of(u, g, inputs);
        capsule_status status{sizeof status, 0, {}};
        if (u.kernel->prepare)
            plugin::check_call(u.kernel->prepare(&args, &u.state, &status), status, "prepare",
                               u.kernel->capsule_name);
    }
    std::map<std::string, std::size_t> fused;  // pattern -> count, listed in name order
    for (std::size_t k = 0; k + 1 < exe->units.size(); ++k)
        if (auto pattern = fuse_at(*exe, k, g); !pattern.empty()) {
            ++fused[pattern];
            k += exe->units[k].fused;  // those nodes are part of this one now
        }
    if (fused.empty()) return nullptr;
    for (const auto& [pattern, n] : fused)
        description += (description.empty() ? "" : ", ") + pattern + " x" + std::to_string(n);
    description += " (applied to each output block as the convolution writes it)";
    return exe;
}

/// Runs the units in order, a fused one in place of the nodes it absorbed.
void run(const Executable& exe, const capsule_tensor_view* values) {
    for (std::size_t k = 0; k < exe.units.size(); k += 1 + exe.units[k].fused) {
        const Unit& u = exe.units[k];
        plugin::call_forward(u.kernel->forward, u.state, u.kernel->capsule_name, u.inputs, u.params, u.attrs, values,
                             u.output);
    }
}

}  // namespace

const capsule_compiled_groups_extension compiled_groups_extension =
    plugin::CompiledGroups<Executable, compile, run>::extension;

}  // namespace capsule::reference
