// ONNX Resize / Upsample import (core/src/onnx/resize.cpp) beyond the ONNX backend cases, which
// the onnx-test run checks against the reference implementation: hand values and PyTorch's
// bilinear formula, integers beyond 2^53, crops that sample outside an input holding infinities,
// the opset-10 / Upsample rounding, and every refusal with its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "onnx_test_models.hpp"

using namespace capsule;
using namespace capsule_test::onnx_models;

namespace {

/// One Resize (or Upsample) node over input x: roi, scales and sizes as initializers (left out
/// when empty), string / int / float attributes.
struct ResizeModel {
    std::string op = "Resize";
    std::int64_t opset = 13;
    Shape in;
    int elem = onnx::TensorProto::FLOAT;
    std::vector<float> roi, scales;
    Shape scales_shape;  // empty: [scales.size()]
    std::vector<std::int64_t> sizes;
    Shape out;  // empty: unknown
    std::vector<std::pair<std::string, std::string>> strings;
    std::vector<std::pair<std::string, std::int64_t>> ints;
    std::vector<std::pair<std::string, float>> float_attributes;
    bool scales_attribute = false;  // Upsample-7

    onnx::ModelProto proto() const {
        auto m = model(opset);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", in, elem);
        typed(g->add_output(), "y", out.empty() ? in : out, elem, out.empty());  // empty: a named dimension per axis
        auto floats = [&](const std::string& name, const std::vector<float>& values) {
            const Shape dims = name == "scales" && !scales_shape.empty() ? scales_shape : Shape{static_cast<std::int64_t>(values.size())};
            float_initializer(g, name, dims, std::vector<double>(values.begin(), values.end()));
            return name;
        };
        std::vector<std::string> inputs{"x"};
        if (op == "Upsample" || opset < 11) {
            if (!scales_attribute) inputs.push_back(floats("scales", scales));
        } else {
            inputs.push_back(roi.empty() ? "" : floats("roi", roi));
            inputs.push_back(scales.empty() ? "" : floats("scales", scales));
            if (!sizes.empty()) {
                int64_initializer(g, "sizes", {static_cast<std::int64_t>(sizes.size())}, sizes);
                inputs.push_back("sizes");
            }
        }
        auto* n = node(g, op, inputs, {"y"});
        for (const auto& [k, v] : strings) set_string(n, k, v);
        for (const auto& [k, v] : ints) set_int(n, k, v);
        for (const auto& [k, v] : float_attributes) set_float(n, k, v);
        if (scales_attribute) set_floats(n, "scales", scales);
        return m;
    }
};

ImportedModel import(const ResizeModel& r) { return capsule_test::onnx_models::import(r.proto()); }

Tensor run(const ResizeModel& r, const Tensor& x) {
    auto out = capsule_test::onnx_models::run(r.proto(), {{"x", x}});
    EXPECT_EQ(out.size(), 1u);
    return out.at(0);
}

std::vector<double> iota(std::size_t n) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i * i % 7) - 2.5;
    return v;
}

/// PyTorch's upsample_bilinear2d (align_corners=False, aten/src/ATen/native/UpSample.h): the
/// source coordinate (dst + 0.5) / scale − 0.5 clamped at 0, neighbours i0 and min(i0 + 1, in − 1).
/// It clamps the coordinate where ONNX's half_pixel clamps the neighbours; both give the same
/// values, so this is an independent statement of the same interpolation.
std::vector<double> torch_bilinear(const std::vector<double>& x, std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow) {
    auto source = [](std::int64_t dst, std::int64_t in, std::int64_t out, std::int64_t& i0, std::int64_t& i1, double& l) {
        const double src = std::max(0.0, (dst + 0.5) * (double(in) / double(out)) - 0.5);
        i0 = static_cast<std::int64_t>(src);
        i1 = std::min(i0 + 1, in - 1);
        l = src - double(i0);
    };
    std::vector<double> y;
    for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
            std::int64_t r0, r1, c0, c1;
            double lr, lc;
            source(i, h, oh, r0, r1, lr);
            source(j, w, ow, c0, c1, lc);
            auto at = [&](std::int64_t r, std::int64_t c) { return x[static_cast<std::size_t>(r * w + c)]; };
            y.push_back((1 - lr) * ((1 - lc) * at(r0, c0) + lc * at(r0, c1)) + lr * ((1 - lc) * at(r1, c0) + lc * at(r1, c1)));
        }
    return y;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& expected, double tol) {
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

}  // namespace

