// Size arithmetic on untrusted shapes (capsule/shape_math.hpp) and every place that uses it: a
// count, byte size or sum of sizes past 2^63-1 is an Error(input) naming the shape, never a wrapped
// size and a buffer overrun. Expected values are powers of two worked out by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include <unistd.h>

#include "capsule/plugin.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t p2(int k) { return std::int64_t(1) << k; }

Node input_node(std::int64_t id, const std::string& name, Shape shape) {
    Node n;
    n.id = id;
    n.kind = NodeKind::input;
    n.name = name;
    n.shape = std::move(shape);
    return n;
}

Node op_node(std::int64_t id, BackendOp op, std::vector<std::int64_t> parents, Shape shape,
             Attributes attrs = {}) {
    Node n;
    n.id = id;
    n.op = op;
    n.parents = std::move(parents);
    n.shape = std::move(shape);
    n.attrs = std::move(attrs);
    return n;
}

}  // namespace

TEST(ShapeMath, CountsAndByteSizesUpToTheLimit) {
    using S = std::vector<std::int64_t>;
    EXPECT_EQ(try_element_count(S{}), 1);
    EXPECT_EQ(try_element_count(S{2, 3, 4}), 24);
    EXPECT_EQ(try_element_count(S{7, 0, 5}), 0);
    EXPECT_EQ(try_element_count(S{p2(31), p2(31)}), p2(62));
    EXPECT_EQ(try_element_count(S{p2(62) - 1, 2}), kMaxTensorSize - 1);
    EXPECT_EQ(try_element_count(S{p2(31), p2(31), 2}), std::nullopt);  // 2^63
    EXPECT_EQ(try_element_count(S{3, -1}), std::nullopt);
    // A zero dimension still needs the other dimensions' product (every stride) to fit.
    EXPECT_EQ(try_element_count(S{0, p2(40), p2(40)}), std::nullopt);
    EXPECT_EQ(try_element_count(S{0, p2(40), p2(20)}), 0);

    EXPECT_EQ(try_byte_size(S{p2(62)}, 1), p2(62));
    EXPECT_EQ(try_byte_size(S{p2(61) - 1}, 4), kMaxTensorSize - 3);
    EXPECT_EQ(try_byte_size(S{p2(62)}, 4), std::nullopt);  // 2^64 bytes: the size that wrapped to 0
    EXPECT_EQ(try_byte_size(S{p2(61)}, 4), std::nullopt);  // exactly 2^63
    EXPECT_EQ(try_byte_size(S{0, 5}, 8), 0);

    EXPECT_EQ(try_add_sizes(p2(62), p2(62) - 1), kMaxTensorSize);
    EXPECT_EQ(try_add_sizes(p2(62), p2(62)), std::nullopt);
    EXPECT_EQ(try_add_sizes(-1, 1), std::nullopt);
}

TEST(ShapeMath, CheckedFormsNameTheShape) {
    EXPECT_EQ(error_of([] { checked_element_count(Shape{p2(31), p2(31), 2}); }),
              "shape [2147483648, 2147483648, 2] has more than 2^63-1 elements");
    EXPECT_EQ(error_of([] { checked_element_count(Shape{2, -3}); }),
              "shape [2, -3] has a negative dimension");
    EXPECT_EQ(error_of([] { checked_byte_size(Shape{p2(62)}, 4); }),
              "shape [4611686018427387904] (4611686018427387904 elements of 4 bytes) takes more "
              "than 2^63-1 bytes");
    EXPECT_EQ(checked_byte_size(Shape{3, 5}, 8), 120);
    EXPECT_EQ(error_of([] { checked_add_sizes(p2(62), p2(62), "total"); }),
              "total exceeds 2^63-1 (4611686018427387904 + 4611686018427387904)");
    EXPECT_TRUE(raises(ErrorCode::input, [&] { element_count({p2(32), p2(32)}); }));
    EXPECT_EQ(byte_size({p2(20), 3}, DType::float64), std::size_t(p2(20)) * 3 * 8);
}

