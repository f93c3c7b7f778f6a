// The reference plugin's compiled groups (plugins/cpu/reference/compiled_group.cpp): a
// convolution whose result only a relu or clamp reads applies it as it writes its output. The
// fused run must give the same bits as the node-by-node run (SessionOptions::compile_groups off)
// on every convolution path (implicit GEMM, im2col blocks, pointwise, batched small images,
// unrolled and general depthwise), for float32 and float64, with NaN, infinities and -0 in the
// input, on one and two threads; a convolution whose result is read twice or leaves the group is
// not fused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
using capsule::testing::pseudo_random;

namespace {

Session session(const Graph& graph, const ParameterMap& params, bool compile_groups, int threads) {
    SessionOptions options;
    options.compile_groups = compile_groups;
    options.threads = threads;
    return capsule::testing::session_under("checked_cpu", graph, params, options);
}

Tensor random(DType dtype, Shape shape, std::uint64_t seed, double scale) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return Tensor::from_values(dtype, std::move(shape), pseudo_random(n, seed, scale));
}

/// Random input with a NaN, both infinities and a -0 among its first half of values (the first
/// image of a batch of two: the other stays finite through any receptive field).
Tensor special_input(DType dtype, Shape shape, std::uint64_t seed) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    auto v = pseudo_random(n, seed, 2.0);
    v[3] = std::nan("");
    v[n / 5] = std::numeric_limits<double>::infinity();
    v[n / 4] = -std::numeric_limits<double>::infinity();
    v[n / 2 - 5] = -0.0;
    return Tensor::from_values(dtype, std::move(shape), v);
}

/// Runs `graph` fused and node by node on 1 and 2 threads; every output must be the same bytes.
/// Returns the fused session's description of its group.
std::string expect_fused_run_matches(const Graph& graph, const ParameterMap& params,
                                     const std::map<std::string, Tensor>& inputs) {
    const auto want = session(graph, params, false, 1).run(inputs);
    std::string fused;
    for (int threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(threads));
        auto s = session(graph, params, true, threads);
        const auto groups = s.compiled_groups();
        EXPECT_EQ(groups.size(), 1u);
        if (!groups.empty()) fused = groups[0].fused;
        EXPECT_TRUE(session(graph, params, false, threads).compiled_groups().empty());
        const auto got = s.run(inputs);
        EXPECT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
            // A third or more numbers, so that equal bytes mean equal arithmetic (not NaN
            // everywhere).
            std::int64_t finite = 0;
            for (std::int64_t e = 0; e < want[i].numel(); ++e) finite += std::isfinite(want[i].at(e));
            EXPECT_GE(3 * finite, want[i].numel()) << "output " << i;
            EXPECT_EQ(got[i].shape(), want[i].shape());
            EXPECT_EQ(got[i].nbytes(), want[i].nbytes());
            EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].nbytes()), 0) << "output " << i << " differs";
        }
    }
    return fused;
}

