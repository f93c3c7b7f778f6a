// The reference plugin's GEMM-based kernels (conv2d, linear, matmul), pools, batch norm and
// elementwise ops use the intra-op threads a session grants them (SessionOptions::threads): gemm
// splits C's columns, or its rows when C is narrow; convolution its blocks of output positions or
// depthwise planes; pooling and batch norm their planes; elementwise ops their elements. Each
// entry is summed in the same order on any thread count, so a session with 2 threads must give
// the same bits as one with 1; and both must equal the operation computed directly, in double
// precision, within float32 rounding (bit for bit where the op rounds once).
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
using capsule::testing::pseudo_random;

namespace {

Session checked_session(const Graph& graph, const ParameterMap& params, int threads) {
    SessionOptions options;
    options.threads = threads;
    return capsule::testing::session_under("checked_cpu", graph, params, options);
}

/// Runs `graph` with 1 and with 2 threads; expects identical bits and returns the result.
Tensor same_bits_on_one_and_two_threads(const Graph& graph, const ParameterMap& params,
                                        const std::map<std::string, Tensor>& inputs) {
    const Tensor one = checked_session(graph, params, 1).run(inputs)[0];
    const Tensor two = checked_session(graph, params, 2).run(inputs)[0];
    EXPECT_EQ(one.shape(), two.shape());
    EXPECT_EQ(one.nbytes(), two.nbytes());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.nbytes()), 0)
        << "the result depends on the thread count";
    return two;
}

Tensor f32(Shape shape, std::uint64_t seed, double scale) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return Tensor::from_values(DType::float32, std::move(shape), pseudo_random(n, seed, scale));
}

}  // namespace

TEST(ReferenceThreads, ConvolutionSplitsColumnsAndRowsWithTheSameBits) {
    // [2, 32, 24, 24] -> 64 channels: C is 64 x 1152 (columns split); [1, 128, 7, 7] -> 256
    // channels: C is 256 x 49 (rows split; 48 columns and a 1-column edge tile); [1, 64, 5, 5]
    // -> 256: C is 256 x 25 (a 2-vector edge tile); stride 2 (im2col), [1, 64, 14, 14] -> 256:
    // C is 256 x 49 (rows split, one column block), and [1, 128, 28, 28] -> 256: 256 x 196 (rows
    // split, two column blocks each); [3, 128, 7, 7] -> 256: the three images' 49 columns side by
    // side in one GEMM (147 columns). All are above gemm's work threshold for 2 threads.
    struct Shape4 {
        std::int64_t n, c, hw, out, stride;
    };
    for (const Shape4 s : {Shape4{2, 32, 24, 64, 1}, Shape4{1, 128, 7, 256, 1}, Shape4{1, 64, 5, 256, 1},
                           Shape4{1, 64, 14, 256, 2}, Shape4{1, 128, 28, 256, 2}, Shape4{3, 128, 7, 256, 1}}) {
        SCOPED_TRACE("conv " + std::to_string(s.c) + " -> " + std::to_string(s.out) + " at " + std::to_string(s.hw) +
                     ", stride " + std::to_string(s.stride));
        const std::int64_t ohw = (s.hw - 1) / s.stride + 1;  // kernel 3, padding 1
        const std::string shape_in = "[" + std::to_string(s.n) + ", " + std::to_string(s.c) + ", " +
                                     std::to_string(s.hw) + ", " + std::to_string(s.hw) + "]";
        const std::string shape_out = "[" + std::to_string(s.n) + ", " + std::to_string(s.out) + ", " +
                                      std::to_string(ohw) + ", " + std::to_string(ohw) + "]";
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": )" + shape_in + R"(, "dtype": "float32"},
          {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": )" +
                                        std::to_string(s.out) + R"(, "kernel_size": 3, "padding": 1, "stride": )" +
                                        std::to_string(s.stride) + R"(}, "shape": )" +
                                        shape_out + R"(}], "outputs": [1]})");
        const Tensor x = f32({s.n, s.c, s.hw, s.hw}, 71, 1.0), w = f32({s.out, s.c, 3, 3}, 72, 0.1),
                     b = f32({s.out}, 73, 0.5);
        const Tensor y = same_bits_on_one_and_two_threads(graph, {{"c.weight", w}, {"c.bias", b}}, {{"x", x}});
        // A sample of outputs against the convolution's definition (torch.nn.functional.conv2d).
        for (const std::int64_t flat : {std::int64_t{0}, y.numel() / 3, y.numel() / 2 + 5, y.numel() - 1}) {
            const std::int64_t ow = flat % ohw, oh = flat / ohw % ohw, o = flat / (ohw * ohw) % s.out,
                               img = flat / (ohw * ohw * s.out);
            double want = b.at(o), magnitude = std::fabs(want);
            for (std::int64_t c = 0; c < s.c; ++c)
                for (std::int64_t i = 0; i < 3; ++i)
                    for (std::int64_t j = 0; j < 3; ++j) {
                        const std::int64_t h = oh * s.stride + i - 1, v = ow * s.stride + j - 1;
                        if (h < 0 || v < 0 || h >= s.hw || v >= s.hw) continue;
                        const double term = x.at(((img * s.c + c) * s.hw + h) * s.hw + v) *
                                            w.at(((o * s.c + c) * 3 + i) * 3 + j);
                        want += term;
                        magnitude += std::fabs(term);
                    }
            EXPECT_NEAR(y.at(flat), want, 1e-6 * magnitude + 1e-7) << "output " << flat;
        }
    }
}