TEST(OnnxResize, LinearHalfPixelMatchesPyTorchBilinear) {
    // [1, 2, 3, 5] resized to [1, 2, 7, 4] (up along H, down along W), given as sizes.
    ResizeModel r;
    r.in = {1, 2, 3, 5};
    r.sizes = {1, 2, 7, 4};
    r.out = {1, 2, 7, 4};
    r.strings = {{"mode", "linear"}};
    const auto x = iota(30);
    const auto y = run(r, Tensor::from_values(DType::float32, r.in, x));
    EXPECT_EQ(y.shape(), r.out);
    std::vector<double> expected;
    for (int ch = 0; ch < 2; ++ch) {
        const std::vector<double> plane(x.begin() + ch * 15, x.begin() + ch * 15 + 15);
        const auto up = torch_bilinear(plane, 3, 5, 7, 4);
        expected.insert(expected.end(), up.begin(), up.end());
    }
    expect_near(y.to_doubles(), expected, 1e-5);
}

TEST(OnnxResize, LinearHandValuesInOneDimension) {
    // [1, 2, 3] × 2, half_pixel: sources −0.25, 0.25, 0.75, 1.25, 1.75, 2.25 (edge values beyond).
    ResizeModel r;
    r.in = {3};
    r.scales = {2};
    r.out = {6};
    r.strings = {{"mode", "linear"}};
    EXPECT_EQ(run(r, Tensor::from_values(DType::float32, {3}, {1, 2, 3})).to_doubles(),
              (std::vector<double>{1, 1.25, 1.75, 2.25, 2.75, 3}));
}

TEST(OnnxResize, NearestCopiesInt64ValuesBeyondTwoToThe53Exactly) {
    // Gathers only: no arithmetic touches the values. asymmetric + floor: output j takes j / 2.
    ResizeModel r;
    r.in = {1, 3};
    r.elem = onnx::TensorProto::INT64;
    r.scales = {1, 2};
    r.out = {1, 6};
    r.strings = {{"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", "floor"}};
    Tensor x = Tensor::zeros(DType::int64, {1, 3});
    auto* p = static_cast<std::int64_t*>(x.data());
    p[0] = (std::int64_t(1) << 60) + 1;
    p[1] = -7;
    p[2] = std::numeric_limits<std::int64_t>::min();
    const auto y = run(r, x);
    ASSERT_EQ(y.dtype(), DType::int64);
    const auto* q = static_cast<const std::int64_t*>(y.data());
    const std::int64_t expected[] = {p[0], p[0], -7, -7, p[2], p[2]};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(q[i], expected[i]) << i;
}

TEST(OnnxResize, CropSamplesOutsideTakeTheExtrapolationValueEvenNextToInfinity) {
    // x [1, 4] = [inf, 2, 3, 4], roi on axis 1 from −0.5 to 1.5, sizes [1, 5]: sources
    // 1.5·j − 1.5 = −1.5, 0, 1.5, 3, 4.5; the first and last are outside [0, 3] and take 7.
    ResizeModel r;
    r.in = {1, 4};
    r.roi = {0, -0.5f, 1, 1.5f};
    r.sizes = {1, 5};
    r.out = {1, 5};
    r.strings = {{"mode", "linear"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}};
    r.float_attributes = {{"extrapolation_value", 7.0f}};
    const double inf = std::numeric_limits<double>::infinity();
    const auto y = run(r, Tensor::from_values(DType::float32, {1, 4}, {inf, 2, 3, 4})).to_doubles();
    EXPECT_EQ(y, (std::vector<double>{7, inf, 2.5, 4, 7}));
    // A crop entirely outside the input: every output is the extrapolation value.
    r.roi = {0, 2, 1, 3};
    EXPECT_EQ(run(r, Tensor::from_values(DType::float32, {1, 4}, {inf, 2, 3, 4})).to_doubles(),
              (std::vector<double>(5, 7)));
}

TEST(OnnxResize, CropWithScalesKeepsTheLengthInTimesScale) {
    // x = [0, 1, 2, 3], roi 0.25 .. 0.75 on axis 1, scale 2: 8 outputs (floor(4 · 2), as ONNX's
    // shape inference, ONNX Runtime and the reference), sampling 0.75 + x · 0.5 · 3 / 7.
    ResizeModel r;
    r.in = {1, 4};
    r.roi = {0, 0.25f, 1, 0.75f};
    r.scales = {1, 2};
    r.out = {1, 8};
    r.strings = {{"mode", "linear"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}};
    const auto y = run(r, Tensor::from_values(DType::float32, {1, 4}, {0, 1, 2, 3}));
    ASSERT_EQ(y.shape(), (Shape{1, 8}));
    std::vector<double> expected;
    for (int x = 0; x < 8; ++x) expected.push_back(0.75 + x * 0.5 * 3 / 7);
    expect_near(y.to_doubles(), expected, 1e-6);
}