/// Small images (batched im2col, implicit GEMM, unrolled depthwise) and every non-fusion case.
Graph small_graph(const std::string& dtype) {
    std::string nodes = R"(
      {"id": 1, "op": "conv2d", "name": "c1", "parents": [0], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "shape": [2, 8, 12, 12]},
      {"id": 2, "op": "relu", "name": "r1", "parents": [1], "shape": [2, 8, 12, 12]},
      {"id": 3, "op": "conv2d", "name": "dw", "parents": [2], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1, "stride": 2, "groups": 8}, "shape": [2, 8, 6, 6]},
      {"id": 4, "op": "clamp", "name": "k1", "parents": [3], "attrs": {"min": 0.0, "max": 6.0}, "shape": [2, 8, 6, 6]},
      {"id": 5, "op": "conv2d", "name": "pw", "parents": [4], "attrs": {"out_channels": 16, "kernel_size": 1}, "shape": [2, 16, 6, 6]},
      {"id": 6, "op": "clamp", "name": "k2", "parents": [5], "attrs": {"min": -0.5}, "shape": [2, 16, 6, 6]},
      {"id": 7, "op": "conv2d", "name": "c4", "parents": [6], "attrs": {"out_channels": 16, "kernel_size": 3, "stride": 2, "padding": 1}, "shape": [2, 16, 3, 3]},
      {"id": 8, "op": "relu", "name": "r4", "parents": [7], "shape": [2, 16, 3, 3]},
      {"id": 9, "op": "add", "name": "sum", "parents": [8, 7], "shape": [2, 16, 3, 3]},
      {"id": 10, "op": "conv2d", "name": "c5", "parents": [9], "attrs": {"out_channels": 4, "kernel_size": 1}, "shape": [2, 4, 3, 3]},
      {"id": 11, "op": "clamp", "name": "k5", "parents": [10], "attrs": {"max": 0.25}, "shape": [2, 4, 3, 3]}
    ], "outputs": [11, 10]})";
    // Every node declares the graph's dtype.
    for (std::size_t at = 0; (at = nodes.find("\"shape\": [", at)) != std::string::npos; at += 40)
        nodes.insert(at, "\"dtype\": \"" + dtype + "\", ");
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 4, 12, 12], "dtype": ")" + dtype + R"("},)" + nodes);
}

ParameterMap small_params(DType dtype) {
    return {{"c1.weight", random(dtype, {8, 4, 3, 3}, 1, 0.4)},  {"c1.bias", random(dtype, {8}, 2, 0.2)},
            {"dw.weight", random(dtype, {8, 1, 3, 3}, 3, 0.5)},  {"dw.bias", random(dtype, {8}, 4, 0.2)},
            {"pw.weight", random(dtype, {16, 8, 1, 1}, 5, 0.5)}, {"pw.bias", random(dtype, {16}, 6, 0.2)},
            {"c4.weight", random(dtype, {16, 16, 3, 3}, 7, 0.2)}, {"c4.bias", random(dtype, {16}, 8, 0.2)},
            {"c5.weight", random(dtype, {4, 16, 1, 1}, 9, 0.3)},  {"c5.bias", random(dtype, {4}, 10, 0.2)}};
}

}  // namespace

TEST(ReferenceCompiledGroups, ConvolutionActivationsGiveTheNodeByNodeBits) {
    for (const auto& [name, dtype] : {std::pair{"float32", DType::float32}, std::pair{"float64", DType::float64}}) {
        SCOPED_TRACE(name);
        const std::string fused = expect_fused_run_matches(small_graph(name), small_params(dtype),
                                                           {{"x", special_input(dtype, {2, 4, 12, 12}, 20)}});
        // c1+r1, dw+k1 and pw+k2 fuse; c4's result is also read by `sum`, and c5's is a graph
        // output, so those run as their own nodes.
        EXPECT_EQ(fused, "conv+clamp x2, conv+relu x1 (applied to each output block as the convolution writes it)");
    }
}

