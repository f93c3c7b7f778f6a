// native_cuda.flash_attention's arithmetic (plugins/cuda/flash_attention_math.hpp) run on the
// CPU, tile by tile in the order the device kernels use, against attention computed with the
// whole [L, S] probability matrix in double (forward and the textbook backward), and its
// gradients against central finite differences of its own forward pass. The device kernels only
// add the staging of tiles in shared memory; CudaKernels.FlashAttention* checks them on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../plugins/cuda/flash_attention_math.hpp"

namespace {

using capsule::cuda::flash::Geometry;
using capsule::cuda::flash::kTile;
using capsule::cuda::flash::MaskKind;
namespace flash = capsule::cuda::flash;

constexpr int kWidth = 32;  // register row width of the host run (>= E, Ev of every case)
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
struct Problem {
    Geometry g;
    std::vector<T> q, k, v, dout;
    std::vector<T> mask;               // additive mask (MaskKind::additive)
    std::vector<unsigned char> keep;   // boolean mask (MaskKind::boolean)
    const void* mask_data() const {
        return g.mask == MaskKind::boolean ? static_cast<const void*>(keep.data())
               : g.mask == MaskKind::additive ? static_cast<const void*>(mask.data()) : nullptr;
    }
};

template <typename T>
struct Grads {
    std::vector<T> dq, dk, dv, dmask;
};

template <typename T>
std::vector<T> random_values(std::size_t n, double lo, double hi, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<T> out(n);
    for (auto& x : out) x = T(u(rng));
    return out;
}

/// q, k, v, dout for `g`; scores reach about ±20 so running maxima change often.
template <typename T>
Problem<T> problem(Geometry g, unsigned seed) {
    if (!(g.E > 0)) g.scale = 1;
    Problem<T> p;
    p.g = g;
    p.q = random_values<T>(std::size_t(g.batch * g.L * g.E), -2.5, 2.5, seed);
    p.k = random_values<T>(std::size_t(g.batch * g.S * g.E), -2.5, 2.5, seed + 1);
    p.v = random_values<T>(std::size_t(g.batch * g.S * g.Ev), -1, 1, seed + 2);
    p.dout = random_values<T>(std::size_t(g.batch * g.L * g.Ev), -1, 1, seed + 3);
    return p;
}

/// The forward pass as flash_attention.cu runs it: per query row, keys in tiles of kTile.
template <typename T>
std::vector<T> flash_forward(const Problem<T>& p) {
    const Geometry& g = p.g;
    std::vector<T> out(std::size_t(g.batch * g.L * g.Ev));
    for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t base = g.mask == MaskKind::none ? 0 : flash::mask_base(g, b);
        for (int64_t i = 0; i < g.L; ++i) {
            flash::ForwardRow<T, kWidth> row;
            flash::forward_begin(row, g.Ev);
            for (int64_t j0 = 0; j0 < g.S; j0 += kTile) {
                const int64_t count = std::min<int64_t>(kTile, g.S - j0);
                flash::forward_tile(g, row, &p.q[std::size_t((b * g.L + i) * g.E)],
                                    &p.k[std::size_t((b * g.S + j0) * g.E)],
                                    &p.v[std::size_t((b * g.S + j0) * g.Ev)], i, j0, count, base,
                                    p.mask_data());
            }
            flash::forward_end(row, g.Ev, &out[std::size_t((b * g.L + i) * g.Ev)]);
        }
    }
    return out;
}

