// Internal helpers shared by the reference kernels of the linear-algebra families (linalg.cpp,
// conv.cpp, attention.cpp, norm.cpp, pool.cpp, fft_fno.cpp, selective_scan.cpp): a cache-blocked
// GEMM, aligned scratch buffers, and validation of the tensors and attributes a kernel relies on.
// Nothing here holds mutable global state: every kernel is reentrant.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "check_util.hpp"
#include "kernels.hpp"

/// Marks a kernel loop compiled for AVX-512, AVX2 and the baseline, one chosen by the loader
/// from the CPU (GCC target_clones); the plugin itself is built for the baseline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CAPSULE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CAPSULE_CLONES
#endif

/// Keeps short copy and fill loops inline: GCC otherwise turns them into memmove / memset calls,
/// which cost more than the copy for the rows of a few dozen elements that im2col, GEMM packing
/// and pooling move (LeNet's 28-wide rows: three library calls per row were half of im2col).
#if defined(__GNUC__) && !defined(__clang__)
#define CAPSULE_INLINE_COPIES __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define CAPSULE_INLINE_COPIES
#endif

namespace capsule::reference {

using plugin::Attributes;
using plugin::fail;
using plugin::KernelError;
using plugin::require;
using plugin::Tensor;

/// A shape or per-dimension attribute list: at most kMaxRank entries, stored inline.
using DimList = InlineVec<int64_t>;

// ---------------------------------------------------------------------------------------------
// GEMM

/// C[m×n] = op(A)[m×k] · op(B)[k×n], or C += op(A)·op(B) when `accumulate`. All matrices are
/// row-major with leading dimensions lda/ldb/ldc (in elements). op(A) is A (A[i*lda + p]) or,
/// with `trans_a`, Aᵀ (A[p*lda + i]); likewise op(B) is B[p*ldb + j] or, with `trans_b`,
/// B[j*ldb + p]. k = 0 writes zeros (or leaves C unchanged when accumulating). C must not alias
/// A or B. Packs panels of A and B (BLIS-style) and runs a register-blocked micro-kernel; on
/// x86-64 the micro-kernel is chosen once at run time for AVX-512, AVX2+FMA or SSE2. Results may
/// therefore differ in the last bits between machines (different summation order / FMA use).
/// With `threads` > 1, the columns of C (or its rows, when C has more rows than columns) are
/// split between up to that many threads (parallel.hpp) when each gets at least 64 of them and
/// about 4 MFLOP; every entry of C is summed in the same order as with one thread, so the result
/// does not depend on the thread count.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate, int threads = 1);
extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                 const float*, int64_t, float*, int64_t, bool, int);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, int64_t, double*, int64_t, bool, int);

/// A convolution's GEMM, on one thread: C[m×n] = bias[i] + A·B for row i (bias nullptr: 0),
/// A row-major [m × k] (lda), B untransposed: row p of B is the n values at b + p·ldb or, with
/// `b_rows` (k entries), at b + b_rows[p], so that B need not exist as a matrix (a stride-1
/// convolution reads its im2col rows straight from a padded image: row (c, i, j) is the image
/// shifted by the tap, and the GEMM's packing is the only copy). The bias is added when the
/// first k slice is stored, so each entry is the same sum as gemm accumulating onto rows filled
/// with the bias, without the fill pass.
template <typename T>
void gemm_conv(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               const int64_t* b_rows, const T* bias, T* c, int64_t ldc);
extern template void gemm_conv<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                                      const int64_t*, const float*, float*, int64_t);
extern template void gemm_conv<double>(int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                                       int64_t, const int64_t*, const double*, double*, int64_t);

/// The micro-kernel family gemm uses on this machine: "avx512", "avx2" or "generic".
const char* gemm_isa();

// ---------------------------------------------------------------------------------------------
// Scratch memory