TEST(ReferenceThreads, LinearAndMatmulGiveTheSameBitsOnAnyThreadCount) {
    // linear: x [8, 512] -> 1024 (the dot-product path, columns split); matmul [64, 256] x
    // [256, 512] (the packed path, columns split).
    const Graph linear = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [8, 512], "dtype": "float32"},
      {"id": 1, "op": "linear", "name": "fc", "parents": [0], "attrs": {"out_features": 1024}, "shape": [8, 1024]}
    ], "outputs": [1]})");
    const Tensor x = f32({8, 512}, 81, 1.0), w = f32({1024, 512}, 82, 0.1), b = f32({1024}, 83, 0.5);
    const Tensor y = same_bits_on_one_and_two_threads(linear, {{"fc.weight", w}, {"fc.bias", b}}, {{"x", x}});
    for (const std::int64_t r : {0, 7})
        for (const std::int64_t o : {0, 511, 1023}) {
            double want = b.at(o), magnitude = std::fabs(want);
            for (std::int64_t i = 0; i < 512; ++i) {
                want += x.at(r * 512 + i) * w.at(o * 512 + i);
                magnitude += std::fabs(x.at(r * 512 + i) * w.at(o * 512 + i));
            }
            EXPECT_NEAR(y.at(r * 1024 + o), want, 1e-6 * magnitude) << "row " << r << ", column " << o;
        }
    const Graph matmul = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "a", "shape": [64, 256], "dtype": "float32"},
      {"id": 1, "op": "input", "name": "b", "shape": [256, 512], "dtype": "float32"},
      {"id": 2, "op": "matmul", "name": "mm", "parents": [0, 1], "shape": [64, 512]}
    ], "outputs": [2]})");
    const Tensor a = f32({64, 256}, 84, 1.0), bm = f32({256, 512}, 85, 1.0);
    const Tensor c = same_bits_on_one_and_two_threads(matmul, {}, {{"a", a}, {"b", bm}});
    for (const std::int64_t i : {0, 63})
        for (const std::int64_t j : {0, 300, 511}) {
            double want = 0, magnitude = 0;
            for (std::int64_t p = 0; p < 256; ++p) {
                want += a.at(i * 256 + p) * bm.at(p * 512 + j);
                magnitude += std::fabs(a.at(i * 256 + p) * bm.at(p * 512 + j));
            }
            EXPECT_NEAR(c.at(i * 512 + j), want, 1e-6 * magnitude) << "entry " << i << ", " << j;
        }
}

