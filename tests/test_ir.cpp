// JSON IR parsing, well-formedness checks and shape inference (core/include/capsule/ir.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "capsule/ir.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;

namespace {

using Ints = std::vector<std::int64_t>;

TensorType F(Shape s) { return {std::move(s), DType::float32}; }
TensorType F64(Shape s) { return {std::move(s), DType::float64}; }
TensorType I64(Shape s) { return {std::move(s), DType::int64}; }
TensorType Bool(Shape s) { return {std::move(s), DType::boolean}; }

AttrValue n(std::int64_t v) { return AttrValue(std::in_place_type<std::int64_t>, v); }
AttrValue x(double v) { return AttrValue(std::in_place_type<double>, v); }
AttrValue b(bool v) { return AttrValue(std::in_place_type<bool>, v); }
AttrValue s(const char* v) { return AttrValue(std::in_place_type<std::string>, v); }
AttrValue l(std::initializer_list<std::int64_t> v) {
    return AttrValue(std::in_place_type<std::vector<std::int64_t>>, v);
}

Node op_node(std::string_view op, Attributes attrs = {}) {
    Node node;
    node.id = 1;
    node.kind = NodeKind::op;
    node.op = parse<BackendOp>(op);
    node.attrs = std::move(attrs);
    return node;
}

std::string infer_error(std::string_view op, const std::vector<TensorType>& parents,
                        Attributes attrs = {}) {
    try {
        auto t = infer_type(op_node(op, std::move(attrs)), parents);
        return "<no error; inferred " + to_string(t.shape) + ">";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        return e.what();
    }
}

template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        return e.what();
    }
    return "<no error>";
}

