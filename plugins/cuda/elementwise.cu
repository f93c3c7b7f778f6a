// Pointwise kernels of the native CUDA plugin: unary ops (forward and derivative) and
// broadcasting binary ops (forward and per-operand gradient before un-broadcasting).
//
// One kernel per dtype and direction, with the op as a (warp-uniform) runtime argument: the
// switch costs a few instructions per element of a memory-bound loop, and keeps nvcc's compile
// time and the library small. Semantics follow PyTorch (docs/ops.md): NaN propagates through
// clamp, relu, max and min; max/min split the gradient evenly on ties; clamp passes the gradient
// where min <= x <= max; softplus is linear above `threshold`.
#include <cmath>

#include "launch.hpp"

namespace capsule::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T unary_value(Unary op, T x, const UnaryParams& p) {
    switch (op) {
        case Unary::abs: return fabs(x);
        case Unary::sqrt: return sqrt(x);
        case Unary::relu: return x < T(0) ? T(0) : x;  // NaN stays NaN
        case Unary::gelu: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
        case Unary::gelu_tanh: {
            const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
            return T(0.5) * x * (T(1) + tanh(u));
        }
        case Unary::sigmoid: return T(1) / (T(1) + exp(-x));
        case Unary::tanh: return tanh(x);
        case Unary::softplus: {
            const T beta = T(p.a);
            const T bx = beta * x;
            return bx > T(p.b) ? x : log1p(exp(bx)) / beta;
        }
        case Unary::exp: return exp(x);
        case Unary::log: return log(x);
        case Unary::sin: return sin(x);
        case Unary::cos: return cos(x);
        case Unary::inv: return T(1) / x;
        case Unary::scale: return T(p.a) * x;
        case Unary::clamp: {
            T v = x;
            if (p.has_a && v < T(p.a)) v = T(p.a);
            if (p.has_b && v > T(p.b)) v = T(p.b);
            return v;
        }
    }
    return x;
}

template <typename T>
__device__ __forceinline__ T unary_derivative(Unary op, T x, const UnaryParams& p) {
    switch (op) {
        case Unary::abs: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
        case Unary::sqrt: return T(0.5) / sqrt(x);
        case Unary::relu: return x > T(0) ? T(1) : T(0);
        case Unary::gelu: {
            const T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
            const T pdf = exp(T(-0.5) * x * x) * T(0.39894228040143267794);
            return cdf + x * pdf;
        }
        case Unary::gelu_tanh: {
            const T k = T(0.79788456080286535588), c = T(0.044715);
            const T t = tanh(k * (x + c * x * x * x));
            return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
        }
        case Unary::sigmoid: {
            const T s = T(1) / (T(1) + exp(-x));
            return s * (T(1) - s);
        }
        case Unary::tanh: {
            const T t = tanh(x);
            return T(1) - t * t;
        }
        case Unary::softplus: {
            const T bx = T(p.a) * x;
            return bx > T(p.b) ? T(1) : T(1) / (T(1) + exp(-bx));
        }
        case Unary::exp: return exp(x);
        case Unary::log: return T(1) / x;
        case Unary::sin: return cos(x);
        case Unary::cos: return -sin(x);
        case Unary::inv: return T(-1) / (x * x);
        case Unary::scale: return T(p.a);
        case Unary::clamp: {
            const bool inside = (!p.has_a || x >= T(p.a)) && (!p.has_b || x <= T(p.b));
            return inside ? T(1) : T(0);
        }
    }
    return T(0);
}

template <typename T>
__global__ void unary_forward_kernel(Unary op, const T* __restrict__ x, T* __restrict__ y,
                                     int64_t n, UnaryParams p) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = unary_value(op, x[i], p);
}

template <typename T>
__global__ void unary_backward_kernel(Unary op, const T* __restrict__ x, const T* __restrict__ gy,
                                      T* __restrict__ gx, int64_t n, UnaryParams p) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        gx[i] = gy[i] * unary_derivative(op, x[i], p);
}

template <typename T>
__device__ __forceinline__ T binary_value(Binary op, T a, T b) {
    switch (op) {
        case Binary::add: return a + b;
        case Binary::sub: return a - b;
        case Binary::mul: return a * b;
        case Binary::max: return a != a ? a : (b != b ? b : (a > b ? a : b));
        case Binary::min: return a != a ? a : (b != b ? b : (a < b ? a : b));
    }
    return a;
}

/// d(a op b)/da (which == 0) or d(a op b)/db (which == 1).
template <typename T>
__device__ __forceinline__ T binary_derivative(Binary op, int which, T a, T b) {
    const T self = which == 0 ? a : b, other = which == 0 ? b : a;
    switch (op) {
        case Binary::add: return T(1);
        case Binary::sub: return which == 0 ? T(1) : T(-1);
        case Binary::mul: return other;
        case Binary::max: return self > other ? T(1) : (self == other ? T(0.5) : T(0));
        case Binary::min: return self < other ? T(1) : (self == other ? T(0.5) : T(0));
    }
    return T(0);
}

