// Shared helpers of the reference kernels for elementwise, random, reduction, shape and
// gather/scatter ops: tensor validation, NumPy broadcasting index math, strided loops with
// dimension coalescing (dtype sets and dispatch: dtypes.hpp).
//
// Everything lives in namespace capsule::reference::ew so that it cannot collide with helpers of
// the other kernel families. Nothing here holds mutable state: every function is reentrant.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "capsule/plugin.hpp"
#include "check_util.hpp"
#include "dtypes.hpp"

namespace capsule::reference::ew {

using plugin::fail;
using plugin::KernelError;
using plugin::require;
using plugin::Tensor;
using reference::kMaxRank;
using reference::dtype_name;
using reference::Label;
using reference::shape_string;

/// A shape, stride or permutation: at most kMaxRank entries, stored inline (no allocation).
using Dims = InlineVec<int64_t>;

inline bool is_float(capsule_dtype d) {
    return d == CAPSULE_DTYPE_FLOAT32 || d == CAPSULE_DTYPE_FLOAT64;
}

/// Row-major contiguous strides of `shape`, in elements.
inline Dims contiguous_strides(std::span<const int64_t> shape) {
    Dims s(shape.size());
    int64_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        s[i] = stride;
        stride *= shape[i];
    }
    return s;
}

/// Checks what every kernel relies on for one tensor view: a sane rank, non-negative dimensions,
/// an element count without overflow, a known dtype, storage when it holds elements, and
/// contiguous row-major strides. `what` names the tensor in messages ("input 0", "grad output").
/// Nothing is allocated unless a check fails.
inline void check_view(const Tensor& t, const Label& what) {
    if (t.view == nullptr) [[unlikely]]
        fail(what.str() + " is missing");
    if (t.view->rank < 0) [[unlikely]]
        fail(what.str() + " has a negative rank");
    if (t.view->rank != 0 && t.view->shape == nullptr) [[unlikely]]
        fail(what.str() + " has no shape");
    if (t.view->rank > int32_t(kMaxRank)) [[unlikely]]
        fail(what.str() + " has rank " + std::to_string(t.view->rank) +
             "; the reference CPU kernels support at most " + std::to_string(kMaxRank) +
             " dimensions");
    const auto bytes_per_element = element_size(t.dtype());
    bool empty = false;
    for (int i = 0; i < t.rank(); ++i) {
        const int64_t d = t.view->shape[i];
        if (d < 0) [[unlikely]]
            fail(what.str() + " has a negative dimension in shape " + shape_string(t.shape()));
        if (d == 0) empty = true;
    }
    if (!try_byte_size(t.shape(), bytes_per_element)) [[unlikely]]
        fail(what.str() + " of shape " + shape_string(t.shape()) +
             " is too large (more than 2^63-1 elements or bytes)");
    if (!empty && t.view->data == nullptr) [[unlikely]]
        fail(what.str() + " has no data");
    if (t.view->strides != nullptr && !empty) {
        int64_t stride = 1;
        for (int i = t.rank(); i-- > 0;) {
            const int64_t d = t.view->shape[i];
            if (d != 1 && t.view->strides[i] != stride) [[unlikely]]
                fail(what.str() + " is not contiguous row-major (shape " + shape_string(t.shape()) +
                     ")");
            stride *= d;
        }
    }
}

/// check_view, and the dtype must be `dtype`.
inline void check_view(const Tensor& t, const Label& what, capsule_dtype dtype) {
    check_view(t, what);
    if (t.dtype() != dtype) [[unlikely]]
        fail(what.str() + " has dtype " + dtype_name(t.dtype()) + ", expected " +
             dtype_name(dtype));
}

/// check_view, and dtype and shape must equal `like`'s.
inline void check_like(const Tensor& t, const Label& what, const Tensor& like,
                       const Label& like_what) {
    check_view(t, what, like.dtype());
    if (!std::ranges::equal(t.shape(), like.shape())) [[unlikely]]
        fail(what.str() + " has shape " + shape_string(t.shape()) + " but " + like_what.str() +
             " has shape " + shape_string(like.shape()));
}