#define EXPECT_CONTAINS(text, part)                                             \
    do {                                                                        \
        const std::string text_ = (text);                                       \
        EXPECT_NE(text_.find(part), std::string::npos) << "message: " << text_; \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Shape inference, table-driven: one or more hand-computed cases for every BackendOp.

struct ShapeCase {
    const char* op;
    std::vector<TensorType> parents;
    Attributes attrs;
    TensorType expected;
};

// clang-format off
const std::vector<ShapeCase>& shape_cases() {
    static const std::vector<ShapeCase> cases = {
        {"rand_uniform", {}, {{"shape", l({2, 3})}, {"seed", n(7)}}, F({2, 3})},
        {"rand_uniform", {}, {{"shape", l({4})}, {"dtype", s("float64")}}, F64({4})},
        {"bernoulli_mask", {F({4, 5})}, {{"seed", n(1)}}, F({4, 5})},
        {"bernoulli_mask", {F64({3})}, {}, F64({3})},
        {"add", {F({2, 3}), F({3})}, {}, F({2, 3})},
        {"add", {F({4, 1, 3}), F({2, 1})}, {}, F({4, 2, 3})},
        {"sub", {F({5, 1}), F({1, 6})}, {}, F({5, 6})},
        {"mul", {F({}), F({2, 2})}, {}, F({2, 2})},
        {"mul", {F({0, 1}), F({1, 3})}, {}, F({0, 3})},
        {"scale", {F({3})}, {{"factor", x(0.5)}}, F({3})},
        {"scale", {F64({2, 2})}, {{"factor", n(2)}}, F64({2, 2})},
        {"abs", {F({2, 3})}, {}, F({2, 3})},
        {"sqrt", {F64({7})}, {}, F64({7})},
        {"clamp", {F({2, 3})}, {{"min", x(0.0)}, {"max", x(6.0)}}, F({2, 3})},
        {"clamp", {F({2})}, {{"min", n(-1)}}, F({2})},
        {"max", {F({2, 3}), F({2, 3})}, {}, F({2, 3})},
        {"min", {F({1}), F({4})}, {}, F({4})},
        {"relu", {F({4, 256})}, {}, F({4, 256})},
        {"gelu", {F({2, 8})}, {}, F({2, 8})},
        {"gelu", {F({2, 8})}, {{"approximate", s("tanh")}}, F({2, 8})},
        {"sigmoid", {F({5})}, {}, F({5})},
        {"tanh", {F({1, 2, 3})}, {}, F({1, 2, 3})},
        {"softplus", {F({3})}, {{"beta", x(2.0)}, {"threshold", x(10.0)}}, F({3})},
        {"exp", {F({})}, {}, F({})},
        {"log", {F({2, 2})}, {}, F({2, 2})},
        {"sin", {F({3})}, {}, F({3})},
        {"cos", {F({3})}, {}, F({3})},
        {"inv", {F64({4, 1})}, {}, F64({4, 1})},
        {"safe_log", {F({6})}, {{"eps", x(1e-6)}}, F({6})},
        {"log_softmax", {F({2, 5})}, {{"axis", n(1)}}, F({2, 5})},
        {"softmax", {F({3, 4})}, {}, F({3, 4})},
        {"softmax", {F({3, 4})}, {{"axis", n(-2)}}, F({3, 4})},
        {"sum", {F({2, 3, 4})}, {}, F({})},
        {"reduce_sum", {F({2, 3, 4})}, {{"axes", l({1})}}, F({2, 4})},
        {"reduce_sum", {F({2, 3, 4})}, {{"axes", l({-1})}, {"keepdims", b(true)}}, F({2, 3, 1})},
        {"reduce_mean", {F({2, 3, 4})}, {}, F({})},
        {"reduce_mean", {F({2, 3, 4})}, {{"axes", l({0, 2})}, {"keepdims", b(true)}}, F({1, 3, 1})},
        {"flatten", {F({2, 3, 4, 5})}, {}, F({2, 60})},
        {"flatten", {F({2, 3, 4, 5})}, {{"start_dim", n(0)}, {"end_dim", n(1)}}, F({6, 4, 5})},
        {"flatten", {I64({2, 3})}, {{"start_dim", n(0)}}, I64({6})},
        {"reshape", {F({2, 3, 4})}, {{"shape", l({4, -1})}}, F({4, 6})},
        {"reshape", {F({2, 3, 4})}, {{"shape", l({6, 4})}}, F({6, 4})},
        {"permute", {F({2, 3, 4})}, {{"dims", l({2, 0, 1})}}, F({4, 2, 3})},
        {"permute", {F({2, 3, 4})}, {{"dims", l({-1, 1, 0})}}, F({4, 3, 2})},
        {"transpose2d", {F({2, 3})}, {}, F({3, 2})},
        {"swapAdjacentAtDepth", {F({2, 3, 4, 5})}, {{"depth", n(1)}}, F({2, 4, 3, 5})},
        {"swapAdjacentAtDepth", {F({2, 3})}, {{"depth", n(0)}}, F({3, 2})},
        {"transpose3d_first_to_last", {F({2, 3, 4})}, {}, F({3, 4, 2})},
        {"transpose3d_last_to_first", {F({2, 3, 4})}, {}, F({4, 2, 3})},
        {"transpose3d_last_two", {F({2, 3, 4})}, {}, F({2, 4, 3})},
        {"broadcastTo", {F({3, 1})}, {{"shape", l({2, 3, 4})}}, F({2, 3, 4})},
        {"broadcastTo", {F({})}, {{"shape", l({5})}}, F({5})},
        {"concat_vectors", {F({2}), F({3}), F({4})}, {}, F({9})},
        {"concat_leading_axis", {F({2, 5}), F({3, 5})}, {}, F({5, 5})},
        {"concat_leading_axis", {F({1, 2, 2}), F({1, 2, 2}), F({2, 2, 2})}, {}, F({4, 2, 2})},
        {"slice_leading_axis_range", {F({10, 3})}, {{"start", n(2)}, {"end", n(5)}}, F({3, 3})},
        {"slice_leading_axis_range", {F({10, 3})}, {{"start", n(-3)}}, F({3, 3})},
        {"slice_leading_axis_range", {F({10})}, {{"start", n(8)}, {"end", n(100)}}, F({2})},
        {"slice_leading_axis_range", {F({10})}, {{"start", n(5)}, {"end", n(2)}}, F({0})},
        {"gather_scalar", {F({5})}, {{"index", n(4)}}, F({})},
        {"gather_scalar", {F({5})}, {{"index", n(-1)}}, F({})},
        {"gather_scalar_nat", {F({5}), I64({})}, {}, F({})},
        {"gather_row", {F({4, 7})}, {{"index", n(2)}}, F({7})},
        {"gather_vec_nat", {F({10}), I64({3})}, {}, F({3})},
        {"gather_rows_nat", {F({10, 4, 2}), I64({6})}, {}, F({6, 4, 2})},
        {"gather_rows_nat", {I64({10}), I64({2})}, {}, I64({2})},
        {"scatter_add_vec", {F({10}), I64({3}), F({3})}, {}, F({10})},
        {"scatter_add_row", {F({10, 4}), I64({3}), F({3, 4})}, {}, F({10, 4})},
        {"matmul", {F({2, 3}), F({3, 4})}, {}, F({2, 4})},
        {"matmul", {F({3}), F({3})}, {}, F({})},
        {"matmul", {F({3}), F({3, 4})}, {}, F({4})},
        {"matmul", {F({2, 3}), F({3})}, {}, F({2})},
        {"matmul", {F({5, 1, 2, 3}), F({4, 3, 6})}, {}, F({5, 4, 2, 6})},
        {"matmul", {F({3}), F({7, 3, 4})}, {}, F({7, 4})},
        {"matmul", {F64({7, 2, 3}), F64({3})}, {}, F64({7, 2})},
        {"bmm", {F({4, 2, 3}), F({4, 3, 5})}, {}, F({4, 2, 5})},
        {"linear", {F({4, 784})}, {{"out_features", n(256)}}, F({4, 256})},
        {"linear", {F({2, 5, 8})}, {{"out_features", n(3)}, {"bias", b(false)}}, F({2, 5, 3})},
        {"linear", {F({8})}, {{"out_features", n(3)}}, F({3})},
        {"mse_loss", {F({4, 3}), F({4, 3})}, {}, F({})},
        {"mse_loss", {F({4, 3}), F({4, 3})}, {{"reduction", s("none")}}, F({4, 3})},
        {"mse_loss", {F({4, 3}), F({4, 3})}, {{"reduction", s("sum")}}, F({})},
        {"cross_entropy", {F({4, 10}), I64({4})}, {}, F({})},
        {"cross_entropy", {F64({4, 10}), I64({4})}, {{"reduction", s("none")}, {"ignore_index", n(0)}}, F64({4})},
        {"layer_norm", {F({2, 5, 8})}, {{"normalized_shape", l({8})}}, F({2, 5, 8})},
        {"layer_norm", {F({2, 5, 8})}, {{"normalized_shape", l({5, 8})}, {"eps", x(1e-6)}},
         F({2, 5, 8})},
        {"batch_norm", {F({8, 3, 32, 32})}, {}, F({8, 3, 32, 32})},
        {"batch_norm", {F({8, 3})}, {{"training", b(true)}, {"momentum", x(0.2)}}, F({8, 3})},
        {"batchnorm_channel_first", {F({8, 3, 10})}, {{"eps", x(1e-3)}}, F({8, 3, 10})},
        // L = floor((100 + 2*1 - 1*(5-1) - 1) / 2) + 1 = 49
        {"conv", {F({2, 4, 100})},
         {{"out_channels", n(8)}, {"kernel_size", n(5)}, {"stride", n(2)}, {"padding", n(1)}},
         F({2, 8, 49})},
        // dilated kernel 2*(5-1)+1 = 9: floor((102 - 9) / 2) + 1 = 47
        {"conv", {F({2, 4, 100})},
         {{"out_channels", n(8)}, {"kernel_size", l({5})}, {"stride", n(2)}, {"padding", n(1)},
          {"dilation", n(2)}, {"groups", n(2)}},
         F({2, 8, 47})},
        {"conv2d", {F({1, 3, 32, 32})},
         {{"out_channels", n(16)}, {"kernel_size", n(3)}, {"padding", n(1)}},
         F({1, 16, 32, 32})},
        // H: (32 - 3) / 2 + 1 = 15; W: (32 + 4 - 5) / 1 + 1 = 32
        {"conv2d", {F({1, 3, 32, 32})},
         {{"out_channels", n(16)}, {"kernel_size", l({3, 5})}, {"stride", l({2, 1})},
          {"padding", l({0, 2})}},
         F({1, 16, 15, 32})},
        // (10-1)*2 - 2*1 + (3-1) + 1 + 1 = 20
        {"conv_transpose", {F({2, 4, 10})},
         {{"out_channels", n(6)}, {"kernel_size", n(3)}, {"stride", n(2)}, {"padding", n(1)},
          {"output_padding", n(1)}},
         F({2, 6, 20})},
        // (7-1)*2 - 2 + 3 + 1 = 14
        {"conv_transpose2d", {F({1, 8, 7, 7})},
         {{"out_channels", n(4)}, {"kernel_size", n(4)}, {"stride", n(2)}, {"padding", n(1)}},
         F({1, 4, 14, 14})},
        // H: (7-1)*1 + 2*(3-1) + 1 = 11; W: (7-1)*2 + 1*(4-1) + 1 = 16
        {"conv_transpose2d", {F({1, 8, 7, 7})},
         {{"out_channels", n(4)}, {"kernel_size", l({3, 4})}, {"stride", l({1, 2})},
          {"dilation", l({2, 1})}},
         F({1, 4, 11, 16})},
        {"max_pool", {F({2, 3, 10})}, {{"kernel_size", n(3)}}, F({2, 3, 3})},
        {"max_pool", {F({2, 3, 10})}, {{"kernel_size", n(3)}, {"stride", n(1)}}, F({2, 3, 8})},
        {"max_pool2d", {F({1, 6, 28, 28})}, {{"kernel_size", n(2)}}, F({1, 6, 14, 14})},
        {"max_pool2d", {F({1, 1, 7, 8})}, {{"kernel_size", l({3, 2})}, {"stride", l({2, 2})}},
         F({1, 1, 3, 4})},
        // (5 + 2 - 3) / 2 + 1 = 3
        {"max_pool2d_pad", {F({1, 1, 5, 5})},
         {{"kernel_size", n(3)}, {"stride", n(2)}, {"padding", n(1)}}, F({1, 1, 3, 3})},
        // ceil((6 - 3) / 2) + 1 = 3 (floor mode would give 2)
        {"max_pool2d_pad", {F({1, 1, 6, 6})},
         {{"kernel_size", n(3)}, {"stride", n(2)}, {"ceil_mode", b(true)}}, F({1, 1, 3, 3})},
        // ceil((5 + 2 - 2) / 2) + 1 = 4, but the last window would start in the right padding: 3
        {"max_pool2d_pad", {F({1, 1, 5, 5})},
         {{"kernel_size", n(2)}, {"stride", n(2)}, {"padding", n(1)}, {"ceil_mode", b(true)}},
         F({1, 1, 3, 3})},
        {"smooth_max_pool", {F({2, 3, 10})}, {{"kernel_size", n(2)}, {"temperature", x(0.5)}},
         F({2, 3, 5})},
        {"smooth_max_pool2d", {F({1, 2, 8, 8})}, {{"kernel_size", n(2)}, {"stride", n(2)}},
         F({1, 2, 4, 4})},
        // (9 - 3) / 2 + 1 = 4
        {"avg_pool", {F({1, 2, 9})}, {{"kernel_size", n(3)}, {"stride", n(2)}}, F({1, 2, 4})},
        {"avg_pool2d", {F({1, 3, 8, 8})}, {{"kernel_size", n(4)}}, F({1, 3, 2, 2})},
        // ceil((7 + 2 - 3) / 2) + 1 = 4
        {"avg_pool2d_pad", {F({1, 3, 7, 7})},
         {{"kernel_size", n(3)}, {"stride", n(2)}, {"padding", n(1)},
          {"count_include_pad", b(false)}, {"ceil_mode", b(true)}},
         F({1, 3, 4, 4})},
        {"fft_fno", {F({4, 3, 64})}, {{"modes", n(16)}, {"out_channels", n(5)}}, F({4, 5, 64})},
        {"selective_scan",
         {F({2, 8, 16}), F({2, 8, 16}), F({8, 4}), F({2, 4, 16}), F({2, 4, 16})},
         {{"delta_softplus", b(true)}},
         F({2, 8, 16})},
        {"scaled_dot_product_attention", {F({2, 4, 8, 16}), F({2, 4, 10, 16}), F({2, 4, 10, 32})},
         {}, F({2, 4, 8, 32})},
        {"scaled_dot_product_attention",
         {F({2, 8, 16}), F({2, 10, 16}), F({2, 10, 32}), Bool({8, 10})},
         {{"scale", x(0.125)}}, F({2, 8, 32})},
        {"scaled_dot_product_attention",
         {F({4, 16}), F({4, 16}), F({4, 16})}, {{"is_causal", b(true)}}, F({4, 16})},
        {"div", {F({2, 3}), F({3})}, {}, F({2, 3})},
        {"pow", {F64({4, 1}), F64({1, 5})}, {}, F64({4, 5})},
        {"neg", {F({2})}, {}, F({2})},
        {"erf", {F64({3, 3})}, {}, F64({3, 3})},
        {"where", {Bool({2, 1}), F({3}), F({})}, {}, F({2, 3})},
        {"where", {Bool({}), I64({4}), I64({4})}, {}, I64({4})},
        {"concat", {F({2, 3}), F({2, 5})}, {{"axis", n(1)}}, F({2, 8})},
        {"concat", {I64({1, 2}), I64({3, 2}), I64({0, 2})}, {{"axis", n(-2)}}, I64({4, 2})},
        {"concat", {Bool({4})}, {{"axis", n(0)}}, Bool({4})},
        // data[:axis] + indices.shape + data[axis+1:]
        {"gather", {F({5, 4, 3}), I64({2, 6})}, {{"axis", n(1)}}, F({5, 2, 6, 3})},
        {"gather", {I64({7}), I64({})}, {}, I64({})},
        {"gather_elements", {F({3, 3}), I64({2, 3})}, {}, F({2, 3})},
        {"hardmax", {F({2, 3})}, {{"axis", n(0)}}, F({2, 3})},
        {"top_k", {F({2, 5})}, {{"k", n(3)}}, I64({2, 3})},
        {"top_k", {I64({4, 2})}, {{"k", n(0)}, {"axis", n(0)}, {"largest", b(false)}}, I64({0, 2})},
        // [batches · classes · min(max_output_boxes_per_class, boxes), 3]
        {"non_max_suppression", {F({2, 6, 4}), F({2, 3, 6})}, {{"max_output_boxes_per_class", n(4)}}, I64({24, 3})},
        {"non_max_suppression", {F64({1, 2, 4}), F64({1, 5, 2})},
         {{"max_output_boxes_per_class", n(10)}, {"iou_threshold", x(0.5)}, {"center_point_box", n(1)}}, I64({10, 3})},
        {"non_zero", {Bool({2, 3, 4})}, {}, I64({3, 24})},
        {"non_zero", {F({0})}, {}, I64({1, 0})},
        {"det", {F({3, 3})}, {}, F({})},
        {"det", {F64({2, 4, 0, 0})}, {}, F64({2, 4})},
        {"pad", {I64({2})}, {{"pads", l({1, 1})}, {"value", n(std::numeric_limits<int64_t>::max())}}, I64({4})},
        {"shrink", {F64({4})}, {}, F64({4})},
        {"is_inf", {F({2, 3})}, {}, Bool({2, 3})},
        {"mod", {F({2, 3}), F({3})}, {{"fmod", b(true)}}, F({2, 3})},
        {"mod", {I64({4, 1}), I64({1, 5})}, {}, I64({4, 5})},
        {"scatter_elements", {F({3, 4}), I64({2, 5}), F({2, 5})}, {{"axis", n(1)}}, F({3, 4})},
        {"gather_elements", {Bool({2, 2}), I64({2, 5})}, {{"axis", n(-1)}}, Bool({2, 5})},
        // [1:3], [0:INT64_MAX:2] of 5 -> 2 and 3
        {"slice", {F({4, 5})}, {{"starts", l({1, 0})}, {"ends", l({3, INT64_MAX})}, {"steps", l({1, 2})}},
         F({2, 3})},
        // axis 1 from 4 down to (not including) INT64_MIN -> all 5, reversed; axis 0 untouched
        {"slice", {F({4, 5})}, {{"starts", l({-1})}, {"ends", l({INT64_MIN})}, {"axes", l({-1})},
          {"steps", l({-1})}}, F({4, 5})},
        // clamped: start 10 -> 5 gives nothing
        {"slice", {I64({5})}, {{"starts", l({10})}, {"ends", l({20})}}, I64({0})},
        // 1000 .. -1000 with step -3 on size 10: start clamps to 9, end to -1: 9, 6, 3, 0
        {"slice", {F({10})}, {{"starts", l({1000})}, {"ends", l({-1000})}, {"steps", l({-3})}}, F({4})},
        {"pad", {F({2, 3})}, {{"pads", l({1, 0, 1, 2})}}, F({4, 5})},
        {"pad", {F({3, 4})}, {{"pads", l({0, 2, 0, 3})}, {"mode", s("reflect")}}, F({3, 9})},
        {"pad", {I64({3, 4})}, {{"pads", l({-1, 1, 0, 1})}, {"mode", s("edge")}}, I64({2, 6})},
        {"pad", {I64({2})}, {{"pads", l({1, 1})}, {"value", n(-7)}}, I64({4})},
        {"reduce_max", {F({2, 3, 4})}, {{"axes", l({1})}}, F({2, 4})},
        {"reduce_min", {F64({2, 3})}, {{"keepdims", b(true)}}, F64({1, 1})},
        {"reduce_prod", {F({2, 3, 4})}, {{"axes", l({0, -1})}}, F({3})},
        {"argmax", {F({2, 3, 4})}, {}, I64({1, 3, 4})},
        {"argmax", {I64({2, 3})}, {{"axis", n(-1)}, {"keepdims", b(false)}}, I64({2})},
        {"argmin", {F64({5})}, {{"select_last_index", b(true)}, {"keepdims", b(false)}}, I64({})},
        {"argmin", {F({})}, {}, I64({})},
        {"floor", {F({2})}, {}, F({2})},
        {"ceil", {F64({2})}, {}, F64({2})},
        {"sign", {F({3, 1})}, {}, F({3, 1})},
        {"tan", {F({2})}, {}, F({2})},
        {"asin", {F({2})}, {}, F({2})},
        {"acos", {F({2})}, {}, F({2})},
        {"atan", {F({2})}, {}, F({2})},
        {"sinh", {F({2})}, {}, F({2})},
        {"cosh", {F({2})}, {}, F({2})},
        {"asinh", {F({2})}, {}, F({2})},
        {"acosh", {F({2})}, {}, F({2})},
        {"atanh", {F64({})}, {}, F64({})},
        {"leaky_relu", {F({2, 2})}, {{"negative_slope", x(0.1)}}, F({2, 2})},
        {"elu", {F({2})}, {{"alpha", n(2)}}, F({2})},
        {"selu", {F({2})}, {}, F({2})},
        {"celu", {F({2})}, {{"alpha", x(0.5)}}, F({2})},
        {"hardsigmoid", {F({2})}, {{"alpha", x(0.25)}, {"beta", x(0.25)}}, F({2})},
        {"hardswish", {F({2})}, {}, F({2})},
        {"softsign", {F({2})}, {}, F({2})},
        {"thresholded_relu", {F64({4})}, {{"alpha", x(0.5)}}, F64({4})},
        {"mish", {F({3})}, {}, F({3})},
        {"equal", {I64({2, 1}), I64({3})}, {}, Bool({2, 3})},
        {"less", {F({2}), F({})}, {}, Bool({2})},
        {"less_equal", {F64({2}), F64({2})}, {}, Bool({2})},
        {"greater", {Bool({4}), Bool({4})}, {}, Bool({4})},
        {"greater_equal", {F({1, 2}), F({3, 1})}, {}, Bool({3, 2})},
        {"logical_not", {Bool({2, 2})}, {}, Bool({2, 2})},
        {"logical_and", {Bool({2, 1}), Bool({2})}, {}, Bool({2, 2})},
        {"logical_or", {Bool({}), Bool({3})}, {}, Bool({3})},
        {"logical_xor", {Bool({3}), Bool({3})}, {}, Bool({3})},
        {"cast", {F({2, 3})}, {{"to", s("int64")}}, I64({2, 3})},
        {"cast", {Bool({2})}, {{"to", s("float64")}}, F64({2})},
        {"cumsum", {F({2, 3})}, {{"axis", n(-1)}, {"exclusive", b(true)}}, F({2, 3})},
        {"cumsum", {I64({4})}, {{"axis", n(0)}, {"reverse", b(true)}}, I64({4})},
        {"tile", {F({2, 3})}, {{"repeats", l({2, 0})}}, F({4, 0})},
        {"tile", {I64({1, 2, 3})}, {{"repeats", l({3, 1, 2})}}, I64({3, 2, 6})},
        {"triu", {F({3, 4})}, {{"k", n(1)}}, F({3, 4})},
        {"tril", {Bool({2, 3, 3})}, {}, Bool({2, 3, 3})},
    };
    return cases;
}
// clang-format on

TEST(ShapeInference, EveryCaseMatchesHandComputedShape) {
    for (const auto& c : shape_cases()) {
        SCOPED_TRACE(std::string(c.op) + " -> " + to_string(c.expected.shape));
        TensorType got;
        ASSERT_NO_THROW(got = infer_type(op_node(c.op, c.attrs), c.parents))
            << infer_error(c.op, c.parents, c.attrs);
        EXPECT_EQ(to_string(got.shape), to_string(c.expected.shape));
        EXPECT_EQ(to_string(got.dtype), to_string(c.expected.dtype));
    }
}

TEST(ShapeInference, EveryBackendOpHasACase) {
    std::set<std::string> covered;
    for (const auto& c : shape_cases()) covered.insert(c.op);
    for (auto op : all_values<BackendOp>())
        EXPECT_TRUE(is_optimizer_step(op) || covered.count(std::string(to_string(op))))
            << "no shape case for " << to_string(op);
}

TEST(ShapeInference, OnnxImportOpErrors) {
    EXPECT_CONTAINS(infer_error("div", {F({2}), F64({2})}), "parents have different dtypes");
    EXPECT_CONTAINS(infer_error("pow", {Bool({2}), Bool({2})}), "expected a float or integer dtype");
    EXPECT_CONTAINS(infer_error("mod", {I64({2}), F({2})}), "parents have different dtypes");
    EXPECT_CONTAINS(infer_error("mod", {Bool({2}), Bool({2})}), "expected a float or integer dtype");
    EXPECT_CONTAINS(infer_error("mod", {F({2}), F({3})}), "shapes [2] and [3] do not broadcast");
    EXPECT_CONTAINS(infer_error("scatter_elements", {F({3, 4}), I64({2, 5}), F({2, 4})}, {{"axis", n(1)}}),
                    "parent 2 (updates) has shape [2, 4]; expected indices' shape [2, 5]");
    EXPECT_CONTAINS(infer_error("scatter_elements", {F({3, 4}), I64({4, 2}), F({4, 2})}, {{"axis", n(1)}}),
                    "is larger than parent 0 (data) [3, 4] along axis 0");
    EXPECT_CONTAINS(infer_error("scatter_elements", {Bool({3}), I64({1}), Bool({1})}, {{"reduction", s("add")}}),
                    "needs float32, float64 or int64 data; got bool");
    EXPECT_CONTAINS(infer_error("where", {F({2}), F({2}), F({2})}),
                    "parent 0 (condition) has dtype float32; expected bool");
    EXPECT_CONTAINS(infer_error("where", {Bool({2}), F({2}), I64({2})}),
                    "parents have different dtypes: parent 1 is float32, parent 2 is int64");
    EXPECT_CONTAINS(infer_error("where", {Bool({3}), F({2}), F({2})}),
                    "shapes [3] and [2] do not broadcast");
    EXPECT_CONTAINS(infer_error("concat", {}, {{"axis", n(0)}}), "expects at least 1 parent, got 0");
    EXPECT_CONTAINS(infer_error("concat", {F({2, 3}), F({2, 3})}),
                    "missing attribute 'axis' (integer)");
    EXPECT_CONTAINS(infer_error("concat", {F({2, 3}), F({3, 4})}, {{"axis", n(1)}}),
                    "parent 1 has shape [3, 4]; every parent must have parent 0's shape [2, 3] "
                    "apart from axis 1");
    EXPECT_CONTAINS(infer_error("concat", {F({2, 3}), F({2, 3})}, {{"axis", n(2)}}),
                    "attribute 'axis' = 2 out of range for rank 2");
    EXPECT_CONTAINS(infer_error("concat", {F({}), F({})}, {{"axis", n(0)}}),
                    "expects parent 0 of rank >= 1, got shape []");
    EXPECT_CONTAINS(infer_error("gather", {F({3}), F({2})}),
                    "parent 1 (index) has dtype float32; expected int64");
    EXPECT_CONTAINS(infer_error("gather", {F({3, 2}), I64({2})}, {{"axis", n(-3)}}),
                    "attribute 'axis' = -3 out of range for rank 2");
    EXPECT_CONTAINS(infer_error("gather_elements", {F({3, 2}), I64({3})}),
                    "expects parent 1 (indices) of rank 2 (data's), got [3]");
    EXPECT_CONTAINS(infer_error("gather_elements", {F({3, 2}), I64({4, 2})}, {{"axis", n(1)}}),
                    "parent 1 (indices) of shape [4, 2] is larger than parent 0 (data) [3, 2] along axis 0 "
                    "(only axis 1 may differ)");
    EXPECT_CONTAINS(infer_error("gather_elements", {F({3}), F({2})}),
                    "parent 1 (index) has dtype float32; expected int64");
    EXPECT_CONTAINS(infer_error("slice", {F({4})}, {{"starts", l({0})}}),
                    "missing attribute 'ends'");
    EXPECT_CONTAINS(infer_error("slice", {F({4})}, {{"starts", l({0})}, {"ends", l({1, 2})}}),
                    "attributes 'starts' and 'ends' have different lengths (1 and 2)");
    EXPECT_CONTAINS(infer_error("slice", {F({4})}, {{"starts", l({0})}, {"ends", l({1})}, {"steps", l({0})}}),
                    "attribute 'steps' = [0] has a 0 step");
    EXPECT_CONTAINS(infer_error("slice", {F({4, 4})},
                                {{"starts", l({0, 0})}, {"ends", l({1, 1})}, {"axes", l({1, -1})}}),
                    "attribute 'axes' = [1, -1] repeats axis 1");
    EXPECT_CONTAINS(infer_error("slice", {F({4})}, {{"starts", l({0, 0})}, {"ends", l({1, 1})}}),
                    "attribute 'starts' has 2 entries for rank 1");
    EXPECT_CONTAINS(infer_error("pad", {F({2, 3})}, {{"pads", l({1, 1})}}),
                    "attribute 'pads' has 2 entries; rank 2 needs 4");
    EXPECT_CONTAINS(infer_error("pad", {F({2})}, {{"pads", l({-2, -1})}}),
                    "crops axis 0 (size 2) below 0");
    EXPECT_CONTAINS(infer_error("pad", {F({3})}, {{"pads", l({3, 0})}, {"mode", s("reflect")}}),
                    "mode 'reflect' needs pads smaller than the padded axis");
    EXPECT_CONTAINS(infer_error("pad", {F({0})}, {{"pads", l({1, 0})}, {"mode", s("edge")}}),
                    "mode 'edge' cannot pad axis 0 of size 0");
    EXPECT_CONTAINS(infer_error("pad", {F({2})}, {{"pads", l({1, 0})}, {"mode", s("wrap")}}),
                    "attribute 'mode' = 'wrap' must be one of constant, reflect, edge");
    EXPECT_CONTAINS(infer_error("pad", {F({2})}, {{"pads", l({1, 0})}, {"mode", s("edge")}, {"value", x(1.0)}}),
                    "attribute 'value' is only valid with mode 'constant'");
    EXPECT_CONTAINS(infer_error("pad", {I64({2})}, {{"pads", l({1, 0})}, {"value", x(0.5)}}),
                    "attribute 'value' = 0.5 is not an int64 value");
    EXPECT_CONTAINS(infer_error("pad", {F({2})}, {{"pads", l({INT64_MAX, 1})}}),
                    "integer overflow in shape arithmetic");
    EXPECT_CONTAINS(infer_error("reduce_max", {I64({2})}),
                    "parent 0 has dtype int64; expected a floating-point dtype (float32, float64, float16, bfloat16)");
    EXPECT_CONTAINS(infer_error("reduce_prod", {F({2, 3})}, {{"axes", l({})}}),
                    "attribute 'axes' is empty; omit it to reduce over every axis");
    EXPECT_CONTAINS(infer_error("argmax", {F({2, 0})}, {{"axis", n(1)}}),
                    "axis 1 has size 0 (input shape [2, 0]); there is no element to pick");
    EXPECT_CONTAINS(infer_error("top_k", {F({2, 4})}, {{"k", n(5)}}), "k 5 is outside [0, 4] (axis 1 of [2, 4])");
    EXPECT_CONTAINS(infer_error("top_k", {F({})}, {{"k", n(0)}}), "parent 0 is a scalar; top_k needs an axis");
    EXPECT_CONTAINS(infer_error("top_k", {F({3})}), "missing attribute 'k' (integer)");
    EXPECT_CONTAINS(infer_error("non_max_suppression", {F({1, 6, 3}), F({1, 1, 6})}, {{"max_output_boxes_per_class", n(1)}}),
                    "boxes [1, 6, 3] must be [batches, boxes, 4]");
    EXPECT_CONTAINS(infer_error("non_max_suppression", {F({1, 6, 4}), F({1, 1, 5})}, {{"max_output_boxes_per_class", n(1)}}),
                    "scores [1, 1, 5] must be [1, classes, 6] for boxes [1, 6, 4]");
    EXPECT_CONTAINS(infer_error("non_max_suppression", {F({1, 6, 4}), F({1, 1, 6})}), "missing attribute 'max_output_boxes_per_class'");
    EXPECT_CONTAINS(infer_error("non_max_suppression", {F({1, 6, 4}), F({1, 1, 6})},
                                {{"max_output_boxes_per_class", n(1)}, {"center_point_box", n(2)}}),
                    "center_point_box 2 must be 0 or 1");
    for (const double iou : {2.0, -0.5})  // ONNX: value range [0, 1]
        EXPECT_CONTAINS(infer_error("non_max_suppression", {F({1, 6, 4}), F({1, 1, 6})},
                                    {{"max_output_boxes_per_class", n(1)}, {"iou_threshold", x(iou)}}),
                        "must be in [0, 1]");
    EXPECT_CONTAINS(infer_error("non_zero", {F({})}), "parent 0 is a scalar; non_zero needs rank ≥ 1");
    EXPECT_CONTAINS(infer_error("det", {F({2, 3})}), "the last two axes of [2, 3] are not square");
    EXPECT_CONTAINS(infer_error("det", {I64({2, 2})}), "expected a floating-point dtype");
    EXPECT_CONTAINS(infer_error("argmin", {Bool({2})}),
                    "parent 0 has dtype bool; expected a float or integer dtype");
    EXPECT_CONTAINS(infer_error("argmax", {F({2})}, {{"axes", l({0})}}),
                    "unknown attribute 'axes'; valid: axis, keepdims, select_last_index");
    EXPECT_CONTAINS(infer_error("celu", {F({2})}, {{"alpha", x(0.0)}}),
                    "attribute 'alpha' = 0 must be a finite nonzero number");
    EXPECT_CONTAINS(infer_error("leaky_relu", {F({2})}, {{"negative_slope", x(std::numeric_limits<double>::infinity())}}),
                    "attribute 'negative_slope' = inf must be a finite number");
    EXPECT_CONTAINS(infer_error("leaky_relu", {F({2})}, {{"alpha", x(0.1)}}),
                    "unknown attribute 'alpha'; valid: negative_slope");
    EXPECT_CONTAINS(infer_error("floor", {I64({2})}),
                    "parent 0 has dtype int64; expected a floating-point dtype (float32, float64, float16, bfloat16)");
    EXPECT_CONTAINS(infer_error("equal", {F({2}), I64({2})}),
                    "parents have different dtypes: parent 0 is float32, parent 1 is int64");
    EXPECT_CONTAINS(infer_error("logical_and", {Bool({2}), F({2})}),
                    "parent 1 has dtype float32; expected bool");
    EXPECT_CONTAINS(infer_error("logical_not", {I64({2})}), "parent 0 has dtype int64; expected bool");
    EXPECT_CONTAINS(infer_error("cast", {F({2})}), "missing attribute 'to' (string)");
    EXPECT_CONTAINS(infer_error("cast", {F({2})}, {{"to", s("float8")}}),
                    "attribute 'to' = 'float8' must be one of float32, float64, float16, bfloat16, int64, int32, "
                    "int16, int8, uint64, uint32, uint16, uint8, bool");
    EXPECT_EQ(infer_type(op_node("cast", {{"to", s("uint8")}}), {F({2})}), (TensorType{{2}, DType::uint8}));
    EXPECT_CONTAINS(infer_error("cumsum", {F({2})}), "missing attribute 'axis' (integer)");
    EXPECT_CONTAINS(infer_error("cumsum", {Bool({2})}, {{"axis", n(0)}}),
                    "parent 0 has dtype bool; expected a float or integer dtype");
    EXPECT_CONTAINS(infer_error("tile", {F({2, 3})}, {{"repeats", l({2})}}),
                    "attribute 'repeats' has 1 entries for rank 2");
    EXPECT_CONTAINS(infer_error("tile", {F({2})}, {{"repeats", l({-1})}}),
                    "attribute 'repeats' = [-1] has a negative entry");
    EXPECT_CONTAINS(infer_error("triu", {F({3})}), "expects parent 0 of rank >= 2, got shape [3]");
}

TEST(ShapeInference, StructuralNodes) {
    Node input;
    input.kind = NodeKind::input;
    input.shape = {2, 3};
    input.dtype = DType::int64;
    EXPECT_EQ(infer_type(input, {}), I64({2, 3}));
    EXPECT_CONTAINS(error_of([&] { infer_type(input, {F({1})}); }), "expects no parents, got 1");

    Node constant;
    constant.kind = NodeKind::constant;
    constant.shape = {4};
    EXPECT_EQ(infer_type(constant, {}), F({4}));
    constant.attrs["value"] = n(1);
    EXPECT_CONTAINS(error_of([&] { infer_type(constant, {}); }), "unknown attribute 'value'");

    Node detach;
    detach.kind = NodeKind::detach;
    EXPECT_EQ(infer_type(detach, {F64({5, 6})}), F64({5, 6}));
    EXPECT_CONTAINS(error_of([&] {
                        infer_type(detach, {F({1}), F({1})});
                    }),
                    "expects 1 parent, got 2");
    EXPECT_CONTAINS(error_of([&] { infer_type(detach, {}); }), "expects 1 parent, got 0");
}

TEST(ShapeInference, ArityErrors) {
    EXPECT_CONTAINS(infer_error("relu", {F({2}), F({2})}), "expects 1 parent, got 2");
    EXPECT_CONTAINS(infer_error("add", {F({2})}), "expects 2 parents, got 1");
    EXPECT_CONTAINS(infer_error("concat_vectors", {F({2})}), "expects at least 2 parents, got 1");
    EXPECT_CONTAINS(infer_error("scaled_dot_product_attention", {F({2, 2}), F({2, 2})}),
                    "expects 3 or 4 parents, got 2");
    EXPECT_CONTAINS(infer_error("rand_uniform", {F({2})}, {{"shape", l({2})}}),
                    "expects no parents, got 1");
    EXPECT_CONTAINS(infer_error("selective_scan", {F({1, 1, 1})}), "expects 5 parents, got 1");
}

TEST(ShapeInference, AttributeErrors) {
    EXPECT_CONTAINS(infer_error("relu", {F({2})}, {{"foo", n(1)}}),
                    "unknown attribute 'foo' (this op takes none)");
    EXPECT_CONTAINS(infer_error("softmax", {F({2, 3})}, {{"foo", n(1)}}),
                    "unknown attribute 'foo'; valid: axis");
    EXPECT_CONTAINS(infer_error("softmax", {F({2, 3})}, {{"axis", n(5)}}),
                    "attribute 'axis' = 5 out of range for rank 2");
    EXPECT_CONTAINS(infer_error("softmax", {F({2, 3})}, {{"axis", n(-3)}}),
                    "attribute 'axis' = -3 out of range for rank 2");
    EXPECT_CONTAINS(infer_error("softmax", {F({2, 3})}, {{"axis", x(1.5)}}),
                    "attribute 'axis' must be an integer, got number 1.5");
    EXPECT_CONTAINS(
        infer_error("linear", {F({2, 3})}, {{"out_features", n(4)}, {"bias", s("yes")}}),
        "attribute 'bias' must be true or false, got string 'yes'");
    EXPECT_CONTAINS(infer_error("linear", {F({2, 3})}), "missing attribute 'out_features'");
    EXPECT_CONTAINS(infer_error("linear", {F({2, 3})}, {{"out_features", n(-4)}}),
                    "attribute 'out_features' = -4 must be >= 0");
    EXPECT_CONTAINS(infer_error("scale", {F({2})}), "missing attribute 'factor'");
    EXPECT_CONTAINS(infer_error("clamp", {F({2})}), "needs attribute 'min' or 'max'");
    EXPECT_CONTAINS(infer_error("safe_log", {F({2})}, {{"eps", x(0.0)}}),
                    "attribute 'eps' = 0 must be a finite number > 0");
    EXPECT_CONTAINS(infer_error("gelu", {F({2})}, {{"approximate", s("erf")}}),
                    "attribute 'approximate' = 'erf' must be one of none, tanh");
    EXPECT_CONTAINS(infer_error("mse_loss", {F({2}), F({2})}, {{"reduction", s("avg")}}),
                    "must be one of mean, sum, none");
    EXPECT_CONTAINS(infer_error("rand_uniform", {}, {{"shape", l({2})}, {"dtype", s("int64")}}),
                    "attribute 'dtype' = 'int64' must be one of float32, float64");
    EXPECT_CONTAINS(infer_error("rand_uniform", {}), "missing attribute 'shape'");
    EXPECT_CONTAINS(infer_error("rand_uniform", {}, {{"shape", l({2, -1})}}), "negative dimension");
    EXPECT_CONTAINS(infer_error("reduce_sum", {F({2, 3})}, {{"axes", l({0, -2})}}),
                    "repeats axis 0");
    EXPECT_CONTAINS(infer_error("reduce_sum", {F({2, 3})}, {{"axes", l({})}}),
                    "attribute 'axes' is empty");
    EXPECT_CONTAINS(infer_error("reduce_mean", {F({2, 3})}, {{"axes", l({2})}}),
                    "attribute 'axes' entry 2 out of range for rank 2");
    EXPECT_CONTAINS(
        infer_error("flatten", {F({2, 3, 4})}, {{"start_dim", n(2)}, {"end_dim", n(1)}}),
        "start_dim 2 comes after end_dim 1");
    EXPECT_CONTAINS(infer_error("permute", {F({2, 3, 4})}, {{"dims", l({0, 1})}}),
                    "has 2 entries for rank 3");
    EXPECT_CONTAINS(infer_error("permute", {F({2, 3, 4})}, {{"dims", l({0, 1, 1})}}),
                    "repeats axis 1");
    EXPECT_CONTAINS(infer_error("swapAdjacentAtDepth", {F({2, 3, 4})}, {{"depth", n(2)}}),
                    "attribute 'depth' = 2 out of range for rank 3");
    EXPECT_CONTAINS(infer_error("gather_scalar", {F({5})}, {{"index", n(5)}}),
                    "attribute 'index' = 5 out of range for length 5");
    EXPECT_CONTAINS(infer_error("gather_row", {F({4, 7})}, {{"index", n(-5)}}),
                    "attribute 'index' = -5 out of range for length 4");
    EXPECT_CONTAINS(infer_error("conv2d", {F({1, 3, 8, 8})},
                                {{"out_channels", n(4)}, {"kernel_size", l({3, 3, 3})}}),
                    "attribute 'kernel_size' must be an integer or a list of 2 integers");
    EXPECT_CONTAINS(infer_error("conv2d", {F({1, 3, 8, 8})},
                                {{"out_channels", n(4)}, {"kernel_size", n(3)}, {"stride", n(0)}}),
                    "attribute 'stride' = 0 must be >= 1");
    EXPECT_CONTAINS(
        infer_error("max_pool", {F({1, 3, 8})}, {{"kernel_size", n(2)}, {"padding", n(1)}}),
        "unknown attribute 'padding'; valid: kernel_size, stride");
    EXPECT_CONTAINS(infer_error("max_pool2d_pad", {F({1, 3, 8, 8})},
                                {{"kernel_size", n(2)}, {"padding", n(2)}}),
                    "must be at most half the kernel size");
    EXPECT_CONTAINS(infer_error("smooth_max_pool", {F({1, 3, 8})},
                                {{"kernel_size", n(2)}, {"temperature", x(-1.0)}}),
                    "attribute 'temperature' = -1 must be a finite number > 0");
    EXPECT_CONTAINS(
        infer_error("fft_fno", {F({1, 3, 8})}, {{"modes", n(6)}, {"out_channels", n(2)}}),
        "attribute 'modes' = 6 exceeds L/2 + 1 = 5 for length 8");
    EXPECT_CONTAINS(infer_error("layer_norm", {F({2, 3})}), "missing attribute 'normalized_shape'");
    EXPECT_CONTAINS(infer_error("batch_norm", {F({2, 3})}, {{"momentum", x(1.5)}}),
                    "attribute 'momentum' = 1.5 must be in [0, 1]");
    EXPECT_CONTAINS(
        infer_error("scaled_dot_product_attention", {F({2, 4}), F({3, 4}), F({3, 4}), Bool({2, 3})},
                    {{"is_causal", b(true)}}),
        "cannot be combined with a mask");
}

TEST(ShapeInference, ShapeErrors) {
    EXPECT_CONTAINS(infer_error("matmul", {F({2, 3}), F({4, 5})}),
                    "inner dimensions differ: [2, 3] x [4, 5]");
    EXPECT_CONTAINS(infer_error("matmul", {F({3}), F({4})}), "inner dimensions differ: [3] x [4]");
    EXPECT_CONTAINS(infer_error("matmul", {F({2, 2, 3}), F({3, 3, 4})}),
                    "batch dimensions do not broadcast");
    EXPECT_CONTAINS(infer_error("matmul", {F({}), F({3})}), "rank >= 1");
    EXPECT_CONTAINS(infer_error("bmm", {F({2, 2, 3}), F({3, 3, 4})}), "batch dimensions differ");
    EXPECT_CONTAINS(infer_error("bmm", {F({2, 3}), F({3, 4})}),
                    "expects parent 0 of rank 3, got shape [2, 3]");
    EXPECT_CONTAINS(infer_error("add", {F({2, 3}), F({4})}),
                    "shapes [2, 3] and [4] do not broadcast (3 vs 4)");
    EXPECT_CONTAINS(infer_error("reshape", {F({2, 3})}, {{"shape", l({4, 2})}}),
                    "cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)");
    EXPECT_CONTAINS(infer_error("reshape", {F({2, 3})}, {{"shape", l({4, -1})}}),
                    "cannot reshape [2, 3] (6 elements) to [4, -1]");
    EXPECT_CONTAINS(infer_error("reshape", {F({2, 3})}, {{"shape", l({-1, -1})}}),
                    "more than one -1");
    EXPECT_CONTAINS(infer_error("reshape", {F({0, 3})}, {{"shape", l({0, -1})}}),
                    "cannot infer the -1");
    EXPECT_CONTAINS(infer_error("reshape", {F({6})}, {{"shape", l({})}}),
                    "cannot reshape [6] (6 elements) to [] (1 elements)");
    EXPECT_CONTAINS(infer_error("transpose2d", {F({2, 3, 4})}), "expects parent 0 of rank 2");
    EXPECT_CONTAINS(infer_error("transpose3d_last_two", {F({2, 3})}), "expects parent 0 of rank 3");
    EXPECT_CONTAINS(infer_error("broadcastTo", {F({2, 3})}, {{"shape", l({4, 3})}}),
                    "cannot broadcast [2, 3] to [4, 3]");
    EXPECT_CONTAINS(infer_error("concat_vectors", {F({2}), F({2, 1})}),
                    "expects parent 1 of rank 1");
    EXPECT_CONTAINS(infer_error("concat_leading_axis", {F({2, 5}), F({3, 4})}),
                    "parent 1 has shape [3, 4]");
    EXPECT_CONTAINS(infer_error("scatter_add_row", {F({10, 4}), I64({3}), F({3, 5})}),
                    "expects parent 2 (source) of shape [3, 4]");
    EXPECT_CONTAINS(infer_error("mse_loss", {F({4, 3}), F({3})}),
                    "input shape [4, 3] and target shape [3] differ");
    EXPECT_CONTAINS(infer_error("cross_entropy", {F({4, 3}), I64({5})}),
                    "target shape [5] does not match the batch of input shape [4, 3]");
    EXPECT_CONTAINS(infer_error("cross_entropy", {F({4, 3}), F({4})}),
                    "parent 1 (index) has dtype float32; expected int64");
    EXPECT_CONTAINS(infer_error("sgd", {F({3}), F({3}), F({3})}, {{"lr", x(0.1)}}),
                    "sgd is an optimizer step");
    EXPECT_CONTAINS(infer_error("adam", {F({3}), F({3}), F({3}), F({3})}), "a graph cannot hold it");
    EXPECT_CONTAINS(infer_error("layer_norm", {F({2, 3})}, {{"normalized_shape", l({4})}}),
                    "does not match the trailing dimensions of [2, 3]");
    EXPECT_CONTAINS(infer_error("batch_norm", {F({1, 3})}, {{"training", b(true)}}),
                    "more than 1 value per channel");
    EXPECT_CONTAINS(infer_error("conv", {F({2, 3, 100})},
                                {{"out_channels", n(4)}, {"kernel_size", n(3)}, {"groups", n(2)}}),
                    "input channels 3 are not divisible by groups 2");
    EXPECT_CONTAINS(
        infer_error("conv2d", {F({1, 3, 4, 4})}, {{"out_channels", n(4)}, {"kernel_size", n(5)}}),
        "padded input height 4 is smaller than the dilated kernel 5");
    EXPECT_CONTAINS(
        infer_error("conv2d", {F({1, 3, 4})}, {{"out_channels", n(4)}, {"kernel_size", n(3)}}),
        "expects parent 0 of rank 4, got shape [1, 3, 4]");
    EXPECT_CONTAINS(
        infer_error("conv_transpose", {F({1, 3, 4})},
                    {{"out_channels", n(4)}, {"kernel_size", n(3)}, {"output_padding", n(1)}}),
        "must be smaller than the stride or the dilation");
    EXPECT_CONTAINS(infer_error("conv_transpose", {F({1, 3, 1})},
                                {{"out_channels", n(4)}, {"kernel_size", n(1)}, {"padding", n(1)}}),
                    "output length -1 is too small");
    EXPECT_CONTAINS(infer_error("max_pool2d", {F({1, 1, 3, 3})}, {{"kernel_size", n(4)}}),
                    "input height 3 is smaller than the kernel 4");
    EXPECT_CONTAINS(infer_error("selective_scan", {F({2, 8, 16}), F({2, 8, 16}), F({8, 4}),
                                                   F({2, 4, 16}), F({2, 5, 16})}),
                    "expects parent 4 (C) of shape [B, N, L] = [2, 4, 16], got [2, 5, 16]");
    EXPECT_CONTAINS(
        infer_error("scaled_dot_product_attention", {F({2, 8, 16}), F({2, 10, 8}), F({2, 10, 8})}),
        "query embedding 16 differs from key embedding 8");
    EXPECT_CONTAINS(
        infer_error("scaled_dot_product_attention", {F({2, 8, 16}), F({3, 10, 16}), F({3, 10, 8})}),
        "same batch dimensions");
    EXPECT_CONTAINS(infer_error("scaled_dot_product_attention",
                                {F({8, 16}), F({10, 16}), F({10, 16}), Bool({8, 9})}),
                    "does not broadcast to the attention scores [8, 10]");
    EXPECT_CONTAINS(infer_error("relu", {F({2, -1})}), "parent 0 has a negative dimension");
}

// add, sub, mul, div, pow, max and min are defined on every integer dtype too (ONNX allows
// integers; the importer still computes integer Pow in float64, as ONNX Runtime), and bool
// operands are refused by all of them; so are abs, neg and sign.
TEST(ShapeInference, IntegerArithmeticKeepsTheIntegerDtype) {
    for (const char* op : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
        SCOPED_TRACE(op);
        EXPECT_EQ(infer_type(op_node(op, {}), {I64({2, 3}), I64({3})}), I64({2, 3}));
        for (DType d : {DType::int32, DType::uint8, DType::int8, DType::uint64})
            EXPECT_EQ(infer_type(op_node(op, {}), {TensorType{{2, 3}, d}, TensorType{{3}, d}}), (TensorType{{2, 3}, d}));
        EXPECT_CONTAINS(infer_error(op, {Bool({2}), Bool({2})}), "parents have dtype bool; expected a float or integer dtype");
        EXPECT_CONTAINS(infer_error(op, {I64({2}), F({2})}), "parents have different dtypes");
        EXPECT_CONTAINS(infer_error(op, {TensorType{{2}, DType::int32}, I64({2})}), "parents have different dtypes");
    }
    for (const char* op : {"abs", "neg", "sign"}) {
        SCOPED_TRACE(op);
        EXPECT_EQ(infer_type(op_node(op, {}), {TensorType{{2}, DType::int16}}), (TensorType{{2}, DType::int16}));
        EXPECT_CONTAINS(infer_error(op, {Bool({2})}), "parent 0 has dtype bool; expected a float or integer dtype");
    }
    EXPECT_EQ(infer_type(op_node("clamp", {{"min", n(0)}}), {TensorType{{2}, DType::int8}}), (TensorType{{2}, DType::int8}));
    EXPECT_CONTAINS(infer_error("clamp", {Bool({2})}, {{"min", n(0)}}), "parent 0 has dtype bool; expected a float or integer dtype");
}

TEST(ShapeInference, DtypeErrors) {
    EXPECT_CONTAINS(infer_error("relu", {I64({2})}),
                    "parent 0 has dtype int64; expected a floating-point dtype (float32, float64, float16, bfloat16)");
    EXPECT_CONTAINS(infer_error("add", {F({2}), F64({2})}),
                    "parents have different dtypes: parent 0 is float32, parent 1 is float64");
    EXPECT_CONTAINS(infer_error("matmul", {Bool({2, 2}), Bool({2, 2})}), "parent 0 has dtype bool");
    EXPECT_CONTAINS(infer_error("gather_vec_nat", {F({10}), F({3})}),
                    "parent 1 (index) has dtype float32; expected int64");
    EXPECT_CONTAINS(infer_error("scatter_add_vec", {F({10}), I64({3}), F64({3})}),
                    "parents have different dtypes");
    EXPECT_CONTAINS(infer_error("concat_vectors", {F({2}), I64({2})}),
                    "parents have different dtypes");
    EXPECT_CONTAINS(infer_error("selective_scan", {F({2, 8, 16}), F({2, 8, 16}), F64({8, 4}),
                                                   F({2, 4, 16}), F({2, 4, 16})}),
                    "parent 2 is float64");
    EXPECT_CONTAINS(infer_error("scaled_dot_product_attention",
                                {F({8, 16}), F({10, 16}), F({10, 16}), I64({8, 10})}),
                    "parent 3 (mask) has dtype int64");
    // Data movement keeps any dtype.
    EXPECT_EQ(infer_type(op_node("transpose2d"), {Bool({2, 3})}), Bool({3, 2}));
    EXPECT_EQ(infer_type(op_node("reshape", {{"shape", l({-1})}}), {I64({2, 3})}), I64({6}));
}

TEST(ShapeInference, HugeNumbersAreErrorsNotCrashes) {
    const std::int64_t big = std::numeric_limits<std::int64_t>::max();
    EXPECT_CONTAINS(infer_error("reshape", {F({2})}, {{"shape", l({big, 2})}}), "integer overflow");
    EXPECT_CONTAINS(infer_error("rand_uniform", {}, {{"shape", l({1 << 30, 1 << 30, 1 << 30})}}),
                    "more than 2^63-1 elements");
    EXPECT_CONTAINS(
        infer_error("conv", {F({1, 1, 8})},
                    {{"out_channels", n(1)}, {"kernel_size", n(big)}, {"dilation", n(big)}}),
        "integer overflow");
    EXPECT_CONTAINS(infer_error("swapAdjacentAtDepth", {F({2, 3})}, {{"depth", n(big)}}),
                    "out of range");
    EXPECT_CONTAINS(infer_error("slice_leading_axis_range", {F({4})},
                                {{"start", n(std::numeric_limits<std::int64_t>::min())}}),
                    "<no error; inferred [4]>");
    EXPECT_CONTAINS(
        infer_error("max_pool2d_pad", {F({1, 1, 8, 8})},
                    {{"kernel_size", n(2)}, {"stride", n(big)}, {"ceil_mode", b(true)}}),
        "<no error; inferred [1, 1, 1, 1]>");
    EXPECT_CONTAINS(infer_error("concat_vectors", {F({big}), F({big})}), "integer overflow");
}

TEST(ShapeInference, ParameterSpecs) {
    auto keys = [](const std::vector<ParameterSpec>& specs) {
        std::string out;
        for (const auto& p : specs) out += p.key + to_string(p.type.shape) + " ";
        return out;
    };
    auto linear = op_node("linear", {{"out_features", n(256)}});
    linear.name = "fc1";
    EXPECT_EQ(keys(parameter_specs(linear, {F({4, 784})})), "fc1.weight[256, 784] fc1.bias[256] ");
    linear.attrs["bias"] = b(false);
    linear.name.clear();
    linear.id = 7;
    EXPECT_EQ(keys(parameter_specs(linear, {F64({4, 784})})), "7.weight[256, 784] ");
    EXPECT_EQ(parameter_specs(linear, {F64({4, 784})})[0].type.dtype, DType::float64);

    auto conv =
        op_node("conv2d", {{"out_channels", n(8)}, {"kernel_size", l({3, 5})}, {"groups", n(2)}});
    conv.name = "c";
    EXPECT_EQ(keys(parameter_specs(conv, {F({1, 4, 9, 9})})), "c.weight[8, 2, 3, 5] c.bias[8] ");
    auto deconv = op_node("conv_transpose2d",
                          {{"out_channels", n(8)}, {"kernel_size", n(3)}, {"groups", n(2)}});
    deconv.name = "d";
    EXPECT_EQ(keys(parameter_specs(deconv, {F({1, 4, 9, 9})})), "d.weight[4, 4, 3, 3] d.bias[8] ");
    auto conv1 =
        op_node("conv", {{"out_channels", n(6)}, {"kernel_size", n(3)}, {"bias", b(false)}});
    conv1.name = "c1";
    EXPECT_EQ(keys(parameter_specs(conv1, {F({1, 2, 9})})), "c1.weight[6, 2, 3] ");
    auto ln = op_node("layer_norm", {{"normalized_shape", l({5, 8})}});
    ln.name = "ln";
    EXPECT_EQ(keys(parameter_specs(ln, {F({2, 5, 8})})), "ln.weight[5, 8] ln.bias[5, 8] ");
    ln.attrs["elementwise_affine"] = b(false);
    EXPECT_EQ(keys(parameter_specs(ln, {F({2, 5, 8})})), "");
    auto bn = op_node("batch_norm");
    bn.name = "bn";
    EXPECT_EQ(keys(parameter_specs(bn, {F({2, 3, 4, 4})})),
              "bn.weight[3] bn.bias[3] bn.running_mean[3] bn.running_var[3] ");
    auto fno = op_node("fft_fno", {{"modes", n(4)}, {"out_channels", n(6)}});
    fno.name = "spectral";
    EXPECT_EQ(keys(parameter_specs(fno, {F({2, 3, 16})})),
              "spectral.weight_real[3, 6, 4] spectral.weight_imag[3, 6, 4] ");
    Node constant;
    constant.kind = NodeKind::constant;
    constant.name = "table";
    constant.shape = {3, 2};
    constant.dtype = DType::int64;
    auto specs = parameter_specs(constant, {});
    ASSERT_EQ(specs.size(), 1u);
    EXPECT_EQ(specs[0], (ParameterSpec{"table", I64({3, 2})}));
    EXPECT_TRUE(parameter_specs(op_node("relu"), {F({2})}).empty());
}

// Every op, fed random parent types and attributes, either infers or raises Error(input).
TEST(ShapeInference, RandomInputsNeverCrash) {
    std::mt19937_64 rng(1234);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const std::vector<const char*> names = {"axis",
                                            "axes",
                                            "keepdims",
                                            "shape",
                                            "dims",
                                            "depth",
                                            "start",
                                            "end",
                                            "index",
                                            "factor",
                                            "min",
                                            "max",
                                            "eps",
                                            "out_features",
                                            "bias",
                                            "reduction",
                                            "normalized_shape",
                                            "elementwise_affine",
                                            "training",
                                            "momentum",
                                            "out_channels",
                                            "kernel_size",
                                            "stride",
                                            "padding",
                                            "dilation",
                                            "groups",
                                            "output_padding",
                                            "ceil_mode",
                                            "count_include_pad",
                                            "temperature",
                                            "modes",
                                            "seed",
                                            "dtype",
                                            "is_causal",
                                            "scale",
                                            "start_dim",
                                            "end_dim",
                                            "approximate",
                                            "beta",
                                            "threshold",
                                            "delta_softplus",
                                            "affine",
                                            "starts",
                                            "ends",
                                            "steps",
                                            "pads",
                                            "mode",
                                            "value",
                                            "select_last_index",
                                            "negative_slope",
                                            "alpha",
                                            "gamma",
                                            "to",
                                            "exclusive",
                                            "reverse",
                                            "repeats",
                                            "k"};
    auto random_attr = [&]() -> AttrValue {
        switch (pick(0, 6)) {
            case 0: return n(pick(-3, 6));
            case 1: return x(static_cast<double>(pick(-2, 4)) / 2);
            case 2: return b(pick(0, 1) == 1);
            case 3: return s(pick(0, 1) ? "none" : "float64");
            case 4: {
                std::vector<std::int64_t> v;
                for (auto k = pick(0, 4); k > 0; --k) v.push_back(pick(-2, 5));
                return v;
            }
            case 5:
                return n(pick(0, 1) ? std::numeric_limits<std::int64_t>::max()
                                    : std::numeric_limits<std::int64_t>::min());
            default: return std::vector<double>{0.5, 1.5};
        }
    };
    const DType dtypes[] = {DType::float32, DType::float32, DType::float64, DType::int64,
                            DType::boolean};
    int inferred = 0;
    for (auto op : all_values<BackendOp>()) {
        for (int trial = 0; trial < 400; ++trial) {
            std::vector<TensorType> parents;
            for (auto k = pick(0, 5); k > 0; --k) {
                Shape shape;
                for (auto r = pick(0, 4); r > 0; --r) shape.push_back(pick(0, 4));
                parents.push_back({shape, dtypes[pick(0, 4)]});
            }
            Node node = op_node(to_string(op));
            for (auto k = pick(0, 4); k > 0; --k)
                node.attrs[names[std::size_t(pick(0, std::int64_t(names.size()) - 1))]] =
                    random_attr();
            try {
                auto t = infer_type(node, parents);
                for (auto d : t.shape) EXPECT_GE(d, 0) << to_string(op);
                parameter_specs(node, parents);
                ++inferred;
            } catch (const Error& e) {
                EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
                EXPECT_FALSE(std::string(e.what()).empty());
            }
        }
    }
    EXPECT_GT(inferred, 100);
}

// ---------------------------------------------------------------------------------------------
// Parsing and checking graphs.

const char* const kDesignExample = R"({
  "format": "capsule-ir",
  "version": 1,
  "nodes": [
    {"id": 0, "op": "input", "name": "x", "shape": [2, 3], "dtype": "float32"},
    {"id": 1, "op": "relu", "parents": [0], "shape": [2, 3]},
    {"id": 2, "op": "softmax", "parents": [1], "attrs": {"axis": 1}, "shape": [2, 3]}
  ],
  "outputs": [2],
  "parameters": "weights.safetensors"
})";

