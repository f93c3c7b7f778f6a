// Device-side entry points of the native CUDA plugin: plain launchers over raw device pointers,
// implemented in the .cu files and called by the ABI glue (*_ops.cpp). Nothing here knows the
// capsule ABI beyond the dtype enum, so the .cu files stay small and fast to compile; argument
// checking, attributes and error messages live on the C++ side.
//
// Every launcher enqueues work on `stream` and returns the launch status (cudaGetLastError right
// after the launch); execution errors surface at the next synchronizing call, as usual in CUDA.
// Zero-element launches are no-ops.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "capsule/plugin_abi.h"

namespace capsule::cuda {

/// Threads per block of the one-thread-per-element kernels.
inline constexpr int kThreads = 256;

/// Blocks for n elements at kThreads each, at most 2^16: the kernels' grid-stride loops cover
/// the rest.
inline unsigned blocks_for(int64_t n) {
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < (int64_t(1) << 16) ? blocks : (int64_t(1) << 16));
}

/// Most dimensions a broadcast or reduction layout carries after merging adjacent dimensions
/// that behave alike (so NumPy shapes of any rank usually fit).
inline constexpr int kMaxLayoutRank = 8;

enum class Unary : int {
    abs, sqrt, relu, gelu, gelu_tanh, sigmoid, tanh, softplus, exp, log, sin, cos, inv, scale, clamp
};

/// Attributes of the parametrised unary ops: scale (a = factor), softplus (a = beta,
/// b = threshold), clamp (a = min when has_a, b = max when has_b).
struct UnaryParams {
    double a = 0;
    double b = 0;
    bool has_a = false;
    bool has_b = false;
};

enum class Binary : int { add, sub, mul, max, min };

/// A broadcasting binary op over row-major tensors, with dimensions merged: `shape` is the
/// output's, and each operand's stride is 0 along the dimensions it is broadcast in.
struct BroadcastLayout {
    int rank = 0;
    bool same_shape = false;  // both operands have the output's shape: plain linear indexing
    int64_t shape[kMaxLayoutRank] = {};
    int64_t a_strides[kMaxLayoutRank] = {};
    int64_t b_strides[kMaxLayoutRank] = {};
};

/// Summation of a row-major `source` tensor onto a `target` whose shape equals the source's
/// except for dimensions of size 1 (the reverse of broadcasting). Target elements enumerate the
/// kept dimensions in order; each sums the source over the reduced dimensions.
struct ReduceLayout {
    int kept_rank = 0;
    int reduced_rank = 0;
    int64_t kept_sizes[kMaxLayoutRank] = {};
    int64_t kept_strides[kMaxLayoutRank] = {};  // strides in the source
    int64_t reduced_sizes[kMaxLayoutRank] = {};
    int64_t reduced_strides[kMaxLayoutRank] = {};
    int64_t target_count = 1;   // product of kept sizes
    int64_t reduced_count = 1;  // product of reduced sizes
};

/// y = f(x), n elements.
cudaError_t launch_unary_forward(Unary op, capsule_dtype dtype, const void* x, void* y, int64_t n,
                                 UnaryParams params, cudaStream_t stream);
/// gx = gy * f'(x), n elements.
cudaError_t launch_unary_backward(Unary op, capsule_dtype dtype, const void* x, const void* gy,
                                  void* gx, int64_t n, UnaryParams params, cudaStream_t stream);

/// out = a (op) b with broadcasting. `out` may alias `a` or `b` when that operand has the
/// output's shape.
cudaError_t launch_binary_forward(Binary op, capsule_dtype dtype, const void* a, const void* b,
                                  void* out, const BroadcastLayout& layout, cudaStream_t stream);
/// The gradient of operand `which` (0 = a, 1 = b) before un-broadcasting:
/// g[o] = gout[o] * d(a op b)/d(operand) at output element o, for every output element.
cudaError_t launch_binary_backward(Binary op, int which, capsule_dtype dtype, const void* a,
                                   const void* b, const void* gout, void* g,
                                   const BroadcastLayout& layout, cudaStream_t stream);

/// target = sum of source over the layout's reduced dimensions.
cudaError_t launch_reduce_sum(capsule_dtype dtype, const void* source, void* target,
                              const ReduceLayout& layout, cudaStream_t stream);

/// Softmax or log-softmax of x viewed as [outer, axis, inner] over the middle dimension.
cudaError_t launch_softmax_forward(bool log, capsule_dtype dtype, const void* x, void* y,
                                   int64_t outer, int64_t axis, int64_t inner,
                                   cudaStream_t stream);
/// Vector-Jacobian product from the forward output y: softmax gx = y (gy - sum(gy y)),
/// log-softmax gx = gy - exp(y) sum(gy).
cudaError_t launch_softmax_backward(bool log, capsule_dtype dtype, const void* y, const void* gy,
                                    void* gx, int64_t outer, int64_t axis, int64_t inner,
                                    cudaStream_t stream);

/// cross_entropy per row of x [n, c] and int64 target [n] (training.cu): loss[i] (0 for a row
/// whose target is ignore_index), counted[i] (0 for such a row, else 1), and *bad set to 1 when
/// a target is outside [0, c) and not ignore_index.
cudaError_t launch_cross_entropy_rows(capsule_dtype dtype, const void* x, const int64_t* target, void* loss,
                                      void* counted, int* bad, int64_t n, int64_t c, int64_t ignore_index,
                                      cudaStream_t stream);
/// gx [n, c] = g_i (softmax(x_i) − onehot(t_i)), 0 for ignored rows; g_i = gy[i] with
/// `per_row`, else gy[0] · scale.
cudaError_t launch_cross_entropy_grad(capsule_dtype dtype, const void* x, const int64_t* target, const void* gy,
                                      bool per_row, double scale, void* gx, int64_t n, int64_t c,
                                      int64_t ignore_index, cudaStream_t stream);

/// torch.optim.SGD's step (docs/ops.md `sgd`); `first`: step 1.
struct SgdParams {
    double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false, first = false;
};
/// torch.optim.Adam's step (docs/ops.md `adam`): step_size = lr / (1 − β1ᵗ),
/// correction2_sqrt = √(1 − β2ᵗ).
struct AdamParams {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, step_size = 0, correction2_sqrt = 1;
};
/// One step over n elements; outputs may alias the inputs (each element is read before written).
cudaError_t launch_sgd_step(capsule_dtype dtype, const void* p, const void* grad, const void* buf, void* p_out,
                            void* buf_out, int64_t n, SgdParams params, cudaStream_t stream);
cudaError_t launch_adam_step(capsule_dtype dtype, const void* p, const void* grad, const void* m, const void* v,
                             void* p_out, void* m_out, void* v_out, int64_t n, AdamParams params,
                             cudaStream_t stream);

/// cudaSuccess when this library carries a kernel image the current device can run (probe).
cudaError_t check_kernel_image();

}  // namespace capsule::cuda
