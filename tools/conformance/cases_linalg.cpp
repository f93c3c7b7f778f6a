// Conformance cases of the linear-algebra family: matmul, bmm, linear, layer_norm, batch_norm,
// batchnorm_channel_first and scaled_dot_product_attention.
//
// Expected values are literal numbers worked out by hand or are computed here by straightforward
// loops in double (a triple loop for matmul, the textbook normalisation formulas, an explicit
// softmax for attention) from the input values as the kernel sees them (float32 inputs rounded to
// float); never by a kernel. Semantics are PyTorch's (docs/ops.md).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

namespace capsule::conformance {
namespace {

using builders::count;
using builders::Ints;
using builders::kInf;
using builders::kNaN;
using builders::seen;
using builders::V;
constexpr auto& grad = builders::with_grad;

/// A tensor of deterministic values in [-1, 1], multiples of 1/64 (exact in float32).
CaseTensor random(DType d, Shape s, std::uint64_t seed) {
    return builders::random(d, std::move(s), seed, 12345u);
}

KernelCase make(std::string name, BackendOp op, std::vector<CaseTensor> inputs,
                std::vector<CaseTensor> params, CaseTensor expected, Attributes attrs = {}) {
    return builders::make(std::move(name), op, std::move(inputs), std::move(params),
                          std::move(expected), std::move(attrs), {1e-5, 1e-12});
}

// ---------------------------------------------------------------------------------------------
// Naive references

/// torch.matmul by definition: promote 1-D operands, broadcast the batch dimensions, triple loop.
CaseTensor naive_matmul(const CaseTensor& a, const CaseTensor& b) {
    const V av = seen(a), bv = seen(b);
    Shape sa = a.shape, sb = b.shape;
    if (sa.size() == 1) sa.insert(sa.begin(), 1);
    if (sb.size() == 1) sb.push_back(1);
    const std::int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
    Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    const std::size_t r = std::max(ba.size(), bb.size());
    while (ba.size() < r) ba.insert(ba.begin(), 1);
    while (bb.size() < r) bb.insert(bb.begin(), 1);
    Shape batch(r);
    for (std::size_t i = 0; i < r; ++i) batch[i] = std::max(ba[i], bb[i]);
    const std::int64_t nb = count(batch);
    V out(static_cast<std::size_t>(nb * m * n), 0.0);
    for (std::int64_t t = 0; t < nb; ++t) {
        // Multi-index of batch t, mapped into a's and b's (size-1 dims broadcast).
        std::int64_t rem = t, ia = 0, ib = 0, sa_ = 1, sb_ = 1;
        for (std::size_t d = r; d-- > 0;) {
            const std::int64_t idx = rem % batch[d];
            rem /= batch[d];
            ia += (ba[d] == 1 ? 0 : idx) * sa_;
            ib += (bb[d] == 1 ? 0 : idx) * sb_;
            sa_ *= ba[d];
            sb_ *= bb[d];
        }
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (std::int64_t p = 0; p < k; ++p)
                    s += av[std::size_t(ia * m * k + i * k + p)] * bv[std::size_t(ib * k * n + p * n + j)];
                out[std::size_t(t * m * n + i * n + j)] = s;
            }
    }
    Shape os = batch;
    if (a.shape.size() > 1) os.push_back(m);
    if (b.shape.size() > 1) os.push_back(n);
    return {a.dtype, os, out};
}

/// y = x·Wᵀ + b.
CaseTensor naive_linear(const CaseTensor& x, const CaseTensor& w, const CaseTensor* b) {
    const V xv = seen(x), wv = seen(w);
    const V bv = b ? seen(*b) : V{};
    const std::int64_t in = x.shape.back(), out = w.shape[0];
    const std::int64_t rows = in == 0 ? count(Shape(x.shape.begin(), x.shape.end() - 1))
                                      : count(x.shape) / in;
    V y(static_cast<std::size_t>(rows * out));
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < out; ++o) {
            double s = b ? bv[std::size_t(o)] : 0.0;
            for (std::int64_t i = 0; i < in; ++i)
                s += xv[std::size_t(r * in + i)] * wv[std::size_t(o * in + i)];
            y[std::size_t(r * out + o)] = s;
        }
    Shape s = x.shape;
    s.back() = out;
    return {x.dtype, s, y};
}

