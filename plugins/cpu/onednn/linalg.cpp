// onednn.linear and onednn.matmul.
#include <algorithm>
#include <cstring>

#include "kernels.hpp"

namespace capsule::onednn {

namespace {

int64_t product(std::span<const int64_t> s, std::size_t from, std::size_t to) {
    int64_t n = 1;
    for (std::size_t i = from; i < to; ++i) n *= s[i];
    return n;
}

// ---- linear ---------------------------------------------------------------------------------

/// torch.nn.functional.linear(x, weight, bias): x [..., in] (flattened to [M, in]), weight
/// [out, in] (PyTorch layout, oneDNN `oi`), bias [out]; y [..., out] = x weightᵀ + bias. Runs as a
/// oneDNN inner product (forward_inference); the weights are reordered once into the layout the
/// primitive prefers.
struct LinearState : NodeState {
    using NodeState::NodeState;
    int64_t rows = 0, in = 0, out = 0;
    bool has_bias = false;
    bool trivial = false;  // rows or out is 0, or in is 0 (y = bias, or 0)
    memory::desc src_md, dst_md, bias_md;
    /// Under fpmath bf16: x is converted into bfloat16 (`to_src`, into a scratch buffer) for a
    /// primitive that takes bfloat16 input and weights.
    bool bf16 = false;
    memory::desc src_bf16_md;
    dnnl::reorder to_src;
    memory weights;  // in the primitive's layout
    dnnl::inner_product_forward primitive;
};

/// The linear state of `call`, with `post` (when set) applied to the result inside the primitive.
std::unique_ptr<LinearState> build_linear(const PrepareCall& call, const PostOp& post) {
    const char* name = "onednn.linear";
    auto s = std::make_unique<LinearState>(name, call);
    const Tensor x = call.input(0), w = call.param(0);
    require_float32(name, x, "input x");
    require_float32(name, w, "weight");
    s->has_bias = call.attrs().get_bool("bias", true);
    plugin::require(call.num_params() == (s->has_bias ? 2u : 1u),
                    "onednn.linear: expects parameters weight and (with bias) bias");
    plugin::require(x.rank() >= 1 && w.rank() == 2 && x.dim(-1) == w.dim(1),
                    [&] { return std::string(name) + ": input " + shape_string(x.shape()) +
                                 " does not match weight " + shape_string(w.shape()) + " [out, in]"; });
    s->in = w.dim(1);
    s->out = w.dim(0);
    s->rows = product(x.shape(), 0, x.rank() - 1);
    if (s->has_bias) require_float32(name, call.param(1), "bias");
    s->trivial = s->rows == 0 || s->out == 0 || s->in == 0;
    s->limit_threads(2.0 * double(s->rows) * double(s->in) * double(s->out));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->trivial) return s;
    s->src_md = memory::desc({s->rows, s->in}, memory::data_type::f32, memory::format_tag::nc);
    s->dst_md = memory::desc({s->rows, s->out}, memory::data_type::f32, memory::format_tag::nc);
    s->bias_md = memory::desc({s->out}, memory::data_type::f32, memory::format_tag::x);
    const memory::desc w_user({s->out, s->in}, memory::data_type::f32, memory::format_tag::oi);
    // Input and weights in input_type (bfloat16 under fpmath bf16, unless only oneDNN's
    // reference implementation has it here), bias and output float32.
    auto primitive_desc = [&](memory::data_type type) {
        const memory::desc src({s->rows, s->in}, type, memory::format_tag::nc);
        const memory::desc w_any({s->out, s->in}, type, memory::format_tag::any);
        auto desc = s->has_bias ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, src,
                                                                    w_any, s->bias_md, s->dst_md)
                                : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, src,
                                                                    w_any, s->dst_md);
        return dnnl::inner_product_forward::primitive_desc(desc, scratchpad_attr(post), cpu_engine());
    };
    auto pd = primitive_desc(input_type(call));
    if (is_bf16(pd.src_desc()) && is_reference(pd)) pd = primitive_desc(memory::data_type::f32);
    s->bf16 = is_bf16(pd.src_desc());
    if (s->bf16) {
        s->src_bf16_md = pd.src_desc();
        s->to_src = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), s->src_md, cpu_engine(), s->src_bf16_md));
    }
    s->scratchpad = pd.scratchpad_desc();
    s->weights = reorder_once(w_user, w.data<float>(), pd.weights_desc());
    s->primitive = dnnl::inner_product_forward(pd);
    return s;
}

