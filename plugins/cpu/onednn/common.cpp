#include <limits>
#include "common.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace capsule::onednn {

const dnnl::engine& cpu_engine() {
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

dnnl::stream& thread_stream() {
    thread_local dnnl::stream stream(cpu_engine());
    return stream;
}

memory::dims dims_of(std::span<const int64_t> shape) {
    if (shape.empty()) return {1};
    return memory::dims(shape.begin(), shape.end());
}

memory::dims dims_of(const Tensor& t) { return dims_of(t.shape()); }

memory::dims row_major_strides(std::span<const int64_t> dims) {
    memory::dims strides(dims.size());
    memory::dim stride = 1;
    for (std::size_t i = dims.size(); i-- > 0;) {
        strides[i] = stride;
        stride *= std::max<memory::dim>(dims[i], 1);
    }
    return strides;
}

memory::dims strides_of(const Tensor& t) {
    if (t.view->strides == nullptr) return row_major_strides(t.shape());
    return memory::dims(t.view->strides, t.view->strides + t.rank());
}

int backward_threads(const NodeState* state) { return state ? std::max(state->threads, 1) : 1; }

void require_plain_float32(const char* capsule, const Tensor& t, const char* what) {
    plugin::require(t.dtype() == CAPSULE_DTYPE_FLOAT32, [&] {
        return std::string(capsule) + ": " + what + " must be float32";
    });
    if (t.view->strides == nullptr || t.rank() == 0 || t.numel() == 0) return;  // empty: any strides
    const auto plain = row_major_strides(t.shape());
    for (int i = 0; i < t.rank(); ++i)
        plugin::require(t.dim(i) <= 1 || t.view->strides[i] == plain[std::size_t(i)], [&] {
            return std::string(capsule) + ": " + what + " " + shape_string(t.shape()) +
                   " must be row-major contiguous (the host's layout)";
        });
}

void require_shape(const char* capsule, const Tensor& t, std::span<const int64_t> want, const char* what) {
    plugin::require(std::equal(t.shape().begin(), t.shape().end(), want.begin(), want.end()), [&] {
        return std::string(capsule) + ": " + what + " " + shape_string(t.shape()) + " should be " + shape_string(want);
    });
}

float* grad_buffer(const char* capsule, const Tensor& g, const Tensor& like, const char* what) {
    if (!g.present()) return nullptr;
    require_plain_float32(capsule, g, what);
    plugin::require(std::equal(g.shape().begin(), g.shape().end(), like.shape().begin(), like.shape().end()), [&] {
        return std::string(capsule) + ": " + what + " " + shape_string(g.shape()) + " does not match " +
               shape_string(like.shape());
    });
    return g.data<float>();
}

memory::desc plain_desc(const memory::dims& dims) {
    return memory::desc(dims, memory::data_type::f32, row_major_strides(dims));
}

memory::desc view_desc(const Tensor& t) {
    if (t.rank() == 0) return plain_desc(dims_of(t));
    return memory::desc(dims_of(t), memory::data_type::f32, strides_of(t));
}

bool is_channels_last(const Tensor& t) {
    if (t.rank() != 4 || t.view->strides == nullptr) return false;
    const int64_t* st = t.view->strides;
    return st[1] == 1 && st[3] == t.dim(1) && st[2] == t.dim(1) * t.dim(3) && t.dim(1) > 1;
}

memory::data_type input_type(const PrepareCall& call) {
    return call.fpmath() == CAPSULE_FPMATH_BF16 ? memory::data_type::bf16 : memory::data_type::f32;
}

bool is_reference(const dnnl::primitive_desc_base& pd) {
    return std::string_view(pd.impl_info_str()).starts_with("ref");
}

std::array<int64_t, 2> pair_attr(const plugin::Attributes& attrs, const char* name, int64_t fallback,
                                 const char* capsule) {
    auto v = attrs.get_ints(name, {fallback});
    if (v.size() == 1) return {v[0], v[0]};
    if (v.size() == 2) return {v[0], v[1]};
    plugin::fail(std::string(capsule) + ": attribute '" + name + "' must be an int or a pair");
}

std::string shape_string(std::span<const int64_t> shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

void require_float32(const char* capsule, const Tensor& t, const char* what) {
    if (t.dtype() == CAPSULE_DTYPE_FLOAT32) return;
    const char* name = t.dtype() == CAPSULE_DTYPE_FLOAT64 ? "float64"
                       : t.dtype() == CAPSULE_DTYPE_INT64 ? "int64"
                       : t.dtype() == CAPSULE_DTYPE_BOOL  ? "bool"
                                                          : "this dtype";
    plugin::fail(CAPSULE_ERROR_UNSUPPORTED,
                 std::string(capsule) + ": " + what + " is " + name +
                     "; the oneDNN capsules compute float32 only (oneDNN has no " + name +
                     " CPU primitives): plan this node on another provider, e.g. profile "
                     "checked_cpu");
}

NodeState::NodeState(const char* name, const PrepareCall& call) : capsule(name) {
    for (std::size_t i = 0; i < call.num_inputs(); ++i) {
        auto s = call.input(i).shape();
        input_shapes.emplace_back(s.begin(), s.end());
    }
    auto o = call.output().shape();
    output_shape.assign(o.begin(), o.end());
    threads = call.threads();
}

namespace {
/// The forward call in progress on this thread (CallMemories): whether one is, the cache it
/// holds, and the position of its next wrap.
struct CallContext {
    MemoryCache* cache = nullptr;
    std::size_t next = 0;
    bool active = false;
};
thread_local CallContext call_context;
}  // namespace

CallMemories::CallMemories()
    : saved_cache_(call_context.cache), saved_next_(call_context.next), saved_active_(call_context.active) {
    call_context = {nullptr, 0, true};
}

CallMemories::~CallMemories() {
    if (call_context.cache) call_context.cache->busy.clear(std::memory_order_release);
    call_context = {saved_cache_, saved_next_, saved_active_};
}

void NodeState::lend_memories() const {
    if (!call_context.active || call_context.cache) return;
    if (memories.busy.test_and_set(std::memory_order_acquire)) return;  // another call holds it
    call_context.cache = &memories;
    call_context.next = 0;
}

memory wrap(const memory::desc& desc, const void* data) {
    void* handle = const_cast<void*>(data);
    if (!call_context.cache) return memory(desc, cpu_engine(), handle);
    auto& slots = call_context.cache->slots;
    const std::size_t i = call_context.next++;
    if (i < slots.size() && slots[i].first == desc) {
        slots[i].second.set_data_handle(handle);
        return slots[i].second;
    }
    memory made(desc, cpu_engine(), handle);
    if (i >= slots.size()) slots.resize(i + 1);
    slots[i] = {desc, made};
    return made;
}

namespace {
thread_local UniformThreads* uniform_threads = nullptr;  // the innermost scope of this thread
}  // namespace

UniformThreads::UniformThreads() : outer_(uniform_threads) { uniform_threads = this; }

UniformThreads::~UniformThreads() { uniform_threads = outer_; }

bool UniformThreads::record(double work) {
    if (!uniform_threads) return false;
    uniform_threads->largest_ = std::max(uniform_threads->largest_, work);
    return true;
}

void NodeState::limit_threads(double flops) {
    if (UniformThreads::record(flops)) return;
    if (flops < kParallelWork) threads = 1;
}

void NodeState::check_shapes(const ForwardCall& call) const {
    bool same = call.num_inputs() == input_shapes.size();
    for (std::size_t i = 0; same && i < input_shapes.size(); ++i) {
        auto s = call.input(i).shape();
        same = std::equal(s.begin(), s.end(), input_shapes[i].begin(), input_shapes[i].end());
    }
    auto o = call.output().shape();
    same = same && std::equal(o.begin(), o.end(), output_shape.begin(), output_shape.end());
    if (!same) [[unlikely]] {
        std::string got, want;
        for (std::size_t i = 0; i < call.num_inputs(); ++i) got += shape_string(call.input(i).shape()) + " ";
        for (const auto& s : input_shapes) want += shape_string(s) + " ";
        plugin::fail(std::string(capsule) + ": called with input shapes " + got + "-> " +
                     shape_string(o) + ", but prepared for " + want + "-> " +
                     shape_string(output_shape));
    }
}

ThreadScope::ThreadScope(int threads) : previous_(omp_get_max_threads()) {
    if (threads != previous_) omp_set_num_threads(threads);
}

ThreadScope::~ThreadScope() {
    if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
}

dnnl::primitive_attr scratchpad_attr() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
}

PostOp clamp_post_op(const plugin::Attributes& attrs) {
    plugin::require(attrs.has("min") || attrs.has("max"), "onednn.clamp: needs at least one of min and max");
    const float inf = std::numeric_limits<float>::infinity();
    PostOp post{dnnl::algorithm::eltwise_clip, static_cast<float>(attrs.get_float("min", -inf)),
                static_cast<float>(attrs.get_float("max", inf))};
    if (post.alpha > post.beta) post.alpha = post.beta;
    return post;
}

dnnl::primitive_attr scratchpad_attr(const PostOp& activation, bool sum) {
    dnnl::primitive_attr attr = scratchpad_attr();
    dnnl::post_ops ops;
    if (sum) ops.append_sum(1.0f);
    if (activation) ops.append_eltwise(1.0f, activation.algorithm, activation.alpha, activation.beta);
    if (ops.len() > 0) attr.set_post_ops(ops);
    return attr;
}

void* scratch(int index, std::size_t bytes) {
    // Allocated with the aligned operator new[], so it must be freed with the aligned delete[].
    struct AlignedDelete {
        void operator()(char* p) const { ::operator delete[](p, std::align_val_t(64)); }
    };
    struct Buffer {
        std::unique_ptr<char[], AlignedDelete> data;
        std::size_t size = 0;
    };
    thread_local Buffer buffers[6];
    auto& b = buffers[index];
    if (b.size < bytes) {
        b.data.reset();
        b.data.reset(new (std::align_val_t(64)) char[bytes]);
        b.size = bytes;
    }
    return b.data.get();
}

void add_scratchpad(const NodeState& state, std::unordered_map<int, memory>& args) {
    const std::size_t bytes = state.scratchpad.get_size();
    if (bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, wrap(state.scratchpad, scratch(2, bytes)));
}

void execute(const NodeState& state, const dnnl::primitive& primitive,
             std::unordered_map<int, memory> args) {
    add_scratchpad(state, args);
    ThreadScope scope(state.threads);
    auto& stream = thread_stream();
    primitive.execute(stream, args);
    stream.wait();
}

memory reorder_once(const memory::desc& user_desc, const void* data, const memory::desc& wanted) {
    memory user = wrap(user_desc, data);
    if (wanted == user_desc) return user;
    memory out(wanted, cpu_engine());
    dnnl::stream stream(cpu_engine());
    dnnl::reorder(user, out).execute(stream, user, out);
    stream.wait();
    return out;
}

void rethrow_dnnl(const char* stage, const dnnl::error& e) {
    int32_t code = CAPSULE_ERROR_INTERNAL;
    std::string kind = "error";
    switch (e.status) {
        case dnnl_unimplemented:
            code = CAPSULE_ERROR_UNSUPPORTED;
            kind = "no implementation for this case";
            break;
        case dnnl_invalid_arguments:
            code = CAPSULE_ERROR_INVALID_ARGUMENT;
            kind = "invalid arguments";
            break;
        case dnnl_out_of_memory:
            code = CAPSULE_ERROR_OUT_OF_MEMORY;
            kind = "out of memory";
            break;
        default: break;
    }
    throw KernelError(code, std::string("oneDNN ") + kind + " in " + stage + ": " + e.what() +
                                " (dnnl_status " + std::to_string(static_cast<int>(e.status)) + ")");
}

}  // namespace capsule::onednn
