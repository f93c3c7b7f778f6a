// Magnitude bounds of a compiled group's values, kept per run (compiled_group.cpp).
//
// A fused path computes what the node-by-node kernels compute only while nothing inside its
// primitive overflows and no NaN reaches a post-op that maps NaN to a number (relu, clip); relu,
// clamp and max pooling need their NaN pass only when their input may hold a NaN. Scanning each
// such input on every run is a pass over memory per node, single-threaded (a sixth of ResNet-18's
// time on two cores). Instead a run carries an upper bound of max|v| for each value: the exact
// maximum where a value was scanned, otherwise what interval arithmetic gives from the bounds of
// the node's inputs and weights (|conv2d(x)| <= max|x| * max_o sum_i |w[o, i]| + max|b|,
// |a + b| <= max|a| + max|b|, relu and max pools keep the bound, sigmoid is at most 1, ...),
// widened per node for rounding by 2^-6 (bfloat16 inputs under fpmath bf16 add 2^-8 each), or by
// 2 k 2^-24 for a sum of k products when that is larger (float32 accumulation error is below
// k * 2^-24 relative). A bound below FLT_MAX proves the value finite, so free of NaN. Bounds grow
// along a chain; where one is too loose for a check, the value is scanned and its exact maximum
// replaces the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "capsule/plugin.hpp"

namespace capsule::onednn {

/// How a node's result bound follows from the bounds of its inputs (ValueBounds::transfer).
enum class BoundRule {
    unknown,    // no bound is derived (log_softmax, an unfused batch_norm, ...)
    same,       // at most input 0's (relu, gelu, max and average pools)
    mean,       // at most input 0's, unless the sum of `inner` of them overflows (reduce_mean)
    unit,       // at most 1 (sigmoid, tanh, softmax)
    sum,        // at most the sum of the inputs' (add, sub)
    product,    // at most the product of the inputs' (mul)
    max_input,  // at most the largest input's (concat)
    affine,     // at most input 0's * weight + bias (conv2d, linear; clamp: weight 1, bias its limits)
    matmul,     // at most input 0's * input 1's * inner (the reduced dimension)
};

/// The constants of a rule: for `affine`, the largest row L1 norm of the weights (max_row_l1),
/// the largest |bias| and the terms per row (`inner`); for `matmul`, the length of the reduced
/// dimension; for `mean`, the elements of a window.
struct BoundTerms {
    BoundRule rule = BoundRule::unknown;
    double weight = 0, bias = 0;
    int64_t inner = 0;
};

/// The largest |value| of a float32 tensor view (contiguous storage of numel elements); +inf when
/// it holds a NaN or an infinity; 0 when empty.
double max_magnitude(const capsule_tensor_view& t);

/// max over rows o of sum_i |w[o, i]| for a float32 weight tensor [O, ...] (contiguous); +inf
/// when a row holds a NaN or an infinity, or the tensor has rank 0.
double max_row_l1(const capsule_tensor_view& w);

/// `bound` widened for the rounding of one node that sums `terms` products (see the file
/// comment); +inf when the result exceeds FLT_MAX.
double widened(double bound, int64_t terms = 0);

/// The bounds of one run's values, indexed as the group's values. Not thread-safe: one per run.
class ValueBounds {
public:
    /// A bound not derived and not measured.
    static constexpr double kUnknown = -1;

    /// Every value unknown.
    void reset(std::size_t num_values);
    /// The bound of value `v`: kUnknown, a finite upper bound of max|v|, or +inf (may hold NaN).
    double get(std::size_t v) const { return bound_[v]; }
    /// True when `v`'s bound is known and below FLT_MAX: it holds no NaN and no infinity.
    bool finite(std::size_t v) const;
    /// True when `v` was scanned this run (its bound is exact).
    bool measured(std::size_t v) const { return measured_[v] != 0; }
    /// Scans `t` (value `v`) and stores its exact max|value|; returns it.
    double measure(std::size_t v, const capsule_tensor_view& t);
    /// Stores `bound` for `v` (a transfer's result: already widened).
    void set(std::size_t v, double bound) { bound_[v] = bound; }
    /// The bound of a node's result under `terms` from the bounds of its inputs `inputs`:
    /// kUnknown when an input's bound is unknown or the rule is; +inf when an input's is +inf or
    /// the result may exceed FLT_MAX; otherwise widened by 2^-6.
    double transfer(const BoundTerms& terms, std::span<const std::size_t> inputs) const;

private:
    std::vector<double> bound_;
    std::vector<char> measured_;
};

}  // namespace capsule::onednn