/// Layer norm over the trailing `n` elements of each row.
CaseTensor naive_layer_norm(const CaseTensor& x, std::int64_t n, double eps, const CaseTensor* w,
                            const CaseTensor* b) {
    const V xv = seen(x);
    const V wv = w ? seen(*w) : V{}, bv = b ? seen(*b) : V{};
    V y(xv.size());
    for (std::size_t r = 0; r * std::size_t(n) < xv.size(); ++r) {
        double mean = 0;
        for (std::int64_t i = 0; i < n; ++i) mean += xv[r * n + i];
        mean /= double(n);
        double var = 0;
        for (std::int64_t i = 0; i < n; ++i) var += (xv[r * n + i] - mean) * (xv[r * n + i] - mean);
        var /= double(n);
        for (std::int64_t i = 0; i < n; ++i) {
            double v = (xv[r * n + i] - mean) / std::sqrt(var + eps);
            if (w) v = v * wv[i];
            if (b) v = v + bv[i];
            y[r * n + i] = v;
        }
    }
    return {x.dtype, x.shape, y};
}

/// Batch norm of x [N, C, *]: running statistics (eval) or biased batch statistics (training).
CaseTensor naive_batch_norm(const CaseTensor& x, const std::vector<CaseTensor>& params, bool affine,
                            bool training, double eps) {
    const V xv = seen(x);
    const std::int64_t N = x.shape[0], C = x.shape[1], S = count(x.shape) / std::max<std::int64_t>(1, N * C);
    const V rm = seen(params[affine ? 2 : 0]), rv = seen(params[affine ? 3 : 1]);
    const V w = affine ? seen(params[0]) : V(std::size_t(C), 1.0);
    const V b = affine ? seen(params[1]) : V(std::size_t(C), 0.0);
    V y(xv.size());
    for (std::int64_t c = 0; c < C; ++c) {
        double mean = rm[c], var = rv[c];
        if (training) {
            mean = 0;
            for (std::int64_t i = 0; i < N; ++i)
                for (std::int64_t s = 0; s < S; ++s) mean += xv[(i * C + c) * S + s];
            mean /= double(N * S);
            var = 0;
            for (std::int64_t i = 0; i < N; ++i)
                for (std::int64_t s = 0; s < S; ++s) {
                    const double d = xv[(i * C + c) * S + s] - mean;
                    var += d * d;
                }
            var /= double(N * S);
        }
        for (std::int64_t i = 0; i < N; ++i)
            for (std::int64_t s = 0; s < S; ++s) {
                const std::size_t at = std::size_t((i * C + c) * S + s);
                y[at] = (xv[at] - mean) / std::sqrt(var + eps) * w[c] + b[c];
            }
    }
    return {x.dtype, x.shape, y};
}

/// Attention by definition. `keep(batch, i, j)` and `bias(batch, i, j)` describe the mask.
struct AttnMask {
    enum Kind { none, causal, boolean, additive } kind = none;
    CaseTensor mask;  // broadcast to [..., L, S]
};

double mask_value(const CaseTensor& m, const Shape& scores, std::int64_t flat) {
    // Multi-index in the scores, mapped to the (right-aligned, broadcast) mask.
    std::size_t idx = 0, stride = 1;
    const std::size_t r = scores.size(), rm = m.shape.size();
    for (std::size_t d = r; d-- > 0;) {
        const std::int64_t i = flat % scores[d];
        flat /= scores[d];
        if (d + rm < r) continue;
        const std::size_t md = d + rm - r;
        if (m.shape[md] != 1) idx += std::size_t(i) * stride;
        stride *= std::size_t(m.shape[md]);
    }
    return m.values[idx];
}

CaseTensor naive_attention(const CaseTensor& q, const CaseTensor& k, const CaseTensor& v,
                           const AttnMask& mask, double scale) {
    const V qv = seen(q), kv = seen(k), vv = seen(v);
    const std::size_t r = q.shape.size();
    const std::int64_t L = q.shape[r - 2], E = q.shape[r - 1], S = k.shape[r - 2], Ev = v.shape[r - 1];
    const std::int64_t B = count(Shape(q.shape.begin(), q.shape.end() - 2));
    Shape scores(q.shape.begin(), q.shape.end() - 1);
    scores.push_back(S);
    const V mv = mask.kind == AttnMask::additive ? seen(mask.mask) : mask.mask.values;
    CaseTensor mseen = mask.mask;
    mseen.values = mv;
    V out(std::size_t(B * L * Ev), 0.0);
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < L; ++i) {
            V s(static_cast<std::size_t>(S));
            std::vector<bool> keep(static_cast<std::size_t>(S), true);
            for (std::int64_t j = 0; j < S; ++j) {
                double dot = 0;
                for (std::int64_t e = 0; e < E; ++e)
                    dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
                s[j] = dot * scale;
                const std::int64_t flat = (b * L + i) * S + j;
                if (mask.kind == AttnMask::causal && j > i) keep[j] = false;
                if (mask.kind == AttnMask::boolean && mask_value(mseen, scores, flat) == 0) keep[j] = false;
                if (mask.kind == AttnMask::additive) s[j] += mask_value(mseen, scores, flat);
            }
            double m = -kInf;
            for (std::int64_t j = 0; j < S; ++j)
                if (keep[j]) m = std::max(m, s[j]);
            if (m == -kInf) continue;  // fully masked: zero row
            double z = 0;
            V p(static_cast<std::size_t>(S), 0.0);
            for (std::int64_t j = 0; j < S; ++j)
                if (keep[j]) z += (p[j] = std::exp(s[j] - m));
            for (std::int64_t j = 0; j < S; ++j)
                for (std::int64_t e = 0; e < Ev; ++e)
                    out[(b * L + i) * Ev + e] += p[j] / z * vv[(b * S + j) * Ev + e];
        }
    Shape os(q.shape.begin(), q.shape.end() - 1);
    os.push_back(Ev);
    return {q.dtype, os, out};
}

