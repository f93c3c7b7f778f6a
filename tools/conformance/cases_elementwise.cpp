// Conformance cases of the elementwise family: random ops, binary ops with broadcasting, unary
// ops, softmax/log_softmax, reductions (sum, mean, max, min, prod, argmax, argmin), mse_loss,
// and div/pow/mod/neg/erf.
//
// Expected values are computed here from the case's input values with std:: math in double
// (after rounding float32 inputs to float, as the kernel sees them), or are literal numbers worked
// out by hand; never by a kernel. Semantics are PyTorch's (docs/ops.md).
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <set>
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
using builders::make;
using builders::V;
using builders::with_grad;

/// The value as the kernel sees it: float32 inputs are rounded to float.
double seen(const CaseTensor& t, std::size_t i) {
    return t.dtype == DType::float32 ? double(float(t.values[i])) : t.values[i];
}

KernelCase unary(std::string name, BackendOp op, CaseTensor x, const std::function<double(double)>& f,
                 Attributes attrs = {}) {
    V out(x.values.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = f(seen(x, i));
    CaseTensor expected{x.dtype, x.shape, out};
    return make(std::move(name), op, {std::move(x)}, std::move(expected), std::move(attrs));
}

/// NumPy broadcast of two shapes (test-side).
Shape broadcast(const Shape& a, const Shape& b) {
    const std::size_t r = std::max(a.size(), b.size());
    Shape out(r);
    for (std::size_t i = 0; i < r; ++i) {
        const std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
        const std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
        out[r - 1 - i] = da == 1 ? db : da;
    }
    return out;
}

/// Flat index into `in` of the element that the output multi-index `m` (of rank out.size())
/// reads under broadcasting.
std::size_t source_index(const Shape& in, const Shape& out, const std::vector<std::int64_t>& m) {
    std::size_t idx = 0;
    const std::size_t shift = out.size() - in.size();
    for (std::size_t i = 0; i < in.size(); ++i)
        idx = idx * std::size_t(in[i]) + std::size_t(in[i] == 1 ? 0 : m[i + shift]);
    return idx;
}

std::vector<std::int64_t> multi_index(std::int64_t flat, const Shape& s) {
    std::vector<std::int64_t> m(s.size());
    for (std::size_t i = s.size(); i-- > 0;) {
        m[i] = flat % s[i];
        flat /= s[i];
    }
    return m;
}

KernelCase binary(std::string name, BackendOp op, CaseTensor a, CaseTensor b,
                  const std::function<double(double, double)>& f) {
    const Shape out = broadcast(a.shape, b.shape);
    V values(std::size_t(count(out)));
    for (std::size_t o = 0; o < values.size(); ++o) {
        const auto m = multi_index(std::int64_t(o), out);
        values[o] = f(seen(a, source_index(a.shape, out, m)), seen(b, source_index(b.shape, out, m)));
    }
    CaseTensor expected{a.dtype, out, values};
    return make(std::move(name), op, {std::move(a), std::move(b)}, std::move(expected));
}

double torch_max(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return kNaN;
    return a > b ? a : b;
}
double torch_min(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return kNaN;
    return a < b ? a : b;
}

/// Softmax or log-softmax along `axis` of a tensor (test-side, max-shifted, in double).
V softmax_ref(const CaseTensor& x, std::int64_t axis, bool log) {
    const Shape& s = x.shape;
    std::int64_t outer = 1, len = 1, inner = 1;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (std::int64_t(i) < axis) outer *= s[i];
        else if (std::int64_t(i) == axis) len = s[i];
        else inner *= s[i];
    }
    V out(x.values.size());
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < inner; ++j) {
            auto at = [&](std::int64_t k) { return std::size_t((o * len + k) * inner + j); };
            double m = -kInf;
            for (std::int64_t k = 0; k < len; ++k) m = std::max(m, seen(x, at(k)));
            double sum = 0;
            for (std::int64_t k = 0; k < len; ++k) sum += std::exp(seen(x, at(k)) - m);
            for (std::int64_t k = 0; k < len; ++k)
                out[at(k)] = log ? seen(x, at(k)) - m - std::log(sum) : std::exp(seen(x, at(k)) - m) / sum;
        }
    return out;
}

/// Sum (or mean) over `axes` of x (test-side), output in the order of the kept axes.
V reduce_ref(const CaseTensor& x, const std::set<std::int64_t>& axes, bool mean) {
    const Shape& s = x.shape;
    Shape kept;
    std::int64_t reduced = 1;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (axes.count(std::int64_t(i))) reduced *= s[i];
        else kept.push_back(s[i]);
    }
    V out(std::size_t(count(kept)), 0.0);
    for (std::size_t f = 0; f < x.values.size(); ++f) {
        const auto m = multi_index(std::int64_t(f), s);
        std::size_t o = 0;
        for (std::size_t i = 0; i < s.size(); ++i)
            if (!axes.count(std::int64_t(i))) o = o * std::size_t(s[i]) + std::size_t(m[i]);
        out[o] += seen(x, f);
    }
    if (mean)
        for (auto& v : out) v = reduced == 0 ? kNaN : v / double(reduced);
    return out;
}

V ramp(std::size_t n, double start, double step) {
    V v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = start + step * double(i);
    return v;
}

/// Deterministic "irregular" values in [lo, hi) for gradient inputs (test-side LCG).
V irregular(std::size_t n, double lo, double hi, std::uint64_t seed) {
    V v(n);
    for (std::size_t i = 0; i < n; ++i) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = lo + (hi - lo) * double(seed >> 11) / double(1ull << 53);
    }
    return v;
}

// ---- random-op checks ----

/// Outputs recorded by earlier random cases, by group, so that a "same seed" case can compare
/// with the case that ran just before it in the same process. A "record" case overwrites the
/// group; the matching "compare" case (listed after it) compares and clears it, so that when the
/// list is run against several plugins in turn each comparison stays within one plugin. A compare
/// case run on its own (e.g. filtered) has nothing to compare with and only runs its other checks.
struct Memo {
    std::mutex mutex;
    std::map<std::string, V> seen;
};

using Check = std::function<std::string(const V&)>;

Check uniform_check(std::size_t n, double tolerance_of_mean) {
    return [n, tolerance_of_mean](const V& out) -> std::string {
        if (out.size() != n) return "expected " + std::to_string(n) + " values";
        double sum = 0;
        std::set<double> distinct;
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (!(out[i] >= 0.0 && out[i] < 1.0))
                return "value " + std::to_string(out[i]) + " at " + std::to_string(i) + " outside [0, 1)";
            sum += out[i];
            distinct.insert(out[i]);
        }
        if (n >= 100) {
            const double mean = sum / double(n);
            if (std::fabs(mean - 0.5) > tolerance_of_mean)
                return "mean " + std::to_string(mean) + " is not about 0.5";
            if (distinct.size() < n * 99 / 100)
                return "only " + std::to_string(distinct.size()) + " distinct values of " + std::to_string(n);
        }
        return "";
    };
}

Check record(std::shared_ptr<Memo> memo, std::string group, Check also) {
    return [memo, group, also](const V& out) -> std::string {
        if (auto err = also(out); !err.empty()) return err;
        std::lock_guard lock(memo->mutex);
        memo->seen[group] = out;
        return "";
    };
}

/// Requires the same values as the recorded group (same seed), then clears the record.
Check same_as_recorded(std::shared_ptr<Memo> memo, std::string group, Check also) {
    return [memo, group, also](const V& out) -> std::string {
        if (auto err = also(out); !err.empty()) return err;
        std::lock_guard lock(memo->mutex);
        auto it = memo->seen.find(group);
        if (it == memo->seen.end()) return "";
        const bool same = it->second == out;
        memo->seen.erase(it);
        if (!same) return "the same seed gave different values in two calls ('" + group + "')";
        return "";
    };
}

/// Requires most values to differ from the recorded group (a different seed); keeps the record.
Check differs_from_recorded(std::shared_ptr<Memo> memo, std::string group, Check also) {
    return [memo, group, also](const V& out) -> std::string {
        if (auto err = also(out); !err.empty()) return err;
        std::lock_guard lock(memo->mutex);
        auto it = memo->seen.find(group);
        if (it == memo->seen.end() || it->second.size() != out.size()) return "";
        std::size_t equal = 0;
        for (std::size_t i = 0; i < out.size(); ++i) equal += it->second[i] == out[i];
        if (equal * 10 > out.size()) return "a different seed gave mostly the same values";
        return "";
    };
}

