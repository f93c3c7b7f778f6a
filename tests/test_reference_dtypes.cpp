// The reference plugin's kernels on the dtypes of ABI 1.1 (int8 ... uint64, float16, bfloat16),
// run through checked_cpu sessions, against hand-computed values: integer arithmetic wraps modulo
// 2^bits (numpy), division truncates and refuses 0, Mod follows Python (fmod 0) or C (fmod 1),
// cast rounds to float16 and bfloat16 to nearest even, float16 / bfloat16 arithmetic and
// activations round once from float, and data movement works on 2-byte elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;

namespace {

/// A host tensor holding exactly these elements (bit patterns for float16 / bfloat16).
template <typename T>
Tensor exact(DType dtype, Shape shape, const std::vector<T>& values) {
    Tensor t = Tensor::zeros(dtype, std::move(shape));
    EXPECT_EQ(t.nbytes(), values.size() * sizeof(T));
    std::memcpy(t.data(), values.data(), t.nbytes());
    return t;
}

template <typename T>
std::vector<T> elements(const Tensor& t) {
    const auto v = t.values<T>();
    return {v.begin(), v.end()};
}

/// One `op` node (attributes `attrs`, a JSON object) over inputs x0, x1, ... whose dtypes and
/// shapes are the tensors'; its output has `dtype` and `shape`.
Graph one_op(const std::string& op, const std::string& attrs, const std::vector<Tensor>& inputs,
             DType dtype, const Shape& shape) {
    std::string nodes, parents;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        nodes += R"({"id": )" + std::to_string(i) + R"(, "op": "input", "name": "x)" + std::to_string(i) +
                 R"(", "shape": )" + to_string(inputs[i].shape()) + R"(, "dtype": ")" +
                 std::string(to_string(inputs[i].dtype())) + R"("}, )";
        parents += (i ? ", " : "") + std::to_string(i);
    }
    const std::string id = std::to_string(inputs.size());
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [)" + nodes + R"({"id": )" + id +
                       R"(, "op": ")" + op + R"(", "parents": [)" + parents + R"(], "attrs": )" + attrs +
                       R"(, "shape": )" + to_string(shape) + R"(, "dtype": ")" + std::string(to_string(dtype)) +
                       R"("}], "outputs": [)" + id + "]}");
}

Tensor run_op(const std::string& op, const std::string& attrs, const std::vector<Tensor>& inputs, DType dtype,
              const Shape& shape) {
    auto session = capsule::testing::session_under("checked_cpu", one_op(op, attrs, inputs, dtype, shape), {});
    std::map<std::string, Tensor> feed;
    for (std::size_t i = 0; i < inputs.size(); ++i) feed["x" + std::to_string(i)] = inputs[i];
    const Tensor out = session.run(feed)[0];
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_EQ(out.shape(), shape);
    return out;
}

