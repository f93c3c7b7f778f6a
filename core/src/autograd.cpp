// Autograd for sessions (DESIGN.md section 5): under VJP modes `torchlean-tape` and `backend-vjp`
// a recorded forward run keeps its intermediate tensors (the tape), and `backward` calls each
// capsule's backward kernel in reverse execution order. Everything that depends only on the
// graph's structure (which values need gradients, where each gradient lives, which kernel call
// writes it directly and which must be summed into it for fan-out) is decided once, at session
// creation, in a BackwardProgram; a backward pass only patches pointers and calls kernels.
#include <cstring>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "compiled_groups.hpp"
#include "kernel_binding.hpp"
#include "session_impl.hpp"

namespace capsule {

using std::string;
using namespace detail;

namespace {

bool is_float(DType d) { return d == DType::float32 || d == DType::float64; }


string vjp_refusal(const string& profile, VJPMode mode) {
    if (mode == VJPMode::none)
        return "profile " + profile + " has VJP mode none (inference only): backward is refused; "
               "use a profile whose VJP mode is torchlean-tape or backend-vjp";
    return {};
}

/// Builds the program while walking the graph; `region_` gives each differentiable value (a
/// node output, by the node's position in the graph, or a parameter key) its place in the
/// gradient arena. Per-node tables are vectors indexed by position: linear time and a few bytes
/// per node.
class ProgramBuilder {
public:
    ProgramBuilder(const Session::Impl& impl, const Graph& graph,
                   const std::unordered_map<std::int64_t, std::size_t>& positions)
        : impl_(impl), graph_(graph), position_(positions) {}

    BackwardProgram build() {
        program_.refusal = vjp_refusal(impl_.profile_name, impl_.vjp_mode);
        const auto n = graph_.nodes.size();
        region_.assign(n, kNone);
        reached_.assign(n, false);
        initialized_.assign(n, false);
        step_at_.assign(n, kNone);
        for (std::size_t s = 0; s < impl_.steps.size(); ++s)
            if (auto p = at(impl_.steps[s].node_id)) step_at_[*p] = s;
        mark_differentiable_values();
        mark_reached_values();
        seed_outputs();
        if (impl_.vjp_mode == VJPMode::external_autograd) {
            add_group_steps();
        } else {
            for (std::size_t s = impl_.steps.size(); s-- > 0;)
                if (auto p = at(impl_.steps[s].node_id); p && reached_[*p]) add_step(s, *p);
        }
        collect_results();
        if (program_.refusal.empty() && impl_.device != Device::cpu && accumulates_)
            program_.refusal = "gradient accumulation (a value used more than once) is only "
                               "implemented for cpu sessions, this one runs on " +
                               string(to_string(impl_.device));
        return std::move(program_);
    }

private:
    static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

    /// Position of the node with this id (sessions are built from checked graphs: ids resolve).
    std::optional<std::size_t> at(std::int64_t id) const {
        auto it = position_.find(id);
        if (it == position_.end()) return std::nullopt;
        return it->second;
    }
    bool has_region(std::int64_t id) const {
        auto p = at(id);
        return p && region_[*p] != kNone;
    }

    std::size_t new_region(const Shape& shape, DType dtype) {
        const auto offset = program_.grad_bytes;
        program_.grad_bytes = add_size(program_.grad_bytes, align_up(byte_size(shape, dtype)));
        return offset;
    }

    /// a + b; past 2^63-1 bytes, backward is refused (forward runs are unaffected).
    std::size_t add_size(std::size_t a, std::size_t b) {
        if (auto sum = try_add_sizes(static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)))
            return static_cast<std::size_t>(*sum);
        if (program_.refusal.empty())
            program_.refusal = "the gradients of this graph would take more than 2^63-1 bytes";
        return a;
    }