/// The backward pass as flash_attention.cu runs it: query side (lse, D, dQ), then key side.
template <typename T>
Grads<T> flash_backward(const Problem<T>& p) {
    const Geometry& g = p.g;
    Grads<T> r;
    r.dq.assign(p.q.size(), T(0));
    r.dk.assign(p.k.size(), T(0));
    r.dv.assign(p.v.size(), T(0));
    r.dmask.assign(p.mask.size(), T(0));
    std::vector<T> lse(std::size_t(g.batch * g.L)), delta(lse.size());
    for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t base = g.mask == MaskKind::none ? 0 : flash::mask_base(g, b);
        for (int64_t i = 0; i < g.L; ++i) {
            const std::size_t row = std::size_t(b * g.L + i);
            const T* q = &p.q[row * std::size_t(g.E)];
            const T* o = &p.dout[row * std::size_t(g.Ev)];
            flash::QueryStats<T> st;
            flash::stats_begin(st);
            for (int64_t j0 = 0; j0 < g.S; j0 += kTile)
                flash::stats_tile(g, st, q, o, &p.k[std::size_t((b * g.S + j0) * g.E)],
                                  &p.v[std::size_t((b * g.S + j0) * g.Ev)], i, j0,
                                  std::min<int64_t>(kTile, g.S - j0), base, p.mask_data());
            flash::stats_end(st, &lse[row], &delta[row]);
            T dq[kWidth] = {};
            for (int64_t j0 = 0; j0 < g.S; j0 += kTile)
                flash::dq_tile(g, dq, q, o, lse[row], delta[row],
                               &p.k[std::size_t((b * g.S + j0) * g.E)],
                               &p.v[std::size_t((b * g.S + j0) * g.Ev)], i, j0,
                               std::min<int64_t>(kTile, g.S - j0), base, p.mask_data());
            for (int64_t d = 0; d < g.E; ++d) r.dq[row * std::size_t(g.E) + std::size_t(d)] = T(double(dq[d]) * g.scale);
        }
        auto add_mask_grad = [&](int64_t index, T value) { r.dmask[std::size_t(index)] += value; };
        for (int64_t j = 0; j < g.S; ++j) {
            const std::size_t row = std::size_t(b * g.S + j);
            T dk[kWidth] = {}, dv[kWidth] = {};
            for (int64_t i0 = 0; i0 < g.L; i0 += kTile)
                flash::dkv_tile(g, dk, dv, &p.k[row * std::size_t(g.E)], &p.v[row * std::size_t(g.Ev)],
                                &p.q[std::size_t((b * g.L + i0) * g.E)],
                                &p.dout[std::size_t((b * g.L + i0) * g.Ev)], &lse[std::size_t(b * g.L + i0)],
                                &delta[std::size_t(b * g.L + i0)], j, i0,
                                std::min<int64_t>(kTile, g.L - i0), base, p.mask_data(), add_mask_grad);
            for (int64_t d = 0; d < g.E; ++d) r.dk[row * std::size_t(g.E) + std::size_t(d)] = T(double(dk[d]) * g.scale);
            for (int64_t d = 0; d < g.Ev; ++d) r.dv[row * std::size_t(g.Ev) + std::size_t(d)] = dv[d];
        }
    }
    return r;
}

/// Attention with the whole probability matrix, in double: P = softmax(scale q kᵀ + mask) row by
/// row (zero rows when fully masked), out = P v; the backward of Σ out ⊙ dout.
struct Dense {
    std::vector<double> out, dq, dk, dv, dmask;
};

template <typename T>
Dense dense(const Problem<T>& p) {
    const Geometry& g = p.g;
    Dense r;
    r.out.assign(std::size_t(g.batch * g.L * g.Ev), 0);
    r.dq.assign(p.q.size(), 0);
    r.dk.assign(p.k.size(), 0);
    r.dv.assign(p.v.size(), 0);
    r.dmask.assign(p.mask.size(), 0);
    const auto L = std::size_t(g.L), S = std::size_t(g.S), E = std::size_t(g.E), Ev = std::size_t(g.Ev);
    for (int64_t b = 0; b < g.batch; ++b) {
        const std::size_t bq = std::size_t(b) * L, bk = std::size_t(b) * S;
        const int64_t base = g.mask == MaskKind::none ? 0 : flash::mask_base(g, b);
        std::vector<double> P(L * S), dP(L * S);
        for (std::size_t i = 0; i < L; ++i) {
            double m = -kInf;
            for (std::size_t j = 0; j < S; ++j) {
                double s = 0;
                for (std::size_t d = 0; d < E; ++d) s += double(p.q[(bq + i) * E + d]) * double(p.k[(bk + j) * E + d]);
                s *= g.scale;
                const int64_t at = flash::mask_index(g, base, int64_t(i), int64_t(j));
                if (g.causal && j > i) s = -kInf;
                if (g.mask == MaskKind::boolean && !p.keep[std::size_t(at)]) s = -kInf;
                if (g.mask == MaskKind::additive) s += double(p.mask[std::size_t(at)]);
                P[i * S + j] = s;
                m = std::max(m, s);
            }
            double sum = 0;
            for (std::size_t j = 0; j < S; ++j) sum += P[i * S + j] = m == -kInf ? 0 : std::exp(P[i * S + j] - m);
            for (std::size_t j = 0; j < S; ++j) P[i * S + j] = m == -kInf ? 0 : P[i * S + j] / sum;
            for (std::size_t j = 0; j < S; ++j)
                for (std::size_t d = 0; d < Ev; ++d) r.out[(bq + i) * Ev + d] += P[i * S + j] * double(p.v[(bk + j) * Ev + d]);
        }
        for (std::size_t i = 0; i < L; ++i) {
            double D = 0;
            for (std::size_t j = 0; j < S; ++j) {
                double dp = 0;
                for (std::size_t d = 0; d < Ev; ++d) dp += double(p.dout[(bq + i) * Ev + d]) * double(p.v[(bk + j) * Ev + d]);
                dP[i * S + j] = dp;
                D += P[i * S + j] * dp;
            }
            for (std::size_t j = 0; j < S; ++j) {
                const double ds = P[i * S + j] * (dP[i * S + j] - D);
                for (std::size_t d = 0; d < Ev; ++d) r.dv[(bk + j) * Ev + d] += P[i * S + j] * double(p.dout[(bq + i) * Ev + d]);
                for (std::size_t d = 0; d < E; ++d) {
                    r.dq[(bq + i) * E + d] += g.scale * ds * double(p.k[(bk + j) * E + d]);
                    r.dk[(bk + j) * E + d] += g.scale * ds * double(p.q[(bq + i) * E + d]);
                }
                if (g.mask == MaskKind::additive)
                    r.dmask[std::size_t(flash::mask_index(g, base, int64_t(i), int64_t(j)))] += ds;
            }
        }
    }
    return r;
}