/// A graph document with the given nodes (a JSON array body) and outputs.
std::string doc(const std::string& nodes, const std::string& outputs = "[1]") {
    return R"({"format": "capsule-ir", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" +
           outputs + "}";
}

/// The error parse_graph + check_graph raise for `text`, read as "graph.json".
std::string graph_error(const std::string& text) {
    return error_of([&] { check_graph(parse_graph(text, "graph.json")); });
}

const std::string kInput = R"({"id": 0, "op": "input", "name": "x", "shape": [2, 3]})";

TEST(GraphParse, DesignExample) {
    auto g = parse_graph(kDesignExample, "graph.json");
    ASSERT_EQ(g.nodes.size(), 3u);
    EXPECT_EQ(g.nodes[0].kind, NodeKind::input);
    EXPECT_EQ(g.nodes[0].name, "x");
    EXPECT_EQ(*g.nodes[1].op, BackendOp::relu);
    EXPECT_EQ(g.nodes[1].parents, Ints{0});
    EXPECT_EQ(g.nodes[1].dtype, DType::float32);
    EXPECT_EQ(std::get<std::int64_t>(g.nodes[2].attrs.at("axis")), 1);
    EXPECT_EQ(g.outputs, Ints{2});
    EXPECT_EQ(g.parameters.value_or(""), "weights.safetensors");
    EXPECT_EQ(g.source.string(), "graph.json");
    EXPECT_EQ(g.nodes[1].op_spelling(), "relu");
    EXPECT_EQ(g.nodes[0].op_spelling(), "input");
    EXPECT_EQ(g.nodes[1].parameter_prefix(), "1");
    EXPECT_EQ(g.nodes[0].parameter_prefix(), "x");
    EXPECT_EQ(g.index_of(2).value_or(99), 2u);
    EXPECT_FALSE(g.index_of(9).has_value());
    EXPECT_NO_THROW(check_graph(g));
}

