// Windowed ONNX ops imported by decomposition: MaxPool / AveragePool as strided slices
// (core/src/onnx/pooling.cpp) and 3-D Conv as depth-sliced conv2d (conv3d.cpp). Pooling: 3-D
// and 1-D windows, dilations, asymmetric padding with and without count_include_pad, ceil_mode,
// each compared with a brute-force evaluation of the pooling definition, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "onnx_test_models.hpp"

using namespace capsule;
using namespace capsule_test::onnx_models;

namespace {

struct Pool {
    bool is_max = true;
    Shape in;  // [N, C, spatial...]
    std::vector<std::int64_t> kernel, stride, dilation, pads;  // pads: begins then ends
    bool ceil_mode = false, count_include_pad = false;

    std::size_t sp() const { return kernel.size(); }
    std::int64_t pad_begin(std::size_t a) const { return pads.empty() ? 0 : pads[a]; }
    std::int64_t pad_end(std::size_t a) const { return pads.empty() ? 0 : pads[sp() + a]; }
    std::int64_t step(std::size_t a) const { return stride.empty() ? 1 : stride[a]; }
    std::int64_t dil(std::size_t a) const { return dilation.empty() ? 1 : dilation[a]; }

    /// Output length (ONNX: floor, or ceil with ceil_mode, of (in + pads − dilated kernel) / stride + 1;
    /// a ceil-mode window starting past the input and its left padding is dropped, as PyTorch).
    std::int64_t out_length(std::size_t a) const {
        const auto in_len = in[a + 2], extent = (kernel[a] - 1) * dil(a) + 1;
        const double exact = double(in_len + pad_begin(a) + pad_end(a) - extent) / double(step(a)) + 1;
        auto o = static_cast<std::int64_t>(ceil_mode ? std::ceil(exact) : std::floor(exact));
        if (ceil_mode && (o - 1) * step(a) >= in_len + pad_begin(a)) --o;
        return o;
    }
    Shape out_shape() const {
        Shape s{in[0], in[1]};
        for (std::size_t a = 0; a < sp(); ++a) s.push_back(out_length(a));
        return s;
    }

    onnx::ModelProto proto() const {
        auto m = model(12);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", in);
        // The output's dimensions are left named (the importer compares its shape with ONNX's
        // inference, which keeps a ceil-mode MaxPool window starting in the right padding).
        typed(g->add_output(), "y", in, onnx::TensorProto::FLOAT, true);
        auto* n = node(g, is_max ? "MaxPool" : "AveragePool", {"x"}, {"y"});
        auto ints = [&](const std::string& name, const std::vector<std::int64_t>& v) {
            if (!v.empty()) set_ints(n, name, v);
        };
        ints("kernel_shape", kernel);
        ints("strides", stride);
        ints("dilations", dilation);
        ints("pads", pads);
        set_int(n, "ceil_mode", ceil_mode);
        if (!is_max) set_int(n, "count_include_pad", count_include_pad);
        return m;
    }

