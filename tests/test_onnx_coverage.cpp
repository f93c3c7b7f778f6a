// ONNX converters added for the quantization ops, BitShift, the ai.onnx.preview.training
// optimizers, the signal ops (DFT, STFT), control flow (If, Loop, Scan) and sequences/optionals,
// each checked against values computed independently of Capsule: by hand, or with numpy
// (/usr/bin/python3, numpy 1.24) from the formulas of the ONNX spec and its reference
// implementations (onnx/backend/test/case/node/*.py), pasted here as literals. Refusals are
// checked for a clear reason, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "error_checks.hpp"
#include "onnx_test_models.hpp"

using namespace capsule;
using namespace capsule_test::onnx_models;
using capsule_test::raises;

namespace {

/// An initializer of any element type the tests use (float, double, int64, and the narrow
/// integers and bool in int32_data, uint64 in uint64_data, as onnx.proto stores them).
void initializer(onnx::GraphProto* g, const std::string& name, int elem, const Shape& dims, const std::vector<double>& values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (auto d : dims) t->add_dims(d);
    for (double v : values) {
        switch (elem) {
            case onnx::TensorProto::FLOAT: t->add_float_data(static_cast<float>(v)); break;
            case onnx::TensorProto::DOUBLE: t->add_double_data(v); break;
            case onnx::TensorProto::INT64: t->add_int64_data(static_cast<std::int64_t>(v)); break;
            case onnx::TensorProto::UINT64: t->add_uint64_data(static_cast<std::uint64_t>(v)); break;
            default: t->add_int32_data(static_cast<std::int32_t>(v)); break;
        }
    }
}

void set_graph(onnx::NodeProto* n, const std::string& name, const onnx::GraphProto& g) {
    auto* a = attribute(n, name, onnx::AttributeProto::GRAPH);
    *a->mutable_g() = g;
}

onnx::NodeProto* body_node(onnx::GraphProto& g, const std::string& op, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& outputs) {
    auto* n = node(&g, op, inputs, outputs);
    n->set_name(outputs.at(0) + "_node");  // node names unique within a graph
    return n;
}

Tensor tensor(DType dtype, const Shape& shape, const std::vector<double>& values) {
    return Tensor::from_values(dtype, shape, values);
}

ImportedModel import_with(const onnx::ModelProto& m, const OnnxImportOptions& options = {}) {
    return import_onnx_bytes(m.SerializeAsString(), "test.onnx", options);
}

/// Plans `model` under checked_cpu and runs it on `given` (ONNX input name -> tensor).
std::vector<Tensor> run_imported(const ImportedModel& model, const std::map<std::string, Tensor>& given) {
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(capsule::testing::built_host(), model.graph);
    if (!accepted.accepted) throw std::runtime_error("the gate rejects the plan under checked_cpu");
    ParameterMap params = model.parameters;
    auto inputs = bind_onnx_inputs(model, given, params);
    return Session::create(profile, *accepted.accepted, model.graph, capsule::testing::built_host(), params).run(inputs);
}

/// The refusal of importing `m` (a failed expectation and nullopt when it imports).
std::optional<OnnxUnsupported> refusal(const onnx::ModelProto& m, const OnnxImportOptions& options = {}) {
    auto result = try_import_onnx_bytes(m.SerializeAsString(), "test.onnx", options);
    if (auto* r = std::get_if<OnnxUnsupported>(&result)) return *r;
    ADD_FAILURE() << "imported; a refusal was expected";
    return std::nullopt;
}

/// `t` has `dtype`, `shape` and `expected` values (each within `tol` times max(1, |expected|)).
void expect_tensor(const Tensor& t, DType dtype, const Shape& shape, const std::vector<double>& expected, double tol = 0) {
    EXPECT_EQ(t.dtype(), dtype) << to_string(t.dtype());
    ASSERT_EQ(t.shape(), shape);
    const auto got = t.to_doubles();
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (tol == 0) EXPECT_EQ(got[i], expected[i]) << "element " << i;
        else EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::fabs(expected[i]))) << "element " << i;
    }
}

/// [re, im] pairs of a complex vector, flattened (the DFT's last axis).
std::vector<double> interleave(const std::vector<std::pair<double, double>>& z) {
    std::vector<double> v;
    for (auto [re, im] : z) {
        v.push_back(re);
        v.push_back(im);
    }
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear

TEST(OnnxCoverage, QuantizeLinearRoundsHalfToEvenAndSaturates) {
    struct Case {
        std::string what;
        int zp_type;
        double zp;
        std::vector<double> x, expected;
    };
    // numpy: np.clip(np.rint(x.astype(float32) / float32(0.5)) + zp, lo, hi); x / 0.5 = 2.5 -> 2,
    // 3.5 -> 4, 4.5 -> 4, -2.5 -> -2, -3.5 -> -4 (ties to even), out of range -> the bound.
    const Case cases[] = {
        {"uint8, zero point 0", onnx::TensorProto::UINT8, 0, {1.25, 1.75, 2.25, 0.2, 0.3, 127.4, 200, -3}, {2, 4, 4, 0, 1, 255, 255, 0}},
        {"int8, zero point 0", onnx::TensorProto::INT8, 0, {-1.25, -1.75, 1.25, 63.6, 64, -64, -100, -0.25}, {-2, -4, 2, 127, 127, -128, -128, 0}},
        // -1.25 / 0.5 = -2.5 -> -2, + 128 = 126; 0.75 / 0.5 = 1.5 -> 2, + 128 = 130.
        {"uint8, zero point 128", onnx::TensorProto::UINT8, 128, {-1.25, -64, -64.5, 63.75, 64, 0.75}, {126, 0, 0, 255, 255, 130}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        const Shape shape{static_cast<std::int64_t>(c.x.size())};
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", shape);
        typed(g->add_output(), "y", shape, c.zp_type);
        initializer(g, "scale", onnx::TensorProto::FLOAT, {}, {0.5});
        initializer(g, "zp", c.zp_type, {}, {c.zp});
        node(g, "QuantizeLinear", {"x", "scale", "zp"}, {"y"});
        const auto y = run(m, {{"x", tensor(DType::float32, shape, c.x)}});
        expect_tensor(y.at(0), c.zp_type == onnx::TensorProto::UINT8 ? DType::uint8 : DType::int8, shape, c.expected);
    }
}

TEST(OnnxCoverage, QuantizeLinearWithoutZeroPointGivesUint8) {
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {4});
    typed(g->add_output(), "y", {4}, onnx::TensorProto::UINT8);
    initializer(g, "scale", onnx::TensorProto::FLOAT, {}, {2});
    node(g, "QuantizeLinear", {"x", "scale"}, {"y"});
    // x / 2 = [2.5, 0.5, -1, 300] -> rint [2, 0, -1, 300] -> clip to [0, 255]
    const auto y = run(m, {{"x", tensor(DType::float32, {4}, {5, 1, -2, 600})}});
    expect_tensor(y.at(0), DType::uint8, {4}, {2, 0, 0, 255});
}

TEST(OnnxCoverage, QuantizeAndDequantizeLinearPerAxis) {
    {  // QuantizeLinear opset 13, axis 1: scale [0.5, 1, 2], zero point uint8 [0, 10, 100]
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {2, 3});
        typed(g->add_output(), "y", {2, 3}, onnx::TensorProto::UINT8);
        initializer(g, "scale", onnx::TensorProto::FLOAT, {3}, {0.5, 1, 2});
        initializer(g, "zp", onnx::TensorProto::UINT8, {3}, {0, 10, 100});
        set_int(node(g, "QuantizeLinear", {"x", "scale", "zp"}, {"y"}), "axis", 1);
        // numpy: np.clip(np.rint(x / scale) + zp, 0, 255) with scale, zp broadcast along axis 1:
        // [1/0.5, 2.5/1 + 10, -3/2 + 100] = [2, rint(2.5) + 10 = 12, rint(-1.5) + 100 = 98];
        // [-2 -> 0, 250 + 10 = 260 -> 255, 150 + 100 = 250].
        const auto y = run(m, {{"x", tensor(DType::float32, {2, 3}, {1, 2.5, -3, -1, 250, 300})}});
        expect_tensor(y.at(0), DType::uint8, {2, 3}, {2, 12, 98, 0, 255, 250});
    }
    {  // DequantizeLinear opset 13, axis 1 (the default): int8 x, zero point int8 [0, -1, 3]
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {2, 3}, onnx::TensorProto::INT8);
        typed(g->add_output(), "y", {2, 3});
        initializer(g, "scale", onnx::TensorProto::FLOAT, {3}, {0.5, 1, 2});
        initializer(g, "zp", onnx::TensorProto::INT8, {3}, {0, -1, 3});
        node(g, "DequantizeLinear", {"x", "scale", "zp"}, {"y"});
        // (x - zp) * scale: [(-128 - 0) * 0.5, (0 + 1) * 1, (127 - 3) * 2], [(5 - 0) * 0.5, (-1 + 1) * 1, (3 - 3) * 2]
        const auto y = run(m, {{"x", tensor(DType::int8, {2, 3}, {-128, 0, 127, 5, -1, 3})}});
        expect_tensor(y.at(0), DType::float32, {2, 3}, {-64, 1, 248, 2.5, 0, 0});
    }
    {  // per-axis along axis 0 of a [2, 2] tensor (axis = 0)
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {2, 2}, onnx::TensorProto::UINT8);
        typed(g->add_output(), "y", {2, 2});
        initializer(g, "scale", onnx::TensorProto::FLOAT, {2}, {0.25, 4});
        initializer(g, "zp", onnx::TensorProto::UINT8, {2}, {10, 200});
        set_int(node(g, "DequantizeLinear", {"x", "scale", "zp"}, {"y"}), "axis", 0);
        // row 0: (x - 10) * 0.25; row 1: (x - 200) * 4
        const auto y = run(m, {{"x", tensor(DType::uint8, {2, 2}, {0, 255, 0, 255})}});
        expect_tensor(y.at(0), DType::float32, {2, 2}, {-2.5, 61.25, -800, 220});
    }
}

