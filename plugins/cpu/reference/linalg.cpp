// Reference kernels: matmul (torch.matmul semantics), bmm (torch.bmm), linear (F.linear), and the
// blocked GEMM they (and conv, attention) are built on.
#include <algorithm>
#include <cstring>
#include <utility>

#include "linalg_common.hpp"
#include "parallel.hpp"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"  // vector types never cross a non-inlined call
#endif

namespace capsule::reference {

// =============================================================================================
// GEMM
//
// Classic Goto/BLIS structure: for each NC-wide column panel of op(B) and KC-deep slice, pack the
// [KC × NC] block of op(B) into NR-wide strips; for each MC-tall row block of op(A), pack it into
// MR-tall strips; then a register-blocked MR × NR micro-kernel multiplies strip pairs. Packing
// absorbs the transposes, so all four layouts run the same inner loop. The micro-kernel is written
// with GCC vector extensions and compiled three times (AVX-512, AVX2+FMA, SSE2) via per-function
// target attributes; the variant is picked once from the CPU's features.

namespace {

template <typename T, int VB>
struct VecOf {
    typedef T type __attribute__((vector_size(VB)));
};

/// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into MR-row strips: strip s holds kc × MR values,
/// out[s*kc*MR + p*MR + r] = op(A)[i0 + s*MR + r][p0 + p] (zero beyond mc).
template <typename T, int MR>
CAPSULE_INLINE_COPIES void pack_a(bool trans, const T* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
            T* __restrict out) {
    for (int64_t s = 0; s < mc; s += MR) {
        const int64_t mr = std::min<int64_t>(MR, mc - s);
        T* __restrict dst = out + s * kc;
        if (!trans) {
            for (int64_t r = 0; r < mr; ++r) {
                const T* __restrict src = a + (i0 + s + r) * lda + p0;
                for (int64_t p = 0; p < kc; ++p) dst[p * MR + r] = src[p];
            }
            if (mr < MR)
                for (int64_t p = 0; p < kc; ++p)
                    for (int64_t r = mr; r < MR; ++r) dst[p * MR + r] = T(0);
        } else {
            for (int64_t p = 0; p < kc; ++p) {
                const T* __restrict src = a + (p0 + p) * lda + i0 + s;
                T* __restrict d = dst + p * MR;
                for (int64_t r = 0; r < mr; ++r) d[r] = src[r];
                for (int64_t r = mr; r < MR; ++r) d[r] = T(0);
            }
        }
    }
}

/// Packs op(B)[p0 : p0+kc, j0 : j0+nc] into NR-column strips: strip s holds kc × NR values,
/// out[s*kc*NR + p*NR + j] = op(B)[p0 + p][j0 + s*NR + j] (zero beyond nc). With `rows` (only
/// for an untransposed B), row p of B starts at b + rows[p] instead of b + p*ldb.
template <typename T, int NR>
CAPSULE_INLINE_COPIES void pack_b(bool trans, const T* b, int64_t ldb, const int64_t* rows,
                                  int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                  T* __restrict out) {
    for (int64_t s = 0; s < nc; s += NR) {
        const int64_t nr = std::min<int64_t>(NR, nc - s);
        T* __restrict dst = out + s * kc;
        if (!trans) {
            for (int64_t p = 0; p < kc; ++p) {
                const T* __restrict src = b + (rows ? rows[p0 + p] : (p0 + p) * ldb) + j0 + s;
                T* __restrict d = dst + p * NR;
                if (nr == NR) {
                    for (int64_t j = 0; j < NR; ++j) d[j] = src[j];
                } else {
                    for (int64_t j = 0; j < nr; ++j) d[j] = src[j];
                    for (int64_t j = nr; j < NR; ++j) d[j] = T(0);
                }
            }
        } else {
            for (int64_t j = 0; j < nr; ++j) {
                const T* __restrict src = b + (j0 + s + j) * ldb + p0;
                for (int64_t p = 0; p < kc; ++p) dst[p * NR + j] = src[p];
            }
            if (nr < NR)
                for (int64_t p = 0; p < kc; ++p)
                    for (int64_t j = nr; j < NR; ++j) dst[p * NR + j] = T(0);
        }
    }
}

/// The MR × (NV·W) register tile: acc = Σ_p a(r, p) · b[p*STRIDE + j], from B strips packed
/// STRIDE wide (a narrower tile reads the first NV·W columns of a wider strip); then C = acc
/// (store), C = acc + bias[r] (store with a row bias), or C += acc (add), for the top-left
/// mr × nr part of the tile. a(r, p) is a packed
/// strip's a[p*MR + r], or with DIRECT_A the row-major A itself, a[r*lda + p] (all MR rows must
/// exist): weights used for few columns are read in place rather than copied once per call.
/// With DIRECT_B, row p of the strip is read in place at b + b_rows[p] (or b + p·ldb without
/// b_rows): all NV·W columns must exist there.
template <typename T, int VB, int MR, int NV, int STRIDE, bool DIRECT_A = false, bool DIRECT_B = false>
[[gnu::always_inline]] inline void micro_kernel(int64_t kc, const T* __restrict a,
                                                const T* __restrict b, T* __restrict c,
                                                int64_t ldc, int64_t mr, int64_t nr, bool add,
                                                int64_t lda, const T* __restrict bias,
                                                const int64_t* b_rows = nullptr, int64_t ldb = 0) {
    using V = typename VecOf<T, VB>::type;
    constexpr int W = VB / int(sizeof(T));
    constexpr int NR = W * NV;
    static_assert(NR <= STRIDE, "a tile wider than its packed strip");
    V acc[MR][NV];
    V ones;
#pragma GCC unroll 64
    for (int i = 0; i < W; ++i) ones[i] = T(1);
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = ones - ones;
    const T* rows[MR];
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) rows[r] = a + r * lda;
    for (int64_t p = 0; p < kc; ++p) {
        V bv[NV];
        const T* brow = !DIRECT_B ? b + p * STRIDE : b + (b_rows ? b_rows[p] : p * ldb);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], brow + v * W, VB);
#pragma GCC unroll 32
        for (int r = 0; r < MR; ++r) {
            // broadcast (x·1 folds to a plain broadcast)
            const V av = (DIRECT_A ? rows[r][p] : a[p * MR + r]) * ones;
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
        }
    }
    if (mr == MR && nr == NR) {
#pragma GCC unroll 32
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
                T* dst = c + r * ldc + v * W;
                V cur = acc[r][v];
                if (add) {
                    V old;
                    std::memcpy(&old, dst, VB);
                    cur += old;
                } else if (bias) {
                    cur += bias[r] * ones;
                }
                std::memcpy(dst, &cur, VB);
            }
    } else {
        alignas(64) T tile[MR * NR];
#pragma GCC unroll 32
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) std::memcpy(tile + r * NR + v * W, &acc[r][v], VB);
        for (int64_t r = 0; r < mr; ++r) {
            T* dst = c + r * ldc;
            const T* src = tile + r * NR;
            if (add)
                for (int64_t j = 0; j < nr; ++j) dst[j] += src[j];
            else if (bias)
                for (int64_t j = 0; j < nr; ++j) dst[j] = src[j] + bias[r];
            else
                for (int64_t j = 0; j < nr; ++j) dst[j] = src[j];
        }
    }
}

