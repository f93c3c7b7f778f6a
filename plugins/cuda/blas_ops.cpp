// matmul and linear on cuBLAS, forward and backward (linear's forward with a bias on cuBLASLt's
// bias epilogue where it has an algorithm: blas_lt.cpp).
//
// Row-major tensors meet column-major cuBLAS by the transpose identity: a row-major [r, c] buffer
// is the column-major [c, r] matrix, so C = op(A) op(B) in row-major is C^T = op(B)^T op(A)^T,
// i.e. one cuBLAS call with the operands swapped and the same transpose flags (rm_gemm below).
//
// cuBLAS handles: one per host thread, created lazily on first use (and again if the thread's
// current device changed), destroyed when the thread exits. A handle is not safe to share
// between threads that set different streams, and cublasCreate is far too slow to call per
// kernel, so a thread_local handle makes the kernels reentrant with no locking; each call binds
// the handle to the call's stream with cublasSetStream. The handles use the default math mode
// (no TF32: float32 results are IEEE single precision).
//
// matmul follows numpy.matmul / torch.matmul: 1-D operands are promoted (and the added axis
// dropped from the result), batch dimensions broadcast. Batches map to one strided-batched call
// when each operand's batches are evenly spaced (all distinct, or one broadcast matrix), and to
// one call per batch otherwise. Gradients of broadcast batches are summed with the reduction
// kernel from a scratch buffer.
#include <climits>
#include <optional>

#include <cublas_v2.h>

#include "blas_lt.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

void check_cublas(cublasStatus_t status, const std::string& what) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    throw KernelError(status == CUBLAS_STATUS_ALLOC_FAILED ? CAPSULE_ERROR_OUT_OF_MEMORY
                                                           : CAPSULE_ERROR_DEVICE,
                      what + ": " + cublasGetStatusString(status) + " (" +
                          cublasGetStatusName(status) + ")");
}

struct ThreadHandle {
    cublasHandle_t handle = nullptr;
    int device = -1;
    ThreadHandle() = default;
    ThreadHandle(const ThreadHandle&) = delete;
    ThreadHandle& operator=(const ThreadHandle&) = delete;
    ~ThreadHandle() {
        if (handle) (void)cublasDestroy(handle);
    }
};

/// This thread's cuBLAS handle for the current device, bound to `stream`.
cublasHandle_t blas_handle(cudaStream_t stream) {
    thread_local ThreadHandle local;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    if (!local.handle || local.device != device) {
        if (local.handle) (void)cublasDestroy(local.handle);
        local.handle = nullptr;
        check_cublas(cublasCreate(&local.handle), "cublasCreate");
        local.device = device;
    }
    check_cublas(cublasSetStream(local.handle, stream), "cublasSetStream");
    return local.handle;
}

int as_int(int64_t v, const char* what) {
    if (v < 0 || v > INT_MAX)
        throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                          std::string(what) + " = " + std::to_string(v) +
                              " exceeds the 32-bit range of the cuBLAS calls used");
    return static_cast<int>(v);
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const float* a, int lda, long long sa, const float* b, int ldb,
                    long long sb, float* c, int ldc, long long sc, int batch) {
    const float one = 1, zero = 0;
    if (batch == 1) return cublasSgemm(h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc);
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c,
                                     ldc, sc, batch);
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const double* a, int lda, long long sa, const double* b, int ldb,
                    long long sb, double* c, int ldc, long long sc, int batch) {
    const double one = 1, zero = 0;
    if (batch == 1) return cublasDgemm(h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc);
    return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c,
                                     ldc, sc, batch);
}

/// One operand of a row-major product: pointer (elements offset applied later), leading
/// dimension (columns of the stored matrix), transpose flag, and batch stride in elements.
struct Operand {
    const void* data;
    int64_t ld;
    bool transpose;
    int64_t batch_stride = 0;
};