TEST(OnnxResize, OutputLengthsAreComputedInFloat32AsOnnxShapeInference) {
    // float32 10 · 0.7 is 7 (in double, 10 · 0.699999988 would floor to 6).
    ResizeModel r;
    r.in = {10};
    r.scales = {0.7f};
    r.out = {7};
    r.strings = {{"coordinate_transformation_mode", "asymmetric"}};
    EXPECT_EQ(run(r, Tensor::from_values(DType::float32, {10}, iota(10))).shape(), (Shape{7}));
}

TEST(OnnxResize, ZeroWeightTapsDoNotTurnInfinityIntoNan) {
    // [1, inf] × 2, linear, asymmetric: sources 0, 0.5, 1, 1.5. At 0 the tap on inf has weight 0
    // (the reference gives 1; a product 0 · inf would give NaN); at 1 the clamped tap is inf itself.
    ResizeModel r;
    r.in = {2};
    r.scales = {2};
    r.out = {4};
    r.strings = {{"mode", "linear"}, {"coordinate_transformation_mode", "asymmetric"}};
    const double inf = std::numeric_limits<double>::infinity();
    EXPECT_EQ(run(r, Tensor::from_values(DType::float32, {2}, {1, inf})).to_doubles(), (std::vector<double>{1, inf, inf, inf}));
}

TEST(OnnxResize, NearestCropsBooleansWithoutArithmetic) {
    // bool [1, 4], the crop of CropSamplesOutside…: outside samples take extrapolation 0.5 → true.
    ResizeModel r;
    r.in = {1, 4};
    r.elem = onnx::TensorProto::BOOL;
    r.roi = {0, -0.5f, 1, 1.5f};
    r.sizes = {1, 5};
    r.out = {1, 5};
    r.strings = {{"coordinate_transformation_mode", "tf_crop_and_resize"}};
    r.float_attributes = {{"extrapolation_value", 0.5f}};
    // Sources −1.5 (outside), 0, 1.5 (round_prefer_floor: 1), 3, 4.5 (outside).
    const auto y = run(r, Tensor::from_values(DType::boolean, {1, 4}, {0, 1, 0, 0}));
    ASSERT_EQ(y.dtype(), DType::boolean);
    EXPECT_EQ(y.to_doubles(), (std::vector<double>{1, 0, 1, 0, 1}));
}

TEST(OnnxResize, UnitScalesCopyTheInputWithoutInterpolating) {
    ResizeModel r;
    r.in = {2, 3};
    r.scales = {1, 1};
    r.out = {2, 3};
    r.strings = {{"mode", "cubic"}};
    const auto model = import(r);
    for (const auto& node : model.graph.nodes) EXPECT_NE(node.op_spelling(), "gather");
    const auto x = iota(6);
    EXPECT_EQ(run(r, Tensor::from_values(DType::float32, r.in, x)).to_doubles(), x);
}

TEST(OnnxResize, UpsampleAndResize10RoundAsOnnxRuntimesSimpleNearest) {
    // Upsample-7 (scales attribute) × 3 on [a, b]: asymmetric j / 3, floor when upsampling.
    ResizeModel up;
    up.op = "Upsample";
    up.opset = 7;
    up.scales_attribute = true;
    up.in = {1, 2};
    up.scales = {1, 3};
    up.out = {1, 6};
    EXPECT_EQ(run(up, Tensor::from_values(DType::float32, {1, 2}, {4, 9})).to_doubles(), (std::vector<double>{4, 4, 4, 9, 9, 9}));
    // Resize-10 × 0.6 on 5 (float32 0.6 is 0.6000000238: 3 outputs): sources 0, 1.67, 3.33,
    // ceil when downsampling → 0, 2, 4.
    ResizeModel down;
    down.opset = 10;
    down.in = {5};
    down.scales = {0.6f};
    down.out = {3};
    EXPECT_EQ(run(down, Tensor::from_values(DType::float32, {5}, {10, 11, 12, 13, 14})).to_doubles(), (std::vector<double>{10, 12, 14}));
}