TEST(ReferenceThreads, PoolingSplitsPlanesWithTheSameBits) {
    // [2, 16, 60, 60], 3 x 3 windows, stride 2, padding 1 (ResNet's stem pool on a smaller input):
    // 259,200 window reads, enough for 2 threads (pool_fwd gives each at least 64 K); a sample against the definition (max, and the average
    // counting the padding, as count_include_pad's default).
    for (const std::string op : {"max_pool2d_pad", "avg_pool2d_pad"}) {
        SCOPED_TRACE(op);
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": [2, 16, 60, 60], "dtype": "float32"},
          {"id": 1, "op": ")" + op + R"(", "parents": [0], "attrs": {"kernel_size": 3, "stride": 2, "padding": 1}, "shape": [2, 16, 30, 30]}
        ], "outputs": [1]})");
        const Tensor x = f32({2, 16, 60, 60}, 91, 1.0);
        const Tensor y = same_bits_on_one_and_two_threads(graph, {}, {{"x", x}});
        for (const std::int64_t flat : {std::int64_t{0}, y.numel() / 3, y.numel() - 1}) {
            const std::int64_t ow = flat % 30, oh = flat / 30 % 30, plane = flat / 900;
            double best = -INFINITY, sum = 0;
            for (std::int64_t i = 0; i < 3; ++i)
                for (std::int64_t j = 0; j < 3; ++j) {
                    const std::int64_t h = oh * 2 + i - 1, v = ow * 2 + j - 1;
                    if (h < 0 || v < 0 || h >= 60 || v >= 60) continue;
                    best = std::max(best, x.at((plane * 60 + h) * 60 + v));
                    sum += x.at((plane * 60 + h) * 60 + v);
                }
            EXPECT_NEAR(y.at(flat), op == "max_pool2d_pad" ? best : sum / 9, 1e-6) << "output " << flat;
        }
    }
}

// ---- the fast paths: direct depthwise convolution, convolution in blocks of output positions,
// separable max pooling, the vectorised clamp, elementwise and batch-norm thread splits ----

namespace {

struct ConvCase {
    std::int64_t n, c, h, w, out, groups, kh, kw, sh, sw, ph, pw, dh, dw;
    std::int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
    std::int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
    std::string name() const {
        return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) +
               " -> " + std::to_string(out) + " groups " + std::to_string(groups) + " k " + std::to_string(kh) +
               "x" + std::to_string(kw) + " s " + std::to_string(sh) + "x" + std::to_string(sw) + " p " +
               std::to_string(ph) + "x" + std::to_string(pw) + " d " + std::to_string(dh) + "x" + std::to_string(dw);
    }
};

std::string pair_json(std::int64_t a, std::int64_t b) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

/// Every output of conv2d (bias included) against torch.nn.functional.conv2d's definition in
/// double, within float32 rounding of the sum of |terms|; and the same bits on 1 and 2 threads.
void expect_conv_matches_definition(const ConvCase& k) {
    SCOPED_TRACE(k.name());
    const std::int64_t oh = k.oh(), ow = k.ow(), cig = k.c / k.groups, cog = k.out / k.groups;
    const Graph graph = parse_graph(
        R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [)" +
        std::to_string(k.n) + ", " + std::to_string(k.c) + ", " + std::to_string(k.h) + ", " + std::to_string(k.w) +
        R"(], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": )" +
        std::to_string(k.out) + R"(, "kernel_size": )" + pair_json(k.kh, k.kw) + R"(, "stride": )" +
        pair_json(k.sh, k.sw) + R"(, "padding": )" + pair_json(k.ph, k.pw) + R"(, "dilation": )" +
        pair_json(k.dh, k.dw) + R"(, "groups": )" + std::to_string(k.groups) + R"(}, "shape": [)" +
        std::to_string(k.n) + ", " + std::to_string(k.out) + ", " + std::to_string(oh) + ", " + std::to_string(ow) +
        R"(]}], "outputs": [1]})");
    const Tensor x = f32({k.n, k.c, k.h, k.w}, 101, 1.0), w = f32({k.out, cig, k.kh, k.kw}, 102, 0.2),
                 b = f32({k.out}, 103, 0.5);
    const Tensor y = same_bits_on_one_and_two_threads(graph, {{"c.weight", w}, {"c.bias", b}}, {{"x", x}});
    const auto xs = x.values<float>(), ws = w.values<float>(), ys = y.values<float>();
    int wrong = 0;
    for (std::int64_t img = 0; img < k.n; ++img)
        for (std::int64_t o = 0; o < k.out; ++o)
            for (std::int64_t oy = 0; oy < oh; ++oy)
                for (std::int64_t ox = 0; ox < ow; ++ox) {
                    double want = b.at(o), magnitude = std::fabs(want);
                    for (std::int64_t ci = 0; ci < cig; ++ci)
                        for (std::int64_t i = 0; i < k.kh; ++i)
                            for (std::int64_t j = 0; j < k.kw; ++j) {
                                const std::int64_t iy = oy * k.sh - k.ph + i * k.dh, ix = ox * k.sw - k.pw + j * k.dw;
                                if (iy < 0 || ix < 0 || iy >= k.h || ix >= k.w) continue;
                                const std::int64_t channel = o / cog * cig + ci;
                                const double term = double(xs[std::size_t(((img * k.c + channel) * k.h + iy) * k.w + ix)]) *
                                                    double(ws[std::size_t(((o * cig + ci) * k.kh + i) * k.kw + j)]);
                                want += term;
                                magnitude += std::fabs(term);
                            }
                    const float got = ys[std::size_t(((img * k.out + o) * oh + oy) * ow + ox)];
                    if (!(std::fabs(double(got) - want) <= 1e-6 * magnitude + 1e-7) && ++wrong <= 5)
                        ADD_FAILURE() << "y[" << img << ", " << o << ", " << oy << ", " << ox << "] = " << got
                                      << ", want " << want;
                }
    EXPECT_EQ(wrong, 0);
}

}  // namespace