// ---------------------------------------------------------------------------------------------

void matmul_cases(std::vector<KernelCase>& out) {
    const auto op = BackendOp::matmul;
    auto mm = [&](std::string name, CaseTensor a, CaseTensor b) {
        auto expected = naive_matmul(a, b);
        return make(std::move(name), op, {std::move(a), std::move(b)}, {}, std::move(expected));
    };
    // Hand-computed: [[1,2,3],[4,5,6]] · [[7,8],[9,10],[11,12]] = [[58,64],[139,154]].
    out.push_back(make("matmul/hand_2x3_3x2", op,
                       {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3, 2}, {7, 8, 9, 10, 11, 12})}, {},
                       f32({2, 2}, {58, 64, 139, 154})));
    out.push_back(make("matmul/hand_dot_1d_1d", op, {f32({3}, {1, 2, 3}), f32({3}, {4, 5, -6})}, {},
                       f32({}, {4 + 10 - 18})));
    out.push_back(make("matmul/hand_vec_mat", op,
                       {f64({3}, {1, 2, 3}), f64({3, 2}, {1, 0, 0, 1, 1, 1})}, {},
                       f64({2}, {4, 5})));
    out.push_back(make("matmul/hand_mat_vec", op,
                       {f64({2, 3}, {1, 2, 3, 4, 5, 6}), f64({3}, {1, 0, -1})}, {},
                       f64({2}, {-2, -2})));
    out.push_back(mm("matmul/batch_broadcast", random(DType::float32, {2, 1, 2, 3}, 1),
                     random(DType::float32, {3, 3, 2}, 2)));
    out.push_back(mm("matmul/batched_lhs_vec_rhs", random(DType::float32, {2, 3, 4}, 3),
                     random(DType::float32, {4}, 4)));
    out.push_back(mm("matmul/vec_lhs_batched_rhs", random(DType::float64, {4}, 5),
                     random(DType::float64, {2, 4, 3}, 6)));
    out.push_back(mm("matmul/shared_rhs_f64", random(DType::float64, {3, 4, 5}, 7),
                     random(DType::float64, {5, 2}, 8)));
    out.push_back(mm("matmul/shared_lhs_broadcast", random(DType::float32, {4, 5}, 9),
                     random(DType::float32, {2, 1, 5, 3}, 10)));
    out.push_back(mm("matmul/size1_dims", random(DType::float32, {1, 3, 1}, 11),
                     random(DType::float32, {1, 1, 4}, 12)));
    out.push_back(mm("matmul/scalar_like_1x1", f32({1, 1}, {3}), f32({1, 1}, {-2})));
    out.push_back(make("matmul/zero_inner_dim", op, {f32({2, 0}, {}), f32({0, 3}, {})}, {},
                       f32({2, 3}, V(6, 0.0))));
    // Blocking edges: k beyond one KC slice, m beyond one MC block, ragged tiles, transposed
    // packing exercised in the gradient cases below.
    {
        auto c = mm("matmul/large_k_f32", random(DType::float32, {9, 300}, 13),
                    random(DType::float32, {300, 50}, 14));
        c.atol = 1e-4;
        out.push_back(std::move(c));
    }
    out.push_back(mm("matmul/large_m_f64", random(DType::float64, {203, 7}, 15),
                     random(DType::float64, {7, 61}, 16)));
    out.push_back(mm("matmul/wide_n_f32", random(DType::float32, {3, 5}, 17),
                     random(DType::float32, {5, 3101}, 18)));
    // Gradients.
    out.push_back(grad(mm("matmul/grad_batch_broadcast", random(DType::float32, {2, 1, 2, 3}, 19),
                          random(DType::float32, {3, 3, 2}, 20))));
    out.push_back(grad(mm("matmul/grad_shared_rhs", random(DType::float64, {2, 2, 3}, 21),
                          random(DType::float64, {3, 2}, 22))));
    out.push_back(grad(mm("matmul/grad_vec_lhs", random(DType::float32, {3}, 23),
                          random(DType::float32, {2, 3, 2}, 24))));
    out.push_back(grad(mm("matmul/grad_vec_rhs", random(DType::float32, {2, 3}, 25),
                          random(DType::float32, {3}, 26))));
    out.push_back(grad(mm("matmul/grad_dot", random(DType::float64, {4}, 27),
                          random(DType::float64, {4}, 28))));
}