inline void check_shape(const Tensor& t, const Label& what, std::span<const int64_t> want) {
    if (!std::ranges::equal(t.shape(), want)) [[unlikely]]
        fail(what.str() + " has shape " + shape_string(t.shape()) + ", expected " + shape_string(want));
}

inline void check_float(const Tensor& t, const Label& what) {
    check_view(t, what);
    if (!is_float(t.dtype())) [[unlikely]]
        plugin::fail(CAPSULE_ERROR_UNSUPPORTED, what.str() + " has dtype " +
                                                    dtype_name(t.dtype()) +
                                                    "; expected float32 or float64");
}

/// check_view, and the dtype must be in `set` (the dtypes the kernel declares; a float-only set
/// keeps check_float's message).
inline void check_dtype_in(const Tensor& t, const Label& what, uint64_t set) {
    if (set == kFloatDtypes) return check_float(t, what);
    check_view(t, what);
    if (!in_set(set, t.dtype())) [[unlikely]]
        plugin::fail(CAPSULE_ERROR_UNSUPPORTED, what.str() + " has dtype " + dtype_name(t.dtype()) +
                                                    "; expected one of " + dtype_list(set));
}

inline void require_arity(std::size_t got, std::size_t want, const char* op) {
    if (got != want) [[unlikely]]
        fail(std::string(op) + " expects " + std::to_string(want) + " input" +
             (want == 1 ? "" : "s") + ", got " + std::to_string(got));
}

/// Output of two shapes under NumPy broadcasting; raises when they do not broadcast. `op`
/// (may be null) prefixes the message.
inline Dims broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b,
                             const char* op = nullptr) {
    Dims out(std::max(a.size(), b.size()));
    if (broadcast_into(a, b, {out.data(), out.size()}) >= 0) [[unlikely]]
        fail((op == nullptr || *op == '\0' ? std::string() : std::string(op) + ": ") +
             "shapes " + shape_string(a) + " and " + shape_string(b) + " do not broadcast");
    return out;
}

/// Strides (in elements) of a contiguous tensor of shape `in`, aligned to the `out` rank, with 0
/// on every broadcast dimension. Raises unless `in` broadcasts to `out`.
inline Dims broadcast_strides(std::span<const int64_t> in, std::span<const int64_t> out) {
    if (in.size() > out.size()) [[unlikely]]
        fail("cannot broadcast " + shape_string(in) + " to " + shape_string(out));
    Dims s(out.size(), 0);
    int64_t stride = 1;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::size_t ii = in.size() - 1 - i, oi = out.size() - 1 - i;
        if (!(in[ii] == out[oi] || in[ii] == 1)) [[unlikely]]
            fail("cannot broadcast " + shape_string(in) + " to " + shape_string(out));
        s[oi] = in[ii] == 1 ? 0 : stride;
        stride *= in[ii];
    }
    return s;
}

/// Element count of a shape; raises when it is negative or overflows (try_element_count).
inline int64_t numel(std::span<const int64_t> shape) {
    if (auto n = try_element_count(shape)) return *n;
    fail("shape " + shape_string(shape) + " has a negative dimension or more than 2^63-1 elements");
}