TEST(OnnxCoverage, DynamicQuantizeLinearFollowsTheSpecFormula) {
    // ONNX spec: x_min = min(0, min(x)), x_max = max(0, max(x)), scale = (x_max - x_min) / 255,
    // zp = saturate(rint(-x_min / scale)), y = saturate(rint(x / scale) + zp), all in float32.
    // numpy (float32) on x = [0, 2, -3, -2.5, 1.34, 0.5]: scale = 5 / 255 = 0.019607844,
    // zp = rint(3 / 0.019607844) = 153, y = [153, 255, 0, 26, 221, 179] (the spec's example).
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {6});
    typed(g->add_output(), "y", {6}, onnx::TensorProto::UINT8);
    typed(g->add_output(), "scale", {});
    typed(g->add_output(), "zp", {}, onnx::TensorProto::UINT8);
    node(g, "DynamicQuantizeLinear", {"x"}, {"y", "scale", "zp"});
    const auto out = run(m, {{"x", tensor(DType::float32, {6}, {0, 2, -3, -2.5, 1.34, 0.5})}});
    ASSERT_EQ(out.size(), 3u);
    expect_tensor(out[0], DType::uint8, {6}, {153, 255, 0, 26, 221, 179});
    expect_tensor(out[1], DType::float32, {}, {static_cast<double>(5.0f / 255.0f)});
    expect_tensor(out[2], DType::uint8, {}, {153});
    // All positive: x_min = 0, zp = 0; x = [1, 2.1, 4, 3.34] -> scale 4 / 255 = 0.015686275,
    // y = rint(x / scale) = [64, 134, 255, 213] (numpy float32).
    const auto pos = run(m, {{"x", tensor(DType::float32, {6}, {1, 2.1, 4, 3.34, 1.5, 2.6})}});
    expect_tensor(pos[0], DType::uint8, {6}, {64, 134, 255, 213, 96, 166});
    expect_tensor(pos[2], DType::uint8, {}, {0});
}

// ---------------------------------------------------------------------------------------------
// 2. MatMulInteger, ConvInteger

TEST(OnnxCoverage, MatMulIntegerWithPerRowAZeroPoint) {
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "a", {3, 4}, onnx::TensorProto::UINT8);
    typed(g->add_input(), "b", {4, 2}, onnx::TensorProto::UINT8);
    typed(g->add_output(), "y", {3, 2}, onnx::TensorProto::INT32);
    initializer(g, "a_zp", onnx::TensorProto::UINT8, {3}, {12, 0, 100});
    initializer(g, "b_zp", onnx::TensorProto::UINT8, {2}, {1, 3});
    node(g, "MatMulInteger", {"a", "b", "a_zp", "b_zp"}, {"y"});
    // numpy int64: (A - a_zp[:, None]) @ (B - b_zp[None, :])
    const auto y = run(m, {{"a", tensor(DType::uint8, {3, 4}, {11, 7, 3, 200, 10, 6, 2, 255, 9, 5, 1, 0})},
                           {"b", tensor(DType::uint8, {4, 2}, {1, 4, 2, 5, 3, 6, 7, 250})}});
    expect_tensor(y.at(0), DType::int32, {3, 2}, {1105, 46398, 1540, 63013, -893, -25278});
}

TEST(OnnxCoverage, ConvIntegerCentresXOnItsZeroPoint) {
    struct Case {
        std::string what;
        std::vector<double> x, w;
        double x_zp;
        std::vector<std::int64_t> pads;
        Shape out;
        std::vector<double> expected;
    };
    // Hand/numpy: y[i, j] = sum over the 2 x 2 window of (x - x_zp) * w, the centred input
    // zero-padded (ONNX's test_convinteger_with_padding pads with the zero point likewise).
    const Case cases[] = {
        // (x - 128) = [[72, -128, -111], [127, -125, -38], [-120, -120, 0]], w = [[1, 0], [2, 255]]:
        // y[0, 0] = 72 + 2 * 127 + 255 * -125 = -31549, ...
        {"no padding", {200, 0, 17, 255, 3, 90, 8, 8, 128}, {1, 0, 2, 255}, 128, {0, 0, 0, 0}, {1, 1, 2, 2},
         {-31549, -10068, -30713, -365}},
        // x - 1 = [[1, 2, 3], [4, 5, 6], [7, 8, 9]], w = [[1, 2], [3, 250]], pads 1: y[0, 0] = 250 * 1,
        // y[1, 1] = 1 + 2 * 2 + 3 * 4 + 250 * 5 = 1267, y[3, 3] = 9 * 1.
        {"pads 1", {2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 2, 3, 250}, 1, {1, 1, 1, 1}, {1, 1, 4, 4},
         {250, 503, 756, 9, 1002, 1267, 1523, 21, 1758, 2035, 2291, 33, 14, 23, 26, 9}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 1, 3, 3}, onnx::TensorProto::UINT8);
        typed(g->add_output(), "y", c.out, onnx::TensorProto::INT32);
        initializer(g, "w", onnx::TensorProto::UINT8, {1, 1, 2, 2}, c.w);
        initializer(g, "x_zp", onnx::TensorProto::UINT8, {}, {c.x_zp});
        set_ints(node(g, "ConvInteger", {"x", "w", "x_zp"}, {"y"}), "pads", c.pads);
        const auto y = run(m, {{"x", tensor(DType::uint8, {1, 1, 3, 3}, c.x)}});
        expect_tensor(y.at(0), DType::int32, c.out, c.expected);
    }
}

TEST(OnnxCoverage, QLinearConvPerChannelWeightsAndBias) {
    // x uint8 [1, 1, 3, 3] (x_scale 0.02, x_zp 100), w uint8 [2, 1, 2, 2] with per-channel
    // w_scale [0.5, 0.005] and w_zp [2, 128], B int32 [50, -1000], y_scale 0.3, y_zp 20. numpy:
    // acc[m] = sum((x window - 100) * (w[m] - w_zp[m])) + B[m] = [[95, -94], [-187, -80]] and
    // [[-43535, 31364], [31920, -12428]]; y = clip(rint(acc * float32(float32(x_scale * w_scale[m])
    // / y_scale)) + 20, 0, 255): [3.1667, -3.1333, -6.2333, -2.6667] -> [23, 17, 14, 17];
    // [-14.5117, 10.4547, 10.64, -4.1427] -> [5, 30, 31, 16].
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 1, 3, 3}, onnx::TensorProto::UINT8);
    typed(g->add_output(), "y", {1, 2, 2, 2}, onnx::TensorProto::UINT8);
    initializer(g, "x_scale", onnx::TensorProto::FLOAT, {}, {0.02});
    initializer(g, "x_zp", onnx::TensorProto::UINT8, {}, {100});
    initializer(g, "w", onnx::TensorProto::UINT8, {2, 1, 2, 2}, {1, 2, 3, 4, 250, 0, 7, 128});
    initializer(g, "w_scale", onnx::TensorProto::FLOAT, {2}, {0.5, 0.005});
    initializer(g, "w_zp", onnx::TensorProto::UINT8, {2}, {2, 128});
    initializer(g, "y_scale", onnx::TensorProto::FLOAT, {}, {0.3});
    initializer(g, "y_zp", onnx::TensorProto::UINT8, {}, {20});
    initializer(g, "B", onnx::TensorProto::INT32, {2}, {50, -1000});
    node(g, "QLinearConv", {"x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "B"}, {"y"});
    const auto y = run(m, {{"x", tensor(DType::uint8, {1, 1, 3, 3}, {10, 200, 37, 255, 0, 128, 90, 64, 3})}});
    expect_tensor(y.at(0), DType::uint8, {1, 2, 2, 2}, {23, 17, 14, 17, 5, 30, 31, 16});
}

// ---------------------------------------------------------------------------------------------
// 3. QLinearMatMul

TEST(OnnxCoverage, QLinearMatMulSpecExample) {
    // The ONNX spec's example (onnx/backend/test/case/node/qlinearmatmul.py): expected
    // [[168, 115, 255], [1, 66, 151]].
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "a", {2, 4}, onnx::TensorProto::UINT8);
    typed(g->add_input(), "b", {4, 3}, onnx::TensorProto::UINT8);
    typed(g->add_output(), "y", {2, 3}, onnx::TensorProto::UINT8);
    initializer(g, "a_scale", onnx::TensorProto::FLOAT, {}, {0.0066});
    initializer(g, "a_zp", onnx::TensorProto::UINT8, {}, {113});
    initializer(g, "b_scale", onnx::TensorProto::FLOAT, {}, {0.00705});
    initializer(g, "b_zp", onnx::TensorProto::UINT8, {}, {114});
    initializer(g, "y_scale", onnx::TensorProto::FLOAT, {}, {0.0107});
    initializer(g, "y_zp", onnx::TensorProto::UINT8, {}, {118});
    node(g, "QLinearMatMul", {"a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"}, {"y"});
    const auto y = run(m, {{"a", tensor(DType::uint8, {2, 4}, {208, 236, 0, 238, 3, 214, 255, 29})},
                           {"b", tensor(DType::uint8, {4, 3}, {152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247})}});
    expect_tensor(y.at(0), DType::uint8, {2, 3}, {168, 115, 255, 1, 66, 151});
}