void bmm_cases(std::vector<KernelCase>& out) {
    const auto op = BackendOp::bmm;
    auto bmm = [&](std::string name, CaseTensor a, CaseTensor b) {
        auto expected = naive_matmul(a, b);
        return make(std::move(name), op, {std::move(a), std::move(b)}, {}, std::move(expected));
    };
    out.push_back(make("bmm/hand", op,
                       {f32({2, 1, 2}, {1, 2, 3, 4}), f32({2, 2, 1}, {5, 6, 7, 8})}, {},
                       f32({2, 1, 1}, {17, 53})));
    out.push_back(bmm("bmm/f32", random(DType::float32, {3, 4, 5}, 31),
                      random(DType::float32, {3, 5, 6}, 32)));
    out.push_back(bmm("bmm/f64_size1", random(DType::float64, {1, 1, 7}, 33),
                      random(DType::float64, {1, 7, 1}, 34)));
    out.push_back(grad(bmm("bmm/grad", random(DType::float32, {2, 2, 3}, 35),
                           random(DType::float32, {2, 3, 2}, 36))));
}

// det: hand values by cofactor expansion; gradients (Jacobi's formula) checked against finite
// differences, at an invertible and at a singular matrix.
void det_cases(std::vector<KernelCase>& out) {
    const auto op = BackendOp::det;
    out.push_back(grad(builders::make("det/hand_2x2", op, {f32({2, 2}, {1, 2, 3, 4})}, f32({}, {-2}))));
    // A zero first pivot needs a row swap: [[0, 1], [1, 0]] -> -1.
    out.push_back(grad(builders::make("det/pivot_swap", op, {f64({2, 2}, {0, 1, 1, 0})}, f64({}, {-1}))));
    // 6(−2·7 − 5·8) − 1(4·7 − 5·2) + 1(4·8 + 2·2) = −324 − 18 + 36 = −306.
    out.push_back(grad(builders::make("det/hand_3x3", op, {f64({3, 3}, {6, 1, 1, 4, -2, 5, 2, 8, 7})}, f64({}, {-306}))));
    // A batch: 2·I (det 8) and a singular matrix (row 3 = (row 1 + row 2) / 3: det 0), whose
    // gradient is the cofactor matrix.
    out.push_back(grad(builders::make("det/batch_with_singular", op,
                            {f64({2, 3, 3}, {2, 0, 0, 0, 2, 0, 0, 0, 2, 2, 0, 1, 1, 3, 2, 1, 1, 1})},
                            f64({2}, {8, 0}))));
    out.push_back(builders::make("det/order0_is_one", op, {f32({3, 0, 0}, {})}, f32({3}, {1, 1, 1})));
    out.push_back(builders::make("det/nan", op, {f32({2, 2}, {1, kNaN, 0, 0})}, f32({}, {kNaN})));
    out.push_back(error_case("det/error_not_square", op, {f32({2, 3}, {1, 2, 3, 4, 5, 6})},
                             "det: input [2, 3] is not square", f32({}, {})));
}

void linear_cases(std::vector<KernelCase>& out) {
    const auto op = BackendOp::linear;
    auto lin = [&](std::string name, CaseTensor x, std::int64_t outf, bool bias, std::uint64_t seed) {
        const std::int64_t in = x.shape.back();
        std::vector<CaseTensor> params{random(x.dtype, {outf, in}, seed)};
        if (bias) params.push_back(random(x.dtype, {outf}, seed + 1));
        auto expected = naive_linear(x, params[0], bias ? &params[1] : nullptr);
        Attributes attrs{{"out_features", std::int64_t(outf)}};
        if (!bias) attrs["bias"] = false;
        return make(std::move(name), op, {std::move(x)}, std::move(params), std::move(expected),
                    std::move(attrs));
    };
    // Hand: x = [1, 2], W = [[1, 0], [0, 1], [1, 1]], b = [0.5, -1, 0] -> [1.5, 1, 3].
    out.push_back(make("linear/hand", op, {f32({1, 2}, {1, 2})},
                       {f32({3, 2}, {1, 0, 0, 1, 1, 1}), f32({3}, {0.5, -1, 0})},
                       f32({1, 3}, {1.5, 1, 3}), {{"out_features", std::int64_t(3)}}));
    out.push_back(lin("linear/bias_f32", random(DType::float32, {4, 3}, 41), 5, true, 42));
    out.push_back(lin("linear/no_bias_3d", random(DType::float32, {2, 3, 4}, 43), 2, false, 44));
    out.push_back(lin("linear/vector_input_f64", random(DType::float64, {6}, 45), 3, true, 46));
    {
        auto c = lin("linear/mlp_sized_f32", random(DType::float32, {17, 300}, 47), 70, true, 48);
        c.atol = 1e-4;
        out.push_back(std::move(c));
    }
    out.push_back(lin("linear/single_feature", random(DType::float64, {3, 1}, 49), 1, true, 50));
    out.push_back(grad(lin("linear/grad_bias", random(DType::float32, {3, 4}, 51), 3, true, 52)));
    out.push_back(grad(lin("linear/grad_no_bias_3d", random(DType::float64, {2, 2, 3}, 53), 2,
                           false, 54)));
}