/// Iterates a row-major index space of `shape` and K operands with the given element strides
/// (each aligned to `shape`'s rank). Dimensions of size 1 are dropped and adjacent dimensions
/// that are contiguous for every operand are merged, so the innermost run is as long as
/// possible. For each innermost run it calls `body(offsets, n, inner_strides)`, where
/// `offsets[k]` is operand k's element offset of the run's first element and
/// `inner_strides[k]` the step between consecutive elements of the run. Nothing is called when
/// the space is empty; a rank-0 space is one run of length 1.
template <std::size_t K, typename Body>
void for_each_strided(std::span<const int64_t> shape, const std::array<const int64_t*, K>& strides,
                      Body&& body) {
    for (auto d : shape)
        if (d == 0) return;
    // Coalesce, innermost first.
    Dims sizes;
    InlineVec<std::array<int64_t, K>> st;
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] == 1) continue;
        std::array<int64_t, K> s{};
        for (std::size_t k = 0; k < K; ++k) s[k] = strides[k][i];
        if (!sizes.empty()) {
            bool merge = true;
            for (std::size_t k = 0; k < K; ++k)
                if (s[k] != st.back()[k] * sizes.back()) merge = false;
            if (merge) {
                sizes.back() *= shape[i];
                continue;
            }
        }
        sizes.push_back(shape[i]);
        st.push_back(s);
    }
    std::array<int64_t, K> offsets{};
    if (sizes.empty()) {
        std::array<int64_t, K> zero{};
        body(offsets.data(), int64_t{1}, zero.data());
        return;
    }
    const std::size_t outer = sizes.size() - 1;  // dims 1..outer are the outer loops
    const int64_t n = sizes[0];
    const std::array<int64_t, K> inner = st[0];
    if (outer == 0) {
        body(offsets.data(), n, inner.data());
        return;
    }
    Dims counter(outer + 1, 0);
    for (;;) {
        body(offsets.data(), n, inner.data());
        std::size_t d = 1;
        for (; d <= outer; ++d) {
            for (std::size_t k = 0; k < K; ++k) offsets[k] += st[d][k];
            if (++counter[d] < sizes[d]) break;
            for (std::size_t k = 0; k < K; ++k) offsets[k] -= st[d][k] * sizes[d];
            counter[d] = 0;
        }
        if (d > outer) return;
    }
}

/// dst[o] = src[s] for every index of `shape`, where o and s are the index's element offsets under
/// `dst_strides` and `src_strides` (each aligned to `shape`; negative and 0 strides allowed), for
/// every dtype. For slices, tiles and other strided views.
inline void copy_strided(capsule_dtype dtype, std::span<const int64_t> shape, void* dst,
                         std::span<const int64_t> dst_strides, const void* src,
                         std::span<const int64_t> src_strides) {
    dispatch_bytes(dtype, [&]<typename U>(U) {
        U* d = static_cast<U*>(dst);
        const U* s = static_cast<const U*>(src);
        for_each_strided<2>(shape, {dst_strides.data(), src_strides.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* st) {
                                for (int64_t i = 0; i < n; ++i)
                                    d[off[0] + i * st[0]] = s[off[1] + i * st[1]];
                            });
    });
}