std::unique_ptr<LinearState> prepare_linear(const PrepareCall& call) { return build_linear(call, {}); }

void linear(const ForwardCall& call) {
    const auto& s = state_of<LinearState>(call, "onednn.linear");
    float* y = call.output().data<float>();
    if (s.trivial) {
        // in == 0: y = bias (or 0) for every row; rows or out == 0: nothing to write.
        for (int64_t r = 0; r < s.rows; ++r)
            for (int64_t o = 0; o < s.out; ++o)
                y[r * s.out + o] = s.has_bias ? call.param(1).data<float>()[o] : 0.0f;
        return;
    }
    memory x = wrap(s.src_md, call.input(0).data<float>());
    if (s.bf16) {
        memory converted = wrap(s.src_bf16_md, scratch(0, s.src_bf16_md.get_size()));
        const ThreadScope scope(s.threads);
        s.to_src.execute(thread_stream(), x, converted);
        x = converted;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, s.weights}, {DNNL_ARG_DST, wrap(s.dst_md, y)}};
    if (s.has_bias) args.emplace(DNNL_ARG_BIAS, wrap(s.bias_md, call.param(1).data<float>()));
    execute(s, s.primitive, std::move(args));
}

// ---- matmul ---------------------------------------------------------------------------------

/// torch.matmul(a, b): a 1-D a is [1, k] (the 1 removed from the result), a 1-D b is [k, 1];
/// leading (batch) dims are aligned at the right, padded with 1s, and broadcast (a batch dim of
/// size 1 against any size), as oneDNN's matmul primitive does for both operands. The output
/// buffer is the host's row-major [batch..., n, m] with the removed 1s, which has the same memory
/// layout.
struct MatmulState : NodeState {
    using NodeState::NodeState;
    bool zero_inner = false;  // k == 0: the result is all zeros
    bool empty = false;       // the result has no elements
    memory::desc a_md, b_md, c_md;
    dnnl::matmul primitive;
};

/// The matmul state of `call`, with `post` (when set) applied to the result inside the primitive.
std::unique_ptr<MatmulState> build_matmul(const PrepareCall& call, const PostOp& post) {
    const char* name = "onednn.matmul";
    auto s = std::make_unique<MatmulState>(name, call);
    const Tensor a = call.input(0), b = call.input(1);
    require_float32(name, a, "input a");
    require_float32(name, b, "input b");
    plugin::require(a.rank() >= 1 && b.rank() >= 1, "onednn.matmul: operands need rank >= 1");
    memory::dims ad(a.shape().begin(), a.shape().end()), bd(b.shape().begin(), b.shape().end());
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    const std::size_t rank = std::max(ad.size(), bd.size());
    plugin::require(rank <= 12, [&] {
        return std::string(name) + ": rank " + std::to_string(rank) +
               " exceeds oneDNN's 12 dimensions";
    });
    ad.insert(ad.begin(), rank - ad.size(), 1);
    bd.insert(bd.begin(), rank - bd.size(), 1);
    plugin::require(ad[rank - 1] == bd[rank - 2], [&] {
        return std::string(name) + ": inner dimensions differ: " + shape_string(a.shape()) + " @ " +
               shape_string(b.shape());
    });
    memory::dims cd(rank);
    for (std::size_t i = 0; i + 2 < rank; ++i) {
        plugin::require(ad[i] == bd[i] || ad[i] == 1 || bd[i] == 1, [&] {
            return std::string(name) + ": batch dims of " + shape_string(a.shape()) + " and " +
                   shape_string(b.shape()) + " do not broadcast";
        });
        cd[i] = ad[i] == 1 ? bd[i] : ad[i];
    }
    cd[rank - 2] = ad[rank - 2];
    cd[rank - 1] = bd[rank - 1];
    int64_t count = 1;
    for (auto d : cd) count *= d;
    plugin::require(count == call.output().numel(), [&] {
        return std::string(name) + ": output " + shape_string(call.output().shape()) +
               " does not match " + shape_string(a.shape()) + " @ " + shape_string(b.shape());
    });
    s->empty = count == 0;
    s->zero_inner = ad[rank - 1] == 0;
    s->limit_threads(2.0 * double(count) * double(ad[rank - 1]));
    // Built for the thread count it will run with (oneDNN sizes its work split at creation).
    const ThreadScope scope(s->threads);
    if (s->empty || s->zero_inner) return s;
    // A batch of zero size in one operand broadcast against 1 gives an empty result (handled above).
    s->a_md = plain_desc(ad);
    s->b_md = plain_desc(bd);
    s->c_md = plain_desc(cd);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(s->a_md, s->b_md, s->c_md), scratchpad_attr(post),
                                    cpu_engine());
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::matmul(pd);
    return s;
}