TEST(ReferenceFastPaths, DepthwiseConvolutionMatchesTheDefinition) {
    // One input channel per group: computed directly rather than as a 1-row GEMM per channel.
    // Channel multiplier 1 and 2, rectangular kernels, strides, asymmetric padding, dilation,
    // inputs narrower than the kernel's reach at the edges, and planes enough for two threads.
    for (const ConvCase& k : {ConvCase{2, 8, 13, 11, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{1, 6, 16, 16, 12, 6, 3, 5, 2, 2, 1, 2, 1, 1},
                              ConvCase{2, 4, 9, 12, 4, 4, 3, 3, 1, 2, 0, 0, 2, 2},
                              ConvCase{1, 3, 5, 4, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1},
                              ConvCase{1, 32, 28, 28, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{2, 16, 15, 15, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1}})
        expect_conv_matches_definition(k);
}

TEST(ReferenceFastPaths, ConvolutionInBlocksOfOutputPositionsMatchesTheDefinition) {
    // Column blocks of im2col sized to ~128 K elements: 16 x 3 x 3 rows at 40 x 40 positions is
    // two blocks; at stride 2 on 90 x 90 (45 x 45 positions) three blocks that start mid-row; a
    // 1x1 stride-1 convolution (no im2col) of 130 x 130 positions two blocks; a grouped one; and
    // 7 x 7 positions with 256 output channels on one image, split by rows between threads.
    for (const ConvCase& k : {ConvCase{1, 16, 40, 40, 24, 1, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{1, 16, 90, 90, 8, 1, 3, 3, 2, 2, 1, 1, 1, 1},
                              ConvCase{1, 8, 130, 130, 16, 1, 1, 1, 1, 1, 0, 0, 1, 1},
                              ConvCase{2, 16, 40, 40, 8, 2, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{1, 64, 7, 7, 256, 1, 3, 3, 1, 1, 1, 1, 1, 1}})
        expect_conv_matches_definition(k);
}

TEST(ReferenceFastPaths, ImplicitGemmConvolutionMatchesTheDefinition) {
    // Stride-1 convolutions read their im2col rows from a zero-padded copy of the input, with
    // the output computed on the padded width and the extra columns dropped: LeNet's two layers
    // (3 images), dilation with padding, rectangular kernels and padding, groups, a padded 1x1,
    // one output row, and 64 channels at 40 x 40 (two blocks of virtual columns per image).
    for (const ConvCase& k : {ConvCase{3, 1, 28, 28, 6, 1, 5, 5, 1, 1, 2, 2, 1, 1},
                              ConvCase{3, 6, 14, 14, 16, 1, 5, 5, 1, 1, 0, 0, 1, 1},
                              ConvCase{1, 5, 17, 19, 7, 1, 3, 3, 1, 1, 2, 3, 2, 2},
                              ConvCase{2, 4, 12, 9, 6, 1, 1, 3, 1, 1, 0, 1, 1, 1},
                              ConvCase{2, 6, 10, 10, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{1, 3, 6, 7, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                              ConvCase{1, 3, 3, 20, 5, 1, 3, 3, 1, 1, 0, 1, 1, 1},
                              ConvCase{2, 8, 40, 40, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1}})
        expect_conv_matches_definition(k);
}

TEST(ReferenceFastPaths, FewOutputChannelsReadTheColumnMatrixInPlace) {
    // With at most 16 output channels the GEMM reads whole 48-column strips of B in place (the
    // image of a 1x1 convolution, the padded image of an implicit one) and packs only a last,
    // partial strip: 144 columns (three whole strips ending at the input's last value), 49
    // columns (one whole strip and one packed), fewer columns than one strip, exactly 16 and 17
    // output channels (the first packed case), and LeNet's first layer on 5 images.
    for (const ConvCase& k : {ConvCase{1, 8, 12, 12, 16, 1, 1, 1, 1, 1, 0, 0, 1, 1},
                              ConvCase{2, 3, 7, 7, 12, 1, 1, 1, 1, 1, 0, 0, 1, 1},
                              ConvCase{1, 5, 4, 5, 9, 1, 1, 1, 1, 1, 0, 0, 1, 1},
                              ConvCase{1, 6, 10, 10, 17, 1, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{2, 6, 10, 10, 16, 1, 3, 3, 1, 1, 1, 1, 1, 1},
                              ConvCase{5, 1, 28, 28, 6, 1, 5, 5, 1, 1, 2, 2, 1, 1}})
        expect_conv_matches_definition(k);
}

TEST(ReferenceFastPaths, ImplicitGemmDropsTheColumnsPastEachRow) {
    // The dropped columns of the padded width read past a row's end into the next row: a NaN in
    // every row's first column reaches them, but must reach only the outputs whose window holds
    // it (ox = 0, 1 with a 3-wide kernel and padding 1), never those of the row before.
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 2, 6, 8], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 3, "kernel_size": 3, "padding": 1}, "shape": [1, 3, 6, 8]}
    ], "outputs": [1]})");
    auto xs = pseudo_random(96, 111, 1.0);
    for (std::size_t row = 0; row < 12; ++row) xs[row * 8] = std::nan("");
    const Tensor x = Tensor::from_values(DType::float32, {1, 2, 6, 8}, xs);
    const Tensor y = same_bits_on_one_and_two_threads(
        graph, {{"c.weight", f32({3, 2, 3, 3}, 112, 0.3)}, {"c.bias", f32({3}, 113, 0.1)}}, {{"x", x}});
    const auto ys = y.values<float>();
    for (std::size_t i = 0; i < ys.size(); ++i) {
        const std::size_t ox = i % 8;
        EXPECT_EQ(std::isnan(ys[i]), ox <= 1) << "output " << i << " (column " << ox << ") is " << ys[i];
    }
}

TEST(ReferenceFastPaths, UnrolledDepthwiseKernelsMatchTheDefinition) {
    // 3x3 and 5x5 kernels at stride 1 and 2 run unrolled over a zero-padded plane: no padding,
    // padding 1 and 2, channel multiplier 2, odd sizes whose last window ends at the edge, and a
    // plane narrower than one vector.
    for (const ConvCase& k : {ConvCase{2, 4, 11, 13, 4, 4, 3, 3, 1, 1, 0, 0, 1, 1},
                              ConvCase{1, 3, 15, 17, 6, 3, 3, 3, 2, 2, 0, 0, 1, 1},
                              ConvCase{2, 5, 14, 14, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1},
                              ConvCase{1, 4, 19, 21, 8, 4, 5, 5, 2, 2, 2, 2, 1, 1},
                              ConvCase{1, 2, 7, 7, 2, 2, 5, 5, 2, 1, 1, 2, 1, 1},
                              ConvCase{3, 6, 5, 3, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1}})
        expect_conv_matches_definition(k);
}

namespace {

std::uint32_t bits_of(float v) {
    std::uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
}
float float_of_bits(std::uint32_t b) {
    float v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}

}  // namespace

TEST(ReferenceFastPaths, SeparableMaxPoolingKeepsTheWindowOrderRules) {
    // Max pooling combines each input row over the window's columns, then those over its rows.
    // The result must equal the row-major scan's bits: the first maximum (+0 after -0 stays -0),
    // the last NaN of the window in row-major order (payloads 1 to 4 tell them apart), -inf
    // where a window covers only padding; with padding, ceil_mode, strides of 1 to 3 and
    // rectangular windows. Windows that tile the rows (LeNet's 2x2 pools: output rows of 14 and
    // 5 values; rows of 1 and 3 values; 20 values, more than one vector) run over blocks of
    // planes with whole-vector rows, short rows writing into the next ones: 40 planes of 64 x 64
    // are five blocks; an empty batch has none.
    struct PoolCase {
        std::int64_t n, c, h, w, kh, kw, sh, sw, ph, pw;
        bool ceil;
    };
    for (const PoolCase& p : {PoolCase{1, 3, 9, 11, 3, 3, 2, 2, 1, 1, false}, PoolCase{2, 2, 8, 7, 2, 3, 1, 2, 1, 1, true},
                              PoolCase{1, 2, 13, 13, 3, 3, 2, 2, 0, 0, true}, PoolCase{1, 1, 6, 10, 3, 2, 3, 1, 1, 1, false},
                              PoolCase{2, 32, 40, 40, 3, 3, 2, 2, 1, 1, false},
                              PoolCase{8, 6, 28, 28, 2, 2, 2, 2, 0, 0, false}, PoolCase{4, 16, 10, 10, 2, 2, 2, 2, 0, 0, false},
                              PoolCase{3, 5, 4, 2, 2, 2, 2, 2, 0, 0, false}, PoolCase{2, 3, 9, 9, 3, 3, 3, 3, 0, 0, false},
                              PoolCase{1, 4, 6, 40, 2, 2, 2, 2, 0, 0, false}, PoolCase{1, 40, 64, 64, 2, 2, 2, 2, 0, 0, false},
                              PoolCase{0, 3, 8, 8, 2, 2, 2, 2, 0, 0, false}}) {
        const auto out_size = [&](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t pad) {
            const std::int64_t span = in + 2 * pad - k;
            std::int64_t o = span / s + (p.ceil && span % s != 0 ? 1 : 0) + 1;
            if (p.ceil && (o - 1) * s >= in + pad) --o;
            return o;
        };
        const std::int64_t oh = out_size(p.h, p.kh, p.sh, p.ph), ow = out_size(p.w, p.kw, p.sw, p.pw);
        SCOPED_TRACE("pool " + std::to_string(p.h) + "x" + std::to_string(p.w) + " -> " + std::to_string(oh) + "x" +
                     std::to_string(ow));
        const Graph graph = parse_graph(
            R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": [)" +
            std::to_string(p.n) + ", " + std::to_string(p.c) + ", " + std::to_string(p.h) + ", " + std::to_string(p.w) +
            R"(], "dtype": "float32"},
          {"id": 1, "op": "max_pool2d_pad", "parents": [0], "attrs": {"kernel_size": )" + pair_json(p.kh, p.kw) +
            R"(, "stride": )" + pair_json(p.sh, p.sw) + R"(, "padding": )" + pair_json(p.ph, p.pw) +
            R"(, "ceil_mode": )" + (p.ceil ? "true" : "false") + R"(}, "shape": [)" + std::to_string(p.n) + ", " +
            std::to_string(p.c) + ", " + std::to_string(oh) + ", " + std::to_string(ow) + R"(]}], "outputs": [1]})");
        Tensor x = f32({p.n, p.c, p.h, p.w}, 111, 1.0);
        auto xs = x.values<float>();
        // The first plane: negatives and zeros of both signs, so windows tie at zero; the others
        // have large maxima here and there; a few NaNs with distinct payloads everywhere.
        const std::size_t plane_size = std::size_t(p.h * p.w);
        for (std::size_t i = 0; i < std::min(plane_size, xs.size()); ++i) xs[i] = i % 3 ? -std::fabs(xs[i]) - 0.5f : (i / 3) % 2 ? 0.0f : -0.0f;
        for (std::size_t i = plane_size; i < xs.size(); i += 7) xs[i] = std::fabs(xs[i]) + 2;
        for (std::size_t i = 3; i < xs.size(); i += 23) xs[i] = float_of_bits(0x7fc00001u + std::uint32_t(i % 4));
        const Tensor y = same_bits_on_one_and_two_threads(graph, {}, {{"x", x}});
        const auto ys = y.values<float>();
        int wrong = 0;
        for (std::int64_t plane = 0; plane < p.n * p.c; ++plane)
            for (std::int64_t oy = 0; oy < oh; ++oy)
                for (std::int64_t ox = 0; ox < ow; ++ox) {
                    float best = -INFINITY;
                    bool nan = false;
                    float last_nan = 0;
                    for (std::int64_t i = 0; i < p.kh; ++i)
                        for (std::int64_t j = 0; j < p.kw; ++j) {
                            const std::int64_t iy = oy * p.sh - p.ph + i, ix = ox * p.sw - p.pw + j;
                            if (iy < 0 || ix < 0 || iy >= p.h || ix >= p.w) continue;
                            const float v = xs[std::size_t((plane * p.h + iy) * p.w + ix)];
                            if (std::isnan(v)) {
                                nan = true;
                                last_nan = v;
                            } else if (v > best) {
                                best = v;
                            }
                        }
                    const float want = nan ? last_nan : best;
                    const float got = ys[std::size_t((plane * oh + oy) * ow + ox)];
                    if (bits_of(got) != bits_of(want) && ++wrong <= 5)
                        ADD_FAILURE() << "plane " << plane << " (" << oy << ", " << ox << "): bits " << std::hex
                                      << bits_of(got) << ", want " << bits_of(want);
                }
        EXPECT_EQ(wrong, 0);
    }
}

TEST(ReferenceFastPaths, ClampAndElementwiseOpsSplitBetweenThreads) {
    // 300,000 elements: split in two (at least 65,536 per part). clamp (torch.clamp: NaN stays
    // NaN, a missing bound is no bound, min > max gives max), relu and a same-shape add against
    // their definitions, bit for bit.
    const std::int64_t n = 300000;
    Tensor x = f32({n}, 121, 3.0), z = f32({n}, 122, 1.0);
    auto xs = x.values<float>();
    for (std::size_t i = 0; i < xs.size(); i += 1000) xs[i] = float_of_bits(0x7fc00005u);
    xs[1] = INFINITY;
    xs[2] = -INFINITY;
    struct ClampCase {
        std::string attrs;
        double lo, hi;
    };
    for (const ClampCase& c : {ClampCase{R"("min": -1, "max": 2)", -1, 2}, ClampCase{R"("min": 0.5)", 0.5, INFINITY},
                               ClampCase{R"("max": -0.25)", -INFINITY, -0.25}, ClampCase{R"("min": 1, "max": 0)", 1, 0}}) {
        SCOPED_TRACE(c.attrs);
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": [300000], "dtype": "float32"},
          {"id": 1, "op": "clamp", "parents": [0], "attrs": {)" + c.attrs + R"(}, "shape": [300000]}
        ], "outputs": [1]})");
        const auto ys = same_bits_on_one_and_two_threads(graph, {}, {{"x", x}});
        int wrong = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const float v = xs[std::size_t(i)];
            float want = v;
            if (!std::isnan(v)) want = std::min(std::max(v, float(c.lo)), float(c.hi));
            if (bits_of(ys.values<float>()[std::size_t(i)]) != bits_of(want) && ++wrong <= 5)
                ADD_FAILURE() << "clamp(" << v << ") = " << ys.values<float>()[std::size_t(i)] << ", want " << want;
        }
        EXPECT_EQ(wrong, 0);
    }
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [300000], "dtype": "float32"},
      {"id": 1, "op": "input", "name": "z", "shape": [300000], "dtype": "float32"},
      {"id": 2, "op": "relu", "parents": [0], "shape": [300000]},
      {"id": 3, "op": "add", "parents": [2, 1], "shape": [300000]}
    ], "outputs": [3]})");
    const Tensor y = same_bits_on_one_and_two_threads(graph, {}, {{"x", x}, {"z", z}});
    const auto ys = y.values<float>();
    int wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = xs[std::size_t(i)];
        const float want = (v < 0 ? 0.0f : v) + z.values<float>()[std::size_t(i)];
        if (bits_of(ys[std::size_t(i)]) != bits_of(want) && ++wrong <= 5)
            ADD_FAILURE() << "relu(" << v << ") + z = " << ys[std::size_t(i)] << ", want " << want;
    }
    EXPECT_EQ(wrong, 0);
}