template <typename T>
void expect_near_all(const std::vector<T>& got, const std::vector<double>& want, double tolerance, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t n = 0; n < got.size(); ++n)
        ASSERT_NEAR(double(got[n]), want[n], tolerance * (1 + std::abs(want[n]))) << what << "[" << n << "]";
}

template <typename T>
void expect_matches_dense(const Problem<T>& p, double tolerance) {
    const Dense want = dense(p);
    expect_near_all(flash_forward(p), want.out, tolerance, "out");
    const Grads<T> got = flash_backward(p);
    expect_near_all(got.dq, want.dq, tolerance, "dq");
    expect_near_all(got.dk, want.dk, tolerance, "dk");
    expect_near_all(got.dv, want.dv, tolerance, "dv");
    expect_near_all(got.dmask, want.dmask, tolerance, "dmask");
}

Geometry shape(int64_t batch, int64_t L, int64_t S, int64_t E, int64_t Ev) {
    Geometry g;
    g.batch = batch;
    g.L = L;
    g.S = S;
    g.E = E;
    g.Ev = Ev;
    g.scale = 1 / std::sqrt(double(E));
    return g;
}

/// A [batch, 1 or L, S] mask over a single leading dimension (broadcast over rows unless
/// `per_row`, over the batch when `shared`).
void mask_layout(Geometry& g, MaskKind kind, bool per_row, bool shared) {
    g.mask = kind;
    g.batch_rank = 1;
    g.batch_sizes[0] = g.batch;
    g.mask_col_stride = 1;
    g.mask_row_stride = per_row ? g.S : 0;
    g.mask_batch_strides[0] = shared ? 0 : (per_row ? g.L : 1) * g.S;
}

std::size_t mask_size(const Geometry& g, bool per_row, bool shared) {
    return std::size_t((shared ? 1 : g.batch) * (per_row ? g.L : 1) * g.S);
}

TEST(FlashAttentionMath, TiledOnlineSoftmaxMatchesDenseAttention) {
    // S = 37: two whole tiles of 16 and a partial one; E != Ev.
    expect_matches_dense(problem<double>(shape(2, 5, 37, 8, 6), 11), 1e-12);
    expect_matches_dense(problem<float>(shape(3, 19, 33, 16, 16), 21), 1e-4);
    // One key, one query, and a head of 1.
    expect_matches_dense(problem<double>(shape(1, 1, 1, 1, 1), 31), 1e-12);
    expect_matches_dense(problem<double>(shape(2, 3, 4, 1, 3), 41), 1e-12);
}

TEST(FlashAttentionMath, CausalMaskIsTopLeftAligned) {
    Geometry square = shape(2, 20, 20, 8, 8);
    square.causal = true;
    expect_matches_dense(problem<double>(square, 51), 1e-12);
    Geometry wide = shape(1, 7, 40, 4, 5);  // L < S: query i sees keys 0..i
    wide.causal = true;
    expect_matches_dense(problem<double>(wide, 61), 1e-12);
    Geometry tall = shape(1, 40, 7, 4, 5);  // L > S: rows past S see every key
    tall.causal = true;
    expect_matches_dense(problem<float>(tall, 71), 1e-4);
}

