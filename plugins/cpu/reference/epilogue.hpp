// What a producing kernel applies to its output as it writes it, block by block while the block
// is in cache: the reference plugin's compiled groups (compiled_group.cpp) fuse an inference
// batch_norm and/or a relu or clamp that alone read a convolution's result into the convolution
// this way. The formulas are the ones the batch_norm, relu and clamp kernels use (norm.cpp and
// elementwise.cpp call batch_norm_of, relu_of and clamp_of too), so a fused result is the same
// bits as node by node.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

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

/// batch_norm's per-element formula, in double: (x - mean) · scale + shift, subtracting first
/// (keeps the digits that x · scale - mean · scale would cancel when |mean| dwarfs the spread).
template <typename T>
inline T batch_norm_of(T x, double mean, double scale, double shift) {
    return T((double(x) - mean) * scale + shift);
}

/// clamp's attributes: `min` and/or `max` (at least one), as doubles.
struct ClampBounds {
    bool has_lo, has_hi;
    double lo, hi;
};
/// Reads them; KernelError when neither is given or one is not a number.
ClampBounds clamp_bounds(const plugin::Attributes& attrs);

/// What a kernel applies to each value it writes: an inference batch norm (per output channel:
/// mean = running mean, scale = weight / sqrt(running var + eps), shift = bias, as batch_norm's
/// kernel computes them), then nothing, relu, or clamp to [lo, hi] (a missing clamp bound is
/// infinite; the bounds are converted to the tensor's dtype as clamp_forward does).
struct Epilogue {
    enum class Kind : uint8_t { none, relu, clamp };
    Kind kind = Kind::none;
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
    bool batch_norm = false;
    std::vector<double> mean, scale, shift;  // per channel, with batch_norm
    bool active() const { return batch_norm || kind != Kind::none; }
};

/// Sets `e`'s batch norm from a reference.batch_norm node's prepare call (its parameters with
/// data): false, leaving `e` as it was, for training mode or a dtype other than float32 / float64.
/// KernelError for the attributes or parameters the kernel itself refuses. (norm.cpp)
bool batch_norm_epilogue(const plugin::PrepareCall& call, Epilogue& e);

/// p[i] = act(bn(p[i])) for the n values at p: one pass (each value loaded and stored once).
template <bool BN, typename T, typename Act>
[[gnu::always_inline]] inline void epilogue_pass(T* __restrict p, int64_t n, double mean,
                                                 double scale, double shift, Act act) {
    for (int64_t i = 0; i < n; ++i) p[i] = act(BN ? batch_norm_of(p[i], mean, scale, shift) : p[i]);
}

/// Applies `e` to the n values at p (float32 or float64) of output channel `channel`, in place.
template <typename T>
void apply_epilogue(const Epilogue& e, int64_t channel, T* __restrict p, int64_t n) {
    double mean = 0, scale = 1, shift = 0;
    if (e.batch_norm) {
        const auto c = static_cast<std::size_t>(channel);
        mean = e.mean[c], scale = e.scale[c], shift = e.shift[c];
    }
    auto pass = [&](auto act) {
        if (e.batch_norm)
            epilogue_pass<true>(p, n, mean, scale, shift, act);
        else
            epilogue_pass<false>(p, n, mean, scale, shift, act);
    };
    switch (e.kind) {
        case Epilogue::Kind::none:
            if (e.batch_norm) pass([](T x) { return x; });
            return;
        case Epilogue::Kind::relu: return pass([](T x) { return relu_of(x); });
        case Epilogue::Kind::clamp: {
            const T lo = static_cast<T>(e.lo), hi = static_cast<T>(e.hi);
            return pass([lo, hi](T x) { return clamp_of(x, lo, hi); });
        }
    }
}

}  // namespace capsule::reference
