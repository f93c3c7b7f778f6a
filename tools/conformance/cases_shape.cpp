// Conformance cases of the shape family: flatten, reshape, permutations, broadcastTo, concat,
// slice, gather and scatter_add. Shape ops move elements, so they are also checked on int64 and
// bool tensors; gather/scatter index inputs are int64 and get no gradient.
//
// Expected values are written out by hand or computed here by index arithmetic on the input
// values; never by a kernel.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

namespace capsule::conformance {
namespace {

using builders::Ints;
using builders::make;
using builders::V;
using builders::with_grad;

V ramp(std::size_t n, double start = 0, double step = 1) {
    V v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = start + step * double(i);
    return v;
}

/// Element values of `x` permuted: out.shape[i] = x.shape[perm[i]] (test-side index arithmetic).
CaseTensor permute_ref(const CaseTensor& x, const std::vector<std::size_t>& perm) {
    const Shape& s = x.shape;
    Shape out_shape;
    for (auto p : perm) out_shape.push_back(s[p]);
    V out(x.values.size());
    std::vector<std::int64_t> in_strides(s.size());
    std::int64_t stride = 1;
    for (std::size_t i = s.size(); i-- > 0;) {
        in_strides[i] = stride;
        stride *= s[i];
    }
    for (std::size_t o = 0; o < out.size(); ++o) {
        std::int64_t rem = std::int64_t(o), src = 0;
        for (std::size_t i = out_shape.size(); i-- > 0;) {
            const std::int64_t m = rem % out_shape[i];
            rem /= out_shape[i];
            src += m * in_strides[perm[i]];
        }
        out[o] = x.values[std::size_t(src)];
    }
    return {x.dtype, out_shape, out};
}

CaseTensor reshaped(CaseTensor x, Shape s) {
    x.shape = std::move(s);
    return x;
}

// ---- flatten, reshape ----

void reshape_cases(std::vector<KernelCase>& out) {
    const auto t234 = f32({2, 3, 4}, ramp(24, -5, 0.5));
    out.push_back(with_grad(make("flatten/default_start1", BackendOp::flatten, {t234}, reshaped(t234, {2, 12}))));
    out.push_back(with_grad(make("flatten/all", BackendOp::flatten, {t234}, reshaped(t234, {24}),
                                 {{"start_dim", std::int64_t(0)}})));
    out.push_back(make("flatten/middle_only_negative", BackendOp::flatten, {t234}, reshaped(t234, {6, 4}),
                       {{"start_dim", std::int64_t(-3)}, {"end_dim", std::int64_t(-2)}}));
    out.push_back(make("flatten/single_dim", BackendOp::flatten, {t234}, t234,
                       {{"start_dim", std::int64_t(1)}, {"end_dim", std::int64_t(1)}}));
    out.push_back(make("flatten/int64", BackendOp::flatten, {i64({2, 2, 2}, {1, -2, 3, 4, 5, 6, 7, 8})},
                       i64({2, 4}, {1, -2, 3, 4, 5, 6, 7, 8})));
    out.push_back(make("flatten/scalar", BackendOp::flatten, {f64({}, {7})}, f64({1}, {7}),
                       {{"start_dim", std::int64_t(0)}}));
    out.push_back(make("flatten/empty", BackendOp::flatten, {f32({2, 0, 3}, {})}, f32({2, 0}, {})));

    const auto m23 = f32({2, 3}, {1, 2, 3, 4, 5, 6});
    out.push_back(with_grad(make("reshape/transpose_shape", BackendOp::reshape, {m23}, reshaped(m23, {3, 2}),
                                 {{"shape", Ints{3, 2}}})));
    out.push_back(make("reshape/infer_minus_one", BackendOp::reshape, {m23}, reshaped(m23, {6}),
                       {{"shape", Ints{-1}}}));
    out.push_back(with_grad(make("reshape/size1_dims_f64", BackendOp::reshape, {f64({2, 3}, ramp(6, 0.5, 0.25))},
                                 f64({1, 2, 3, 1}, ramp(6, 0.5, 0.25)), {{"shape", Ints{1, -1, 3, 1}}})));
    out.push_back(make("reshape/bool", BackendOp::reshape, {boolean({4}, {1, 0, 0, 1})},
                       boolean({2, 2}, {1, 0, 0, 1}), {{"shape", Ints{2, 2}}}));
    out.push_back(make("reshape/to_scalar", BackendOp::reshape, {i64({1, 1}, {42})}, i64({}, {42}),
                       {{"shape", Ints{}}}));
    out.push_back(make("reshape/empty", BackendOp::reshape, {f32({0, 3}, {})}, f32({3, 0}, {}),
                       {{"shape", Ints{3, 0}}}));
}

// ---- permutations ----

void permute_cases(std::vector<KernelCase>& out) {
    const auto t234 = f32({2, 3, 4}, ramp(24, 1, 1));
    out.push_back(with_grad(make("permute/rank3", BackendOp::permute, {t234}, permute_ref(t234, {2, 0, 1}),
                                 {{"dims", Ints{2, 0, 1}}})));
    out.push_back(with_grad(make("permute/negative_dims_f64", BackendOp::permute,
                                 {f64({2, 3, 2}, ramp(12, -1, 0.3))},
                                 permute_ref(f64({2, 3, 2}, ramp(12, -1, 0.3)), {2, 0, 1}),
                                 {{"dims", Ints{-1, -3, -2}}})));
    {
        const auto t = f32({2, 1, 3, 2}, ramp(12, 0, 1));
        out.push_back(with_grad(make("permute/rank4_size1", BackendOp::permute, {t}, permute_ref(t, {3, 1, 0, 2}),
                                     {{"dims", Ints{3, 1, 0, 2}}})));
    }
    {
        // Larger than one cache tile in both moved dimensions, with ragged edges.
        const auto t = f32({3, 20, 37}, ramp(3 * 20 * 37, -100, 0.25));
        out.push_back(make("permute/tiled_rank3", BackendOp::permute, {t}, permute_ref(t, {2, 0, 1}),
                           {{"dims", Ints{2, 0, 1}}}));
        const auto u = f64({17, 2, 19}, ramp(17 * 2 * 19, 1, 1));
        out.push_back(make("permute/tiled_swap_outer_inner_f64", BackendOp::permute, {u},
                           permute_ref(u, {2, 1, 0}), {{"dims", Ints{2, 1, 0}}}));
        V bits(70 * 3);
        for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = double((i * 7) % 3 == 0);
        const auto w = boolean({70, 3}, bits);
        out.push_back(make("permute/tiled_bool", BackendOp::permute, {w}, permute_ref(w, {1, 0}),
                           {{"dims", Ints{1, 0}}}));
    }
    out.push_back(make("permute/identity", BackendOp::permute, {t234}, t234, {{"dims", Ints{0, 1, 2}}}));
    {
        const auto t = i64({2, 3}, {1, 2, 3, -4, 5, 1000000000000});
        out.push_back(make("permute/int64", BackendOp::permute, {t}, i64({3, 2}, {1, -4, 2, 5, 3, 1000000000000}),
                           {{"dims", Ints{1, 0}}}));
    }
    out.push_back(make("permute/scalar", BackendOp::permute, {f32({}, {3})}, f32({}, {3}), {{"dims", Ints{}}}));
    out.push_back(make("permute/empty", BackendOp::permute, {f32({2, 0, 3}, {})}, f32({3, 2, 0}, {}),
                       {{"dims", Ints{2, 0, 1}}}));

    // transpose2d: worked by hand
    out.push_back(with_grad(make("transpose2d/matrix", BackendOp::transpose2d, {f32({2, 3}, {1, 2, 3, 4, 5, 6})},
                                 f32({3, 2}, {1, 4, 2, 5, 3, 6}))));
    out.push_back(make("transpose2d/row_vector_bool", BackendOp::transpose2d, {boolean({1, 4}, {1, 0, 1, 1})},
                       boolean({4, 1}, {1, 0, 1, 1})));
    out.push_back(make("transpose2d/empty", BackendOp::transpose2d, {f32({0, 3}, {})}, f32({3, 0}, {})));
    {
        const auto t = f64({5, 7}, ramp(35, -3, 0.1));
        out.push_back(with_grad(make("transpose2d/f64", BackendOp::transpose2d, {t}, permute_ref(t, {1, 0}))));
        const auto big = i64({67, 41}, ramp(67 * 41, -1000, 1));
        out.push_back(make("transpose2d/tiled_int64", BackendOp::transpose2d, {big}, permute_ref(big, {1, 0})));
    }

    // swapAdjacentAtDepth(depth) = transpose(depth, depth + 1)
    out.push_back(with_grad(make("swapAdjacentAtDepth/depth1", BackendOp::swapAdjacentAtDepth, {t234},
                                 permute_ref(t234, {0, 2, 1}), {{"depth", std::int64_t(1)}})));
    out.push_back(with_grad(make("swapAdjacentAtDepth/depth0", BackendOp::swapAdjacentAtDepth, {t234},
                                 permute_ref(t234, {1, 0, 2}), {{"depth", std::int64_t(0)}})));
    {
        const auto t = i64({2, 2, 1, 3}, ramp(12, 10, 1));
        out.push_back(make("swapAdjacentAtDepth/int64_depth2", BackendOp::swapAdjacentAtDepth, {t},
                           permute_ref(t, {0, 1, 3, 2}), {{"depth", std::int64_t(2)}}));
    }
    out.push_back(make("swapAdjacentAtDepth/matrix_by_hand", BackendOp::swapAdjacentAtDepth,
                       {f32({2, 2}, {1, 2, 3, 4})}, f32({2, 2}, {1, 3, 2, 4}), {{"depth", std::int64_t(0)}}));

    // Fixed 3-D permutations; [2, 1, 2] values worked by hand as well.
    out.push_back(with_grad(make("transpose3d_first_to_last/rank3", BackendOp::transpose3d_first_to_last, {t234},
                                 permute_ref(t234, {1, 2, 0}))));
    out.push_back(make("transpose3d_first_to_last/by_hand", BackendOp::transpose3d_first_to_last,
                       {i64({2, 1, 2}, {1, 2, 3, 4})}, i64({1, 2, 2}, {1, 3, 2, 4})));
    out.push_back(with_grad(make("transpose3d_last_to_first/rank3", BackendOp::transpose3d_last_to_first, {t234},
                                 permute_ref(t234, {2, 0, 1}))));
    out.push_back(make("transpose3d_last_to_first/by_hand_bool", BackendOp::transpose3d_last_to_first,
                       {boolean({1, 2, 2}, {1, 0, 0, 0})}, boolean({2, 1, 2}, {1, 0, 0, 0})));
    out.push_back(with_grad(make("transpose3d_last_two/rank3", BackendOp::transpose3d_last_two, {t234},
                                 permute_ref(t234, {0, 2, 1}))));
    out.push_back(make("transpose3d_last_two/by_hand_f64", BackendOp::transpose3d_last_two,
                       {f64({1, 2, 3}, {1, 2, 3, 4, 5, 6})}, f64({1, 3, 2}, {1, 4, 2, 5, 3, 6})));
    out.push_back(make("transpose3d_last_two/empty", BackendOp::transpose3d_last_two, {f32({0, 2, 3}, {})},
                       f32({0, 3, 2}, {})));
}

// ---- broadcastTo, concat, slice ----

void layout_cases(std::vector<KernelCase>& out) {
    out.push_back(with_grad(make("broadcastTo/row", BackendOp::broadcastTo, {f32({3}, {1, 2, 3})},
                                 f32({2, 3}, {1, 2, 3, 1, 2, 3}), {{"shape", Ints{2, 3}}})));
    out.push_back(with_grad(make("broadcastTo/column", BackendOp::broadcastTo, {f32({2, 1}, {1, 2})},
                                 f32({2, 3}, {1, 1, 1, 2, 2, 2}), {{"shape", Ints{2, 3}}})));
    out.push_back(with_grad(make("broadcastTo/scalar_f64", BackendOp::broadcastTo, {f64({}, {2.5})},
                                 f64({2, 2}, {2.5, 2.5, 2.5, 2.5}), {{"shape", Ints{2, 2}}})));
    out.push_back(with_grad(make("broadcastTo/middle_axis", BackendOp::broadcastTo, {f32({2, 1, 2}, {1, 2, 3, 4})},
                                 f32({3, 2, 2, 2}, {1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4,
                                                    1, 2, 1, 2, 3, 4, 3, 4}),
                                 {{"shape", Ints{3, 2, 2, 2}}})));
    out.push_back(make("broadcastTo/same_shape", BackendOp::broadcastTo, {f32({2}, {5, 6})}, f32({2}, {5, 6}),
                       {{"shape", Ints{2}}}));
    out.push_back(make("broadcastTo/int64", BackendOp::broadcastTo, {i64({2, 1}, {7, -8})},
                       i64({2, 2}, {7, 7, -8, -8}), {{"shape", Ints{2, 2}}}));
    out.push_back(make("broadcastTo/bool", BackendOp::broadcastTo, {boolean({1}, {1})},
                       boolean({3}, {1, 1, 1}), {{"shape", Ints{3}}}));
    out.push_back(make("broadcastTo/to_empty", BackendOp::broadcastTo, {f32({1}, {4})}, f32({0}, {}),
                       {{"shape", Ints{0}}}));

    out.push_back(with_grad(make("concat_vectors/two", BackendOp::concat_vectors,
                                 {f32({2}, {1, 2}), f32({3}, {3, 4, 5})}, f32({5}, {1, 2, 3, 4, 5}))));
    out.push_back(with_grad(make("concat_vectors/three_f64_with_empty", BackendOp::concat_vectors,
                                 {f64({1}, {-1}), f64({0}, {}), f64({2}, {0.5, 8})}, f64({3}, {-1, 0.5, 8}))));
    out.push_back(make("concat_vectors/int64", BackendOp::concat_vectors,
                       {i64({2}, {1, 2}), i64({1}, {-3})}, i64({3}, {1, 2, -3})));
    out.push_back(make("concat_vectors/bool", BackendOp::concat_vectors,
                       {boolean({1}, {1}), boolean({2}, {0, 1})}, boolean({3}, {1, 0, 1})));
    out.push_back(make("concat_vectors/all_empty", BackendOp::concat_vectors, {f32({0}, {}), f32({0}, {})},
                       f32({0}, {})));

    out.push_back(with_grad(make("concat_leading_axis/matrices", BackendOp::concat_leading_axis,
                                 {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({1, 3}, {7, 8, 9})},
                                 f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))));
    out.push_back(with_grad(make("concat_leading_axis/rank3_three_inputs", BackendOp::concat_leading_axis,
                                 {f64({1, 2, 2}, {1, 2, 3, 4}), f64({2, 2, 2}, ramp(8, 5)),
                                  f64({1, 2, 2}, {-1, -2, -3, -4})},
                                 f64({4, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, -2, -3, -4}))));
    out.push_back(make("concat_leading_axis/vectors_int64", BackendOp::concat_leading_axis,
                       {i64({1}, {4}), i64({2}, {5, 6})}, i64({3}, {4, 5, 6})));
    out.push_back(make("concat_leading_axis/bool_with_empty", BackendOp::concat_leading_axis,
                       {boolean({0, 2}, {}), boolean({1, 2}, {0, 1})}, boolean({1, 2}, {0, 1})));