TEST(ReferenceCompiledGroups, LargerImagesTakeTheBlockedAndGeneralDepthwisePaths) {
    // One 48 x 48 image: a strided 3x3 convolution in blocks of im2col columns, a pointwise one
    // read in place, and a dilated depthwise one (the general, row-by-row kernel).
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 16, 48, 48], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "a", "parents": [0], "attrs": {"out_channels": 32, "kernel_size": 3, "stride": 2, "padding": 1}, "shape": [1, 32, 24, 24]},
      {"id": 2, "op": "relu", "name": "ra", "parents": [1], "shape": [1, 32, 24, 24]},
      {"id": 3, "op": "conv2d", "name": "b", "parents": [2], "attrs": {"out_channels": 64, "kernel_size": 1}, "shape": [1, 64, 24, 24]},
      {"id": 4, "op": "clamp", "name": "kb", "parents": [3], "attrs": {"min": 0.0, "max": 6.0}, "shape": [1, 64, 24, 24]},
      {"id": 5, "op": "conv2d", "name": "d", "parents": [4], "attrs": {"out_channels": 64, "kernel_size": 3, "padding": 2, "dilation": 2, "groups": 64}, "shape": [1, 64, 24, 24]},
      {"id": 6, "op": "clamp", "name": "kd", "parents": [5], "attrs": {"min": -1.0, "max": 1.0}, "shape": [1, 64, 24, 24]}
    ], "outputs": [6]})");
    const ParameterMap params{{"a.weight", random(DType::float32, {32, 16, 3, 3}, 31, 0.2)},
                              {"a.bias", random(DType::float32, {32}, 32, 0.2)},
                              {"b.weight", random(DType::float32, {64, 32, 1, 1}, 33, 0.3)},
                              {"b.bias", random(DType::float32, {64}, 34, 0.2)},
                              {"d.weight", random(DType::float32, {64, 1, 3, 3}, 35, 0.5)},
                              {"d.bias", random(DType::float32, {64}, 36, 0.2)}};
    const std::string fused = expect_fused_run_matches(
        graph, params, {{"x", special_input(DType::float32, {1, 16, 48, 48}, 37)}});
    EXPECT_EQ(fused.rfind("conv+clamp x2, conv+relu x1 ", 0), 0u) << fused;
}

TEST(ReferenceCompiledGroups, NothingToFuseDeclinesTheGroup) {
    // A convolution followed by a sigmoid: no epilogue for it, so the plugin declines and the
    // host calls the nodes one by one (no compiled group is reported).
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 2, 5, 5], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 3, "kernel_size": 3}, "shape": [1, 3, 3, 3]},
      {"id": 2, "op": "sigmoid", "name": "s", "parents": [1], "shape": [1, 3, 3, 3]}
    ], "outputs": [2]})");
    const ParameterMap params{{"c.weight", random(DType::float32, {3, 2, 3, 3}, 41, 0.3)},
                              {"c.bias", random(DType::float32, {3}, 42, 0.1)}};
    EXPECT_TRUE(session(graph, params, true, 1).compiled_groups().empty());
}