__device__ __forceinline__ void operand_offsets(const BroadcastLayout& l, int64_t o, int64_t& ia,
                                                int64_t& ib) {
    ia = 0;
    ib = 0;
    for (int d = l.rank - 1; d >= 0; --d) {
        const int64_t c = o % l.shape[d];
        o /= l.shape[d];
        ia += c * l.a_strides[d];
        ib += c * l.b_strides[d];
    }
}

// No __restrict__ on the operands: `out` may alias an operand of the output's shape.
template <typename T>
__global__ void binary_forward_kernel(Binary op, const T* a, const T* b, T* out, int64_t n,
                                      BroadcastLayout l) {
    for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n;
         o += int64_t(gridDim.x) * blockDim.x) {
        int64_t ia = o, ib = o;
        if (!l.same_shape) operand_offsets(l, o, ia, ib);
        out[o] = binary_value(op, a[ia], b[ib]);
    }
}

template <typename T>
__global__ void binary_backward_kernel(Binary op, int which, const T* __restrict__ a,
                                       const T* __restrict__ b, const T* __restrict__ gout,
                                       T* __restrict__ g, int64_t n, BroadcastLayout l) {
    for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n;
         o += int64_t(gridDim.x) * blockDim.x) {
        int64_t ia = o, ib = o;
        if (!l.same_shape) operand_offsets(l, o, ia, ib);
        g[o] = gout[o] * binary_derivative(op, which, a[ia], b[ib]);
    }
}

int64_t element_count(const BroadcastLayout& l) {
    int64_t n = 1;
    for (int d = 0; d < l.rank; ++d) n *= l.shape[d];
    return n;
}

template <typename T>
cudaError_t unary_forward(Unary op, const void* x, void* y, int64_t n, UnaryParams p,
                          cudaStream_t s) {
    unary_forward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(
        op, static_cast<const T*>(x), static_cast<T*>(y), n, p);
    return cudaGetLastError();
}

template <typename T>
cudaError_t unary_backward(Unary op, const void* x, const void* gy, void* gx, int64_t n,
                           UnaryParams p, cudaStream_t s) {
    unary_backward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(
        op, static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gx), n, p);
    return cudaGetLastError();
}

template <typename T>
cudaError_t binary_forward(Binary op, const void* a, const void* b, void* out,
                           const BroadcastLayout& l, cudaStream_t s) {
    const int64_t n = element_count(l);
    if (n == 0) return cudaSuccess;
    binary_forward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(
        op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, l);
    return cudaGetLastError();
}

template <typename T>
cudaError_t binary_backward(Binary op, int which, const void* a, const void* b, const void* gout,
                            void* g, const BroadcastLayout& l, cudaStream_t s) {
    const int64_t n = element_count(l);
    if (n == 0) return cudaSuccess;
    binary_backward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(
        op, which, static_cast<const T*>(a), static_cast<const T*>(b),
        static_cast<const T*>(gout), static_cast<T*>(g), n, l);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_unary_forward(Unary op, capsule_dtype dtype, const void* x, void* y, int64_t n,
                                 UnaryParams params, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    (void)cudaGetLastError();  // a stale launch error of this thread is not ours to report
    return dtype == CAPSULE_DTYPE_FLOAT64 ? unary_forward<double>(op, x, y, n, params, stream)
                                          : unary_forward<float>(op, x, y, n, params, stream);
}

cudaError_t launch_unary_backward(Unary op, capsule_dtype dtype, const void* x, const void* gy,
                                  void* gx, int64_t n, UnaryParams params, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    (void)cudaGetLastError();
    return dtype == CAPSULE_DTYPE_FLOAT64
               ? unary_backward<double>(op, x, gy, gx, n, params, stream)
               : unary_backward<float>(op, x, gy, gx, n, params, stream);
}

cudaError_t launch_binary_forward(Binary op, capsule_dtype dtype, const void* a, const void* b,
                                  void* out, const BroadcastLayout& layout, cudaStream_t stream) {
    (void)cudaGetLastError();
    return dtype == CAPSULE_DTYPE_FLOAT64 ? binary_forward<double>(op, a, b, out, layout, stream)
                                          : binary_forward<float>(op, a, b, out, layout, stream);
}

cudaError_t launch_binary_backward(Binary op, int which, capsule_dtype dtype, const void* a,
                                   const void* b, const void* gout, void* g,
                                   const BroadcastLayout& layout, cudaStream_t stream) {
    (void)cudaGetLastError();
    return dtype == CAPSULE_DTYPE_FLOAT64
               ? binary_backward<double>(op, which, a, b, gout, g, layout, stream)
               : binary_backward<float>(op, which, a, b, gout, g, layout, stream);
}

cudaError_t check_kernel_image() {
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, unary_forward_kernel<float>);
}

}  // namespace capsule::cuda