TEST(GraphParse, AttributeValueTypes) {
    auto g = parse_graph(doc(kInput + R"(, {"id": 1, "op": "relu", "parents": [0], "shape": [2, 3],
        "attrs": {"i": 3, "d": 2.5, "b": true, "s": "x", "il": [1, 2], "fl": [1, 2.5], "e": []}})"));
    const auto& a = g.nodes[1].attrs;
    EXPECT_EQ(std::get<std::int64_t>(a.at("i")), 3);
    EXPECT_EQ(std::get<double>(a.at("d")), 2.5);
    EXPECT_EQ(std::get<bool>(a.at("b")), true);
    EXPECT_EQ(std::get<std::string>(a.at("s")), "x");
    EXPECT_EQ(std::get<std::vector<std::int64_t>>(a.at("il")), (Ints{1, 2}));
    EXPECT_EQ(std::get<std::vector<double>>(a.at("fl")), (std::vector<double>{1.0, 2.5}));
    EXPECT_TRUE(std::get<std::vector<std::int64_t>>(a.at("e")).empty());
}

TEST(GraphParse, Helpers) {
    EXPECT_EQ(to_string(Shape{}), "[]");
    EXPECT_EQ(to_string(Shape{2, 3}), "[2, 3]");
    EXPECT_EQ(element_count({}), 1);
    EXPECT_EQ(element_count({2, 3, 4}), 24);
    EXPECT_EQ(element_count({2, 0, 4}), 0);
    EXPECT_TRUE(raises(ErrorCode::input, [&] { element_count({1 << 30, 1 << 30, 1 << 30}); }));
    EXPECT_EQ(dtype_size(DType::float32), 4u);
    EXPECT_EQ(dtype_size(DType::float64), 8u);
    EXPECT_EQ(dtype_size(DType::int64), 8u);
    EXPECT_EQ(dtype_size(DType::boolean), 1u);
    EXPECT_EQ(to_string(DType::boolean), "bool");
    EXPECT_EQ(parse<DType>("float64"), DType::float64);
    EXPECT_CONTAINS(error_of([] { parse<DType>("f32"); }), "unknown dtype 'f32'; valid: float32, float64, int64, bool");
}