struct GemmArgs {
    bool trans_a, trans_b;
    int64_t m, n, k;
    const void* a;
    int64_t lda;
    const void* b;
    int64_t ldb;
    void* c;
    int64_t ldc;
    bool accumulate;
    bool dot;  // use dot_driver (A·Bᵀ with both operands K-contiguous)
    const int64_t* b_rows = nullptr;  // row p of an untransposed B at b + b_rows[p] (gemm_conv)
    const void* row_bias = nullptr;   // C = row_bias[i] + A·B instead of C = A·B (gemm_conv)
};

/// C = A·Bᵀ (or C += A·Bᵀ) for row-major A [m × k] and B [n × k]: every C entry is a dot product
/// of two contiguous rows. Used when m is small and k long (e.g. weight gradients dY·colᵀ), where
/// packing Bᵀ would cost more than the arithmetic. RM × RN dot products share each loaded
/// vector; rows past the edge are clamped to the last row and their results dropped.
template <typename T, int VB, int RM, int RN>
[[gnu::always_inline]] inline void dot_driver(const GemmArgs& g) {
    using V = typename VecOf<T, VB>::type;
    constexpr int W = VB / int(sizeof(T));
    const T* A = static_cast<const T*>(g.a);
    const T* B = static_cast<const T*>(g.b);
    T* C = static_cast<T*>(g.c);
    const int64_t kv = g.k / W * W;
    for (int64_t i0 = 0; i0 < g.m; i0 += RM)
        for (int64_t j0 = 0; j0 < g.n; j0 += RN) {
            const T* a[RM];
            const T* b[RN];
#pragma GCC unroll 8
            for (int r = 0; r < RM; ++r) a[r] = A + std::min<int64_t>(i0 + r, g.m - 1) * g.lda;
#pragma GCC unroll 8
            for (int c = 0; c < RN; ++c) b[c] = B + std::min<int64_t>(j0 + c, g.n - 1) * g.ldb;
            V acc[RM][RN];
            V zero;
#pragma GCC unroll 64
            for (int l = 0; l < W; ++l) zero[l] = T(0);
#pragma GCC unroll 8
            for (int r = 0; r < RM; ++r)
#pragma GCC unroll 8
                for (int c = 0; c < RN; ++c) acc[r][c] = zero;
            for (int64_t p = 0; p < kv; p += W) {
                V av[RM], bv[RN];
#pragma GCC unroll 8
                for (int r = 0; r < RM; ++r) std::memcpy(&av[r], a[r] + p, VB);
#pragma GCC unroll 8
                for (int c = 0; c < RN; ++c) std::memcpy(&bv[c], b[c] + p, VB);
#pragma GCC unroll 8
                for (int r = 0; r < RM; ++r)
#pragma GCC unroll 8
                    for (int c = 0; c < RN; ++c) acc[r][c] += av[r] * bv[c];
            }
            const int64_t mr = std::min<int64_t>(RM, g.m - i0), nr = std::min<int64_t>(RN, g.n - j0);
            for (int64_t r = 0; r < mr; ++r)
                for (int64_t c = 0; c < nr; ++c) {
                    T sum = T(0);
                    for (int l = 0; l < W; ++l) sum += acc[r][c][l];
                    for (int64_t p = kv; p < g.k; ++p) sum += a[r][p] * b[c][p];
                    T& dst = C[(i0 + r) * g.ldc + j0 + c];
                    dst = g.accumulate ? dst + sum : sum;
                }
        }
}

