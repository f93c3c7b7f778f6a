// Sessions: execution of an accepted plan (DESIGN.md section 5).
//
// A Session is built only from an AcceptedPlan. Creation probes the host against the profile's
// target and every plugin the plan uses, resolves each node's kernel, checks and uploads the
// parameters once, and precomputes every tensor view, so that `run` does no planning, no lookup
// and one arena allocation. `run` is const and safe to call from many threads at once; results
// do not depend on the thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capsule/acceptance.hpp"
#include "capsule/error.hpp"
#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "capsule/tensor.hpp"

namespace capsule {

/// Parameters (and `const` node values) by key, e.g. `fc1.weight`; host tensors.
using ParameterMap = std::map<std::string, Tensor>;

/// Reads the graph's parameters file (relative to the graph file), or an empty map when the
/// graph names none. Raises Error(input) as read_safetensors does.
ParameterMap load_graph_parameters(const Graph& graph);

struct PlanLock;

struct SessionOptions {
    /// Allow capsules whose runtime support is `test-only` (tests do; deployments should not).
    bool allow_test_only = false;
    /// Whether backward returns gradients for the float graph inputs. Training loops turn it off:
    /// the first layer's backward then skips the gradient of the data.
    bool input_gradients = true;
    /// Intra-op threads handed to kernels at prepare time (ABI 1.1); 0: every core of this
    /// machine (std::thread::hardware_concurrency). At most kMaxThreads.
    int threads = 0;
    /// The largest `threads` a session accepts: thread pools (OpenMP's) create their threads up
    /// front, and a count far beyond any machine's cores exhausts the process's threads or memory.
    static constexpr int kMaxThreads = 4096;
    /// Let plugins that offer compiled groups (ABI 1.1) compile each run of consecutive nodes
    /// they serve into one executable, possibly fused, under a `coalesced` lowering mode. Off:
    /// every node is its own kernel call (what `singleton` lowering always does). Only `run`
    /// uses compiled groups; `run_recording` calls kernels node by node, since its tape needs every
    /// intermediate value.
    bool compile_groups = true;
    /// A plan lockfile (capsule/plan_lock.hpp) the session must match: the plan given to `create`
    /// must lock to the same groups, capsules, plugins, versions, ABIs, library hashes and
    /// evidence records (import folding and the model files are the caller's to compare), and every
    /// library the session opens must hash to the locked SHA-256. Null: no lock.
    std::shared_ptr<const PlanLock> lock;
    /// Names the lockfile in errors.
    std::string lock_source = "plan lock";
};

/// A group of nodes a plugin compiled into one executable (SessionOptions::compile_groups).
struct CompiledGroupReport {
    std::string plugin;                  // the plugin that compiled and runs it
    std::vector<std::int64_t> node_ids;  // the group's nodes, in execution order
    std::string fused;                   // what the plugin says it fused ("" when nothing)
};

/// What one recorded forward run keeps for its backward pass: every intermediate tensor and the
/// bound inputs (memory: the session's intermediate tensors, once per tape). Host inputs are
/// kept by reference (shared storage), so do not change them before the backward pass. Belongs
/// to the session that recorded it; move-only.
class Tape {
public:
    Tape(Tape&&) noexcept;
    Tape& operator=(Tape&&) noexcept;
    ~Tape();

private:
    friend class Session;
    struct State;
    explicit Tape(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

/// The outputs of a recorded forward run, in the order of the graph's outputs, and its tape.
struct RecordedRun {
    std::vector<Tensor> outputs;
    Tape tape;
};

/// Gradients of one backward pass, as host tensors with the shapes and dtypes of what they
/// differentiate: float graph inputs by name, parameters by key (e.g. `fc1.weight`). A value
/// that no output depends on gets a zero gradient.
struct Gradients {
    std::map<std::string, Tensor> inputs;
    ParameterMap parameters;
};

/// A named graph input or output with its type.
struct TensorSlot {
    std::string name;
    std::int64_t node_id = 0;
    TensorType type;
};

/// One backend call of a session's forward run (`run`), in execution order: a node's kernel, or a
/// compiled group's executable (SessionStep::group_nodes).
struct SessionStep {
    std::int64_t node_id = 0;
    BackendOp op = BackendOp::add;
    std::string capsule;                      // capsule name, e.g. `reference.relu`
    Provider provider = Provider::reference;
    std::string plugin;                       // the plugin whose library runs the kernel
    /// A compiled group: every node it runs, in order (node_id and op are its first node's, and
    /// `capsule` joins the nodes' capsule names with '+'); empty for a single kernel call.
    std::vector<std::int64_t> group_nodes;
    std::string fused;                        // a compiled group: what the plugin says it fused
};

/// Wall-clock times of one forward run, filled by `Session::run(inputs, timings)`. Times come
/// from std::chrono::steady_clock, in nanoseconds.
struct RunTimings {
    /// When the run began (before its inputs were bound).
    std::chrono::steady_clock::time_point start;
    /// The whole call: binding and checking the inputs, taking the arena, every kernel call, and
    /// copying the outputs out.
    std::chrono::nanoseconds total{0};
    /// One backend call (a kernel, or a compiled group's executable): the plugin's entry point
    /// only (not the host's input binding or output download). `begin` is measured from `start`.
    struct Step {
        std::chrono::nanoseconds begin{0};
        std::chrono::nanoseconds duration{0};
    };
    /// One entry per Session::steps() element (backend call), in the same order.
    std::vector<Step> steps;
};

class Session {
public:
    /// Builds a session. `plan` must come from `profile` gating `graph`.
    /// Raises Error(probe) (host OS/arch not the target's, plugin stub/failed/unusable, capsule
    /// planner-only/not-wired), Error(input) (graph/plan mismatch, missing, extra or mistyped
    /// parameters, options.threads negative or above SessionOptions::kMaxThreads),
    /// Error(planning) (the plan puts a node on a capsule whose `dtypes` lack one of the node's
    /// dtypes), Error (device allocation or upload failure).
    static Session create(const BackendProfile& profile, const AcceptedPlan& plan,
                          const Graph& graph, const PluginHost& host,
                          const ParameterMap& parameters, const SessionOptions& options = {});

    /// Runs the graph on host tensors keyed by input name; returns host tensors in the order of
    /// the graph's outputs, an output of data-dependent length (Graph::output_lengths) cut to its
    /// length node's value along its axis. Raises Error(input) for a missing, unknown or
    /// mistyped input, and when a kernel or compiled group refuses the values of the data with
    /// CAPSULE_ERROR_INVALID_DATA (an index out of range: the caller's data); Error(other) when
    /// a kernel fails otherwise (both name the node, capsule and plugin), or when a length node
    /// gives a length outside 0..the output's bound (naming the output). Thread-safe.
    std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;
    /// `run`, also timing the run and each backend call into `timings` (overwritten; see
    /// RunTimings). Only this overload reads the clock (the untimed `run` pays one null
    /// check per call).
    /// Raises what `run` raises. Thread-safe when each thread passes its own `timings`.
    std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, RunTimings& timings) const;

    /// Runs forward like `run` and records the tape for `backward`. Raises Error(other), before
    /// running anything, when backward is refused for this session (VJP mode `none` or
    /// `external-autograd`, or a capsule on the gradient path without a backward kernel), else
    /// what `run` raises. Thread-safe: every tape has its own memory.
    RecordedRun run_recording(const std::map<std::string, Tensor>& inputs) const;

    /// Reverse-mode pass over `tape` (DESIGN.md section 5: the runtime's tape calls the capsules'
    /// backward kernels in reverse execution order; fan-out gradients are summed).
    /// `output_grads` are host tensors, one per graph output with its shape and dtype (the
    /// upstream gradient, e.g. a rank-0 1.0 for a scalar loss). Raises Error(other) for a tape
    /// of another session, one recorded before `refresh_parameters`, or mis-shaped upstream
    /// gradients; when a backward kernel fails (naming
    /// node and capsule), Error(input) if it refused the data's values (CAPSULE_ERROR_INVALID_DATA),
    /// else Error(other). Thread-safe.
    Gradients backward(const Tape& tape, const std::vector<Tensor>& output_grads) const;

    /// Why backward is refused for this session, or an empty string when it is available.
    const std::string& backward_refusal() const;

    /// The tensors the session reads for each parameter key. On CPU these share storage with the
    /// ParameterMap given to `create` (no copy): after writing their values between runs, call
    /// `refresh_parameters` before the next run (capsule::Trainer does after each optimizer step).
    /// Never write while a run is in flight.
    ParameterMap parameters() const;

    /// Makes the session compute with the parameters' current values after they were written in
    /// place (see `parameters`). Kernels prepare once per session (ABI 1.1 prepare) and compiled
    /// groups compile once, and both may keep their own copy of a weight, e.g. reordered into the
    /// blocked layout a oneDNN primitive wants; without this call they keep computing with the
    /// values the session was created with. Makes every state and executable again, then
    /// releases the old ones; a group a plugin now declines (e.g. oneDNN's, for a non-finite
    /// weight) runs node by node. Raises Error(other) naming the node or group, capsule and
    /// plugin when a prepare or compile fails, or under VJP mode external-autograd when a plugin
    /// compiles other groups than at creation (the backward program is built on them); the
    /// session is then unchanged. Not thread-safe: no run, recording or backward may be in
    /// flight. `backward` refuses tapes recorded before the call.
    void refresh_parameters();

    const std::vector<TensorSlot>& inputs() const;
    const std::vector<TensorSlot>& outputs() const;
    /// Capsule names the session calls, one per planned node, in execution order.
    std::vector<std::string> kernel_trace() const;
    /// The groups of nodes that plugins compiled for `run`, in execution order (empty when none
    /// did, or with SessionOptions::compile_groups off).
    std::vector<CompiledGroupReport> compiled_groups() const;
    /// The backend calls of a `run`, in execution order: one per node, except that a compiled
    /// group is one call (see SessionStep::group_nodes).
    std::vector<SessionStep> steps() const;

    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;
    ~Session();

    /// Opaque; defined in core/src (session_impl.hpp).
    struct Impl;

private:
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

/// The host this process runs on, as a Target's OS and architecture.
OperatingSystem host_operating_system();
Architecture host_architecture();

}  // namespace capsule
