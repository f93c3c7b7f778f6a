// layer_norm kernels (layer_norm.hpp): one block per row of x viewed as [rows, n], n the product of
// normalized_shape. Statistics in two passes over the row (mean, then the biased variance of the
// deviations), each reduced across the block in shared memory; the backward pass recomputes them.
#include "launch.hpp"
#include "layer_norm.hpp"

namespace capsule::cuda {
namespace {

constexpr unsigned kMaxBlocks = 1u << 20;  // rows per launch; blocks loop over the rest

/// The sum of every thread's `value` over the block (all threads get it).
template <typename T>
__device__ T block_sum(T value, T* shared) {
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    const T total = shared[0];
    __syncthreads();  // shared is reused by the next reduction
    return total;
}

/// Row mean and 1/sqrt(var + eps) (biased variance, as torch.nn.LayerNorm).
template <typename T>
__device__ void row_statistics(const T* __restrict__ row, int64_t n, double eps, T* shared, T& mean, T& rstd) {
    T sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) sum += row[j];
    mean = block_sum(sum, shared) / T(n);
    T squares = 0;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
        const T d = row[j] - mean;
        squares += d * d;
    }
    rstd = T(1) / sqrt(block_sum(squares, shared) / T(n) + T(eps));
}

template <typename T>
__global__ void layer_norm_rows(LayerNormShape s, const T* __restrict__ x, const T* __restrict__ weight,
                                const T* __restrict__ bias, T* __restrict__ y) {
    __shared__ T shared[kThreads];
    for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
        const T* row = x + r * s.n;
        T mean, rstd;
        row_statistics(row, s.n, s.eps, shared, mean, rstd);
        for (int64_t j = threadIdx.x; j < s.n; j += kThreads) {
            T v = (row[j] - mean) * rstd;
            if (weight) v *= weight[j];
            if (bias) v += bias[j];
            y[r * s.n + j] = v;
        }
    }
}

/// dx = rstd (g − mean(g) − x̂ mean(g x̂)) with g = dy · weight; x̂ dy into `dy_xhat` for the weight
/// gradient (when not NULL).
template <typename T>
__global__ void layer_norm_grad_rows(LayerNormShape s, const T* __restrict__ x, const T* __restrict__ weight,
                                     const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ dy_xhat) {
    __shared__ T shared[kThreads];
    for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
        const T* row = x + r * s.n;
        const T* grow = dy + r * s.n;
        T mean, rstd;
        row_statistics(row, s.n, s.eps, shared, mean, rstd);
        T sum_g = 0, sum_g_xhat = 0;
        for (int64_t j = threadIdx.x; j < s.n; j += kThreads) {
            const T xhat = (row[j] - mean) * rstd;
            const T g = weight ? grow[j] * weight[j] : grow[j];
            sum_g += g;
            sum_g_xhat += g * xhat;
            if (dy_xhat) dy_xhat[r * s.n + j] = grow[j] * xhat;
        }
        const T mean_g = block_sum(sum_g, shared) / T(s.n);
        const T mean_g_xhat = block_sum(sum_g_xhat, shared) / T(s.n);
        if (!dx) continue;
        for (int64_t j = threadIdx.x; j < s.n; j += kThreads) {
            const T xhat = (row[j] - mean) * rstd;
            const T g = weight ? grow[j] * weight[j] : grow[j];
            dx[r * s.n + j] = rstd * (g - mean_g - xhat * mean_g_xhat);
        }
    }
}

unsigned blocks_for_rows(int64_t rows) { return unsigned(rows < int64_t(kMaxBlocks) ? rows : kMaxBlocks); }

}  // namespace

cudaError_t launch_layer_norm_forward(capsule_dtype dtype, const LayerNormShape& s, const void* x, const void* weight,
                                      const void* bias, void* y, cudaStream_t stream) {
    if (s.rows == 0 || s.n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        layer_norm_rows<double><<<blocks_for_rows(s.rows), kThreads, 0, stream>>>(
            s, static_cast<const double*>(x), static_cast<const double*>(weight), static_cast<const double*>(bias),
            static_cast<double*>(y));
    else
        layer_norm_rows<float><<<blocks_for_rows(s.rows), kThreads, 0, stream>>>(
            s, static_cast<const float*>(x), static_cast<const float*>(weight), static_cast<const float*>(bias),
            static_cast<float*>(y));
    return cudaGetLastError();
}

cudaError_t launch_layer_norm_backward(capsule_dtype dtype, const LayerNormShape& s, const void* x, const void* weight,
                                       const void* dy, void* dx, void* dy_xhat, cudaStream_t stream) {
    if (s.rows == 0 || s.n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        layer_norm_grad_rows<double><<<blocks_for_rows(s.rows), kThreads, 0, stream>>>(
            s, static_cast<const double*>(x), static_cast<const double*>(weight), static_cast<const double*>(dy),
            static_cast<double*>(dx), static_cast<double*>(dy_xhat));
    else
        layer_norm_grad_rows<float><<<blocks_for_rows(s.rows), kThreads, 0, stream>>>(
            s, static_cast<const float*>(x), static_cast<const float*>(weight), static_cast<const float*>(dy),
            static_cast<float*>(dx), static_cast<float*>(dy_xhat));
    return cudaGetLastError();
}

}  // namespace capsule::cuda