/// The run is refused as bad input (a kernel's CAPSULE_ERROR_INVALID_DATA) with a message
/// containing `names`.
void expect_refused(const std::string& op, const std::string& attrs, const std::vector<Tensor>& inputs,
                    DType dtype, const Shape& shape, const std::string& names) {
    try {
        run_op(op, attrs, inputs, dtype, shape);
        ADD_FAILURE() << op << " ran";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(ReferenceDtypes, IntegerAddAndSubWrapAround) {
    const Tensor a = Tensor::from_values(DType::int8, {3}, {100, -100, 1});
    EXPECT_EQ(elements<std::int8_t>(run_op("add", "{}", {a, a}, DType::int8, {3})),
              (std::vector<std::int8_t>{-56, 56, 2}));
    const Tensor x = Tensor::from_values(DType::uint8, {2}, {3, 200});
    const Tensor y = Tensor::from_values(DType::uint8, {1}, {5});  // broadcast
    EXPECT_EQ(elements<std::uint8_t>(run_op("sub", "{}", {x, y}, DType::uint8, {2})),
              (std::vector<std::uint8_t>{254, 195}));
}

TEST(ReferenceDtypes, Int32DivisionTruncatesAndRefusesZero) {
    const Tensor a = Tensor::from_values(DType::int32, {4}, {-7, 7, -8, 7});
    const Tensor b = Tensor::from_values(DType::int32, {4}, {2, -2, 2, 7});
    EXPECT_EQ(elements<std::int32_t>(run_op("div", "{}", {a, b}, DType::int32, {4})),
              (std::vector<std::int32_t>{-3, -3, -4, 1}));
    const Tensor zero = Tensor::from_values(DType::int32, {4}, {1, 0, 1, 1});
    expect_refused("div", "{}", {a, zero}, DType::int32, {4}, "division by zero");
}

TEST(ReferenceDtypes, Int16ModTakesTheDivisorsSignOrWithFmodTheDividends) {
    const Tensor a = Tensor::from_values(DType::int16, {4}, {-7, 7, -7, 7});
    const Tensor b = Tensor::from_values(DType::int16, {4}, {3, -3, -3, 3});
    EXPECT_EQ(elements<std::int16_t>(run_op("mod", R"({"fmod": false})", {a, b}, DType::int16, {4})),
              (std::vector<std::int16_t>{2, -2, -1, 1}));
    EXPECT_EQ(elements<std::int16_t>(run_op("mod", R"({"fmod": true})", {a, b}, DType::int16, {4})),
              (std::vector<std::int16_t>{-1, 1, -1, 1}));
}

TEST(ReferenceDtypes, CastToFloat16RoundsToNearestEven) {
    const Tensor x = Tensor::from_values(DType::float32, {7},
                                         {1 + 0x1p-11, 1 + 3 * 0x1p-11, 65520, 65519.99609375, NAN, 0x1p-25, 1.5 * 0x1p-25});
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to the even 1.0; 1 + 3*2^-11 up to 1 + 2^-9;
    // 65520 is halfway to 2^16 (past the largest half, 65504): inf; 2^-25 is half the smallest
    // subnormal: to 0; 1.5 * 2^-25 up to 2^-24.
    EXPECT_EQ(elements<std::uint16_t>(run_op("cast", R"({"to": "float16"})", {x}, DType::float16, {7})),
              (std::vector<std::uint16_t>{0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x7e00, 0x0000, 0x0001}));
}

TEST(ReferenceDtypes, CastToBfloat16RoundsToNearestEven) {
    const Tensor x = Tensor::from_values(DType::float32, {6},
                                         {1 + 0x1p-8, 1 + 3 * 0x1p-8, -(1 + 3 * 0x1p-8), NAN, 3.4028234663852886e38, INFINITY});
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even 1; 1 + 3*2^-8 up to 1 + 2^-6 (0x3f82,
    // where truncation, onnx 1.12's data, gives 0x3f81); the largest float rounds to inf.
    EXPECT_EQ(elements<std::uint16_t>(run_op("cast", R"({"to": "bfloat16"})", {x}, DType::bfloat16, {6})),
              (std::vector<std::uint16_t>{0x3f80, 0x3f82, 0xbf82, 0x7fc0, 0x7f80, 0x7f80}));
}

TEST(ReferenceDtypes, CastFromFloat16IsExact) {
    const Tensor h = exact<std::uint16_t>(DType::float16, {6}, {0x0001, 0x7bff, 0x3555, 0xfc00, 0x8000, 0x3c01});
    const auto y = elements<float>(run_op("cast", R"({"to": "float32"})", {h}, DType::float32, {6}));
    EXPECT_EQ(y[0], 0x1p-24f);
    EXPECT_EQ(y[1], 65504.0f);
    EXPECT_EQ(y[2], 0.333251953125f);
    EXPECT_EQ(y[3], -INFINITY);
    EXPECT_TRUE(y[4] == 0.0f && std::signbit(y[4]));
    EXPECT_EQ(y[5], 1.0f + 0x1p-10f);
}

TEST(ReferenceDtypes, CastBetweenIntegersWrapsAndFloatOutOfRangeIsRefused) {
    const Tensor i = Tensor::from_values(DType::int32, {4}, {300, -1, 256, 255});
    EXPECT_EQ(elements<std::uint8_t>(run_op("cast", R"({"to": "uint8"})", {i}, DType::uint8, {4})),
              (std::vector<std::uint8_t>{44, 255, 0, 255}));
    const Tensor in_range = Tensor::from_values(DType::float32, {3}, {-128.9, 127.9, -0.5});
    EXPECT_EQ(elements<std::int8_t>(run_op("cast", R"({"to": "int8"})", {in_range}, DType::int8, {3})),
              (std::vector<std::int8_t>{-128, 127, 0}));
    const Tensor out_of_range = Tensor::from_values(DType::float32, {2}, {1, 128});
    expect_refused("cast", R"({"to": "int8"})", {out_of_range}, DType::int8, {2}, "element 1");
}

TEST(ReferenceDtypes, Uint64ComparisonsAbove2To63) {
    const Tensor a = exact<std::uint64_t>(DType::uint64, {3}, {1ull << 63, ~0ull, 1});
    const Tensor b = exact<std::uint64_t>(DType::uint64, {3}, {(1ull << 63) - 1, ~0ull - 1, 1ull << 63});
    EXPECT_EQ(elements<bool>(run_op("greater", "{}", {a, b}, DType::boolean, {3})), (std::vector<bool>{true, true, false}));
    EXPECT_EQ(elements<bool>(run_op("less", "{}", {a, b}, DType::boolean, {3})), (std::vector<bool>{false, false, true}));
    EXPECT_EQ(elements<bool>(run_op("equal", "{}", {a, a}, DType::boolean, {3})), (std::vector<bool>{true, true, true}));
}

TEST(ReferenceDtypes, Float16MaxAndMinPropagateNaN) {
    // 1, -2, NaN, 0.5 against 0.5, -1, 1, NaN
    const Tensor a = exact<std::uint16_t>(DType::float16, {4}, {0x3c00, 0xc000, 0x7e00, 0x3800});
    const Tensor b = exact<std::uint16_t>(DType::float16, {4}, {0x3800, 0xbc00, 0x3c00, 0x7e00});
    const auto mx = elements<std::uint16_t>(run_op("max", "{}", {a, b}, DType::float16, {4}));
    const auto mn = elements<std::uint16_t>(run_op("min", "{}", {a, b}, DType::float16, {4}));
    EXPECT_EQ(mx[0], 0x3c00);
    EXPECT_EQ(mx[1], 0xbc00);
    EXPECT_EQ(mn[0], 0x3800);
    EXPECT_EQ(mn[1], 0xc000);
    for (const auto v : {mx[2], mx[3], mn[2], mn[3]}) EXPECT_TRUE((v & 0x7c00) == 0x7c00 && (v & 0x03ff) != 0) << v;
}

TEST(ReferenceDtypes, GatherAndConcatMoveUint16Elements) {
    const Tensor data = exact<std::uint16_t>(DType::uint16, {4}, {10, 20, 65535, 40});
    const Tensor index = Tensor::from_values(DType::int64, {3}, {2, 0, -1});
    EXPECT_EQ(elements<std::uint16_t>(run_op("gather", R"({"axis": 0})", {data, index}, DType::uint16, {3})),
              (std::vector<std::uint16_t>{65535, 10, 40}));
    const Tensor a = exact<std::uint16_t>(DType::uint16, {2, 1}, {1, 2});
    const Tensor b = exact<std::uint16_t>(DType::uint16, {2, 2}, {3, 4, 65535, 6});
    EXPECT_EQ(elements<std::uint16_t>(run_op("concat", R"({"axis": 1})", {a, b}, DType::uint16, {2, 3})),
              (std::vector<std::uint16_t>{1, 3, 4, 2, 65535, 6}));
}

TEST(ReferenceDtypes, Int32PadReflects) {
    const Tensor x = Tensor::from_values(DType::int32, {2, 3}, {1, 2, 3, 4, 5, 6});
    // pads [x1_begin, x2_begin, x1_end, x2_end]: two columns before, one after.
    EXPECT_EQ(elements<std::int32_t>(run_op("pad", R"({"pads": [0, 2, 0, 1], "mode": "reflect"})", {x}, DType::int32, {2, 6})),
              (std::vector<std::int32_t>{3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5}));
}

// float16 / bfloat16 elementwise arithmetic and activations: each value computed in float and
// rounded once to nearest even. Expected bit patterns from numpy's float16 arithmetic and
// torch's bfloat16 (torch.exp(x.float()).bfloat16()), computed when the test was written.
TEST(ReferenceDtypes, Float16ArithmeticRoundsOnceToNearestEven) {
    // 1 + 2^-11 and 2048 + 1 are ties that stay on the even neighbour; 0.1 + 0.2 rounds;
    // 65504 + 32 rounds past the largest finite value to inf.
    const Tensor a = exact<std::uint16_t>(DType::float16, {4}, {0x3c00, 0x6800, 0x2e66, 0x7bff});
    const Tensor b = exact<std::uint16_t>(DType::float16, {4}, {0x1000, 0x3c00, 0x3266, 0x5000});
    EXPECT_EQ(elements<std::uint16_t>(run_op("add", "{}", {a, b}, DType::float16, {4})),
              (std::vector<std::uint16_t>{0x3c00, 0x6800, 0x34cc, 0x7c00}));
    // 1/3, -3/7, 0/0 = NaN, 7/0 = inf.
    const Tensor c = exact<std::uint16_t>(DType::float16, {4}, {0x3c00, 0xc200, 0x0000, 0x4700});
    const Tensor d = exact<std::uint16_t>(DType::float16, {4}, {0x4200, 0x4700, 0x0000, 0x0000});
    const auto q = elements<std::uint16_t>(run_op("div", "{}", {c, d}, DType::float16, {4}));
    EXPECT_EQ(q[0], 0x3555);
    EXPECT_EQ(q[1], 0xb6db);
    EXPECT_TRUE((q[2] & 0x7c00) == 0x7c00 && (q[2] & 0x03ff) != 0) << q[2];
    EXPECT_EQ(q[3], 0x7c00);
    // sigmoid(0, 2, -10) = 0.5, 0.8809, 4.54e-5 (a subnormal float16).
    const Tensor x = exact<std::uint16_t>(DType::float16, {3}, {0x0000, 0x4000, 0xc900});
    EXPECT_EQ(elements<std::uint16_t>(run_op("sigmoid", "{}", {x}, DType::float16, {3})),
              (std::vector<std::uint16_t>{0x3800, 0x3b0c, 0x02fa}));
}

TEST(ReferenceDtypes, Bfloat16ArithmeticRoundsOnceToNearestEven) {
    // exp(1, -1.5, 10) = 2.71875, 0.22266, 22016 in bfloat16.
    const Tensor x = exact<std::uint16_t>(DType::bfloat16, {3}, {0x3f80, 0xbfc0, 0x4120});
    EXPECT_EQ(elements<std::uint16_t>(run_op("exp", "{}", {x}, DType::bfloat16, {3})),
              (std::vector<std::uint16_t>{0x402e, 0x3e64, 0x46ac}));
    // 1 + 2^-8 is a tie kept on 1; 256 + 1 is below half a step (2) and stays 256.
    const Tensor a = exact<std::uint16_t>(DType::bfloat16, {2}, {0x3f80, 0x4380});
    const Tensor b = exact<std::uint16_t>(DType::bfloat16, {2}, {0x3b80, 0x3f80});
    EXPECT_EQ(elements<std::uint16_t>(run_op("add", "{}", {a, b}, DType::bfloat16, {2})),
              (std::vector<std::uint16_t>{0x3f80, 0x4380}));
    EXPECT_EQ(elements<std::uint16_t>(run_op("mul", "{}", {a, b}, DType::bfloat16, {2})),
              (std::vector<std::uint16_t>{0x3b80, 0x4380}));
}

namespace {

/// A graph of one `op` node (attributes `attrs`) over inputs x0, x1, ... of `dtype` and shapes
/// `inputs`, with output shape `out`.
Graph single_op(const std::string& op, const std::string& attrs, DType dtype, const std::vector<Shape>& inputs,
                const Shape& out) {
    std::vector<Tensor> typed;
    for (const auto& shape : inputs) typed.push_back(Tensor::zeros(dtype, shape));
    return one_op(op, attrs, typed, dtype, out);
}

/// `t` in `dtype` (float32 to widen a half tensor exactly; a half dtype to round once).
Tensor converted(const Tensor& t, DType dtype) {
    std::vector<double> values(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) values[i] = t.at(i);
    return Tensor::from_values(dtype, t.shape(), values);
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
    std::size_t differ = 0;
    for (std::int64_t i = 0; i < got.numel(); ++i)
        if (!(got.at(i) == want.at(i) || (std::isnan(got.at(i)) && std::isnan(want.at(i))))) ++differ;
    EXPECT_EQ(differ, 0u) << what << ": elements differ from the float32 kernel's result rounded once";
}

}  // namespace

// The kernels written for float32 (matmul, linear, convolution, pooling, normalisation, softmax,
// reductions) take float16 and bfloat16 operands by computing in float32 and rounding once, as
// PyTorch does on CPU: each result equals the float32 kernel run on the widened operands and
// parameters, rounded to the half dtype, bit for bit; so do the gradients.
TEST(ReferenceDtypes, HalfOperandsOfFloat32KernelsComputeInFloat32RoundedOnce) {
    struct Case {
        std::string op, attrs;
        std::vector<Shape> inputs;
        Shape out;
    };
    const std::vector<Case> cases{
        {"matmul", "{}", {{3, 5}, {5, 4}}, {3, 4}},
        {"linear", R"({"out_features": 5})", {{4, 6}}, {4, 5}},
        {"conv2d", R"({"out_channels": 4, "kernel_size": 3, "padding": 1})", {{2, 3, 6, 6}}, {2, 4, 6, 6}},
        {"batch_norm", R"({"eps": 0.001})", {{2, 3, 4, 4}}, {2, 3, 4, 4}},
        {"max_pool2d", R"({"kernel_size": 2, "stride": 2})", {{2, 3, 4, 4}}, {2, 3, 2, 2}},
        {"avg_pool2d", R"({"kernel_size": 2, "stride": 2})", {{2, 3, 4, 4}}, {2, 3, 2, 2}},
        {"softmax", R"({"axis": 1})", {{3, 7}}, {3, 7}},
        {"layer_norm", R"({"normalized_shape": [7]})", {{3, 7}}, {3, 7}},
        {"reduce_mean", R"({"axes": [1]})", {{3, 7}}, {3}},
    };
    for (const DType half : {DType::float16, DType::bfloat16})
        for (const auto& c : cases) {
            const std::string what = c.op + " in " + std::string(to_string(half));
            SCOPED_TRACE(what);
            const Graph g_half = single_op(c.op, c.attrs, half, c.inputs, c.out);
            const Graph g_float = single_op(c.op, c.attrs, DType::float32, c.inputs, c.out);
            ParameterMap p_half = capsule::testing::random_parameters(g_half, 40, 1.0), p_float;
            for (const auto& [key, t] : p_half) p_float[key] = converted(t, DType::float32);
            std::map<std::string, Tensor> in_half, in_float;
            for (std::size_t i = 0; i < c.inputs.size(); ++i) {
                const auto n = std::size_t(element_count(c.inputs[i]));
                in_half["x" + std::to_string(i)] =
                    Tensor::from_values(half, c.inputs[i], capsule::testing::pseudo_random(n, 50 + i, 3.0));
                in_float["x" + std::to_string(i)] = converted(in_half["x" + std::to_string(i)], DType::float32);
            }
            auto s_half = capsule::testing::session_under("checked_cpu", g_half, p_half);
            auto s_float = capsule::testing::session_under("checked_cpu", g_float, p_float);
            const auto r_half = s_half.run_recording(in_half);
            const auto r_float = s_float.run_recording(in_float);
            expect_same_bits(r_half.outputs[0], converted(r_float.outputs[0], half), what + " forward");
            if (c.op == "max_pool2d" || c.op == "reduce_mean" || c.op == "batch_norm") continue;
            // Gradients, from one upstream gradient in the half dtype.
            const Tensor up_half = Tensor::from_values(
                half, c.out, capsule::testing::pseudo_random(std::size_t(element_count(c.out)), 60, 1.0));
            const auto g_h = s_half.backward(r_half.tape, {up_half});
            const auto g_f = s_float.backward(r_float.tape, {converted(up_half, DType::float32)});
            for (const auto& [name, t] : g_h.inputs)
                expect_same_bits(t, converted(g_f.inputs.at(name), half), what + " gradient of " + name);
            for (const auto& [key, t] : g_h.parameters)
                expect_same_bits(t, converted(g_f.parameters.at(key), half), what + " gradient of " + key);
        }
}

// A hand value: [60000, 60000, 60000] . [1, 1, -1] is 60000 (exact in float16) when the sum is
// accumulated in float32; summing in float16 would overflow to infinity at 120000.
TEST(ReferenceDtypes, Float16MatmulAccumulatesInFloat32) {
    const Tensor a = Tensor::from_values(DType::float16, {1, 3}, {60000, 60000, 60000});
    const Tensor b = Tensor::from_values(DType::float16, {3, 1}, {1, 1, -1});
    const Tensor out = run_op("matmul", "{}", {a, b}, DType::float16, {1, 1});
    EXPECT_EQ(out.at(0), 60000.0);
}

// A real model in float16 and in bfloat16: squeezenet1_1 (tests/data/models) with every float32
// value of its graph, parameters and input rounded to the half dtype runs under checked_cpu
// (convolutions, pools, concat, softmax on halves) and stays within the half dtype's precision of
// PyTorch's float32 output, with the same top class for each image.
TEST(ReferenceDtypes, Squeezenet1_1RunsInFloat16AndBfloat16) {
    const std::filesystem::path dir = std::filesystem::path(CAPSULE_SOURCE_DIR) / "tests/data/models/squeezenet1_1";
    const auto model = import_onnx(dir / "model.onnx");
    const Tensor input = read_npy(dir / "input.npy"), expected = read_npy(dir / "output.npy");
    ASSERT_EQ(model.graph.nodes.front().kind, NodeKind::input);
    const std::string input_name = model.graph.nodes.front().name;
    // float16 keeps 11 significant bits, bfloat16 8: each rounding is within 2^-11 / 2^-8 relative.
    for (const auto& [half, tolerance] : {std::pair{DType::float16, 0.004}, std::pair{DType::bfloat16, 0.03}}) {
        SCOPED_TRACE(to_string(half));
        Graph graph = model.graph;
        for (auto& node : graph.nodes)
            if (node.dtype == DType::float32) node.dtype = half;
        ParameterMap params;
        for (const auto& [key, t] : model.parameters) params[key] = t.dtype() == DType::float32 ? converted(t, half) : t;
        auto session = capsule::testing::session_under("checked_cpu", graph, params);
        const Tensor out = session.run({{input_name, converted(input, half)}})[0];
        ASSERT_EQ(out.dtype(), half);
        ASSERT_EQ(out.shape(), expected.shape());
        double max_diff = 0, scale = 0;
        for (std::int64_t i = 0; i < out.numel(); ++i) {
            max_diff = std::max(max_diff, std::fabs(out.at(i) - expected.at(i)));
            scale = std::max(scale, std::fabs(expected.at(i)));
        }
        std::cout << to_string(half) << " squeezenet1_1: max |out - PyTorch float32| " << max_diff << " of max |output| "
                  << scale << "\n";
        EXPECT_LE(max_diff, tolerance * scale);
        const std::int64_t classes = out.shape().back();
        for (std::int64_t image = 0; image < out.shape().front(); ++image) {
            auto best = [&](const Tensor& t) {
                std::int64_t arg = 0;
                for (std::int64_t k = 1; k < classes; ++k)
                    if (t.at(image * classes + k) > t.at(image * classes + arg)) arg = k;
                return arg;
            };
            EXPECT_EQ(best(out), best(expected)) << "image " << image;
        }
    }
}
