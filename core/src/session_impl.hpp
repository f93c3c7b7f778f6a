// The inside of a Session, shared by session.cpp (creation, forward runs) and autograd.cpp (the
// tape and the backward pass). Not installed: nothing outside core/src sees it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capsule/attribute_views.hpp"
#include "capsule/session.hpp"

namespace capsule::detail {

/// Where a tensor's bytes live during a run.
enum class SlotKind : std::uint8_t { input, fixed, arena };

struct Slot {
    TensorType type;
    SlotKind kind = SlotKind::arena;
    std::size_t offset = 0;        // arena: byte offset
    std::size_t input_index = 0;   // input: index into Impl::inputs
    const void* fixed = nullptr;   // fixed: parameter or const data (host or device)
    std::vector<std::int64_t> strides;
};

/// One kernel call; view indices refer to Impl::views.
struct Step {
    std::int64_t node_id = 0;
    const KernelCapsule* capsule = nullptr;
    const std::string* plugin = nullptr;  // name of the plugin whose kernel runs (in the host)
    capsule_forward_fn forward = nullptr;
    capsule_backward_fn backward = nullptr;  // null when the capsule has no backward kernel
    capsule_prepare_fn prepare = nullptr;    // ABI 1.1: null when the kernel keeps no state
    capsule_release_fn release = nullptr;
    void* state = nullptr;                   // what prepare returned; released with the session
    /// The compiled-groups extension of the step's plugin (ABI 1.1), or null when it has none.
    const capsule_compiled_groups_extension* groups = nullptr;
    /// The group-autograd extension of the step's plugin (VJP mode external-autograd), or null.
    const capsule_group_autograd_extension* autograd = nullptr;
    std::size_t first_input = 0, num_inputs = 0;
    std::size_t first_param = 0, num_params = 0;
    std::size_t output = 0;
    std::unique_ptr<AttributeViews> attrs;  // null when the node has no attributes
    std::vector<std::int64_t> parents;    // node ids, one per input view
    std::vector<std::string> param_keys;  // one per parameter view
};

/// One compiled group of a session.
struct CompiledGroup {
    std::size_t first_step = 0, num_steps = 0;  // the steps (Impl::steps) it replaces
    const capsule_compiled_groups_extension* extension = nullptr;
    void* executable = nullptr;               // what compile returned; released with the session
    std::vector<std::size_t> value_slots;     // the slot of each value, in compile's order
    std::vector<capsule_tensor_view> values;  // view templates of the values; data set per run
    std::string fused;                        // the plugin's description of what it fused
    /// Set when the group runs under the provider's autograd (VJP mode external-autograd); its
    /// values are then one per node id (a detached read is its own value), not one per slot.
    const capsule_group_autograd_extension* autograd = nullptr;
    std::vector<std::int32_t> roles;        // capsule_value_role of each value
    std::vector<std::int64_t> value_nodes;  // autograd: the node id each value is
    std::vector<std::size_t> value_views;   // autograd: a view (Impl::views) of each value
    std::vector<std::size_t> param_views;   // autograd: the group's parameters, node by node
};

constexpr std::size_t kArenaAlignment = 64;

/// Host buffers of a session's few arena sizes (intermediates, gradients, scratch), kept for
/// reuse: a fresh multi-megabyte allocation per run costs a page fault per 4 KiB page, which
/// dominated training steps. Shared with the buffers' deleters, so a buffer may outlive the
/// session. Thread-safe.
class ArenaPool {
public:
    ~ArenaPool();
    /// A buffer of at least `bytes` (64-byte aligned), returned to the pool when released.
    /// Raises Error(other) when memory is exhausted.
    static std::shared_ptr<unsigned char> take(const std::shared_ptr<ArenaPool>& pool, std::size_t bytes);

private:
    std::mutex mutex_;
    std::map<std::size_t, std::vector<unsigned char*>> free_;  // by size
};

inline std::size_t align_up(std::size_t n) {
    return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Where one gradient view of a backward call points (autograd.cpp).
struct GradTarget {
    enum class Kind : std::uint8_t { none, direct, accumulate };
    Kind kind = Kind::none;
    std::size_t region = 0;   // byte offset in the gradient arena of the value's gradient
    std::size_t scratch = 0;  // accumulate: byte offset in the scratch arena
    std::size_t view = 0;     // view template (shape, strides) of the value
};

/// One backward kernel call, in reverse execution order.
struct BackwardStep {
    std::size_t step = 0;                     // index into Impl::steps
    std::size_t grad_output_region = 0;       // gradient of the step's output
    std::vector<GradTarget> inputs, params;   // one per input / parameter view of the step
};

/// One compiled group's backward call under VJP mode external-autograd, in reverse execution
/// order: for each group value, its OUTPUT gradient (kind direct, read by the plugin; none when
/// nothing wrote it) or its INPUT gradient target; then one target per group parameter.
struct GroupBackwardStep {
    std::size_t group = 0;  // index into Impl::groups
    std::vector<GradTarget> values, params;
};

/// What a recorded run tells a group's `record` (one flag per value / parameter: gradient wanted).
struct GroupRecordFlags {
    bool record = false;  // false: no gradient flows through the group; a plain run serves
    std::vector<std::uint8_t> values, params;
};

/// A graph output's upstream gradient: copied into (or added to) the value's gradient region.
struct GradSeed {
    std::size_t output = 0;  // index into Impl::outputs
    std::size_t region = 0;
    bool accumulate = false;
};

/// A gradient handed back to the caller: an input by name or a parameter by key.
struct GradResult {
    std::string name;
    std::size_t region = 0;
    TensorType type;
};

/// The backward program, fixed at session creation from the graph's structure: which values
/// need gradients, where each gradient lives, and which kernel writes or accumulates it.
struct BackwardProgram {
    std::vector<BackwardStep> steps;
    /// External-autograd sessions: one backward call per compiled group instead of `steps`;
    /// `record_flags` has one entry per Impl::groups entry (empty flags: the group needs no
    /// record, its run is a plain forward).
    std::vector<GroupBackwardStep> group_steps;
    std::vector<GroupRecordFlags> record_flags;
    std::vector<GradSeed> seeds;
    std::vector<GradResult> input_grads, param_grads;
    std::size_t grad_bytes = 0, scratch_bytes = 0;
    /// Why backward is refused for this session (VJP mode, missing backward kernel); empty when
    /// backward can run.
    std::string refusal;
};

}  // namespace capsule::detail

namespace capsule {

struct Session::Impl {
    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    /// Releases every prepared state before the plugins that made them may be unmapped.
    ~Impl();

