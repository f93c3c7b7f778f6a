// Kernels that move elements (index_map.hpp): each output element reads one input element, or a
// constant, at an index computed per dimension; the backward kernels add each output gradient
// onto the input element it was read from (atomically: padding in reflect and edge modes reads
// one input element for several outputs, gather repeated indices). One thread per element.
#include "index_map.hpp"

namespace capsule::cuda {
namespace {

/// The input element output element `o` reads, or −1 for the padding constant.
__device__ int64_t source_of(const IndexMap& m, int64_t o) {
    int64_t source = m.base;
    for (int d = m.rank - 1; d >= 0; --d) {
        int64_t i = o % m.out_shape[d] - m.begin[d];
        o /= m.out_shape[d];
        if (m.mode != PadMode::none && (i < 0 || i >= m.in_size[d])) {
            if (m.mode == PadMode::constant) return -1;
            if (m.mode == PadMode::edge) i = i < 0 ? 0 : m.in_size[d] - 1;
            else i = i < 0 ? -i : 2 * (m.in_size[d] - 1) - i;  // reflect, without repeating the edge
        }
        source += i * m.in_stride[d];
    }
    return source;
}

template <typename T>
__global__ void map_forward(IndexMap m, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
    for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
        const int64_t s = source_of(m, o);
        y[o] = s < 0 ? T(m.value) : x[s];
    }
}

template <typename T>
__global__ void map_backward(IndexMap m, const T* __restrict__ gy, T* __restrict__ gx, int64_t n) {
    for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x)
        if (const int64_t s = source_of(m, o); s >= 0) atomicAdd(gx + s, gy[o]);
}

/// The data row gather element `o` reads ([outer, count, inner] over [outer, axis, inner]), or
/// −1 after flagging an index outside [−axis, axis).
__device__ int64_t gather_source(const GatherShape& g, const int64_t* __restrict__ indices, int64_t o, int* bad) {
    const int64_t inner = o % g.inner;
    const int64_t k = (o / g.inner) % g.count;
    const int64_t outer = o / (g.inner * g.count);
    int64_t index = indices[k];
    if (index < 0) index += g.axis;
    if (index < 0 || index >= g.axis) {
        *bad = 1;
        return -1;
    }
    return (outer * g.axis + index) * g.inner + inner;
}

template <typename T>
__global__ void gather_forward(GatherShape g, const T* __restrict__ x, const int64_t* __restrict__ indices,
                               T* __restrict__ y, int* bad, int64_t n) {
    for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
        const int64_t s = gather_source(g, indices, o, bad);
        y[o] = s < 0 ? T(NAN) : x[s];
    }
}

template <typename T>
__global__ void gather_backward(GatherShape g, const int64_t* __restrict__ indices, const T* __restrict__ gy,
                                T* __restrict__ gx, int* bad, int64_t n) {
    for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x)
        if (const int64_t s = gather_source(g, indices, o, bad); s >= 0) atomicAdd(gx + s, gy[o]);
}

}  // namespace

cudaError_t launch_index_map_forward(capsule_dtype dtype, const IndexMap& map, const void* x, void* y, int64_t n,
                                     cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        map_forward<double><<<blocks_for(n), kThreads, 0, stream>>>(map, static_cast<const double*>(x),
                                                                    static_cast<double*>(y), n);
    else
        map_forward<float><<<blocks_for(n), kThreads, 0, stream>>>(map, static_cast<const float*>(x),
                                                                   static_cast<float*>(y), n);
    return cudaGetLastError();
}

cudaError_t launch_index_map_backward(capsule_dtype dtype, const IndexMap& map, const void* gy, void* gx, int64_t n,
                                      cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        map_backward<double><<<blocks_for(n), kThreads, 0, stream>>>(map, static_cast<const double*>(gy),
                                                                     static_cast<double*>(gx), n);
    else
        map_backward<float><<<blocks_for(n), kThreads, 0, stream>>>(map, static_cast<const float*>(gy),
                                                                    static_cast<float*>(gx), n);
    return cudaGetLastError();
}

cudaError_t launch_gather_forward(capsule_dtype dtype, const GatherShape& shape, const void* x, const int64_t* indices,
                                  void* y, int* bad, int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        gather_forward<double><<<blocks_for(n), kThreads, 0, stream>>>(shape, static_cast<const double*>(x), indices,
                                                                       static_cast<double*>(y), bad, n);
    else
        gather_forward<float><<<blocks_for(n), kThreads, 0, stream>>>(shape, static_cast<const float*>(x), indices,
                                                                      static_cast<float*>(y), bad, n);
    return cudaGetLastError();
}

cudaError_t launch_gather_backward(capsule_dtype dtype, const GatherShape& shape, const int64_t* indices, const void* gy,
                                   void* gx, int* bad, int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (dtype == CAPSULE_DTYPE_FLOAT64)
        gather_backward<double><<<blocks_for(n), kThreads, 0, stream>>>(shape, indices, static_cast<const double*>(gy),
                                                                        static_cast<double*>(gx), bad, n);
    else
        gather_backward<float><<<blocks_for(n), kThreads, 0, stream>>>(shape, indices, static_cast<const float*>(gy),
                                                                       static_cast<float*>(gx), bad, n);
    return cudaGetLastError();
}

}  // namespace capsule::cuda