void layer_norm_cases(std::vector<KernelCase>& out) {
    const auto op = BackendOp::layer_norm;
    auto ln = [&](std::string name, CaseTensor x, Ints normalized, bool affine, bool bias,
                  double eps, std::uint64_t seed, bool int_attr = false) {
        const std::int64_t n = count(normalized);
        std::vector<CaseTensor> params;
        if (affine) params.push_back(random(x.dtype, normalized, seed));
        if (affine && bias) params.push_back(random(x.dtype, normalized, seed + 1));
        auto expected = naive_layer_norm(x, n, eps, affine ? &params[0] : nullptr,
                                         affine && bias ? &params[1] : nullptr);
        Attributes attrs;
        if (int_attr)
            attrs["normalized_shape"] = normalized[0];
        else
            attrs["normalized_shape"] = normalized;
        if (eps != 1e-5) attrs["eps"] = eps;
        if (!affine) attrs["elementwise_affine"] = false;
        if (affine && !bias) attrs["bias"] = false;
        return make(std::move(name), op, {std::move(x)}, std::move(params), std::move(expected),
                    std::move(attrs));
    };
    // Hand: row [1, 3] -> mean 2, var 1 -> (x - 2)/sqrt(1 + eps) ≈ [-1, 1]; with eps = 0.25:
    // ±1/sqrt(1.25).
    {
        const double r = 1.0 / std::sqrt(1.25);
        out.push_back(make("layer_norm/hand_no_affine", op, {f64({2, 2}, {1, 3, 5, 5})}, {},
                           f64({2, 2}, {-r, r, 0, 0}),
                           {{"normalized_shape", std::int64_t(2)},
                            {"eps", 0.25},
                            {"elementwise_affine", false}}));
    }
    out.push_back(ln("layer_norm/affine_int_shape", random(DType::float32, {3, 5}, 61), {5}, true,
                     true, 1e-5, 62, true));
    out.push_back(ln("layer_norm/two_trailing_dims", random(DType::float32, {2, 2, 3}, 63), {2, 3},
                     true, true, 1e-5, 64));
    out.push_back(ln("layer_norm/weight_only_f64", random(DType::float64, {4, 3}, 65), {3}, true,
                     false, 1e-3, 66));
    out.push_back(ln("layer_norm/whole_tensor", random(DType::float64, {2, 3}, 67), {2, 3}, false,
                     false, 1e-5, 68));
    out.push_back(grad(ln("layer_norm/grad_affine", random(DType::float32, {2, 4}, 69), {4}, true,
                          true, 1e-5, 70)));
    out.push_back(grad(ln("layer_norm/grad_weight_only_2d", random(DType::float64, {2, 2, 3}, 71),
                          {2, 3}, true, false, 1e-5, 72)));
    out.push_back(grad(ln("layer_norm/grad_no_affine", random(DType::float64, {3, 3}, 73), {3},
                          false, false, 0.1, 74)));
}