/// C[M, N] = op(A)[M, K] op(B)[K, N] in row-major, for `batch` products with C's batch stride
/// M * N (ldc = N). K == 0 writes zeros.
void rm_gemm(capsule_dtype dtype, cudaStream_t stream, int64_t m, int64_t n, int64_t k,
             const Operand& a, const Operand& b, void* c, int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    const size_t bytes = dtype_bytes(dtype);
    if (k == 0) {
        check_cuda(cudaMemsetAsync(c, 0, static_cast<size_t>(batch * m * n) * bytes, stream),
                   "cudaMemsetAsync");
        return;
    }
    cublasHandle_t h = blas_handle(stream);
    const auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
    const int im = as_int(m, "rows"), in = as_int(n, "columns"), ik = as_int(k, "inner size");
    const int lda = as_int(a.ld, "leading dimension"), ldb = as_int(b.ld, "leading dimension");
    const int batches = as_int(batch, "batch count");
    cublasStatus_t status;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        status = gemm(h, op(b.transpose), op(a.transpose), in, im, ik,
                      static_cast<const double*>(b.data), ldb, b.batch_stride,
                      static_cast<const double*>(a.data), lda, a.batch_stride,
                      static_cast<double*>(c), in, m * n, batches);
    else
        status = gemm(h, op(b.transpose), op(a.transpose), in, im, ik,
                      static_cast<const float*>(b.data), ldb, b.batch_stride,
                      static_cast<const float*>(a.data), lda, a.batch_stride,
                      static_cast<float*>(c), in, m * n, batches);
    check_cublas(status, batch == 1 ? "cuBLAS gemm" : "cuBLAS strided batched gemm");
}

const void* offset(const void* p, int64_t elements, capsule_dtype dtype) {
    return static_cast<const char*>(p) + elements * static_cast<int64_t>(dtype_bytes(dtype));
}
void* offset(void* p, int64_t elements, capsule_dtype dtype) {
    return static_cast<char*>(p) + elements * static_cast<int64_t>(dtype_bytes(dtype));
}

// ---------------------------------------------------------------------------------------------
// matmul

/// Shapes of a matmul with 1-D operands promoted: a [batch_a..., M, K], b [batch_b..., K, N].
struct MatmulShape {
    Dims batch_a, batch_b, batch_out, out;
    int64_t m = 1, n = 1, k = 1, count = 1;
    std::vector<int64_t> a_index, b_index;  // operand batch of each output batch

    MatmulShape(const Dims& a0, const Dims& b0) {
        plugin::require(!a0.empty() && !b0.empty(),
                        "matmul operands must have rank >= 1, got " + dims_text(a0) + " x " +
                            dims_text(b0));
        Dims a = a0, b = b0;
        if (a.size() == 1) a.insert(a.begin(), 1);
        if (b.size() == 1) b.push_back(1);
        m = a[a.size() - 2];
        k = a.back();
        n = b.back();
        plugin::require(b[b.size() - 2] == k,
                        "matmul inner dimensions differ: " + dims_text(a0) + " x " + dims_text(b0));
        batch_a.assign(a.begin(), a.end() - 2);
        batch_b.assign(b.begin(), b.end() - 2);
        batch_out = broadcast_shapes(batch_a, batch_b);
        out = batch_out;
        if (a0.size() > 1) out.push_back(m);
        if (b0.size() > 1) out.push_back(n);
        count = element_count(batch_out);
        a_index = operand_index(batch_a);
        b_index = operand_index(batch_b);
    }

    std::vector<int64_t> operand_index(const Dims& operand) const {
        const size_t rank = batch_out.size(), pad = rank - operand.size();
        std::vector<int64_t> index(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) {
            int64_t rest = i, j = 0, stride = 1;
            for (size_t d = rank; d-- > 0;) {
                const int64_t c = rest % batch_out[d];
                rest /= batch_out[d];
                const int64_t size = d < pad ? 1 : operand[d - pad];
                if (size != 1) j += c * stride;
                stride *= size;
            }
            index[static_cast<size_t>(i)] = j;
        }
        return index;
    }
};