TEST(ReferenceFastPaths, BatchNormSplitsPlanesBetweenThreads) {
    // Inference batch norm of [2, 16, 48, 48] (73,728 elements per image): (x - mean) / sqrt(var
    // + eps) * weight + bias, per channel, computed in double and rounded once.
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 16, 48, 48], "dtype": "float32"},
      {"id": 1, "op": "batch_norm", "name": "bn", "parents": [0], "shape": [2, 16, 48, 48]}
    ], "outputs": [1]})");
    const Tensor x = f32({2, 16, 48, 48}, 131, 2.0), weight = f32({16}, 132, 1.0), bias = f32({16}, 133, 1.0),
                 mean = f32({16}, 134, 0.5);
    std::vector<double> var_values = pseudo_random(16, 135, 1.0);
    for (auto& v : var_values) v = std::fabs(v) + 0.1;
    const Tensor var = Tensor::from_values(DType::float32, {16}, var_values);
    const Tensor y = same_bits_on_one_and_two_threads(
        graph, {{"bn.weight", weight}, {"bn.bias", bias}, {"bn.running_mean", mean}, {"bn.running_var", var}},
        {{"x", x}});
    int wrong = 0;
    for (std::int64_t i = 0; i < y.numel(); ++i) {
        const std::int64_t ch = i / (48 * 48) % 16;
        const double want =
            (x.at(i) - mean.at(ch)) / std::sqrt(var.at(ch) + 1e-5) * weight.at(ch) + bias.at(ch);
        if (!(std::fabs(y.at(i) - want) <= 1e-6 * (std::fabs(want) + 1)) && ++wrong <= 5)
            ADD_FAILURE() << "y[" << i << "] = " << y.at(i) << ", want " << want;
    }
    EXPECT_EQ(wrong, 0);
}