    /// The definition, position by position: max over the window's input positions (padding is
    /// −∞), or their sum over the count of input positions (count_include_pad: positions within
    /// the input and its declared pads).
    std::vector<double> brute_force(const std::vector<double>& x) const {
        const Shape out = out_shape();
        std::vector<double> y;
        const std::int64_t planes = in[0] * in[1];
        std::int64_t plane_size = 1, out_size = 1, window = 1;
        for (std::size_t a = 0; a < sp(); ++a) {
            plane_size *= in[a + 2];
            out_size *= out[a + 2];
            window *= kernel[a];
        }
        for (std::int64_t p = 0; p < planes; ++p)
            for (std::int64_t o = 0; o < out_size; ++o) {
                double best = -std::numeric_limits<double>::infinity(), sum = 0, counted = 0;
                for (std::int64_t t = 0; t < window; ++t) {
                    std::int64_t offset = 0, orest = o, trest = t;
                    bool inside = true, in_pads = true;
                    std::vector<std::int64_t> pos(sp());
                    for (std::size_t a = sp(); a-- > 0;) {
                        const auto oa = orest % out[a + 2], ta = trest % kernel[a];
                        orest /= out[a + 2];
                        trest /= kernel[a];
                        pos[a] = oa * step(a) + ta * dil(a) - pad_begin(a);
                        inside = inside && pos[a] >= 0 && pos[a] < in[a + 2];
                        in_pads = in_pads && pos[a] >= -pad_begin(a) && pos[a] < in[a + 2] + pad_end(a);
                    }
                    for (std::size_t a = 0; a < sp(); ++a) offset = offset * in[a + 2] + pos[a];
                    if (inside) {
                        const double v = x[static_cast<std::size_t>(p * plane_size + offset)];
                        best = std::max(best, v);
                        sum += v;
                    }
                    counted += count_include_pad ? in_pads : inside;
                }
                y.push_back(is_max ? best : sum / counted);
            }
        return y;
    }
};

std::vector<double> run(const Pool& pool, const std::vector<double>& x) {
    auto out = capsule_test::onnx_models::run(pool.proto(), {{"x", Tensor::from_values(DType::float32, pool.in, x)}});
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out.at(0).shape(), pool.out_shape());
    return out.at(0).to_doubles();
}

std::vector<double> values(const Shape& shape) {
    std::int64_t count = 1;
    for (auto d : shape) count *= d;
    std::vector<double> v;
    for (std::int64_t i = 0; i < count; ++i) v.push_back(static_cast<double>(static_cast<float>(std::sin(1.7 * double(i)) * 4)));
    return v;
}

}  // namespace

TEST(OnnxPooling, SlicedWindowsMatchTheDefinition) {
    std::vector<std::pair<std::string, Pool>> cases;
    Pool p;
    p.in = {2, 2, 5, 6, 7};
    p.kernel = {2, 3, 2};
    cases.emplace_back("3-D max", p);
    p.stride = {2, 1, 3};
    p.dilation = {1, 2, 2};
    p.pads = {1, 0, 1, 0, 2, 1};
    cases.emplace_back("3-D max, strides, dilations, asymmetric pads", p);
    p.ceil_mode = true;
    cases.emplace_back("3-D max, ceil_mode", p);
    p.is_max = false;
    p.dilation.clear();
    // Along the last axis ceil_mode adds a window, none starting in the right padding (ONNX
    // 1.12's shape inference of AveragePool would keep such a window, which PyTorch drops).
    p.kernel = {2, 3, 3};
    p.stride = {2, 1, 2};
    p.pads = {1, 0, 1, 0, 2, 0};
    cases.emplace_back("3-D average, ceil_mode, pads not counted", p);
    p.count_include_pad = true;
    cases.emplace_back("3-D average, ceil_mode, pads counted", p);
    Pool q;
    q.in = {1, 3, 9, 8};
    q.kernel = {3, 2};
    q.stride = {2, 3};
    q.dilation = {3, 2};
    q.pads = {2, 0, 0, 1};
    cases.emplace_back("2-D dilated max", q);
    q.is_max = false;
    q.dilation.clear();
    cases.emplace_back("2-D average over asymmetric pads, not counted", q);
    q.ceil_mode = true;
    q.count_include_pad = true;
    q.stride = {3, 3};
    q.pads = {2, 0, 0, 0};
    cases.emplace_back("2-D average over asymmetric pads, counted, ceil_mode", q);
    Pool r;
    r.in = {2, 1, 11};
    r.kernel = {3};
    r.dilation = {4};
    r.pads = {1, 3};
    cases.emplace_back("1-D dilated max", r);
    for (const auto& [what, pool] : cases) {
        SCOPED_TRACE(what);
        const auto x = values(pool.in);
        const auto got = run(pool, x), expected = pool.brute_force(x);
        ASSERT_EQ(got.size(), expected.size());
        for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-6) << i;
    }
}

