#include "capsule/session.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "capsule/plan_lock.hpp"
#include "capsule/tensor_io.hpp"
#include "compiled_groups.hpp"
#include "kernel_binding.hpp"
#include "session_impl.hpp"

namespace capsule {

using std::string;

OperatingSystem host_operating_system() {
#if defined(__linux__)
    return OperatingSystem::linux_os;
#elif defined(__APPLE__)
    return OperatingSystem::macos;
#elif defined(_WIN32)
    return OperatingSystem::windows;
#else
    return OperatingSystem::unknown;
#endif
}

Architecture host_architecture() {
#if defined(__x86_64__) || defined(_M_X64)
    return Architecture::x86_64;
#elif defined(__aarch64__)
    return Architecture::aarch64;
#else
    return Architecture::unknown;
#endif
}

ParameterMap load_graph_parameters(const Graph& graph) {
    if (!graph.parameters) return {};
    auto path = std::filesystem::path(*graph.parameters);
    if (path.is_relative() && !graph.source.empty()) path = graph.source.parent_path() / path;
    return read_safetensors(path);
}

using namespace detail;

namespace {

/// A locked plan's library must be the one opened: it is hashed when opened, so a file replaced
/// after planning (or after the lock's check above) is caught here.
void require_locked_library(const PlanLock& lock, const string& source, const string& plugin,
                            const LoadedPlugin& loaded) {
    for (const auto& g : lock.groups)
        if (g.plugin == plugin && g.library_sha256 != loaded.sha256)
            throw Error(ErrorCode::gate, "plan differs from lockfile " + source + ": plugin " + plugin +
                                             " library sha256: locked " + g.library_sha256 +
                                             ", opened " + loaded.sha256);
}

string node_label(const Node& n) {
    return "node " + std::to_string(n.id) + " (" + n.op_spelling() + ")";
}

/// The plugin that serves a non-CPU profile's device memory when the graph runs no kernel: the
/// first plugin of the profile's registry mode on that device (registry order). Raises Error(probe)
/// naming the stubs and refused plugins found instead.
const PluginRecord* device_plugin(const PluginHost& host, const BackendProfile& profile) {
    const Device device = profile.config.device;
    string seen;
    for (const auto& r : host.plugins()) {
        if (!r.manifest || r.manifest->device != device) continue;
        const auto& modes = r.manifest->registry_modes;
        if (std::find(modes.begin(), modes.end(), profile.registry_mode) == modes.end()) continue;
        if (r.status == PluginStatus::available || r.status == PluginStatus::loaded) return &r;
        seen += "; plugin " + r.name + " is " + r.status_text();
    }
    throw Error(ErrorCode::probe, "no usable plugin serves device " + string(to_string(device)) +
                     " in registry mode '" + profile.registry_mode + "' (the graph runs no kernel, "
                     "but its inputs and outputs live in that device's memory)" + seen);
}

}  // namespace

std::size_t Session::Impl::add_view(std::size_t slot) {
    const auto& s = slots[slot];
    capsule_tensor_view v{};
    v.struct_size = sizeof v;
    v.dtype = static_cast<int32_t>(s.type.dtype);
    v.device = static_cast<int32_t>(device);
    v.rank = static_cast<int32_t>(s.type.shape.size());
    v.shape = s.type.shape.data();
    v.strides = s.strides.data();
    views.push_back(v);
    view_slot.push_back(slot);
    return views.size() - 1;
}

std::size_t Session::Impl::add_slot(TensorType type, SlotKind kind) {
    Slot s;
    s.strides = contiguous_strides(type.shape);
    s.type = std::move(type);
    s.kind = kind;
    if (kind == SlotKind::arena) {
        // Sizes come from the graph: each is checked, and so is their sum. checked_byte_size
        // keeps a size below 2^63, so rounding it up cannot wrap a size_t; a rounded size or a
        // sum past 2^63-1 is refused by checked_add_sizes.
        const auto bytes = align_up(byte_size(s.type.shape, s.type.dtype));
        s.offset = arena_bytes;
        arena_bytes = static_cast<std::size_t>(checked_add_sizes(
            static_cast<std::int64_t>(arena_bytes), static_cast<std::int64_t>(bytes),
            "the total size in bytes of the graph's intermediate tensors (reached at one of "
            "shape " + to_string(s.type.shape) + " " + string(to_string(s.type.dtype)) + ")"));
    }
    slots.push_back(std::move(s));
    return slots.size() - 1;
}

Tensor Session::Impl::to_device(const Tensor& host) const {
    if (device == Device::cpu) return host;
    Tensor t = Tensor::on_device(host.dtype(), host.shape(), device, *device_interface);
    if (!host.nbytes()) return t;
    if (auto failure = call_plugin([&](capsule_status* st) {
            return device_interface->copy_to_device(t.data(), host.data(), host.nbytes(), st);
        }))
        throw Error(ErrorCode::other, "upload to " + string(to_string(device)) + " failed: " + *failure);
    return t;
}

ArenaPool::~ArenaPool() {
    for (auto& [size, buffers] : free_)
        for (auto* b : buffers) std::free(b);
}

std::shared_ptr<unsigned char> ArenaPool::take(const std::shared_ptr<ArenaPool>& pool, std::size_t bytes) {
    bytes = align_up(std::max(bytes, kArenaAlignment));
    unsigned char* p = nullptr;
    {
        std::lock_guard lock(pool->mutex_);
        auto& buffers = pool->free_[bytes];
        if (!buffers.empty()) {
            p = buffers.back();
            buffers.pop_back();
        }
    }
    if (!p) p = static_cast<unsigned char*>(std::aligned_alloc(kArenaAlignment, bytes));
    if (!p)
        throw Error(ErrorCode::other, "cannot allocate " + std::to_string(bytes) +
                             " bytes for the graph's intermediate tensors");
    return {p, [pool, bytes](unsigned char* q) {
                std::lock_guard lock(pool->mutex_);
                pool->free_[bytes].push_back(q);
            }};
}

std::shared_ptr<unsigned char> Session::Impl::allocate(std::size_t bytes, bool zero) const {
    bytes = std::max(bytes, kArenaAlignment);
    if (device == Device::cpu) {
        auto p = ArenaPool::take(arenas, bytes);
        if (zero) std::memset(p.get(), 0, bytes);
        return p;
    }
    auto t = Tensor::on_device(DType::boolean, {static_cast<std::int64_t>(bytes)}, device,
                               *device_interface);
    if (zero) {
        std::vector<unsigned char> zeros(bytes, 0);
        if (auto failure = call_plugin([&](capsule_status* st) {
                return device_interface->copy_to_device(t.data(), zeros.data(), bytes, st);
            }))
            throw Error(ErrorCode::other, "zero-filling device memory failed: " + *failure);
    }
    auto* p = static_cast<unsigned char*>(t.data());
    return {p, [t](unsigned char*) mutable { t = Tensor(); }};
}

Tensor Session::Impl::download(const TensorType& type, const void* src, const string& what) const {
    Tensor out = Tensor::zeros(type.dtype, type.shape);
    if (!out.nbytes()) return out;
    if (device == Device::cpu) {
        std::memcpy(out.data(), src, out.nbytes());
        return out;
    }
    if (auto failure = call_plugin([&](capsule_status* st) {
            return device_interface->copy_to_host(out.data(), src, out.nbytes(), st);
        }))
        throw Error(ErrorCode::other, "download of " + what + " failed: " + *failure);
    return out;
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

const std::vector<TensorSlot>& Session::inputs() const { return impl_->inputs; }
const std::vector<TensorSlot>& Session::outputs() const { return impl_->outputs; }

std::vector<CompiledGroupReport> Session::compiled_groups() const {
    std::vector<CompiledGroupReport> out;
    for (const auto& g : impl_->groups) {
        CompiledGroupReport report{*impl_->steps[g.first_step].plugin, {}, g.fused};
        for (std::size_t s = g.first_step; s < g.first_step + g.num_steps; ++s)
            report.node_ids.push_back(impl_->steps[s].node_id);
        out.push_back(std::move(report));
    }
    return out;
}

std::vector<string> Session::kernel_trace() const {
    std::vector<string> out;
    for (const auto& s : impl_->steps) out.push_back(s.capsule->name);
    return out;
}

std::size_t Session::Impl::num_calls() const {
    std::size_t n = steps.size();
    for (const auto& g : groups) n -= g.num_steps - 1;
    return n;
}

std::vector<SessionStep> Session::steps() const {
    const Impl& m = *impl_;
    std::vector<SessionStep> out;
    out.reserve(m.num_calls());
    m.for_each_call(true, [&](std::size_t i, const CompiledGroup* group) {
        const auto& s = m.steps[i];
        SessionStep step{s.node_id, s.capsule->op, s.capsule->name, s.capsule->provider, *s.plugin, {}, {}};
        if (group) {
            step.fused = group->fused;
            for (std::size_t k = i; k < i + group->num_steps; ++k) {
                step.group_nodes.push_back(m.steps[k].node_id);
                if (k > i) step.capsule += "+" + m.steps[k].capsule->name;
            }
        }
        out.push_back(std::move(step));
    });
    return out;
}

namespace {
/// A plan not made by plan_graph (a hand-made or edited one) may put a node on a capsule whose
/// kernel does not declare the node's dtypes; it never reaches the kernel.
void require_declared_dtypes(const Graph& graph, const std::unordered_map<std::int64_t, std::size_t>& position,
                             const Node& node, const KernelCapsule& capsule) {
    auto check = [&](DType dtype, const string& what) {
        if (!(capsule.dtypes >> static_cast<unsigned>(dtype) & 1))
            throw Error(ErrorCode::planning, "the accepted plan puts node " + std::to_string(node.id) + " on capsule " +
                                                 capsule.name + ", which does not accept dtype " +
                                                 string(to_string(dtype)) + " (" + what + ")");
    };
    check(node.dtype, "its output");
    for (auto p : node.parents) check(graph.nodes[position.at(p)].dtype, "parent " + std::to_string(p));
}

/// Gives each step its state from prepare_steps (one per step), releasing the one it had.
void install_states(Session::Impl& m, const std::vector<void*>& states) {
    for (std::size_t s = 0; s < m.steps.size(); ++s) {
        auto& step = m.steps[s];
        if (step.state && step.release) step.release(step.state);
        step.state = states[s];
    }
}
}  // namespace

Session Session::create(const BackendProfile& profile, const AcceptedPlan& plan,
                        const Graph& graph, const PluginHost& host,
                        const ParameterMap& parameters, const SessionOptions& options) {
    check_host_matches_target(profile);
    auto impl = std::make_unique<Impl>();
    impl->profile_name = profile.name;
    impl->vjp_mode = profile.config.vjp_mode;
    impl->fpmath = profile.config.fpmath;
    impl->input_gradients = options.input_gradients;
    impl->device = profile.config.device;

    // Which capsule runs each node, from the accepted plan.
    // Per-node tables are indexed by the node's position in the graph (one hash lookup per id).
    const auto position = node_positions(graph);
    std::vector<const KernelCapsule*> capsule_at(graph.nodes.size(), nullptr);
    for (const auto& group : plan.plan().groups)
        for (auto id : group.node_ids) {
            auto index = position.find(id);
            if (index == position.end() || graph.nodes[index->second].op != group.op)
                throw Error(ErrorCode::input, "the accepted plan does not match the graph: node " +
                                 std::to_string(id) + " is not a " + string(to_string(group.op)) +
                                 " node of " + graph.source.string());
            if (capsule_at[index->second])
                throw Error(ErrorCode::input, "the accepted plan lists node " + std::to_string(id) + " twice");
            capsule_at[index->second] = group.capsule.get();
            require_declared_dtypes(graph, position, graph.nodes[index->second], *group.capsule);
        }

    if (options.lock) {
        // The session sees the graph, not the files or the import it came from: those parts of
        // the lock are its caller's to compare (capsule run --lock does).
        auto current = make_plan_lock(profile, plan.plan(), host, options.lock->folded);
        current.model_files = options.lock->model_files;
        require_plan_lock(*options.lock, current, options.lock_source);
    }

    // Open and probe every plugin the plan uses, once; bind each distinct capsule's kernel once.
    std::unordered_map<const KernelCapsule*, detail::BoundKernel> kernel_of;
    std::map<string, detail::BoundKernel> used;
    for (const auto& group : plan.plan().groups) {
        const auto& k = group.capsule;
        if (kernel_of.count(k.get())) continue;
        if (k->device != impl->device)
            throw Error(ErrorCode::probe, "capsule " + k->name + " runs on " + string(to_string(k->device)) +
                             ", the profile's device is " + string(to_string(impl->device)));
        auto bound = bind_kernel(host, *k, options.allow_test_only);
        used.emplace(bound.record->name, bound);
        kernel_of.emplace(k.get(), std::move(bound));
    }
    // A graph that needs no kernel still moves its inputs and outputs through the device's memory:
    // a plugin of the profile's registry must serve the device.
    if (impl->device != Device::cpu && used.empty()) {
        const auto* record = device_plugin(host, profile);
        used.emplace(record->name, detail::BoundKernel{record, open_plugin(host, *record), nullptr});
    }
    for (const auto& [name, bound] : used) {
        if (options.lock) require_locked_library(*options.lock, options.lock_source, name, *bound.plugin);
        require_usable(*bound.record, *bound.plugin);
        impl->plugins.push_back(bound.plugin);
        if (impl->device != Device::cpu && !impl->device_interface)
            impl->device_interface = bound.plugin->table->device_interface;
    }
    if (impl->device != Device::cpu && !impl->device_interface)
        throw Error(ErrorCode::probe, "no plugin supplies memory for device " + string(to_string(impl->device)));

    // Slots, views and steps in graph order.
    constexpr auto kNoSlot = static_cast<std::size_t>(-1);
    std::vector<std::size_t> slot_at(graph.nodes.size(), kNoSlot);
    // The slot of an earlier node's value.
    auto slot_of = [&](std::int64_t id, const Node& reader) {
        auto index = position.find(id);
        if (index == position.end() || slot_at[index->second] == kNoSlot)
            throw Error(ErrorCode::input, node_label(reader) + ": parent " + std::to_string(id) +
                             " is not an earlier node of " + graph.source.string());
        return slot_at[index->second];
    };
    impl->slots.reserve(graph.nodes.size() + parameters.size());
    impl->views.reserve(2 * graph.nodes.size());
    impl->view_slot.reserve(2 * graph.nodes.size());
    impl->steps.reserve(graph.nodes.size());
    std::set<string> used_parameters;
    auto fixed_slot = [&](const ParameterSpec& spec, const Node& node) {
        auto it = parameters.find(spec.key);
        if (it == parameters.end())
            throw Error(ErrorCode::input, node_label(node) + ": parameter '" + spec.key +
                             "' is missing from the parameters file");
        const Tensor& t = it->second;
        if (t.dtype() != spec.type.dtype || t.shape() != spec.type.shape)
            throw Error(ErrorCode::input, node_label(node) + ": parameter '" + spec.key + "' is " +
                             string(to_string(t.dtype())) + to_string(t.shape()) + ", expected " +
                             string(to_string(spec.type.dtype)) + to_string(spec.type.shape));
        used_parameters.insert(spec.key);
        impl->fixed_storage.push_back(impl->to_device(t));
        impl->parameter_storage[spec.key] = impl->fixed_storage.back();
        auto slot = impl->add_slot(spec.type, SlotKind::fixed);
        impl->slots[slot].fixed = impl->fixed_storage.back().data();
        return slot;
    };
    std::vector<TensorType> parent_types;
    for (std::size_t at = 0; at < graph.nodes.size(); ++at) {
        const auto& node = graph.nodes[at];
        parent_types.clear();
        for (auto p : node.parents) parent_types.push_back(impl->slots[slot_of(p, node)].type);
        TensorType type{node.shape, node.dtype};
        auto specs = parameter_specs(node, parent_types);
        switch (node.kind) {
            case NodeKind::input: {
                auto slot = impl->add_slot(type, SlotKind::input);
                impl->slots[slot].input_index = impl->inputs.size();
                impl->inputs.push_back({node.parameter_prefix(), node.id, type});
                impl->input_slots.push_back(slot);
                slot_at[at] = slot;
                continue;
            }
            case NodeKind::constant: slot_at[at] = fixed_slot(specs.at(0), node); continue;
            case NodeKind::detach:
                slot_at[at] = slot_of(node.parents.at(0), node);
                impl->detach_nodes.insert(node.id);
                continue;
            case NodeKind::op: break;
        }
        const KernelCapsule* capsule = capsule_at[at];
        if (!capsule)
            throw Error(ErrorCode::input, "the accepted plan does not cover " + node_label(node) +
                             "; was it planned from another graph?");
        const auto& bound = kernel_of.at(capsule);
        const capsule_kernel* kernel = bound.kernel;
        Step step;
        step.node_id = node.id;
        step.capsule = capsule;
        step.plugin = &bound.record->name;
        step.forward = kernel->forward;
        step.backward = kernel->backward;
        step.prepare = kernel->prepare;
        step.release = kernel->release;
        step.groups = bound.plugin->compiled_groups;
        step.autograd = bound.plugin->group_autograd;
        step.first_input = impl->views.size();
        for (auto p : node.parents) impl->add_view(slot_of(p, node));
        step.num_inputs = node.parents.size();
        step.parents = node.parents;
        std::vector<std::size_t> param_slots;
        for (const auto& spec : specs) {
            param_slots.push_back(fixed_slot(spec, node));
            step.param_keys.push_back(spec.key);
        }
        step.first_param = impl->views.size();
        for (auto s : param_slots) impl->add_view(s);
        step.num_params = param_slots.size();
        auto out = impl->add_slot(std::move(type), SlotKind::arena);
        step.output = impl->add_view(out);
        if (!node.attrs.empty()) step.attrs = std::make_unique<AttributeViews>(node.attrs);
        slot_at[at] = out;
        impl->steps.push_back(std::move(step));
    }
    std::vector<string> unused;
    for (const auto& [key, t] : parameters)
        if (!used_parameters.count(key)) unused.push_back(key);
    if (!unused.empty()) {
        string list;
        for (const auto& k : unused) list += (list.empty() ? "" : ", ") + k;
        throw Error(ErrorCode::input, "the parameters file holds tensors that no node uses: " + list);
    }
    const auto names = output_names(graph);
    for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
        const auto id = graph.outputs[i];
        const auto& node = graph.nodes[position.at(id)];
        impl->outputs.push_back({names[i], id, TensorType{node.shape, node.dtype}});
        impl->output_slots.push_back(slot_of(id, node));
        impl->output_lengths.emplace_back();
        for (const auto& l : graph.output_lengths) {
            if (l.output != id) continue;
            // As check_graph: a graph built in code may not have been through it.
            const auto length = position.find(l.length_node);
            if (l.axis < 0 || l.axis >= static_cast<std::int64_t>(node.shape.size()) || length == position.end() ||
                graph.nodes[length->second].dtype != DType::int64 || !graph.nodes[length->second].shape.empty())
                throw Error(ErrorCode::input, "output_lengths of output " + std::to_string(id) + ": axis " +
                                                  std::to_string(l.axis) + " of " + to_string(node.shape) +
                                                  " and length node " + std::to_string(l.length_node) +
                                                  " (an int64 scalar) do not fit the graph");
            impl->output_lengths.back() = Impl::OutputLength{static_cast<std::size_t>(l.axis),
                                                             slot_of(l.length_node, graph.nodes[length->second])};
        }
    }
    // Stable view pointers: the slots are all made, so their shapes and strides stay put.
    for (std::size_t v = 0; v < impl->views.size(); ++v) {
        const auto& s = impl->slots[impl->view_slot[v]];
        impl->views[v].shape = s.type.shape.data();
        impl->views[v].strides = s.strides.data();
    }
    if (options.threads < 0 || options.threads > SessionOptions::kMaxThreads)
        throw Error(ErrorCode::input, "session threads must be 0 (every core) to " +
                                          std::to_string(SessionOptions::kMaxThreads) + ", got " +
                                          std::to_string(options.threads));
    impl->threads = options.threads > 0 ? options.threads
                                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    // A compiled group is one backend call for consecutive nodes: what coalesced lowering means.
    impl->compiles_groups = options.compile_groups && profile.lowering_mode == LoweringMode::coalesced;
    if (impl->compiles_groups) impl->groups = compile_groups(*impl, impl->threads);
    impl->backward = build_backward_program(*impl, graph, position);
    install_states(*impl, impl->prepare_steps(impl->steps_without_state(impl->groups)));
    return Session(std::move(impl));
}

namespace {
/// The first step of the first group that `a` and `b` do not both hold with the same steps, or
/// nothing when they replace the same steps.
std::optional<std::size_t> first_group_difference(const std::vector<CompiledGroup>& a,
                                                  const std::vector<CompiledGroup>& b) {
    const std::size_t common = std::min(a.size(), b.size());
    for (std::size_t g = 0; g < common; ++g)
        if (a[g].first_step != b[g].first_step || a[g].num_steps != b[g].num_steps)
            return std::min(a[g].first_step, b[g].first_step);
    if (a.size() != b.size()) return (a.size() > common ? a : b)[common].first_step;
    return std::nullopt;
}
}  // namespace

void Session::refresh_parameters() {
    Impl& m = *impl_;
    // The new states and executables are made before the old ones go, so that a failure leaves
    // the session as it was.
    std::vector<CompiledGroup> groups;
    if (m.compiles_groups) groups = compile_groups(m, m.threads);
    // A plugin may decline a group for its weights' values (oneDNN's, for a non-finite weight).
    // Only external autograd's backward program is built on the groups; elsewhere the steps of
    // a declined group simply run one by one.
    const auto differs = first_group_difference(groups, m.groups);
    if (differs && m.vjp_mode == VJPMode::external_autograd) {
        release_groups(groups);
        const auto& step = m.steps[*differs];
        throw Error(ErrorCode::other, "refreshing the parameters: plugin " + *step.plugin +
                                          " compiled other groups than at session creation, from node " +
                                          std::to_string(step.node_id) + " (" + string(to_string(step.capsule->op)) +
                                          "); under VJP mode external-autograd the backward program is built "
                                          "on them: create a new session");
    }
    std::vector<void*> states;
    try {
        states = m.prepare_steps(m.steps_without_state(groups));
    } catch (...) {
        release_groups(groups);
        throw;
    }
    release_groups(m.groups);
    m.groups = std::move(groups);
    install_states(m, states);
    ++m.parameter_generation;
}

Session::Impl::~Impl() {
    release_groups(groups);
    for (auto& step : steps)
        if (step.state && step.release) step.release(step.state);
}

std::vector<bool> Session::Impl::steps_without_state(const std::vector<CompiledGroup>& compiled) const {
    // Without a backward on the host's tape (none, or the provider's autograd records the group),
    // a grouped node's own kernel never runs.
    std::vector<bool> skip(steps.size(), false);
    if (!backward.refusal.empty() || vjp_mode == VJPMode::external_autograd)
        for (const auto& group : compiled)
            std::fill_n(skip.begin() + static_cast<std::ptrdiff_t>(group.first_step), group.num_steps, true);
    return skip;
}

std::vector<void*> Session::Impl::prepare_steps(const std::vector<bool>& skip) const {
    std::vector<void*> states(steps.size(), nullptr);
    auto release_made = [&] {
        for (std::size_t s = states.size(); s-- > 0;)
            if (states[s] && steps[s].release) steps[s].release(states[s]);
    };
    for (std::size_t s = 0; s < steps.size(); ++s) {
        const auto& step = steps[s];
        if (!step.prepare || skip[s]) continue;
        // Inputs and outputs: shapes and dtypes only. Parameters: their data (fixed until release).
        std::vector<capsule_tensor_view> in(views.begin() + static_cast<std::ptrdiff_t>(step.first_input),
                                            views.begin() + static_cast<std::ptrdiff_t>(step.first_input + step.num_inputs));
        std::vector<capsule_tensor_view> params(views.begin() + static_cast<std::ptrdiff_t>(step.first_param),
                                                views.begin() + static_cast<std::ptrdiff_t>(step.first_param + step.num_params));
        for (std::size_t i = 0; i < params.size(); ++i)
            params[i].data = const_cast<void*>(slots[view_slot[step.first_param + i]].fixed);
        capsule_tensor_view out = views[step.output];
        capsule_prepare_args args{};
        args.struct_size = sizeof args;
        args.inputs = in.data();
        args.num_inputs = in.size();
        args.params = params.data();
        args.num_params = params.size();
        args.outputs = &out;
        args.num_outputs = 1;
        args.attrs = step.attrs ? step.attrs->data() : nullptr;
        args.num_attrs = step.attrs ? step.attrs->size() : 0;
        args.num_threads = threads;
        args.fpmath = fpmath == FpMath::bf16 ? CAPSULE_FPMATH_BF16 : CAPSULE_FPMATH_STRICT;
        void* state = nullptr;
        if (auto failure = call_plugin([&](capsule_status* st) { return step.prepare(&args, &state, st); })) {
            release_made();
            throw Error(ErrorCode::other, "preparing node " + std::to_string(step.node_id) + " (" +
                                 string(to_string(step.capsule->op)) + ") failed in capsule " +
                                 step.capsule->name + " of plugin " + *step.plugin + ": " + *failure);
        }
        states[s] = state;
    }
    return states;
}

std::vector<Tensor> Session::Impl::bind_inputs(const std::map<string, Tensor>& given) const {
    // Inputs: every graph input present, typed as declared; nothing unknown.
    std::vector<Tensor> bound(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const auto& want = inputs[i];
        const std::string id = std::to_string(want.node_id);
        auto it = given.find(want.name);  // by name, or by id (docs/ops.md)
        if (it != given.end() && want.name != id && given.count(id))
            throw Error(ErrorCode::input, "input '" + want.name + "' given twice: by name and by id " + id);
        if (it == given.end()) it = given.find(id);
        if (it == given.end()) throw Error(ErrorCode::input, "missing input '" + want.name + "'");
        const Tensor& t = it->second;
        if (t.device() != Device::cpu) throw Error(ErrorCode::input, "input '" + want.name + "' must be a host tensor");
        if (t.dtype() != want.type.dtype || t.shape() != want.type.shape)
            throw Error(ErrorCode::input, "input '" + want.name + "' is " + string(to_string(t.dtype())) +
                             to_string(t.shape()) + ", the graph declares " +
                             string(to_string(want.type.dtype)) + to_string(want.type.shape));
        bound[i] = to_device(t);
    }
    if (given.size() != inputs.size())
        for (const auto& [name, t] : given) {
            bool known = false;
            for (const auto& slot : inputs)
                known = known || slot.name == name || std::to_string(slot.node_id) == name;
            if (!known) throw Error(ErrorCode::input, "unknown input '" + name + "'");
        }
    return bound;
}

std::vector<void*> Session::Impl::slot_data(const std::vector<Tensor>& bound,
                                            unsigned char* arena) const {
    std::vector<void*> data(slots.size());
    for (std::size_t s = 0; s < slots.size(); ++s) {
        const auto& slot = slots[s];
        switch (slot.kind) {
            case SlotKind::input: data[s] = const_cast<void*>(bound[slot.input_index].data()); break;
            case SlotKind::fixed: data[s] = const_cast<void*>(slot.fixed); break;
            case SlotKind::arena: data[s] = arena + slot.offset; break;
        }
    }
    return data;
}

void Session::Impl::execute(const std::vector<void*>& data, bool compiled, RunTimings::Step* timings,
                            std::chrono::steady_clock::time_point start) const {
    std::vector<capsule_tensor_view> run_views(views);
    for (std::size_t v = 0; v < run_views.size(); ++v) run_views[v].data = data[view_slot[v]];
    for_each_call(compiled, [&](std::size_t s, const CompiledGroup* group) {
        std::chrono::steady_clock::time_point begin;
        if (timings) begin = std::chrono::steady_clock::now();
        if (group)
            run_group(*this, *group, data);
        else
            execute_step(steps[s], run_views);
        if (timings) *timings++ = {begin - start, std::chrono::steady_clock::now() - begin};
    });
}

void Session::Impl::execute_step(const Step& step, std::vector<capsule_tensor_view>& run_views) const {
    capsule_forward_args args{};
    args.struct_size = sizeof args;
    args.inputs = run_views.data() + step.first_input;
    args.num_inputs = step.num_inputs;
    args.params = run_views.data() + step.first_param;
    args.num_params = step.num_params;
    args.outputs = run_views.data() + step.output;
    args.num_outputs = 1;
    args.attrs = step.attrs ? step.attrs->data() : nullptr;
    args.num_attrs = step.attrs ? step.attrs->size() : 0;
    args.state = step.state;
    if (auto failure = call_plugin_coded([&](capsule_status* st) { return step.forward(&args, st); }))
        throw Error(run_failure_code(failure->code), "node " + std::to_string(step.node_id) + " (" +
                             string(to_string(step.capsule->op)) + ") failed in capsule " +
                             step.capsule->name + " of plugin " + *step.plugin + ": " + failure->text);
}

namespace {
/// The first `n` entries of `t` along `axis`.
Tensor leading_entries(const Tensor& t, std::size_t axis, std::int64_t n) {
    Shape shape = t.shape();
    const std::int64_t full = shape[axis];
    shape[axis] = n;
    Tensor out = Tensor::zeros(t.dtype(), shape);
    std::int64_t outer = 1, inner = static_cast<std::int64_t>(dtype_size(t.dtype()));
    for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
    for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    const auto* src = static_cast<const char*>(t.data());
    auto* dst = static_cast<char*>(out.data());
    for (std::int64_t o = 0; o < outer && n > 0; ++o)
        std::memcpy(dst + o * n * inner, src + o * full * inner, static_cast<std::size_t>(n * inner));
    return out;
}
}  // namespace

std::vector<Tensor> Session::Impl::collect_outputs(const std::vector<void*>& data) const {
    std::vector<Tensor> results;
    for (std::size_t o = 0; o < outputs.size(); ++o) {
        const string what = "output '" + outputs[o].name + "'";
        Tensor full = download(outputs[o].type, data[output_slots[o]], what);
        const auto& length = output_lengths[o];
        if (!length) {
            results.push_back(std::move(full));
            continue;
        }
        const Tensor n = download(TensorType{{}, DType::int64}, data[length->slot], what + "'s length");
        const std::int64_t count = *static_cast<const std::int64_t*>(n.data());
        const std::int64_t bound = outputs[o].type.shape[length->axis];
        if (count < 0 || count > bound)
            throw Error(ErrorCode::other, what + ": its length node gave " + std::to_string(count) +
                                                ", outside 0.." + std::to_string(bound) + " along axis " +
                                                std::to_string(length->axis));
        results.push_back(leading_entries(full, length->axis, count));
    }
    return results;
}

namespace {
/// One forward run; times it into `timings` when given.
std::vector<Tensor> forward_run(const Session::Impl& m, const std::map<string, Tensor>& inputs,
                                RunTimings* timings) {
    if (timings) {
        timings->start = std::chrono::steady_clock::now();
        timings->steps.assign(m.num_calls(), {});
    }
    const auto bound = m.bind_inputs(inputs);
    // One arena per run: runs on different threads never share intermediate buffers.
    const auto arena = m.allocate(m.arena_bytes, false);
    const auto data = m.slot_data(bound, arena.get());
    m.execute(data, true, timings ? timings->steps.data() : nullptr,
              timings ? timings->start : std::chrono::steady_clock::time_point{});
    auto outputs = m.collect_outputs(data);
    if (timings) timings->total = std::chrono::steady_clock::now() - timings->start;
    return outputs;
}
}  // namespace

std::vector<Tensor> Session::run(const std::map<string, Tensor>& inputs) const {
    return forward_run(*impl_, inputs, nullptr);
}

std::vector<Tensor> Session::run(const std::map<string, Tensor>& inputs, RunTimings& timings) const {
    return forward_run(*impl_, inputs, &timings);
}

}  // namespace capsule
