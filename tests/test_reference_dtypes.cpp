// The reference plugin's kernels on the dtypes of ABI 1.1 (int8 ... uint64, float16, bfloat16),
// run through checked_cpu sessions, against hand-computed values: integer arithmetic wraps modulo
// 2^bits (numpy), division truncates and refuses 0, Mod follows Python (fmod 0) or C (fmod 1),
// cast rounds to float16 and bfloat16 to nearest even, float16 / bfloat16 arithmetic and
// activations round once from float, and data movement works on 2-byte elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "capsule/session.hpp"
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

// A float16 node whose op the reference capsules run on float32 and float64 only (matmul) fails
// planning, naming the dtype, instead of reaching a kernel.
TEST(ReferenceDtypes, Float16MatmulIsAPlanningRefusalNamingTheDtype) {
    const Tensor a = exact<std::uint16_t>(DType::float16, {2, 2}, {0x3c00, 0x3c00, 0x3c00, 0x3c00});
    try {
        run_op("matmul", "{}", {a, a}, DType::float16, {2, 2});
        ADD_FAILURE() << "a float16 matmul was planned";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::planning) << e.what();
        EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
    }
}
