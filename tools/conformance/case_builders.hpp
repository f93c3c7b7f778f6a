// Helpers the conformance case files share to build their cases: element counts, deterministic
// input values, the values as a kernel sees them, and KernelCase constructors. Each case file
// picks what it uses with using-declarations; what differs between families (the seed salt of
// the value generator, the tolerances) is a parameter, so every case keeps its exact inputs,
// expected values and tolerances.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "conformance/harness.hpp"

namespace capsule::conformance::builders {

using V = std::vector<double>;
using Ints = std::vector<std::int64_t>;
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Number of elements of a shape.
inline std::int64_t count(const Shape& s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
}

/// Deterministic values in [-1, 1], multiples of 1/64 (exact in float32), from a small LCG.
/// `salt` distinguishes the streams of different case files.
inline V values(std::int64_t n, std::uint64_t seed, std::uint64_t salt) {
    V out(static_cast<std::size_t>(n));
    std::uint64_t s = seed * 2654435761u + salt;
    for (auto& v : out) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v = double(std::int64_t((s >> 33) % 129) - 64) / 64.0;
    }
    return out;
}

/// A tensor of dtype `d` and shape `s` filled with values(count(s), seed, salt).
inline CaseTensor random(DType d, Shape s, std::uint64_t seed, std::uint64_t salt) {
    const auto n = count(s);
    return {d, std::move(s), values(n, seed, salt)};
}

/// The values as the kernel sees them: float32 inputs are rounded to float.
inline V seen(const CaseTensor& t) {
    V out = t.values;
    if (t.dtype == DType::float32)
        for (auto& v : out) v = double(float(v));
    return out;
}

/// A case with the default tolerances of KernelCase and no parameters.
inline KernelCase make(std::string name, BackendOp op, std::vector<CaseTensor> inputs,
                       CaseTensor expected, Attributes attrs = {}) {
    KernelCase c;
    c.name = std::move(name);
    c.op = op;
    c.inputs = std::move(inputs);
    c.expected = std::move(expected);
    c.attrs = std::move(attrs);
    return c;
}

/// rtol = atol by the dtype of the expected output.
struct Tolerances {
    double float32;
    double other;
};

/// A case with parameters whose rtol and atol are tol.float32 when the expected output is
/// float32, else tol.other.
inline KernelCase make(std::string name, BackendOp op, std::vector<CaseTensor> inputs,
                       std::vector<CaseTensor> params, CaseTensor expected, Attributes attrs,
                       Tolerances tol) {
    KernelCase c =
        make(std::move(name), op, std::move(inputs), std::move(expected), std::move(attrs));
    c.params = std::move(params);
    const double t = c.expected.dtype == DType::float32 ? tol.float32 : tol.other;
    c.rtol = t;
    c.atol = t;
    return c;
}

/// The case, with its gradient checked as well.
inline KernelCase with_grad(KernelCase c) {
    c.check_gradient = true;
    return c;
}

}  // namespace capsule::conformance::builders