// ---------------------------------------------------------------------------------------------
// 4. BitShift

namespace {

onnx::ModelProto bit_shift_model(const std::string& direction, int elem, std::int64_t n) {
    auto m = model(11);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {n}, elem);
    typed(g->add_input(), "s", {n}, elem);
    typed(g->add_output(), "y", {n}, elem);
    set_string(node(g, "BitShift", {"x", "s"}, {"y"}), "direction", direction);
    return m;
}

Tensor uint64_tensor(const std::vector<std::uint64_t>& v) {
    Tensor t = Tensor::zeros(DType::uint64, {static_cast<std::int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.values<std::uint64_t>().begin());
    return t;
}

}  // namespace

TEST(OnnxCoverage, BitShiftUint8WrapsAndShiftsOutPastTheWidth) {
    const std::vector<double> x{200, 1, 255, 16, 7, 128, 255};
    const std::vector<double> s{1, 7, 8, 2, 0, 200, 9};
    // Hand: left = (x * 2^s) mod 256: 200 << 1 = 400 - 256 = 144, 1 << 7 = 128, 255 << 8 = 0,
    // 16 << 2 = 64, 7 << 0 = 7, shifts of 200 and 9 (>= 8) give 0.
    auto left = run(bit_shift_model("LEFT", onnx::TensorProto::UINT8, 7),
                    {{"x", tensor(DType::uint8, {7}, x)}, {"s", tensor(DType::uint8, {7}, s)}});
    expect_tensor(left.at(0), DType::uint8, {7}, {144, 128, 0, 64, 7, 0, 0});
    // right = floor(x / 2^s): 100, 0, 0 (shift 8), 4, 7, 0, 0.
    auto right = run(bit_shift_model("RIGHT", onnx::TensorProto::UINT8, 7),
                     {{"x", tensor(DType::uint8, {7}, x)}, {"s", tensor(DType::uint8, {7}, s)}});
    expect_tensor(right.at(0), DType::uint8, {7}, {100, 0, 0, 4, 7, 0, 0});
}

TEST(OnnxCoverage, BitShiftUint64FullWidth) {
    constexpr std::uint64_t top = std::uint64_t{1} << 63, ones = ~std::uint64_t{0};
    const auto x = uint64_tensor({top + 5, 3, ones, 1, ones, 0x0123456789abcdefull});
    const auto s = uint64_tensor({1, 62, 64, 63, 63, 4});
    // Hand: (2^63 + 5) << 1 = 10 mod 2^64; 3 << 62 = 0xC000000000000000; ones << 64 = 0;
    // 1 << 63 = 2^63; ones << 63 = 2^63; 0x0123456789abcdef << 4 = 0x123456789abcdef0.
    auto left = run(bit_shift_model("LEFT", onnx::TensorProto::UINT64, 6), {{"x", x}, {"s", s}}).at(0);
    ASSERT_EQ(left.dtype(), DType::uint64);
    const auto l = left.values<std::uint64_t>();
    const std::vector<std::uint64_t> expected_left{10, 0xC000000000000000ull, 0, top, top, 0x123456789abcdef0ull};
    EXPECT_EQ(std::vector<std::uint64_t>(l.begin(), l.end()), expected_left);
    // (2^63 + 5) >> 1 = 2^62 + 2; 3 >> 62 = 0; ones >> 64 = 0; 1 >> 63 = 0; ones >> 63 = 1;
    // 0x0123456789abcdef >> 4 = 0x00123456789abcde.
    auto right = run(bit_shift_model("RIGHT", onnx::TensorProto::UINT64, 6), {{"x", x}, {"s", s}}).at(0);
    ASSERT_EQ(right.dtype(), DType::uint64);
    const auto r = right.values<std::uint64_t>();
    const std::vector<std::uint64_t> expected_right{(std::uint64_t{1} << 62) + 2, 0, 0, 0, 1, 0x00123456789abcdeull};
    EXPECT_EQ(std::vector<std::uint64_t>(r.begin(), r.end()), expected_right);
}

// ---------------------------------------------------------------------------------------------
// 5. ai.onnx.preview.training: Adagrad, Momentum, Adam

namespace {

/// A model importing only ai.onnx.preview.training, one optimizer node over one tensor X [3]:
/// inputs R (float scalar), T (int64 scalar), then the named [3] tensors, outputs the new ones.
onnx::ModelProto optimizer_model(const std::string& op, const std::vector<std::string>& tensors,
                                 const std::vector<std::string>& outputs) {
    onnx::ModelProto m;
    m.set_ir_version(7);
    auto* imp = m.add_opset_import();
    imp->set_domain("ai.onnx.preview.training");
    imp->set_version(1);
    auto* g = m.mutable_graph();
    g->set_name("g");
    typed(g->add_input(), "R", {});
    typed(g->add_input(), "T", {}, onnx::TensorProto::INT64);
    std::vector<std::string> inputs{"R", "T"};
    for (const auto& t : tensors) {
        typed(g->add_input(), t, {3});
        inputs.push_back(t);
    }
    for (const auto& o : outputs) typed(g->add_output(), o, {3});
    auto* n = node(g, op, inputs, outputs);
    n->set_domain("ai.onnx.preview.training");
    return m;
}

const std::vector<double> kX{1.0, -2.0, 0.5}, kG{-1.0, 3.0, 0.25}, kV{0.5, -1.0, 2.0}, kH{2.0, 1.0, 0.0};

std::map<std::string, Tensor> optimizer_inputs(std::int64_t t, const std::vector<std::pair<std::string, std::vector<double>>>& tensors) {
    std::map<std::string, Tensor> in{{"R", tensor(DType::float32, {}, {0.1})}, {"T", tensor(DType::int64, {}, {double(t)})}};
    for (const auto& [name, v] : tensors) in[name] = tensor(DType::float32, {3}, v);
    return in;
}

}  // namespace

TEST(OnnxCoverage, AdagradOneStep) {
    auto m = optimizer_model("Adagrad", {"X", "G", "H"}, {"X_new", "H_new"});
    auto* n = m.mutable_graph()->mutable_node(0);
    set_float(n, "norm_coefficient", 0.001f);
    set_float(n, "epsilon", 1e-5f);
    set_float(n, "decay_factor", 0.1f);
    // numpy float64, adagrad.py's apply_adagrad: r' = R / (1 + T * decay), g' = nc * X + G,
    // H' = H + g'^2, X' = X - r' * g' / (sqrt(H') + eps); R and the attributes float32-rounded
    // (float(np.float32(0.1)), ...) as the model holds them.
    const std::vector<double> h_new{2.9980009999051003, 9.988003999430411, 0.06275025001189811};
    const std::pair<std::int64_t, std::vector<double>> steps[] = {
        {0, {1.0576961852895388, -2.0948617008073347, 0.4000039903664547}},
        {3, {1.0443816808393365, -2.072970538831639, 0.4230799928540876}},
    };
    for (const auto& [t, x_new] : steps) {
        SCOPED_TRACE(t);
        const auto out = run(m, optimizer_inputs(t, {{"X", kX}, {"G", kG}, {"H", kH}}));
        ASSERT_EQ(out.size(), 2u);
        expect_tensor(out[0], DType::float32, {3}, x_new, 2e-6);
        expect_tensor(out[1], DType::float32, {3}, h_new, 2e-6);
    }
}