std::function<std::string(const V&)> mask_check(std::size_t n, double p, double tolerance) {
    return [n, p, tolerance](const V& out) -> std::string {
        if (out.size() != n) return "expected " + std::to_string(n) + " values";
        double sum = 0;
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (out[i] != 0.0 && out[i] != 1.0)
                return "value " + std::to_string(out[i]) + " at " + std::to_string(i) + " is not 0 or 1";
            sum += out[i];
        }
        const double mean = sum / double(n);
        if (std::fabs(mean - p) > tolerance)
            return "fraction of ones " + std::to_string(mean) + " is not about " + std::to_string(p);
        return "";
    };
}

void random_cases(std::vector<KernelCase>& out) {
    auto memo = std::make_shared<Memo>();
    auto rand = [](std::string name, Shape shape, std::int64_t seed, std::string dtype,
                   std::function<std::string(const V&)> check) {
        KernelCase c;
        c.name = std::move(name);
        c.op = BackendOp::rand_uniform;
        c.attrs = {{"shape", Ints(shape.begin(), shape.end())}, {"seed", seed}, {"dtype", dtype}};
        c.expected = {dtype == "float64" ? DType::float64 : DType::float32, shape, {}};
        c.check = std::move(check);
        return c;
    };
    out.push_back(rand("rand_uniform/range_and_mean_f32", {1000}, 7, "float32", uniform_check(1000, 0.05)));
    out.push_back(rand("rand_uniform/range_and_mean_f64", {10, 100}, 123, "float64", uniform_check(1000, 0.05)));
    // Listed in this order: record seed 42, a different seed differs, seed 42 again is equal.
    out.push_back(rand("rand_uniform/same_seed_first", {4, 250}, 42, "float32",
                       record(memo, "rand42", uniform_check(1000, 0.05))));
    out.push_back(rand("rand_uniform/other_seed_differs", {4, 250}, 43, "float32",
                       differs_from_recorded(memo, "rand42", uniform_check(1000, 0.05))));
    out.push_back(rand("rand_uniform/same_seed_second", {4, 250}, 42, "float32",
                       same_as_recorded(memo, "rand42", uniform_check(1000, 0.05))));
    out.push_back(rand("rand_uniform/negative_seed_f64", {3, 1, 5}, -5, "float64", uniform_check(15, 0)));
    out.push_back(rand("rand_uniform/scalar", {}, 0, "float32", uniform_check(1, 0)));
    {
        // Default seed and dtype; no check: a zero-element output has nothing to compare.
        KernelCase c;
        c.name = "rand_uniform/empty";
        c.op = BackendOp::rand_uniform;
        c.attrs = {{"shape", Ints{0, 3}}};
        c.expected = f32({0, 3}, {});
        out.push_back(c);
    }

    auto mask = [](std::string name, CaseTensor p, std::int64_t seed) {
        KernelCase c;
        c.name = std::move(name);
        c.op = BackendOp::bernoulli_mask;
        c.attrs = {{"seed", seed}};
        c.expected = {p.dtype, p.shape, {}};
        c.inputs = {std::move(p)};
        return c;
    };
    {
        auto c = mask("bernoulli_mask/p0_p1_exact", f32({2, 3}, {0, 1, 1, 0, 0, 1}), 3);
        c.expected.values = {0, 1, 1, 0, 0, 1};
        out.push_back(c);
    }
    {
        auto c = mask("bernoulli_mask/p0_all_zero", f32({500}, V(500, 0.0)), 11);
        c.expected.values = V(500, 0.0);
        out.push_back(c);
    }
    {
        auto c = mask("bernoulli_mask/p1_all_one_f64", f64({20, 25}, V(500, 1.0)), 11);
        c.expected.values = V(500, 1.0);
        out.push_back(c);
    }
    {
        auto c = mask("bernoulli_mask/p03_fraction", f32({2000}, V(2000, 0.3)), 5);
        c.check = mask_check(2000, 0.3, 0.05);
        out.push_back(c);
    }
    {
        auto c = mask("bernoulli_mask/p05_fraction_f64", f64({40, 50}, V(2000, 0.5)), 0);
        c.check = mask_check(2000, 0.5, 0.05);
        out.push_back(c);
    }
    {
        auto c = mask("bernoulli_mask/same_seed_first", f32({400}, V(400, 0.5)), 9);
        c.check = record(memo, "mask9", mask_check(400, 0.5, 0.1));
        out.push_back(c);
        auto d = mask("bernoulli_mask/other_seed_differs", f32({400}, V(400, 0.5)), 10);
        // Two independent fair masks agree on about half the positions, so compare loosely.
        d.check = [memo, also = mask_check(400, 0.5, 0.1)](const V& o) -> std::string {
            if (auto err = also(o); !err.empty()) return err;
            std::lock_guard lock(memo->mutex);
            auto it = memo->seen.find("mask9");
            if (it == memo->seen.end()) return "";
            std::size_t equal = 0;
            for (std::size_t i = 0; i < o.size(); ++i) equal += it->second[i] == o[i];
            if (equal > 300) return "a different seed gave mostly the same mask";
            return "";
        };
        out.push_back(d);
        c.name = "bernoulli_mask/same_seed_second";
        c.check = same_as_recorded(memo, "mask9", mask_check(400, 0.5, 0.1));
        out.push_back(c);
    }
    {
        auto c = mask("bernoulli_mask/empty", f32({0}, {}), 1);
        out.push_back(c);
    }
}

// ---- binary ----

void binary_cases(std::vector<KernelCase>& out) {
    auto plus = [](double a, double b) { return a + b; };
    auto minus = [](double a, double b) { return a - b; };
    auto times = [](double a, double b) { return a * b; };

    // add
    out.push_back(with_grad(binary("add/same_shape", BackendOp::add, f32({2, 3}, {1, 2, 3, 4, 5, 6}),
                                   f32({2, 3}, {0.5, -1, 2.25, -4, 10, 0.125}), plus)));
    out.push_back(with_grad(binary("add/broadcast_row", BackendOp::add, f32({2, 3}, {1, 2, 3, 4, 5, 6}),
                                   f32({3}, {10, 20, 30}), plus)));
    out.push_back(with_grad(binary("add/broadcast_column", BackendOp::add, f32({2, 3}, {1, 2, 3, 4, 5, 6}),
                                   f32({2, 1}, {-1, 1}), plus)));
    out.push_back(with_grad(binary("add/broadcast_scalar", BackendOp::add, f32({}, {2.5}),
                                   f32({2, 2}, {1, 2, 3, 4}), plus)));
    out.push_back(with_grad(binary("add/broadcast_both_sides", BackendOp::add, f32({3, 1}, {1, 2, 3}),
                                   f32({1, 4}, {10, 20, 30, 40}), plus)));
    out.push_back(with_grad(binary("add/broadcast_rank_extension_f64", BackendOp::add,
                                   f64({2, 1, 3}, ramp(6, -1.5, 0.7)), f64({4, 1}, {0.1, 0.2, 0.3, 0.4}), plus)));
    out.push_back(binary("add/size1_dims", BackendOp::add, f32({1, 1}, {3}), f32({1}, {4}), plus));
    out.push_back(binary("add/empty", BackendOp::add, f32({0, 3}, {}), f32({3}, {1, 2, 3}), plus));
    out.push_back(binary("add/nan_inf", BackendOp::add, f32({5}, {kNaN, kInf, -kInf, 1, 1e30}),
                         f32({5}, {1, 1, kInf, kNaN, 1e30}), plus));
    out.push_back(binary("add/large_f64", BackendOp::add, f64({3}, {1e300, -1e300, 1e-300}),
                         f64({3}, {1e300, 1, 1e-300}), plus));

    // sub
    out.push_back(with_grad(binary("sub/same_shape", BackendOp::sub, f32({4}, {1, 2, 3, 4}),
                                   f32({4}, {0.5, 4, -3, 4}), minus)));
    out.push_back(with_grad(binary("sub/broadcast_row", BackendOp::sub, f32({2, 3}, {1, 2, 3, 4, 5, 6}),
                                   f32({3}, {1, 1, 2}), minus)));
    out.push_back(with_grad(binary("sub/broadcast_column_left_f64", BackendOp::sub, f64({3, 1}, {1, 2, 3}),
                                   f64({3, 2}, {6, 5, 4, 3, 2, 1}), minus)));
    out.push_back(binary("sub/inf_minus_inf", BackendOp::sub, f32({3}, {kInf, kInf, kNaN}),
                         f32({3}, {kInf, 1, 0}), minus));
    out.push_back(binary("sub/empty", BackendOp::sub, f64({2, 0}, {}), f64({2, 1}, {1, 2}), minus));

    // mul
    out.push_back(with_grad(binary("mul/same_shape", BackendOp::mul, f32({2, 2}, {1, -2, 3, 0.5}),
                                   f32({2, 2}, {4, 5, -6, 8}), times)));
    out.push_back(with_grad(binary("mul/broadcast_column", BackendOp::mul, f32({2, 3}, {1, 2, 3, 4, 5, 6}),
                                   f32({2, 1}, {2, -3}), times)));
    out.push_back(with_grad(binary("mul/broadcast_scalar_f64", BackendOp::mul, f64({3}, {1.5, -2, 4}),
                                   f64({}, {-0.5}), times)));
    out.push_back(with_grad(binary("mul/broadcast_both_sides", BackendOp::mul, f32({2, 1, 2}, {1, 2, 3, 4}),
                                   f32({3, 1}, {0.5, -1, 2}), times)));
    out.push_back(binary("mul/nan_inf", BackendOp::mul, f32({4}, {kNaN, kInf, kInf, -2}),
                         f32({4}, {2, 0, -3, kInf}), times));

    // max / min: NaN propagates; gradient split 0.5/0.5 at ties (matches central differences).
    out.push_back(with_grad(binary("max/same_shape", BackendOp::max, f32({5}, {1, 5, -3, 2, 0.5}),
                                   f32({5}, {2, 4, -4, 3, -0.5}), torch_max)));
    out.push_back(with_grad(binary("max/ties", BackendOp::max, f64({4}, {1, 2, 3, -1}),
                                   f64({4}, {1, 0, 3, -2}), torch_max)));
    out.push_back(with_grad(binary("max/broadcast_row", BackendOp::max, f32({2, 3}, {1, 5, 3, 4, 2, 6}),
                                   f32({3}, {2.5, 2.5, 4.5}), torch_max)));
    out.push_back(binary("max/nan", BackendOp::max, f32({4}, {kNaN, 1, 2, kNaN}),
                         f32({4}, {1, kNaN, 3, kNaN}), torch_max));
    out.push_back(binary("max/inf", BackendOp::max, f32({2}, {-kInf, kInf}), f32({2}, {-1e30, 0}), torch_max));
    out.push_back(with_grad(binary("min/same_shape", BackendOp::min, f32({5}, {1, 5, -3, 2, 0.5}),
                                   f32({5}, {2, 4, -4, 3, -0.5}), torch_min)));
    out.push_back(with_grad(binary("min/ties_f64", BackendOp::min, f64({3}, {1, 2, 7}),
                                   f64({3}, {1, 3, 7}), torch_min)));
    out.push_back(with_grad(binary("min/broadcast_column", BackendOp::min, f32({2, 3}, {1, 5, 3, 4, 2, 6}),
                                   f32({2, 1}, {2.5, 4.5}), torch_min)));
    out.push_back(binary("min/nan", BackendOp::min, f32({3}, {kNaN, 1, 2}), f32({3}, {1, kNaN, 3}), torch_min));
}

