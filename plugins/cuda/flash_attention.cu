// Device kernels of native_cuda.flash_attention (math: flash_attention_math.hpp).
//
// One thread per query row (forward, backward query side) or key row (backward key side), kRows
// rows per block; the block stages kTile keys (or queries) at a time in shared memory and every
// thread folds the tile into its own row held in registers. Memory beyond the inputs and outputs:
// two values per query row (logsumexp and D) in the backward pass.
#include <algorithm>

#include "flash_attention.hpp"
#include "flash_attention_math.hpp"

namespace capsule::cuda {
namespace {

using flash::Geometry;
using flash::kTile;

constexpr int kRows = 64;             // threads (rows) per block
constexpr unsigned kMaxGridY = 65535;  // batch entries per launch row; blocks loop over the rest

__device__ int64_t min_of(int64_t a, int64_t b) { return a < b ? a : b; }

/// Copies rows [first, first + count) of a [rows, width] matrix into shared `tile`.
template <typename T>
__device__ void stage(T* tile, const T* source, int64_t first, int64_t count, int64_t width) {
    const T* from = source + first * width;
    for (int64_t e = threadIdx.x; e < count * width; e += blockDim.x) tile[e] = from[e];
}

/// The keys a block of query rows reads: all S, or under a causal mask none past its last row.
__device__ int64_t keys_seen_by_block(const Geometry& g) {
    return g.causal ? min_of(g.S, (int64_t(blockIdx.x) + 1) * kRows) : g.S;
}

/// Copies keys j0 .. j0+count−1 of batch entry b (their k and v rows) into the shared tiles.
template <typename T>
__device__ void stage_keys(const Geometry& g, T* k_tile, T* v_tile, const T* k, const T* v, int64_t b, int64_t j0,
                           int64_t count) {
    stage(k_tile, k + b * g.S * g.E, j0, count, g.E);
    stage(v_tile, v + b * g.S * g.Ev, j0, count, g.Ev);
}

template <typename T, int D>
__global__ void forward_kernel(Geometry g, const T* q, const T* k, const T* v, const void* mask,
                               T* out) {
    extern __shared__ unsigned char shared[];
    T* k_tile = reinterpret_cast<T*>(shared);
    T* v_tile = k_tile + kTile * g.E;
    const int64_t i = int64_t(blockIdx.x) * kRows + threadIdx.x;
    const bool active = i < g.L;
    const int64_t last_key = keys_seen_by_block(g);
    for (int64_t b = blockIdx.y; b < g.batch; b += gridDim.y) {
        const int64_t base = g.mask == flash::MaskKind::none ? 0 : flash::mask_base(g, b);
        T q_row[D];
        if (active)
            for (int64_t d = 0; d < g.E; ++d) q_row[d] = q[(b * g.L + i) * g.E + d];
        flash::ForwardRow<T, D> row;
        flash::forward_begin(row, g.Ev);
        for (int64_t j0 = 0; j0 < last_key; j0 += kTile) {
            const int64_t count = min_of(kTile, g.S - j0);
            stage_keys(g, k_tile, v_tile, k, v, b, j0, count);
            __syncthreads();
            if (active) flash::forward_tile(g, row, q_row, k_tile, v_tile, i, j0, count, base, mask);
            __syncthreads();
        }
        if (active) flash::forward_end(row, g.Ev, out + (b * g.L + i) * g.Ev);
    }
}

/// Backward, query side: the row's logsumexp and D, then dQ when `dq` is not NULL.
template <typename T, int D>
__global__ void query_kernel(Geometry g, const T* q, const T* k, const T* v, const void* mask,
                             const T* dout, T* lse, T* delta, T* dq) {
    extern __shared__ unsigned char shared[];
    T* k_tile = reinterpret_cast<T*>(shared);
    T* v_tile = k_tile + kTile * g.E;
    const int64_t i = int64_t(blockIdx.x) * kRows + threadIdx.x;
    const bool active = i < g.L;
    const int64_t last_key = keys_seen_by_block(g);
    for (int64_t b = blockIdx.y; b < g.batch; b += gridDim.y) {
        const int64_t base = g.mask == flash::MaskKind::none ? 0 : flash::mask_base(g, b);
        const int64_t row = b * g.L + i;
        T q_row[D], o_row[D];
        if (active) {
            for (int64_t d = 0; d < g.E; ++d) q_row[d] = q[row * g.E + d];
            for (int64_t d = 0; d < g.Ev; ++d) o_row[d] = dout[row * g.Ev + d];
        }
        flash::QueryStats<T> st;
        flash::stats_begin(st);
        for (int64_t j0 = 0; j0 < last_key; j0 += kTile) {
            const int64_t count = min_of(kTile, g.S - j0);
            stage_keys(g, k_tile, v_tile, k, v, b, j0, count);
            __syncthreads();
            if (active) flash::stats_tile(g, st, q_row, o_row, k_tile, v_tile, i, j0, count, base, mask);
            __syncthreads();
        }
        T row_lse = 0, row_delta = 0;
        if (active) {
            flash::stats_end(st, &row_lse, &row_delta);
            lse[row] = row_lse;
            delta[row] = row_delta;
        }
        if (!dq) continue;  // uniform across the block
        T dq_row[D];
        for (int64_t d = 0; d < g.E; ++d) dq_row[d] = 0;
        for (int64_t j0 = 0; j0 < last_key; j0 += kTile) {
            const int64_t count = min_of(kTile, g.S - j0);
            stage_keys(g, k_tile, v_tile, k, v, b, j0, count);
            __syncthreads();
            if (active)
                flash::dq_tile(g, dq_row, q_row, o_row, row_lse, row_delta, k_tile, v_tile, i, j0,
                               count, base, mask);
            __syncthreads();
        }
        if (active)
            for (int64_t d = 0; d < g.E; ++d) dq[row * g.E + d] = T(double(dq_row[d]) * g.scale);
    }
}

/// Adds additive-mask gradient terms with atomics: a broadcast mask element gathers terms from
/// many threads and blocks.
template <typename T>
struct AtomicMaskGrad {
    T* grad;
    __device__ void operator()(int64_t index, T value) const {
        if (grad) atomicAdd(grad + index, value);
    }
};

/// Backward, key side: dK, dV (each when not NULL) and the additive mask's gradient.
template <typename T, int D>
__global__ void key_kernel(Geometry g, const T* q, const T* k, const T* v, const void* mask,
                           const T* dout, const T* lse, const T* delta, T* dk, T* dv, T* dmask) {
    extern __shared__ unsigned char shared[];
    T* q_tile = reinterpret_cast<T*>(shared);
    T* o_tile = q_tile + kTile * g.E;
    T* lse_tile = o_tile + kTile * g.Ev;
    T* delta_tile = lse_tile + kTile;
    const int64_t j = int64_t(blockIdx.x) * kRows + threadIdx.x;
    const bool active = j < g.S;
    // Under a causal mask no query before this block's first key sees any of its keys.
    const int64_t first_query = g.causal ? min_of(g.L, int64_t(blockIdx.x) * kRows) : 0;
    AtomicMaskGrad<T> add_mask_grad{dmask};
    for (int64_t b = blockIdx.y; b < g.batch; b += gridDim.y) {
        const int64_t base = g.mask == flash::MaskKind::none ? 0 : flash::mask_base(g, b);
        const int64_t row = b * g.S + j;
        T k_row[D], v_row[D], dk_row[D], dv_row[D];
        if (active) {
            for (int64_t d = 0; d < g.E; ++d) k_row[d] = k[row * g.E + d];
            for (int64_t d = 0; d < g.Ev; ++d) v_row[d] = v[row * g.Ev + d];
        }
        for (int64_t d = 0; d < g.E; ++d) dk_row[d] = 0;
        for (int64_t d = 0; d < g.Ev; ++d) dv_row[d] = 0;
        for (int64_t i0 = first_query; i0 < g.L; i0 += kTile) {
            const int64_t count = min_of(kTile, g.L - i0);
            stage(q_tile, q + b * g.L * g.E, i0, count, g.E);
            stage(o_tile, dout + b * g.L * g.Ev, i0, count, g.Ev);
            stage(lse_tile, lse + b * g.L, i0, count, 1);
            stage(delta_tile, delta + b * g.L, i0, count, 1);
            __syncthreads();
            if (active)
                flash::dkv_tile(g, dk_row, dv_row, k_row, v_row, q_tile, o_tile, lse_tile,
                                delta_tile, j, i0, count, base, mask, add_mask_grad);
            __syncthreads();
        }
        if (!active) continue;
        if (dk)
            for (int64_t d = 0; d < g.E; ++d) dk[row * g.E + d] = T(double(dk_row[d]) * g.scale);
        if (dv)
            for (int64_t d = 0; d < g.Ev; ++d) dv[row * g.Ev + d] = dv_row[d];
    }
}

dim3 grid_of(int64_t rows, int64_t batch) {
    return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(std::min<int64_t>(batch, kMaxGridY)));
}

template <typename T, int D>
cudaError_t forward_as(const FlashAttentionArgs& a, cudaStream_t stream) {
    const Geometry& g = a.geometry;
    const size_t shared = size_t(kTile) * size_t(g.E + g.Ev) * sizeof(T);
    forward_kernel<T, D><<<grid_of(g.L, g.batch), kRows, shared, stream>>>(
        g, static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
        a.mask, static_cast<T*>(a.out));
    return cudaGetLastError();
}

template <typename T, int D>
cudaError_t backward_as(const FlashAttentionArgs& a, cudaStream_t stream) {
    const Geometry& g = a.geometry;
    const auto* q = static_cast<const T*>(a.q);
    const auto* k = static_cast<const T*>(a.k);
    const auto* v = static_cast<const T*>(a.v);
    const auto* dout = static_cast<const T*>(a.dout);
    auto* lse = static_cast<T*>(a.lse);
    auto* delta = static_cast<T*>(a.delta);
    const size_t kv_shared = size_t(kTile) * size_t(g.E + g.Ev) * sizeof(T);
    if (g.L > 0) {
        query_kernel<T, D><<<grid_of(g.L, g.batch), kRows, kv_shared, stream>>>(
            g, q, k, v, a.mask, dout, lse, delta, static_cast<T*>(a.dq));
        if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    if (g.S == 0 || (!a.dk && !a.dv && !a.dmask)) return cudaSuccess;
    const size_t q_shared = size_t(kTile) * size_t(g.E + g.Ev + 2) * sizeof(T);
    key_kernel<T, D><<<grid_of(g.S, g.batch), kRows, q_shared, stream>>>(
        g, q, k, v, a.mask, dout, lse, delta, static_cast<T*>(a.dk), static_cast<T*>(a.dv),
        static_cast<T*>(a.dmask));
    return cudaGetLastError();
}

struct Forward {
    const FlashAttentionArgs& args;
    cudaStream_t stream;
    template <typename T, int D>
    cudaError_t operator()() const { return forward_as<T, D>(args, stream); }
};

struct Backward {
    const FlashAttentionArgs& args;
    cudaStream_t stream;
    template <typename T, int D>
    cudaError_t operator()() const { return backward_as<T, D>(args, stream); }
};

/// Calls f.template operator()<T, D>() for the dtype and the smallest supported width >= width.
template <typename F>
cudaError_t dispatch(capsule_dtype dtype, int64_t width, const F& f) {
    const bool single = dtype == CAPSULE_DTYPE_FLOAT32;
    if (width <= 32) return single ? f.template operator()<float, 32>() : f.template operator()<double, 32>();
    if (width <= 64) return single ? f.template operator()<float, 64>() : f.template operator()<double, 64>();
    return single ? f.template operator()<float, kFlashMaxHeadDim>() : f.template operator()<double, kFlashMaxHeadDim>();
}

}  // namespace

cudaError_t launch_flash_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream) {
    const Geometry& g = args.geometry;
    if (g.batch == 0 || g.L == 0 || g.Ev == 0) return cudaSuccess;
    return dispatch(args.dtype, std::max(g.E, g.Ev), Forward{args, stream});
}

cudaError_t launch_flash_attention_backward(const FlashAttentionArgs& args, cudaStream_t stream) {
    const Geometry& g = args.geometry;
    if (g.batch == 0) return cudaSuccess;
    return dispatch(args.dtype, std::max(g.E, g.Ev), Backward{args, stream});
}

}  // namespace capsule::cuda
