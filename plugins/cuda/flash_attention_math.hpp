// The arithmetic of native_cuda.flash_attention, shared by the device kernels (flash_attention.cu)
// and a host test (tests/test_flash_attention_math.cpp) that runs the same tile functions on the
// CPU against the reference capsule, so the math is checked on machines without a GPU.
//
// scaled_dot_product_attention without dropout (torch.nn.functional.scaled_dot_product_attention):
//   q [batch, L, E], k [batch, S, E], v [batch, S, Ev] (batch = the flattened leading dimensions),
//   optional mask broadcastable to [..., L, S] (bool: true = attend; additive: added to the scores),
//   out [batch, L, Ev] = softmax(scale · q·kᵀ + mask) · v.
// FlashAttention (Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
// IO-Awareness", NeurIPS 2022; FlashAttention-2, Dao 2023): keys are visited in tiles and each
// query row keeps a running maximum m, a running sum l of exponential(s − m) and an unnormalised output
// accumulator, rescaled when m grows ("online softmax", Milakov & Gimelshein 2018). No [L, S]
// matrix exists in memory. The backward pass recomputes the probabilities from the row's
// logsumexp (lse = m + log l) and D = rowsum(P ⊙ dP) = Σ_j P_ij (dO_i · v_j):
//   dS_ij = P_ij (dO_i · v_j − D_i),  dQ_i = scale Σ_j dS_ij k_j,  dK_j = scale Σ_i dS_ij q_i,
//   dV_j = Σ_i P_ij dO_i,  dMask_ij = dS_ij (additive masks, summed over broadcast dimensions).
// A fully masked row gives a zero output and zero gradients (PyTorch's "safe softmax" since 2.5,
// as the reference capsule); a NaN score makes its row NaN.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define CAPSULE_FLASH_FN __host__ __device__ inline
#else
#define CAPSULE_FLASH_FN inline
#endif