/// One micro-kernel call with as many vectors as the strip's columns need (at most NV).
template <typename T, int VB, int MR, int NV, int NR, bool DIRECT_A>
[[gnu::always_inline]] inline void tile(int64_t vectors, int64_t kc, const T* a, const T* bp,
                                        T* cp, int64_t ldc, int64_t mr, int64_t nr, bool add,
                                        int64_t lda, const T* bias) {
    if (vectors == 1)
        micro_kernel<T, VB, MR, 1, NR, DIRECT_A>(kc, a, bp, cp, ldc, mr, nr, add, lda, bias);
    else if (vectors == 2 && NV > 2)
        micro_kernel<T, VB, MR, (NV > 2 ? 2 : NV), NR, DIRECT_A>(kc, a, bp, cp, ldc, mr, nr, add, lda, bias);
    else
        micro_kernel<T, VB, MR, NV, NR, DIRECT_A>(kc, a, bp, cp, ldc, mr, nr, add, lda, bias);
}

/// Cache blocking: KC deep slices, MC rows of A per L2 block, NC columns of B per L3 panel.
template <typename T, int VB, int MR, int NV, bool DIRECT_B>
[[gnu::always_inline]] inline void gemm_blocks(const GemmArgs& g) {
    constexpr int W = VB / int(sizeof(T));
    constexpr int NR = W * NV;
    // KC·NR (the B strip the micro-kernel streams) ~ L1; MC·KC (packed A block) and KC·NC
    // (packed B panel) each well inside a 1 MB L2, which also keeps the per-call packing buffers
    // small (fresh large allocations cost page faults on every call).
    constexpr int64_t KC = 256;
    constexpr int64_t MC = MR * (sizeof(T) == 4 ? 24 : 16);
    constexpr int64_t NC = (sizeof(T) == 4 ? 768 : 384) / NR * NR;
    const T* A = static_cast<const T*>(g.a);
    const T* B = static_cast<const T*>(g.b);
    T* C = static_cast<T*>(g.c);
    const T* row_bias_all = static_cast<const T*>(g.row_bias);
    const int64_t kc_max = std::min<int64_t>(KC, g.k);
    const int64_t mc_max = std::min<int64_t>(MC, (g.m + MR - 1) / MR * MR);
    const int64_t nc_max = std::min<int64_t>(NC, (g.n + NR - 1) / NR * NR);
    // A row-major A (conv and linear weights) is read in place: packing it cost a full copy of
    // the weights per call, which dominated layers with few output columns (ResNet's 7×7 stage).
    const bool direct_a = !g.trans_a;
    // With DIRECT_B (see gemm_driver) only a last, partial strip of each panel is packed.
    Scratch<T> abuf(kc_max * (direct_a ? MR : mc_max)), bbuf(kc_max * (DIRECT_B ? NR : nc_max));
    for (int64_t j0 = 0; j0 < g.n; j0 += NC) {
        const int64_t nc = std::min<int64_t>(NC, g.n - j0);
        for (int64_t p0 = 0; p0 < g.k; p0 += KC) {
            const int64_t kc = std::min<int64_t>(KC, g.k - p0);
            const bool add = g.accumulate || p0 > 0;
            const T* row_bias = add ? nullptr : row_bias_all;
            const int64_t direct_cols = DIRECT_B ? nc / NR * NR : 0;
            if (direct_cols < nc)
                pack_b<T, NR>(g.trans_b, B, g.ldb, g.b_rows, p0, kc, j0 + direct_cols, nc - direct_cols,
                              bbuf.data());
            for (int64_t i0 = 0; i0 < g.m; i0 += MC) {
                const int64_t mc = std::min<int64_t>(MC, g.m - i0);
                // Full strips of a row-major A are read in place; only a partial last strip
                // (fewer than MR rows) is packed, zero-padded, at the start of abuf.
                const int64_t full = direct_a ? mc / MR * MR : 0;
                if (full < mc)
                    pack_a<T, MR>(g.trans_a, A, g.lda, i0 + full, mc - full, p0, kc, abuf.data());
                for (int64_t js = 0; js < nc; js += NR) {
                    const int64_t nr = std::min<int64_t>(NR, nc - js);
                    const T* bp = bbuf.data() + (js - direct_cols) * kc;
                    // In place: row p of this strip at B + b_rows[p0 + p] (or (p0 + p)·ldb) + j0 + js.
                    const bool in_place = DIRECT_B && js < direct_cols;
                    const T* bd = B + j0 + js + (g.b_rows ? 0 : p0 * g.ldb);
                    const int64_t* brows = g.b_rows ? g.b_rows + p0 : nullptr;
                    // The last strip of a panel may need fewer vectors than NV (a 7×7 output has
                    // 49 columns: 48 + 1): its tile computes only those, not NR columns.
                    const int64_t vectors = (nr + W - 1) / W;
                    for (int64_t is = 0; is < mc; is += MR) {
                        const int64_t mr = std::min<int64_t>(MR, mc - is);
                        T* cp = C + (i0 + is) * g.ldc + j0 + js;
                        // The first k slice of a row-bias GEMM stores bias + acc: the same sum
                        // as accumulating onto rows filled with the bias, without the fill.
                        const T* bias = row_bias ? row_bias + i0 + is : nullptr;
                        if (in_place) {
                            if constexpr (DIRECT_B) {
                                if (is < full)
                                    micro_kernel<T, VB, MR, NV, NR, true, true>(kc, A + (i0 + is) * g.lda + p0, bd, cp,
                                                                                g.ldc, mr, nr, add, g.lda, bias, brows, g.ldb);
                                else
                                    micro_kernel<T, VB, MR, NV, NR, false, true>(kc, abuf.data() + (is - full) * kc, bd,
                                                                                 cp, g.ldc, mr, nr, add, 0, bias, brows, g.ldb);
                            }
                        } else if (is < full)
                            tile<T, VB, MR, NV, NR, true>(vectors, kc, A + (i0 + is) * g.lda + p0,
                                                          bp, cp, g.ldc, mr, nr, add, g.lda, bias);
                        else
                            tile<T, VB, MR, NV, NR, false>(vectors, kc, abuf.data() + (is - full) * kc,
                                                           bp, cp, g.ldc, mr, nr, add, 0, bias);
                    }
                }
            }
        }
    }
}