    // A value needs a gradient when it is a float input, or a float op output computed from a
    // value that needs one or from parameters. Constants and detach nodes stop gradients. Every
    // float parameter of such a node gets a gradient (zero when no output depends on it).
    void mark_differentiable_values() {
        for (std::size_t p = 0; p < graph_.nodes.size(); ++p) {
            const auto& node = graph_.nodes[p];
            const Step* step = step_at_[p] == kNone ? nullptr : &impl_.steps[step_at_[p]];
            bool needs = false;
            if (node.kind == NodeKind::input) {
                needs = impl_.input_gradients && is_float(node.dtype);
            } else if (node.kind == NodeKind::op && step && is_float(node.dtype) &&
                       !op_needs_no_vjp(*node.op)) {
                needs = !step->param_keys.empty();
                for (auto parent : node.parents) needs = needs || has_region(parent);
            }
            if (!needs) continue;
            region_[p] = new_region(node.shape, node.dtype);
            if (node.kind != NodeKind::op) continue;
            for (std::size_t i = 0; i < step->num_params; ++i) {
                const auto& type = impl_.slots[impl_.view_slot[step->first_param + i]].type;
                if (is_float(type.dtype) && !param_region_.count(step->param_keys[i])) {
                    param_region_[step->param_keys[i]] = new_region(type.shape, type.dtype);
                    param_type_[step->param_keys[i]] = type;
                }
            }
        }
    }

    // Only steps whose output some graph output depends on are differentiated.
    void mark_reached_values() {
        for (auto id : graph_.outputs)
            if (auto p = at(id); p && region_[*p] != kNone) reached_[*p] = true;
        for (std::size_t s = impl_.steps.size(); s-- > 0;) {
            const auto& step = impl_.steps[s];
            auto p = at(step.node_id);
            if (!p || !reached_[*p]) continue;
            ++reached_steps_;
            for (auto parent : step.parents)
                if (auto q = at(parent); q && region_[*q] != kNone) reached_[*q] = true;
        }
    }

    void seed_outputs() {
        for (std::size_t o = 0; o < graph_.outputs.size(); ++o) {
            auto p = at(graph_.outputs[o]);
            if (!p || region_[*p] == kNone) continue;
            const bool accumulate = initialized_[*p];
            initialized_[*p] = true;
            accumulates_ = accumulates_ || accumulate;
            program_.seeds.push_back({o, region_[*p], accumulate});
        }
    }

    /// The first write into a gradient goes straight to its region; later ones go to scratch
    /// and are summed in after the kernel returns. `first`: no earlier write into it.
    GradTarget target(bool first, std::size_t region, const Shape& shape, DType dtype,
                      std::size_t view, std::size_t& scratch) {
        GradTarget t;
        t.region = region;
        t.view = view;
        if (first) {
            t.kind = GradTarget::Kind::direct;
        } else {
            t.kind = GradTarget::Kind::accumulate;
            t.scratch = scratch;
            scratch = add_size(scratch, align_up(byte_size(shape, dtype)));
            accumulates_ = true;
        }
        return t;
    }

    void add_step(std::size_t s, std::size_t p) {
        const auto& step = impl_.steps[s];
        if (!step.backward && program_.refusal.empty())
            program_.refusal = "node " + std::to_string(step.node_id) + " (" +
                               string(to_string(step.capsule->op)) + ") runs capsule " +
                               step.capsule->name + ", which has no backward kernel";
        if (program_.steps.empty()) program_.steps.reserve(reached_steps_);
        BackwardStep b;
        b.step = s;
        b.grad_output_region = region_[p];
        std::size_t scratch = 0;
        b.inputs.reserve(step.num_inputs);
        for (std::size_t i = 0; i < step.num_inputs; ++i) {
            auto q = at(step.parents[i]);
            if (!q || region_[*q] == kNone) {
                b.inputs.emplace_back();
                continue;
            }
            const Node& parent = graph_.nodes[*q];
            const bool first = !initialized_[*q];
            initialized_[*q] = true;
            b.inputs.push_back(target(first, region_[*q], parent.shape, parent.dtype,
                                      step.first_input + i, scratch));
        }
        for (std::size_t i = 0; i < step.num_params; ++i) {
            const auto& key = step.param_keys[i];
            const auto& type = impl_.slots[impl_.view_slot[step.first_param + i]].type;
            if (!is_float(type.dtype)) {
                b.params.emplace_back();
                continue;
            }
            b.params.push_back(target(initialized_params_.insert(key).second, param_region_.at(key),
                                      type.shape, type.dtype, step.first_param + i, scratch));
        }
        program_.scratch_bytes = std::max(program_.scratch_bytes, scratch);
        program_.steps.push_back(std::move(b));
    }

