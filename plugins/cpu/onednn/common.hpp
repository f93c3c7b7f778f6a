// Shared pieces of the oneDNN plugin (plugins/cpu/onednn): the CPU engine, per-thread streams,
// oneDNN memory descriptors for the host's row-major tensors, the prepared-state base with its
// shape guard, the intra-op thread scope, and adapters that turn dnnl::error into statuses.
//
// Nothing of oneDNN crosses the C ABI: states are opaque `void*` to the host, and every oneDNN
// exception is caught in the adapters below and reported as a capsule_status naming the stage
// (prepare or forward) and oneDNN's own message.
//
// Layouts: the host passes contiguous row-major tensors; they are wrapped as oneDNN memory with
// plain row-major strides (nchw for activations, oihw / goihw for PyTorch conv weights, oi for
// linear weights). Weights are reordered once, in prepare, into the layout the primitive picked.
// Inside a compiled group, values only the group sees may be channels-last (nhwc), which the
// convolution, pooling and batch-norm kernels read through view_desc.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "capsule/plugin.hpp"

namespace capsule::onednn {

using capsule::plugin::BackwardCall;
using capsule::plugin::ForwardCall;
using capsule::plugin::KernelError;
using capsule::plugin::PrepareCall;
using capsule::plugin::Tensor;
using dnnl::memory;

/// The process-wide CPU engine (created on first use; engines are thread-safe).
const dnnl::engine& cpu_engine();

/// A stream of the calling thread on cpu_engine(): one per thread, so that concurrent calls
/// never share a stream.
dnnl::stream& thread_stream();

/// The dims of a tensor view (a rank-0 tensor becomes {1}: oneDNN has no rank-0 memory).
memory::dims dims_of(const Tensor& t);
memory::dims dims_of(std::span<const int64_t> shape);

/// A float32 descriptor of `dims` with plain row-major strides (any rank 1..12).
memory::desc plain_desc(const memory::dims& dims);

/// Row-major strides of `dims`, in elements (a dim of 0 counts as 1, so strides stay distinct).
memory::dims row_major_strides(std::span<const int64_t> dims);

/// The strides of `t`'s view, in elements: its own, or row-major when it has none.
memory::dims strides_of(const Tensor& t);

/// A float32 descriptor of `t` with its view's own strides (in elements): plain row-major for
/// every tensor the host passes, channels-last (nhwc) for a value that a compiled group keeps in
/// that layout (compiled_group.cpp). Kernels that read activations through it work in either.
memory::desc view_desc(const Tensor& t);

/// True when `t` is a rank-4 view with channels-last (nhwc) strides.
bool is_channels_last(const Tensor& t);

/// Raises CAPSULE_ERROR_UNSUPPORTED unless `t` is float32: oneDNN on CPU has no float64
/// primitives, so a float64 node must be planned on another provider (e.g. reference).
void require_float32(const char* capsule, const Tensor& t, const char* what);
/// The dtypes of every capsule but concat (kernel table `dtypes`): the planner plans a node of
/// another dtype onto another provider, and require_float32 stays as the kernel's own guard.
inline constexpr std::uint64_t kFloat32Only = CAPSULE_DTYPE_BIT(CAPSULE_DTYPE_FLOAT32);

/// "[2, 3, 4]"
std::string shape_string(std::span<const int64_t> shape);

/// Whether handing a normalisation's mean to oneDNN as float32 `rounded` keeps the normalised
/// values within 1e-6 of the double computation: the rounding error of `mean` at most 1e-6 of the
/// standard deviation sqrt(`var_eps`). False for a mean of 1e4 + noise of 1e-2 (batch_norm's batch
/// statistics, layer_norm's rows), and for NaN.
inline bool float32_holds_mean(float rounded, double mean, double var_eps) {
    return std::fabs(double(rounded) - mean) <= 1e-6 * std::sqrt(var_eps);
}

/// An `int|pair` attribute (stride, padding, dilation, kernel_size of 2-D ops) as {h, w}, `fallback`
/// for both when absent; raises INVALID_ARGUMENT naming `capsule` and the attribute otherwise.
std::array<int64_t, 2> pair_attr(const plugin::Attributes& attrs, const char* name, int64_t fallback,
                                 const char* capsule);

/// The dnnl::memory objects that a state's forward calls wrap host buffers in (wrap), made on its
/// first call and re-pointed with set_data_handle on later ones. Creating one per call costs two
/// posix_memalign / free pairs inside oneDNN, and glibc 2.36 (Debian 12) reuses freed aligned
/// chunks poorly: the heap crept over fresh pages for the first ~40 runs of a session (page
/// faults; the MLP at batch 1 ran 3x slower until it settled). One call at a time owns the cache
/// (`busy`); a concurrent call of the same state wraps into new objects as before.
struct MemoryCache {
    std::atomic_flag busy = ATOMIC_FLAG_INIT;
    /// By position of the wrap within a call; a slot whose descriptor differs is replaced.
    std::vector<std::pair<memory::desc, memory>> slots;
};

/// For the duration of one forward call (forward_entry): state_of() lends it the state's
/// MemoryCache when no other call holds it, and returns it when the call ends.
class CallMemories {
public:
    CallMemories();
    ~CallMemories();
    CallMemories(const CallMemories&) = delete;
    CallMemories& operator=(const CallMemories&) = delete;

private:
    MemoryCache* saved_cache_;
    std::size_t saved_next_;
    bool saved_active_;
};

/// What every prepared state shares: the capsule's name, the shapes seen in prepare (a forward
/// call with other shapes is refused: the primitive was built for these), and the intra-op
/// thread count the host granted.
struct NodeState {
    const char* capsule = "";
    std::vector<std::vector<int64_t>> input_shapes;
    std::vector<int64_t> output_shape;
    int threads = 1;
    /// The primitive's scratchpad (user-managed: each call uses a per-thread buffer, so that
    /// concurrent calls never share one and no call allocates once the buffer has grown).
    memory::desc scratchpad;
    /// The memory objects its forward calls reuse (MemoryCache).
    mutable MemoryCache memories;