/// An untransposed B used by at most kDirectBStrips row strips is read in place: packing a value
/// costs about as much as using it that often (LeNet's 6- and 16-channel convolutions spent more
/// time packing than multiplying). A separate instantiation, so that the packed path's code is
/// what it was (mobilenet's 16-input-channel 1x1 convolutions, store-bound, slowed otherwise).
template <typename T, int VB, int MR, int NV>
[[gnu::always_inline]] inline void gemm_driver(const GemmArgs& g) {
    constexpr int64_t kDirectBStrips = 2;
    if (!g.trans_b && g.m <= kDirectBStrips * MR)
        gemm_blocks<T, VB, MR, NV, true>(g);
    else
        gemm_blocks<T, VB, MR, NV, false>(g);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CAPSULE_GEMM_X86 1
#define CAPSULE_TARGET_AVX512 \
    __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512")))
#define CAPSULE_TARGET_AVX2 __attribute__((target("avx2,fma")))

CAPSULE_TARGET_AVX512 void gemm_avx512_f32(const GemmArgs& g) {
    g.dot ? dot_driver<float, 64, 4, 4>(g) : gemm_driver<float, 64, 8, 3>(g);
}
CAPSULE_TARGET_AVX512 void gemm_avx512_f64(const GemmArgs& g) {
    g.dot ? dot_driver<double, 64, 4, 4>(g) : gemm_driver<double, 64, 8, 3>(g);
}
CAPSULE_TARGET_AVX2 void gemm_avx2_f32(const GemmArgs& g) {
    g.dot ? dot_driver<float, 32, 2, 4>(g) : gemm_driver<float, 32, 6, 2>(g);
}
CAPSULE_TARGET_AVX2 void gemm_avx2_f64(const GemmArgs& g) {
    g.dot ? dot_driver<double, 32, 2, 4>(g) : gemm_driver<double, 32, 6, 2>(g);
}
#endif
void gemm_generic_f32(const GemmArgs& g) {
    g.dot ? dot_driver<float, 16, 2, 4>(g) : gemm_driver<float, 16, 4, 2>(g);
}
void gemm_generic_f64(const GemmArgs& g) {
    g.dot ? dot_driver<double, 16, 2, 4>(g) : gemm_driver<double, 16, 4, 2>(g);
}

enum class Isa { generic, avx2, avx512 };

Isa detect_isa() {
#ifdef CAPSULE_GEMM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma"))
        return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
    return Isa::generic;
}

/// Decided once (thread-safe static initialisation), immutable afterwards.
Isa isa() {
    static const Isa value = detect_isa();
    return value;
}

template <typename T>
void run_gemm(const GemmArgs& g) {
    constexpr bool f32 = sizeof(T) == 4;
    switch (isa()) {
#ifdef CAPSULE_GEMM_X86
        case Isa::avx512: return f32 ? gemm_avx512_f32(g) : gemm_avx512_f64(g);
        case Isa::avx2: return f32 ? gemm_avx2_f32(g) : gemm_avx2_f64(g);
#endif
        default: return f32 ? gemm_generic_f32(g) : gemm_generic_f64(g);
    }
}

}  // namespace