    /// External autograd: every step a gradient flows through must sit in a compiled group that
    /// its provider's autograd records; each such group is one backward call, in reverse order.
    void add_group_steps() {
        program_.record_flags.assign(impl_.groups.size(), {});
        std::vector<std::size_t> group_of(impl_.steps.size(), kNone);
        for (std::size_t g = 0; g < impl_.groups.size(); ++g)
            for (std::size_t k = 0; k < impl_.groups[g].num_steps; ++k) group_of[impl_.groups[g].first_step + k] = g;
        for (std::size_t s = 0; s < impl_.steps.size() && program_.refusal.empty(); ++s) {
            const auto& step = impl_.steps[s];
            auto p = at(step.node_id);
            if (!p || !reached_[*p] || (group_of[s] != kNone && impl_.groups[group_of[s]].autograd)) continue;
            program_.refusal =
                "node " + std::to_string(step.node_id) + " (" + string(to_string(step.capsule->op)) +
                ") runs capsule " + step.capsule->name + " of plugin " + *step.plugin +
                " outside a group its provider's autograd records (VJP mode external-autograd needs the "
                "plugin's group-autograd extension and compiled groups, which SessionOptions::compile_groups "
                "and lowering mode coalesced enable)";
        }
        for (std::size_t g = impl_.groups.size(); g-- > 0;) {
            const auto& group = impl_.groups[g];
            bool reached = false;
            for (std::size_t k = 0; k < group.num_steps; ++k)
                if (auto p = at(impl_.steps[group.first_step + k].node_id)) reached = reached || reached_[*p];
            if (group.autograd && reached) add_group(g);
        }
    }

    void add_group(std::size_t g) {
        const auto& group = impl_.groups[g];
        GroupBackwardStep b;
        b.group = g;
        auto& flags = program_.record_flags[g];
        flags.record = true;
        flags.values.assign(group.values.size(), 0);
        std::size_t scratch = 0;
        for (std::size_t v = 0; v < group.values.size(); ++v) {
            auto p = at(group.value_nodes[v]);
            GradTarget t;
            t.view = group.value_views[v];
            if (p && region_[*p] != kNone && group.roles[v] == CAPSULE_VALUE_OUTPUT && initialized_[*p]) {
                t.kind = GradTarget::Kind::direct;  // the upstream gradient, read by the plugin
                t.region = region_[*p];
            } else if (p && region_[*p] != kNone && group.roles[v] == CAPSULE_VALUE_INPUT) {
                const Node& node = graph_.nodes[*p];
                t = target(!initialized_[*p], region_[*p], node.shape, node.dtype, t.view, scratch);
                initialized_[*p] = true;
                flags.values[v] = 1;
            }
            b.values.push_back(t);
        }
        for (std::size_t k = 0; k < group.num_steps; ++k) {
            const auto& step = impl_.steps[group.first_step + k];
            auto p = at(step.node_id);
            const bool reached = p && reached_[*p];
            for (std::size_t i = 0; i < step.num_params; ++i) {
                const auto& key = step.param_keys[i];
                const auto& type = impl_.slots[impl_.view_slot[step.first_param + i]].type;
                if (!reached || !is_float(type.dtype) || !param_region_.count(key)) {
                    b.params.emplace_back();
                    flags.params.push_back(0);
                    continue;
                }
                b.params.push_back(target(initialized_params_.insert(key).second, param_region_.at(key),
                                          type.shape, type.dtype, step.first_param + i, scratch));
                flags.params.push_back(1);
            }
        }
        program_.scratch_bytes = std::max(program_.scratch_bytes, scratch);
        program_.group_steps.push_back(std::move(b));
    }