/// The stride s with index[i] == i * s for every i, when there is one.
std::optional<int64_t> even_stride(const std::vector<int64_t>& index) {
    if (index.empty()) return 0;
    const int64_t s = index.size() > 1 ? index[1] - index[0] : 0;
    if (index[0] != 0) return std::nullopt;
    for (size_t i = 0; i < index.size(); ++i)
        if (index[i] != static_cast<int64_t>(i) * s) return std::nullopt;
    return s;
}

/// C_i = op(A_{ia(i)}) op(B_{ib(i)}) for every output batch i; `a_matrix`/`b_matrix` are the
/// element counts of one operand matrix.
void batched_product(capsule_dtype dtype, cudaStream_t stream, int64_t m, int64_t n, int64_t k,
                     Operand a, int64_t a_matrix, const std::vector<int64_t>& ia, Operand b,
                     int64_t b_matrix, const std::vector<int64_t>& ib, void* c) {
    const int64_t count = static_cast<int64_t>(ia.size());
    const auto sa = even_stride(ia), sb = even_stride(ib);
    if (sa && sb) {
        a.batch_stride = *sa * a_matrix;
        b.batch_stride = *sb * b_matrix;
        rm_gemm(dtype, stream, m, n, k, a, b, c, count);
        return;
    }
    for (int64_t i = 0; i < count; ++i) {
        Operand ai = a, bi = b;
        ai.data = offset(a.data, ia[static_cast<size_t>(i)] * a_matrix, dtype);
        bi.data = offset(b.data, ib[static_cast<size_t>(i)] * b_matrix, dtype);
        rm_gemm(dtype, stream, m, n, k, ai, bi, offset(c, i * m * n, dtype), 1);
    }
}

bool is_identity(const std::vector<int64_t>& index) {
    const auto s = even_stride(index);
    return s && (*s == 1 || index.size() <= 1);
}

}  // namespace

void matmul_forward(const ForwardCall& call) {
    plugin::require(call.num_inputs() == 2, "matmul takes 2 inputs");
    const Tensor a = call.input(0), b = call.input(1), out = call.output(0);
    require_cuda_tensor(a, "input 0");
    require_cuda_tensor(b, "input 1");
    require_cuda_tensor(out, "output");
    const auto dtype = common_float_dtype({{a, "input 0"}, {b, "input 1"}, {out, "output"}});
    const MatmulShape s(dims_of(a), dims_of(b));
    require_shape(out, s.out, "output");
    const cudaStream_t stream = stream_of(call.args->stream);
    const Operand A{a.view->data, s.k, false}, B{b.view->data, s.n, false};
    // b shared by every batch and a's batches contiguous: one product with M' = count * M.
    if (s.count > 1 && element_count(s.batch_b) == 1 && is_identity(s.a_index) &&
        s.count * s.m <= INT_MAX) {
        rm_gemm(dtype, stream, s.count * s.m, s.n, s.k, A, B, out.view->data, 1);
        return;
    }
    batched_product(dtype, stream, s.m, s.n, s.k, A, s.m * s.k, s.a_index, B, s.k * s.n,
                    s.b_index, out.view->data);
}