TEST(OnnxCoverage, MomentumStandardAndNesterov) {
    // numpy float64, momentum.py's apply_momentum / apply_nesterov: g' = nc * X + G,
    // beta' = beta if T > 0 else 1, V' = alpha * V + beta' * g'; standard X' = X - R * V',
    // nesterov X' = X - R * (g' + alpha * V'); R = 0.1, nc = 0.001, alpha = 0.95, beta = 0.1, each
    // float32-rounded as the model holds them.
    const std::vector<double> v_t0{-0.524000005912967, 2.048000011825934, 2.150499976181891};
    const std::vector<double> v_t5{0.3750999925556593, -0.6501999836212025, 1.925049976533791};
    struct Step {
        std::string mode;
        std::int64_t t;
        std::vector<double> x_new, v_new;
    };
    const Step steps[] = {
        {"standard", 0, {1.0524000013721175, -2.204800004234351, 0.2849499991773162}, v_t0},
        {"standard", 5, {0.9624900001854915, -1.9349800006690063, 0.3074949994780729}, v_t5},
        {"nesterov", 0, {1.1496800021627314, -2.494360006039096, 0.2706525014063973}, v_t0},
        {"nesterov", 5, {1.0642655021072474, -2.2380310058685233, 0.29207025142335874}, v_t5},
    };
    for (const auto& s : steps) {
        SCOPED_TRACE(s.mode + " T=" + std::to_string(s.t));
        auto m = optimizer_model("Momentum", {"X", "G", "V"}, {"X_new", "V_new"});
        auto* n = m.mutable_graph()->mutable_node(0);
        set_float(n, "norm_coefficient", 0.001f);
        set_float(n, "alpha", 0.95f);
        set_float(n, "beta", 0.1f);
        set_string(n, "mode", s.mode);
        const auto out = run(m, optimizer_inputs(s.t, {{"X", kX}, {"G", kG}, {"V", kV}}));
        ASSERT_EQ(out.size(), 2u);
        expect_tensor(out[0], DType::float32, {3}, s.x_new, 2e-6);
        expect_tensor(out[1], DType::float32, {3}, s.v_new, 2e-6);
    }
}

TEST(OnnxCoverage, AdamWithAndWithoutBiasCorrection) {
    auto m = optimizer_model("Adam", {"X", "G", "V", "H"}, {"X_new", "V_new", "H_new"});
    auto* n = m.mutable_graph()->mutable_node(0);
    set_float(n, "norm_coefficient", 0.001f);
    set_float(n, "norm_coefficient_post", 0.01f);
    set_float(n, "alpha", 0.9f);
    set_float(n, "beta", 0.999f);
    set_float(n, "epsilon", 1e-6f);
    // numpy float64, adam.py's apply_adam: g' = nc * X + G, V' = alpha V + (1 - alpha) g',
    // H' = beta H + (1 - beta) g'^2, r = R sqrt(1 - beta^T) / (1 - alpha^T) if T > 0 else R,
    // X' = (1 - nc_post) (X - r V' / (sqrt(H') + eps)); R = 0.1 and the attributes
    // float32-rounded as the model holds them. H[2] = 0 makes sqrt(H') small, so X'[2] is large
    // and depends strongly on r (T = 2: r = R sqrt(1 - 0.999^2) / (1 - 0.9^2)).
    const std::vector<double> v_new{0.35009996426580475, -0.6001999046897516, 1.8250499582910444};
    const std::vector<double> h_new{1.9989980139002448, 1.0079879011570481, 6.2749442127324028e-05};
    const std::pair<std::int64_t, std::vector<double>> steps[] = {
        {0, {0.9654856278289266, -1.9208161752768829, -22.31105682869511}},
        {2, {0.984231396807151, -1.9660731492686825, -4.871610868764962}},
    };
    for (const auto& [t, x_new] : steps) {
        SCOPED_TRACE(t);
        const auto out = run(m, optimizer_inputs(t, {{"X", kX}, {"G", kG}, {"V", kV}, {"H", kH}}));
        ASSERT_EQ(out.size(), 3u);
        expect_tensor(out[0], DType::float32, {3}, x_new, 2e-5);
        expect_tensor(out[1], DType::float32, {3}, v_new, 2e-6);
        expect_tensor(out[2], DType::float32, {3}, h_new, 2e-6);
    }
}

// ---------------------------------------------------------------------------------------------
// 6. DFT and STFT (opset 17)

TEST(OnnxCoverage, DftMatchesNumpyFft) {
    const std::vector<double> signal{1, 2, 0, -1, 3, 0.5, -2, 4};
    // numpy.fft.fft(signal)
    const std::vector<std::pair<double, double>> fft8{
        {7.5, 0.0}, {2.5961940777125587, 0.47487373415291634}, {6.0, 0.5}, {-6.596194077712559, 4.474873734152917},
        {-3.5, 0.0}, {-6.596194077712559, -4.474873734152917}, {6.0, -0.5}, {2.5961940777125587, -0.47487373415291634}};
    {  // forward, real input [1, 8, 1]
        auto m = model(17);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 8, 1});
        typed(g->add_output(), "y", {1, 8, 2});
        node(g, "DFT", {"x"}, {"y"});
        const auto y = run(m, {{"x", tensor(DType::float32, {1, 8, 1}, signal)}});
        expect_tensor(y.at(0), DType::float32, {1, 8, 2}, interleave(fft8), 1e-5);
    }
    {  // onesided: numpy.fft.rfft(signal), the first 8 / 2 + 1 = 5 bins
        auto m = model(17);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 8, 1});
        typed(g->add_output(), "y", {1, 5, 2});
        set_int(node(g, "DFT", {"x"}, {"y"}), "onesided", 1);
        const auto y = run(m, {{"x", tensor(DType::float32, {1, 8, 1}, signal)}});
        expect_tensor(y.at(0), DType::float32, {1, 5, 2}, interleave({fft8.begin(), fft8.begin() + 5}), 1e-5);
    }
    {  // inverse of a complex input: numpy.fft.ifft([1+2j, -1+0.5j, 3-1j, 0.25])
        auto m = model(17);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 4, 2});
        typed(g->add_output(), "y", {1, 4, 2});
        set_int(node(g, "DFT", {"x"}, {"y"}), "inverse", 1);
        const auto y = run(m, {{"x", tensor(DType::float32, {1, 4, 2}, {1, 2, -1, 0.5, 3, -1, 0.25, 0})}});
        expect_tensor(y.at(0), DType::float32, {1, 4, 2}, {0.8125, 0.375, -0.625, 0.4375, 1.1875, 0.125, -0.375, 1.0625}, 1e-6);
    }
    {  // dft_length 8 on a length-5 signal (zero-padded): numpy.fft.fft([1, -2, 3, 0.5, 2], n=8)
        auto m = model(17);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 5, 1});
        typed(g->add_output(), "y", {1, 8, 2});
        initializer(g, "n", onnx::TensorProto::INT64, {}, {8});
        node(g, "DFT", {"x", "n"}, {"y"});
        const auto y = run(m, {{"x", tensor(DType::float32, {1, 5, 1}, {1, -2, 3, 0.5, 2})}});
        expect_tensor(y.at(0), DType::float32, {1, 8, 2},
                      interleave({{4.5, 0.0}, {-2.767766952966369, -1.9393398282201786}, {0.0, 2.5},
                                  {0.7677669529663689, 4.060660171779821}, {7.5, 0.0}, {0.7677669529663689, -4.060660171779821},
                                  {0.0, -2.5}, {-2.767766952966369, 1.9393398282201786}}),
                      1e-5);
    }
}

