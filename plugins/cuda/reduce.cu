// Reducing kernels of the native CUDA plugin: sums onto a broadcast-compatible shape (the
// gradient of broadcasting, of a bias, of a broadcast matmul batch) and softmax / log-softmax
// over one axis, forward and backward.
//
// A row is reduced by one block (warp shuffles, then one value per warp in shared memory) when it
// is long, or by one thread when it is short and there are many rows.
#include <cmath>

#include "launch.hpp"

namespace capsule::cuda {
namespace {

constexpr int64_t kMaxBlocks = 1 << 16;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

/// Sum (or max) over the block, returned to every thread. blockDim.x is a multiple of 32.
template <typename T, bool kMax>
__device__ T block_reduce(T v) {
    __shared__ T partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? partial[lane] : (kMax ? T(-INFINITY) : T(0));
        v = kMax ? warp_max(v) : warp_sum(v);
        if (lane == 0) partial[0] = v;
    }
    __syncthreads();
    v = partial[0];
    __syncthreads();  // partial is reused by the next call
    return v;
}

__device__ __forceinline__ int64_t decompose(int64_t index, int rank, const int64_t* sizes,
                                             const int64_t* strides) {
    int64_t offset = 0;
    for (int d = rank - 1; d >= 0; --d) {
        offset += (index % sizes[d]) * strides[d];
        index /= sizes[d];
    }
    return offset;
}

// One thread per target element: short reductions.
template <typename T>
__global__ void reduce_sum_thread_kernel(const T* __restrict__ src, T* __restrict__ dst,
                                         ReduceLayout l) {
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < l.target_count;
         t += int64_t(gridDim.x) * blockDim.x) {
        const int64_t base = decompose(t, l.kept_rank, l.kept_sizes, l.kept_strides);
        T sum = 0;
        for (int64_t r = 0; r < l.reduced_count; ++r)
            sum += src[base + decompose(r, l.reduced_rank, l.reduced_sizes, l.reduced_strides)];
        dst[t] = sum;
    }
}

// One block per target element: long reductions.
template <typename T>
__global__ void reduce_sum_block_kernel(const T* __restrict__ src, T* __restrict__ dst,
                                        ReduceLayout l) {
    for (int64_t t = blockIdx.x; t < l.target_count; t += gridDim.x) {
        const int64_t base = decompose(t, l.kept_rank, l.kept_sizes, l.kept_strides);
        T sum = 0;
        for (int64_t r = threadIdx.x; r < l.reduced_count; r += blockDim.x)
            sum += src[base + decompose(r, l.reduced_rank, l.reduced_sizes, l.reduced_strides)];
        sum = block_reduce<T, false>(sum);
        if (threadIdx.x == 0) dst[t] = sum;
    }
}

/// Row r of [outer, axis, inner] starts at (r / inner) * axis * inner + r % inner, step inner.
__device__ __forceinline__ int64_t row_start(int64_t r, int64_t axis, int64_t inner) {
    return (r / inner) * axis * inner + r % inner;
}

template <typename T, bool kLog>
__global__ void softmax_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                       int64_t axis, int64_t inner) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t start = row_start(r, axis, inner);
        const T* xr = x + start;
        T* yr = y + start;
        T m = T(-INFINITY);
        for (int64_t j = threadIdx.x; j < axis; j += blockDim.x) m = fmax(m, xr[j * inner]);
        m = block_reduce<T, true>(m);
        T s = 0;
        for (int64_t j = threadIdx.x; j < axis; j += blockDim.x) s += exp(xr[j * inner] - m);
        s = block_reduce<T, false>(s);
        if (kLog) {
            const T shift = m + log(s);
            for (int64_t j = threadIdx.x; j < axis; j += blockDim.x) yr[j * inner] = xr[j * inner] - shift;
        } else {
            const T inv = T(1) / s;
            for (int64_t j = threadIdx.x; j < axis; j += blockDim.x)
                yr[j * inner] = exp(xr[j * inner] - m) * inv;
        }
    }
}