TEST(OnnxPooling, WindowsOverPaddingAloneOrTooLongAreRefused) {
    Pool p;
    p.in = {1, 1, 4, 4, 4};
    p.kernel = {2, 2, 2};
    p.pads = {3, 0, 0, 0, 0, 0};  // the first window along axis 2 covers rows −3 and −2 only
    expect_refused(p.proto(), "a window covers only padding");
    Pool q;
    q.in = {1, 1, 9000, 2, 2};
    q.kernel = {5000, 1, 1};
    expect_refused(q.proto(), "a window more than 4096 positions long");
}

namespace {

/// y[n, m, o...] = b[m] + Σ_{c in m's group, t...} x[n, c, o·s + t·d − pad_begin] · W[m, c, t...]
/// (positions outside the input are zero): ONNX Conv's definition, for 3 spatial axes.
std::vector<double> conv3d_brute_force(const Shape& in, const std::vector<double>& x, const Shape& ws, const std::vector<double>& wv,
                                       const std::vector<double>& bias, std::int64_t groups, const std::vector<std::int64_t>& stride,
                                       const std::vector<std::int64_t>& dilation, const std::vector<std::int64_t>& pads, Shape& out) {
    out = {in[0], ws[0]};
    for (int a = 0; a < 3; ++a)
        out.push_back((in[a + 2] + pads[a] + pads[a + 3] - ((ws[a + 2] - 1) * dilation[a] + 1)) / stride[a] + 1);
    const std::int64_t per_group_in = in[1] / groups, per_group_out = ws[0] / groups;
    std::vector<double> y;
    for (std::int64_t b = 0; b < out[0]; ++b)
        for (std::int64_t m = 0; m < out[1]; ++m)
            for (std::int64_t o0 = 0; o0 < out[2]; ++o0)
                for (std::int64_t o1 = 0; o1 < out[3]; ++o1)
                    for (std::int64_t o2 = 0; o2 < out[4]; ++o2) {
                        double sum = bias.empty() ? 0 : bias[static_cast<std::size_t>(m)];
                        for (std::int64_t cg = 0; cg < ws[1]; ++cg)
                            for (std::int64_t t0 = 0; t0 < ws[2]; ++t0)
                                for (std::int64_t t1 = 0; t1 < ws[3]; ++t1)
                                    for (std::int64_t t2 = 0; t2 < ws[4]; ++t2) {
                                        const std::int64_t p0 = o0 * stride[0] + t0 * dilation[0] - pads[0];
                                        const std::int64_t p1 = o1 * stride[1] + t1 * dilation[1] - pads[1];
                                        const std::int64_t p2 = o2 * stride[2] + t2 * dilation[2] - pads[2];
                                        if (p0 < 0 || p1 < 0 || p2 < 0 || p0 >= in[2] || p1 >= in[3] || p2 >= in[4]) continue;
                                        const std::int64_t ch = (m / per_group_out) * per_group_in + cg;
                                        sum += x[static_cast<std::size_t>((((b * in[1] + ch) * in[2] + p0) * in[3] + p1) * in[4] + p2)] *
                                               wv[static_cast<std::size_t>((((m * ws[1] + cg) * ws[2] + t0) * ws[3] + t1) * ws[4] + t2)];
                                    }
                        y.push_back(sum);
                    }
    return y;
}

}  // namespace