/// A 64-byte aligned, heap-allocated scratch array (one allocation per kernel call, never per
/// element). Uninitialised unless `zero` is set.
template <typename T>
class Scratch {
public:
    Scratch() = default;
    explicit Scratch(int64_t count, bool zero = false) { reset(count, zero); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() { release(); }

    void reset(int64_t count, bool zero = false) {
        release();
        require(count >= 0, "negative scratch size");
        if (count > 0) {
            if (static_cast<uint64_t>(count) > std::numeric_limits<std::size_t>::max() / sizeof(T))
                throw std::bad_alloc();
            data_ = static_cast<T*>(::operator new(static_cast<std::size_t>(count) * sizeof(T),
                                                   std::align_val_t{64}));
            size_ = count;
            if (zero) std::fill(data_, data_ + count, T{});
        }
    }
    T* data() { return data_; }
    const T* data() const { return data_; }
    int64_t size() const { return size_; }
    T& operator[](int64_t i) { return data_[i]; }
    const T& operator[](int64_t i) const { return data_[i]; }

private:
    void release() {
        if (data_) ::operator delete(data_, std::align_val_t{64});
        data_ = nullptr;
        size_ = 0;
    }
    T* data_ = nullptr;
    int64_t size_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Validation

/// Product of the dimensions, failing on overflow.
inline int64_t checked_product(std::span<const int64_t> dims, const Label& what) {
    int64_t n = 1;
    for (auto d : dims) {
        if (d < 0) [[unlikely]]
            fail(what.str() + ": negative dimension in " + shape_string(dims));
        if (d == 0) return 0;
    }
    for (auto d : dims)
        if (__builtin_mul_overflow(n, d, &n)) [[unlikely]]
            fail(what.str() + ": element count overflows");
    return n;
}

/// Checks that `t` is a well-formed host tensor: CPU, non-negative shape, contiguous row-major
/// strides, data present when it has elements. Returns its element count. Nothing is allocated
/// unless a check fails.
inline int64_t check_view(const Tensor& t, const Label& what) {
    if (t.view == nullptr) [[unlikely]]
        fail(what.str() + " is missing");
    if (!(t.view->rank >= 0 && t.view->rank <= int32_t(kMaxRank))) [[unlikely]]
        fail(what.str() + " has an invalid rank");
    if (t.view->rank != 0 && t.view->shape == nullptr) [[unlikely]]
        fail(what.str() + " has no shape");
    if (t.view->device != CAPSULE_DEVICE_CPU) [[unlikely]]
        fail(what.str() + " is not a CPU tensor");
    const int64_t n = checked_product(t.shape(), what);
    if (t.view->strides && n > 0) {
        int64_t stride = 1;
        for (int i = t.rank() - 1; i >= 0; --i) {
            if (t.view->shape[i] != 1 && t.view->strides[i] != stride) [[unlikely]]
                fail(what.str() + " is not contiguous row-major (strides do not match shape " +
                     shape_string(t.shape()) + ")");
            stride *= t.view->shape[i];
        }
    }
    if (n != 0 && t.view->data == nullptr) [[unlikely]]
        fail(what.str() + " has no data");
    return n;
}

/// check_view plus a dtype requirement.
inline int64_t check_tensor(const Tensor& t, capsule_dtype dtype, const Label& what) {
    const int64_t n = check_view(t, what);
    if (t.dtype() != dtype) [[unlikely]]
        fail(what.str() + " has dtype " + dtype_name(t.dtype()) + ", expected " +
             dtype_name(dtype));
    return n;
}

/// check_tensor plus an exact shape requirement.
inline int64_t check_tensor(const Tensor& t, capsule_dtype dtype, std::span<const int64_t> shape,
                            const Label& what) {
    const int64_t n = check_tensor(t, dtype, what);
    auto got = t.shape();
    if (!(got.size() == shape.size() && std::equal(got.begin(), got.end(), shape.begin())))
        [[unlikely]]
        fail(what.str() + " has shape " + shape_string(got) + ", expected " +
             shape_string(shape));
    return n;
}

inline int64_t check_tensor(const Tensor& t, capsule_dtype dtype,
                            std::initializer_list<int64_t> shape, const Label& what) {
    return check_tensor(t, dtype, std::span<const int64_t>(shape.begin(), shape.size()), what);
}

/// A gradient view to write, or nullptr when the host does not want it (data NULL). A present
/// gradient must match the shape and dtype of the tensor it is the gradient of.
template <typename T>
T* grad_target(const Tensor& grad, const Tensor& of, const Label& what) {
    if (!grad.present()) return nullptr;
    check_tensor(grad, of.dtype(), of.shape(), what);
    return grad.data<T>();
}

/// Number of inputs / parameters must be exactly `n`.
template <typename Call>
void require_arity(const Call& call, std::size_t inputs, std::size_t params, const char* op) {
    if (call.num_inputs() != inputs) [[unlikely]]
        fail(std::string(op) + " expects " + std::to_string(inputs) + " input(s), got " +
             std::to_string(call.num_inputs()));
    if (call.num_params() != params) [[unlikely]]
        fail(std::string(op) + " expects " + std::to_string(params) + " parameter(s), got " +
             std::to_string(call.num_params()));
}

/// An attribute given as one integer or a list of `n` integers (kernel_size, stride, ...), each
/// at least `min`.
inline DimList tuple_attr(const Attributes& attrs, const char* name, std::size_t n, int64_t min,
                          const DimList* fallback) {
    DimList v;
    if (!attrs.has(name)) {
        require(fallback != nullptr,
                [&] { return std::string("missing attribute '") + name + "'"; });
        v = *fallback;
    } else {
        const auto given = attrs.get_ints_view(name);
        if (given.size() == 1 && n > 1) v.assign(n, given[0]);
        else if (given.size() == n) v.assign(given.begin(), given.end());
    }
    require(v.size() == n, [&] {
        return std::string("attribute '") + name + "' must be an integer or a list of " +
               std::to_string(n) + " integers";
    });
    for (auto x : v)
        require(x >= min, [&] {
            return std::string("attribute '") + name + "' = " + std::to_string(x) +
                   " must be >= " + std::to_string(min);
        });
    return v;
}

/// An integer attribute with a lower bound.
inline int64_t int_attr(const Attributes& attrs, const char* name, int64_t min,
                        const int64_t* fallback) {
    require(attrs.has(name) || fallback,
            [&] { return std::string("missing attribute '") + name + "'"; });
    const int64_t v = attrs.get_int(name, fallback ? *fallback : 0);
    require(v >= min, [&] {
        return std::string("attribute '") + name + "' = " + std::to_string(v) + " must be >= " +
               std::to_string(min);
    });
    return v;
}

}  // namespace capsule::reference