TEST(ReferenceFastPaths, TheWorkerPoolServesManyHostThreadsAndForkedChildren) {
    // The reference plugin's workers are shared by every session of the process: four host
    // threads running two-thread sessions at once must each get the one-thread result; and a
    // child forked after the workers started (as `capsule verify` forks) runs its parts itself.
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 16, 40, 40], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 24, "kernel_size": 3, "padding": 1}, "shape": [2, 24, 40, 40]},
      {"id": 2, "op": "relu", "parents": [1], "shape": [2, 24, 40, 40]}
    ], "outputs": [2]})");
    const ParameterMap params{{"c.weight", f32({24, 16, 3, 3}, 141, 0.2)}, {"c.bias", f32({24}, 142, 0.5)}};
    const std::map<std::string, Tensor> inputs{{"x", f32({2, 16, 40, 40}, 143, 1.0)}};
    const Tensor want = checked_session(graph, params, 1).run(inputs)[0];
    const Session shared = checked_session(graph, params, 2);
    std::atomic<int> mismatches{0};
    {
        std::vector<std::jthread> clients;
        for (int t = 0; t < 4; ++t)
            clients.emplace_back([&] {
                for (int i = 0; i < 10; ++i) {
                    const Tensor got = shared.run(inputs)[0];
                    if (std::memcmp(got.data(), want.data(), want.nbytes()) != 0) ++mismatches;
                }
            });
    }
    EXPECT_EQ(mismatches.load(), 0);

    // The child writes its verdict and leaves with _exit, as the probe and verify children do;
    // the pipe reaches end of file when it has exited.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(fds[0]);
        const Tensor got = shared.run(inputs)[0];
        const char ok = std::memcmp(got.data(), want.data(), want.nbytes()) == 0 ? 'y' : 'n';
        (void)!::write(fds[1], &ok, 1);
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string answer;
    bool ended = false;
    for (int waited_ms = 0; waited_ms < 20000 && !ended; waited_ms += 100) {
        pollfd wait_for{fds[0], POLLIN, 0};
        if (::poll(&wait_for, 1, 100) != 1) continue;
        char c;
        if (::read(fds[0], &c, 1) == 1)
            answer += c;
        else
            ended = true;
    }
    if (!ended) ::kill(pid, SIGKILL);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_EQ(answer, "y") << "the forked child's result";
    EXPECT_TRUE(ended) << "the forked child did not exit within 20 s";
}