TEST(OnnxCoverage, StftWithAWindow) {
    // signal [1, 8, 1], frame_step 2, window = periodic Hann of length 4 = [0, 0.5, 1, 0.5]
    // (frame_length 4): (8 - 4) / 2 + 1 = 3 frames. numpy: np.fft.fft(signal[2f:2f+4] * window)
    // for f in 0..2; onesided (the default, or 1) keeps bins 0..2, onesided 0 all 4 (bin 3 is
    // bin 1's conjugate, the signal being real).
    const std::vector<std::vector<std::pair<double, double>>> frames{
        {{0.5, 0}, {0, -1.5}, {-0.5, 0}, {0, 1.5}},
        {{2.75, 0}, {-3, 0.75}, {3.25, 0}, {-3, -0.75}},
        {{0.25, 0}, {2, 1.75}, {-4.25, 0}, {2, -1.75}},
    };
    for (int onesided : {-1, 1, 0}) {  // -1: the attribute absent (the window a constant, so ONNX
                                       // shape inference sees frame_length too)
        SCOPED_TRACE(onesided);
        const std::int64_t bins = onesided == 0 ? 4 : 3;
        auto m = model(17);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 8, 1});
        typed(g->add_output(), "y", {1, 3, bins, 2});
        initializer(g, "step", onnx::TensorProto::INT64, {}, {2});
        initializer(g, "window", onnx::TensorProto::FLOAT, {4}, {0, 0.5, 1, 0.5});
        auto* n = node(g, "STFT", {"x", "step", "window"}, {"y"});
        if (onesided >= 0) set_int(n, "onesided", onesided);
        std::vector<std::pair<double, double>> expected;
        for (const auto& f : frames) expected.insert(expected.end(), f.begin(), f.begin() + bins);
        const auto y = run(m, {{"x", tensor(DType::float32, {1, 8, 1}, {1, 2, 0, -1, 3, 0.5, -2, 4})}});
        expect_tensor(y.at(0), DType::float32, {1, 3, bins, 2}, interleave(expected), 1e-6);
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Loop, Scan, If

namespace {

/// Loop body (i, cond, acc) -> (cond_out, acc + float(i) * w, acc + float(i) * w) with w an
/// outer-scope [2] value; cond_out is `cond_expr` ("" passes cond through).
onnx::GraphProto accumulating_body(const std::string& cond_op = "") {
    onnx::GraphProto b;
    b.set_name("body");
    typed(b.add_input(), "i", {}, onnx::TensorProto::INT64);
    typed(b.add_input(), "cond", {}, onnx::TensorProto::BOOL);
    typed(b.add_input(), "acc", {2});
    typed(b.add_output(), "cond_out", {}, onnx::TensorProto::BOOL);
    typed(b.add_output(), "acc_out", {2});
    typed(b.add_output(), "scan_out", {2});
    set_int(body_node(b, "Cast", {"i"}, {"i_f"}), "to", onnx::TensorProto::FLOAT);
    body_node(b, "Mul", {"i_f", "w"}, {"step"});
    body_node(b, "Add", {"acc", "step"}, {"acc_out"});
    body_node(b, "Identity", {"acc_out"}, {"scan_out"});
    if (cond_op.empty()) body_node(b, "Identity", {"cond"}, {"cond_out"});
    else if (cond_op == "less_than_1") {
        initializer(&b, "one", onnx::TensorProto::INT64, {}, {1});
        body_node(b, "Less", {"i", "one"}, {"cond_out"});
    } else {  // "data": ReduceSum(acc_out) > 0, a run-time value
        initializer(&b, "zero", onnx::TensorProto::FLOAT, {}, {0});
        set_int(body_node(b, "ReduceSum", {"acc_out"}, {"total"}), "keepdims", 0);
        body_node(b, "Greater", {"total", "zero"}, {"cond_out"});
    }
    return b;
}

/// Loop(M, cond, x) over accumulating_body; M an initializer (`trips` >= 0), a graph input
/// (`trips` = -1) or absent (-2).
onnx::ModelProto loop_model(std::int64_t trips, const std::string& cond_op, std::int64_t scan_length) {
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {2});
    typed(g->add_input(), "w", {2});
    if (trips == -1) typed(g->add_input(), "M", {}, onnx::TensorProto::INT64);
    typed(g->add_output(), "final", {2});
    typed(g->add_output(), "scanned", {scan_length, 2}, onnx::TensorProto::FLOAT, scan_length < 0);
    if (trips >= 0) initializer(g, "M", onnx::TensorProto::INT64, {}, {double(trips)});
    initializer(g, "true", onnx::TensorProto::BOOL, {}, {1});
    set_graph(node(g, "Loop", {trips == -2 ? "" : "M", "true", "x"}, {"final", "scanned"}), "body", accumulating_body(cond_op));
    return m;
}

const std::map<std::string, Tensor> loop_inputs() {
    return {{"x", Tensor::from_values(DType::float32, {2}, {1, 10})}, {"w", Tensor::from_values(DType::float32, {2}, {1, -1})}};
}

}  // namespace

TEST(OnnxCoverage, LoopWithTripCountAccumulatesAndScans) {
    // Hand: acc_k = x + w * (0 + 1 + ... + k) for x = [1, 10], w = [1, -1]: k = 0..3 gives
    // [1, 10], [2, 9], [4, 7], [7, 4].
    const auto out = run(loop_model(4, "", 4), loop_inputs());
    ASSERT_EQ(out.size(), 2u);
    expect_tensor(out[0], DType::float32, {2}, {7, 4});
    expect_tensor(out[1], DType::float32, {4, 2}, {1, 10, 2, 9, 4, 7, 7, 4});
}

TEST(OnnxCoverage, LoopStopsWhenTheBodyConditionTurnsFalse) {
    // No M; cond_out = i < 1: true after iteration 0, false after iteration 1, so 2 iterations:
    // [1, 10], [2, 9].
    const auto out = run(loop_model(-2, "less_than_1", 2), loop_inputs());
    ASSERT_EQ(out.size(), 2u);
    expect_tensor(out[0], DType::float32, {2}, {2, 9});
    expect_tensor(out[1], DType::float32, {2, 2}, {1, 10, 2, 9});
    // The same with M = 10: the condition still stops it after 2.
    const auto bounded = run(loop_model(10, "less_than_1", 2), loop_inputs());
    expect_tensor(bounded[0], DType::float32, {2}, {2, 9});
}

TEST(OnnxCoverage, LoopTripCountFromAGraphInputMustBeBound) {
    const auto m = loop_model(-1, "", -1);
    const auto refused = refusal(m);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "Loop");
    EXPECT_EQ(refused->constant_input, "M");
    EXPECT_NE(refused->reason.find("trip count"), std::string::npos) << refused->reason;
    OnnxImportOptions options;
    options.constant_inputs["M"] = tensor(DType::int64, {}, {3});
    const auto imported = import_with(m, options);
    EXPECT_EQ(imported.unused_inputs, (std::vector<std::string>{"M"}));
    // Three iterations: [1, 10], [2, 9], [4, 7].
    const auto out = run_imported(imported, loop_inputs());
    ASSERT_EQ(out.size(), 2u);
    expect_tensor(out[0], DType::float32, {2}, {4, 7});
    expect_tensor(out[1], DType::float32, {3, 2}, {1, 10, 2, 9, 4, 7});
}

TEST(OnnxCoverage, LoopConditionComputedFromDataIsRefused) {
    const auto refused = refusal(loop_model(3, "data", 3));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "Loop");
    EXPECT_NE(refused->reason.find("cond_out"), std::string::npos) << refused->reason;
}

TEST(OnnxCoverage, ScanReverseInputAndOutputAxis1) {
    // Scan opset 9: state s [2], scan input xs [3, 2] read in reverse (scan_input_directions
    // [1]), body s' = s + x_t, scan output y_t = s' stacked along axis 1 (scan_output_axes [1]).
    // Hand: xs = [[1, 2], [3, 4], [5, 6]], s0 = [0, 0]: t = 0 reads [5, 6] -> [5, 6]; t = 1 reads
    // [3, 4] -> [8, 10]; t = 2 reads [1, 2] -> [9, 12]. ys[:, t] = s_t: [[5, 8, 9], [6, 10, 12]].
    onnx::GraphProto b;
    b.set_name("body");
    typed(b.add_input(), "s", {2});
    typed(b.add_input(), "x_t", {2});
    typed(b.add_output(), "s_out", {2});
    typed(b.add_output(), "y_t", {2});
    body_node(b, "Add", {"s", "x_t"}, {"s_out"});
    body_node(b, "Identity", {"s_out"}, {"y_t"});
    auto m = model(11);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "s0", {2});
    typed(g->add_input(), "xs", {3, 2});
    typed(g->add_output(), "s_final", {2});
    typed(g->add_output(), "ys", {2, 3});
    auto* n = node(g, "Scan", {"s0", "xs"}, {"s_final", "ys"});
    set_graph(n, "body", b);
    set_int(n, "num_scan_inputs", 1);
    set_ints(n, "scan_input_directions", {1});
    set_ints(n, "scan_output_axes", {1});
    const auto out = run(m, {{"s0", tensor(DType::float32, {2}, {0, 0})}, {"xs", tensor(DType::float32, {3, 2}, {1, 2, 3, 4, 5, 6})}});
    ASSERT_EQ(out.size(), 2u);
    expect_tensor(out[0], DType::float32, {2}, {9, 12});
    expect_tensor(out[1], DType::float32, {2, 3}, {5, 8, 9, 6, 10, 12});
}