    void collect_results() {
        for (std::size_t i = 0; i < impl_.inputs.size(); ++i) {
            const auto& in = impl_.inputs[i];
            if (auto p = at(in.node_id); p && region_[*p] != kNone)
                program_.input_grads.push_back({in.name, region_[*p], in.type});
        }
        for (const auto& [key, region] : param_region_)
            program_.param_grads.push_back({key, region, param_type_.at(key)});
    }

    const Session::Impl& impl_;
    const Graph& graph_;
    const std::unordered_map<std::int64_t, std::size_t>& position_;
    BackwardProgram program_;
    std::vector<std::size_t> region_;  // per node position: gradient offset, or kNone
    std::vector<bool> reached_;        // per node position: some graph output depends on it
    std::vector<bool> initialized_;    // per node position: its gradient was written already
    std::vector<std::size_t> step_at_; // per node position: its step, or kNone
    std::size_t reached_steps_ = 0;
    std::map<string, std::size_t> param_region_;
    std::map<string, TensorType> param_type_;
    std::unordered_set<string> initialized_params_;  // parameter gradients written already
    bool accumulates_ = false;
};

/// dst += src, elementwise, for a float gradient (host memory).
void accumulate(void* dst, const void* src, const TensorType& type) {
    const auto n = static_cast<std::size_t>(element_count(type.shape));
    if (type.dtype == DType::float32) {
        auto* d = static_cast<float*>(dst);
        const auto* s = static_cast<const float*>(src);
        for (std::size_t i = 0; i < n; ++i) d[i] += s[i];
    } else {
        auto* d = static_cast<double*>(dst);
        const auto* s = static_cast<const double*>(src);
        for (std::size_t i = 0; i < n; ++i) d[i] += s[i];
    }
}

}  // namespace

BackwardProgram detail::build_backward_program(
    const Session::Impl& impl, const Graph& graph,
    const std::unordered_map<std::int64_t, std::size_t>& positions) {
    return ProgramBuilder(impl, graph, positions).build();
}

struct Tape::State {
    const Session::Impl* owner = nullptr;
    std::uint64_t parameter_generation = 0;  // the owner's when recorded (refresh_parameters)
    std::vector<Tensor> bound;
    std::shared_ptr<unsigned char> arena;
    std::vector<void*> slot_data;
    /// External autograd: each group's record (null when not recorded), freed by its plugin,
    /// which `plugins` keeps loaded should the tape outlive the session.
    std::vector<void*> records;
    std::vector<capsule_group_release_record_fn> release_records;
    std::vector<std::shared_ptr<const LoadedPlugin>> plugins;

    State() = default;
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
        for (std::size_t g = records.size(); g-- > 0;)
            if (records[g]) release_records[g](records[g]);
    }
};

namespace {

/// A recorded forward run under external autograd: each group a gradient flows through is run
/// by its provider's `record`, every other call as in an inference run.
/// `records` and `releases` (one entry per group, null at first) receive each record as it is
/// made, so that a failure part-way leaves nothing unreleased.
void execute_recording(const Session::Impl& m, const std::vector<void*>& slot_data, std::vector<void*>& records,
                       std::vector<capsule_group_release_record_fn>& releases) {
    const auto& flags = m.backward.record_flags;
    std::vector<capsule_tensor_view> run_views(m.views);
    for (std::size_t v = 0; v < run_views.size(); ++v) run_views[v].data = slot_data[m.view_slot[v]];
    m.for_each_call(true, [&](std::size_t s, const CompiledGroup* group) {
        if (!group) return m.execute_step(m.steps[s], run_views);
        const auto g = static_cast<std::size_t>(group - m.groups.data());
        if (!group->autograd || !flags[g].record) return run_group(m, *group, slot_data);
        releases[g] = group->autograd->release_record;
        records[g] = record_group(m, *group, flags[g], slot_data);
    });
}

}  // namespace

