// Reference kernels of the random ops: rand_uniform (torch.rand) and bernoulli_mask
// (torch.bernoulli). Forward only (no VJP).
//
// Generator: counter-based, so a value depends only on (op, seed, flat element index) — never on
// threads, call order or earlier calls. For element i of a call with attribute `seed` (default 0):
//
//   key  = splitmix64_mix(uint64(seed) ^ STREAM)           STREAM differs per op (see below)
//   bits = splitmix64_mix(key + (i + 1) * 0x9E3779B97F4A7C15)
//
// where splitmix64_mix is the SplitMix64 output function (Steele, Lea & Flood 2014):
//   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//   z ^ (z >> 31).
// i.e. `bits` is the (i+1)-th output of a SplitMix64 generator started at `key`. The uniform
// value is u = (bits >> 40) * 2^-24 for float32 and u = (bits >> 11) * 2^-53 for float64, so
// 0 <= u < 1 exactly. bernoulli_mask compares the float64 form against p: out = u < p ? 1 : 0, so
// p = 0 gives 0 and p = 1 gives 1 always. The same seed gives the same values on every call; a
// tensor of N elements is the first N values of the stream.
//
// The values are this plugin's own: they are not bit-identical to PyTorch's generator (no plugin
// can match torch's Philox/MT streams without reimplementing them); the distribution is the same.
#include <cmath>
#include <string>
#include <string_view>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kStreamUniform = 0x5241'4E44'5F55'4E49ull;    // "RAND_UNI"
constexpr uint64_t kStreamBernoulli = 0x4245'524E'4F55'4C4Cull;  // "BERNOULL"

constexpr uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

constexpr uint64_t stream_key(int64_t seed, uint64_t stream) {
    return mix(static_cast<uint64_t>(seed) ^ stream);
}

constexpr uint64_t bits_at(uint64_t key, uint64_t index) { return mix(key + (index + 1) * kGolden); }

inline float uniform_f32(uint64_t bits) { return float(bits >> 40) * 0x1.0p-24f; }
inline double uniform_f64(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

}  // namespace

// rand_uniform: no inputs; attributes shape (required), seed (default 0), dtype ("float32" or
// "float64", default float32). Values uniform in [0, 1).
void rand_uniform_forward(const ForwardCall& call) {
    require(call.num_inputs() == 0, [&] {
        return "rand_uniform expects no inputs, got " + std::to_string(call.num_inputs());
    });
    const auto attrs = call.attrs();
    require(attrs.has("shape"), "rand_uniform: missing attribute 'shape' (list of integers)");
    const auto shape = attrs.get_ints_view("shape");
    const int64_t seed = attrs.get_int("seed", 0);
    const std::string_view dtype = attrs.get_string_view("dtype", "float32");
    require(dtype == "float32" || dtype == "float64", [&] {
        return "rand_uniform: attribute 'dtype' = '" + std::string(dtype) +
               "' must be one of float32, float64";
    });
    const Tensor out = call.output(0);
    check_view(out, "rand_uniform: output",
               dtype == "float64" ? CAPSULE_DTYPE_FLOAT64 : CAPSULE_DTYPE_FLOAT32);
    check_shape(out, "rand_uniform: output", shape);
    const uint64_t key = stream_key(seed, kStreamUniform);
    const int64_t n = out.numel();
    if (out.dtype() == CAPSULE_DTYPE_FLOAT32) {
        float* o = out.data<float>();
        for (int64_t i = 0; i < n; ++i) o[i] = uniform_f32(bits_at(key, uint64_t(i)));
    } else {
        double* o = out.data<double>();
        for (int64_t i = 0; i < n; ++i) o[i] = uniform_f64(bits_at(key, uint64_t(i)));
    }
}

// bernoulli_mask: one input p (probabilities, float32/float64); out[i] = 1 with probability p[i],
// else 0, in p's dtype. As torch.bernoulli, every p must lie in [0, 1] (NaN is refused).
void bernoulli_mask_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "bernoulli_mask");
    const Tensor p = call.input(0);
    check_float(p, "bernoulli_mask: input");
    const Tensor out = call.output(0);
    check_like(out, "bernoulli_mask: output", p, "the input");
    const uint64_t key = stream_key(call.attrs().get_int("seed", 0), kStreamBernoulli);
    const int64_t n = p.numel();
    dispatch_float(p.dtype(), [&]<typename T>(T) {
        const T* pp = p.data<const T>();
        T* o = out.data<T>();
        for (int64_t i = 0; i < n; ++i) {
            const double prob = double(pp[i]);
            if (!(prob >= 0.0 && prob <= 1.0)) [[unlikely]]
                fail(CAPSULE_ERROR_INVALID_DATA, "bernoulli_mask: probability " + std::to_string(prob) + " at element " +
                     std::to_string(i) + " is outside [0, 1]");
            o[i] = uniform_f64(bits_at(key, uint64_t(i))) < prob ? T(1) : T(0);
        }
    });
}

}  // namespace capsule::reference