TEST(OnnxConv3d, DepthSlicedConvolutionMatchesTheDefinition) {
    // Groups, strides, dilations, asymmetric pads on every axis, with and without bias.
    const Shape in{2, 4, 5, 6, 5}, ws{6, 2, 3, 2, 3};
    const std::vector<std::int64_t> stride{2, 1, 2}, dilation{1, 2, 1}, pads{1, 0, 2, 0, 1, 1};
    const auto x = values(in);
    std::vector<double> wv = values(ws), bias{0.5, -1, 2, 0.25, -0.75, 1.5};
    for (auto& v : wv) v = static_cast<double>(static_cast<float>(v * 0.3));
    for (bool with_bias : {true, false}) {
        SCOPED_TRACE(with_bias ? "bias" : "no bias");
        Shape out;
        const auto expected = conv3d_brute_force(in, x, ws, wv, with_bias ? bias : std::vector<double>{}, 2, stride, dilation, pads, out);
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", in);
        typed(g->add_output(), "y", out);
        float_initializer(g, "w", ws, wv);
        std::vector<std::string> inputs{"x", "w"};
        if (with_bias) {
            float_initializer(g, "b", {6}, bias);
            inputs.push_back("b");
        }
        auto* n = node(g, "Conv", inputs, {"y"});
        set_ints(n, "strides", stride);
        set_ints(n, "dilations", dilation);
        set_ints(n, "pads", pads);
        set_int(n, "group", 2);
        const auto got = run(m, {{"x", Tensor::from_values(DType::float32, in, x)}});
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].shape(), out);
        const auto y = got[0].to_doubles();
        ASSERT_EQ(y.size(), expected.size());
        for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-4) << i;
    }
}

namespace {

/// ONNX ConvTranspose's definition, 2-D, groups 1: y[n, m, o] = b[m] + Σ x[n, c, i] · W[c, m, t]
/// over o = i·s + t·d − pad_begin, for o in [0, full − pad_begin − pad_end) where full =
/// s·(in − 1) + output_padding + (k − 1)·d + 1; a negative pad_end extends the output (bias only).
std::vector<double> conv_transpose_brute_force(const Shape& in, const std::vector<double>& x, const Shape& ws, const std::vector<double>& wv,
                                               const std::vector<double>& bias, const std::vector<std::int64_t>& stride,
                                               const std::vector<std::int64_t>& dilation, const std::vector<std::int64_t>& pad_begin,
                                               const std::vector<std::int64_t>& pad_end, const std::vector<std::int64_t>& output_padding,
                                               Shape& out) {
    out = {in[0], ws[1]};
    for (int a = 0; a < 2; ++a)
        out.push_back(stride[a] * (in[a + 2] - 1) + output_padding[a] + (ws[a + 2] - 1) * dilation[a] + 1 - pad_begin[a] - pad_end[a]);
    std::vector<double> y;
    for (std::int64_t b = 0; b < out[0]; ++b)
        for (std::int64_t m = 0; m < out[1]; ++m)
            for (std::int64_t o0 = 0; o0 < out[2]; ++o0)
                for (std::int64_t o1 = 0; o1 < out[3]; ++o1) {
                    double sum = bias[static_cast<std::size_t>(m)];
                    for (std::int64_t ch = 0; ch < in[1]; ++ch)
                        for (std::int64_t i0 = 0; i0 < in[2]; ++i0)
                            for (std::int64_t i1 = 0; i1 < in[3]; ++i1)
                                for (std::int64_t t0 = 0; t0 < ws[2]; ++t0)
                                    for (std::int64_t t1 = 0; t1 < ws[3]; ++t1)
                                        if (i0 * stride[0] + t0 * dilation[0] - pad_begin[0] == o0 &&
                                            i1 * stride[1] + t1 * dilation[1] - pad_begin[1] == o1)
                                            sum += x[static_cast<std::size_t>(((b * in[1] + ch) * in[2] + i0) * in[3] + i1)] *
                                                   wv[static_cast<std::size_t>(((ch * ws[1] + m) * ws[2] + t0) * ws[3] + t1)];
                    y.push_back(sum);
                }
    return y;
}

}  // namespace

