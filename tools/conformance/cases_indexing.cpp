// Conformance cases of the indexing ops of ONNX import: where, concat (any axis), gather (ONNX
// Gather), gather_elements (ONNX GatherElements), slice (ONNX Slice), pad (ONNX Pad), cumsum (ONNX
// CumSum), tile and triu / tril. They move (or add up) elements, so they are also checked on int64
// and bool tensors; index inputs are int64 and get no gradient.
//
// Every expected value is written out by hand (the index arithmetic is in the comments); none is
// produced by a kernel.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

namespace capsule::conformance {
namespace {

using builders::Ints;
using builders::kNaN;
using builders::make;
using builders::V;
using builders::with_grad;
using I = std::int64_t;
using S = std::string;
constexpr I kMax = std::numeric_limits<I>::max();
constexpr I kMin = std::numeric_limits<I>::min();

void where_cases(std::vector<KernelCase>& out) {
    // condition [2, 1] x [3] x [] -> [2, 3]: row 0 takes x, row 1 takes y
    out.push_back(with_grad(make("where/broadcast_all_three", BackendOp::where,
                                 {boolean({2, 1}, {1, 0}), f32({3}, {1, 2, 3}), f32({}, {-1})},
                                 f32({2, 3}, {1, 2, 3, -1, -1, -1}))));
    out.push_back(with_grad(make("where/same_shape_f64", BackendOp::where,
                                 {boolean({4}, {1, 0, 0, 1}), f64({4}, {1, 2, 3, 4}),
                                  f64({4}, {5, 6, 7, 8})},
                                 f64({4}, {1, 6, 7, 4}))));
    // condition [3] over x [2, 3]: column-wise choice
    out.push_back(with_grad(make("where/condition_row", BackendOp::where,
                                 {boolean({3}, {0, 1, 0}), f32({2, 3}, {1, 2, 3, 4, 5, 6}),
                                  f32({2, 1}, {-1, -2})},
                                 f32({2, 3}, {-1, 2, -1, -2, 5, -2}))));
    // ONNX test_where_long_example
    out.push_back(make("where/int64", BackendOp::where,
                       {boolean({2, 2}, {1, 0, 1, 1}), i64({2, 2}, {1, 2, 3, 4}),
                        i64({2, 2}, {9, 8, 7, 6})},
                       i64({2, 2}, {1, 8, 3, 4})));
    out.push_back(make("where/bool_values", BackendOp::where,
                       {boolean({3}, {1, 0, 1}), boolean({3}, {0, 0, 1}), boolean({}, {1})},
                       boolean({3}, {0, 1, 1})));
    out.push_back(make("where/nan_not_chosen", BackendOp::where,
                       {boolean({2}, {1, 0}), f32({2}, {1, kNaN}), f32({2}, {kNaN, 2})},
                       f32({2}, {1, 2})));
    out.push_back(make("where/empty", BackendOp::where,
                       {boolean({0, 1}, {}), f32({1, 3}, {1, 2, 3}), f32({3}, {4, 5, 6})},
                       f32({0, 3}, {})));
}

void concat_cases(std::vector<KernelCase>& out) {
    out.push_back(with_grad(make("concat/axis1", BackendOp::concat,
                                 {f32({2, 2}, {1, 2, 3, 4}), f32({2, 1}, {5, 6})},
                                 f32({2, 3}, {1, 2, 5, 3, 4, 6}), {{"axis", I(1)}})));
    out.push_back(with_grad(make("concat/axis0_three_f64", BackendOp::concat,
                                 {f64({1, 2}, {1, 2}), f64({2, 2}, {3, 4, 5, 6}), f64({1, 2}, {7, 8})},
                                 f64({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), {{"axis", I(-2)}})));
    // [2, 1, 2] ++ [2, 2, 2] along 1: per batch, x's row then y's two rows
    out.push_back(with_grad(make("concat/middle_axis", BackendOp::concat,
                                 {f32({2, 1, 2}, {1, 2, 3, 4}),
                                  f32({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12})},
                                 f32({2, 3, 2}, {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}),
                                 {{"axis", I(1)}})));
    out.push_back(with_grad(make("concat/single_input", BackendOp::concat, {f32({3}, {1, 2, 3})},
                                 f32({3}, {1, 2, 3}), {{"axis", I(0)}})));
    // ONNX test_concat_2d_axis_1 on int64
    out.push_back(make("concat/int64_axis1", BackendOp::concat,
                       {i64({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {5, 6, 7, 8})},
                       i64({2, 4}, {1, 2, 5, 6, 3, 4, 7, 8}), {{"axis", I(1)}}));
    out.push_back(make("concat/bool_with_empty_part", BackendOp::concat,
                       {boolean({0, 2}, {}), boolean({1, 2}, {1, 0})}, boolean({1, 2}, {1, 0}),
                       {{"axis", I(0)}}));
    out.push_back(make("concat/all_empty", BackendOp::concat, {f32({2, 0}, {}), f32({2, 0}, {})},
                       f32({2, 0}, {}), {{"axis", I(1)}}));
}

void gather_cases(std::vector<KernelCase>& out) {
    // ONNX test_gather_0 pattern: rows 0, 1, 1, 2 (row 1 twice: its gradient accumulates)
    out.push_back(with_grad(make("gather/axis0_repeated_rows", BackendOp::gather,
                                 {f32({3, 2}, {1, 2, 3, 4, 5, 6}), i64({2, 2}, {0, 1, 1, 2})},
                                 f32({2, 2, 2}, {1, 2, 3, 4, 3, 4, 5, 6}))));
    out.push_back(with_grad(make("gather/axis1", BackendOp::gather,
                                 {f32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2}, {2, 0})},
                                 f32({2, 2}, {3, 1, 6, 4}), {{"axis", I(1)}})));
    out.push_back(with_grad(make("gather/negative_indices_f64", BackendOp::gather,
                                 {f64({4}, {10, 20, 30, 40}), i64({3}, {-1, -4, 1})},
                                 f64({3}, {40, 10, 20}))));
    out.push_back(with_grad(make("gather/last_axis_rank3", BackendOp::gather,
                                 {f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), i64({1}, {1})},
                                 f32({2, 2, 1}, {2, 4, 6, 8}), {{"axis", I(-1)}})));
    out.push_back(make("gather/rank0_index", BackendOp::gather,
                       {f32({3, 2}, {1, 2, 3, 4, 5, 6}), i64({}, {2})}, f32({2}, {5, 6})));
    out.push_back(make("gather/int64_data", BackendOp::gather,
                       {i64({5}, {5, 4, 3, 2, 1}), i64({2, 1}, {4, 0})}, i64({2, 1}, {1, 5})));
    out.push_back(make("gather/bool_data", BackendOp::gather,
                       {boolean({3}, {1, 0, 0}), i64({2}, {1, 0})}, boolean({2}, {0, 1})));
    out.push_back(make("gather/empty_indices", BackendOp::gather,
                       {f32({3}, {1, 2, 3}), i64({0}, {})}, f32({0}, {})));
}

// GatherElements: ONNX's own test values (test_gather_elements_0, _1, _negative_indices), a
// smaller index tensor than data, other dtypes.
void gather_elements_cases(std::vector<KernelCase>& out) {
    const auto m33 = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    out.push_back(with_grad(make("gather_elements/onnx_0_axis1", BackendOp::gather_elements,
                                 {f32({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {0, 0, 1, 0})},
                                 f32({2, 2}, {1, 1, 4, 3}), {{"axis", I(1)}})));
    out.push_back(with_grad(make("gather_elements/onnx_1_axis0", BackendOp::gather_elements,
                                 {m33, i64({2, 3}, {1, 2, 0, 2, 0, 0})}, f32({2, 3}, {4, 8, 3, 7, 2, 3}))));
    out.push_back(with_grad(make("gather_elements/negative_indices", BackendOp::gather_elements,
                                 {m33, i64({2, 3}, {-1, -2, 0, -2, 0, 0})}, f32({2, 3}, {7, 5, 3, 4, 2, 3}))));
    // indices smaller than data along the other axis and longer along `axis` (repeats accumulate).
    out.push_back(with_grad(make("gather_elements/rank3_last_axis_f64", BackendOp::gather_elements,
                                 {f64({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}),
                                  i64({2, 1, 4}, {2, 2, 0, -1, 1, 0, 0, 2})},
                                 f64({2, 1, 4}, {3, 3, 1, 3, 8, 7, 7, 9}), {{"axis", I(-1)}})));
    out.push_back(make("gather_elements/int64_data", BackendOp::gather_elements,
                       {i64({2, 2}, {10, 20, 30, 40}), i64({1, 2}, {1, 0})}, i64({1, 2}, {30, 20})));
    out.push_back(make("gather_elements/bool_data", BackendOp::gather_elements,
                       {boolean({3}, {1, 0, 0}), i64({4}, {1, 0, 0, 2})}, boolean({4}, {0, 1, 1, 0})));
    out.push_back(make("gather_elements/empty_indices", BackendOp::gather_elements,
                       {f32({2, 2}, {1, 2, 3, 4}), i64({2, 0}, {})}, f32({2, 0}, {}), {{"axis", I(1)}}));
}

// ScatterElements: ONNX's own test values (test_scatter_elements_with_axis, _without_axis,
// _with_negative_indices, _with_duplicate_indices), the other reductions, NaN under max, int64
// and bool data, an index out of range.
void scatter_elements_cases(std::vector<KernelCase>& out) {
    const auto zeros33 = f32({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0});
    out.push_back(with_grad(make("scatter_elements/onnx_without_axis", BackendOp::scatter_elements,
                                 {zeros33, i64({2, 3}, {1, 0, 2, 0, 2, 1}), f32({2, 3}, {1.0, 1.1, 1.2, 2.0, 2.1, 2.2})},
                                 f32({3, 3}, {2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2}))));
    const auto row = f32({1, 5}, {1, 2, 3, 4, 5});
    out.push_back(with_grad(make("scatter_elements/onnx_with_axis", BackendOp::scatter_elements,
                                 {row, i64({1, 2}, {1, 3}), f32({1, 2}, {1.1, 2.1})},
                                 f32({1, 5}, {1.0, 1.1, 3.0, 2.1, 5.0}), {{"axis", I(1)}})));
    out.push_back(with_grad(make("scatter_elements/onnx_negative_indices", BackendOp::scatter_elements,
                                 {row, i64({1, 2}, {1, -3}), f32({1, 2}, {1.1, 2.1})},
                                 f32({1, 5}, {1.0, 1.1, 2.1, 4.0, 5.0}), {{"axis", I(1)}})));
    // Repeated index 1 accumulates under add: 2 + 1.1 + 2.1.
    out.push_back(with_grad(make("scatter_elements/onnx_duplicate_indices_add", BackendOp::scatter_elements,
                                 {row, i64({1, 2}, {1, 1}), f32({1, 2}, {1.1, 2.1})},
                                 f32({1, 5}, {1.0, 5.2, 3.0, 4.0, 5.0}), {{"axis", I(1)}, {"reduction", S("add")}})));
    out.push_back(make("scatter_elements/mul_max_min_f64", BackendOp::scatter_elements,
                       {f64({4}, {2, 3, 4, 5}), i64({3}, {0, 0, 3}), f64({3}, {3, -0.5, 0.5})},
                       f64({4}, {-3, 3, 4, 2.5}), {{"reduction", S("mul")}}));
    out.push_back(make("scatter_elements/max_keeps_nan", BackendOp::scatter_elements,
                       {f32({3}, {1, kNaN, 3}), i64({3}, {0, 1, 2}), f32({3}, {kNaN, 7, 2})},
                       f32({3}, {kNaN, kNaN, 3}), {{"reduction", S("max")}}));
    out.push_back(make("scatter_elements/min_int64", BackendOp::scatter_elements,
                       {i64({3}, {5, -2, 9}), i64({4}, {0, 2, 2, 1}), i64({4}, {7, 4, 8, -3})},
                       i64({3}, {5, -3, 4}), {{"reduction", S("min")}}));
    out.push_back(make("scatter_elements/bool_data", BackendOp::scatter_elements,
                       {boolean({3}, {0, 0, 0}), i64({2}, {2, 0}), boolean({2}, {1, 1})}, boolean({3}, {1, 0, 1})));
    out.push_back(error_case("scatter_elements/error_index_out_of_range", BackendOp::scatter_elements,
                             {f32({3}, {1, 2, 3}), i64({1}, {3}), f32({1}, {9})},
                             "scatter_elements: index 3", f32({3}, {})));
}

void slice_cases(std::vector<KernelCase>& out) {
    const auto m34 = f32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    V r20(20);
    for (std::size_t i = 0; i < r20.size(); ++i) r20[i] = double(i);
    const auto m45 = f32({4, 5}, r20);
    // rows 0..1, columns 1..2
    out.push_back(with_grad(make("slice/rows_and_columns", BackendOp::slice, {m34},
                                 f32({2, 2}, {1, 2, 5, 6}),
                                 {{"starts", Ints{0, 1}}, {"ends", Ints{2, 3}}})));
    // axis 1 from 1 step 2 to the end: columns 1, 3; axis 0 step 2: rows 0, 2
    out.push_back(with_grad(make("slice/axes_and_steps", BackendOp::slice, {m45},
                                 f32({2, 2}, {1, 3, 11, 13}),
                                 {{"starts", Ints{1, 0}}, {"ends", Ints{kMax, 5}},
                                  {"axes", Ints{1, 0}}, {"steps", Ints{2, 2}}})));
    // ONNX test_slice_neg_steps pattern: start -1, end INT64_MIN, step -1 reverses the columns
    out.push_back(with_grad(make("slice/negative_step_reverses", BackendOp::slice, {m45},
                                 f32({4, 5}, {4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 14, 13, 12, 11, 10,
                                              19, 18, 17, 16, 15}),
                                 {{"starts", Ints{-1}}, {"ends", Ints{kMin}}, {"axes", Ints{-1}},
                                  {"steps", Ints{-1}}})));
    // start 1000 clamps to 9, end -1000 (+10 = -990) clamps to -1: 9, 6, 3, 0
    out.push_back(make("slice/negative_step_3_clamped", BackendOp::slice,
                       {f64({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}, f64({4}, {9, 6, 3, 0}),
                       {{"starts", Ints{1000}}, {"ends", Ints{-1000}}, {"steps", Ints{-3}}}));
    // end -1 means index n - 1 = 4 (not "before the front"): from 4 down to 4 is empty
    out.push_back(make("slice/negative_step_end_minus_one_is_empty", BackendOp::slice,
                       {f32({5}, {1, 2, 3, 4, 5})}, f32({0}, {}),
                       {{"starts", Ints{4}}, {"ends", Ints{-1}}, {"steps", Ints{-1}}}));
    out.push_back(make("slice/start_past_end_clamped_empty", BackendOp::slice,
                       {f32({5}, {1, 2, 3, 4, 5})}, f32({0}, {}),
                       {{"starts", Ints{10}}, {"ends", Ints{20}}}));
    out.push_back(make("slice/end_before_start_empty", BackendOp::slice,
                       {f32({5}, {1, 2, 3, 4, 5})}, f32({0}, {}),
                       {{"starts", Ints{3}}, {"ends", Ints{1}}}));
    out.push_back(make("slice/negative_start_end_int64", BackendOp::slice,
                       {i64({6}, {0, 1, 2, 3, 4, 5})}, i64({3}, {2, 3, 4}),
                       {{"starts", Ints{-4}}, {"ends", Ints{-1}}}));
    out.push_back(with_grad(make("slice/default_axes_prefix", BackendOp::slice,
                                 {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, f32({1, 3}, {4, 5, 6}),
                                 {{"starts", Ints{1}}, {"ends", Ints{2}}})));
    out.push_back(make("slice/bool_step_2", BackendOp::slice, {boolean({4}, {1, 0, 1, 1})},
                       boolean({2}, {0, 1}),
                       {{"starts", Ints{1}}, {"ends", Ints{4}}, {"steps", Ints{2}}}));
    out.push_back(make("slice/huge_step", BackendOp::slice, {f32({3}, {7, 8, 9})}, f32({1}, {8}),
                       {{"starts", Ints{1}}, {"ends", Ints{kMax}}, {"steps", Ints{kMax}}}));
}

void pad_cases(std::vector<KernelCase>& out) {
    // pads [x1_begin, x2_begin, x1_end, x2_end] = [1, 0, 0, 1]: a zero row on top, a zero column
    // on the right
    out.push_back(with_grad(make("pad/constant_2d", BackendOp::pad, {f32({2, 2}, {1, 2, 3, 4})},
                                 f32({3, 3}, {0, 0, 0, 1, 2, 0, 3, 4, 0}),
                                 {{"pads", Ints{1, 0, 0, 1}}})));
    out.push_back(make("pad/constant_value", BackendOp::pad, {f32({3}, {1, 2, 3})},
                       f32({6}, {1.5, 1.5, 1, 2, 3, 1.5}),
                       {{"pads", Ints{2, 1}}, {"value", 1.5}}));
    // numpy 'reflect': [3, 2, | 1, 2, 3 |, 2, 1]
    out.push_back(with_grad(make("pad/reflect", BackendOp::pad, {f32({3}, {1, 2, 3})},
                                 f32({7}, {3, 2, 1, 2, 3, 2, 1}),
                                 {{"pads", Ints{2, 2}}, {"mode", S("reflect")}})));
    // rows [1, 0, 1] (row -1 reflects to 1), columns [2, 1, 0, 1, 2]
    out.push_back(with_grad(make("pad/reflect_2d", BackendOp::pad,
                                 {f32({2, 3}, {1, 2, 3, 4, 5, 6})},
                                 f32({3, 5}, {6, 5, 4, 5, 6, 3, 2, 1, 2, 3, 6, 5, 4, 5, 6}),
                                 {{"pads", Ints{1, 2, 0, 0}}, {"mode", S("reflect")}})));
    // edge: one column before (copy of column 0), one row after (copy of row 1)
    out.push_back(with_grad(make("pad/edge_f64", BackendOp::pad, {f64({2, 2}, {1, 2, 3, 4})},
                                 f64({3, 3}, {1, 1, 2, 3, 3, 4, 3, 3, 4}),
                                 {{"pads", Ints{0, 1, 1, 0}}, {"mode", S("edge")}})));
    out.push_back(with_grad(make("pad/negative_crops", BackendOp::pad, {f32({4}, {1, 2, 3, 4})},
                                 f32({5}, {2, 3, 4, 0, 0}), {{"pads", Ints{-1, 2}}})));
    out.push_back(make("pad/int64_value", BackendOp::pad, {i64({2}, {5, 6})},
                       i64({4}, {-7, 5, 6, -7}), {{"pads", Ints{1, 1}}, {"value", I(-7)}}));
    out.push_back(make("pad/bool_value", BackendOp::pad, {boolean({2}, {1, 0})},
                       boolean({3}, {1, 0, 1}), {{"pads", Ints{0, 1}}, {"value", I(1)}}));
    out.push_back(make("pad/scalar", BackendOp::pad, {f32({}, {3})}, f32({}, {3}),
                       {{"pads", Ints{}}}));
    out.push_back(make("pad/empty_input", BackendOp::pad, {f32({0, 2}, {})}, f32({1, 2}, {0, 0}),
                       {{"pads", Ints{1, 0, 0, 0}}}));
}

void cumsum_cases(std::vector<KernelCase>& out) {
    const auto m23 = f32({2, 3}, {1, 2, 3, 4, 5, 6});
    out.push_back(with_grad(make("cumsum/axis1", BackendOp::cumsum, {m23},
                                 f32({2, 3}, {1, 3, 6, 4, 9, 15}), {{"axis", I(1)}})));
    out.push_back(with_grad(make("cumsum/axis0_exclusive", BackendOp::cumsum, {m23},
                                 f32({2, 3}, {0, 0, 0, 1, 2, 3}),
                                 {{"axis", I(0)}, {"exclusive", true}})));
    const auto v4 = f64({4}, {1, 2, 3, 4});
    out.push_back(with_grad(make("cumsum/reverse_f64", BackendOp::cumsum, {v4},
                                 f64({4}, {10, 9, 7, 4}), {{"axis", I(0)}, {"reverse", true}})));
    out.push_back(with_grad(make("cumsum/reverse_exclusive_f64", BackendOp::cumsum, {v4},
                                 f64({4}, {9, 7, 4, 0}),
                                 {{"axis", I(-1)}, {"reverse", true}, {"exclusive", true}})));
    out.push_back(make("cumsum/int64", BackendOp::cumsum, {i64({4}, {1, -2, 3, 10})},
                       i64({4}, {1, -1, 2, 12}), {{"axis", I(-1)}}));
    out.push_back(make("cumsum/nan_propagates", BackendOp::cumsum, {f32({3}, {1, kNaN, 2})},
                       f32({3}, {1, kNaN, kNaN}), {{"axis", I(0)}}));
    out.push_back(make("cumsum/empty", BackendOp::cumsum, {f32({0, 2}, {})}, f32({0, 2}, {}),
                       {{"axis", I(0)}}));
}

void tile_triangle_cases(std::vector<KernelCase>& out) {
    out.push_back(with_grad(make("tile/columns", BackendOp::tile, {f32({2, 2}, {1, 2, 3, 4})},
                                 f32({2, 4}, {1, 2, 1, 2, 3, 4, 3, 4}), {{"repeats", Ints{1, 2}}})));
    // [1, 2] repeated [3, 2]: three rows of [5, 6, 5, 6]; each input element is read 6 times
    out.push_back(with_grad(make("tile/both_axes_f64", BackendOp::tile, {f64({1, 2}, {5, 6})},
                                 f64({3, 4}, {5, 6, 5, 6, 5, 6, 5, 6, 5, 6, 5, 6}),
                                 {{"repeats", Ints{3, 2}}})));
    out.push_back(make("tile/int64", BackendOp::tile, {i64({3}, {1, 2, 3})},
                       i64({6}, {1, 2, 3, 1, 2, 3}), {{"repeats", Ints{2}}}));
    out.push_back(make("tile/zero_repeat", BackendOp::tile, {f32({2}, {1, 2})}, f32({0}, {}),
                       {{"repeats", Ints{0}}}));
    out.push_back(make("tile/bool_rank0", BackendOp::tile, {boolean({}, {1})}, boolean({}, {1}),
                       {{"repeats", Ints{}}}));
    const auto m33 = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    out.push_back(with_grad(make("triu/square", BackendOp::triu, {m33},
                                 f32({3, 3}, {1, 2, 3, 0, 5, 6, 0, 0, 9}))));
    out.push_back(with_grad(make("tril/square", BackendOp::tril, {m33},
                                 f32({3, 3}, {1, 0, 0, 4, 5, 0, 7, 8, 9}))));
    // k = 1: keep column - row >= 1
    out.push_back(with_grad(make("triu/k1_rectangular_f64", BackendOp::triu,
                                 {f64({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})},
                                 f64({3, 4}, {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}),
                                 {{"k", I(1)}})));
    // k = -1 on two 2x2 matrices: only element (1, 0) of each stays
    out.push_back(make("tril/k_minus1_batched_int64", BackendOp::tril,
                       {i64({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
                       i64({2, 2, 2}, {0, 0, 3, 0, 0, 0, 7, 0}), {{"k", I(-1)}}));
    // k = -1 on 3x2: row 2 keeps only column >= 1
    out.push_back(make("triu/bool_k_minus1", BackendOp::triu, {boolean({3, 2}, {1, 1, 1, 1, 1, 1})},
                       boolean({3, 2}, {1, 1, 1, 1, 0, 1}), {{"k", I(-1)}}));
    out.push_back(make("tril/huge_k_keeps_all", BackendOp::tril, {f32({2, 2}, {1, 2, 3, 4})},
                       f32({2, 2}, {1, 2, 3, 4}), {{"k", kMax}}));
    out.push_back(make("triu/huge_negative_k_keeps_all", BackendOp::triu,
                       {f32({2, 2}, {1, 2, 3, 4})}, f32({2, 2}, {1, 2, 3, 4}), {{"k", kMin}}));
}

void error_cases(std::vector<KernelCase>& out) {
    out.push_back(error_case("where/error_float_condition", BackendOp::where,
                             {f32({2}, {1, 0}), f32({2}, {1, 2}), f32({2}, {3, 4})},
                             "where: condition (input 0) has dtype float32, expected bool",
                             f32({2}, {})));
    out.push_back(error_case("where/error_shapes", BackendOp::where,
                             {boolean({3}, {1, 0, 1}), f32({2}, {1, 2}), f32({2}, {3, 4})},
                             "where: shapes [3] and [2] do not broadcast", f32({3}, {})));
    out.push_back(error_case("concat/error_shape_mismatch", BackendOp::concat,
                             {f32({2, 2}, V(4, 1.0)), f32({3, 3}, V(9, 1.0))},
                             "concat: input 1 has shape [3, 3]; every input must have input 0's "
                             "shape [2, 2] apart from axis 1",
                             f32({2, 5}, {}), {{"axis", I(1)}}));
    out.push_back(error_case("concat/error_missing_axis", BackendOp::concat,
                             {f32({2}, {1, 2})}, "concat: missing attribute 'axis' (integer)",
                             f32({2}, {})));
    out.push_back(error_case("gather/error_index_too_large", BackendOp::gather,
                             {f32({3}, {1, 2, 3}), i64({2}, {0, 3})},
                             "gather: index 3 at position 1 is out of range for axis 0 of size 3 "
                             "(valid: -3..2)"));
    out.push_back(error_case("gather/error_index_too_negative", BackendOp::gather,
                             {f32({2, 3}, V(6, 1.0)), i64({1}, {-4})},
                             "gather: index -4 at position 0 is out of range for axis 1 of size 3",
                             {}, {{"axis", I(1)}}));
    {
        auto c = error_case("gather/error_index_in_backward", BackendOp::gather,
                            {f32({2}, {1, 2}), i64({1}, {2})},
                            "gather: index 2 at position 0 is out of range");
        c.error_in_backward = true;
        out.push_back(std::move(c));
    }
    out.push_back(error_case("gather/error_float_indices", BackendOp::gather,
                             {f32({3}, {1, 2, 3}), f32({1}, {0})},
                             "gather: indices (input 1) has dtype float32, expected int64",
                             f32({1}, {})));
    out.push_back(error_case("gather_elements/error_index_too_large", BackendOp::gather_elements,
                             {f32({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {0, 1, 2, 0})},
                             "gather_elements: index 2 at position 2 is out of range for axis 0 of size 2 "
                             "(valid: -2..1)"));
    {
        auto c = error_case("gather_elements/error_index_in_backward", BackendOp::gather_elements,
                            {f32({2}, {1, 2}), i64({1}, {-3})},
                            "gather_elements: index -3 at position 0 is out of range");
        c.error_in_backward = true;
        out.push_back(std::move(c));
    }
    out.push_back(error_case("slice/error_zero_step", BackendOp::slice, {f32({3}, {1, 2, 3})},
                             "slice: attribute 'steps' has a 0 step", f32({3}, {}),
                             {{"starts", Ints{0}}, {"ends", Ints{3}}, {"steps", Ints{0}}}));
    out.push_back(error_case("slice/error_missing_ends", BackendOp::slice, {f32({3}, {1, 2, 3})},
                             "slice: missing attribute 'ends' (list of integers)", f32({3}, {}),
                             {{"starts", Ints{0}}}));
    out.push_back(error_case("pad/error_reflect_too_wide", BackendOp::pad, {f32({2}, {1, 2})},
                             "pad: mode 'reflect' needs pads smaller than the padded axis: axis 0 "
                             "has size 2",
                             f32({4}, {}), {{"pads", Ints{2, 0}}, {"mode", S("reflect")}}));
    out.push_back(error_case("pad/error_bad_mode", BackendOp::pad, {f32({2}, {1, 2})},
                             "pad: attribute 'mode' = 'wrap' must be one of constant, reflect, edge",
                             f32({3}, {}), {{"pads", Ints{1, 0}}, {"mode", S("wrap")}}));
    out.push_back(error_case("pad/error_pads_length", BackendOp::pad, {f32({2, 2}, V(4, 1.0))},
                             "pad: attribute 'pads' has 2 entries; rank 2 needs 4", f32({2, 2}, {}),
                             {{"pads", Ints{1, 1}}}));
    out.push_back(error_case("cumsum/error_missing_axis", BackendOp::cumsum, {f32({2}, {1, 2})},
                             "cumsum: missing attribute 'axis' (integer)", f32({2}, {})));
    out.push_back(error_case("tile/error_negative_repeat", BackendOp::tile, {f32({2}, {1, 2})},
                             "tile: attribute 'repeats' = [-1] has a negative entry", f32({0}, {}),
                             {{"repeats", Ints{-1}}}));
    out.push_back(error_case("triu/error_rank1", BackendOp::triu, {f32({3}, {1, 2, 3})},
                             "triu: input has shape [3]; expected rank >= 2", f32({3}, {})));
}

}  // namespace

std::vector<KernelCase> indexing_cases() {
    std::vector<KernelCase> out;
    where_cases(out);
    concat_cases(out);
    gather_cases(out);
    gather_elements_cases(out);
    scatter_elements_cases(out);
    slice_cases(out);
    pad_cases(out);
    cumsum_cases(out);
    tile_triangle_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
