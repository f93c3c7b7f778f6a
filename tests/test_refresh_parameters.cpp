// Session::refresh_parameters: after parameters are written in place (Session::parameters, as
// capsule::Trainer's optimizer does), every profile's prepared kernels and compiled groups compute
// with the new values, bit for bit as a session created with them. Each plugin keeps its own copy
// of something derived from the weights: oneDNN reorders weights into its primitives' blocked
// layout, the reference plugin folds an inference batch_norm into its convolution's epilogue, the
// LibTorch groups keep convolution weights prepacked for oneDNN (mkldnn).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
using capsule::testing::pseudo_random;
using capsule::testing::session_under;

namespace {

struct Case {
    const char* profile;
    const char* library;  // the plugin library the profile needs; skipped when not built
};

class RefreshParameters : public ::testing::TestWithParam<Case> {};

// ResNet's conv -> batch_norm -> relu, then a 1x1 convolution, a residual add and a grouped,
// dilated, strided convolution.
const char* kGraph = R"({"format": "capsule-ir", "version": 1, "nodes": [
  {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 12, 12]},
  {"id": 1, "op": "conv2d", "name": "a", "parents": [0], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "shape": [2, 8, 12, 12]},
  {"id": 2, "op": "batch_norm", "name": "bn", "parents": [1], "attrs": {"eps": 0.001}, "shape": [2, 8, 12, 12]},
  {"id": 3, "op": "relu", "name": "r", "parents": [2], "shape": [2, 8, 12, 12]},
  {"id": 4, "op": "conv2d", "name": "b", "parents": [3], "attrs": {"out_channels": 8, "kernel_size": 1}, "shape": [2, 8, 12, 12]},
  {"id": 5, "op": "add", "name": "res", "parents": [4, 3], "shape": [2, 8, 12, 12]},
  {"id": 6, "op": "conv2d", "name": "g", "parents": [5], "attrs": {"out_channels": 8, "kernel_size": 3, "groups": 2, "dilation": 2, "stride": 2, "padding": 2}, "shape": [2, 8, 6, 6]}
], "outputs": [6]})";

Tensor values(Shape shape, std::uint64_t seed, double scale, double offset = 0) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    auto v = pseudo_random(n, seed, scale);
    for (auto& x : v) x += offset;
    return Tensor::from_values(DType::float32, std::move(shape), v);
}

/// The graph's parameters; `seed` picks the values (running variances stay positive).
ParameterMap parameters(std::uint64_t seed) {
    return {{"a.weight", values({8, 3, 3, 3}, seed, 0.4)},   {"a.bias", values({8}, seed + 1, 0.2)},
            {"bn.weight", values({8}, seed + 2, 0.5, 1.0)},  {"bn.bias", values({8}, seed + 3, 0.3)},
            {"bn.running_mean", values({8}, seed + 4, 0.3)}, {"bn.running_var", values({8}, seed + 5, 0.4, 0.6)},
            {"b.weight", values({8, 8, 1, 1}, seed + 6, 0.4)}, {"b.bias", values({8}, seed + 7, 0.2)},
            {"g.weight", values({8, 4, 3, 3}, seed + 8, 0.3)}, {"g.bias", values({8}, seed + 9, 0.2)}};
}

bool built(const Case& c) { return std::filesystem::exists(std::filesystem::path(CAPSULE_PLUGIN_DIR) / c.library); }

std::map<std::string, Tensor> graph_input() { return {{"x", values({2, 3, 12, 12}, 7, 1.0)}}; }

TEST_P(RefreshParameters, WrittenWeightsReachEveryKernelAndCompiledGroup) {
    const auto& c = GetParam();
    if (!built(c)) GTEST_SKIP() << c.library << " is not built";
    const Graph graph = parse_graph(kGraph);
    const auto input = graph_input();
    for (bool groups : {true, false}) {
        SCOPED_TRACE(groups ? "compiled groups" : "node by node");
        SessionOptions options;
        options.compile_groups = groups;
        const ParameterMap first = parameters(100), second = parameters(200);
        ParameterMap owned;  // the session's storage: copies, so `first` stays as it was
        for (const auto& [key, t] : first) owned[key] = Tensor::from_values(DType::float32, t.shape(), t.to_doubles());
        auto session = session_under(c.profile, graph, owned, options);
        const auto before = session.run(input);

        auto storage = session.parameters();
        for (const auto& [key, t] : second) std::memcpy(storage.at(key).data(), t.data(), t.nbytes());
        session.refresh_parameters();
        const auto got = session.run(input);
        const auto want = session_under(c.profile, graph, second, options).run(input);

        ASSERT_EQ(got.size(), 1u);
        EXPECT_TRUE(got[0].bitwise_equal(want[0])) << "the refreshed session differs from a fresh one";
        EXPECT_FALSE(got[0].bitwise_equal(before[0])) << "the new parameters changed nothing";
        std::int64_t finite = 0;
        for (std::int64_t e = 0; e < want[0].numel(); ++e) finite += std::isfinite(want[0].at(e));
        EXPECT_EQ(finite, want[0].numel());
        // Written back, the first values give the first output again.
        for (const auto& [key, t] : first) std::memcpy(storage.at(key).data(), t.data(), t.nbytes());
        session.refresh_parameters();
        EXPECT_TRUE(session.run(input)[0].bitwise_equal(before[0]));
    }
}