// Outputs are named by their node, else output_<id>, suffixed past any name already taken.
TEST(GraphParse, OutputNames) {
    auto g = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [2]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [2]},
        {"id": 2, "op": "abs", "name": "output_1", "parents": [0], "shape": [2]},
        {"id": 3, "op": "neg", "name": "output_1_1", "parents": [0], "shape": [2]},
        {"id": 4, "op": "exp", "parents": [0], "shape": [2]}], "outputs": [1, 2, 4, 1]})");
    EXPECT_EQ(output_names(g), (std::vector<std::string>{"output_1_2", "output_1", "output_4", "output_1_3"}));
    g.outputs.push_back(9);
    EXPECT_TRUE(raises(ErrorCode::input, [&] { output_names(g); }, "output 9 is not a node of the graph"));
}

TEST(GraphParse, BadJson) {
    auto e = graph_error(R"({"format": "capsule-ir", "version": 1,)");
    EXPECT_CONTAINS(e, "graph.json: malformed JSON");
    EXPECT_CONTAINS(e, "parse error");
    EXPECT_CONTAINS(graph_error(""), "graph.json: malformed JSON");
    EXPECT_CONTAINS(graph_error(R"({"version": 1e999})"), "number overflow");
    EXPECT_CONTAINS(graph_error(std::string(100000, '[') + std::string(100000, ']')),
                    "expected a JSON object at the top level, got array");
    EXPECT_CONTAINS(graph_error(std::string(100000, '[')), "malformed JSON");
    EXPECT_CONTAINS(graph_error(R"({"format": "capsule-ir", "format": "capsule-ir"})"),
                    "duplicate key 'format'");
    EXPECT_CONTAINS(graph_error("[1, 2]"), "graph.json: expected a JSON object at the top level");
    EXPECT_CONTAINS(graph_error("\"\xff\""), "malformed JSON");
}