// ---- unary ----

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double softplus_ref(double x, double beta, double threshold) {
    return x * beta > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

void unary_cases(std::vector<KernelCase>& out) {
    // scale
    out.push_back(with_grad(unary("scale/positive", BackendOp::scale, f32({2, 2}, {1, -2, 0.5, 3}),
                                  [](double x) { return x * 2.5; }, {{"factor", 2.5}})));
    out.push_back(with_grad(unary("scale/negative_f64", BackendOp::scale, f64({3}, {1, -2, 0.3}),
                                  [](double x) { return x * -0.5; }, {{"factor", -0.5}})));
    out.push_back(unary("scale/large_f64", BackendOp::scale, f64({3}, {1e300, -1e300, 1e-300}),
                        [](double x) { return x * 1e10; }, {{"factor", 1e10}}));
    out.push_back(unary("scale/integer_factor", BackendOp::scale, f32({2}, {1.5, kNaN}),
                        [](double x) { return x * 3; }, {{"factor", std::int64_t(3)}}));
    out.push_back(unary("scale/empty", BackendOp::scale, f32({0}, {}), [](double x) { return x; },
                        {{"factor", 2.0}}));

    // abs (gradient at 0 is 0, which is also the central difference)
    out.push_back(with_grad(unary("abs/mixed", BackendOp::abs, f32({5}, {-2, -0.5, 0, 0.5, 3}),
                                  [](double x) { return std::fabs(x); })));
    out.push_back(unary("abs/nan_inf_f64", BackendOp::abs, f64({3}, {kNaN, -kInf, -1e300}),
                        [](double x) { return std::fabs(x); }));

    // sqrt
    out.push_back(unary("sqrt/values", BackendOp::sqrt, f32({6}, {0, 0.25, 4, 2, -1, kInf}),
                        [](double x) { return std::sqrt(x); }));
    out.push_back(with_grad(unary("sqrt/positive_f64", BackendOp::sqrt, f64({2, 2}, {0.5, 1, 9, 100}),
                                  [](double x) { return std::sqrt(x); })));

    // clamp
    out.push_back(with_grad(unary("clamp/min_max", BackendOp::clamp, f32({6}, {-3, -1.5, -0.5, 0.25, 0.9, 2}),
                                  [](double x) { return std::min(std::max(x, -1.0), 1.0); },
                                  {{"min", -1.0}, {"max", 1.0}})));
    out.push_back(with_grad(unary("clamp/min_only", BackendOp::clamp, f32({4}, {-3, -1.5, 0.5, 7}),
                                  [](double x) { return std::max(x, 0.0); }, {{"min", 0.0}})));
    out.push_back(with_grad(unary("clamp/max_only_f64", BackendOp::clamp, f64({4}, {-3, -1.5, 0.5, 7}),
                                  [](double x) { return std::min(x, 1.0); }, {{"max", std::int64_t(1)}})));
    out.push_back(unary("clamp/min_above_max", BackendOp::clamp, f32({3}, {-5, 0.5, 5}),
                        [](double) { return 1.0; }, {{"min", 2.0}, {"max", 1.0}}));
    out.push_back(unary("clamp/nan_inf", BackendOp::clamp, f32({3}, {kNaN, kInf, -kInf}),
                        [](double x) { return std::isnan(x) ? x : std::min(std::max(x, -1.0), 1.0); },
                        {{"min", -1.0}, {"max", 1.0}}));

    // relu
    out.push_back(unary("relu/edge_values", BackendOp::relu, f32({7}, {-1, 0, 2, kNaN, -kInf, kInf, -0.0}),
                        [](double x) { return std::isnan(x) ? x : std::max(x, 0.0); }));
    out.push_back(with_grad(unary("relu/away_from_zero", BackendOp::relu, f32({2, 3}, {-2, -0.5, 0.5, 1, 3, -7}),
                                  [](double x) { return std::max(x, 0.0); })));
    out.push_back(with_grad(unary("relu/f64", BackendOp::relu, f64({3}, {-1e-3, 1e-3, 50}),
                                  [](double x) { return std::max(x, 0.0); })));
    out.push_back(unary("relu/large_f64", BackendOp::relu, f64({2}, {1e300, -1e300}),
                        [](double x) { return std::max(x, 0.0); }));

    // gelu
    out.push_back(with_grad(unary("gelu/exact", BackendOp::gelu, f32({7}, {-3, -1, -0.5, 0, 0.5, 1, 3}),
                                  gelu_exact)));
    out.push_back(with_grad(unary("gelu/exact_f64_explicit", BackendOp::gelu, f64({4}, {-5, -0.1, 0.7, 8}),
                                  gelu_exact, {{"approximate", std::string("none")}})));
    out.push_back(with_grad(unary("gelu/tanh", BackendOp::gelu, f32({7}, {-3, -1, -0.5, 0, 0.5, 1, 3}),
                                  gelu_tanh, {{"approximate", std::string("tanh")}})));
    out.push_back(unary("gelu/large_and_nan", BackendOp::gelu, f32({4}, {-100, 100, kNaN, kInf}),
                        [](double x) { return std::isnan(x) ? x : (x == kInf ? kInf : gelu_exact(x)); }));

    // sigmoid
    out.push_back(unary("sigmoid/extremes", BackendOp::sigmoid, f32({5}, {-100, 100, 0, -kInf, kInf}),
                        [](double x) { return sigmoid_ref(x); }));
    out.push_back(with_grad(unary("sigmoid/values", BackendOp::sigmoid, f32({5}, {-4, -1, 0, 1, 4}), sigmoid_ref)));
    out.push_back(with_grad(unary("sigmoid/f64", BackendOp::sigmoid, f64({3}, {-30, 0.3, 30}), sigmoid_ref)));
    out.push_back(unary("sigmoid/nan", BackendOp::sigmoid, f64({1}, {kNaN}), [](double x) { return x; }));

    // tanh
    out.push_back(with_grad(unary("tanh/values", BackendOp::tanh, f32({5}, {-3, -0.5, 0, 0.5, 3}),
                                  [](double x) { return std::tanh(x); })));
    out.push_back(unary("tanh/extremes_f64", BackendOp::tanh, f64({4}, {-100, 100, kInf, kNaN}),
                        [](double x) { return std::tanh(x); }));

    // softplus (beta = 1, threshold = 20 by default; linear above the threshold)
    out.push_back(unary("softplus/extremes", BackendOp::softplus, f32({7}, {50, -50, 0, 1, 20, 21, -1}),
                        [](double x) { return softplus_ref(x, 1, 20); }));
    out.push_back(with_grad(unary("softplus/values", BackendOp::softplus, f32({5}, {-5, -1, 0, 1, 25}),
                                  [](double x) { return softplus_ref(x, 1, 20); })));
    out.push_back(with_grad(unary("softplus/beta_threshold_f64", BackendOp::softplus,
                                  f64({5}, {-3, -0.2, 0.4, 4, 6}),
                                  [](double x) { return softplus_ref(x, 2, 10); },
                                  {{"beta", 2.0}, {"threshold", 10.0}})));
    out.push_back(unary("softplus/large_negative_f64", BackendOp::softplus, f64({2}, {-50, -700}),
                        [](double x) { return std::log1p(std::exp(x)); }));

    // exp
    out.push_back(unary("exp/edge_values", BackendOp::exp, f32({7}, {0, 1, -1, 10, kNaN, -kInf, kInf}),
                        [](double x) { return std::exp(x); }));
    out.push_back(unary("exp/overflow", BackendOp::exp, f32({2}, {100, -200}), [](double x) {
        return x > 0 ? kInf : 0.0;  // float32 overflows to inf and underflows to 0
    }));
    out.push_back(with_grad(unary("exp/values", BackendOp::exp, f32({2, 2}, {-2, -0.5, 0.5, 3}),
                                  [](double x) { return std::exp(x); })));
    out.push_back(with_grad(unary("exp/f64", BackendOp::exp, f64({3}, {-10, 0.1, 10}),
                                  [](double x) { return std::exp(x); })));

    // log
    out.push_back(unary("log/edge_values", BackendOp::log, f32({6}, {1, std::numbers::e, 0, -1, kInf, kNaN}),
                        [](double x) { return std::log(x); }));
    out.push_back(with_grad(unary("log/values", BackendOp::log, f32({4}, {0.5, 1, 2, 10}),
                                  [](double x) { return std::log(x); })));
    out.push_back(with_grad(unary("log/f64", BackendOp::log, f64({3}, {1e-3, 3, 1e10}),
                                  [](double x) { return std::log(x); })));

    // sin / cos
    out.push_back(with_grad(unary("sin/values", BackendOp::sin, f32({5}, {-2, -0.5, 0, 1, 3}),
                                  [](double x) { return std::sin(x); })));
    out.push_back(unary("sin/special_f64", BackendOp::sin, f64({4}, {std::numbers::pi / 2, std::numbers::pi, kInf, kNaN}),
                        [](double x) { return std::sin(x); }));
    out.push_back(with_grad(unary("cos/values", BackendOp::cos, f32({5}, {-2, -0.5, 0, 1, 3}),
                                  [](double x) { return std::cos(x); })));
    out.push_back(unary("cos/special_f64", BackendOp::cos, f64({3}, {std::numbers::pi, kInf, kNaN}),
                        [](double x) { return std::cos(x); }));

    // inv (torch.reciprocal)
    out.push_back(unary("inv/edge_values", BackendOp::inv, f32({6}, {2, -4, 0.5, 0, -0.0, kInf}),
                        [](double x) { return 1 / x; }));
    out.push_back(with_grad(unary("inv/values", BackendOp::inv, f32({4}, {-3, -0.5, 0.25, 2}),
                                  [](double x) { return 1 / x; })));
    out.push_back(with_grad(unary("inv/f64", BackendOp::inv, f64({2}, {1e-3, 7}), [](double x) { return 1 / x; })));

    // safe_log = log(clamp_min(x, eps)), eps = 1e-12 by default
    out.push_back(unary("safe_log/default_eps", BackendOp::safe_log, f32({5}, {0, 1, 1e-20, 2, -3}),
                        [](double x) { return std::log(std::max(x, double(float(1e-12)))); }));
    out.push_back(unary("safe_log/nan", BackendOp::safe_log, f64({1}, {kNaN}), [](double x) { return x; }));
    out.push_back(with_grad(unary("safe_log/eps_f64", BackendOp::safe_log, f64({4}, {0.05, 0.5, 2, -1}),
                                  [](double x) { return std::log(std::max(x, 0.1)); }, {{"eps", 0.1}})));
    out.push_back(with_grad(unary("safe_log/above_eps", BackendOp::safe_log, f32({3}, {0.2, 1, 5}),
                                  [](double x) { return std::log(x); })));
}

// ---- hardmax (ONNX Hardmax, opset 13) ----

void hardmax_cases(std::vector<KernelCase>& out) {
    using I = std::int64_t;
    // ONNX's test_hardmax_example: one row per maximum position.
    out.push_back(with_grad(make("hardmax/onnx_example", BackendOp::hardmax,
                                 {f32({4, 4}, {3, 0, 1, 2, 2, 5, 1, 0, 0, 1, 3, 2, 0, 1, 2, 3})},
                                 f32({4, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}))));
    // Ties go to the first largest element (test_hardmax_one_hot).
    out.push_back(make("hardmax/ties_first", BackendOp::hardmax, {f32({1, 4}, {1, 1, 1, 0})},
                       f32({1, 4}, {1, 0, 0, 0})));
    // axis 0 of [2, 3]: columns (2 vs 5, 7 vs 1, 3 vs 1).
    out.push_back(with_grad(make("hardmax/axis0_f64", BackendOp::hardmax, {f64({2, 3}, {2, 7, 3, 5, 1, 1})},
                                 f64({2, 3}, {0, 1, 1, 1, 0, 0}), {{"axis", I(0)}})));
    // A middle axis of [2, 2, 2].
    out.push_back(make("hardmax/middle_axis", BackendOp::hardmax, {f32({2, 2, 2}, {1, 4, 2, 3, -1, -2, -3, -4})},
                       f32({2, 2, 2}, {0, 1, 1, 0, 1, 1, 0, 0}), {{"axis", I(1)}}));
    // NaN counts as the largest; the first NaN wins; -inf rows still pick their first element.
    out.push_back(make("hardmax/nan_wins", BackendOp::hardmax,
                       {f32({3, 3}, {1, kNaN, kNaN, kInf, 2, kNaN, -kInf, -kInf, -kInf})},
                       f32({3, 3}, {0, 1, 0, 0, 0, 1, 1, 0, 0})));
    out.push_back(make("hardmax/scalar", BackendOp::hardmax, {f32({}, {-3})}, f32({}, {1})));
    out.push_back(make("hardmax/empty", BackendOp::hardmax, {f32({0, 3}, {})}, f32({0, 3}, {})));
}

// ---- softmax, log_softmax ----

void softmax_cases(std::vector<KernelCase>& out) {
    for (bool log : {false, true}) {
        const std::string p = log ? "log_softmax/" : "softmax/";
        const BackendOp op = log ? BackendOp::log_softmax : BackendOp::softmax;
        auto sm = [&](std::string name, CaseTensor x, std::int64_t axis, Attributes attrs = {}) {
            const V v = softmax_ref(x, axis, log);
            CaseTensor e{x.dtype, x.shape, v};
            return make(p + name, op, {std::move(x)}, std::move(e), std::move(attrs));
        };
        out.push_back(with_grad(sm("vector", f32({3}, {1, 2, 3}), 0)));
        out.push_back(with_grad(sm("rows_last_axis", f32({2, 3}, {1, 2, 3, -1, 0, 5}), 1)));
        out.push_back(with_grad(sm("axis0_strided", f32({2, 3}, {1, 2, 3, -1, 0, 5}), 0, {{"axis", std::int64_t(0)}})));
        out.push_back(with_grad(sm("middle_axis_f64", f64({2, 3, 2}, irregular(12, -2, 2, 1)), 1,
                                   {{"axis", std::int64_t(-2)}})));
        out.push_back(sm("size1_axis", f32({3, 1}, {5, -7, 0}), 1));
        out.push_back(sm("scalar", f32({}, {3.5}), 0));
        out.push_back(sm("empty", f32({0, 4}, {}), 1));
        out.push_back(sm("nan_row", f32({2, 2}, {kNaN, 1, 2, 3}), 1));
        out.push_back(with_grad(sm("large_f64", f64({2, 2}, {1000, 1001, -1000, -1001}), 1)));
        out.push_back(sm("large_axis0", f32({2, 2}, {1000, -5, 1001, -4}), 0, {{"axis", std::int64_t(0)}}));
        {
            // Worked by hand: softmax([1000, 1001]) = [1/(1+e), e/(1+e)].
            const double e = std::exp(1.0);
            V v = log ? V{-std::log1p(e), 1 - std::log1p(e)} : V{1 / (1 + e), e / (1 + e)};
            out.push_back(make(p + "stable_large", op, {f32({2}, {1000, 1001})}, f32({2}, v)));
        }
        {
            // -inf entries get probability 0 (log-probability -inf).
            V v = log ? V{-kInf, 0} : V{0, 1};
            out.push_back(make(p + "neg_inf_entry", op, {f32({2}, {-kInf, 0})}, f32({2}, v)));
        }
    }
}

// ---- sum, reduce_sum, reduce_mean, mse_loss ----

void reduction_cases(std::vector<KernelCase>& out) {
    auto total = [](const CaseTensor& x) {
        double s = 0;
        for (std::size_t i = 0; i < x.values.size(); ++i) s += seen(x, i);
        return s;
    };
    {
        auto x = f32({2, 3}, {1, 2, 3, 4, 5, 6.5});
        out.push_back(with_grad(make("sum/matrix", BackendOp::sum, {x}, f32({}, {total(x)}))));
        auto y = f64({4}, {0.5, 0.25, -1, 2});
        out.push_back(make("sum/f64", BackendOp::sum, {y}, f64({}, {1.75})));
        out.push_back(make("sum/empty", BackendOp::sum, {f32({0, 2}, {})}, f32({}, {0})));
        out.push_back(make("sum/scalar", BackendOp::sum, {f32({}, {-2.5})}, f32({}, {-2.5})));
        out.push_back(make("sum/nan", BackendOp::sum, {f32({3}, {1, kNaN, 2})}, f32({}, {kNaN})));
        auto z = f64({3, 1, 2}, irregular(6, -1, 1, 2));
        out.push_back(with_grad(make("sum/rank3_f64", BackendOp::sum, {z}, f64({}, {total(z)}))));
    }
    for (bool mean : {false, true}) {
        const std::string p = mean ? "reduce_mean/" : "reduce_sum/";
        const BackendOp op = mean ? BackendOp::reduce_mean : BackendOp::reduce_sum;
        auto red = [&](std::string name, CaseTensor x, std::set<std::int64_t> axes, Shape out_shape,
                       Attributes attrs) {
            const V v = reduce_ref(x, axes, mean);
            CaseTensor e{x.dtype, std::move(out_shape), v};
            return make(p + name, op, {std::move(x)}, std::move(e), std::move(attrs));
        };
        const auto m23 = f32({2, 3}, {1, 2, 3, 4, 5, 6});
        const auto t234 = f32({2, 3, 4}, ramp(24, -3, 0.37));
        out.push_back(with_grad(red("rows", m23, {1}, {2}, {{"axes", Ints{1}}})));
        out.push_back(with_grad(red("columns_keepdims", m23, {0}, {1, 3}, {{"axes", Ints{0}}, {"keepdims", true}})));
        out.push_back(with_grad(red("all_default", m23, {0, 1}, {}, {})));
        out.push_back(red("all_keepdims", m23, {0, 1}, {1, 1}, {{"keepdims", true}}));
        out.push_back(with_grad(red("last_axis_negative", t234, {2}, {2, 3}, {{"axes", Ints{-1}}})));
        out.push_back(with_grad(red("outer_axes", t234, {0, 2}, {3}, {{"axes", Ints{2, 0}}})));
        out.push_back(with_grad(red("middle_axis_keepdims_f64", f64({2, 3, 4}, irregular(24, -2, 2, 3)), {1},
                                    {2, 1, 4}, {{"axes", Ints{1}}, {"keepdims", true}})));
        out.push_back(red("size1_axis", f32({3, 1}, {1, 2, 3}), {1}, {3}, {{"axes", Ints{1}}}));
        out.push_back(red("scalar", f32({}, {4}), {}, {}, {{"axes", Ints{0}}}));
        out.push_back(red("empty_axis", f32({2, 0}, {}), {1}, {2}, {{"axes", Ints{1}}}));
        out.push_back(red("empty_kept", f32({0, 3}, {}), {1}, {0}, {{"axes", Ints{1}}}));
        out.push_back(red("nan", f64({2, 2}, {kNaN, 1, 2, 3}), {1}, {2}, {{"axes", Ints{1}}}));
    }
    // mse_loss
    {
        auto x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
        auto t = f32({2, 3}, {1.5, 2, 2, 4, 7, 5.75});
        double s = 0;
        V sq(6);
        for (std::size_t i = 0; i < 6; ++i) {
            sq[i] = (seen(x, i) - seen(t, i)) * (seen(x, i) - seen(t, i));
            s += sq[i];
        }
        out.push_back(with_grad(make("mse_loss/mean_default", BackendOp::mse_loss, {x, t}, f32({}, {s / 6}))));
        out.push_back(with_grad(make("mse_loss/sum", BackendOp::mse_loss, {x, t}, f32({}, {s}),
                                     {{"reduction", std::string("sum")}})));
        out.push_back(with_grad(make("mse_loss/none", BackendOp::mse_loss, {x, t}, f32({2, 3}, sq),
                                     {{"reduction", std::string("none")}})));
        out.push_back(with_grad(make("mse_loss/mean_f64", BackendOp::mse_loss,
                                     {f64({3}, {0.1, -0.2, 1e3}), f64({3}, {0.3, 0.2, 999})},
                                     f64({}, {(0.04 + 0.16 + 1) / 3}), {{"reduction", std::string("mean")}})));
        out.push_back(make("mse_loss/empty_mean", BackendOp::mse_loss, {f32({0}, {}), f32({0}, {})},
                           f32({}, {kNaN})));
        out.push_back(make("mse_loss/empty_sum", BackendOp::mse_loss, {f32({0}, {}), f32({0}, {})},
                           f32({}, {0}), {{"reduction", std::string("sum")}}));
        out.push_back(make("mse_loss/scalar_inf", BackendOp::mse_loss, {f32({}, {kInf}), f32({}, {1})},
                           f32({}, {kInf}), {{"reduction", std::string("none")}}));
    }
    // cross_entropy: loss_i = log(sum_c exp(x_ic)) - x_i[t_i], by hand for rows [1, 2, 3] and
    // [1, 1, 1] (torch.nn.functional.cross_entropy).
    {
        const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3;
        const double l1 = std::log(3.0);
        auto x = f32({2, 3}, {1, 2, 3, 1, 1, 1});
        auto t = i64({2}, {2, 0});
        out.push_back(with_grad(make("cross_entropy/mean_default", BackendOp::cross_entropy, {x, t},
                                     f32({}, {(l0 + l1) / 2}))));
        out.push_back(with_grad(make("cross_entropy/sum", BackendOp::cross_entropy, {x, t},
                                     f32({}, {l0 + l1}), {{"reduction", std::string("sum")}})));
        out.push_back(with_grad(make("cross_entropy/none_f64", BackendOp::cross_entropy,
                                     {f64({2, 3}, {1, 2, 3, 1, 1, 1}), t}, f64({2}, {l0, l1}),
                                     {{"reduction", std::string("none")}})));
        out.push_back(with_grad(make("cross_entropy/ignore_index", BackendOp::cross_entropy,
                                     {x, i64({2}, {2, -1})}, f32({}, {l0}),
                                     {{"ignore_index", std::int64_t{-1}}})));
        // Large logits: the maximum is subtracted first, so nothing overflows.
        out.push_back(make("cross_entropy/large_logits", BackendOp::cross_entropy,
                           {f32({1, 2}, {1000, 0}), i64({1}, {1})}, f32({}, {1000})));
        out.push_back(make("cross_entropy/all_ignored_is_nan", BackendOp::cross_entropy,
                           {x, i64({2}, {-100, -100})}, f32({}, {kNaN})));
        out.push_back(error_case("cross_entropy/error_target_out_of_range", BackendOp::cross_entropy,
                                 {x, i64({2}, {3, 0})},
                                 "cross_entropy: target[0] = 3 is not a class index in [0, 3)"));
    }
}

// ---- div, pow, mod, neg, erf (ONNX import) ----

void arithmetic_cases(std::vector<KernelCase>& out) {
    auto divide = [](double a, double b) { return a / b; };
    auto power = [](double a, double b) { return std::pow(a, b); };
    out.push_back(with_grad(make("div/same_shape", BackendOp::div,
                                 {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({2, 3}, {2, -4, 0.5, 8, -10, 4})},
                                 f32({2, 3}, {0.5, -0.5, 6, 0.5, -0.5, 1.5}))));
    out.push_back(with_grad(binary("div/broadcast_row_f64", BackendOp::div,
                                   f64({2, 3}, ramp(6, -1.5, 0.7)), f64({3}, {1.5, -2, 4}), divide)));
    out.push_back(with_grad(make("div/broadcast_scalar_divisor", BackendOp::div,
                                 {f32({3}, {1, 2, 3}), f32({}, {4})}, f32({3}, {0.25, 0.5, 0.75}))));
    out.push_back(make("div/by_zero", BackendOp::div,
                       {f32({4}, {1, -1, 0, kNaN}), f32({4}, {0, 0, 0, 1})},
                       f32({4}, {kInf, -kInf, kNaN, kNaN})));
    out.push_back(with_grad(make("pow/same_shape", BackendOp::pow,
                                 {f32({4}, {2, 0.5, 4, 2.25}), f32({4}, {3, 2, -1, 0.5})},
                                 f32({4}, {8, 0.25, 0.25, 1.5}))));
    out.push_back(with_grad(binary("pow/broadcast_exponent_f64", BackendOp::pow,
                                   f64({2, 2}, {1.5, 2, 2.5, 3}), f64({2}, {2, -0.5}), power)));
    // pow(x, 0) = 1 (gradient w.r.t. x is 0 there); d/db = a^b ln a = ln a
    out.push_back(with_grad(make("pow/zero_exponent_f64", BackendOp::pow,
                                 {f64({2}, {0.5, 3}), f64({2}, {0, 0})}, f64({2}, {1, 1}))));
    // 0^0 = 1, (-2)^3 = -8, (-8)^(1/3) = NaN (non-integer exponent), NaN^0 = 1, 0^-1 = inf
    out.push_back(make("pow/special_values", BackendOp::pow,
                       {f32({5}, {0, -2, -8, kNaN, 0}), f32({5}, {0, 3, 1.0 / 3, 0, -1})},
                       f32({5}, {1, -8, kNaN, 1, kInf})));
    // mod (ONNX Mod): fmod has a's sign, remainder (the default) b's; hand values.
    const Attributes fmod{{"fmod", true}};
    out.push_back(make("mod/fmod_mixed_signs", BackendOp::mod,
                       {f32({6}, {5.5, -5.5, 5.5, -5.5, 3, 7}), f32({6}, {2, 2, -2, -2, 1.5, 7})},
                       f32({6}, {1.5, -1.5, 1.5, -1.5, 0, 0}), fmod));
    out.push_back(with_grad(make("mod/remainder_mixed_signs_f64", BackendOp::mod,
                                 {f64({4}, {5.5, -5.5, 5.5, -5.5}), f64({4}, {2, 2, -2, -2})},
                                 f64({4}, {1.5, 0.5, -0.5, -1.5}))));
    // Away from a/b integer (where the result jumps), for the gradients -g trunc(a/b) w.r.t. b.
    out.push_back(with_grad(make("mod/fmod_gradient_f64", BackendOp::mod,
                                 {f64({4}, {5.3, -4.1, 7.7, -0.6}), f64({4}, {2, 1.5, -3, 0.5})},
                                 f64({4}, {1.3, -1.1, 1.7, -0.1}), fmod)));
    out.push_back(with_grad(binary("mod/remainder_broadcast_row", BackendOp::mod,
                                   f32({2, 3}, {-3.25, 4.25, 7.75, 1.25, -6.5, 2.75}), f32({3}, {2.5, -1.5, 3}),
                                   [](double a, double b) {
                                       const double r = std::fmod(a, b);
                                       return r != 0 && (r < 0) != (b < 0) ? r + b : r;
                                   })));
    // x mod 0 and inf mod y are NaN; x mod inf is x (fmod), inf for a negative x (remainder).
    out.push_back(make("mod/fmod_special_f64", BackendOp::mod,
                       {f64({4}, {1, kInf, 3, kNaN}), f64({4}, {0, 2, kInf, 1})}, f64({4}, {kNaN, kNaN, 3, kNaN}),
                       fmod));
    out.push_back(make("mod/remainder_special", BackendOp::mod, {f32({3}, {-3, 3, 1}), f32({3}, {kInf, kInf, 0})},
                       f32({3}, {kInf, 3, kNaN})));
    // int64: Python's % and C's %; INT64_MIN mod -1 is 0 (C's % overflows there).
    const double int64_min = -9223372036854775808.0;
    const auto ia = i64({6}, {7, -7, 7, -7, int64_min, 0}), ib = i64({6}, {3, 3, -3, -3, -1, 5});
    out.push_back(make("mod/remainder_int64", BackendOp::mod, {ia, ib}, i64({6}, {1, 2, -2, -1, 0, 0})));
    out.push_back(make("mod/fmod_int64", BackendOp::mod, {ia, ib}, i64({6}, {1, -1, 1, -1, 0, 0}), fmod));
    // add, sub, mul, max, min on int64 (ONNX allows integers): exact, and wrapping modulo 2^64 as
    // PyTorch and NumPy do (2^62 + 2^62 = -2^63, 2^62 · 2^62 = 0). b [2] broadcasts over a [2, 2].
    const double p62 = 4611686018427387904.0;
    const auto wa = i64({2, 2}, {p62, -7, -p62, 5}), wb = i64({2}, {p62, 3});
    out.push_back(make("add/int64_broadcast_wraps", BackendOp::add, {wa, wb}, i64({2, 2}, {int64_min, -4, 0, 8})));
    out.push_back(make("sub/int64_broadcast", BackendOp::sub, {wa, wb}, i64({2, 2}, {0, -10, int64_min, 2})));
    out.push_back(make("mul/int64_broadcast_wraps", BackendOp::mul, {wa, wb}, i64({2, 2}, {0, -21, 0, 15})));
    out.push_back(make("max/int64_broadcast", BackendOp::max, {wa, wb}, i64({2, 2}, {p62, 3, p62, 5})));
    out.push_back(make("min/int64_broadcast", BackendOp::min, {wa, wb}, i64({2, 2}, {p62, -7, -p62, 3})));
    out.push_back(error_case("mod/error_int64_by_zero", BackendOp::mod, {i64({2}, {4, 5}), i64({2}, {2, 0})},
                             "mod: int64 division by zero", i64({2}, {})));
    out.push_back(with_grad(make("neg/values", BackendOp::neg, {f32({4}, {1, -2.5, 0, 3})},
                                 f32({4}, {-1, 2.5, 0, -3}))));
    out.push_back(make("neg/special_f64", BackendOp::neg, {f64({3}, {kInf, kNaN, -kInf})},
                       f64({3}, {-kInf, kNaN, kInf})));
    out.push_back(with_grad(unary("erf/values", BackendOp::erf, f32({5}, {-2, -0.5, 0, 0.5, 2}),
                                  [](double x) { return std::erf(x); })));
    // erf(0.5) = 0.5204998778130465 (tables)
    out.push_back(with_grad(make("erf/table_value_f64", BackendOp::erf, {f64({2}, {0.5, -0.5})},
                                 f64({2}, {0.5204998778130465, -0.5204998778130465}))));
    out.push_back(make("erf/special_f64", BackendOp::erf, {f64({3}, {kInf, -kInf, kNaN})},
                       f64({3}, {1, -1, kNaN})));
    out.push_back(error_case("div/error_dtype_mismatch", BackendOp::div,
                             {f32({2}, {1, 2}), f64({2}, {3, 4})},
                             "div: input 1 has dtype float64, expected float32", f32({2}, {})));
}

// ---- reduce_max, reduce_min, reduce_prod, argmax, argmin (ONNX import) ----

void extremum_cases(std::vector<KernelCase>& out) {
    using I = std::int64_t;
    const auto m23 = f32({2, 3}, {1, 5, 3, -4, 2, 2});
    // Ties: the gradient is split evenly, which is also what central differences measure.
    out.push_back(with_grad(make("reduce_max/rows_with_tie", BackendOp::reduce_max, {m23},
                                 f32({2}, {5, 2}), {{"axes", Ints{1}}})));
    out.push_back(with_grad(make("reduce_max/columns_keepdims", BackendOp::reduce_max, {m23},
                                 f32({1, 3}, {1, 5, 3}), {{"axes", Ints{0}}, {"keepdims", true}})));
    out.push_back(make("reduce_max/all_default", BackendOp::reduce_max, {m23}, f32({}, {5})));
    // [2, 2, 2] over axes 0 and 2: j = 0 reads {1, 8, 5, 6}, j = 1 reads {3, 4, 7, 2}
    out.push_back(with_grad(make("reduce_max/outer_axes_f64", BackendOp::reduce_max,
                                 {f64({2, 2, 2}, {1, 8, 3, 4, 5, 6, 7, 2})}, f64({2}, {8, 7}),
                                 {{"axes", Ints{0, -1}}})));
    out.push_back(make("reduce_max/nan_propagates", BackendOp::reduce_max,
                       {f32({2, 2}, {1, kNaN, 3, 4})}, f32({2}, {kNaN, 4}), {{"axes", Ints{1}}}));
    out.push_back(make("reduce_max/empty_group_is_minus_inf", BackendOp::reduce_max,
                       {f32({2, 0}, {})}, f32({2}, {-kInf, -kInf}), {{"axes", Ints{1}}}));
    out.push_back(with_grad(make("reduce_min/rows", BackendOp::reduce_min, {m23},
                                 f32({2}, {1, -4}), {{"axes", Ints{-1}}})));
    out.push_back(with_grad(make("reduce_min/tie_f64", BackendOp::reduce_min,
                                 {f64({3}, {2, 1, 1})}, f64({}, {1}))));
    out.push_back(make("reduce_min/empty_group_is_inf", BackendOp::reduce_min, {f64({0, 3}, {})},
                       f64({3}, {kInf, kInf, kInf}), {{"axes", Ints{0}}}));
    out.push_back(with_grad(make("reduce_prod/rows", BackendOp::reduce_prod,
                                 {f32({2, 3}, {1, 2, 3, 4, 0.5, -2})}, f32({2}, {6, -4}),
                                 {{"axes", Ints{1}}})));
    out.push_back(with_grad(make("reduce_prod/columns_keepdims", BackendOp::reduce_prod,
                                 {f32({2, 2}, {1, 2, 3, 4})}, f32({1, 2}, {3, 8}),
                                 {{"axes", Ints{0}}, {"keepdims", true}})));
    // one zero: only the zero gets a gradient, g * 2 * 3 * -1
    out.push_back(with_grad(make("reduce_prod/one_zero_f64", BackendOp::reduce_prod,
                                 {f64({4}, {2, 0, 3, -1})}, f64({}, {0}))));
    out.push_back(with_grad(make("reduce_prod/two_zeros_f64", BackendOp::reduce_prod,
                                 {f64({3}, {0, 0, 5})}, f64({}, {0}))));
    out.push_back(make("reduce_prod/empty_group_is_one", BackendOp::reduce_prod,
                       {f32({2, 0}, {})}, f32({2}, {1, 1}), {{"axes", Ints{1}}}));

    const auto a23 = f32({2, 3}, {1, 5, 3, 4, 2, 6});
    out.push_back(make("argmax/default_axis0_keepdims", BackendOp::argmax, {a23},
                       i64({1, 3}, {1, 0, 1})));
    out.push_back(make("argmax/axis1", BackendOp::argmax, {a23}, i64({2}, {1, 2}),
                       {{"axis", I(1)}, {"keepdims", false}}));
    out.push_back(make("argmax/tie_first", BackendOp::argmax, {f32({4}, {1, 3, 3, 2})},
                       i64({}, {1}), {{"keepdims", false}}));
    out.push_back(make("argmax/tie_select_last", BackendOp::argmax, {f32({4}, {1, 3, 3, 2})},
                       i64({}, {2}), {{"keepdims", false}, {"select_last_index", true}}));
    out.push_back(make("argmax/nan_wins_first", BackendOp::argmax,
                       {f64({4}, {1, kNaN, 5, kNaN})}, i64({1}, {1})));
    out.push_back(make("argmax/nan_wins_last", BackendOp::argmax,
                       {f64({4}, {1, kNaN, 5, kNaN})}, i64({1}, {3}),
                       {{"select_last_index", true}}));
    out.push_back(make("argmax/int64_last_axis", BackendOp::argmax,
                       {i64({2, 2}, {5, -1, 5, 7})}, i64({2, 1}, {0, 1}), {{"axis", I(-1)}}));
    out.push_back(make("argmin/axis1", BackendOp::argmin, {a23}, i64({2}, {0, 1}),
                       {{"axis", I(1)}, {"keepdims", false}}));
    out.push_back(make("argmin/tie_select_last_f64", BackendOp::argmin, {f64({3}, {2, 1, 1})},
                       i64({1}, {2}), {{"select_last_index", true}}));
    out.push_back(make("argmin/nan_wins", BackendOp::argmin, {f32({3}, {1, kNaN, -5})},
                       i64({1}, {1})));
    out.push_back(make("argmin/rank0", BackendOp::argmin, {f32({}, {3})}, i64({}, {0})));
    out.push_back(make("argmin/empty_other_axis", BackendOp::argmin, {f32({0, 2}, {})},
                       i64({0}, {}), {{"axis", I(1)}, {"keepdims", false}}));

    // top_k (ONNX TopK's indices): ONNX's test_top_k (0..11 as [3, 4], k = 3 along axis 1).
    out.push_back(make("top_k/onnx_example", BackendOp::top_k,
                       {f32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})},
                       i64({3, 3}, {3, 2, 1, 3, 2, 1, 3, 2, 1}), {{"k", I(3)}, {"axis", I(1)}}));
    // Smallest: 1 (index 1) and 1 (index 3) tie and keep index order, then 3 (index 0).
    out.push_back(make("top_k/smallest_ties_in_index_order", BackendOp::top_k, {f32({1, 5}, {3, 1, 4, 1, 5})},
                       i64({1, 3}, {1, 3, 0}), {{"k", I(3)}, {"largest", false}}));
    out.push_back(make("top_k/largest_ties_in_index_order", BackendOp::top_k, {f32({4}, {2, 5, 5, 1})},
                       i64({2}, {1, 2}), {{"k", I(2)}}));
    // NaN counts as the largest: first when largest (in index order), never among the smallest.
    out.push_back(make("top_k/nan_largest", BackendOp::top_k, {f64({4}, {1, kNaN, 3, kNaN})},
                       i64({3}, {1, 3, 2}), {{"k", I(3)}}));
    out.push_back(make("top_k/nan_not_smallest", BackendOp::top_k, {f64({4}, {1, kNaN, 3, kNaN})},
                       i64({2}, {0, 2}), {{"k", I(2)}, {"largest", false}}));
    // Axis 0 of [3, 2]: column 0 is 1, 5, 3 (top 2 at rows 1, 2); column 1 is 6, 2, 4 (rows 0, 2).
    out.push_back(make("top_k/axis0", BackendOp::top_k, {f32({3, 2}, {1, 6, 5, 2, 3, 4})},
                       i64({2, 2}, {1, 0, 2, 2}), {{"k", I(2)}, {"axis", I(0)}}));
    out.push_back(make("top_k/int64_negative", BackendOp::top_k, {i64({5}, {-7, 3, -1, 3, 0})},
                       i64({4}, {1, 3, 4, 2}), {{"k", I(4)}}));
    out.push_back(make("top_k/k0", BackendOp::top_k, {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, i64({2, 0}, {}),
                       {{"k", I(0)}}));
    // non_max_suppression: ONNX's test_nonmaxsuppression_suppress_by_IOU (one class, six boxes;
    // boxes 1 and 2 overlap box 0 with IoU 0.82, box 4 overlaps box 3), then the same with room for
    // 10 boxes (rows past the 3 selected are -1), a score threshold of 0.4 (box 5 at 0.3 is out),
    // and ONNX's center_point_box format.
    const std::vector<double> nms_boxes{0, 0, 1, 1, 0, 0.1, 1, 1.1, 0, -0.1, 1, 0.9, 0, 10, 1, 11, 0, 10.1, 1, 11.1, 0, 100, 1, 101};
    const std::vector<double> nms_scores{0.9, 0.75, 0.6, 0.95, 0.5, 0.3};
    out.push_back(make("non_max_suppression/onnx_suppress_by_iou", BackendOp::non_max_suppression,
                       {f32({1, 6, 4}, nms_boxes), f32({1, 1, 6}, nms_scores)}, i64({3, 3}, {0, 0, 3, 0, 0, 0, 0, 0, 5}),
                       {{"max_output_boxes_per_class", I(3)}, {"iou_threshold", 0.5}, {"score_threshold", 0.0}}));
    out.push_back(make("non_max_suppression/padded_rows", BackendOp::non_max_suppression,
                       {f32({1, 6, 4}, nms_boxes), f32({1, 1, 6}, nms_scores)},
                       i64({6, 3}, {0, 0, 3, 0, 0, 0, 0, 0, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
                       {{"max_output_boxes_per_class", I(10)}, {"iou_threshold", 0.5}}));
    out.push_back(make("non_max_suppression/score_threshold", BackendOp::non_max_suppression,
                       {f64({1, 6, 4}, nms_boxes), f64({1, 1, 6}, nms_scores)},
                       i64({6, 3}, {0, 0, 3, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
                       {{"max_output_boxes_per_class", I(10)}, {"iou_threshold", 0.5}, {"score_threshold", 0.4}}));
    out.push_back(make("non_max_suppression/onnx_center_point_box", BackendOp::non_max_suppression,
                       {f32({1, 6, 4}, {0.5, 0.5, 1, 1, 0.5, 0.6, 1, 1, 0.5, 0.4, 1, 1, 0.5, 10.5, 1, 1, 0.5, 10.6, 1, 1, 0.5, 100.5, 1, 1}),
                        f32({1, 1, 6}, nms_scores)},
                       i64({3, 3}, {0, 0, 3, 0, 0, 0, 0, 0, 5}),
                       {{"max_output_boxes_per_class", I(3)}, {"iou_threshold", 0.5}, {"center_point_box", I(1)}}));
    // Two classes: class 1 ranks the boxes the other way round; each class selects on its own.
    out.push_back(make("non_max_suppression/two_classes", BackendOp::non_max_suppression,
                       {f32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1, 1, 1.1, 0, 5, 1, 6}), f32({1, 2, 3}, {0.9, 0.8, 0.1, 0.1, 0.8, 0.9})},
                       i64({4, 3}, {0, 0, 0, 0, 0, 2, 0, 1, 2, 0, 1, 1}),
                       {{"max_output_boxes_per_class", I(2)}, {"iou_threshold", 0.5}}));
    // non_zero: ONNX's test_nonzero_example ([[1, 0], [1, 1]]), padded with a -1 column; NaN is
    // not zero.
    out.push_back(make("non_zero/onnx_example", BackendOp::non_zero, {boolean({2, 2}, {1, 0, 1, 1})},
                       i64({2, 4}, {0, 1, 1, -1, 0, 0, 1, -1})));
    out.push_back(make("non_zero/nan_is_not_zero", BackendOp::non_zero, {f32({3}, {0, kNaN, 2})},
                       i64({1, 3}, {1, 2, -1})));
    out.push_back(make("non_zero/int64_none", BackendOp::non_zero, {i64({2}, {0, 0})}, i64({1, 2}, {-1, -1})));
    out.push_back(error_case("top_k/error_k_too_large", BackendOp::top_k, {f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})},
                             "top_k: k 5 is outside [0, 4] (the size of axis 1)", i64({2, 5}, {}), {{"k", I(5)}}));
    out.push_back(error_case("argmax/error_empty_axis", BackendOp::argmax, {f32({0, 2}, {})},
                             "argmax: axis 0 has size 0 (input shape [0, 2])", i64({1, 2}, {})));
    out.push_back(error_case("argmin/error_bool", BackendOp::argmin, {boolean({2}, {1, 0})},
                             "argmin: input has dtype bool; expected a number dtype",
                             i64({1}, {})));
    out.push_back(error_case("reduce_max/error_int64", BackendOp::reduce_max, {i64({2}, {1, 2})},
                             "reduce_max: input has dtype int64; expected float32 or float64",
                             i64({}, {})));
}