namespace capsule::cuda::flash {

/// Most leading (batch) dimensions a mask broadcast carries.
inline constexpr int kMaxBatchRank = 8;
/// Keys (forward, dQ) or queries (dK, dV) per tile staged in shared memory.
inline constexpr int kTile = 16;

enum class MaskKind : int { none, boolean, additive };

/// One call's geometry; mask strides are in elements, 0 along broadcast dimensions.
struct Geometry {
    int64_t batch = 1, L = 0, S = 0, E = 0, Ev = 0;
    double scale = 1;
    bool causal = false;  // key j attends to query i only when j <= i (top-left aligned)
    MaskKind mask = MaskKind::none;
    int batch_rank = 0;
    int64_t batch_sizes[kMaxBatchRank] = {};
    int64_t mask_batch_strides[kMaxBatchRank] = {};
    int64_t mask_row_stride = 0, mask_col_stride = 0;
};

/// Offset of batch entry `b`'s [L, S] block in the mask.
CAPSULE_FLASH_FN int64_t mask_base(const Geometry& g, int64_t b) {
    int64_t offset = 0;
    for (int d = g.batch_rank - 1; d >= 0; --d) {
        offset += (b % g.batch_sizes[d]) * g.mask_batch_strides[d];
        b /= g.batch_sizes[d];
    }
    return offset;
}

// expf / exp and logf / log exist on the host and the device alike.
CAPSULE_FLASH_FN float exponential(float x) { return ::expf(x); }
CAPSULE_FLASH_FN double exponential(double x) { return ::exp(x); }
CAPSULE_FLASH_FN float logarithm(float x) { return ::logf(x); }
CAPSULE_FLASH_FN double logarithm(double x) { return ::log(x); }

template <typename T>
CAPSULE_FLASH_FN T dot(const T* a, const T* b, int64_t n) {
    T sum = 0;
    for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
    return sum;
}

/// Index of score (i, j) in the mask, given the batch entry's `base`.
CAPSULE_FLASH_FN int64_t mask_index(const Geometry& g, int64_t base, int64_t i, int64_t j) {
    return base + i * g.mask_row_stride + j * g.mask_col_stride;
}

/// The score of query i against key j from their dot product q_i·k_j: scale · dot (+ mask),
/// −inf where the causal or boolean mask hides the key.
template <typename T>
CAPSULE_FLASH_FN T masked_score(const Geometry& g, T qk, int64_t i, int64_t j, int64_t base,
                                const void* mask) {
    if (g.causal && j > i) return T(-INFINITY);
    T s = T(double(qk) * g.scale);
    if (g.mask == MaskKind::boolean) {
        if (!static_cast<const unsigned char*>(mask)[mask_index(g, base, i, j)]) return T(-INFINITY);
    } else if (g.mask == MaskKind::additive) {
        s += static_cast<const T*>(mask)[mask_index(g, base, i, j)];
    }
    return s;
}

/// Running state of one query row in the forward pass; D bounds Ev.
template <typename T, int D>
struct ForwardRow {
    T m, l, acc[D];
};

template <typename T, int D>
CAPSULE_FLASH_FN void forward_begin(ForwardRow<T, D>& r, int64_t Ev) {
    r.m = T(-INFINITY);
    r.l = 0;
    for (int64_t d = 0; d < Ev; ++d) r.acc[d] = 0;
}

/// Folds keys j0 .. j0+count−1 (`k` [count, E], `v` [count, Ev], row-major) into query i's row.
template <typename T, int D>
CAPSULE_FLASH_FN void forward_tile(const Geometry& g, ForwardRow<T, D>& r, const T* q, const T* k,
                                   const T* v, int64_t i, int64_t j0, int64_t count, int64_t base,
                                   const void* mask) {
    for (int64_t c = 0; c < count; ++c) {
        const T s = masked_score(g, dot(q, k + c * g.E, g.E), i, j0 + c, base, mask);
        if (s == T(-INFINITY)) continue;
        if (s > r.m) {  // a new maximum: rescale what was summed against the old one
            const T correction = exponential(r.m - s);
            r.l *= correction;
            for (int64_t d = 0; d < g.Ev; ++d) r.acc[d] *= correction;
            r.m = s;
        }
        const T p = exponential(s - r.m);  // NaN for a NaN score: the row becomes NaN
        r.l += p;
        const T* vc = v + c * g.Ev;
        for (int64_t d = 0; d < g.Ev; ++d) r.acc[d] += p * vc[d];
    }
}

/// out [Ev] = acc / l; zeros for a fully masked row (l = 0).
template <typename T, int D>
CAPSULE_FLASH_FN void forward_end(const ForwardRow<T, D>& r, int64_t Ev, T* out) {
    const T inv = r.l == T(0) ? T(0) : T(1) / r.l;
    for (int64_t d = 0; d < Ev; ++d) out[d] = r.acc[d] * inv;
}

/// Backward, query side, first pass: the row's running m, l and Σ exponential(s − m)(dO_i · v_j).
template <typename T>
struct QueryStats {
    T m, l, weighted;
};

template <typename T>
CAPSULE_FLASH_FN void stats_begin(QueryStats<T>& st) {
    st.m = T(-INFINITY);
    st.l = 0;
    st.weighted = 0;
}

template <typename T>
CAPSULE_FLASH_FN void stats_tile(const Geometry& g, QueryStats<T>& st, const T* q, const T* dout,
                                 const T* k, const T* v, int64_t i, int64_t j0, int64_t count,
                                 int64_t base, const void* mask) {
    for (int64_t c = 0; c < count; ++c) {
        const T s = masked_score(g, dot(q, k + c * g.E, g.E), i, j0 + c, base, mask);
        if (s == T(-INFINITY)) continue;
        if (s > st.m) {
            const T correction = exponential(st.m - s);
            st.l *= correction;
            st.weighted *= correction;
            st.m = s;
        }
        const T p = exponential(s - st.m);
        st.l += p;
        st.weighted += p * dot(dout, v + c * g.Ev, g.Ev);
    }
}

/// The row's logsumexp (−inf when fully masked) and D_i = Σ_j P_ij (dO_i · v_j) (0 then).
template <typename T>
CAPSULE_FLASH_FN void stats_end(const QueryStats<T>& st, T* lse, T* delta) {
    if (st.l == T(0)) {
        *lse = T(-INFINITY);
        *delta = 0;
        return;
    }
    *lse = st.m + logarithm(st.l);
    *delta = st.weighted / st.l;
}

/// P_ij from the score and the row's logsumexp; 0 for a fully masked row.
template <typename T>
CAPSULE_FLASH_FN T probability(T s, T lse) {
    return lse == T(-INFINITY) ? T(0) : exponential(s - lse);
}

/// Backward, query side, second pass: dq [E] += Σ_j dS_ij k_j over the tile's keys (the caller
/// multiplies by scale at the end).
template <typename T, int D>
CAPSULE_FLASH_FN void dq_tile(const Geometry& g, T (&dq)[D], const T* q, const T* dout, T lse,
                              T delta, const T* k, const T* v, int64_t i, int64_t j0,
                              int64_t count, int64_t base, const void* mask) {
    for (int64_t c = 0; c < count; ++c) {
        const T s = masked_score(g, dot(q, k + c * g.E, g.E), i, j0 + c, base, mask);
        if (s == T(-INFINITY)) continue;
        const T p = probability(s, lse);
        const T ds = p * (dot(dout, v + c * g.Ev, g.Ev) - delta);
        const T* kc = k + c * g.E;
        for (int64_t d = 0; d < g.E; ++d) dq[d] += ds * kc[d];
    }
}

/// Backward, key side: key j's dk [E] (times scale at the end) and dv [Ev] over the tile's
/// queries i0 .. i0+count−1 (`q` [count, E], `dout` [count, Ev], their lse and D);
/// `add_mask_grad(index, dS_ij)` receives each additive-mask gradient term.
template <typename T, int D, typename MaskGrad>
CAPSULE_FLASH_FN void dkv_tile(const Geometry& g, T (&dk)[D], T (&dv)[D], const T* kj,
                               const T* vj, const T* q, const T* dout, const T* lse,
                               const T* delta, int64_t j, int64_t i0, int64_t count, int64_t base,
                               const void* mask, MaskGrad& add_mask_grad) {
    for (int64_t c = 0; c < count; ++c) {
        const T* qc = q + c * g.E;
        const T s = masked_score(g, dot(qc, kj, g.E), i0 + c, j, base, mask);
        if (s == T(-INFINITY)) continue;
        const T p = probability(s, lse[c]);
        const T* oc = dout + c * g.Ev;
        for (int64_t d = 0; d < g.Ev; ++d) dv[d] += p * oc[d];
        const T ds = p * (dot(oc, vj, g.Ev) - delta[c]);
        for (int64_t d = 0; d < g.E; ++d) dk[d] += ds * qc[d];
        if (g.mask == MaskKind::additive) add_mask_grad(mask_index(g, base, i0 + c, j), ds);
    }
}

}  // namespace capsule::cuda::flash