TEST(ShapeMath, TensorsRefuseShapesWhoseBytesOverflow) {
    // 2^62 float32 elements are 2^64 bytes, which must not wrap to 0 (and allocate 64 bytes).
    EXPECT_EQ(error_of([] { Tensor::zeros(DType::float32, {p2(62)}); }),
              "shape [4611686018427387904] (4611686018427387904 elements of 4 bytes) takes more "
              "than 2^63-1 bytes");
    EXPECT_TRUE(raises(ErrorCode::input, [&] { Tensor::zeros(DType::int64, {p2(40), p2(40)}); }));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { contiguous_strides({0, p2(40), p2(40)}); }));
    EXPECT_EQ(contiguous_strides({2, 3, 4}), (std::vector<std::int64_t>{12, 4, 1}));
}

TEST(ShapeMath, GraphCheckRefusesADeclaredShapeWhoseBytesOverflow) {
    Graph g;
    g.source = "big.json";
    g.nodes.push_back(op_node(0, BackendOp::rand_uniform, {}, {p2(62)},
                              {{"shape", std::vector<std::int64_t>{p2(62)}}}));
    g.outputs = {0};
    EXPECT_EQ(error_of([&] { check_graph(g); }),
              "big.json: node 0 (rand_uniform): declared shape [4611686018427387904] "
              "(4611686018427387904 elements of 4 bytes) takes more than 2^63-1 bytes");
    // float64 halves the count that fits: 2^60 elements are 2^63 bytes.
    g.nodes[0].shape = {p2(60)};
    g.nodes[0].dtype = DType::float64;
    g.nodes[0].attrs = {{"shape", std::vector<std::int64_t>{p2(60)}}, {"dtype", std::string("float64")}};
    EXPECT_NE(error_of([&] { check_graph(g); }).find("takes more than 2^63-1 bytes"), std::string::npos);
    // An input whose element count overflows int64.
    g.nodes = {input_node(0, "x", {p2(32), p2(31)})};
    EXPECT_EQ(error_of([&] { check_graph(g); }),
              "big.json: node 0 (input): declared shape [4294967296, 2147483648] has more than "
              "2^63-1 elements");
    // Shape inference of rand_uniform refuses it by itself, too.
    EXPECT_NE(error_of([] {
                  infer_type(op_node(0, BackendOp::rand_uniform, {}, {},
                                     {{"shape", std::vector<std::int64_t>{p2(62)}}}),
                             {});
              }).find("takes more than 2^63-1 bytes"),
              std::string::npos);
}

TEST(ShapeMath, SessionRefusesArenaSizesThatAddUpPastTheLimit) {
    // input x: 2^60 float32 (2^62 bytes, bound by the caller), then two relus of 2^62 bytes each:
    // each fits, their sum 2^63 does not.
    Graph g;
    g.source = "sum.json";
    g.nodes = {input_node(0, "x", {p2(60)}), op_node(1, BackendOp::relu, {0}, {p2(60)}),
               op_node(2, BackendOp::relu, {1}, {p2(60)})};
    g.outputs = {2};
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), g);
    ASSERT_TRUE(accepted.accepted);
    auto [type, msg] = [&]() -> std::pair<std::string, std::string> {
        try {
            Session::create(profile, *accepted.accepted, g, built_host(), {});
        } catch (const Error& e) {
            return {std::string("Error(") + to_string(e.code()) + ")", e.what()};
        } catch (const std::exception& e) {
            return {"other", e.what()};
        }
        return {"nothing", ""};
    }();
    EXPECT_EQ(type, "Error(input)");
    EXPECT_EQ(msg, "the total size in bytes of the graph's intermediate tensors (reached at one of "
                   "shape [1152921504606846976] float32) exceeds 2^63-1 (4611686018427387904 + "
                   "4611686018427387904)");

    // One relu: the arena (2^62 bytes) fits, but gradients of x and of the relu output would take
    // 2^63: backward is refused, forward is still possible.
    g.nodes.pop_back();
    g.outputs = {1};
    accepted = profile.accept_graph(built_host(), g);
    ASSERT_TRUE(accepted.accepted);
    auto session = Session::create(profile, *accepted.accepted, g, built_host(), {});
    EXPECT_EQ(session.backward_refusal(), "the gradients of this graph would take more than 2^63-1 bytes");
}