INSTANTIATE_TEST_SUITE_P(Profiles, RefreshParameters,
                         ::testing::Values(Case{"checked_cpu", "libcapsule_reference.so"},
                                           Case{"onednn_cpu", "libcapsule_onednn.so"},
                                           Case{"libtorch_forward_cpu", "libcapsule_libtorch.so"},
                                           Case{"libtorch_autograd_cpu", "libcapsule_libtorch_autograd.so"}),
                         [](const auto& p) { return std::string(p.param.profile); });

class RefreshedTape : public ::testing::TestWithParam<Case> {};

// A tape holds the values (and, under external autograd, the provider's records) of the
// parameters it was recorded with: backward refuses it after a refresh, and a tape recorded
// after the refresh differentiates as a fresh session's (to float32 rounding: LibTorch's
// backward kernels may sum in another order from run to run).
TEST_P(RefreshedTape, ATapeRecordedBeforeARefreshIsRefused) {
    const auto& c = GetParam();
    if (!built(c)) GTEST_SKIP() << c.library << " is not built";
    const Graph graph = parse_graph(kGraph);
    const auto input = graph_input();
    const Tensor upstream = values({2, 8, 6, 6}, 9, 1.0);
    ParameterMap owned = parameters(100);
    SessionOptions one_thread;
    one_thread.threads = 1;
    auto session = session_under(c.profile, graph, owned, one_thread);
    ASSERT_EQ(session.backward_refusal(), "");
    const auto old_tape = session.run_recording(input);
    const auto second = parameters(200);
    auto storage = session.parameters();
    for (const auto& [key, t] : second) std::memcpy(storage.at(key).data(), t.data(), t.nbytes());
    session.refresh_parameters();
    const auto why = capsule::testing::error_of([&] { session.backward(old_tape.tape, {upstream}); });
    EXPECT_NE(why.find("recorded before Session::refresh_parameters"), std::string::npos) << why;

    const auto got = session.backward(session.run_recording(input).tape, {upstream});
    const auto fresh = session_under(c.profile, graph, second, one_thread);
    const auto want = fresh.backward(fresh.run_recording(input).tape, {upstream});
    const auto stale = session_under(c.profile, graph, parameters(100), one_thread);
    const auto before = stale.backward(stale.run_recording(input).tape, {upstream});
    ASSERT_EQ(got.parameters.size(), want.parameters.size());
    for (const auto& [key, g] : want.parameters) {
        const auto a = got.parameters.at(key).to_doubles(), b = g.to_doubles(), old = before.parameters.at(key).to_doubles();
        ASSERT_EQ(a.size(), b.size()) << key;
        double worst = 0, moved = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
            moved = std::max(moved, std::abs(b[i] - old[i]));
        }
        EXPECT_LE(worst, 1e-5) << key << ": the refreshed session's gradient differs from a fresh session's";
        // A weight's gradient depends on the other parameters (the last bias's and the running
        // statistics' do not).
        if (key.find(".weight") != std::string::npos)
            EXPECT_GT(moved, 1e-3) << key << ": the new parameters did not change its gradient";
    }
}

INSTANTIATE_TEST_SUITE_P(Profiles, RefreshedTape,
                         ::testing::Values(Case{"checked_cpu", "libcapsule_reference.so"},
                                           Case{"libtorch_forward_cpu", "libcapsule_libtorch.so"},
                                           Case{"libtorch_autograd_cpu", "libcapsule_libtorch_autograd.so"}),
                         [](const auto& p) { return std::string(p.param.profile); });

}  // namespace
