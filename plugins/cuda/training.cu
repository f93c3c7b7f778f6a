// Training kernels of the native CUDA plugin: cross_entropy forward and backward (one thread per
// row: classifiers have few classes) and the sgd and adam steps (one thread per element, in place
// allowed). Formulas as the reference capsules (plugins/cpu/reference/training.cpp, docs/ops.md).
#include <cmath>

#include "launch.hpp"

namespace capsule::cuda {
namespace {


/// loss[i] = (m − x[i, t]) + log Σ_j exp(x[i, j] − m), m the row maximum; 0 for a row whose
/// target is ignore_index (counted[i] = 0, else 1); a target outside [0, C) sets *bad to 1.
template <typename T>
__global__ void cross_entropy_rows(const T* __restrict__ x, const int64_t* __restrict__ target, T* __restrict__ loss,
                                   T* __restrict__ counted, int* __restrict__ bad, int64_t n, int64_t c,
                                   int64_t ignore_index) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = target[i];
        if (t == ignore_index) {
            loss[i] = T(0);
            counted[i] = T(0);
            continue;
        }
        counted[i] = T(1);
        if (t < 0 || t >= c) {
            *bad = 1;
            loss[i] = T(NAN);
            continue;
        }
        const T* row = x + i * c;
        T m = row[0];
        for (int64_t j = 1; j < c; ++j) m = row[j] > m || row[j] != row[j] ? row[j] : m;
        T s = T(0);
        for (int64_t j = 0; j < c; ++j) s += exp(row[j] - m);
        loss[i] = (m - row[t]) + log(s);
    }
}

/// gx[i, j] = g_i · (softmax(x_i)_j − [j = t_i]), 0 for ignored rows; g_i = gy[i] (per row) or
/// gy[0] · scale (one upstream value).
template <typename T>
__global__ void cross_entropy_grad_rows(const T* __restrict__ x, const int64_t* __restrict__ target,
                                        const T* __restrict__ gy, bool per_row, T scale, T* __restrict__ gx, int64_t n,
                                        int64_t c, int64_t ignore_index) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = target[i];
        T* out = gx + i * c;
        if (t == ignore_index || t < 0 || t >= c) {
            for (int64_t j = 0; j < c; ++j) out[j] = T(0);
            continue;
        }
        const T* row = x + i * c;
        const T g = per_row ? gy[i] : gy[0] * scale;
        T m = row[0];
        for (int64_t j = 1; j < c; ++j) m = row[j] > m || row[j] != row[j] ? row[j] : m;
        T s = T(0);
        for (int64_t j = 0; j < c; ++j) s += exp(row[j] - m);
        for (int64_t j = 0; j < c; ++j) out[j] = g * (exp(row[j] - m) / s - (j == t ? T(1) : T(0)));
    }
}

template <typename T>
__global__ void sgd_kernel(const T* p, const T* grad, const T* buf, T* p_out, T* buf_out, int64_t n, SgdParams s) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const T pi = p[i];
        T g = grad[i] + T(s.weight_decay) * pi;
        T b = buf[i];
        if (s.momentum != 0) {
            b = s.first ? g : T(s.momentum) * b + T(1 - s.dampening) * g;
            g = s.nesterov ? g + T(s.momentum) * b : b;
        }
        buf_out[i] = b;
        p_out[i] = pi - T(s.lr) * g;
    }
}

template <typename T>
__global__ void adam_kernel(const T* p, const T* grad, const T* m_in, const T* v_in, T* p_out, T* m_out, T* v_out,
                            int64_t n, AdamParams a) {
    const T b1 = T(a.beta1), b2 = T(a.beta2);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const T pi = p[i];
        const T g = grad[i] + T(a.weight_decay) * pi;
        const T m = b1 * m_in[i] + (1 - b1) * g;
        const T v = b2 * v_in[i] + (1 - b2) * g * g;
        m_out[i] = m;
        v_out[i] = v;
        p_out[i] = pi - T(a.step_size) * m / (sqrt(v) / T(a.correction2_sqrt) + T(a.eps));
    }
}

}  // namespace

cudaError_t launch_cross_entropy_rows(capsule_dtype dtype, const void* x, const int64_t* target, void* loss,
                                      void* counted, int* bad, int64_t n, int64_t c, int64_t ignore_index,
                                      cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        cross_entropy_rows<double><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const double*>(x), target, static_cast<double*>(loss), static_cast<double*>(counted), bad, n,
            c, ignore_index);
    else
        cross_entropy_rows<float><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const float*>(x), target, static_cast<float*>(loss), static_cast<float*>(counted), bad, n, c,
            ignore_index);
    return cudaGetLastError();
}

cudaError_t launch_cross_entropy_grad(capsule_dtype dtype, const void* x, const int64_t* target, const void* gy,
                                      bool per_row, double scale, void* gx, int64_t n, int64_t c,
                                      int64_t ignore_index, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        cross_entropy_grad_rows<double><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const double*>(x), target, static_cast<const double*>(gy), per_row, scale,
            static_cast<double*>(gx), n, c, ignore_index);
    else
        cross_entropy_grad_rows<float><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const float*>(x), target, static_cast<const float*>(gy), per_row, static_cast<float>(scale),
            static_cast<float*>(gx), n, c, ignore_index);
    return cudaGetLastError();
}

cudaError_t launch_sgd_step(capsule_dtype dtype, const void* p, const void* grad, const void* buf, void* p_out,
                            void* buf_out, int64_t n, SgdParams params, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        sgd_kernel<double><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const double*>(p), static_cast<const double*>(grad), static_cast<const double*>(buf),
            static_cast<double*>(p_out), static_cast<double*>(buf_out), n, params);
    else
        sgd_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const float*>(p), static_cast<const float*>(grad), static_cast<const float*>(buf),
            static_cast<float*>(p_out), static_cast<float*>(buf_out), n, params);
    return cudaGetLastError();
}

cudaError_t launch_adam_step(capsule_dtype dtype, const void* p, const void* grad, const void* m, const void* v,
                             void* p_out, void* m_out, void* v_out, int64_t n, AdamParams params,
                             cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        adam_kernel<double><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const double*>(p), static_cast<const double*>(grad), static_cast<const double*>(m),
            static_cast<const double*>(v), static_cast<double*>(p_out), static_cast<double*>(m_out),
            static_cast<double*>(v_out), n, params);
    else
        adam_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const float*>(p), static_cast<const float*>(grad), static_cast<const float*>(m),
            static_cast<const float*>(v), static_cast<float*>(p_out), static_cast<float*>(m_out),
            static_cast<float*>(v_out), n, params);
    return cudaGetLastError();
}

}  // namespace capsule::cuda