TEST(ShapeMath, NpyHeaderWithHugeDimsIsRefusedBeforeAllocating) {
    const auto p = fs::temp_directory_path() / ("capsule-shape-" + std::to_string(::getpid()) + ".npy");
    // 10^14 * 10^5 * 10^3 = 10^22 elements: more than 2^63.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000000, 100000, 1000), }";
    const std::size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(header.size() & 0xFF);
    bytes += static_cast<char>(header.size() >> 8);
    std::ofstream(p, std::ios::binary) << bytes + header + "abcd";
    EXPECT_EQ(error_of([&] { read_npy(p); }),
              p.string() + ": data holds 4 bytes, shape [100000000000000, 100000, 1000] of float32 "
                           "needs more than 2^63-1 bytes");
    fs::remove(p);
}

TEST(ShapeMath, PluginTensorCountsAreChecked) {
    std::int64_t ok_shape[] = {3, 0, 5};
    std::int64_t huge_shape[] = {p2(40), p2(40)};
    capsule_tensor_view view{};
    view.struct_size = sizeof view;
    view.rank = 3;
    view.shape = ok_shape;
    EXPECT_EQ(plugin::Tensor{&view}.numel(), 0);
    ok_shape[1] = 4;
    EXPECT_EQ(plugin::Tensor{&view}.numel(), 60);
    view.rank = 2;
    view.shape = huge_shape;
    try {
        (void)plugin::Tensor{&view}.numel();
        ADD_FAILURE() << "no error";
    } catch (const plugin::KernelError& e) {
        EXPECT_EQ(e.code, CAPSULE_ERROR_INVALID_ARGUMENT);
        EXPECT_EQ(e.message, "tensor of shape [1099511627776, 1099511627776] has a negative "
                             "dimension or more than 2^63-1 elements");
    }
}

// NumPy broadcasting (numpy.broadcast_shapes), hand values.
TEST(ShapeMath, BroadcastIntoAlignsAtTheRightAndNamesTheFirstConflict) {
    using S = std::vector<std::int64_t>;
    auto broadcast = [](const S& a, const S& b) {
        S out(std::max(a.size(), b.size()));
        const auto bad = broadcast_into(a, b, out);
        return std::make_pair(bad, out);
    };
    EXPECT_EQ(broadcast({3, 1}, {1, 4}), std::make_pair(std::ptrdiff_t{-1}, S{3, 4}));
    EXPECT_EQ(broadcast({2, 3}, {3}), std::make_pair(std::ptrdiff_t{-1}, S{2, 3}));
    EXPECT_EQ(broadcast({1}, {2, 1, 5}), std::make_pair(std::ptrdiff_t{-1}, S{2, 1, 5}));
    EXPECT_EQ(broadcast({}, {5}), std::make_pair(std::ptrdiff_t{-1}, S{5}));
    EXPECT_EQ(broadcast({}, {}), std::make_pair(std::ptrdiff_t{-1}, S{}));
    EXPECT_EQ(broadcast({0, 1}, {1, 7}), std::make_pair(std::ptrdiff_t{-1}, S{0, 7}));
    EXPECT_EQ(broadcast({0}, {1}), std::make_pair(std::ptrdiff_t{-1}, S{0}));
    // Refusals: the position in the result of the first conflict from the right.
    EXPECT_EQ(broadcast({2, 3}, {4, 3}).first, 0);     // 2 vs 4
    EXPECT_EQ(broadcast({5, 2, 3}, {2, 4}).first, 2);  // 3 vs 4, the first from the right
    EXPECT_EQ(broadcast({3}, {2, 2}).first, 1);        // 3 vs 2
    EXPECT_EQ(broadcast({0}, {2}).first, 0);           // 0 is not 1: it does not stretch
    EXPECT_EQ(broadcast_dim(S{2, 4}, 3, 0), 1);        // [2, 4] has no axis 0 of a rank-3 result
    EXPECT_EQ(broadcast_dim(S{2, 4}, 3, 1), 2);
    EXPECT_EQ(broadcast_dim(S{2, 4}, 3, 2), 4);
}

