// Reference kernels of det (torch.linalg.det, ONNX Det) over the last two axes of x [..., n, n]:
// LU factorisation with partial pivoting in double (Golub & Van Loan, Matrix Computations,
// algorithm 3.4.1); det = (−1)^swaps · Π U_ii, and 1 for n = 0. The gradient is Jacobi's formula,
// d det / dx = adj(x)ᵀ: det·x⁻ᵀ from the same factorisation when x is invertible, and the cofactor
// matrix (each entry the signed determinant of a minor) when it is singular, as PyTorch's
// linalg_det_backward gives.
#include <cmath>
#include <utility>
#include <vector>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

constexpr int64_t kMaxCofactorOrder = 32;  // cofactors cost O(n^5): bounds a singular x's backward

/// LU factors of an n × n matrix (row-major, in place) with the row permutation; `singular`
/// when a pivot column is all zero.
struct Lu {
    std::vector<double> a;
    std::vector<int64_t> perm;
    int64_t n = 0;
    double sign = 1;
    bool singular = false;
};

Lu factor(std::vector<double> a, int64_t n) {
    Lu lu{std::move(a), std::vector<int64_t>(static_cast<std::size_t>(n)), n, 1.0, false};
    for (int64_t i = 0; i < n; ++i) lu.perm[static_cast<std::size_t>(i)] = i;
    auto at = [&](int64_t r, int64_t c) -> double& { return lu.a[static_cast<std::size_t>(r * n + c)]; };
    for (int64_t k = 0; k < n; ++k) {
        int64_t p = k;
        for (int64_t r = k + 1; r < n; ++r)
            if (std::fabs(at(r, k)) > std::fabs(at(p, k))) p = r;
        if (at(p, k) == 0.0) {  // the column is zero from row k down: det = 0
            lu.singular = true;
            continue;
        }
        if (p != k) {
            for (int64_t c = 0; c < n; ++c) std::swap(at(p, c), at(k, c));
            std::swap(lu.perm[static_cast<std::size_t>(p)], lu.perm[static_cast<std::size_t>(k)]);
            lu.sign = -lu.sign;
        }
        for (int64_t r = k + 1; r < n; ++r) {
            const double f = at(r, k) / at(k, k);
            at(r, k) = f;
            for (int64_t c = k + 1; c < n; ++c) at(r, c) -= f * at(k, c);
        }
    }
    return lu;
}

double determinant(const Lu& lu) {
    if (lu.singular) return 0.0;
    double d = lu.sign;
    for (int64_t i = 0; i < lu.n; ++i) d *= lu.a[static_cast<std::size_t>(i * lu.n + i)];
    return d;
}

/// det of an n × n matrix; NaN when an entry is NaN (numpy.linalg.det), even a singular one.
double determinant_of(std::vector<double> a, int64_t n) {
    for (double v : a)
        if (std::isnan(v)) return v;
    return determinant(factor(std::move(a), n));
}

/// adj(x)ᵀ, the gradient of det at x (n × n, row-major).
std::vector<double> adjugate_transposed(const std::vector<double>& x, int64_t n) {
    std::vector<double> out(static_cast<std::size_t>(n * n));
    const Lu lu = factor(x, n);
    if (!lu.singular) {
        // det · x⁻ᵀ: column j of x⁻¹ solves x·v = e_j, and lands in row j of x⁻ᵀ.
        const double d = determinant(lu);
        std::vector<double> v(static_cast<std::size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = lu.perm[static_cast<std::size_t>(i)] == j ? 1.0 : 0.0;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t c = 0; c < i; ++c) v[static_cast<std::size_t>(i)] -= lu.a[static_cast<std::size_t>(i * n + c)] * v[static_cast<std::size_t>(c)];
            for (int64_t i = n - 1; i >= 0; --i) {
                for (int64_t c = i + 1; c < n; ++c) v[static_cast<std::size_t>(i)] -= lu.a[static_cast<std::size_t>(i * n + c)] * v[static_cast<std::size_t>(c)];
                v[static_cast<std::size_t>(i)] /= lu.a[static_cast<std::size_t>(i * n + i)];
            }
            for (int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(j * n + i)] = d * v[static_cast<std::size_t>(i)];
        }
        return out;
    }
    require(n <= kMaxCofactorOrder, [&] {
        return "det: the gradient at a singular " + std::to_string(n) + "x" + std::to_string(n) +
               " matrix needs cofactors, computed up to " + std::to_string(kMaxCofactorOrder) + "x" +
               std::to_string(kMaxCofactorOrder);
    });
    std::vector<double> minor(static_cast<std::size_t>((n - 1) * (n - 1)));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            std::size_t m = 0;
            for (int64_t r = 0; r < n; ++r)
                for (int64_t c = 0; c < n; ++c)
                    if (r != i && c != j) minor[m++] = x[static_cast<std::size_t>(r * n + c)];
            out[static_cast<std::size_t>(i * n + j)] = ((i + j) % 2 ? -1.0 : 1.0) * determinant_of(minor, n - 1);
        }
    return out;
}

/// The batch count and order n of x [..., n, n], checked.
std::pair<int64_t, int64_t> square_batch(const Tensor& x) {
    require(x.rank() >= 2, "det: input has rank < 2; expected [..., n, n]");
    const int64_t n = x.dim(x.rank() - 1);
    require(x.dim(x.rank() - 2) == n, [&] { return "det: input " + shape_string(x.shape()) + " is not square"; });
    int64_t batch = 1;
    for (int d = 0; d < x.rank() - 2; ++d) batch *= x.dim(d);
    return {batch, n};
}

Dims batch_shape(const Tensor& x) {
    Dims s;
    for (int d = 0; d < x.rank() - 2; ++d) s.push_back(x.dim(d));
    return s;
}

/// Checks x [..., n, n] (float32 or float64) and `per_matrix` (the output, or its gradient: one
/// value per matrix, of x's dtype); returns the batch count and n.
std::pair<int64_t, int64_t> checked_operands(const Tensor& x, const Tensor& per_matrix, const char* what) {
    check_float(x, "det: input");
    const auto batch_n = square_batch(x);
    check_view(per_matrix, {"det: ", what}, x.dtype());
    check_shape(per_matrix, {"det: ", what}, batch_shape(x));
    return batch_n;
}

}  // namespace

void det_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "det");
    const Tensor x = call.input(0);
    const Tensor y = call.output(0);
    const auto [batch, n] = checked_operands(x, y, "output");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        for (int64_t b = 0; b < batch; ++b)
            yp[b] = static_cast<T>(determinant_of(std::vector<double>(xp + b * n * n, xp + (b + 1) * n * n), n));
    });
}

void det_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "det");
    const Tensor x = call.input(0);
    const Tensor g = call.grad_output(0);
    const auto [batch, n] = checked_operands(x, g, "grad output");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "det: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        for (int64_t b = 0; b < batch; ++b) {
            const auto adj = adjugate_transposed(std::vector<double>(xp + b * n * n, xp + (b + 1) * n * n), n);
            for (int64_t i = 0; i < n * n; ++i)
                out[b * n * n + i] = static_cast<T>(static_cast<double>(gp[b]) * adj[static_cast<std::size_t>(i)]);
        }
    });
}

}  // namespace capsule::reference