std::unique_ptr<MatmulState> prepare_matmul(const PrepareCall& call) { return build_matmul(call, {}); }

void matmul(const ForwardCall& call) {
    const auto& s = state_of<MatmulState>(call, "onednn.matmul");
    if (s.empty) return;
    const Tensor out = call.output();
    if (s.zero_inner) {
        std::memset(out.data<float>(), 0, static_cast<std::size_t>(out.numel()) * sizeof(float));
        return;
    }
    execute(s, s.primitive,
            {{DNNL_ARG_SRC, wrap(s.a_md, call.input(0).data<float>())},
             {DNNL_ARG_WEIGHTS, wrap(s.b_md, call.input(1).data<float>())},
             {DNNL_ARG_DST, wrap(s.c_md, out.data<float>())}});
}

// ---- backward: linear and matmul through oneDNN's sgemm ---------------------------------------

/// Row-major C[m × n] = op(A) · op(B) (+ C when `accumulate`) by oneDNN's sgemm; with k = 0, C is
/// zeroed (or kept), never scaled: sgemm would compute 0 · C, NaN for NaN garbage in C.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, static_cast<std::size_t>(n) * sizeof(float));
        return;
    }
    const auto status = dnnl::sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                    accumulate ? 1.0f : 0.0f, c, ldc);
    plugin::require(status == dnnl::status::success, "onednn: sgemm failed (oneDNN status " +
                                                          std::to_string(static_cast<int>(status)) + ")");
}

/// The vector-Jacobian product of F.linear (PyTorch's LinearBackward): with x flattened to
/// [M, in] and dy to [M, out], dx = dy · weight [M, in], dweight = dyᵀ · x [out, in], dbias =
/// Σ_rows dy [out]. Gradients the host does not want are not computed.
void linear_backward(const BackwardCall& call) {
    const char* name = "onednn.linear";
    const Tensor x = call.input(0), w = call.param(0), dy = call.grad_output();
    require_plain_float32(name, x, "input x");
    require_plain_float32(name, w, "weight");
    require_plain_float32(name, dy, "grad output");
    plugin::require(x.rank() >= 1 && w.rank() == 2 && x.dim(-1) == w.dim(1), [&] {
        return std::string(name) + ": input " + shape_string(x.shape()) + " does not match weight " +
               shape_string(w.shape()) + " [out, in]";
    });
    const int64_t in = w.dim(1), out = w.dim(0), rows = product(x.shape(), 0, x.rank() - 1);
    std::vector<int64_t> y_shape(x.shape().begin(), x.shape().end());
    y_shape.back() = out;
    require_shape(name, dy, y_shape, "grad output");
    if (call.num_params() > 1) {
        const int64_t bias_shape[] = {out};
        require_shape(name, call.param(1), bias_shape, "bias");
    }
    const ThreadScope scope(backward_threads(backward_state<LinearState>(call)));
    const float* X = x.data<float>();
    const float* W = w.data<float>();
    const float* G = dy.data<float>();
    if (float* dx = grad_buffer(name, call.grad_input(0), x, "grad input"))
        gemm(false, false, rows, in, out, G, out, W, in, dx, in, false);
    if (float* dw = grad_buffer(name, call.grad_param(0), w, "grad weight"))
        gemm(true, false, out, in, rows, G, out, X, in, dw, in, false);
    if (call.num_params() > 1)
        if (float* db = grad_buffer(name, call.grad_param(1), call.param(1), "grad bias")) {
            std::fill(db, db + out, 0.0f);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t o = 0; o < out; ++o) db[o] += G[r * out + o];
        }
}