Tape::Tape(std::unique_ptr<State> state) : state_(std::move(state)) {}
Tape::Tape(Tape&&) noexcept = default;
Tape& Tape::operator=(Tape&&) noexcept = default;
Tape::~Tape() = default;

const string& Session::backward_refusal() const { return impl_->backward.refusal; }

ParameterMap Session::parameters() const { return impl_->parameter_storage; }

RecordedRun Session::run_recording(const std::map<string, Tensor>& inputs) const {
    const Impl& m = *impl_;
    if (!m.backward.refusal.empty()) throw Error(ErrorCode::other, m.backward.refusal);
    auto state = std::make_unique<Tape::State>();
    state->owner = &m;
    state->parameter_generation = m.parameter_generation;
    state->bound = m.bind_inputs(inputs);
    state->arena = m.allocate(m.arena_bytes, false);
    state->slot_data = m.slot_data(state->bound, state->arena.get());
    if (m.vjp_mode == VJPMode::external_autograd) {
        state->records.assign(m.groups.size(), nullptr);
        state->release_records.assign(m.groups.size(), nullptr);
        state->plugins = m.plugins;
        execute_recording(m, state->slot_data, state->records, state->release_records);
    } else
        m.execute(state->slot_data);
    auto outputs = m.collect_outputs(state->slot_data);
    return {std::move(outputs), Tape(std::move(state))};
}