TEST(GraphParse, TopLevelErrors) {
    EXPECT_CONTAINS(
        graph_error(
            R"({"format": "capsule-ir", "version": 1, "nodes": [], "outputs": [], "extra": 1})"),
        "graph.json: unknown top-level key 'extra'; valid keys: format, version, nodes, outputs, "
        "output_lengths, parameters");
    EXPECT_CONTAINS(graph_error(R"({"format": "capsule-ir", "version": 1, "nodes": []})"),
                    "missing top-level key 'outputs'");
    EXPECT_CONTAINS(graph_error(R"({"format": "onnx", "version": 1, "nodes": [], "outputs": []})"),
                    "$.format: expected \"capsule-ir\", got string \"onnx\"");
    EXPECT_CONTAINS(
        graph_error(R"({"format": "capsule-ir", "version": 2, "nodes": [], "outputs": []})"),
        "unsupported version 2");
    EXPECT_CONTAINS(
        graph_error(R"({"format": "capsule-ir", "version": "1", "nodes": [], "outputs": []})"),
        "$.version: expected an integer, got string \"1\"");
    EXPECT_CONTAINS(
        graph_error(R"({"format": "capsule-ir", "version": 1, "nodes": {}, "outputs": []})"),
        "$.nodes: expected an array of nodes, got object");
    EXPECT_CONTAINS(
        graph_error(R"({"format": "capsule-ir", "version": 1, "nodes": [], "outputs": [1, "a"]})"),
        "$.outputs[1]: expected an integer");
    EXPECT_CONTAINS(
        graph_error(
            R"({"format": "capsule-ir", "version": 1, "nodes": [], "outputs": [], "parameters": 3})"),
        "$.parameters: expected a non-empty file name");
}