TEST(ReferenceCompiledGroups, InferenceBatchNormIsAppliedBeforeTheActivation) {
    // ResNet's conv -> batch_norm -> relu, a conv -> batch_norm whose result an add reads, an
    // affine-free batch_norm with a clamp, and a training-mode batch_norm (batch statistics need
    // the whole output: not fused, nor is the relu after it). Running variances include a
    // negative one (NaN scale: that channel is NaN from there on) and a huge mean. The outputs
    // of the training-mode batch_norm, whose batch statistics would spread a NaN over every
    // channel, come from a second, finite input.
    for (const auto& [name, dtype] : {std::pair{"float32", DType::float32}, std::pair{"float64", DType::float64}}) {
        SCOPED_TRACE(name);
        std::string nodes = R"(
      {"id": 1, "op": "conv2d", "name": "a", "parents": [0], "attrs": {"out_channels": 6, "kernel_size": 3, "padding": 1}, "shape": [2, 6, 10, 10]},
      {"id": 2, "op": "batch_norm", "name": "bna", "parents": [1], "attrs": {"eps": 0.001}, "shape": [2, 6, 10, 10]},
      {"id": 3, "op": "relu", "name": "ra", "parents": [2], "shape": [2, 6, 10, 10]},
      {"id": 4, "op": "conv2d", "name": "b", "parents": [3], "attrs": {"out_channels": 6, "kernel_size": 3, "padding": 1}, "shape": [2, 6, 10, 10]},
      {"id": 5, "op": "batch_norm", "name": "bnb", "parents": [4], "shape": [2, 6, 10, 10]},
      {"id": 6, "op": "add", "name": "res", "parents": [5, 3], "shape": [2, 6, 10, 10]},
      {"id": 7, "op": "conv2d", "name": "c", "parents": [6], "attrs": {"out_channels": 6, "kernel_size": 1}, "shape": [2, 6, 10, 10]},
      {"id": 8, "op": "batch_norm", "name": "bnc", "parents": [7], "attrs": {"affine": false}, "shape": [2, 6, 10, 10]},
      {"id": 9, "op": "clamp", "name": "kc", "parents": [8], "attrs": {"min": -1.0, "max": 1.0}, "shape": [2, 6, 10, 10]},
      {"id": 13, "op": "input", "name": "z", "shape": [2, 6, 10, 10]},
      {"id": 10, "op": "conv2d", "name": "d", "parents": [13], "attrs": {"out_channels": 6, "kernel_size": 3, "groups": 6, "padding": 1}, "shape": [2, 6, 10, 10]},
      {"id": 11, "op": "batch_norm", "name": "bnd", "parents": [10], "attrs": {"training": true}, "shape": [2, 6, 10, 10]},
      {"id": 12, "op": "relu", "name": "rd", "parents": [11], "shape": [2, 6, 10, 10]}
    ], "outputs": [3, 6, 9, 12]})";
        for (std::size_t at = 0; (at = nodes.find("\"shape\": [", at)) != std::string::npos; at += 40)
            nodes.insert(at, "\"dtype\": \"" + std::string(name) + "\", ");
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 10, 10], "dtype": ")" + std::string(name) + R"("},)" + nodes);
        auto stats = [&](std::uint64_t seed, bool variance) {
            auto v = pseudo_random(6, seed, variance ? 1.0 : 0.5);
            for (auto& x : v) x = variance ? std::fabs(x) + 0.1 : x;
            return v;
        };
        auto bad_var = stats(53, true);
        bad_var[2] = -5.0;  // var + eps < 0: that channel's scale is NaN, node by node as fused
        auto huge_mean = stats(54, false);
        huge_mean[4] = 1e6;
        auto tensor = [&](std::vector<double> v) { return Tensor::from_values(dtype, {6}, std::move(v)); };
        const ParameterMap params{
            {"a.weight", random(dtype, {6, 3, 3, 3}, 50, 0.4)}, {"a.bias", random(dtype, {6}, 51, 0.2)},
            {"bna.weight", tensor(stats(52, false))},           {"bna.bias", tensor(stats(55, false))},
            {"bna.running_mean", tensor(huge_mean)},            {"bna.running_var", tensor(stats(73, true))},
            {"b.weight", random(dtype, {6, 6, 3, 3}, 56, 0.3)}, {"b.bias", random(dtype, {6}, 57, 0.2)},
            {"bnb.weight", tensor(stats(58, false))},           {"bnb.bias", tensor(stats(59, false))},
            {"bnb.running_mean", tensor(stats(60, false))},     {"bnb.running_var", tensor(stats(61, true))},
            {"c.weight", random(dtype, {6, 6, 1, 1}, 62, 0.4)}, {"c.bias", random(dtype, {6}, 63, 0.2)},
            {"bnc.running_mean", tensor(stats(64, false))},     {"bnc.running_var", tensor(bad_var)},
            {"d.weight", random(dtype, {6, 1, 3, 3}, 66, 0.4)}, {"d.bias", random(dtype, {6}, 67, 0.2)},
            {"bnd.weight", tensor(stats(68, false))},           {"bnd.bias", tensor(stats(69, false))},
            {"bnd.running_mean", tensor(stats(70, false))},     {"bnd.running_var", tensor(stats(71, true))}};
        const std::string fused =
            expect_fused_run_matches(graph, params, {{"x", special_input(dtype, {2, 3, 10, 10}, 72)},
                                                     {"z", random(dtype, {2, 6, 10, 10}, 74, 1.0)}});
        EXPECT_EQ(fused, "conv+batch_norm x1, conv+batch_norm+clamp x1, conv+batch_norm+relu x1 (applied to each "
                         "output block as the convolution writes it)");
    }
}