const char* gemm_isa() {
    switch (isa()) {
        case Isa::avx512: return "avx512";
        case Isa::avx2: return "avx2";
        default: return "generic";
    }
}

namespace {

/// How many threads gemm uses: at most `threads`, each with at least 64 columns or 64 rows and
/// about 4 MFLOP (tens of microseconds; handing a part to a sleeping worker can cost as much).
int gemm_parts(int threads, int64_t m, int64_t n, int64_t k) {
    constexpr double kMinFlops = 4e6;
    const double flops = 2.0 * double(m) * double(n) * double(k);
    const int64_t by_shape = std::max(n, m) / 64, by_work = static_cast<int64_t>(flops / kMinFlops);
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({threads, by_shape, by_work})));
}

/// Part `part` of [0, extent) cut into `parts` ranges of whole 64-blocks, the blocks dealt out
/// evenly (the last range ends at extent).
std::pair<int64_t, int64_t> part_range(int64_t extent, int parts, int part) {
    const int64_t blocks = (extent + 63) / 64;
    const int64_t first = blocks * part / parts, last = blocks * (part + 1) / parts;
    return {std::min(extent, first * 64), std::min(extent, last * 64)};
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate, int threads) {
    require(m >= 0 && n >= 0 && k >= 0, "gemm: negative size");
    if (m == 0 || n == 0) return;
    if (k == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
        return;
    }
    // A·Bᵀ with few rows and a long k: packing Bᵀ (a strided transpose) would cost more than
    // the multiplication, so take the dot-product path.
    const bool dot = !trans_a && trans_b && m < 32 && k >= 64;
    const GemmArgs whole{trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate, dot};
    const int parts = gemm_parts(threads, m, n, k);
    if (parts <= 1) return run_gemm<T>(whole);
    // Each part computes a block of C's columns (or, for narrow C, rows) with the same path
    // (`dot` decided for the whole) and the same blocking over k, so every entry is summed in
    // the same order as with one thread.
    const bool by_columns = n >= m;
    run_parts(parts, [&](int part) {
        const auto [begin, end] = part_range(by_columns ? n : m, parts, part);
        if (begin >= end) return;
        GemmArgs g = whole;
        if (by_columns) {
            g.n = end - begin;
            g.b = b + (trans_b ? begin * ldb : begin);
        } else {
            g.m = end - begin;
            g.a = a + (trans_a ? begin : begin * lda);
        }
        g.c = c + (by_columns ? begin : begin * ldc);
        run_gemm<T>(g);
    });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          const float*, int64_t, float*, int64_t, bool, int);