TEST(GraphParse, UnknownOp) {
    auto e =
        graph_error(doc(kInput + R"(, {"id": 1, "op": "relux", "parents": [0], "shape": [2, 3]})"));
    EXPECT_CONTAINS(e, "graph.json: node 1: unknown op 'relux'");
    EXPECT_CONTAINS(e, "valid: input, const, detach, rand_uniform, bernoulli_mask");
    EXPECT_CONTAINS(e, "scaled_dot_product_attention");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 0, "op": 5, "shape": []})")),
                    "node 0: key 'op': expected a string, got number 5");
}

TEST(GraphParse, UnknownKey) {
    EXPECT_CONTAINS(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "relu", "parent": [0], "shape": [2, 3]})")),
        "graph.json: node 1 (relu): unknown key 'parent'; valid keys: id, op, name, parents, "
        "attrs, shape, dtype");
}

TEST(GraphParse, WrongJsonTypes) {
    EXPECT_CONTAINS(graph_error(doc("3")), "$.nodes[0]: expected a node object, got number 3");
    EXPECT_CONTAINS(graph_error(doc(R"({"op": "relu", "shape": []})")),
                    "$.nodes[0]: missing key 'id'");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": "1", "op": "relu", "shape": []})")),
                    "key 'id': expected an integer, got string \"1\"");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 1.0, "op": "relu", "shape": []})")),
                    "key 'id': expected an integer, got number 1.0");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 18446744073709551615, "op": "relu", "shape": []})")),
                    "key 'id' = 18446744073709551615 is out of range");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 1e30, "op": "relu", "shape": []})")),
                    "expected an integer");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 1, "shape": []})")), "node 1: missing key 'op'");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 0, "op": "input"})", "[0]")),
                    "node 0 (input): missing key 'shape'");
    EXPECT_CONTAINS(
        graph_error(doc(R"({"id": 0, "op": "input", "shape": "2x3"})", "[0]")),
        "node 0 (input): key 'shape': expected an array of integers, got string \"2x3\"");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 0, "op": "input", "shape": [2, -3]})", "[0]")),
                    "node 0 (input): key 'shape': dimension -3 is negative");
    EXPECT_CONTAINS(graph_error(doc(R"({"id": 0, "op": "input", "shape": [2, 1.5]})", "[0]")),
                    "key 'shape'[1]: expected an integer, got number 1.5");
    EXPECT_CONTAINS(
        graph_error(doc(R"({"id": 0, "op": "input", "shape": [2], "dtype": "f32"})", "[0]")),
        "node 0 (input): key 'dtype': unknown dtype 'f32'; valid: float32, float64, int64, bool");
    EXPECT_CONTAINS(
        graph_error(doc(R"({"id": 0, "op": "input", "shape": [2], "dtype": 4})", "[0]")),
        "key 'dtype': expected a string");
    EXPECT_CONTAINS(
        graph_error(doc(R"({"id": 0, "op": "input", "shape": [2], "name": ["x"]})", "[0]")),
        "key 'name': expected a string, got array");
    EXPECT_CONTAINS(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "relu", "parents": 0, "shape": [2, 3]})")),
        "key 'parents': expected an array of integers, got number 0");
    EXPECT_CONTAINS(
        graph_error(
            doc(kInput + R"(, {"id": 1, "op": "relu", "parents": [0.5], "shape": [2, 3]})")),
        "key 'parents'[0]: expected an integer, got number 0.5");
    EXPECT_CONTAINS(
        graph_error(doc(
            kInput + R"(, {"id": 1, "op": "relu", "parents": [0], "attrs": [], "shape": [2, 3]})")),
        "key 'attrs': expected an object, got array");
    EXPECT_CONTAINS(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "softmax", "parents": [0], "attrs": {"axis": null}, "shape": [2, 3]})")),
        "attribute 'axis': unsupported value null");
    EXPECT_CONTAINS(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "softmax", "parents": [0], "attrs": {"axis": {"a": 1}}, "shape": [2, 3]})")),
        "attribute 'axis': unsupported value object");
    EXPECT_CONTAINS(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "reshape", "parents": [0], "attrs": {"shape": [2, "3"]}, "shape": [2, 3]})")),
        "attribute 'shape'[1]: list entries must be numbers, got string \"3\"");
    EXPECT_CONTAINS(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "reshape", "parents": [0], "attrs": {"shape": [18446744073709551615]}, "shape": [2, 3]})")),
        "is out of range");
}

TEST(GraphCheck, BadParent) {
    EXPECT_EQ(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "relu", "parents": [7], "shape": [2, 3]})")),
        "graph.json: node 1 (relu): unknown parent id 7");
}

TEST(GraphCheck, ForwardReferenceAndCycle) {
    EXPECT_EQ(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "relu", "parents": [2], "shape": [2, 3]},
                                           {"id": 2, "op": "relu", "parents": [0], "shape": [2, 3]})")),
        "graph.json: node 1 (relu): parent 2 appears later (cycle or forward reference)");
    EXPECT_EQ(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "add", "parents": [0, 2], "shape": [2, 3]},
                                           {"id": 2, "op": "relu", "parents": [1], "shape": [2, 3]})")),
        "graph.json: node 1 (add): parent 2 appears later (cycle or forward reference)");
    EXPECT_EQ(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "relu", "parents": [1], "shape": [2, 3]})")),
        "graph.json: node 1 (relu): parent 1 is the node itself (cycle)");
}

TEST(GraphCheck, WrongArity) {
    EXPECT_EQ(graph_error(
                  doc(kInput + R"(, {"id": 1, "op": "relu", "parents": [0, 0], "shape": [2, 3]})")),
              "graph.json: node 1 (relu): expects 1 parent, got 2");
    EXPECT_EQ(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "input", "parents": [0], "shape": [2, 3]})")),
        "graph.json: node 1 (input): expects no parents, got 1");
    EXPECT_EQ(graph_error(doc(
                  kInput + R"(, {"id": 1, "op": "detach", "parents": [0, 0], "shape": [2, 3]})")),
              "graph.json: node 1 (detach): expects 1 parent, got 2");
    EXPECT_EQ(
        graph_error(doc(kInput + R"(, {"id": 1, "op": "const", "parents": [0], "shape": [2, 3]})")),
        "graph.json: node 1 (const): expects no parents, got 1");
}

TEST(GraphCheck, ShapeMismatch) {
    EXPECT_EQ(graph_error(doc(R"({"id": 0, "op": "input", "shape": [2, 3]},
                                 {"id": 1, "op": "input", "shape": [4, 5]},
                                 {"id": 3, "op": "matmul", "parents": [0, 1], "shape": [2, 5]})",
                              "[3]")),
              "graph.json: node 3 (matmul): inner dimensions differ: [2, 3] x [4, 5]");
    EXPECT_EQ(graph_error(doc(
                  kInput + R"(, {"id": 1, "op": "transpose2d", "parents": [0], "shape": [2, 3]})")),
              "graph.json: node 1 (transpose2d): declared shape [2, 3] but inferred [3, 2]");
}

TEST(GraphCheck, BadAttribute) {
    EXPECT_EQ(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "softmax", "parents": [0], "attrs": {"axis": 5}, "shape": [2, 3]})")),
        "graph.json: node 1 (softmax): attribute 'axis' = 5 out of range for rank 2");
    EXPECT_EQ(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "softmax", "parents": [0], "attrs": {"dim": 1}, "shape": [2, 3]})")),
        "graph.json: node 1 (softmax): unknown attribute 'dim'; valid: axis");
}