    const auto v5 = f32({5}, {10, 11, 12, 13, 14});
    out.push_back(with_grad(make("slice_leading_axis_range/middle", BackendOp::slice_leading_axis_range, {v5},
                                 f32({2}, {11, 12}), {{"start", std::int64_t(1)}, {"end", std::int64_t(3)}})));
    out.push_back(make("slice_leading_axis_range/negative_start", BackendOp::slice_leading_axis_range, {v5},
                       f32({2}, {13, 14}), {{"start", std::int64_t(-2)}}));
    out.push_back(make("slice_leading_axis_range/defaults", BackendOp::slice_leading_axis_range, {v5}, v5));
    out.push_back(make("slice_leading_axis_range/end_clamped", BackendOp::slice_leading_axis_range, {v5},
                       f32({2}, {13, 14}), {{"start", std::int64_t(3)}, {"end", std::int64_t(100)}}));
    out.push_back(make("slice_leading_axis_range/negative_end", BackendOp::slice_leading_axis_range, {v5},
                       f32({3}, {10, 11, 12}), {{"end", std::int64_t(-2)}}));
    out.push_back(make("slice_leading_axis_range/start_after_end", BackendOp::slice_leading_axis_range, {v5},
                       f32({0}, {}), {{"start", std::int64_t(4)}, {"end", std::int64_t(2)}}));
    out.push_back(make("slice_leading_axis_range/start_before_begin", BackendOp::slice_leading_axis_range, {v5},
                       f32({2}, {10, 11}), {{"start", std::int64_t(-100)}, {"end", std::int64_t(2)}}));
    out.push_back(with_grad(make("slice_leading_axis_range/rows_f64", BackendOp::slice_leading_axis_range,
                                 {f64({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}, f64({2, 2}, {3, 4, 5, 6}),
                                 {{"start", std::int64_t(1)}, {"end", std::int64_t(3)}})));
    out.push_back(make("slice_leading_axis_range/int64_rank3", BackendOp::slice_leading_axis_range,
                       {i64({3, 1, 2}, {1, 2, 3, 4, 5, 6})}, i64({1, 1, 2}, {5, 6}),
                       {{"start", std::int64_t(2)}}));
}

// ---- gather, scatter_add ----

void gather_scatter_cases(std::vector<KernelCase>& out) {
    const auto v5 = f32({5}, {10, 11, 12.5, -13, 14});
    out.push_back(with_grad(make("gather_scalar/index", BackendOp::gather_scalar, {v5}, f32({}, {12.5}),
                                 {{"index", std::int64_t(2)}})));
    out.push_back(with_grad(make("gather_scalar/negative_index", BackendOp::gather_scalar, {v5}, f32({}, {14}),
                                 {{"index", std::int64_t(-1)}})));
    out.push_back(make("gather_scalar/int64", BackendOp::gather_scalar, {i64({3}, {7, 8, 9})}, i64({}, {7}),
                       {{"index", std::int64_t(0)}}));
    out.push_back(make("gather_scalar/bool", BackendOp::gather_scalar, {boolean({2}, {0, 1})}, boolean({}, {1}),
                       {{"index", std::int64_t(1)}}));

    out.push_back(with_grad(make("gather_scalar_nat/index", BackendOp::gather_scalar_nat,
                                 {v5, i64({}, {3})}, f32({}, {-13}))));
    out.push_back(with_grad(make("gather_scalar_nat/first_f64", BackendOp::gather_scalar_nat,
                                 {f64({2}, {0.25, 0.5}), i64({}, {0})}, f64({}, {0.25}))));
    out.push_back(make("gather_scalar_nat/int64", BackendOp::gather_scalar_nat,
                       {i64({3}, {7, 8, 9}), i64({}, {2})}, i64({}, {9})));

    const auto m32 = f32({3, 2}, {1, 2, 3, 4, 5, 6});
    out.push_back(with_grad(make("gather_row/index", BackendOp::gather_row, {m32}, f32({2}, {3, 4}),
                                 {{"index", std::int64_t(1)}})));
    out.push_back(with_grad(make("gather_row/negative_index_f64", BackendOp::gather_row,
                                 {f64({3, 2}, {1, 2, 3, 4, 5, 6})}, f64({2}, {5, 6}),
                                 {{"index", std::int64_t(-1)}})));
    out.push_back(make("gather_row/int64", BackendOp::gather_row, {i64({2, 3}, {1, 2, 3, 4, 5, 6})},
                       i64({3}, {1, 2, 3}), {{"index", std::int64_t(0)}}));
    out.push_back(make("gather_row/empty_row", BackendOp::gather_row, {f32({2, 0}, {})}, f32({0}, {}),
                       {{"index", std::int64_t(1)}}));

    out.push_back(with_grad(make("gather_vec_nat/duplicates", BackendOp::gather_vec_nat,
                                 {v5, i64({4}, {0, 2, 2, 4})}, f32({4}, {10, 12.5, 12.5, 14}))));
    out.push_back(with_grad(make("gather_vec_nat/reverse_f64", BackendOp::gather_vec_nat,
                                 {f64({3}, {1.5, 2.5, 3.5}), i64({3}, {2, 1, 0})}, f64({3}, {3.5, 2.5, 1.5}))));
    out.push_back(make("gather_vec_nat/empty_index", BackendOp::gather_vec_nat, {v5, i64({0}, {})}, f32({0}, {})));
    out.push_back(make("gather_vec_nat/int64_values", BackendOp::gather_vec_nat,
                       {i64({3}, {-1, 5, 9}), i64({2}, {1, 1})}, i64({2}, {5, 5})));

    out.push_back(with_grad(make("gather_rows_nat/matrix", BackendOp::gather_rows_nat, {m32, i64({3}, {2, 0, 2})},
                                 f32({3, 2}, {5, 6, 1, 2, 5, 6}))));
    out.push_back(with_grad(make("gather_rows_nat/rank3_f64", BackendOp::gather_rows_nat,
                                 {f64({3, 2, 2}, ramp(12, 1)), i64({2}, {1, 1})},
                                 f64({2, 2, 2}, {5, 6, 7, 8, 5, 6, 7, 8}))));
    out.push_back(with_grad(make("gather_rows_nat/vector", BackendOp::gather_rows_nat,
                                 {f32({3}, {4, 5, 6}), i64({2}, {2, 0})}, f32({2}, {6, 4}))));
    out.push_back(make("gather_rows_nat/bool_rows", BackendOp::gather_rows_nat,
                       {boolean({2, 2}, {1, 0, 0, 1}), i64({1}, {1})}, boolean({1, 2}, {0, 1})));
    out.push_back(make("gather_rows_nat/empty_index", BackendOp::gather_rows_nat, {m32, i64({0}, {})},
                       f32({0, 2}, {})));

    out.push_back(with_grad(make("scatter_add_vec/duplicates", BackendOp::scatter_add_vec,
                                 {f32({5}, {1, 1, 1, 1, 1}), i64({3}, {0, 2, 2}), f32({3}, {1, 2, 3})},
                                 f32({5}, {2, 1, 6, 1, 1}))));
    out.push_back(with_grad(make("scatter_add_vec/f64", BackendOp::scatter_add_vec,
                                 {f64({3}, {0.5, -1, 2}), i64({2}, {2, 1}), f64({2}, {0.25, 4})},
                                 f64({3}, {0.5, 3, 2.25}))));
    out.push_back(make("scatter_add_vec/empty_index", BackendOp::scatter_add_vec,
                       {f32({2}, {3, 4}), i64({0}, {}), f32({0}, {})}, f32({2}, {3, 4})));
    out.push_back(make("scatter_add_vec/nan_source", BackendOp::scatter_add_vec,
                       {f32({2}, {3, 4}), i64({1}, {1}), f32({1}, {std::numeric_limits<double>::quiet_NaN()})},
                       f32({2}, {3, std::numeric_limits<double>::quiet_NaN()})));

    out.push_back(with_grad(make("scatter_add_row/duplicates", BackendOp::scatter_add_row,
                                 {f32({3, 2}, {1, 2, 3, 4, 5, 6}), i64({3}, {1, 1, 0}),
                                  f32({3, 2}, {10, 20, 30, 40, 50, 60})},
                                 f32({3, 2}, {51, 62, 43, 64, 5, 6}))));
    out.push_back(with_grad(make("scatter_add_row/f64", BackendOp::scatter_add_row,
                                 {f64({2, 3}, V(6, 0.0)), i64({1}, {1}), f64({1, 3}, {0.5, -0.5, 2})},
                                 f64({2, 3}, {0, 0, 0, 0.5, -0.5, 2}))));
    out.push_back(make("scatter_add_row/empty_base_rows", BackendOp::scatter_add_row,
                       {f32({0, 2}, {}), i64({0}, {}), f32({0, 2}, {})}, f32({0, 2}, {})));
}

/// Inputs the kernels must refuse, with (part of) the message they give.
void error_cases(std::vector<KernelCase>& out) {
    using I = std::int64_t;
    // index tensors: 0 <= i < n
    out.push_back(error_case("gather_vec_nat/error_index_too_large", BackendOp::gather_vec_nat,
                             {f32({4}, {1, 2, 3, 4}), i64({3}, {0, 4, 1})},
                             "gather_vec_nat: index 4 at position 1 is out of range for length 4 "
                             "(valid: 0..3)"));
    out.push_back(error_case("gather_vec_nat/error_negative_index", BackendOp::gather_vec_nat,
                             {f32({4}, {1, 2, 3, 4}), i64({2}, {2, -1})},
                             "gather_vec_nat: index -1 at position 1 is out of range for length 4"));
    out.push_back(error_case("gather_vec_nat/error_empty_source", BackendOp::gather_vec_nat,
                             {f32({0}, {}), i64({1}, {0})},
                             "gather_vec_nat: index 0 at position 0 is out of range for length 0"));
    out.push_back(error_case("gather_vec_nat/error_float_index", BackendOp::gather_vec_nat,
                             {f32({4}, {1, 2, 3, 4}), f32({1}, {0})},
                             "gather_vec_nat: index (input 1) has dtype float32, expected int64",
                             f32({1}, {})));
    out.push_back(error_case("gather_rows_nat/error_index_too_large", BackendOp::gather_rows_nat,
                             {f64({3, 2}, ramp(6)), i64({2}, {0, 3})},
                             "gather_rows_nat: index 3 at position 1 is out of range for length 3 "
                             "(valid: 0..2)"));
    out.push_back(error_case("gather_scalar_nat/error_negative_index",
                             BackendOp::gather_scalar_nat, {f32({3}, {1, 2, 3}), i64({}, {-2})},
                             "gather_scalar_nat: index -2 is out of range for length 3 (valid: 0..2)"));
    out.push_back(error_case("gather_scalar/error_index_out_of_range", BackendOp::gather_scalar,
                             {f32({3}, {1, 2, 3})},
                             "gather_scalar: attribute 'index' = 3 out of range for length 3",
                             f32({}, {}), {{"index", I(3)}}));
    out.push_back(error_case("gather_row/error_negative_index_out_of_range", BackendOp::gather_row,
                             {f32({2, 2}, {1, 2, 3, 4})},
                             "gather_row: attribute 'index' = -3 out of range for length 2",
                             f32({2}, {}), {{"index", I(-3)}}));
    out.push_back(error_case("scatter_add_vec/error_index_out_of_range", BackendOp::scatter_add_vec,
                             {f32({3}, {0, 0, 0}), i64({2}, {1, 3}), f32({2}, {1, 1})},
                             "scatter_add_vec: index 3 at position 1 is out of range for length 3 "
                             "(valid: 0..2)"));
    out.push_back(error_case("scatter_add_row/error_negative_index", BackendOp::scatter_add_row,
                             {f32({2, 2}, V(4, 0.0)), i64({1}, {-1}), f32({1, 2}, {1, 1})},
                             "scatter_add_row: index -1 at position 0 is out of range for length 2"));
    out.push_back(error_case("scatter_add_vec/error_source_shape", BackendOp::scatter_add_vec,
                             {f32({3}, {0, 0, 0}), i64({2}, {0, 1}), f32({3}, {1, 1, 1})},
                             "scatter_add_vec: source (input 2) has shape [3], expected [2]"));
    out.push_back(error_case("scatter_add_vec/error_int64_base", BackendOp::scatter_add_vec,
                             {i64({3}, {0, 0, 0}), i64({1}, {0}), i64({1}, {1})},
                             "scatter_add_vec: base (input 0) has dtype int64; expected float32 or "
                             "float64",
                             i64({3}, {})));
    // shape attributes
    out.push_back(error_case("reshape/error_element_count", BackendOp::reshape,
                             {f32({2, 3}, ramp(6))},
                             "reshape: cannot reshape [2, 3] (6 elements) to [4, 2]",
                             f32({4, 2}, {}), {{"shape", Ints{4, 2}}}));
    out.push_back(error_case("reshape/error_two_inferred_dims", BackendOp::reshape,
                             {f32({2, 3}, ramp(6))},
                             "reshape: attribute 'shape' = [-1, -1] has more than one -1",
                             f32({6}, {}), {{"shape", Ints{-1, -1}}}));
    out.push_back(error_case("permute/error_repeated_axis", BackendOp::permute,
                             {f32({2, 3}, ramp(6))},
                             "permute: attribute 'dims' = [0, -2] repeats axis 0", f32({2, 3}, {}),
                             {{"dims", Ints{0, -2}}}));
    out.push_back(error_case("permute/error_wrong_length", BackendOp::permute,
                             {f32({2, 3}, ramp(6))},
                             "permute: attribute 'dims' = [0] has 1 entries for rank 2",
                             f32({2}, {}), {{"dims", Ints{0}}}));
    out.push_back(error_case("transpose2d/error_rank3", BackendOp::transpose2d,
                             {f32({1, 2, 3}, ramp(6))},
                             "transpose2d expects an input of rank 2, got shape [1, 2, 3]",
                             f32({3, 2, 1}, {})));
    out.push_back(error_case("swapAdjacentAtDepth/error_depth_out_of_range",
                             BackendOp::swapAdjacentAtDepth, {f32({2, 3}, ramp(6))},
                             "swapAdjacentAtDepth: attribute 'depth' = 1 out of range for rank 2",
                             f32({2, 3}, {}), {{"depth", I(1)}}));
    out.push_back(error_case("flatten/error_start_after_end", BackendOp::flatten,
                             {f32({2, 3}, ramp(6))},
                             "flatten: start_dim 1 comes after end_dim 0 for shape [2, 3]",
                             f32({6}, {}), {{"start_dim", I(1)}, {"end_dim", I(0)}}));
    out.push_back(error_case("broadcastTo/error_not_broadcastable", BackendOp::broadcastTo,
                             {f32({3}, {1, 2, 3})}, "cannot broadcast [3] to [2, 2]",
                             f32({2, 2}, {}), {{"shape", Ints{2, 2}}}));
    out.push_back(error_case("concat_vectors/error_rank2_input", BackendOp::concat_vectors,
                             {f32({2, 2}, ramp(4)), f32({2, 2}, ramp(4))},
                             "concat_vectors: input 0 has shape [2, 2]; expected rank 1",
                             f32({4, 2}, {})));
    out.push_back(error_case("concat_vectors/error_dtype_mismatch", BackendOp::concat_vectors,
                             {f32({2}, {1, 2}), f64({2}, {3, 4})},
                             "concat_vectors: input 1 has dtype float64, expected float32",
                             f32({4}, {})));
    out.push_back(error_case("concat_leading_axis/error_trailing_mismatch",
                             BackendOp::concat_leading_axis,
                             {f32({1, 2}, {1, 2}), f32({1, 3}, {3, 4, 5})},
                             "concat_leading_axis: input 1 has shape [1, 3]; every input must have "
                             "input 0's shape [1, 2] apart from the leading dimension",
                             f32({2, 2}, {})));
}

}  // namespace

std::vector<KernelCase> shape_cases() {
    std::vector<KernelCase> out;
    reshape_cases(out);
    permute_cases(out);
    layout_cases(out);
    gather_scatter_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