template <typename T>
void gemm_conv(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               const int64_t* b_rows, const T* bias, T* c, int64_t ldc) {
    require(m >= 0 && n >= 0 && k >= 0, "gemm: negative size");
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, bias ? bias[i] : T(0));
        return;
    }
    GemmArgs g{false, false, m, n, k, a, lda, b, ldb, c, ldc, false, false};
    g.b_rows = b_rows;
    g.row_bias = bias;
    run_gemm<T>(g);
}
template void gemm_conv<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                               const int64_t*, const float*, float*, int64_t);
template void gemm_conv<double>(int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                                const int64_t*, const double*, double*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                           const double*, int64_t, double*, int64_t, bool, int);

// =============================================================================================
// matmul

namespace {

/// The geometry of torch.matmul(a, b): 1-D operands are promoted (a: [K] → [1, K], b: [K] →
/// [K, 1]) and the promoted dimension is dropped from the result; batch dimensions broadcast.
struct MatmulPlan {
    int64_t m = 1, n = 1, k = 1;
    DimList batch;                        // broadcast batch shape of the result
    DimList a_stride, b_stride;           // per batch dim, in matrices (0 when broadcast)
    int64_t batch_count = 1, a_batches = 1, b_batches = 1;
    DimList out_shape;
};

MatmulPlan plan_matmul(const Tensor& a, const Tensor& b) {
    MatmulPlan p;
    const int ra = a.rank(), rb = b.rank();
    require(ra >= 1 && rb >= 1, [&] {
        return "matmul: both operands must have rank >= 1, got " + shape_string(a.shape()) +
               " x " + shape_string(b.shape());
    });
    p.k = a.dim(-1);
    p.m = ra >= 2 ? a.dim(-2) : 1;
    const int64_t kb = rb >= 2 ? b.dim(-2) : b.dim(0);
    p.n = rb >= 2 ? b.dim(-1) : 1;
    require(p.k == kb, [&] {
        return "matmul: inner dimensions differ: " + shape_string(a.shape()) + " x " +
               shape_string(b.shape());
    });
    const int ba = std::max(ra - 2, 0), bb = std::max(rb - 2, 0);
    const int nb = std::max(ba, bb);
    p.batch.assign(nb, 1);
    p.a_stride.assign(nb, 0);
    p.b_stride.assign(nb, 0);
    int64_t sa = 1, sb = 1;
    for (int i = nb - 1; i >= 0; --i) {
        const int ia = i - (nb - ba), ib = i - (nb - bb);
        const int64_t da = ia >= 0 ? a.view->shape[ia] : 1;
        const int64_t db = ib >= 0 ? b.view->shape[ib] : 1;
        require(da == db || da == 1 || db == 1, [&] {
            return "matmul: batch dimensions do not broadcast: " + shape_string(a.shape()) +
                   " x " + shape_string(b.shape());
        });
        p.batch[i] = da == 1 ? db : da;
        p.a_stride[i] = da == 1 ? 0 : sa;
        p.b_stride[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    p.a_batches = sa;
    p.b_batches = sb;
    p.batch_count = checked_product(p.batch, "matmul");
    p.out_shape = p.batch;
    if (ra >= 2) p.out_shape.push_back(p.m);
    if (rb >= 2) p.out_shape.push_back(p.n);
    return p;
}

/// Calls f(batch, a_matrix_index, b_matrix_index) for every batch of the result.
template <typename F>
void for_each_batch(const MatmulPlan& p, F&& f) {
    const std::size_t nb = p.batch.size();
    DimList idx(nb, 0);
    int64_t ia = 0, ib = 0;
    for (int64_t t = 0; t < p.batch_count; ++t) {
        f(t, ia, ib);
        for (std::size_t d = nb; d-- > 0;) {
            ++idx[d];
            ia += p.a_stride[d];
            ib += p.b_stride[d];
            if (idx[d] < p.batch[d]) break;
            ia -= p.a_stride[d] * idx[d];
            ib -= p.b_stride[d] * idx[d];
            idx[d] = 0;
        }
    }
}

template <typename T>
void matmul_fwd(const ForwardCall& call) {
    const Tensor a = call.input(0), b = call.input(1), out = call.output(0);
    const auto p = plan_matmul(a, b);
    check_tensor(out, a.dtype(), p.out_shape, "matmul output");
    const T* A = a.data<T>();
    const T* B = b.data<T>();
    T* C = out.data<T>();
    const int64_t mk = p.m * p.k, kn = p.k * p.n, mn = p.m * p.n;
    if (p.b_batches == 1 && p.a_batches == p.batch_count) {
        // b is one matrix shared by every batch: one GEMM over all rows of a.
        gemm<T>(false, false, p.batch_count * p.m, p.n, p.k, A, p.k, B, p.n, C, p.n, false, granted_threads(call));
        return;
    }
    for_each_batch(p, [&](int64_t t, int64_t ia, int64_t ib) {
        gemm<T>(false, false, p.m, p.n, p.k, A + ia * mk, p.k, B + ib * kn, p.n, C + t * mn, p.n,
                false, granted_threads(call));
    });
}

template <typename T>
void matmul_bwd(const BackwardCall& call) {
    const Tensor a = call.input(0), b = call.input(1);
    const auto p = plan_matmul(a, b);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, a.dtype(), p.out_shape, "matmul grad output");
    T* gA = grad_target<T>(call.grad_input(0), a, "matmul grad input 0");
    T* gB = grad_target<T>(call.grad_input(1), b, "matmul grad input 1");
    const T* A = a.data<T>();
    const T* B = b.data<T>();
    const T* G = gout.data<T>();
    const int64_t mk = p.m * p.k, kn = p.k * p.n, mn = p.m * p.n;
    if (p.b_batches == 1 && p.a_batches == p.batch_count) {
        const int64_t rows = p.batch_count * p.m;
        if (gA) gemm<T>(false, true, rows, p.k, p.n, G, p.n, B, p.n, gA, p.k, false);
        if (gB) gemm<T>(true, false, p.k, p.n, rows, A, p.k, G, p.n, gB, p.n, false);
        return;
    }
    // Broadcast batches sum their contributions: zero first, then accumulate.
    if (gA) std::fill(gA, gA + p.a_batches * mk, T(0));
    if (gB) std::fill(gB, gB + p.b_batches * kn, T(0));
    for_each_batch(p, [&](int64_t t, int64_t ia, int64_t ib) {
        if (gA)
            gemm<T>(false, true, p.m, p.k, p.n, G + t * mn, p.n, B + ib * kn, p.n, gA + ia * mk,
                    p.k, true);
        if (gB)
            gemm<T>(true, false, p.k, p.n, p.m, A + ia * mk, p.k, G + t * mn, p.n, gB + ib * kn,
                    p.n, true);
    });
}

void check_binary_inputs(const Tensor& a, const Tensor& b, const char* op) {
    check_view(a, {op, " input 0"});
    check_view(b, {op, " input 1"});
    if (a.dtype() != b.dtype()) [[unlikely]]
        fail(std::string(op) + ": inputs have different dtypes (" + dtype_name(a.dtype()) +
             " and " + dtype_name(b.dtype()) + ")");
}

}  // namespace

void matmul_forward(const ForwardCall& call) {
    require_arity(call, 2, 0, "matmul");
    check_binary_inputs(call.input(0), call.input(1), "matmul");
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { matmul_fwd<decltype(t)>(call); });
}