/// The vector-Jacobian product of torch.matmul (PyTorch's MmBackward / BmmBackward with
/// broadcasting): with a [.., n, k], b [.., k, m] and dc [.., n, m] aligned as in the forward
/// (1-D operands promoted, batch dims broadcast), da = Σ over the batch positions a was
/// broadcast to of dc · bᵀ, db likewise of aᵀ · dc.
void matmul_backward(const BackwardCall& call) {
    const char* name = "onednn.matmul";
    const Tensor a = call.input(0), b = call.input(1), dc = call.grad_output();
    require_plain_float32(name, a, "input a");
    require_plain_float32(name, b, "input b");
    require_plain_float32(name, dc, "grad output");
    plugin::require(a.rank() >= 1 && b.rank() >= 1, "onednn.matmul: operands need rank >= 1");
    // As the forward: 1-D a is [1, k], 1-D b is [k, 1], both padded with leading 1s to one rank.
    const std::size_t rank = std::max<std::size_t>({std::size_t(a.rank()), std::size_t(b.rank()), 2});
    std::vector<int64_t> ad(rank, 1), bd(rank, 1);
    std::copy(a.shape().begin(), a.shape().end(), ad.end() - (a.rank() == 1 ? 1 : a.rank()));
    if (b.rank() == 1)
        bd[rank - 2] = b.dim(0);
    else
        std::copy(b.shape().begin(), b.shape().end(), bd.end() - b.rank());
    const int64_t n = ad[rank - 2], k = ad[rank - 1], m = bd[rank - 1];
    plugin::require(bd[rank - 2] == k, [&] {
        return std::string(name) + ": inner dimensions differ: " + shape_string(a.shape()) + " @ " +
               shape_string(b.shape());
    });
    std::vector<int64_t> cd(rank - 2);
    int64_t batches = 1;
    for (std::size_t i = 0; i + 2 < rank; ++i) {
        plugin::require(ad[i] == bd[i] || ad[i] == 1 || bd[i] == 1, [&] {
            return std::string(name) + ": batch dims of " + shape_string(a.shape()) + " and " +
                   shape_string(b.shape()) + " do not broadcast";
        });
        cd[i] = ad[i] == 1 ? bd[i] : ad[i];
        batches *= cd[i];
    }
    // torch.matmul's result: the broadcast batch dims, then n (unless a is 1-D), then m (unless b is).
    std::vector<int64_t> c_shape(cd);
    if (a.rank() >= 2) c_shape.push_back(n);
    if (b.rank() >= 2) c_shape.push_back(m);
    require_shape(name, dc, c_shape, "grad output");
    float* da = grad_buffer(name, call.grad_input(0), a, "grad a");
    float* db = grad_buffer(name, call.grad_input(1), b, "grad b");
    if (da) std::fill(da, da + a.numel(), 0.0f);
    if (db) std::fill(db, db + b.numel(), 0.0f);
    if ((!da && !db) || batches == 0 || n * m == 0) return;
    const ThreadScope scope(backward_threads(backward_state<MatmulState>(call)));
    const float* A = a.data<float>();
    const float* B = b.data<float>();
    const float* C = dc.data<float>();
    // Batch position -> offset of a's and b's matrix (0 along their broadcast dims).
    std::vector<int64_t> index(rank - 2, 0);
    for (int64_t t = 0; t < batches; ++t) {
        int64_t a_off = 0, b_off = 0, a_stride = 1, b_stride = 1;
        for (std::size_t i = rank - 2; i-- > 0;) {
            if (ad[i] != 1) a_off += index[i] * a_stride;
            if (bd[i] != 1) b_off += index[i] * b_stride;
            a_stride *= ad[i];
            b_stride *= bd[i];
        }
        const float* ct = C + t * n * m;
        if (da) gemm(false, true, n, k, m, ct, m, B + b_off * k * m, m, da + a_off * n * k, k, true);
        if (db) gemm(true, false, k, m, n, A + a_off * n * k, k, ct, m, db + b_off * k * m, m, true);
        for (std::size_t i = rank - 2; i-- > 0;) {
            if (++index[i] < cd[i]) break;
            index[i] = 0;
        }
    }
}

}  // namespace