TEST(FlashAttentionMath, BooleanMaskWithAFullyMaskedRowGivesZeros) {
    Geometry g = shape(2, 6, 21, 4, 3);
    mask_layout(g, MaskKind::boolean, /*per_row=*/true, /*shared=*/false);
    auto p = problem<double>(g, 81);
    p.keep.assign(mask_size(g, true, false), 1);
    std::mt19937 rng(5);
    for (auto& x : p.keep) x = rng() % 3 != 0;
    for (int64_t j = 0; j < g.S; ++j) p.keep[std::size_t(2 * g.S + j)] = 0;  // batch 0, row 2: nothing to attend
    expect_matches_dense(p, 1e-12);
    const auto out = flash_forward(p);
    for (int64_t d = 0; d < g.Ev; ++d) EXPECT_EQ(out[std::size_t(2 * g.Ev + d)], 0.0);
    const auto grads = flash_backward(p);
    for (int64_t d = 0; d < g.E; ++d) EXPECT_EQ(grads.dq[std::size_t(2 * g.E + d)], 0.0);
}

TEST(FlashAttentionMath, AdditiveMaskBroadcastsAndGetsTheSummedGradient) {
    // [1, S] shared by every batch entry and row: its gradient sums dS over both.
    Geometry g = shape(3, 9, 18, 6, 6);
    mask_layout(g, MaskKind::additive, /*per_row=*/false, /*shared=*/true);
    auto p = problem<double>(g, 91);
    p.mask = random_values<double>(mask_size(g, false, true), -3, 3, 92);
    p.mask[4] = -kInf;  // key 4 hidden everywhere
    expect_matches_dense(p, 1e-12);
    // A per-row, per-batch float mask.
    Geometry h = shape(2, 5, 17, 4, 4);
    mask_layout(h, MaskKind::additive, true, false);
    auto f = problem<float>(h, 93);
    f.mask = random_values<float>(mask_size(h, true, false), -2, 2, 94);
    expect_matches_dense(f, 1e-4);
}

TEST(FlashAttentionMath, EmptyKeysGiveZerosAndNaNStaysInItsRow) {
    const auto empty = problem<double>(shape(2, 3, 0, 4, 4), 101);
    for (double x : flash_forward(empty)) EXPECT_EQ(x, 0.0);
    for (double x : flash_backward(empty).dq) EXPECT_EQ(x, 0.0);
    auto p = problem<double>(shape(1, 4, 20, 4, 4), 102);
    p.q[std::size_t(1 * p.g.E)] = std::numeric_limits<double>::quiet_NaN();  // query row 1
    const auto out = flash_forward(p);
    for (int64_t i = 0; i < p.g.L; ++i)
        for (int64_t d = 0; d < p.g.Ev; ++d)
            EXPECT_EQ(std::isnan(out[std::size_t(i * p.g.Ev + d)]), i == 1) << i << "," << d;
}

TEST(FlashAttentionMath, GradientsMatchFiniteDifferencesOfTheForward) {
    Geometry g = shape(2, 4, 19, 3, 2);
    mask_layout(g, MaskKind::additive, true, false);
    auto p = problem<double>(g, 111);
    p.mask = random_values<double>(mask_size(g, true, false), -1, 1, 112);
    const Grads<double> grads = flash_backward(p);
    // d/dx Σ out ⊙ dout by central differences, for every element of q, k, v and the mask.
    auto objective = [&]() {
        const auto out = flash_forward(p);
        double sum = 0;
        for (std::size_t n = 0; n < out.size(); ++n) sum += out[n] * p.dout[n];
        return sum;
    };
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* what) {
        for (std::size_t n = 0; n < x.size(); ++n) {
            const double keep = x[n], h = 1e-6;
            x[n] = keep + h;
            const double up = objective();
            x[n] = keep - h;
            const double down = objective();
            x[n] = keep;
            ASSERT_NEAR(grad[n], (up - down) / (2 * h), 1e-6) << what << "[" << n << "]";
        }
    };
    check(p.q, grads.dq, "dq");
    check(p.k, grads.dk, "dk");
    check(p.v, grads.dv, "dv");
    check(p.mask, grads.dmask, "dmask");
}

}  // namespace