/// Inputs the kernels must refuse, with (part of) the message they give.
void error_cases(std::vector<KernelCase>& out) {
    using I = std::int64_t;
    using S = std::string;
    // dtypes
    out.push_back(error_case("relu/error_int64_input", BackendOp::relu, {i64({3}, {1, -2, 3})},
                             "relu: input has dtype int64; expected one of float32, float64, float16, bfloat16",
                             i64({3}, {})));
    out.push_back(error_case("abs/error_bool_input", BackendOp::abs, {boolean({2}, {1, 0})},
                             "abs: input has dtype bool; expected one of float32, float64",
                             boolean({2}, {})));
    out.push_back(error_case("mul/error_dtype_mismatch", BackendOp::mul,
                             {f32({2}, {1, 2}), f64({2}, {3, 4})},
                             "mul: input 1 has dtype float64, expected float32", f32({2}, {})));
    // shapes and arity
    out.push_back(error_case("add/error_shapes_do_not_broadcast", BackendOp::add,
                             {f32({2, 3}, V(6, 1.0)), f32({4}, V(4, 1.0))},
                             "add: shapes [2, 3] and [4] do not broadcast", f32({2, 3}, {})));
    out.push_back(error_case("sub/error_one_input", BackendOp::sub, {f32({2}, {1, 2})},
                             "sub expects 2 inputs, got 1", f32({2}, {})));
    out.push_back(error_case("mse_loss/error_target_shape", BackendOp::mse_loss,
                             {f32({3}, {1, 2, 3}), f32({2}, {1, 2})},
                             "mse_loss: target has shape [2] but the input has shape [3]",
                             f32({}, {})));
    // attributes
    out.push_back(error_case("scale/error_missing_factor", BackendOp::scale, {f32({2}, {1, 2})},
                             "scale: missing attribute 'factor' (number)", f32({2}, {})));
    out.push_back(error_case("scale/error_nan_factor", BackendOp::scale, {f32({2}, {1, 2})},
                             "scale: attribute 'factor' must not be NaN", f32({2}, {}),
                             {{"factor", kNaN}}));
    out.push_back(error_case("clamp/error_no_bounds", BackendOp::clamp, {f32({2}, {1, 2})},
                             "clamp: needs attribute 'min' or 'max' (or both)", f32({2}, {})));
    out.push_back(error_case("gelu/error_bad_approximate", BackendOp::gelu, {f32({2}, {1, 2})},
                             "gelu: attribute 'approximate' = 'erf' must be one of none, tanh",
                             f32({2}, {}), {{"approximate", S("erf")}}));
    out.push_back(error_case("softplus/error_beta_zero", BackendOp::softplus, {f32({2}, {1, 2})},
                             "softplus: attribute 'beta' must be a finite number > 0",
                             f32({2}, {}), {{"beta", 0.0}}));
    out.push_back(error_case("safe_log/error_negative_eps", BackendOp::safe_log,
                             {f64({2}, {1, 2})},
                             "safe_log: attribute 'eps' must be a finite number > 0", f64({2}, {}),
                             {{"eps", -1.0}}));
    out.push_back(error_case("softmax/error_axis_out_of_range", BackendOp::softmax,
                             {f32({2, 3}, V(6, 0.5))},
                             "softmax: attribute 'axis' = 2 out of range for rank 2",
                             f32({2, 3}, {}), {{"axis", I(2)}}));
    out.push_back(error_case("reduce_sum/error_repeated_axis", BackendOp::reduce_sum,
                             {f32({2, 3}, V(6, 0.5))},
                             "reduce_sum: attribute 'axes' repeats axis 0", f32({}, {}),
                             {{"axes", Ints{0, -2}}}));
    out.push_back(error_case("reduce_mean/error_empty_axes", BackendOp::reduce_mean,
                             {f32({2, 3}, V(6, 0.5))},
                             "reduce_mean: attribute 'axes' is empty; omit it to reduce over every axis",
                             f32({}, {}), {{"axes", Ints{}}}));
    out.push_back(error_case("mse_loss/error_bad_reduction", BackendOp::mse_loss,
                             {f32({2}, {1, 2}), f32({2}, {1, 2})},
                             "mse_loss: attribute 'reduction' = 'avg' must be one of mean, sum, none",
                             f32({}, {}), {{"reduction", S("avg")}}));
    // random ops
    out.push_back(error_case("rand_uniform/error_missing_shape", BackendOp::rand_uniform, {},
                             "rand_uniform: missing attribute 'shape' (list of integers)",
                             f32({2}, {})));
    out.push_back(error_case("rand_uniform/error_bad_dtype", BackendOp::rand_uniform, {},
                             "rand_uniform: attribute 'dtype' = 'int64' must be one of float32, float64",
                             f32({2}, {}), {{"shape", Ints{2}}, {"dtype", S("int64")}}));
    out.push_back(error_case("bernoulli_mask/error_p_above_one", BackendOp::bernoulli_mask,
                             {f32({3}, {0.5, 1.5, 0})},
                             "bernoulli_mask: probability 1.500000 at element 1 is outside [0, 1]"));
    out.push_back(error_case("bernoulli_mask/error_p_negative_f64", BackendOp::bernoulli_mask,
                             {f64({2, 2}, {0, 1, 0.25, -0.25})},
                             "bernoulli_mask: probability -0.250000 at element 3 is outside [0, 1]"));
    out.push_back(error_case("bernoulli_mask/error_p_nan", BackendOp::bernoulli_mask,
                             {f32({2}, {0.5, kNaN})}, "at element 1 is outside [0, 1]"));
    // backward without the forward output
    for (auto op : {BackendOp::softmax, BackendOp::log_softmax}) {
        const std::string name(to_string(op));
        auto c = error_case(name + "/error_backward_without_output", op, {f32({2, 3}, V(6, 0.5))},
                            name + ": backward needs the forward output");
        c.error_in_backward = true;
        out.push_back(std::move(c));
    }
}

}  // namespace

std::vector<KernelCase> elementwise_cases() {
    std::vector<KernelCase> out;
    random_cases(out);
    binary_cases(out);
    unary_cases(out);
    softmax_cases(out);
    hardmax_cases(out);
    reduction_cases(out);
    arithmetic_cases(out);
    extremum_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