void* prepare_linear_fused(const PrepareCall& call, const Fusion& fusion) {
    if (fusion.add_input1) return nullptr;  // only convolutions take a residual (conv2d's forward reads it)
    auto s = build_linear(call, fusion.activation);
    return s->trivial ? nullptr : s.release();
}

void* prepare_matmul_fused(const PrepareCall& call, const Fusion& fusion) {
    if (fusion.add_input1) return nullptr;
    auto s = build_matmul(call, fusion.activation);
    return s->empty || s->zero_inner ? nullptr : s.release();
}

bool linear_computes_in_bf16(const capsule_kernel* kernel, const void* state) {
    return std::string_view(kernel->capsule_name) == linear_kernel.capsule_name && state &&
           static_cast<const LinearState*>(state)->bf16;
}

const capsule_kernel linear_kernel = plugin::kernel(
    "onednn.linear", forward_entry<linear>, backward_entry<linear_backward>, prepare_entry<LinearState, prepare_linear>,
    release_entry<LinearState>, kFloat32Only);
namespace {

/// torch.bmm(a [b, n, k], b [b, k, m]) -> [b, n, m]: torch.matmul's computation on operands of
/// rank 3 with equal batch sizes (no broadcasting), which these checks require (INVALID_ARGUMENT
/// naming the shapes) before the matmul kernels run.
void require_bmm_operands(const Tensor& a, const Tensor& b) {
    plugin::require(a.rank() == 3 && b.rank() == 3 && a.dim(0) == b.dim(0) && a.dim(2) == b.dim(1), [&] {
        return "onednn.bmm: expects a [b, n, k] and b [b, k, m], got " + shape_string(a.shape()) + " and " +
               shape_string(b.shape());
    });
}

std::unique_ptr<MatmulState> prepare_bmm(const PrepareCall& call) {
    require_bmm_operands(call.input(0), call.input(1));
    return prepare_matmul(call);
}

void bmm_backward(const BackwardCall& call) {
    require_bmm_operands(call.input(0), call.input(1));
    matmul_backward(call);
}

}  // namespace

const capsule_kernel matmul_kernel = plugin::kernel(
    "onednn.matmul", forward_entry<matmul>, backward_entry<matmul_backward>, prepare_entry<MatmulState, prepare_matmul>,
    release_entry<MatmulState>, kFloat32Only);

const capsule_kernel bmm_kernel = plugin::kernel(
    "onednn.bmm", forward_entry<matmul>, backward_entry<bmm_backward>, prepare_entry<MatmulState, prepare_bmm>,
    release_entry<MatmulState>, kFloat32Only);

}  // namespace capsule::onednn
