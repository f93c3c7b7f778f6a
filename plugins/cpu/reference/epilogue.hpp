// An activation that a producing kernel applies to its output as it writes it, block by block
// while the block is in cache: the reference plugin's compiled groups (compiled_group.cpp) fuse a
// relu or clamp that alone reads a convolution's result into the convolution this way. The
// formulas are the ones the relu and clamp kernels use (elementwise.cpp calls relu_of and
// clamp_of too), so a fused result is the same bits as node by node.
#pragma once

#include <cstdint>
#include <limits>

#include "capsule/plugin.hpp"

namespace capsule::reference {

/// torch.relu: x < 0 ? 0 : x, so relu(NaN) = NaN and relu(-0) = -0.
template <typename T>
inline T relu_of(T x) {
    return x < T(0) ? T(0) : x;
}

/// torch.clamp(x, lo, hi) = min(max(x, lo), hi) with the bounds already in x's type: with lo > hi
/// every value is hi, and NaN passes through (both comparisons are false).
template <typename T>
inline T clamp_of(T x, T lo, T hi) {
    const T y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/// clamp's attributes: `min` and/or `max` (at least one), as doubles.
struct ClampBounds {
    bool has_lo, has_hi;
    double lo, hi;
};
/// Reads them; KernelError when neither is given or one is not a number.
ClampBounds clamp_bounds(const plugin::Attributes& attrs);

/// What a kernel applies to each value it writes: nothing, relu, or clamp to [lo, hi] (a missing
/// clamp bound is infinite; the bounds are converted to the tensor's dtype as clamp_forward does).
struct Epilogue {
    enum class Kind : uint8_t { none, relu, clamp };
    Kind kind = Kind::none;
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
};

/// Applies `e` to the n values at p (float32 or float64), in place.
template <typename T>
void apply_epilogue(const Epilogue& e, T* __restrict p, int64_t n) {
    switch (e.kind) {
        case Epilogue::Kind::none: return;
        case Epilogue::Kind::relu:
            for (int64_t i = 0; i < n; ++i) p[i] = relu_of(p[i]);
            return;
        case Epilogue::Kind::clamp: {
            const T lo = static_cast<T>(e.lo), hi = static_cast<T>(e.hi);
            for (int64_t i = 0; i < n; ++i) p[i] = clamp_of(p[i], lo, hi);
            return;
        }
    }
}

}  // namespace capsule::reference