void matmul_backward(const BackwardCall& call) {
    require_arity(call, 2, 0, "matmul");
    check_binary_inputs(call.input(0), call.input(1), "matmul");
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { matmul_bwd<decltype(t)>(call); });
}

// =============================================================================================
// bmm: [B, M, K] x [B, K, N] -> [B, M, N]

namespace {

struct BmmDims {
    int64_t batch, m, k, n;
};

BmmDims bmm_dims(const Tensor& a, const Tensor& b) {
    require(a.rank() == 3 && b.rank() == 3, [&] {
        return "bmm: both operands must have rank 3, got " + shape_string(a.shape()) + " x " +
               shape_string(b.shape());
    });
    require(a.dim(0) == b.dim(0), [&] {
        return "bmm: batch dimensions differ: " + shape_string(a.shape()) + " x " +
               shape_string(b.shape());
    });
    require(a.dim(2) == b.dim(1), [&] {
        return "bmm: inner dimensions differ: " + shape_string(a.shape()) + " x " +
               shape_string(b.shape());
    });
    return {a.dim(0), a.dim(1), a.dim(2), b.dim(2)};
}

template <typename T>
void bmm_fwd(const ForwardCall& call) {
    const Tensor a = call.input(0), b = call.input(1), out = call.output(0);
    const auto d = bmm_dims(a, b);
    check_tensor(out, a.dtype(), {d.batch, d.m, d.n}, "bmm output");
    const T* A = a.data<T>();
    const T* B = b.data<T>();
    T* C = out.data<T>();
    for (int64_t t = 0; t < d.batch; ++t)
        gemm<T>(false, false, d.m, d.n, d.k, A + t * d.m * d.k, d.k, B + t * d.k * d.n, d.n,
                C + t * d.m * d.n, d.n, false, granted_threads(call));
}

template <typename T>
void bmm_bwd(const BackwardCall& call) {
    const Tensor a = call.input(0), b = call.input(1);
    const auto d = bmm_dims(a, b);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, a.dtype(), {d.batch, d.m, d.n}, "bmm grad output");
    T* gA = grad_target<T>(call.grad_input(0), a, "bmm grad input 0");
    T* gB = grad_target<T>(call.grad_input(1), b, "bmm grad input 1");
    const T* A = a.data<T>();
    const T* B = b.data<T>();
    const T* G = gout.data<T>();
    for (int64_t t = 0; t < d.batch; ++t) {
        const T* g = G + t * d.m * d.n;
        if (gA)
            gemm<T>(false, true, d.m, d.k, d.n, g, d.n, B + t * d.k * d.n, d.n,
                    gA + t * d.m * d.k, d.k, false);
        if (gB)
            gemm<T>(true, false, d.k, d.n, d.m, A + t * d.m * d.k, d.k, g, d.n,
                    gB + t * d.k * d.n, d.n, false);
    }
}

}  // namespace