TEST(GraphCheck, DuplicateAndNegativeIds) {
    EXPECT_EQ(graph_error(doc(
                  kInput + R"(, {"id": 0, "op": "relu", "parents": [0], "shape": [2, 3]})", "[0]")),
              "graph.json: node 0 (relu): duplicate id 0 ($.nodes[0] and $.nodes[1])");
    EXPECT_EQ(graph_error(doc(R"({"id": -1, "op": "input", "shape": [2]})", "[-1]")),
              "graph.json: node -1 (input): id -1 is negative; ids must be >= 0");
    EXPECT_EQ(
        graph_error(doc(
            kInput + R"(, {"id": 1, "op": "relu", "name": "x", "parents": [0], "shape": [2, 3]})")),
        "graph.json: node 1 (relu): name 'x' is already used by node 0");
    EXPECT_EQ(graph_error(doc(R"({"id": 0, "op": "input", "name": "1", "shape": [2]},
                                 {"id": 1, "op": "relu", "parents": [0], "shape": [2]})")),
              "graph.json: node 1 (relu): its id 1 is already used as the name of node 0");
}

TEST(GraphCheck, MissingOutput) {
    EXPECT_EQ(graph_error(doc(kInput, "[5]")), "graph.json: output 5 is not a node id");
    EXPECT_EQ(graph_error(doc(kInput, "[]")), "graph.json: graph has no outputs");
}

// Graph::output_lengths: an output whose length along an axis is an int64 scalar node's value.
TEST(GraphCheck, OutputLengths) {
    const std::string nodes = kInput + R"(, {"id": 1, "op": "non_zero", "parents": [0], "shape": [2, 6], "dtype": "int64"},
      {"id": 2, "op": "reduce_sum", "parents": [0], "shape": []},
      {"id": 3, "op": "cast", "parents": [2], "attrs": {"to": "int64"}, "shape": [], "dtype": "int64"})";
    auto with = [&](const std::string& lengths) {
        return R"({"format": "capsule-ir", "version": 1, "nodes": [)" + nodes + R"(], "outputs": [1, 2],
                  "output_lengths": )" + lengths + "}";
    };
    const Graph g = parse_graph(with(R"([{"output": 1, "axis": 1, "length": 3}])"), "graph.json");
    check_graph(g);
    EXPECT_EQ(g.output_lengths, (std::vector<OutputLength>{{1, 1, 3}}));
    EXPECT_EQ(parse_graph(graph_to_json(g)).output_lengths, g.output_lengths);
    EXPECT_EQ(graph_error(with(R"([{"output": 3, "axis": 0, "length": 3}])")),
              "graph.json: output_lengths: output 3 is not in outputs");
    EXPECT_EQ(graph_error(with(R"([{"output": 1, "axis": 2, "length": 3}])")),
              "graph.json: output_lengths: output 1: axis 2 is outside its shape [2, 6]");
    EXPECT_EQ(graph_error(with(R"([{"output": 1, "axis": 1, "length": 2}])")),
              "graph.json: output_lengths: output 1: length node 2 must be an int64 scalar, got float32 []");
    EXPECT_EQ(graph_error(with(R"([{"output": 1, "axis": 1, "length": 9}])")),
              "graph.json: output_lengths: output 1: length 9 is not a node id");
    EXPECT_EQ(graph_error(with(R"([{"output": 1, "axis": 1, "length": 3}, {"output": 1, "axis": 0, "length": 3}])")),
              "graph.json: output_lengths: output 1 has more than one length");
    EXPECT_CONTAINS(graph_error(with(R"([{"output": 1, "axis": 1}])")), "$.output_lengths[0]: missing key 'length'");
    EXPECT_CONTAINS(graph_error(with(R"([{"output": 1, "axis": 1, "length": 3, "x": 0}])")),
                    "$.output_lengths[0]: unknown key 'x'; valid keys: output, axis, length");
    EXPECT_CONTAINS(graph_error(with(R"({"output": 1})")), "$.output_lengths: expected an array");
}

TEST(GraphCheck, WrongDtype) {
    EXPECT_EQ(
        graph_error(doc(
            kInput +
            R"(, {"id": 1, "op": "relu", "parents": [0], "shape": [2, 3], "dtype": "float64"})")),
        "graph.json: node 1 (relu): declared dtype float64 but inferred float32");
    EXPECT_EQ(graph_error(doc(R"({"id": 0, "op": "input", "shape": [2], "dtype": "int64"},
                                 {"id": 1, "op": "relu", "parents": [0], "shape": [2], "dtype": "int64"})")),
              "graph.json: node 1 (relu): parent 0 has dtype int64; expected a floating-point dtype (float32, float64, float16, bfloat16)");
    EXPECT_EQ(
        graph_error(doc(R"({"id": 0, "op": "input", "shape": [5]},
                                 {"id": 1, "op": "input", "shape": [3]},
                                 {"id": 2, "op": "gather_vec_nat", "parents": [0, 1], "shape": [3]})",
                        "[2]")),
        "graph.json: node 2 (gather_vec_nat): parent 1 (index) has dtype float32; expected int64");
}

TEST(GraphCheck, SourceNameWhenUnknown) {
    EXPECT_EQ(error_of([] { check_graph(parse_graph(doc(kInput, "[3]"))); }),
              "graph: output 3 is not a node id");
    EXPECT_CONTAINS(error_of([] { parse_graph("{"); }), "graph: malformed JSON");
}

TEST(GraphCheck, ProgrammaticGraphs) {
    Graph g;
    Node in;
    in.id = 0;
    in.kind = NodeKind::input;
    in.shape = {2, -1};
    g.nodes.push_back(in);
    g.outputs = {0};
    EXPECT_EQ(error_of([&] { check_graph(g); }),
              "graph: node 0 (input): declared shape [2, -1] has a negative dimension");
    g.nodes[0].shape = {2};
    EXPECT_NO_THROW(check_graph(g));
    Node bad;
    bad.id = 1;
    bad.kind = NodeKind::op;  // but no op
    bad.parents = {0};
    bad.shape = {2};
    g.nodes.push_back(bad);
    EXPECT_CONTAINS(error_of([&] { check_graph(g); }), "node kind and op disagree");
}

TEST(GraphIO, RoundTrip) {
    auto g = parse_graph(doc(kInput + R"(, {"id": 1, "op": "clamp", "name": "c", "parents": [0],
        "attrs": {"min": 0.0, "max": 6, "list": [1, 2], "fl": [0.5, 1.0], "flag": true, "mode": "m"},
        "shape": [2, 3], "dtype": "float32"}, {"id": 2, "op": "detach", "parents": [1], "shape": [2, 3]})",
                             "[1, 2]"));
    g.parameters = "w.safetensors";
    const auto text = graph_to_json(g);
    auto back = parse_graph(text);
    ASSERT_EQ(back.nodes.size(), g.nodes.size());
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        EXPECT_EQ(back.nodes[i].id, g.nodes[i].id);
        EXPECT_EQ(back.nodes[i].kind, g.nodes[i].kind);
        EXPECT_EQ(back.nodes[i].op, g.nodes[i].op);
        EXPECT_EQ(back.nodes[i].name, g.nodes[i].name);
        EXPECT_EQ(back.nodes[i].parents, g.nodes[i].parents);
        EXPECT_EQ(back.nodes[i].attrs, g.nodes[i].attrs);
        EXPECT_EQ(back.nodes[i].shape, g.nodes[i].shape);
        EXPECT_EQ(back.nodes[i].dtype, g.nodes[i].dtype);
    }
    EXPECT_EQ(back.outputs, g.outputs);
    EXPECT_EQ(back.parameters, g.parameters);
    EXPECT_EQ(graph_to_json(back), text);
    EXPECT_CONTAINS(text, "\"format\": \"capsule-ir\"");
    // min 0.0 stays a float, max 6 an integer.
    EXPECT_TRUE(std::holds_alternative<double>(back.nodes[1].attrs.at("min")));
    EXPECT_TRUE(std::holds_alternative<std::int64_t>(back.nodes[1].attrs.at("max")));

    Graph empty;
    EXPECT_CONTAINS(error_of([&] { parse_graph(graph_to_json(empty)); }), "<no error>");
}

TEST(GraphIO, LoadGraph) {
    const auto dir =
        std::filesystem::temp_directory_path() / ("capsule_test_ir_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto good = dir / "graph.json";
    std::ofstream(good) << kDesignExample;
    auto g = load_graph(good);
    EXPECT_EQ(g.source.string(), good.string());
    EXPECT_NO_THROW(check_graph(g));

    const auto bad = dir / "bad.json";
    std::ofstream(bad) << doc(kInput +
                              R"(, {"id": 1, "op": "relu", "parents": [9], "shape": [2, 3]})");
    EXPECT_EQ(error_of([&] { check_graph(load_graph(bad)); }),
              bad.string() + ": node 1 (relu): unknown parent id 9");

    EXPECT_CONTAINS(error_of([&] { load_graph(dir / "missing.json"); }),
                    (dir / "missing.json").string() + ": cannot read graph file");
    EXPECT_CONTAINS(error_of([&] { load_graph(dir); }),
                    "cannot read graph file: it is a directory");
    std::filesystem::remove_all(dir);
}

TEST(GraphIO, Examples) {
    const std::filesystem::path examples = std::filesystem::path(CAPSULE_SOURCE_DIR) / "examples";
    for (const char* name : {"mlp.json", "attention.json", "lenet.json"}) {
        SCOPED_TRACE(name);
        Graph g;
        ASSERT_NO_THROW(g = load_graph(examples / name));
        EXPECT_NO_THROW(check_graph(g)) << error_of([&] { check_graph(g); });
    }
    auto lenet = load_graph(examples / "lenet.json");
    EXPECT_EQ(lenet.nodes.back().shape, (Shape{1, 10}));
    EXPECT_EQ(lenet.nodes[7].shape, (Shape{1, 400}));
    auto mlp = load_graph(examples / "mlp.json");
    EXPECT_EQ(mlp.nodes[1].name, "fc1");
    EXPECT_EQ(parameter_specs(mlp.nodes[1], {{mlp.nodes[0].shape, mlp.nodes[0].dtype}})[0],
              (ParameterSpec{"fc1.weight", F({256, 784})}));
}

// Random byte mutations of a valid document: every outcome is success or Error(input).
TEST(GraphParse, MutatedDocumentsNeverCrash) {
    const std::string base = doc(R"({"id": 0, "op": "input", "name": "x", "shape": [2, 3]},
        {"id": 1, "op": "linear", "name": "fc", "parents": [0], "attrs": {"out_features": 4}, "shape": [2, 4]},
        {"id": 2, "op": "softmax", "parents": [1], "attrs": {"axis": -1}, "shape": [2, 4]})",
                                 "[2]");
    ASSERT_NO_THROW(check_graph(parse_graph(base)));
    const std::string alphabet = "{}[]\",:-0123456789e.aAz \n";
    std::mt19937 rng(99);
    int ok = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        std::string text = base;
        const int edits = 1 + int(rng() % 3);
        for (int e = 0; e < edits; ++e) {
            const std::size_t pos = rng() % text.size();
            switch (rng() % 3) {
                case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
                case 1: text.erase(pos, 1); break;
                default: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
            }
        }
        try {
            check_graph(parse_graph(text, "m.json"));
            ++ok;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind("m.json: ", 0), 0u) << e.what();
        }
    }
    EXPECT_GT(ok, 0);
}

}  // namespace

TEST(GraphCheck, ParameterPrefixClashesInEitherOrder) {
    // A name that spells the id of an earlier unnamed node.
    EXPECT_EQ(graph_error(doc(R"({"id": 0, "op": "input", "shape": [2]},
                                 {"id": 1, "op": "relu", "name": "0", "parents": [0], "shape": [2]})")),
              "graph.json: node 1 (relu): name '0' is already used by node 0");
    // Names that only look like ids do not clash: "01", "+1", "1 " are not std::to_string of an id.
    for (const char* name : {"01", "+1", "1 ", "99999999999999999999"})
        EXPECT_EQ(graph_error(doc(std::string(R"({"id": 0, "op": "input", "name": ")") + name +
                                  R"(", "shape": [2]}, {"id": 1, "op": "relu", "parents": [0], "shape": [2]})")),
                  "<no error>")
            << name;
    // A node may be named after its own id.
    EXPECT_EQ(graph_error(doc(R"({"id": 0, "op": "input", "name": "0", "shape": [2]},
                                 {"id": 1, "op": "relu", "parents": [0], "shape": [2]})")),
              "<no error>");
}
