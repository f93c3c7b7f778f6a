#include "value_bounds.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace capsule::onednn {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kFloatMax = std::numeric_limits<float>::max();
constexpr double kWidening = 1.0 / 64;  // see the header: rounding of one node

/// The widening factor of a node that sums `terms` products (see the header).
double widening(int64_t terms) { return 1.0 + std::max(kWidening, 2.0 * double(terms) * 0x1p-24); }

int64_t numel(const capsule_tensor_view& t) { return plugin::Tensor{&t}.numel(); }

}  // namespace

double widened(double bound, int64_t terms) {
    const double b = bound * widening(terms);
    return b <= kFloatMax ? b : kInfinity;
}

double max_magnitude(const capsule_tensor_view& t) {
    // One pass over the IEEE bits without the sign: for finite values their order as integers is
    // the order of the magnitudes, and an infinity or a NaN is at least 0x7f800000. Blocks of 16
    // with independent maxima let the compiler use vector max.
    const auto* bits = static_cast<const uint32_t*>(t.data);
    const int64_t n = numel(t);
    uint32_t lanes[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) lanes[j] = std::max(lanes[j], bits[i + j] & 0x7fffffffu);
    uint32_t m = *std::max_element(lanes, lanes + 16);
    for (; i < n; ++i) m = std::max(m, bits[i] & 0x7fffffffu);
    if (m >= 0x7f800000u) return kInfinity;
    float f;
    std::memcpy(&f, &m, sizeof f);
    return f;
}

double max_row_l1(const capsule_tensor_view& w) {
    if (w.rank < 1) return kInfinity;
    const auto* v = static_cast<const float*>(w.data);
    const int64_t rows = w.shape[0], per_row = rows > 0 ? numel(w) / rows : 0;
    double bound = 0;
    for (int64_t o = 0; o < rows; ++o) {
        double sum = 0;
        for (int64_t i = 0; i < per_row; ++i) sum += std::fabs(double(v[o * per_row + i]));
        if (!std::isfinite(sum)) return kInfinity;  // a NaN or an infinity in the row
        bound = std::max(bound, sum);
    }
    return bound;
}

void ValueBounds::reset(std::size_t num_values) {
    bound_.assign(num_values, kUnknown);
    measured_.assign(num_values, 0);
}

bool ValueBounds::finite(std::size_t v) const { return bound_[v] >= 0 && bound_[v] <= kFloatMax; }

double ValueBounds::measure(std::size_t v, const capsule_tensor_view& t) {
    measured_[v] = 1;
    return bound_[v] = max_magnitude(t);
}

double ValueBounds::transfer(const BoundTerms& terms, std::span<const std::size_t> inputs) const {
    if (terms.rule == BoundRule::unknown || inputs.empty()) return kUnknown;
    for (auto v : inputs)
        if (bound_[v] < 0) return kUnknown;
    for (auto v : inputs)
        if (!(bound_[v] <= kFloatMax)) return kInfinity;  // may hold NaN: so may the result
    const double first = bound_[inputs[0]];
    double result = 0;
    int64_t summed = 0;  // products per element, for the widening
    switch (terms.rule) {
        case BoundRule::same: result = first; break;
        case BoundRule::mean:
            if (!(first * double(terms.inner) * widening(terms.inner) <= kFloatMax)) return kInfinity;
            result = first;
            summed = terms.inner;  // the float32 sum's rounding, kept by the division
            break;
        case BoundRule::unit: result = 1; break;
        case BoundRule::sum:
            for (auto v : inputs) result += bound_[v];
            break;
        case BoundRule::product:
            result = 1;
            for (auto v : inputs) result *= bound_[v];
            break;
        case BoundRule::max_input:
            for (auto v : inputs) result = std::max(result, bound_[v]);
            break;
        case BoundRule::affine:
            if (!(terms.weight < kInfinity && terms.bias < kInfinity)) return kInfinity;
            result = first * terms.weight + terms.bias;
            summed = terms.inner;
            break;
        case BoundRule::matmul:
            if (inputs.size() < 2) return kUnknown;
            result = first * bound_[inputs[1]] * double(terms.inner);
            summed = terms.inner;
            break;
        case BoundRule::unknown: return kUnknown;
    }
    return widened(result, summed);
}

}  // namespace capsule::onednn