Gradients Session::backward(const Tape& tape, const std::vector<Tensor>& output_grads) const {
    const Impl& m = *impl_;
    const BackwardProgram& program = m.backward;
    if (!m.backward.refusal.empty()) throw Error(ErrorCode::other, m.backward.refusal);
    if (!tape.state_ || tape.state_->owner != &m)
        throw Error(ErrorCode::other, "the tape was recorded by another session (or moved from)");
    if (tape.state_->parameter_generation != m.parameter_generation)
        throw Error(ErrorCode::other, "the tape was recorded before Session::refresh_parameters: its values and "
                                      "records belong to the parameters of then; record the run again");
    if (output_grads.size() != m.outputs.size())
        throw Error(ErrorCode::other, "backward needs one upstream gradient per graph output (" +
                            std::to_string(m.outputs.size()) + "), got " +
                            std::to_string(output_grads.size()));
    for (std::size_t o = 0; o < m.outputs.size(); ++o) {
        const auto& want = m.outputs[o].type;
        const Tensor& g = output_grads[o];
        if (g.device() != Device::cpu || g.dtype() != want.dtype || g.shape() != want.shape)
            throw Error(ErrorCode::other, "upstream gradient of output '" + m.outputs[o].name + "' is " +
                                string(to_string(g.dtype())) + to_string(g.shape()) +
                                ", expected a host " + string(to_string(want.dtype)) +
                                to_string(want.shape));
    }

    const auto grads = m.allocate(program.grad_bytes, true);
    const auto scratch = m.allocate(program.scratch_bytes, false);
    unsigned char* g = grads.get();
    for (const auto& seed : program.seeds) {
        const Tensor& up = output_grads[seed.output];
        if (seed.accumulate) {
            accumulate(g + seed.region, up.data(), m.outputs[seed.output].type);
        } else if (!up.nbytes()) {
        } else if (m.device == Device::cpu) {
            std::memcpy(g + seed.region, up.data(), up.nbytes());
        } else {
            if (auto failure = call_plugin([&](capsule_status* st) {
                    return m.device_interface->copy_to_device(g + seed.region, up.data(), up.nbytes(), st);
                }))
                throw Error(ErrorCode::other, "upload of an upstream gradient failed: " + *failure);
        }
    }

    std::vector<capsule_tensor_view> views(m.views);
    for (std::size_t v = 0; v < views.size(); ++v) views[v].data = tape.state_->slot_data[m.view_slot[v]];
    std::vector<capsule_tensor_view> grad_inputs, grad_params;
    auto grad_view = [&](const GradTarget& t) {
        capsule_tensor_view v = views[t.view];
        using Kind = GradTarget::Kind;
        v.data = t.kind == Kind::none ? nullptr
                 : t.kind == Kind::direct ? static_cast<void*>(g + t.region)
                                          : static_cast<void*>(scratch.get() + t.scratch);
        return v;
    };
    for (const auto& b : program.group_steps) {
        const CompiledGroup& group = m.groups[b.group];
        void* record = tape.state_->records.empty() ? nullptr : tape.state_->records[b.group];
        if (!record)
            throw Error(ErrorCode::other, "the tape holds no autograd record of compiled group " +
                                              std::to_string(b.group) + " (recorded by another session?)");
        grad_inputs.clear();
        grad_params.clear();
        for (std::size_t v = 0; v < b.values.size(); ++v) {
            capsule_tensor_view view = grad_view(b.values[v]);
            view.data = b.values[v].kind == GradTarget::Kind::none ? nullptr : view.data;
            grad_inputs.push_back(view);
        }
        for (const auto& t : b.params) grad_params.push_back(grad_view(t));
        backward_group(m, group, record, grad_inputs, grad_params);
        for (std::size_t v = 0; v < b.values.size(); ++v)
            if (b.values[v].kind == GradTarget::Kind::accumulate)
                accumulate(g + b.values[v].region, grad_inputs[v].data, m.slots[m.view_slot[b.values[v].view]].type);
        for (std::size_t i = 0; i < b.params.size(); ++i)
            if (b.params[i].kind == GradTarget::Kind::accumulate)
                accumulate(g + b.params[i].region, grad_params[i].data,
                           m.slots[m.view_slot[b.params[i].view]].type);
    }
    for (const auto& b : program.steps) {
        const Step& step = m.steps[b.step];
        grad_inputs.clear();
        grad_params.clear();
        for (const auto& t : b.inputs) grad_inputs.push_back(grad_view(t));
        for (const auto& t : b.params) grad_params.push_back(grad_view(t));
        capsule_tensor_view grad_output = views[step.output];
        grad_output.data = g + b.grad_output_region;

        capsule_backward_args args{};
        args.struct_size = sizeof args;
        args.inputs = views.data() + step.first_input;
        args.num_inputs = step.num_inputs;
        args.params = views.data() + step.first_param;
        args.num_params = step.num_params;
        args.outputs = views.data() + step.output;
        args.num_outputs = 1;
        args.grad_outputs = &grad_output;
        args.grad_inputs = grad_inputs.data();
        args.grad_params = grad_params.data();
        args.attrs = step.attrs ? step.attrs->data() : nullptr;
        args.num_attrs = step.attrs ? step.attrs->size() : 0;
        args.state = step.state;
        if (auto failure = call_plugin_coded([&](capsule_status* st) { return step.backward(&args, st); }))
            throw Error(run_failure_code(failure->code), "backward of node " + std::to_string(step.node_id) + " (" +
                                 string(to_string(step.capsule->op)) + ") failed in capsule " +
                                 step.capsule->name + " of plugin " + *step.plugin + ": " + failure->text);
        for (std::size_t i = 0; i < b.inputs.size(); ++i)
            if (b.inputs[i].kind == GradTarget::Kind::accumulate)
                accumulate(g + b.inputs[i].region, grad_inputs[i].data,
                           m.slots[m.view_slot[b.inputs[i].view]].type);
        for (std::size_t i = 0; i < b.params.size(); ++i)
            if (b.params[i].kind == GradTarget::Kind::accumulate)
                accumulate(g + b.params[i].region, grad_params[i].data,
                           m.slots[m.view_slot[b.params[i].view]].type);
    }

    Gradients out;
    for (const auto& r : program.input_grads)
        out.inputs.emplace(r.name, m.download(r.type, g + r.region, "gradient of input '" + r.name + "'"));
    for (const auto& r : program.param_grads)
        out.parameters.emplace(r.name, m.download(r.type, g + r.region, "gradient of '" + r.name + "'"));
    return out;
}

}  // namespace capsule