namespace {

/// If(c) with then = (x + 1, x * 2) and else = (x - 1, x * 3), or with `mismatched` branches
/// (then: x [2], else: Concat(x, x) [4]).
onnx::ModelProto if_model(bool mismatched) {
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "c", {}, onnx::TensorProto::BOOL);
    typed(g->add_input(), "x", {2});
    onnx::GraphProto then_b, else_b;
    then_b.set_name("then");
    else_b.set_name("else");
    if (mismatched) {
        typed(g->add_output(), "y", {2}, onnx::TensorProto::FLOAT, true);
        typed(then_b.add_output(), "t", {2});
        body_node(then_b, "Identity", {"x"}, {"t"});
        typed(else_b.add_output(), "e", {4});
        set_int(body_node(else_b, "Concat", {"x", "x"}, {"e"}), "axis", 0);
        auto* n = node(g, "If", {"c"}, {"y"});
        set_graph(n, "then_branch", then_b);
        set_graph(n, "else_branch", else_b);
        return m;
    }
    typed(g->add_output(), "y1", {2});
    typed(g->add_output(), "y2", {2});
    initializer(g, "one", onnx::TensorProto::FLOAT, {}, {1});
    initializer(g, "two", onnx::TensorProto::FLOAT, {}, {2});
    initializer(g, "three", onnx::TensorProto::FLOAT, {}, {3});
    typed(then_b.add_output(), "t1", {2});
    typed(then_b.add_output(), "t2", {2});
    body_node(then_b, "Add", {"x", "one"}, {"t1"});
    body_node(then_b, "Mul", {"x", "two"}, {"t2"});
    typed(else_b.add_output(), "e1", {2});
    typed(else_b.add_output(), "e2", {2});
    body_node(else_b, "Sub", {"x", "one"}, {"e1"});
    body_node(else_b, "Mul", {"x", "three"}, {"e2"});
    auto* n = node(g, "If", {"c"}, {"y1", "y2"});
    set_graph(n, "then_branch", then_b);
    set_graph(n, "else_branch", else_b);
    return m;
}

}  // namespace

TEST(OnnxCoverage, IfWithARunTimeConditionSelectsBothOutputs) {
    const auto imported = import_with(if_model(false));
    const Tensor x = tensor(DType::float32, {2}, {3, -4});
    // true: (x + 1, 2x) = ([4, -3], [6, -8]); false: (x - 1, 3x) = ([2, -5], [9, -12]).
    auto yes = run_imported(imported, {{"c", tensor(DType::boolean, {}, {1})}, {"x", x}});
    ASSERT_EQ(yes.size(), 2u);
    expect_tensor(yes[0], DType::float32, {2}, {4, -3});
    expect_tensor(yes[1], DType::float32, {2}, {6, -8});
    auto no = run_imported(imported, {{"c", tensor(DType::boolean, {}, {0})}, {"x", x}});
    ASSERT_EQ(no.size(), 2u);
    expect_tensor(no[0], DType::float32, {2}, {2, -5});
    expect_tensor(no[1], DType::float32, {2}, {9, -12});
}

TEST(OnnxCoverage, IfWithBranchesOfDifferentShapesAsksForTheCondition) {
    const auto m = if_model(true);
    const auto refused = refusal(m);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "If");
    EXPECT_EQ(refused->constant_input, "c");
    EXPECT_NE(refused->reason.find("float32[2] in then_branch and float32[4] in else_branch"), std::string::npos) << refused->reason;
    // Bound to false, the else branch (Concat) is inlined.
    OnnxImportOptions options;
    options.constant_inputs["c"] = tensor(DType::boolean, {}, {0});
    const auto out = run_imported(import_with(m, options), {{"x", tensor(DType::float32, {2}, {3, -4})}});
    expect_tensor(out.at(0), DType::float32, {4}, {3, -4, 3, -4});
}

// ---------------------------------------------------------------------------------------------
// 8. Sequences and optionals

TEST(OnnxCoverage, SequenceOpsResolveAtImport) {
    // x [3, 2] = [[1, 2], [3, 4], [5, 6]] split into rows (keepdims 0): [r0, r1, r2].
    // SequenceAt(-1) = r2 = [5, 6]. SequenceInsert(t = [7, 8], position 1) = [r0, t, r1, r2];
    // SequenceErase(position -2) removes r1: [r0, t, r2]; ConcatFromSequence(axis 1, new_axis 1)
    // stacks them as columns: [[1, 7, 5], [2, 8, 6]].
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {3, 2});
    typed(g->add_input(), "t", {2});
    typed(g->add_output(), "last", {2});
    typed(g->add_output(), "stacked", {2, 3});
    initializer(g, "minus_one", onnx::TensorProto::INT64, {}, {-1});
    initializer(g, "one", onnx::TensorProto::INT64, {}, {1});
    initializer(g, "minus_two", onnx::TensorProto::INT64, {}, {-2});
    auto* split = node(g, "SplitToSequence", {"x"}, {"rows"});
    set_int(split, "keepdims", 0);
    node(g, "SequenceAt", {"rows", "minus_one"}, {"last"})->set_name("at");
    node(g, "SequenceInsert", {"rows", "t", "one"}, {"inserted"})->set_name("insert");
    node(g, "SequenceErase", {"inserted", "minus_two"}, {"erased"})->set_name("erase");
    auto* concat = node(g, "ConcatFromSequence", {"erased"}, {"stacked"});
    set_int(concat, "axis", 1);
    set_int(concat, "new_axis", 1);
    const auto out = run(m, {{"x", tensor(DType::float32, {3, 2}, {1, 2, 3, 4, 5, 6})}, {"t", tensor(DType::float32, {2}, {7, 8})}});
    ASSERT_EQ(out.size(), 2u);
    expect_tensor(out[0], DType::float32, {2}, {5, 6});
    expect_tensor(out[1], DType::float32, {2, 3}, {1, 7, 5, 2, 8, 6});
}

TEST(OnnxCoverage, SequenceGraphInputAndOutput) {
    // seq: a sequence input of 3 float [2] tensors; out = SequenceInsert(seq, x, 0), a sequence
    // output of 4, expanded to out[0..3]; total = ConcatFromSequence(seq, axis 0) [6].
    auto m = model(13);
    auto* g = m.mutable_graph();
    auto* seq = g->add_input();
    seq->set_name("seq");
    auto* elem = seq->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type();
    elem->set_elem_type(onnx::TensorProto::FLOAT);
    elem->mutable_shape()->add_dim()->set_dim_value(2);
    typed(g->add_input(), "x", {2});
    auto* out_seq = g->add_output();
    out_seq->set_name("out");
    *out_seq->mutable_type() = seq->type();
    typed(g->add_output(), "total", {6}, onnx::TensorProto::FLOAT, true);
    initializer(g, "zero", onnx::TensorProto::INT64, {}, {0});
    node(g, "SequenceInsert", {"seq", "x", "zero"}, {"out"})->set_name("insert");
    set_int(node(g, "ConcatFromSequence", {"seq"}, {"total"}), "axis", 0);
    OnnxImportOptions options;
    options.sequence_inputs["seq"] = std::vector<TensorType>(3, TensorType{{2}, DType::float32});
    const auto imported = import_with(m, options);
    EXPECT_EQ(imported.input_names, (std::vector<std::string>{"seq[0]", "seq[1]", "seq[2]", "x"}));
    EXPECT_EQ(imported.output_names, (std::vector<std::string>{"out[0]", "out[1]", "out[2]", "out[3]", "total"}));
    ASSERT_EQ(imported.sequence_outputs.count("out"), 1u);
    EXPECT_EQ(imported.sequence_outputs.at("out"), (std::vector<std::string>{"out[0]", "out[1]", "out[2]", "out[3]"}));
    const auto out = run_imported(imported, {{"seq[0]", tensor(DType::float32, {2}, {1, 2})},
                                             {"seq[1]", tensor(DType::float32, {2}, {3, 4})},
                                             {"seq[2]", tensor(DType::float32, {2}, {5, 6})},
                                             {"x", tensor(DType::float32, {2}, {-1, -2})}});
    ASSERT_EQ(out.size(), 5u);
    expect_tensor(out[0], DType::float32, {2}, {-1, -2});
    expect_tensor(out[1], DType::float32, {2}, {1, 2});
    expect_tensor(out[2], DType::float32, {2}, {3, 4});
    expect_tensor(out[3], DType::float32, {2}, {5, 6});
    expect_tensor(out[4], DType::float32, {6}, {1, 2, 3, 4, 5, 6});
    // Elements of another dtype than the declared float are bad input.
    OnnxImportOptions wrong;
    wrong.sequence_inputs["seq"] = std::vector<TensorType>(3, TensorType{{2}, DType::int64});
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_with(m, wrong); }));
}