void bmm_forward(const ForwardCall& call) {
    require_arity(call, 2, 0, "bmm");
    check_binary_inputs(call.input(0), call.input(1), "bmm");
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { bmm_fwd<decltype(t)>(call); });
}

void bmm_backward(const BackwardCall& call) {
    require_arity(call, 2, 0, "bmm");
    check_binary_inputs(call.input(0), call.input(1), "bmm");
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { bmm_bwd<decltype(t)>(call); });
}

// =============================================================================================
// linear: y = x · Wᵀ + b, x [..., in], W [out, in], b [out] (when attribute bias, default true)

namespace {

struct LinearDims {
    int64_t rows, in, out;
    bool bias;
    DimList out_shape;
};

template <typename Call>
LinearDims linear_dims(const Call& call) {
    const auto attrs = call.attrs();
    LinearDims d{};
    d.bias = attrs.get_bool("bias", true);
    require_arity(call, 1, d.bias ? 2 : 1, "linear");
    const Tensor x = call.input(0);
    check_view(x, "linear input");
    require(x.rank() >= 1, "linear: input must have rank >= 1");
    d.out = int_attr(attrs, "out_features", 0, nullptr);
    d.in = x.dim(-1);
    d.rows = checked_product(x.shape().first(std::size_t(x.rank() - 1)), "linear input");
    d.out_shape.assign(x.shape().begin(), x.shape().end());
    d.out_shape.back() = d.out;
    check_tensor(call.param(0), x.dtype(), {d.out, d.in}, "linear weight");
    if (d.bias) check_tensor(call.param(1), x.dtype(), {d.out}, "linear bias");
    return d;
}

template <typename T>
void linear_fwd(const ForwardCall& call, const LinearDims& d) {
    const Tensor out = call.output(0);
    check_tensor(out, call.input(0).dtype(), d.out_shape, "linear output");
    const T* X = call.input(0).data<T>();
    const T* Wt = call.param(0).data<T>();
    T* Y = out.data<T>();
    if (d.bias) {
        const T* bias = call.param(1).data<T>();
        for (int64_t r = 0; r < d.rows; ++r) std::copy(bias, bias + d.out, Y + r * d.out);
    }
    gemm<T>(false, true, d.rows, d.out, d.in, X, d.in, Wt, d.in, Y, d.out, d.bias, granted_threads(call));
}

template <typename T>
void linear_bwd(const BackwardCall& call, const LinearDims& d) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), d.out_shape, "linear grad output");
    const T* X = x.data<T>();
    const T* Wt = call.param(0).data<T>();
    const T* G = gout.data<T>();
    if (T* gX = grad_target<T>(call.grad_input(0), x, "linear grad input"))
        gemm<T>(false, false, d.rows, d.in, d.out, G, d.out, Wt, d.in, gX, d.in, false);
    if (T* gW = grad_target<T>(call.grad_param(0), call.param(0), "linear grad weight"))
        gemm<T>(true, false, d.out, d.in, d.rows, G, d.out, X, d.in, gW, d.in, false);
    if (d.bias)
        if (T* gb = grad_target<T>(call.grad_param(1), call.param(1), "linear grad bias")) {
            std::fill(gb, gb + d.out, T(0));
            for (int64_t r = 0; r < d.rows; ++r) {
                const T* __restrict g = G + r * d.out;
                for (int64_t j = 0; j < d.out; ++j) gb[j] += g[j];
            }
        }
}

}  // namespace

void linear_forward(const ForwardCall& call) {
    const auto d = linear_dims(call);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { linear_fwd<decltype(t)>(call, d); });
}

void linear_backward(const BackwardCall& call) {
    const auto d = linear_dims(call);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { linear_bwd<decltype(t)>(call, d); });
}

}  // namespace capsule::reference