    std::string profile_name;
    VJPMode vjp_mode = VJPMode::none;
    FpMath fpmath = FpMath::strict;  // the profile's, passed to every prepare and compile
    int threads = 1;                 // intra-op threads, passed to every prepare and compile
    bool compiles_groups = false;    // SessionOptions::compile_groups under coalesced lowering
    /// Counts Session::refresh_parameters calls: a tape recorded before one is refused.
    std::uint64_t parameter_generation = 0;
    bool input_gradients = true;
    Device device = Device::cpu;
    const capsule_device_interface* device_interface = nullptr;  // non-CPU only
    std::vector<std::shared_ptr<const LoadedPlugin>> plugins;     // keep libraries mapped
    std::vector<detail::Slot> slots;
    std::vector<capsule_tensor_view> views;   // templates; data patched per run
    std::vector<std::size_t> view_slot;       // slot of each view
    std::vector<detail::Step> steps;
    std::vector<TensorSlot> inputs, outputs;
    std::vector<std::size_t> input_slots, output_slots;
    /// Per output: its data-dependent length (Graph::output_lengths), as the axis and the slot of
    /// the int64 scalar holding the length; nullopt for an output of static shape.
    struct OutputLength {
        std::size_t axis = 0, slot = 0;
    };
    std::vector<std::optional<OutputLength>> output_lengths;
    std::vector<Tensor> fixed_storage;        // parameters and consts (device copies on non-CPU)
    ParameterMap parameter_storage;           // the same tensors by key
    std::size_t arena_bytes = 0;
    detail::BackwardProgram backward;
    std::vector<detail::CompiledGroup> groups;  // compiled groups, in step order
    std::unordered_set<std::int64_t> detach_nodes;  // ids of the graph's detach nodes
    std::shared_ptr<detail::ArenaPool> arenas = std::make_shared<detail::ArenaPool>();