/// Copies `src` (contiguous, shape `src_shape`) into `dst` laid out as the permutation `perm` of
/// it: dst shape[i] = src_shape[perm[i]]. `perm` must be a valid permutation.
template <typename U>
void permute_copy(const U* src, std::span<const int64_t> src_shape, std::span<const int64_t> perm,
                  U* dst) {
    const std::size_t r = src_shape.size();
    const Dims src_strides = contiguous_strides(src_shape);
    Dims dst_shape(r), gather_strides(r);
    for (std::size_t i = 0; i < r; ++i) {
        dst_shape[i] = src_shape[static_cast<std::size_t>(perm[i])];
        gather_strides[i] = src_strides[static_cast<std::size_t>(perm[i])];
    }
    const Dims dst_strides = contiguous_strides(dst_shape);
    // When the destination's innermost dimension is not the source's innermost one, copy in
    // square tiles of (source-innermost, destination-innermost) so that both the reads and the
    // writes stay in cache (a plain loop would stride through the source a cache line per element).
    std::size_t q = r, p = r;  // innermost non-trivial dst dim; dst dim that is src-contiguous
    for (std::size_t i = r; i-- > 0;)
        if (dst_shape[i] > 1) {
            q = i;
            break;
        }
    for (std::size_t i = 0; i < r; ++i)
        if (dst_shape[i] > 1 && gather_strides[i] == 1) p = i;
    if (q < r && p < r && p != q) {
        constexpr int64_t kTile = 64 / sizeof(U) > 8 ? 64 / sizeof(U) : 8;
        const int64_t np = dst_shape[p], nq = dst_shape[q];
        const int64_t dp = dst_strides[p], dq = dst_strides[q], sq = gather_strides[q];
        Dims outer_shape = dst_shape;
        outer_shape[p] = outer_shape[q] = 1;
        for_each_strided<2>(outer_shape, {dst_strides.data(), gather_strides.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* s) {
                                for (int64_t t = 0; t < n; ++t) {
                                    U* d = dst + off[0] + t * s[0];
                                    const U* sp = src + off[1] + t * s[1];
                                    for (int64_t i0 = 0; i0 < np; i0 += kTile)
                                        for (int64_t j0 = 0; j0 < nq; j0 += kTile) {
                                            const int64_t i1 = std::min(np, i0 + kTile);
                                            const int64_t j1 = std::min(nq, j0 + kTile);
                                            for (int64_t i = i0; i < i1; ++i)
                                                for (int64_t j = j0; j < j1; ++j)
                                                    d[i * dp + j * dq] = sp[i + j * sq];
                                        }
                                }
                            });
        return;
    }
    for_each_strided<2>(dst_shape, {dst_strides.data(), gather_strides.data()},
                        [&](const int64_t* off, int64_t n, const int64_t* s) {
                            U* d = dst + off[0];
                            const U* sp = src + off[1];
                            const int64_t ss = s[1];
                            if (s[0] == 1 && ss == 1) {
                                std::memcpy(d, sp, static_cast<std::size_t>(n) * sizeof(U));
                            } else {
                                const int64_t ds = s[0];
                                for (int64_t i = 0; i < n; ++i) d[i * ds] = sp[i * ss];
                            }
                        });
}

/// Sums `values(i)` over the broadcast dimensions into `dst`: the index space is `big` (the
/// contiguous shape over which `values` is indexed by its flat offset) and `dst` has strides
/// `dst_strides` (aligned to `big`, 0 on broadcast dimensions) and `dst_numel` elements.
/// Accumulates in double, multiplies by `scale` and overwrites `dst`.
template <typename T, typename V>
void reduce_broadcast(std::span<const int64_t> big, std::span<const int64_t> dst_strides, T* dst,
                      int64_t dst_numel, V&& values, double scale = 1.0) {
    SmallBuffer<double> acc(static_cast<std::size_t>(dst_numel), 0.0);
    const Dims big_strides = contiguous_strides(big);
    for_each_strided<2>(big, {big_strides.data(), dst_strides.data()},
                        [&](const int64_t* off, int64_t n, const int64_t* s) {
                            const int64_t b0 = off[0], bs = s[0];
                            if (s[1] == 0) {
                                double sum = 0;
                                for (int64_t i = 0; i < n; ++i) sum += double(values(b0 + i * bs));
                                acc[static_cast<std::size_t>(off[1])] += sum;
                            } else {
                                double* a = acc.data() + off[1];
                                const int64_t as = s[1];
                                for (int64_t i = 0; i < n; ++i) a[i * as] += double(values(b0 + i * bs));
                            }
                        });
    for (int64_t i = 0; i < dst_numel; ++i)
        dst[i] = static_cast<T>(acc[static_cast<std::size_t>(i)] * scale);
}

/// Normalises an axis as shape inference does: a rank-0 tensor is treated as rank 1.
inline int64_t normalize_axis(int64_t axis, int rank, const char* name, const char* op) {
    if (const auto a = try_normalize_axis(axis, std::max<int64_t>(rank, 1))) [[likely]]
        return *a;
    fail(std::string(op) + ": attribute '" + name + "' = " + std::to_string(axis) +
         " out of range for rank " + std::to_string(rank));
}

}  // namespace capsule::reference::ew
