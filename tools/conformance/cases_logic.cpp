// Conformance cases of the comparisons, the logical ops and cast. Comparisons run on every dtype
// (NaN compares false); logical ops need bool inputs; cast covers every conversion rule of
// docs/ops.md, including its runtime errors.
//
// Every expected value is written out by hand; none is produced by a kernel.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

namespace capsule::conformance {
namespace {

using builders::kInf;
using builders::kNaN;
using builders::make;
using builders::with_grad;
using S = std::string;

void comparison_cases(std::vector<KernelCase>& out) {
    // [2, 1] against [3]: row r compares r + 1 with 1, 2, 3
    out.push_back(make("equal/int64_broadcast", BackendOp::equal,
                       {i64({2, 1}, {1, 2}), i64({3}, {1, 2, 3})},
                       boolean({2, 3}, {1, 0, 0, 0, 1, 0})));
    out.push_back(make("equal/nan_and_signed_zero", BackendOp::equal,
                       {f32({4}, {1, kNaN, 0, -0.0}), f32({4}, {1, kNaN, -0.0, 1})},
                       boolean({4}, {1, 0, 1, 0})));
    out.push_back(make("equal/bool", BackendOp::equal,
                       {boolean({3}, {1, 0, 1}), boolean({3}, {1, 1, 0})}, boolean({3}, {1, 0, 0})));
    const auto v = f32({4}, {1, 2, 3, kNaN});
    const auto two = f32({}, {2});
    out.push_back(make("less/scalar_and_nan", BackendOp::less, {v, two}, boolean({4}, {1, 0, 0, 0})));
    out.push_back(make("less_equal/scalar_and_nan", BackendOp::less_equal, {v, two},
                       boolean({4}, {1, 1, 0, 0})));
    out.push_back(make("greater/scalar_and_nan", BackendOp::greater, {v, two},
                       boolean({4}, {0, 0, 1, 0})));
    out.push_back(make("greater_equal/scalar_and_nan", BackendOp::greater_equal, {v, two},
                       boolean({4}, {0, 1, 1, 0})));
    out.push_back(make("less/int64", BackendOp::less, {i64({3}, {-5, 0, 5}), i64({3}, {0, 0, 0})},
                       boolean({3}, {1, 0, 0})));
    out.push_back(make("greater/f64_infinities", BackendOp::greater,
                       {f64({3}, {kInf, -kInf, 1}), f64({3}, {1e308, -1e308, 1})},
                       boolean({3}, {1, 0, 0})));
    out.push_back(make("greater_equal/bool_order", BackendOp::greater_equal,
                       {boolean({2}, {0, 1}), boolean({2}, {1, 0})}, boolean({2}, {0, 1})));
    out.push_back(make("less/empty", BackendOp::less, {f32({0}, {}), f32({1}, {1})},
                       boolean({0}, {})));
}

void logical_cases(std::vector<KernelCase>& out) {
    out.push_back(make("logical_not/values", BackendOp::logical_not, {boolean({3}, {1, 0, 1})},
                       boolean({3}, {0, 1, 0})));
    // [2, 1] = [[1], [0]] against [2] = [1, 0]
    const auto a = boolean({2, 1}, {1, 0});
    const auto b = boolean({2}, {1, 0});
    out.push_back(make("logical_and/broadcast", BackendOp::logical_and, {a, b},
                       boolean({2, 2}, {1, 0, 0, 0})));
    out.push_back(make("logical_or/broadcast", BackendOp::logical_or, {a, b},
                       boolean({2, 2}, {1, 1, 1, 0})));
    out.push_back(make("logical_xor/broadcast", BackendOp::logical_xor, {a, b},
                       boolean({2, 2}, {0, 1, 1, 0})));
    // is_inf: ONNX's test_isinf input, then each detect_* flag alone (NaN and finite never).
    const auto x = f32({6}, {-1.2, kNaN, kInf, 2.8, -kInf, kInf});
    out.push_back(make("is_inf/both_signs", BackendOp::is_inf, {x}, boolean({6}, {0, 0, 1, 0, 1, 1})));
    out.push_back(make("is_inf/positive_only", BackendOp::is_inf, {x}, boolean({6}, {0, 0, 1, 0, 0, 1}),
                       {{"detect_negative", false}}));
    out.push_back(make("is_inf/negative_only_f64", BackendOp::is_inf,
                       {f64({2, 2}, {-kInf, 1e308, kInf, -0.0})}, boolean({2, 2}, {1, 0, 0, 0}),
                       {{"detect_positive", false}}));
    out.push_back(make("is_inf/neither", BackendOp::is_inf, {x}, boolean({6}, {0, 0, 0, 0, 0, 0}),
                       {{"detect_negative", false}, {"detect_positive", false}}));
}

void cast_cases(std::vector<KernelCase>& out) {
    out.push_back(make("cast/float_to_int64_truncates", BackendOp::cast,
                       {f32({6}, {1.9, -1.9, 0.5, -0.5, 3, -1e9})},
                       i64({6}, {1, -1, 0, 0, 3, -1000000000}), {{"to", S("int64")}}));
    out.push_back(make("cast/float_to_bool", BackendOp::cast, {f32({4}, {0, -0.0, kNaN, 0.25})},
                       boolean({4}, {0, 0, 1, 1}), {{"to", S("bool")}}));
    out.push_back(make("cast/bool_to_float64", BackendOp::cast, {boolean({2}, {1, 0})},
                       f64({2}, {1, 0}), {{"to", S("float64")}}));
    // 2^24 + 1 is not a float32: it rounds to even, 2^24
    out.push_back(make("cast/int64_to_float32_rounds", BackendOp::cast,
                       {i64({2}, {16777217, -3})}, f32({2}, {16777216, -3}), {{"to", S("float32")}}));
    out.push_back(make("cast/float64_to_float32_overflow", BackendOp::cast,
                       {f64({3}, {1e300, -1e300, 0.5})}, f32({3}, {kInf, -kInf, 0.5}),
                       {{"to", S("float32")}}));
    out.push_back(make("cast/int64_to_bool", BackendOp::cast, {i64({3}, {0, 5, -1})},
                       boolean({3}, {0, 1, 1}), {{"to", S("bool")}}));
    out.push_back(make("cast/same_dtype_int64", BackendOp::cast, {i64({2}, {-7, 9})},
                       i64({2}, {-7, 9}), {{"to", S("int64")}}));
    out.push_back(with_grad(make("cast/float32_to_float64", BackendOp::cast,
                                 {f32({3}, {1.5, -2, 0.25})}, f64({3}, {1.5, -2, 0.25}),
                                 {{"to", S("float64")}})));
    // No gradient flows through an int64 result: 0 (and finite differences agree away from
    // integers).
    out.push_back(with_grad(make("cast/float64_to_int64_zero_gradient", BackendOp::cast,
                                 {f64({2}, {1.5, -2.25})}, i64({2}, {1, -2}), {{"to", S("int64")}})));
}

void error_cases(std::vector<KernelCase>& out) {
    out.push_back(error_case("logical_and/error_float_input", BackendOp::logical_and,
                             {f32({2}, {1, 0}), boolean({2}, {1, 0})},
                             "logical_and: input 0 has dtype float32, expected bool",
                             boolean({2}, {})));
    out.push_back(error_case("equal/error_dtype_mismatch", BackendOp::equal,
                             {f32({2}, {1, 0}), i64({2}, {1, 0})},
                             "equal: input 1 has dtype int64, expected float32", boolean({2}, {})));
    out.push_back(error_case("cast/error_nan_to_int64", BackendOp::cast, {f32({3}, {1, kNaN, 2})},
                             "cast: element 1 = nan has no int64 value", {},
                             {{"to", S("int64")}}));
    out.push_back(error_case("cast/error_too_large_for_int64", BackendOp::cast,
                             {f64({2}, {0, 1e19})}, "cast: element 1 = ", {},
                             {{"to", S("int64")}}));
    out.push_back(error_case("cast/error_bad_target", BackendOp::cast, {f32({1}, {1})},
                             "cast: attribute 'to' = 'float8' must be one of float32, float64, "
                             "int64, bool, int32",
                             f32({1}, {}), {{"to", S("float8")}}));
}

}  // namespace

std::vector<KernelCase> logic_cases() {
    std::vector<KernelCase> out;
    comparison_cases(out);
    logical_cases(out);
    cast_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