    std::size_t add_view(std::size_t slot);
    std::size_t add_slot(TensorType type, detail::SlotKind kind);
    /// A device copy of a host tensor (the tensor itself on CPU). Raises Error on upload failure.
    Tensor to_device(const Tensor& host) const;
    /// Device memory of `bytes`, zero-filled when `zero` (host memory on CPU).
    std::shared_ptr<unsigned char> allocate(std::size_t bytes, bool zero) const;
    /// Host tensor of `type` copied from device (or host) memory at `src`.
    Tensor download(const TensorType& type, const void* src, const std::string& what) const;
    /// Binds and checks the caller's inputs (by name or id). Raises Error(input).
    std::vector<Tensor> bind_inputs(const std::map<std::string, Tensor>& inputs) const;
    /// Per-slot data pointers of one run, given its bound inputs and arena.
    std::vector<void*> slot_data(const std::vector<Tensor>& bound, unsigned char* arena) const;
    /// The steps whose kernel state is not made (one flag per step) when `compiled` are the
    /// session's groups: a grouped node's own kernel runs only in a backward pass on the host's
    /// tape, so without one its state would duplicate what the compiled executable holds.
    std::vector<bool> steps_without_state(const std::vector<detail::CompiledGroup>& compiled) const;
    /// Calls each kernel's prepare (ABI 1.1) once per step with the parameters' current values,
    /// except for the steps `skip` marks; returns the states, one per step (null: none). Raises
    /// Error(other) naming the node, capsule and plugin, after releasing the states it made.
    std::vector<void*> prepare_steps(const std::vector<bool>& skip) const;
    /// Calls every step's forward kernel, or with `compiled` each compiled group in place of its
    /// steps. With `timings` (one entry per call: num_calls() with `compiled`, else one per step)
    /// also times each call relative to `start`; without, no clock is read. Raises Error(other)
    /// naming the failing node (or group), capsule and plugin, and the plugin's message and code.
    void execute(const std::vector<void*>& slot_data, bool compiled = false,
                 RunTimings::Step* timings = nullptr, std::chrono::steady_clock::time_point start = {}) const;
    /// Calls one step's forward kernel (see execute).
    void execute_step(const detail::Step& step, std::vector<capsule_tensor_view>& run_views) const;
    /// Backend calls of a `run`: one per step outside compiled groups, one per compiled group.
    std::size_t num_calls() const;
    /// Walks the backend calls of a run in order: `call(first_step, group)` where `group` is the
    /// compiled group starting at that step, or null for the step's own kernel (always null
    /// without `compiled`).
    template <typename Call>
    void for_each_call(bool compiled, Call&& call) const {
        std::size_t next_group = 0;
        for (std::size_t s = 0; s < steps.size();) {
            const bool starts_group = compiled && next_group < groups.size() && groups[next_group].first_step == s;
            const detail::CompiledGroup* group = starts_group ? &groups[next_group++] : nullptr;
            call(s, group);
            s += group ? group->num_steps : 1;
        }
    }
    /// The graph outputs of a run, as host tensors.
    std::vector<Tensor> collect_outputs(const std::vector<void*>& slot_data) const;
};

}  // namespace capsule

namespace capsule::detail {

/// The backward program of a freshly built session (autograd.cpp). Records a refusal instead of
/// raising, so that inference-only sessions are unaffected.
/// `positions` is node_positions(graph).
BackwardProgram build_backward_program(const Session::Impl& impl, const Graph& graph,
                                       const std::unordered_map<std::int64_t, std::size_t>& positions);

}  // namespace capsule::detail