TEST(ReferenceFastPaths, DepthwiseTapsOnThePaddingMultiplyZero) {
    // The padding is zeros that the weight multiplies (F.conv2d; the im2col path does the same),
    // so a NaN weight makes every output NaN and an infinite one makes NaN where its tap falls on
    // the padding (inf · 0) and inf inside (inf · 1).
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 2, 4, 4], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 2, "kernel_size": 3, "padding": 1, "groups": 2, "bias": false}, "shape": [1, 2, 4, 4]}
    ], "outputs": [1]})");
    std::vector<double> w(18, 0.5);
    w[0] = NAN;             // channel 0, tap (0, 0)
    w[9 + 8] = INFINITY;    // channel 1, tap (2, 2)
    const Tensor y = same_bits_on_one_and_two_threads(
        graph, {{"c.weight", Tensor::from_values(DType::float32, {2, 1, 3, 3}, w)}},
        {{"x", Tensor::from_values(DType::float32, {1, 2, 4, 4}, std::vector<double>(32, 1.0))}});
    for (std::int64_t p = 0; p < 16; ++p) {
        EXPECT_TRUE(std::isnan(y.at(p))) << "channel 0, position " << p;
        const bool on_padding = p / 4 == 3 || p % 4 == 3;  // tap (2, 2) reads row / column 4
        if (on_padding)
            EXPECT_TRUE(std::isnan(y.at(16 + p))) << "channel 1, position " << p;
        else
            EXPECT_EQ(y.at(16 + p), INFINITY) << "channel 1, position " << p;
    }
}