TEST(OnnxCoverage, OptionalHasElementOfAnAbsentInputIsFalse) {
    // opt: an optional tensor input given no value (absent_inputs). y = Where(has, x, -x) = -x.
    auto m = model(16);
    auto* g = m.mutable_graph();
    auto* opt = g->add_input();
    opt->set_name("opt");
    auto* elem = opt->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type();
    elem->set_elem_type(onnx::TensorProto::FLOAT);
    elem->mutable_shape()->add_dim()->set_dim_value(2);
    typed(g->add_input(), "x", {2});
    typed(g->add_output(), "y", {2});
    node(g, "OptionalHasElement", {"opt"}, {"has"})->set_name("has");
    node(g, "Neg", {"x"}, {"neg"})->set_name("neg");
    node(g, "Where", {"has", "x", "neg"}, {"y"})->set_name("where");
    OnnxImportOptions options;
    options.absent_inputs.insert("opt");
    const auto imported = import_with(m, options);
    EXPECT_EQ(imported.input_names, (std::vector<std::string>{"x"}));
    const auto out = run_imported(imported, {{"x", tensor(DType::float32, {2}, {3, -4})}});
    expect_tensor(out.at(0), DType::float32, {2}, {-3, 4});
}

// ---------------------------------------------------------------------------------------------
// Constant folding of integer arithmetic and bool logic

TEST(OnnxCoverage, FoldedIntegerArithmeticMatchesTheKernel) {
    // uint8 a = [200, 10, 7], b = [100, 5, 7] as initializers (folded at import) and a also as the
    // run-time input x (computed by the kernel). Hand, modulo 256: a + b = [300 - 256 = 44, 15, 14];
    // b - a = [-100 + 256 = 156, -5 + 256 = 251, 0]. int8 c = [100, -3, 11] * d = [2, 5, -11] =
    // [200 - 256 = -56, -15, -121]. bool: p = [1, 1, 0, 0], q = [1, 0, 1, 0]: And [1, 0, 0, 0],
    // Or [1, 1, 1, 0], Xor [0, 1, 1, 0], Not p [0, 0, 1, 1].
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {3}, onnx::TensorProto::UINT8);
    initializer(g, "a", onnx::TensorProto::UINT8, {3}, {200, 10, 7});
    initializer(g, "b", onnx::TensorProto::UINT8, {3}, {100, 5, 7});
    initializer(g, "c", onnx::TensorProto::INT8, {3}, {100, -3, 11});
    initializer(g, "d", onnx::TensorProto::INT8, {3}, {2, 5, -11});
    initializer(g, "p", onnx::TensorProto::BOOL, {4}, {1, 1, 0, 0});
    initializer(g, "q", onnx::TensorProto::BOOL, {4}, {1, 0, 1, 0});
    const std::vector<std::tuple<std::string, std::vector<std::string>, int, Shape>> outputs{
        {"Add", {"a", "b"}, onnx::TensorProto::UINT8, {3}},  {"Add", {"x", "b"}, onnx::TensorProto::UINT8, {3}},
        {"Sub", {"b", "a"}, onnx::TensorProto::UINT8, {3}},  {"Sub", {"b", "x"}, onnx::TensorProto::UINT8, {3}},
        {"Mul", {"c", "d"}, onnx::TensorProto::INT8, {3}},   {"And", {"p", "q"}, onnx::TensorProto::BOOL, {4}},
        {"Or", {"p", "q"}, onnx::TensorProto::BOOL, {4}},    {"Xor", {"p", "q"}, onnx::TensorProto::BOOL, {4}},
        {"Not", {"p"}, onnx::TensorProto::BOOL, {4}},
    };
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        const auto& [op, in, elem, shape] = outputs[k];
        const std::string name = "y" + std::to_string(k);
        typed(g->add_output(), name, shape, elem);
        node(g, op, in, {name})->set_name(name + "_node");
    }
    const auto y = run(m, {{"x", tensor(DType::uint8, {3}, {200, 10, 7})}});
    ASSERT_EQ(y.size(), outputs.size());
    expect_tensor(y[0], DType::uint8, {3}, {44, 15, 14});
    expect_tensor(y[1], DType::uint8, {3}, {44, 15, 14});
    expect_tensor(y[2], DType::uint8, {3}, {156, 251, 0});
    expect_tensor(y[3], DType::uint8, {3}, {156, 251, 0});
    expect_tensor(y[4], DType::int8, {3}, {-56, -15, -121});
    expect_tensor(y[5], DType::boolean, {4}, {1, 0, 0, 0});
    expect_tensor(y[6], DType::boolean, {4}, {1, 1, 1, 0});
    expect_tensor(y[7], DType::boolean, {4}, {0, 1, 1, 0});
    expect_tensor(y[8], DType::boolean, {4}, {0, 0, 1, 1});
}

// ---------------------------------------------------------------------------------------------
// 9. Bad input: a clear refusal, never a crash

TEST(OnnxCoverage, SequenceAtOutOfRangeIsRefused) {
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {3, 2});
    typed(g->add_output(), "y", {2});
    initializer(g, "three", onnx::TensorProto::INT64, {}, {3});
    set_int(node(g, "SplitToSequence", {"x"}, {"rows"}), "keepdims", 0);
    node(g, "SequenceAt", {"rows", "three"}, {"y"})->set_name("at");
    const auto refused = refusal(m);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "SequenceAt");
    EXPECT_NE(refused->reason.find("position 3 is outside a sequence of 3 tensors"), std::string::npos) << refused->reason;
    // import_onnx_bytes raises it as Error(input).
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_with(m); }, "position 3 is outside a sequence of 3 tensors"));
}

TEST(OnnxCoverage, BitShiftOnSignedIntegersIsRefused) {
    const auto refused = refusal(bit_shift_model("LEFT", onnx::TensorProto::INT32, 2));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "BitShift");
    EXPECT_EQ(refused->reason, "BitShift of int32 (ONNX allows unsigned integers)");
}

TEST(OnnxCoverage, QuantizeLinearWithAFloatZeroPointIsRefused) {
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {2});
    typed(g->add_output(), "y", {2}, onnx::TensorProto::FLOAT, true);
    initializer(g, "scale", onnx::TensorProto::FLOAT, {}, {0.5});
    initializer(g, "zp", onnx::TensorProto::FLOAT, {}, {1});
    node(g, "QuantizeLinear", {"x", "scale", "zp"}, {"y"});
    const auto refused = refusal(m);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "QuantizeLinear");
    EXPECT_EQ(refused->reason, "y_zero_point has dtype float32; quantized tensors are uint8 or int8");
}

TEST(OnnxCoverage, StftFrameStepZeroIsRefused) {
    auto m = model(17);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 8, 1});
    typed(g->add_output(), "y", {1, 3, 3, 2}, onnx::TensorProto::FLOAT, true);
    initializer(g, "step", onnx::TensorProto::INT64, {}, {0});
    initializer(g, "window", onnx::TensorProto::FLOAT, {4}, {0, 0.5, 1, 0.5});
    node(g, "STFT", {"x", "step", "window"}, {"y"});
    const auto refused = refusal(m);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "STFT");
    EXPECT_NE(refused->reason.find("frame_step > 0"), std::string::npos) << refused->reason;
}

TEST(OnnxCoverage, DftAlongTheLastAxisIsRefused) {
    auto m = model(17);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 8, 1});
    typed(g->add_output(), "y", {1, 8, 2}, onnx::TensorProto::FLOAT, true);
    set_int(node(g, "DFT", {"x"}, {"y"}), "axis", 2);
    const auto refused = refusal(m);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "DFT");
    EXPECT_EQ(refused->reason, "axis 2 for a rank-3 signal");
}

// ---------------------------------------------------------------------------------------------
// 11. Inputs found by attacking the converters (each once a crash, a silently wrong value or an
// unbounded import): the right value, or a refusal naming the cause.