void batch_norm_cases(std::vector<KernelCase>& out, BackendOp op, const std::string& prefix) {
    auto bn = [&](std::string name, CaseTensor x, bool affine, bool training, double eps,
                  std::uint64_t seed) {
        const std::int64_t C = x.shape[1];
        std::vector<CaseTensor> params;
        if (affine) {
            params.push_back(random(x.dtype, {C}, seed));
            params.push_back(random(x.dtype, {C}, seed + 1));
        }
        params.push_back(random(x.dtype, {C}, seed + 2));
        // Running variances in [0.5, 1.5].
        auto rv = random(x.dtype, {C}, seed + 3);
        for (auto& v : rv.values) v = 1.0 + v / 2.0;
        params.push_back(rv);
        auto expected = naive_batch_norm(x, params, affine, training, eps);
        Attributes attrs;
        if (training) attrs["training"] = true;
        if (!affine) attrs["affine"] = false;
        if (eps != 1e-5) attrs["eps"] = eps;
        return make(prefix + "/" + name, op, {std::move(x)}, std::move(params), std::move(expected),
                    std::move(attrs));
    };
    // Hand, eval: x = [[1], [3]] (N = 2, C = 1), running mean 1, var 3, eps 1, weight 2, bias 1
    // -> (x - 1)/2·2 + 1 = [1, 3].
    out.push_back(make(prefix + "/hand_eval", op, {f32({2, 1}, {1, 3})}, 
                       {f32({1}, {2}), f32({1}, {1}), f32({1}, {1}), f32({1}, {3})},
                       f32({2, 1}, {1, 3}), {{"eps", 1.0}}));
    // Hand, training: x = [[1], [3]]: mean 2, biased var 1, eps 0 is not allowed -> eps 3:
    // (x - 2)/2 = [-0.5, 0.5]; momentum is accepted.
    out.push_back(make(prefix + "/hand_training", op, {f64({2, 1}, {1, 3})},
                       {f64({1}, {1}), f64({1}, {0}), f64({1}, {7}), f64({1}, {9})},
                       f64({2, 1}, {-0.5, 0.5}),
                       {{"eps", 3.0}, {"training", true}, {"momentum", 0.2}}));
    out.push_back(bn("eval_2d", random(DType::float32, {3, 4}, 81), true, false, 1e-5, 82));
    out.push_back(bn("eval_4d_f64", random(DType::float64, {2, 3, 2, 2}, 83), true, false, 1e-3, 84));
    out.push_back(bn("eval_no_affine", random(DType::float32, {2, 2, 3}, 85), false, false, 1e-5, 86));
    out.push_back(bn("training_2d", random(DType::float32, {5, 3}, 87), true, true, 1e-5, 88));
    out.push_back(bn("training_4d_no_affine", random(DType::float64, {2, 2, 2, 3}, 89), false, true,
                     1e-5, 90));
    // Gradients in training mode (running statistics do not influence the output there, so
    // their zero gradient agrees with finite differences).
    out.push_back(grad(bn("grad_training_3d", random(DType::float32, {3, 2, 2}, 91), true, true,
                          1e-5, 92)));
    out.push_back(grad(bn("grad_training_no_affine", random(DType::float64, {4, 3}, 93), false, true,
                          1e-3, 94)));
    // Gradients in eval mode for x, weight and bias (the running statistics are not trained:
    // their gradient is zero by definition, not what finite differences give, so unchecked).
    auto eval = grad(bn("grad_eval_4d", random(DType::float64, {2, 3, 2, 2}, 95), true, false, 1e-5, 96));
    eval.all_param_grads = false;
    eval.grad_params = {0, 1};
    out.push_back(std::move(eval));
    auto eval_plain = grad(bn("grad_eval_no_affine", random(DType::float64, {3, 2, 4}, 97), false, false, 1e-3, 98));
    eval_plain.all_param_grads = false;
    out.push_back(std::move(eval_plain));
}