TEST(OnnxConvTranspose, CroppedOutputsMatchTheDefinition) {
    const Shape in{1, 2, 3, 4}, ws{2, 3, 3, 2};
    const std::vector<std::int64_t> stride{3, 2}, dilation{1, 2};
    const auto x = values(in);
    const auto wv = values(ws);
    const std::vector<double> bias{0.5, -1, 2};
    struct Case {
        std::string what;
        std::vector<std::pair<std::string, std::vector<std::int64_t>>> attrs;
        std::string auto_pad;
        std::vector<std::int64_t> pad_begin, pad_end, output_padding;  // what the brute force is given
    };
    // Full output: 3·2 + 3 = 9 by 2·3 + 2 + 1 = 9 (output_padding 0).
    const Case cases[] = {
        {"asymmetric pads", {{"pads", {2, 0, 1, 3}}}, "", {2, 0}, {1, 3}, {0, 0}},
        {"output_shape, the larger half of the padding first", {{"output_shape", {6, 8}}}, "", {2, 1}, {1, 0}, {0, 0}},
        {"output_shape past the full output: more output_padding", {{"output_shape", {11, 10}}}, "", {0, 0}, {-2, -1}, {0, 0}},
        {"SAME_UPPER: output = input · stride, the smaller half first", {}, "SAME_UPPER", {0, 0}, {0, 1}, {0, 0}},
        {"SAME_LOWER", {}, "SAME_LOWER", {0, 1}, {0, 0}, {0, 0}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        Shape out;
        const auto expected = conv_transpose_brute_force(in, x, ws, wv, bias, stride, dilation, c.pad_begin, c.pad_end, c.output_padding, out);
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", in);
        typed(g->add_output(), "y", out);
        float_initializer(g, "w", ws, wv);
        float_initializer(g, "b", {3}, bias);
        auto* n = node(g, "ConvTranspose", {"x", "w", "b"}, {"y"});
        for (const auto& [name, v] : c.attrs) set_ints(n, name, v);
        set_ints(n, "strides", stride);
        set_ints(n, "dilations", dilation);
        if (!c.auto_pad.empty()) set_string(n, "auto_pad", c.auto_pad);
        const auto got = run(m, {{"x", Tensor::from_values(DType::float32, in, x)}});
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].shape(), out);
        const auto y = got[0].to_doubles();
        ASSERT_EQ(y.size(), expected.size());
        for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-4) << i;
    }
}

TEST(OnnxPooling, MaxPoolIndicesNameTheFirstMaximumOfEachWindow) {
    // x [1, 2, 4, 5] with ties (values repeat every 4), 3 × 2 window, strides 1 × 2, pads [1, 0, 0, 1]:
    // each index is the row-major first maximum's flat index (n, c, h, w), or with storage_order 1
    // (n, c, w, h); brute force over the window.
    const Shape in{1, 2, 4, 5};
    std::vector<double> x;
    for (int i = 0; i < 40; ++i) x.push_back(static_cast<double>((i * 7) % 4));
    // NaN wins over numbers and the first NaN stays (PyTorch); windows of −∞ inputs beside the
    // padding name an input, never the padding.
    x[7] = NAN;
    x[13] = NAN;
    for (int i : {0, 1, 5, 6}) x[i] = -INFINITY;
    const std::int64_t KH = 3, KW = 2, SW = 2, PT = 1, PR = 1;
    const std::int64_t OH = (4 + PT - KH) / 1 + 1, OW = (5 + PR - KW) / SW + 1;
    for (int storage_order : {0, 1}) {
        SCOPED_TRACE(storage_order);
        auto m = model(12);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", in);
        typed(g->add_output(), "y", {1, 2, OH, OW});
        typed(g->add_output(), "i", {1, 2, OH, OW}, onnx::TensorProto::INT64);
        auto* n = node(g, "MaxPool", {"x"}, {"y", "i"});
        set_ints(n, "kernel_shape", {KH, KW});
        set_ints(n, "strides", {1, SW});
        set_ints(n, "pads", {PT, 0, 0, PR});
        set_int(n, "storage_order", storage_order);
        const auto got = run(m, {{"x", Tensor::from_values(DType::float32, in, x)}});
        ASSERT_EQ(got.size(), 2u);
        ASSERT_EQ(got[1].dtype(), DType::int64);
        const auto values = got[0].to_doubles(), indices = got[1].to_doubles();
        for (std::int64_t c = 0; c < 2; ++c)
            for (std::int64_t oh = 0; oh < OH; ++oh)
                for (std::int64_t ow = 0; ow < OW; ++ow) {
                    double best = 0;
                    std::int64_t where = -1;
                    for (std::int64_t kh = 0; kh < KH; ++kh)
                        for (std::int64_t kw = 0; kw < KW; ++kw) {
                            const std::int64_t h = oh + kh - PT, w = ow * SW + kw;
                            if (h < 0 || h >= 4 || w >= 5) continue;  // padding never wins
                            const double v = x[std::size_t((c * 4 + h) * 5 + w)];
                            if (where < 0 || (v > best && !std::isnan(best)) || (std::isnan(v) && !std::isnan(best))) {
                                best = v;
                                where = storage_order ? c * 20 + w * 4 + h : (c * 4 + h) * 5 + w;
                            }
                        }
                    const std::size_t o = std::size_t((c * OH + oh) * OW + ow);
                    if (std::isnan(best)) EXPECT_TRUE(std::isnan(values[o])) << o;
                    else EXPECT_EQ(values[o], best) << o;
                    EXPECT_EQ(indices[o], double(where)) << o;
                }
    }
}

