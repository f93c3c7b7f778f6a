// The reference plugin's GEMM-based kernels (conv2d, linear, matmul) and pools use the intra-op
// threads a session grants them (SessionOptions::threads): gemm splits C's columns, or its rows
// when C is narrow, between threads; pooling splits its planes. Each entry is summed in the same order on any thread count, so a
// session with 2 threads must give the same bits as one with 1; and both must equal the
// operation computed directly, in double precision, within float32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

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
    // -> 256: C is 256 x 25 (a 2-vector edge tile). All are above gemm's work threshold for 2
    // threads.
    struct Shape4 {
        std::int64_t n, c, hw, out;
    };
    for (const Shape4 s : {Shape4{2, 32, 24, 64}, Shape4{1, 128, 7, 256}, Shape4{1, 64, 5, 256}}) {
        SCOPED_TRACE("conv " + std::to_string(s.c) + " -> " + std::to_string(s.out) + " at " + std::to_string(s.hw));
        const std::string shape_in = "[" + std::to_string(s.n) + ", " + std::to_string(s.c) + ", " +
                                     std::to_string(s.hw) + ", " + std::to_string(s.hw) + "]";
        const std::string shape_out = "[" + std::to_string(s.n) + ", " + std::to_string(s.out) + ", " +
                                      std::to_string(s.hw) + ", " + std::to_string(s.hw) + "]";
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": )" + shape_in + R"(, "dtype": "float32"},
          {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": )" +
                                        std::to_string(s.out) + R"(, "kernel_size": 3, "padding": 1}, "shape": )" +
                                        shape_out + R"(}], "outputs": [1]})");
        const Tensor x = f32({s.n, s.c, s.hw, s.hw}, 71, 1.0), w = f32({s.out, s.c, 3, 3}, 72, 0.1),
                     b = f32({s.out}, 73, 0.5);
        const Tensor y = same_bits_on_one_and_two_threads(graph, {{"c.weight", w}, {"c.bias", b}}, {{"x", x}});
        // A sample of outputs against the convolution's definition (torch.nn.functional.conv2d).
        for (const std::int64_t flat : {std::int64_t{0}, y.numel() / 3, y.numel() / 2 + 5, y.numel() - 1}) {
            const std::int64_t ow = flat % s.hw, oh = flat / s.hw % s.hw, o = flat / (s.hw * s.hw) % s.out,
                               img = flat / (s.hw * s.hw * s.out);
            double want = b.at(o), magnitude = std::fabs(want);
            for (std::int64_t c = 0; c < s.c; ++c)
                for (std::int64_t i = 0; i < 3; ++i)
                    for (std::int64_t j = 0; j < 3; ++j) {
                        const std::int64_t h = oh + i - 1, v = ow + j - 1;
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