void attention_cases(std::vector<KernelCase>& out) {
    const auto op = BackendOp::scaled_dot_product_attention;
    auto att = [&](std::string name, CaseTensor q, CaseTensor k, CaseTensor v, AttnMask mask,
                   Attributes attrs) {
        const double E = double(q.shape.back());
        const double scale = attrs.count("scale") ? std::get<double>(attrs["scale"]) : 1.0 / std::sqrt(E);
        if (mask.kind == AttnMask::causal) attrs["is_causal"] = true;
        auto expected = naive_attention(q, k, v, mask, scale);
        std::vector<CaseTensor> inputs{std::move(q), std::move(k), std::move(v)};
        if (mask.kind == AttnMask::boolean || mask.kind == AttnMask::additive)
            inputs.push_back(mask.mask);
        return make(std::move(name), op, std::move(inputs), {}, std::move(expected),
                    std::move(attrs));
    };
    const auto F = DType::float32, D = DType::float64;
    // Hand: one query, two keys with equal scores -> the mean of the values.
    out.push_back(make("scaled_dot_product_attention/hand_uniform", op,
                       {f32({1, 1}, {1}), f32({2, 1}, {2, 2}), f32({2, 2}, {1, 2, 3, 6})}, {},
                       f32({1, 2}, {2, 4})));
    out.push_back(att("scaled_dot_product_attention/basic", random(F, {2, 3, 4}, 101),
                      random(F, {2, 5, 4}, 102), random(F, {2, 5, 3}, 103), {}, {}));
    out.push_back(att("scaled_dot_product_attention/causal", random(F, {1, 4, 2}, 104),
                      random(F, {1, 4, 2}, 105), random(F, {1, 4, 3}, 106),
                      {AttnMask::causal, {}}, {}));
    out.push_back(att("scaled_dot_product_attention/causal_more_queries", random(D, {3, 2}, 107),
                      random(D, {2, 2}, 108), random(D, {2, 2}, 109), {AttnMask::causal, {}}, {}));
    out.push_back(att("scaled_dot_product_attention/explicit_scale_4d_f64",
                      random(D, {2, 2, 2, 3}, 110), random(D, {2, 2, 3, 3}, 111),
                      random(D, {2, 2, 3, 2}, 112), {}, {{"scale", 0.7}}));
    out.push_back(att("scaled_dot_product_attention/bool_mask_broadcast", random(F, {2, 3, 2}, 113),
                      random(F, {2, 4, 2}, 114), random(F, {2, 4, 2}, 115),
                      {AttnMask::boolean, boolean({3, 4}, {1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1})},
                      {}));
    out.push_back(att("scaled_dot_product_attention/bool_mask_fully_masked_row",
                      random(F, {2, 2}, 116), random(F, {3, 2}, 117), random(F, {3, 2}, 118),
                      {AttnMask::boolean, boolean({2, 3}, {0, 0, 0, 1, 0, 1})}, {}));
    out.push_back(att("scaled_dot_product_attention/float_mask", random(F, {2, 2, 3}, 119),
                      random(F, {2, 3, 3}, 120), random(F, {2, 3, 2}, 121),
                      {AttnMask::additive, f32({1, 2, 3}, {0, -1, 0.5, -kInf, 0, 2})}, {}));
    // Gradients.
    out.push_back(grad(att("scaled_dot_product_attention/grad_basic", random(D, {1, 2, 3}, 122),
                           random(D, {1, 3, 3}, 123), random(D, {1, 3, 2}, 124), {}, {})));
    out.push_back(grad(att("scaled_dot_product_attention/grad_causal_scale", random(F, {3, 2}, 125),
                           random(F, {3, 2}, 126), random(F, {3, 2}, 127), {AttnMask::causal, {}},
                           {{"scale", 1.3}})));
    out.push_back(grad(att("scaled_dot_product_attention/grad_float_mask", random(F, {2, 2}, 128),
                           random(F, {3, 2}, 129), random(F, {3, 2}, 130),
                           {AttnMask::additive, f32({2, 3}, {0.5, -0.25, 0, 1, 0, -0.5})}, {})));
    out.push_back(grad(att("scaled_dot_product_attention/grad_bool_mask", random(F, {2, 2, 2}, 131),
                           random(F, {2, 3, 2}, 132), random(F, {2, 3, 2}, 133),
                           {AttnMask::boolean, boolean({2, 3}, {1, 0, 1, 0, 0, 0})}, {})));
}