TEST(OnnxPooling, MaxUnpoolWritesIndicesIntoTheGivenOutputShape) {
    // A 2 × 2 pool of a 5 × 5 plane unpooled to 5 × 5: the indices address the 5 × 5 plane (as
    // ONNX Runtime and PyTorch's max_unpool2d(output_size)), so index 18 = (3, 3) is in range.
    auto m = model(11);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 1, 2, 2});
    typed(g->add_input(), "i", {1, 1, 2, 2}, onnx::TensorProto::INT64);
    typed(g->add_output(), "y", {1, 1, 5, 5});
    int64_initializer(g, "shape", {4}, {1, 1, 5, 5});
    auto* n = node(g, "MaxUnpool", {"x", "i", "shape"}, {"y"});
    set_ints(n, "kernel_shape", {2, 2});
    set_ints(n, "strides", {2, 2});
    Tensor indices = Tensor::zeros(DType::int64, {1, 1, 2, 2});
    const std::int64_t at[] = {6, 8, 16, 18};
    std::copy(at, at + 4, static_cast<std::int64_t*>(indices.data()));
    const auto y = run(m, {{"x", Tensor::from_values(DType::float32, {1, 1, 2, 2}, {5, 6, 7, 8})}, {"i", indices}}).at(0);
    ASSERT_EQ(y.shape(), (Shape{1, 1, 5, 5}));
    std::vector<double> expected(25, 0);
    expected[6] = 5;
    expected[8] = 6;
    expected[16] = 7;
    expected[18] = 8;
    EXPECT_EQ(y.to_doubles(), expected);
}

TEST(OnnxPooling, WindowAttributesOutOfRangeAreRefusedByEveryConverter) {
    // Dilation 0 and negative pads on a 3-D Conv whose input comes out of a GatherND: the
    // pre-inference guard cannot tell that input's rank, so it checks nothing from there on; the
    // converter refuses them before any division or product uses them.
    for (const auto& [attr, value, reason] : {std::tuple{"dilations", std::int64_t{0}, "kernel_shape, strides and dilations must be in [1, 2^30]"},
                                              std::tuple{"pads", std::int64_t{-1}, "pads must be in [0, 2^30]"}}) {
        SCOPED_TRACE(attr);
        auto m = model(13);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 1, 1, 4, 4, 4});
        typed(g->add_output(), "y", {1, 1, 2, 2, 2}, onnx::TensorProto::FLOAT, true);
        int64_initializer(g, "first", {1}, {0});
        float_initializer(g, "w", {1, 1, 3, 3, 3}, std::vector<double>(27, 0.5));
        node(g, "GatherND", {"x", "first"}, {"t"});
        auto* n = node(g, "Conv", {"t", "w"}, {"y"});
        set_ints(n, attr, std::string(attr) == "pads" ? std::vector<std::int64_t>(6, value) : std::vector<std::int64_t>(3, value));
        expect_refused(m, reason);
    }
}