TEST(OnnxResize, RefusalsNameTheirCause) {
    struct Case { std::string what; ResizeModel model; std::string reason; };
    ResizeModel base;
    base.in = {1, 4};
    base.scales = {1, 2};
    // The output's shape is left unknown, so that ONNX's shape inference does not refuse first.
    std::vector<Case> cases;
    auto with = [&](std::string what, auto change, std::string reason) {
        ResizeModel m = base;
        change(m);
        cases.push_back({std::move(what), std::move(m), std::move(reason)});
    };
    with("zero scale", [](ResizeModel& m) { m.scales = {1, 0}; }, "gives an output length outside [1, 2^22]");
    with("negative scale", [](ResizeModel& m) { m.scales = {1, -2}; }, "gives an output length outside [1, 2^22]");
    with("NaN scale", [](ResizeModel& m) { m.scales = {1, NAN}; }, "Resize scales holds nan");
    with("huge scale", [](ResizeModel& m) { m.scales = {1, 1e9f}; }, "gives an output length outside [1, 2^22]");
    with("scale to nothing", [](ResizeModel& m) { m.scales = {1, 0.2f}; }, "gives an output length outside [1, 2^22]");
    with("both", [](ResizeModel& m) { m.sizes = {1, 8}; }, "both scales and sizes are given");
    with("neither", [](ResizeModel& m) { m.scales.clear(); }, "neither scales nor sizes is given");
    with("zero size", [](ResizeModel& m) { m.scales.clear(); m.sizes = {1, 0}; }, "output size 0 outside [1, 2^22]");
    with("huge size", [](ResizeModel& m) { m.scales.clear(); m.sizes = {1, std::int64_t(1) << 40}; }, "outside [1, 2^22]");
    with("huge tables", [](ResizeModel& m) {
        m.in = {1, 1, 1, 1};
        m.scales.clear();
        m.sizes = {1 << 22, 1 << 22, 1 << 22, 1 << 22};
        m.strings = {{"mode", "cubic"}};
    }, "the interpolation tables would hold 67108864 entries (at most 2^24)");
    with("short scales", [](ResizeModel& m) { m.scales = {2}; }, "scales has 1 entries for an input of rank 2");
    with("crop without roi", [](ResizeModel& m) { m.strings = {{"coordinate_transformation_mode", "tf_crop_and_resize"}}; },
         "tf_crop_and_resize needs the roi input");
    with("short roi", [](ResizeModel& m) { m.roi = {0, 1}; m.strings = {{"coordinate_transformation_mode", "tf_crop_and_resize"}}; },
         "roi has 2 entries, expected 2 × rank = 4");
    with("linear int64", [](ResizeModel& m) { m.elem = onnx::TensorProto::INT64; m.strings = {{"mode", "linear"}}; },
         "linear and cubic interpolation need a float input, got int64");
    with("mode", [](ResizeModel& m) { m.strings = {{"mode", "bicubic"}}; }, "mode 'bicubic'");
    with("cubic in opset 10", [](ResizeModel& m) { m.opset = 10; m.strings = {{"mode", "cubic"}}; }, "mode 'cubic' (expected nearest, linear)");
    with("coordinates", [](ResizeModel& m) { m.strings = {{"coordinate_transformation_mode", "centre"}}; }, "coordinate_transformation_mode 'centre'");
    with("rounding", [](ResizeModel& m) { m.strings = {{"nearest_mode", "away"}}; }, "nearest_mode 'away'");
    with("NaN roi", [](ResizeModel& m) { m.roi = {0, NAN, 1, 1}; m.strings = {{"coordinate_transformation_mode", "tf_crop_and_resize"}}; },
         "Resize roi holds nan");
    with("2-D scales", [](ResizeModel& m) { m.scales = {1, 2, 1, 2}; m.scales_shape = {2, 2}; }, "Resize scales must be 1-D, got shape [2, 2]");
    with("int64 crop extrapolating NaN", [](ResizeModel& m) {
        m.elem = onnx::TensorProto::INT64;
        m.roi = {0, -1, 1, 2};
        m.strings = {{"coordinate_transformation_mode", "tf_crop_and_resize"}};
        m.float_attributes = {{"extrapolation_value", NAN}};
    }, "extrapolation_value nan is not an int64 value for an int64 input");
    with("Upsample-9 below 1", [](ResizeModel& m) { m.op = "Upsample"; m.opset = 9; m.scales = {1, 0.5f}; }, "Upsample scales must be >= 1, got 0.5");
    with("antialias", [](ResizeModel& m) { m.ints = {{"antialias", 1}}; }, "Unrecognized attribute: antialias");  // the ONNX checker's words
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        expect_refused(c.model.proto(), c.reason);
    }
}

TEST(OnnxResize, HelperConstantsNeverReplaceAModelValueOfTheSameName) {
    // The model's own initializer is spelled like the Resize's index table ("y#index"); the
    // Gather must read the model's [2, 2, 2, 2, 2, 2], not the table.
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {3});
    typed(g->add_output(), "y", {6});
    typed(g->add_output(), "z", {6});
    float_initializer(g, "scales", {1}, {2});
    int64_initializer(g, "y#index", {6}, {2, 2, 2, 2, 2, 2});
    node(g, "Resize", {"x", "", "scales"}, {"y"});
    node(g, "Gather", {"x", "y#index"}, {"z"});
    const auto out = run(m, {{"x", Tensor::from_values(DType::float32, {3}, {10, 20, 30})}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{10, 10, 20, 20, 30, 30}));
    EXPECT_EQ(out[1].to_doubles(), (std::vector<double>(6, 30)));
}