template <typename T, bool kLog>
__global__ void softmax_backward_kernel(const T* __restrict__ y, const T* __restrict__ gy,
                                        T* __restrict__ gx, int64_t rows, int64_t axis,
                                        int64_t inner) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t start = row_start(r, axis, inner);
        const T *yr = y + start, *gr = gy + start;
        T* out = gx + start;
        T s = 0;
        for (int64_t j = threadIdx.x; j < axis; j += blockDim.x)
            s += kLog ? gr[j * inner] : gr[j * inner] * yr[j * inner];
        s = block_reduce<T, false>(s);
        for (int64_t j = threadIdx.x; j < axis; j += blockDim.x) {
            const int64_t k = j * inner;
            out[k] = kLog ? gr[k] - exp(yr[k]) * s : yr[k] * (gr[k] - s);
        }
    }
}

/// Threads per block for reducing rows of `length`: a multiple of 32, at most 256.
unsigned row_threads(int64_t length) {
    unsigned t = 32;
    while (t < 256 && t < length) t <<= 1;
    return t;
}

unsigned grid_for(int64_t blocks) {
    return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <typename T>
cudaError_t reduce_sum(const void* source, void* target, const ReduceLayout& l, cudaStream_t s) {
    auto* src = static_cast<const T*>(source);
    auto* dst = static_cast<T*>(target);
    if (l.reduced_count == 0) return cudaMemsetAsync(dst, 0, sizeof(T) * l.target_count, s);
    if (l.reduced_count >= 64) {
        reduce_sum_block_kernel<T>
            <<<grid_for(l.target_count), row_threads(l.reduced_count), 0, s>>>(src, dst, l);
    } else {
        reduce_sum_thread_kernel<T><<<grid_for((l.target_count + 255) / 256), 256, 0, s>>>(src, dst, l);
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t softmax_forward(bool log, const void* x, void* y, int64_t rows, int64_t axis,
                            int64_t inner, cudaStream_t s) {
    auto* in = static_cast<const T*>(x);
    auto* out = static_cast<T*>(y);
    if (log)
        softmax_forward_kernel<T, true><<<grid_for(rows), row_threads(axis), 0, s>>>(in, out, rows, axis, inner);
    else
        softmax_forward_kernel<T, false><<<grid_for(rows), row_threads(axis), 0, s>>>(in, out, rows, axis, inner);
    return cudaGetLastError();
}

template <typename T>
cudaError_t softmax_backward(bool log, const void* y, const void* gy, void* gx, int64_t rows,
                             int64_t axis, int64_t inner, cudaStream_t s) {
    auto* yy = static_cast<const T*>(y);
    auto* g = static_cast<const T*>(gy);
    auto* out = static_cast<T*>(gx);
    if (log)
        softmax_backward_kernel<T, true><<<grid_for(rows), row_threads(axis), 0, s>>>(yy, g, out, rows, axis, inner);
    else
        softmax_backward_kernel<T, false><<<grid_for(rows), row_threads(axis), 0, s>>>(yy, g, out, rows, axis, inner);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_reduce_sum(capsule_dtype dtype, const void* source, void* target,
                              const ReduceLayout& layout, cudaStream_t stream) {
    if (layout.target_count == 0) return cudaSuccess;
    (void)cudaGetLastError();  // a stale launch error of this thread is not ours to report
    return dtype == CAPSULE_DTYPE_FLOAT64 ? reduce_sum<double>(source, target, layout, stream)
                                          : reduce_sum<float>(source, target, layout, stream);
}

cudaError_t launch_softmax_forward(bool log, capsule_dtype dtype, const void* x, void* y,
                                   int64_t outer, int64_t axis, int64_t inner,
                                   cudaStream_t stream) {
    const int64_t rows = outer * inner;
    if (rows == 0 || axis == 0) return cudaSuccess;
    (void)cudaGetLastError();
    return dtype == CAPSULE_DTYPE_FLOAT64
               ? softmax_forward<double>(log, x, y, rows, axis, inner, stream)
               : softmax_forward<float>(log, x, y, rows, axis, inner, stream);
}

cudaError_t launch_softmax_backward(bool log, capsule_dtype dtype, const void* y, const void* gy,
                                    void* gx, int64_t outer, int64_t axis, int64_t inner,
                                    cudaStream_t stream) {
    const int64_t rows = outer * inner;
    if (rows == 0 || axis == 0) return cudaSuccess;
    (void)cudaGetLastError();
    return dtype == CAPSULE_DTYPE_FLOAT64
               ? softmax_backward<double>(log, y, gy, gx, rows, axis, inner, stream)
               : softmax_backward<float>(log, y, gy, gx, rows, axis, inner, stream);
}

}  // namespace capsule::cuda