    NodeState(const char* name, const PrepareCall& call);
    virtual ~NodeState() = default;
    /// Uses one thread for a node whose work (about `flops` floating-point operations, or
    /// element visits for memory-bound ops) is below kParallelWork, too small to pay for waking
    /// an OpenMP team (tens of microseconds, far more when the cores are shared with other
    /// processes); inside a UniformThreads scope, only records the work.
    void limit_threads(double flops);
    /// Refuses a call whose input or output shapes differ from those seen in prepare.
    void check_shapes(const ForwardCall& call) const;
    /// Lends `memories` to the calling forward call when one is in progress on this thread
    /// (CallMemories) and no other call holds them.
    void lend_memories() const;
};

/// About 0.1 ms of one core's work (NodeState::limit_threads).
inline constexpr double kParallelWork = 1 << 20;

/// While alive on the calling thread (compile_checked in compiled_group.cpp, preparing the units
/// of one group), NodeState::limit_threads keeps the thread count the host granted and records
/// the largest work it was given, so that every kernel of the group runs with one OpenMP team
/// size. With per-node limits, kernels after a one-thread kernel ran up to 1.8x slower (LeNet-5
/// at batch 64 on 2 threads: its first convolution 0.50 ms instead of 0.28 ms; the whole model
/// 0.88 ms, 0.49 ms with one team size).
class UniformThreads {
public:
    UniformThreads();
    ~UniformThreads();
    UniformThreads(const UniformThreads&) = delete;
    UniformThreads& operator=(const UniformThreads&) = delete;
    /// The largest work (limit_threads' argument) of a kernel prepared in this scope so far.
    double largest_work() const { return largest_; }
    /// Records `work` when a scope is alive on this thread; false when none is.
    static bool record(double work);

private:
    double largest_ = 0;
    UniformThreads* outer_;
};

/// The state of `call`, checked against the call's shapes; refuses a call without state (a host
/// that skipped prepare).
template <typename State>
const State& state_of(const ForwardCall& call, const char* capsule) {
    const State* s = call.state<State>();
    if (!s) [[unlikely]]
        plugin::fail(std::string(capsule) +
                     ": called without its prepared state (the host must call prepare first, ABI "
                     "1.1)");
    s->check_shapes(call);
    s->lend_memories();
    return *s;
}

/// Sets the calling thread's OpenMP thread count (oneDNN's threading runtime here) to the
/// node's thread count for the duration of a call, and restores it afterwards. OpenMP keeps this
/// setting per thread, so concurrent calls do not interfere.
class ThreadScope {
public:
    explicit ThreadScope(int threads);
    ~ThreadScope();
    ThreadScope(const ThreadScope&) = delete;
    ThreadScope& operator=(const ThreadScope&) = delete;

private:
    int previous_ = 0;
};

/// The data type a convolution or inner product takes its input and weights in: bfloat16 when
/// the profile allows fpmath bf16 (PrepareCall::fpmath), else float32. Bias and output stay
/// float32, and accumulation is float32 either way.
memory::data_type input_type(const PrepareCall& call);

/// True when `pd` is one of oneDNN's reference (unoptimised) implementations: a bfloat16
/// primitive on a CPU without native bfloat16 is one, and the float32 one is then used instead.
bool is_reference(const dnnl::primitive_desc_base& pd);

/// True when `desc` holds bfloat16 data.
inline bool is_bf16(const memory::desc& desc) { return desc.data.data_type == dnnl_bf16; }

/// Primitive attributes with a user-managed scratchpad (see NodeState::scratchpad).
dnnl::primitive_attr scratchpad_attr();

/// An elementwise op applied by a primitive to its own result before writing it (a oneDNN
/// eltwise post-op): what a compiled group fuses after a convolution, inner product or matmul.
/// `algorithm` undef: none.
struct PostOp {
    dnnl::algorithm algorithm = dnnl::algorithm::undef;
    float alpha = 0.0f, beta = 0.0f;  // the algorithm's parameters (eltwise_clip: min, max)
    explicit operator bool() const { return algorithm != dnnl::algorithm::undef; }
};

/// What a compiled group fuses into a convolution, inner product or matmul, applied to the
/// primitive's result in this order before it is written: with `add_input1`, the sum with the
/// call's input 1, a tensor of the destination's shape and layout (a residual connection: the
/// destination is filled with it first and oneDNN's sum post-op adds the result to it; a binary
/// add post-op of a whole tensor has no optimised convolution in oneDNN 2.6); then `activation`.
/// With `winograd`, a float32 convolution computes by oneDNN's Winograd algorithm where it has an
/// optimised one for the shapes (F(2x2, 3x3) and F(4x4, 3x3) of Lavin and Gray, "Fast Algorithms
/// for Convolutional Neural Networks", 2016: 3x3 kernels, stride 1, no dilation or groups, on
/// AVX-512), else by convolution_direct. Its transforms add and scale neighbouring inputs, so a
/// NaN or an infinity reaches outputs whose windows never held it, and partial values grow by up
/// to kWinogradGain: the caller runs it only on finite inputs within that margin.
struct Fusion {
    bool add_input1 = false;
    PostOp activation;
    bool winograd = false;
};

/// A bound of how much larger than max|x| · max_o sum_i |w[o, i]| any value inside oneDNN's
/// Winograd convolution can be: its F(4x4, 3x3) input transform scales by at most 10 per axis,
/// the output transform by at most 18 per axis, and the weight transform by at most 4 per axis
/// (100 · 324 · 16 ≈ 5.2e5), times a margin of about 200 for oneDNN's own scaling of the transforms.
constexpr double kWinogradGain = 1e8;

/// scratchpad_attr() with post-ops: with `sum`, oneDNN's sum post-op (scale 1: the result is
/// added to what the destination holds), then `activation` when set (eltwise, scale 1).
dnnl::primitive_attr scratchpad_attr(const PostOp& activation, bool sum = false);

/// torch.clamp(x, min, max) as oneDNN eltwise_clip's (alpha, beta): a missing bound is an
/// infinity, and min > max clamps every element to max (alpha = beta = max), as PyTorch does.
/// Raises unless one bound at least is given.
PostOp clamp_post_op(const plugin::Attributes& attrs);

/// A per-thread buffer of at least `bytes`, 64-byte aligned, reused across calls on the same
/// thread; `index` 0 and 1 hold staged activations (source, destination), 2 the scratchpad,
/// 3 to 5 a backward call's staged operands (conv2d_backward).
void* scratch(int index, std::size_t bytes);

/// Executes `primitive` of node `state` on the calling thread's stream with `args` (plus the
/// scratchpad), honouring the node's thread count, and waits for it.
void execute(const NodeState& state, const dnnl::primitive& primitive,
             std::unordered_map<int, memory> args);

/// Adds the node's scratchpad (a per-thread buffer) to `args` when the primitive needs one.
void add_scratchpad(const NodeState& state, std::unordered_map<int, memory>& args);

/// Wraps a host buffer (no copy): inside a forward call that holds its state's MemoryCache, the
/// cached object of this position re-pointed at `data`, else a new one.
memory wrap(const memory::desc& desc, const void* data);

/// Keeps `user` (plain, borrowed host data valid for the session) when `wanted` equals its
/// descriptor, else reorders it once into a new buffer of layout `wanted` owned by the returned
/// memory.
memory reorder_once(const memory::desc& user_desc, const void* data, const memory::desc& wanted);

/// Turns a dnnl::error into a KernelError naming the stage and oneDNN's status.
[[noreturn]] void rethrow_dnnl(const char* stage, const dnnl::error& e);

/// Adapts `std::unique_ptr<State> Fn(const PrepareCall&)`, catching oneDNN errors.
template <typename State, std::unique_ptr<State> (*Fn)(const PrepareCall&)>
int32_t prepare_entry(const capsule_prepare_args* args, void** state, capsule_status* status) noexcept {
    return plugin::guarded(status, [&] {
        try {
            *state = Fn(PrepareCall{args}).release();
        } catch (const dnnl::error& e) {
            rethrow_dnnl("prepare", e);
        }
    });
}

/// Adapts `void Fn(const ForwardCall&)`, catching oneDNN errors.
template <void (*Fn)(const ForwardCall&)>
int32_t forward_entry(const capsule_forward_args* args, capsule_status* status) noexcept {
    return plugin::guarded(status, [&] {
        const CallMemories memories;
        try {
            Fn(ForwardCall{args});
        } catch (const dnnl::error& e) {
            rethrow_dnnl("forward", e);
        }
    });
}

/// Adapts `void Fn(const BackwardCall&)`, catching oneDNN errors.
template <void (*Fn)(const BackwardCall&)>
int32_t backward_entry(const capsule_backward_args* args, capsule_status* status) noexcept {
    return plugin::guarded(status, [&] {
        try {
            Fn(BackwardCall{args});
        } catch (const dnnl::error& e) {
            rethrow_dnnl("backward", e);
        }
    });
}

/// The node's prepared state in a backward call (the host hands every call of a node the state
/// its prepare returned), or nullptr from a host whose backward arguments predate the field.
template <typename State>
const State* backward_state(const BackwardCall& call) {
    return CAPSULE_HAS_FIELD(call.args, capsule_backward_args, state)
               ? static_cast<const State*>(call.args->state)
               : nullptr;
}

/// The intra-op threads of a backward call: those the host granted the node at prepare, 1 without
/// a state.
int backward_threads(const NodeState* state);

/// Checks that `t` is a float32 tensor in the host's row-major layout (what backward calls
/// receive; the channels-last views of compiled groups never reach them); raises
/// INVALID_ARGUMENT naming `capsule` and `what` otherwise.
void require_plain_float32(const char* capsule, const Tensor& t, const char* what);

/// Checks that `t` has exactly the dims `want` (a backward call's operands must agree with each
/// other and with the node's attributes; a kernel trusting a count alone would index past one of
/// them); raises INVALID_ARGUMENT naming `capsule`, `what` and both shapes otherwise.
void require_shape(const char* capsule, const Tensor& t, std::span<const int64_t> want, const char* what);

/// The float32 buffer of a gradient the host wants (`g` present), checked to be a plain float32
/// tensor of `like`'s shape; nullptr when the host does not want it. Raises INVALID_ARGUMENT on a
/// mismatch.
float* grad_buffer(const char* capsule, const Tensor& g, const Tensor& like, const char* what);

/// Frees a state made by prepare_entry.
template <typename State>
void release_entry(void* state) noexcept {
    delete static_cast<State*>(state);
}

}  // namespace capsule::onednn