// Shape inference words a refusal with both shapes and the two dims that conflict.
TEST(ShapeMath, BroadcastRefusalsNameBothShapesAndTheConflictingDims) {
    auto add_error = [](Shape a, Shape b) {
        return error_of([&] {
            infer_type(op_node(2, BackendOp::add, {0, 1}, {}),
                       {TensorType{a, DType::float32}, TensorType{b, DType::float32}});
        });
    };
    EXPECT_EQ(add_error({2, 3}, {4, 3}), "shapes [2, 3] and [4, 3] do not broadcast (2 vs 4)");
    EXPECT_EQ(add_error({5, 2, 3}, {2, 4}), "shapes [5, 2, 3] and [2, 4] do not broadcast (3 vs 4)");
    EXPECT_EQ(add_error({3}, {2, 2}), "shapes [3] and [2, 2] do not broadcast (3 vs 2)");
    EXPECT_EQ(infer_type(op_node(2, BackendOp::add, {0, 1}, {}),
                         {TensorType{{1, 3}, DType::float32}, TensorType{{2, 1}, DType::float32}}),
              (TensorType{{2, 3}, DType::float32}));
}

// Axis normalisation, hand values: [-rank, rank) maps onto [0, rank), anything else is refused.
TEST(ShapeMath, NormalizeAxisCountsNegativeAxesFromTheEnd) {
    EXPECT_EQ(try_normalize_axis(0, 3), 0);
    EXPECT_EQ(try_normalize_axis(2, 3), 2);
    EXPECT_EQ(try_normalize_axis(-1, 3), 2);
    EXPECT_EQ(try_normalize_axis(-3, 3), 0);
    EXPECT_EQ(try_normalize_axis(3, 3), std::nullopt);
    EXPECT_EQ(try_normalize_axis(-4, 3), std::nullopt);
    EXPECT_EQ(try_normalize_axis(0, 0), std::nullopt);  // a scalar has no axis
    EXPECT_EQ(try_normalize_axis(-1, 0), std::nullopt);
    EXPECT_EQ(try_normalize_axis(-1, 1), 0);             // how callers treat a scalar as rank 1
    EXPECT_EQ(try_normalize_axis(std::numeric_limits<std::int64_t>::max(), 4), std::nullopt);
    EXPECT_EQ(try_normalize_axis(std::numeric_limits<std::int64_t>::min(), 4), std::nullopt);
}

// Shape inference treats a scalar as rank 1 and words a refusal with the rank it was given.
TEST(ShapeMath, AxisRefusalsNameTheAttributeAndTheRank) {
    auto infer = [](BackendOp op, Shape shape, Attributes attrs) {
        return infer_type(op_node(1, op, {0}, {}, std::move(attrs)), {TensorType{std::move(shape), DType::float32}});
    };
    auto error = [&](BackendOp op, Shape shape, Attributes attrs) {
        return error_of([&] { infer(op, shape, attrs); });
    };
    EXPECT_EQ(infer(BackendOp::softmax, {2, 3}, {{"axis", std::int64_t{-2}}}).shape, (Shape{2, 3}));
    EXPECT_EQ(infer(BackendOp::softmax, {}, {{"axis", std::int64_t{-1}}}).shape, Shape{});
    EXPECT_EQ(error(BackendOp::softmax, {2, 3}, {{"axis", std::int64_t{2}}}),
              "attribute 'axis' = 2 out of range for rank 2");
    EXPECT_EQ(error(BackendOp::softmax, {2, 3}, {{"axis", std::int64_t{-3}}}),
              "attribute 'axis' = -3 out of range for rank 2");
    EXPECT_EQ(error(BackendOp::softmax, {}, {{"axis", std::int64_t{1}}}),
              "attribute 'axis' = 1 out of range for rank 0");
    EXPECT_EQ(infer(BackendOp::reduce_sum, {2, 3, 4}, {{"axes", std::vector<std::int64_t>{-1, 0}}}).shape,
              (Shape{3}));
    EXPECT_EQ(error(BackendOp::reduce_sum, {2, 3}, {{"axes", std::vector<std::int64_t>{0, -3}}}),
              "attribute 'axes' entry -3 out of range for rank 2");
    EXPECT_EQ(error(BackendOp::reduce_sum, {2, 3}, {{"axes", std::vector<std::int64_t>{1, -1}}}),
              "attribute 'axes' = [1, -1] repeats axis 1");
}