TEST(OnnxCoverage, QLinearMatMulPerRowScalesFollowTheRowsOfA) {
    // a [3, 2] with a_scale per row [0.1, 0.2, 0.5], b [2, 2] with b_scale 0.5, y_scale per row
    // [1, 2, 4], zero points 0. Hand: a·b = [[70, 100], [150, 220], [230, 340]], multipliers per row
    // 0.05, 0.05, 0.0625 -> round(3.5000001, 5.0000001, 7.5000001, 11.0000002, 14.375, 21.25) =
    // [[4, 5], [8, 11], [14, 21]].
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "a", {3, 2}, onnx::TensorProto::UINT8);
    typed(g->add_output(), "y", {3, 2}, onnx::TensorProto::UINT8);
    initializer(g, "a_scale", onnx::TensorProto::FLOAT, {3}, {0.1, 0.2, 0.5});
    initializer(g, "zp", onnx::TensorProto::UINT8, {}, {0});
    initializer(g, "b", onnx::TensorProto::UINT8, {2, 2}, {1, 2, 3, 4});
    initializer(g, "b_scale", onnx::TensorProto::FLOAT, {}, {0.5});
    initializer(g, "y_scale", onnx::TensorProto::FLOAT, {3}, {1, 2, 4});
    node(g, "QLinearMatMul", {"a", "a_scale", "zp", "b", "b_scale", "zp", "y_scale", "zp"}, {"y"});
    const auto y = run(m, {{"a", tensor(DType::uint8, {3, 2}, {10, 20, 30, 40, 50, 60})}});
    expect_tensor(y.at(0), DType::uint8, {3, 2}, {4, 5, 8, 11, 14, 21});
}

TEST(OnnxCoverage, DynamicQuantizeLinearOfZerosHasScaleOne) {
    // A range of 0 would divide 0 by 0; ONNX Runtime gives scale 1, zero point 0, y 0.
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {2, 2});
    typed(g->add_output(), "y", {2, 2}, onnx::TensorProto::UINT8);
    typed(g->add_output(), "s", {});
    typed(g->add_output(), "z", {}, onnx::TensorProto::UINT8);
    node(g, "DynamicQuantizeLinear", {"x"}, {"y", "s", "z"});
    const auto out = run(m, {{"x", tensor(DType::float32, {2, 2}, {0, 0, 0, 0})}});
    expect_tensor(out.at(0), DType::uint8, {2, 2}, {0, 0, 0, 0});
    expect_tensor(out.at(1), DType::float32, {}, {1});
    expect_tensor(out.at(2), DType::uint8, {}, {0});
}

TEST(OnnxCoverage, FoldsRefuseOperandsOfTheWrongKind) {
    {  // Where with a float condition (the folder read its bool values out of bounds)
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_output(), "y", {2});
        initializer(g, "c", onnx::TensorProto::FLOAT, {2}, {1, 0});
        initializer(g, "a", onnx::TensorProto::FLOAT, {2}, {1, 2});
        node(g, "Where", {"c", "a", "a"}, {"y"});
        const auto r = refusal(m);
        ASSERT_TRUE(r);
        EXPECT_NE(r->reason.find("Where's condition must be bool"), std::string::npos) << r->reason;
    }
    {  // ConstantOfShape whose value holds no element
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_output(), "y", {2});
        initializer(g, "shape", onnx::TensorProto::INT64, {1}, {2});
        auto* n = node(g, "ConstantOfShape", {"shape"}, {"y"});
        auto* value = attribute(n, "value", onnx::AttributeProto::TENSOR)->mutable_t();
        value->set_data_type(onnx::TensorProto::FLOAT);
        value->add_dims(0);
        const auto r = refusal(m);
        ASSERT_TRUE(r);
        EXPECT_NE(r->reason.find("value must hold one element"), std::string::npos) << r->reason;
    }
}

TEST(OnnxCoverage, SequenceInputElementNamesMustBeNew) {
    // A sequence input `s` expands to `s[0]`; a later graph input literally named `s[0]` would
    // have been bound to the same value.
    auto m = model(13);
    auto* g = m.mutable_graph();
    auto* s = g->add_input();
    s->set_name("s");
    s->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    typed(g->add_input(), "s[0]", {1});
    typed(g->add_output(), "y", {1});
    initializer(g, "zero", onnx::TensorProto::INT64, {}, {0});
    node(g, "SequenceAt", {"s", "zero"}, {"e"});
    node(g, "Add", {"e", "s[0]"}, {"y"});
    OnnxImportOptions options;
    options.sequence_inputs["s"] = {TensorType{{1}, DType::float32}};
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_with(m, options); }, "element name 's[0]' is also a value of the model"));
}

TEST(OnnxCoverage, ShapeAndCountErrorsInSequencesAndScansAreRefused) {
    {  // SplitToSequence lengths that overflow int64 to the axis length
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {3});
        typed(g->add_output(), "n", {}, onnx::TensorProto::INT64);
        initializer(g, "split", onnx::TensorProto::INT64, {2}, {4611686018427387904.0, -4611686018427387901.0});
        node(g, "SplitToSequence", {"x", "split"}, {"seq"});
        node(g, "SequenceLength", {"seq"}, {"n"});
        const auto r = refusal(m);
        ASSERT_TRUE(r);
        EXPECT_NE(r->reason.find("split lengths sum past the axis length 3"), std::string::npos) << r->reason;
    }
    {  // an opset-8 Scan whose state has no batch axis
        auto m = model(8);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "s", {});
        typed(g->add_input(), "x", {1, 3});
        typed(g->add_output(), "sf", {});
        onnx::GraphProto body;
        body.set_name("body");
        typed(body.add_input(), "si", {});
        typed(body.add_input(), "xi", {});
        typed(body.add_output(), "so", {});
        body_node(body, "Add", {"si", "xi"}, {"so"});
        auto* n = node(g, "Scan", {"", "s", "x"}, {"sf"});
        set_int(n, "num_scan_inputs", 1);
        set_graph(n, "body", body);
        const auto r = refusal(m);
        ASSERT_TRUE(r);
        EXPECT_NE(r->reason.find("state has no batch axis"), std::string::npos) << r->reason;
    }
}

TEST(OnnxCoverage, StftOfASpeechFrontEndImportsDespiteLibonnxsFrameCount) {
    // 1000 samples, a 400-sample window every 160: (1000 - 400) / 160 + 1 = 4 frames of 201
    // bins (libonnx 1.12 infers another frame count; the declared, spec-correct shape imports).
    auto m = model(17);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 1000, 1});
    typed(g->add_output(), "y", {1, 4, 201, 2});
    initializer(g, "step", onnx::TensorProto::INT64, {}, {160});
    initializer(g, "length", onnx::TensorProto::INT64, {}, {400});
    node(g, "STFT", {"x", "step", "", "length"}, {"y"});
    std::vector<double> ones(1000, 1.0);
    const auto y = run(m, {{"x", tensor(DType::float32, {1, 1000, 1}, ones)}});
    ASSERT_EQ(y.at(0).shape(), (Shape{1, 4, 201, 2}));
    // A constant signal's frames hold only the DC bin: 400 + 0i; every other bin is 0.
    EXPECT_NEAR(y[0].at(0), 400.0, 1e-3);
    EXPECT_NEAR(y[0].at(2), 0.0, 1e-3);
}

TEST(OnnxCoverage, OptionalOfAGraphInputIsThatInput) {
    // Optional(x) -> OptionalGetElement and x itself: one input node for x, y = x + x.
    auto m = model(16);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {2});
    typed(g->add_output(), "y", {2});
    node(g, "Optional", {"x"}, {"o"});
    node(g, "OptionalGetElement", {"o"}, {"e"});
    node(g, "Add", {"e", "x"}, {"y"});
    const auto y = run(m, {{"x", tensor(DType::float32, {2}, {1.5, -2})}});
    expect_tensor(y.at(0), DType::float32, {2}, {3, -4});
}

TEST(OnnxCoverage, LoopWithTripCountAndNoConditionIgnoresCondOut) {
    // Loop(M = 3, "") is a for loop: the spec ignores cond_out, here computed from data.
    auto m = loop_model(3, "data", 3);
    auto* loop = m.mutable_graph()->mutable_node(0);
    loop->set_input(1, "");
    const auto out = run(m, loop_inputs());
    expect_tensor(out.at(0), DType::float32, {2}, {4, 7});
}

TEST(OnnxCoverage, ValuesComputedFromStftImport) {
    // STFT -> Abs -> ReduceSum over bins: libonnx's frame count is not trusted downstream either.
    // A constant signal of ones, 8 samples, frames of 4 every 2: 3 frames, whose only nonzero bin
    // is DC = 4, so each frame's summed magnitude (re and im) is 4.
    auto m = model(17);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 8, 1});
    typed(g->add_output(), "y", {1, 3});
    initializer(g, "step", onnx::TensorProto::INT64, {}, {2});
    initializer(g, "length", onnx::TensorProto::INT64, {}, {4});
    initializer(g, "axes", onnx::TensorProto::INT64, {2}, {2, 3});
    node(g, "STFT", {"x", "step", "", "length"}, {"s"});
    node(g, "Abs", {"s"}, {"a"});
    set_int(node(g, "ReduceSum", {"a", "axes"}, {"y"}), "keepdims", 0);
    const auto y = run(m, {{"x", tensor(DType::float32, {1, 8, 1}, std::vector<double>(8, 1.0))}});
    expect_tensor(y.at(0), DType::float32, {1, 3}, {4, 4, 4}, 1e-5);
}