void matmul_backward(const BackwardCall& call) {
    plugin::require(call.num_inputs() == 2, "matmul takes 2 inputs");
    const Tensor a = call.input(0), b = call.input(1), g = call.grad_output(0);
    const Tensor ga = call.grad_input(0), gb = call.grad_input(1);
    if (!ga.present() && !gb.present()) return;
    require_cuda_tensor(a, "input 0");
    require_cuda_tensor(b, "input 1");
    require_cuda_tensor(g, "grad output");
    const auto dtype = common_float_dtype({{a, "input 0"}, {b, "input 1"}, {g, "grad output"}});
    const MatmulShape s(dims_of(a), dims_of(b));
    require_shape(g, s.out, "grad output");
    const cudaStream_t stream = stream_of(call.args->stream);
    const std::vector<int64_t> identity = [&] {
        std::vector<int64_t> v(static_cast<size_t>(s.count));
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i);
        return v;
    }();
    const size_t bytes = dtype_bytes(dtype);

    if (ga.present()) {  // gA_i = G_i B_i^T : [M, K]
        require_cuda_tensor(ga, "grad input 0");
        common_float_dtype({{g, "grad output"}, {ga, "grad input 0"}});
        require_shape(ga, dims_of(a), "grad input 0");
        const Operand G{g.view->data, s.n, false}, Bt{b.view->data, s.n, true};
        if (is_identity(s.a_index)) {
            batched_product(dtype, stream, s.m, s.k, s.n, G, s.m * s.n, identity, Bt, s.k * s.n,
                            s.b_index, ga.view->data);
        } else {
            Scratch full(static_cast<size_t>(s.count * s.m * s.k) * bytes, stream);
            batched_product(dtype, stream, s.m, s.k, s.n, G, s.m * s.n, identity, Bt, s.k * s.n,
                            s.b_index, full.get());
            Dims source = s.batch_out, target = s.batch_a;
            source.insert(source.end(), {s.m, s.k});
            target.insert(target.end(), {s.m, s.k});
            check_cuda(launch_reduce_sum(dtype, full.get(), ga.view->data,
                                         reduce_layout(source, target), stream),
                       "launching the broadcast-gradient reduction");
        }
    }
    if (gb.present()) {  // gB_i = A_i^T G_i : [K, N]
        require_cuda_tensor(gb, "grad input 1");
        common_float_dtype({{g, "grad output"}, {gb, "grad input 1"}});
        require_shape(gb, dims_of(b), "grad input 1");
        const Operand At{a.view->data, s.k, true}, G{g.view->data, s.n, false};
        if (is_identity(s.b_index)) {
            batched_product(dtype, stream, s.k, s.n, s.m, At, s.m * s.k, s.a_index, G, s.m * s.n,
                            identity, gb.view->data);
        } else if (element_count(s.batch_b) == 1 && is_identity(s.a_index) &&
                   s.count * s.m <= INT_MAX) {
            // Sum over batches folded into the inner dimension: A as [count*M, K], G as [count*M, N].
            rm_gemm(dtype, stream, s.k, s.n, s.count * s.m, At, G, gb.view->data, 1);
        } else {
            Scratch full(static_cast<size_t>(s.count * s.k * s.n) * bytes, stream);
            batched_product(dtype, stream, s.k, s.n, s.m, At, s.m * s.k, s.a_index, G, s.m * s.n,
                            identity, full.get());
            Dims source = s.batch_out, target = s.batch_b;
            source.insert(source.end(), {s.k, s.n});
            target.insert(target.end(), {s.k, s.n});
            check_cuda(launch_reduce_sum(dtype, full.get(), gb.view->data,
                                         reduce_layout(source, target), stream),
                       "launching the broadcast-gradient reduction");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// linear: y = x W^T + bias, x [..., in], W [out, in], bias [out]

namespace {

struct LinearShape {
    int64_t rows = 1, in = 0, out = 0;
    bool bias = true;
    Dims y;
};

LinearShape linear_shape(const Tensor& x, const Tensor& w, size_t num_params,
                         const plugin::Attributes& attrs) {
    LinearShape s;
    const Dims xd = dims_of(x), wd = dims_of(w);
    plugin::require(!xd.empty(), "linear input must have rank >= 1");
    plugin::require(wd.size() == 2, "linear weight must have rank 2, got " + dims_text(wd));
    s.in = xd.back();
    s.out = wd[0];
    plugin::require(wd[1] == s.in, "linear weight " + dims_text(wd) + " does not match input " +
                                       dims_text(xd));
    const int64_t out_features = attrs.get_int("out_features", s.out);
    plugin::require(out_features == s.out,
                    "attribute 'out_features' = " + std::to_string(out_features) +
                        " but the weight has " + std::to_string(s.out) + " rows");
    s.bias = attrs.get_bool("bias", true);
    plugin::require(num_params == (s.bias ? 2u : 1u),
                    std::string("linear expects ") + (s.bias ? "2 parameters (weight, bias)"
                                                             : "1 parameter (weight)") +
                        ", got " + std::to_string(num_params));
    s.rows = element_count(xd) / (s.in == 0 ? 1 : s.in);
    if (s.in == 0) s.rows = element_count(Dims(xd.begin(), xd.end() - 1));
    s.y = xd;
    s.y.back() = s.out;
    return s;
}

}  // namespace

void linear_forward(const ForwardCall& call) {
    plugin::require(call.num_inputs() == 1, "linear takes 1 input");
    const Tensor x = call.input(0), w = call.param(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(w, "parameter weight");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {w, "parameter weight"}, {y, "output"}});
    const LinearShape s = linear_shape(x, w, call.num_params(), call.attrs());
    require_shape(y, s.y, "output");
    const cudaStream_t stream = stream_of(call.args->stream);
    const Tensor bias = s.bias ? call.param(1) : Tensor{nullptr};
    if (s.bias) {
        require_cuda_tensor(bias, "parameter bias");
        common_float_dtype({{x, "input 0"}, {bias, "parameter bias"}});
        require_shape(bias, {s.out}, "parameter bias");
        if (lt_linear_with_bias(dtype, stream, s.rows, s.in, s.out, x.view->data, w.view->data, bias.view->data,
                                y.view->data))
            return;
    }
    // Without a bias, or where cuBLASLt has no algorithm: a cuBLAS GEMM, then the bias kernel.
    rm_gemm(dtype, stream, s.rows, s.out, s.in, Operand{x.view->data, s.in, false},
            Operand{w.view->data, s.in, true}, y.view->data, 1);
    if (s.bias) {
        const Dims rows_out{s.rows, s.out};
        check_cuda(launch_binary_forward(Binary::add, dtype, y.view->data, bias.view->data,
                                         y.view->data, broadcast_layout(rows_out, {s.out}, rows_out),
                                         stream),
                   "launching the bias addition");
    }
}

void linear_backward(const BackwardCall& call) {
    plugin::require(call.num_inputs() == 1, "linear takes 1 input");
    const Tensor x = call.input(0), w = call.param(0), g = call.grad_output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(w, "parameter weight");
    require_cuda_tensor(g, "grad output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {w, "parameter weight"}, {g, "grad output"}});
    const LinearShape s = linear_shape(x, w, call.num_params(), call.attrs());
    require_shape(g, s.y, "grad output");
    const cudaStream_t stream = stream_of(call.args->stream);
    const Operand G{g.view->data, s.out, false};
    if (const Tensor gx = call.grad_input(0); gx.present()) {  // gx = G W : [rows, in]
        require_cuda_tensor(gx, "grad input 0");
        common_float_dtype({{g, "grad output"}, {gx, "grad input 0"}});
        require_shape(gx, dims_of(x), "grad input 0");
        rm_gemm(dtype, stream, s.rows, s.in, s.out, G, Operand{w.view->data, s.in, false},
                gx.view->data, 1);
    }
    if (const Tensor gw = call.grad_param(0); gw.present()) {  // gW = G^T x : [out, in]
        require_cuda_tensor(gw, "grad parameter weight");
        common_float_dtype({{g, "grad output"}, {gw, "grad parameter weight"}});
        require_shape(gw, dims_of(w), "grad parameter weight");
        rm_gemm(dtype, stream, s.out, s.in, s.rows, Operand{g.view->data, s.out, true},
                Operand{x.view->data, s.in, false}, gw.view->data, 1);
    }
    if (s.bias) {
        if (const Tensor gbias = call.grad_param(1); gbias.present()) {  // column sums of G
            require_cuda_tensor(gbias, "grad parameter bias");
            common_float_dtype({{g, "grad output"}, {gbias, "grad parameter bias"}});
            require_shape(gbias, {s.out}, "grad parameter bias");
            check_cuda(launch_reduce_sum(dtype, g.view->data, gbias.view->data,
                                         reduce_layout({s.rows, s.out}, {s.out}), stream),
                       "launching the bias-gradient reduction");
        }
    }
}

}  // namespace capsule::cuda