TEST(OnnxPooling, MaxPoolAndUnpoolRefuseWhatTheyCannotComputeExactly) {
    {  // storage_order is 0 or 1
        auto m = model(12);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 1, 4, 4});
        typed(g->add_output(), "y", {1, 1, 2, 2});
        typed(g->add_output(), "i", {1, 1, 2, 2}, onnx::TensorProto::INT64);
        auto* n = node(g, "MaxPool", {"x"}, {"y", "i"});
        set_ints(n, "kernel_shape", {2, 2});
        set_ints(n, "strides", {2, 2});
        set_int(n, "storage_order", 2);
        expect_refused(m, "storage_order 2 (0: row major, 1: column major)");
    }
    {  // ceil_mode with a window starting in the right padding: PyTorch and ONNX Runtime drop it,
       // ONNX 1.12's shape inference keeps it; refused, never computed on a pre-padded input
        auto m = model(12);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 1, 2, 2});
        typed(g->add_output(), "y", {1, 1, 2, 2}, onnx::TensorProto::FLOAT, true);
        auto* n = node(g, "MaxPool", {"x"}, {"y"});
        set_ints(n, "kernel_shape", {1, 3});
        set_ints(n, "strides", {1, 2});
        set_ints(n, "pads", {0, 0, 0, 2});
        set_int(n, "ceil_mode", 1);
        expect_refused(m, "converted shape [1, 1, 2, 1] of 'y' differs from ONNX shape inference [1, 1, 2, 2]");
    }
    {  // MaxUnpool indices must lie in [0, size): a negative one fails the run
        auto m = model(11);
        auto* g = m.mutable_graph();
        typed(g->add_input(), "x", {1, 1, 2, 2});
        typed(g->add_input(), "i", {1, 1, 2, 2}, onnx::TensorProto::INT64);
        typed(g->add_output(), "y", {1, 1, 4, 4});
        auto* n = node(g, "MaxUnpool", {"x", "i"}, {"y"});
        set_ints(n, "kernel_shape", {2, 2});
        set_ints(n, "strides", {2, 2});
        Tensor indices = Tensor::zeros(DType::int64, {1, 1, 2, 2});
        const std::int64_t at[] = {0, 2, 8, -1};
        std::copy(at, at + 4, static_cast<std::int64_t*>(indices.data()));
        EXPECT_THROW(run(m, {{"x", Tensor::from_values(DType::float32, {1, 1, 2, 2}, {5, 6, 7, 8})}, {"i", indices}}), Error);
    }
}

TEST(OnnxConvTranspose, SamePaddingKeepsAFullOutputShorterThanInputTimesStride) {
    // A 1 × 1 kernel with stride 2 on 3 × 3: the full output is 5 × 5, shorter than 3 · 2; it is
    // kept whole (ONNX shape inference, ONNX Runtime): y[2i, 2j] = 2 · x[i, j], zeros between.
    auto m = model(13);
    auto* g = m.mutable_graph();
    typed(g->add_input(), "x", {1, 1, 3, 3});
    typed(g->add_output(), "y", {1, 1, 5, 5});
    float_initializer(g, "w", {1, 1, 1, 1}, {2});
    auto* n = node(g, "ConvTranspose", {"x", "w"}, {"y"});
    set_ints(n, "strides", {2, 2});
    set_string(n, "auto_pad", "SAME_UPPER");
    const auto y = run(m, {{"x", Tensor::from_values(DType::float32, {1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})}}).at(0);
    ASSERT_EQ(y.shape(), (Shape{1, 1, 5, 5}));
    std::vector<double> expected(25, 0);
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) expected[std::size_t(2 * i * 5 + 2 * j)] = 2.0 * (i * 3 + j + 1);
    EXPECT_EQ(y.to_doubles(), expected);
}