/// Inputs and parameters the kernels must refuse, with (part of) the message they give.
void error_cases(std::vector<KernelCase>& out) {
    using I = std::int64_t;
    constexpr auto F = DType::float32;
    // matmul / bmm
    out.push_back(error_case("matmul/error_inner_mismatch", BackendOp::matmul,
                             {random(F, {2, 3}, 901), random(F, {4, 2}, 902)},
                             "matmul: inner dimensions differ: [2, 3] x [4, 2]", f32({2, 2}, {})));
    out.push_back(error_case("matmul/error_dtype_mismatch", BackendOp::matmul,
                             {random(F, {2, 3}, 903), random(DType::float64, {3, 2}, 904)},
                             "matmul: inputs have different dtypes (float32 and float64)",
                             f32({2, 2}, {})));
    out.push_back(error_case("bmm/error_batch_mismatch", BackendOp::bmm,
                             {random(F, {2, 1, 2}, 905), random(F, {3, 2, 1}, 906)},
                             "bmm: batch dimensions differ: [2, 1, 2] x [3, 2, 1]",
                             f32({2, 1, 1}, {})));
    // linear: parameters are not seen by shape inference, only by the kernel
    const Attributes linear4{{"out_features", I(4)}};
    out.push_back(error_case("linear/error_weight_shape", BackendOp::linear,
                             {random(F, {2, 3}, 907)}, "linear weight has shape [4, 2], expected [4, 3]",
                             {}, linear4, {random(F, {4, 2}, 908), random(F, {4}, 909)}));
    out.push_back(error_case("linear/error_bias_shape", BackendOp::linear,
                             {random(F, {2, 3}, 910)}, "linear bias has shape [3], expected [4]", {},
                             linear4, {random(F, {4, 3}, 911), random(F, {3}, 912)}));
    out.push_back(error_case("linear/error_missing_bias", BackendOp::linear,
                             {random(F, {2, 3}, 913)}, "linear expects 2 parameter(s), got 1", {},
                             linear4, {random(F, {4, 3}, 914)}));
    out.push_back(error_case("linear/error_weight_dtype", BackendOp::linear,
                             {random(F, {2, 3}, 915)},
                             "linear weight has dtype float64, expected float32", {},
                             {{"out_features", I(4)}, {"bias", false}},
                             {random(DType::float64, {4, 3}, 916)}));
    // layer_norm
    out.push_back(error_case("layer_norm/error_weight_shape", BackendOp::layer_norm,
                             {random(F, {2, 3}, 917)},
                             "layer_norm weight has shape [2], expected [3]", {},
                             {{"normalized_shape", Ints{3}}},
                             {random(F, {2}, 918), random(F, {3}, 919)}));
    out.push_back(error_case("layer_norm/error_bias_shape", BackendOp::layer_norm,
                             {random(F, {2, 3}, 920)},
                             "layer_norm bias has shape [3, 1], expected [3]", {},
                             {{"normalized_shape", Ints{3}}},
                             {random(F, {3}, 921), random(F, {3, 1}, 922)}));
    out.push_back(error_case("layer_norm/error_normalized_shape_mismatch", BackendOp::layer_norm,
                             {random(F, {2, 3}, 923)},
                             "layer_norm: normalized_shape [4] does not match the trailing "
                             "dimensions of [2, 3]",
                             f32({2, 3}, {}),
                             {{"normalized_shape", Ints{4}}, {"elementwise_affine", false}}));
    out.push_back(error_case("layer_norm/error_eps_zero", BackendOp::layer_norm,
                             {random(F, {2, 3}, 924)}, "layer_norm: attribute 'eps' must be > 0",
                             f32({2, 3}, {}),
                             {{"normalized_shape", Ints{3}}, {"eps", 0.0},
                              {"elementwise_affine", false}}));
    // batch_norm
    out.push_back(error_case("batch_norm/error_running_var_shape", BackendOp::batch_norm,
                             {random(F, {2, 3}, 925)},
                             "batch_norm parameter 3 has shape [2], expected [3]", {}, {},
                             {random(F, {3}, 926), random(F, {3}, 927), random(F, {3}, 928),
                              random(F, {2}, 929)}));
    out.push_back(error_case("batch_norm/error_momentum", BackendOp::batch_norm,
                             {random(F, {2, 3}, 930)},
                             "batch_norm: attribute 'momentum' must be in [0, 1]", {},
                             {{"momentum", 1.5}, {"affine", false}},
                             {random(F, {3}, 931), random(F, {3}, 932)}));
    out.push_back(error_case("batchnorm_channel_first/error_training_single_value",
                             BackendOp::batchnorm_channel_first, {random(F, {1, 2}, 933)},
                             "batchnorm_channel_first: training needs more than 1 value per channel",
                             {}, {{"training", true}, {"affine", false}},
                             {random(F, {2}, 934), f32({2}, {1, 1})}));
    // scaled_dot_product_attention
    const auto sdpa = BackendOp::scaled_dot_product_attention;
    out.push_back(error_case("scaled_dot_product_attention/error_embedding_mismatch", sdpa,
                             {random(F, {2, 3}, 935), random(F, {2, 4}, 936),
                              random(F, {2, 3}, 937)},
                             "scaled_dot_product_attention: query and key embeddings differ",
                             f32({2, 3}, {})));
    out.push_back(error_case("scaled_dot_product_attention/error_causal_with_mask", sdpa,
                             {random(F, {2, 3}, 938), random(F, {2, 3}, 939),
                              random(F, {2, 3}, 940), boolean({2, 2}, {1, 1, 1, 1})},
                             "scaled_dot_product_attention: is_causal cannot be combined with a mask",
                             f32({2, 3}, {}), {{"is_causal", true}}));
    out.push_back(error_case("scaled_dot_product_attention/error_mask_shape", sdpa,
                             {random(F, {2, 3}, 941), random(F, {2, 3}, 942),
                              random(F, {2, 3}, 943), boolean({3, 3}, V(9, 1.0))},
                             "scaled_dot_product_attention: mask [3, 3] does not broadcast to the "
                             "scores [2, 2]",
                             f32({2, 3}, {})));
}

}  // namespace

std::vector<KernelCase> linalg_cases() {
    std::vector<KernelCase> out;
    matmul_cases(out);
    bmm_cases(out);
    det_cases(out);
    linear_cases(out);
    layer_norm_cases(out);
    batch_norm_cases(out, BackendOp::batch_norm, "batch_norm");
    batch_norm_cases(out, BackendOp::batchnorm_channel_first, "batchnorm_channel_first");
    attention_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
