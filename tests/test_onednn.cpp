// The oneDNN plugin (plugins/cpu/onednn) against independently computed values: the shared
// conformance cases (float32 forward cases of every op it implements), the reference capsules on
// the same pseudo-random inputs (many shapes and attributes per op), the shared ONNX models'
// PyTorch outputs under profile onednn_cpu, and its refusals (float64, unsupported attribute
// combinations, a forward call without prepared state). Skipped when the build has no oneDNN.
#include <gtest/gtest.h>

#include <atomic>

#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "capsule/attribute_views.hpp"
#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule/training.hpp"
#include "capsule/fashion_mnist.hpp"
#include "built_plugins.hpp"
#include "capsule_fixtures.hpp"
#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::conformance;
using namespace capsule::conformance::builders;
namespace fs = std::filesystem;
using capsule::testing::reference_plugin;

namespace {

/// Set once this process has loaded the oneDNN plugin, whose kernels start libgomp worker threads.
std::atomic<bool> g_onednn_loaded{false};

const capsule_plugin* onednn_plugin() {
#ifdef CAPSULE_HAVE_ONEDNN
    static const capsule_plugin* p = capsule::testing::open_built_plugin("libcapsule_onednn.so");
    g_onednn_loaded = p != nullptr;
    return p;
#else
    return nullptr;
#endif
}

#define REQUIRE_ONEDNN()                                                                        \
    if (!onednn_plugin()) GTEST_SKIP() << "the onednn plugin is not built (libdnnl-dev missing)"

std::set<BackendOp> onednn_ops() {
    std::set<BackendOp> ops;
    if (auto* p = onednn_plugin())
        for (std::size_t i = 0; i < p->num_kernels; ++i)
            ops.insert(parse<BackendOp>(std::string(p->kernels[i].capsule_name).substr(7)));
    return ops;
}

std::string capsule_name(BackendOp op) { return "onednn." + std::string(to_string(op)); }

/// Tolerance floors per op for the shared cases, whose expected values are exact (double): oneDNN
/// sums in float32 in its own order (matmul, linear, conv, pools, softmax, batch norm) and
/// approximates the transcendental functions (gelu's erf, tanh, logistic, exp/log in softmax)
/// with polynomials accurate to a few float32 ulps.
std::pair<double, double> tolerance_floor(BackendOp op) {
    switch (op) {
        case BackendOp::relu: case BackendOp::add: case BackendOp::sub: case BackendOp::mul:
        case BackendOp::max_pool2d: case BackendOp::max_pool2d_pad:
            return {1e-6, 1e-7};
        default: return {1e-5, 1e-5};
    }
}

}  // namespace

// ---- the shared conformance cases ------------------------------------------------------------

class OnednnConformance : public ::testing::TestWithParam<std::size_t> {};

const std::vector<KernelCase>& shared_cases() {
    static const std::vector<KernelCase> all = all_cases();
    return all;
}

TEST_P(OnednnConformance, MatchesExpected) {
    REQUIRE_ONEDNN();
    KernelCase c = shared_cases()[GetParam()];
    if (!onednn_ops().count(c.op)) GTEST_SKIP() << "no onednn capsule for " << to_string(c.op);
    // concat copies every dtype; the other oneDNN capsules compute float32 only.
    for (const auto& t : c.inputs)
        if (t.dtype == DType::float64 && c.op != BackendOp::concat)
            GTEST_SKIP() << c.name << ": float64 case; the oneDNN capsules are float32 only (see "
                            "OnednnRefusals.Float64IsUnsupported)";
    // Cases the oneDNN capsules refuse by design: each must fail with its documented reason.
    static const std::map<std::string, std::string> refused{};
    auto it = refused.find(c.name);
    if (it != refused.end()) {
        const std::string why = it->second;
        std::string error;
        run_forward_values(*onednn_plugin(), capsule_name(c.op), c, error);
        EXPECT_NE(error.find(why), std::string::npos) << c.name << ": expected the refusal '" << why
                                                      << "', got: " << error;
        return;
    }
    if (!c.expected_error.empty())
        GTEST_SKIP() << c.name << ": an error case of the reference kernel's own messages (shape "
                        "errors are the host's shape inference's; the oneDNN refusals are tested "
                        "in OnednnRefusals)";
    // int64 operands (add, sub, mul accept them elsewhere): refused, naming the dtype, as the
    // manifest's conformance declaration says.
    for (const auto& t : c.inputs)
        if (t.dtype == DType::int64 && c.op != BackendOp::concat) {
            std::string error;
            run_forward_values(*onednn_plugin(), capsule_name(c.op), c, error);
            EXPECT_NE(error.find("is int64; the oneDNN capsules compute float32 only"), std::string::npos)
                << c.name << ": " << error;
            return;
        }
    auto [rtol, atol] = tolerance_floor(c.op);
    c.rtol = std::max(c.rtol, rtol);
    c.atol = std::max(c.atol, atol);
    EXPECT_EQ(run_forward_case(*onednn_plugin(), capsule_name(c.op), c), "") << c.name;
}

/// The ops of plugins/cpu/onednn.capsule.json (OnednnPlugin.ImplementsEveryManifestCapsule...
/// checks that the list is the manifest's), so that the case list is the same whether the plugin
/// is built or not.
const std::set<BackendOp>& manifest_ops() {
    using B = BackendOp;
    static const std::set<BackendOp> ops{
        B::linear, B::matmul, B::conv2d, B::max_pool2d, B::max_pool2d_pad, B::avg_pool2d,
        B::avg_pool2d_pad, B::relu, B::gelu, B::sigmoid, B::tanh, B::softmax, B::log_softmax,
        B::add, B::sub, B::mul, B::batch_norm, B::clamp, B::concat, B::reduce_mean,
        B::abs, B::sqrt, B::leaky_relu, B::hardswish, B::bmm, B::layer_norm,
        B::conv_transpose2d};
    return ops;
}

INSTANTIATE_TEST_SUITE_P(
    Shared, OnednnConformance,
    ::testing::ValuesIn([] {
        std::vector<std::size_t> out;
        for (std::size_t i = 0; i < shared_cases().size(); ++i)
            if (manifest_ops().count(shared_cases()[i].op)) out.push_back(i);
        return out;
    }()),
    [](const ::testing::TestParamInfo<std::size_t>& case_info) {
        std::string name = shared_cases()[case_info.param].name;
        for (auto& ch : name)
            if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
        return name;
    });

TEST(OnednnPlugin, ImplementsEveryManifestCapsuleWithPreparedForwardAndBackwardKernels) {
    REQUIRE_ONEDNN();
    std::ifstream f(fs::path(CAPSULE_SOURCE_DIR) / "plugins/cpu/onednn.capsule.json");
    const auto manifest = nlohmann::json::parse(f);
    const auto& p = *onednn_plugin();
    ASSERT_EQ(p.num_kernels, manifest["capsules"].size());
    std::set<BackendOp> declared;
    for (const auto& k : manifest["capsules"]) declared.insert(parse<BackendOp>(k["op"].get<std::string>()));
    EXPECT_EQ(declared, manifest_ops());
    for (std::size_t i = 0; i < p.num_kernels; ++i) {
        const auto& k = p.kernels[i];
        EXPECT_EQ(manifest["capsules"][i]["name"], k.capsule_name);
        EXPECT_EQ(manifest["capsules"][i]["vjp"], "torchlean-tape") << k.capsule_name;
        EXPECT_NE(k.prepare, nullptr) << k.capsule_name;
        EXPECT_NE(k.release, nullptr) << k.capsule_name;
        EXPECT_NE(k.backward, nullptr) << k.capsule_name << ": training runs on the oneDNN capsules (torchlean-tape)";
    }
}

// ---- against the reference capsules on pseudo-random inputs ----------------------------------

namespace {

constexpr std::uint64_t kSalt = 0x0DDE;

CaseTensor rnd(Shape s, std::uint64_t seed) { return random(DType::float32, std::move(s), seed, kSalt); }

struct Compare {
    std::string name;
    BackendOp op;
    std::vector<CaseTensor> inputs;
    std::vector<CaseTensor> params;
    Attributes attrs;
};

std::vector<Compare> comparisons() {
    using B = BackendOp;
    std::vector<Compare> out;
    std::uint64_t seed = 1;
    auto add = [&](std::string name, B op, std::vector<Shape> ins, std::vector<Shape> params,
                   Attributes attrs = {}) {
        Compare c{std::move(name), op, {}, {}, std::move(attrs)};
        for (auto& s : ins) c.inputs.push_back(rnd(s, seed++));
        for (auto& s : params) c.params.push_back(rnd(s, seed++));
        out.push_back(std::move(c));
    };
    // linear: weight [out, in], optional bias.
    add("linear/2d_bias", B::linear, {{3, 5}}, {{4, 5}, {4}}, {{"out_features", std::int64_t(4)}});
    add("linear/3d_no_bias", B::linear, {{2, 3, 7}}, {{6, 7}}, {{"out_features", std::int64_t(6)}, {"bias", false}});
    add("linear/batch1_wide", B::linear, {{1, 300}}, {{70, 300}, {70}}, {{"out_features", std::int64_t(70)}});
    add("linear/batch64", B::linear, {{64, 33}}, {{17, 33}, {17}}, {{"out_features", std::int64_t(17)}});
    add("linear/1d_input", B::linear, {{9}}, {{5, 9}, {5}}, {{"out_features", std::int64_t(5)}});
    // matmul: 2-D, batched, broadcast batch dims, 1-D operands.
    add("matmul/2d", B::matmul, {{4, 5}, {5, 3}}, {});
    add("bmm/3d", B::bmm, {{3, 4, 5}, {3, 5, 6}}, {});
    // conv_transpose2d: weight [C_in, C_out/groups, kh, kw]; stride, padding, output_padding
    // (also beyond the padding, with dilation), groups.
    using I = Ints;
    add("conv_transpose2d/stride2", B::conv_transpose2d, {{2, 4, 5, 5}}, {{4, 3, 3, 3}, {3}},
        {{"out_channels", std::int64_t(3)}, {"kernel_size", I{3, 3}}, {"stride", I{2, 2}}, {"padding", I{1, 1}}});
    add("conv_transpose2d/output_padding", B::conv_transpose2d, {{1, 3, 4, 6}}, {{3, 2, 3, 2}},
        {{"out_channels", std::int64_t(2)}, {"kernel_size", I{3, 2}}, {"stride", I{2, 3}}, {"padding", I{1, 0}},
         {"output_padding", I{1, 2}}, {"bias", false}});
    add("conv_transpose2d/dilated_output_padding", B::conv_transpose2d, {{1, 2, 5, 5}}, {{2, 3, 3, 3}, {3}},
        {{"out_channels", std::int64_t(3)}, {"kernel_size", I{3, 3}}, {"dilation", I{3, 3}}, {"output_padding", I{2, 1}}});
    add("conv_transpose2d/groups", B::conv_transpose2d, {{2, 4, 3, 3}}, {{4, 3, 2, 2}, {6}},
        {{"out_channels", std::int64_t(6)}, {"kernel_size", I{2, 2}}, {"stride", I{2, 2}}, {"groups", std::int64_t(2)}});
    add("conv_transpose2d/no_input_channels", B::conv_transpose2d, {{2, 0, 4, 4}}, {{0, 3, 3, 3}, {3}},
        {{"out_channels", std::int64_t(3)}, {"kernel_size", I{3, 3}}, {"stride", I{2, 2}}});
    add("layer_norm/empty_rows", B::layer_norm, {{4, 0}}, {}, {{"normalized_shape", Ints{0}}, {"elementwise_affine", false}});
    add("conv_transpose2d/one_pixel", B::conv_transpose2d, {{3, 5, 1, 1}}, {{5, 4, 3, 3}, {4}},
        {{"out_channels", std::int64_t(4)}, {"kernel_size", I{3, 3}}, {"stride", I{3, 3}}, {"padding", I{1, 1}},
         {"output_padding", I{2, 0}}});
    add("layer_norm/last", B::layer_norm, {{4, 6, 32}}, {{32}, {32}}, {{"normalized_shape", Ints{32}}});
    add("layer_norm/two_dims_no_bias", B::layer_norm, {{3, 5, 7}}, {{5, 7}},
        {{"normalized_shape", Ints{5, 7}}, {"bias", false}, {"eps", 1e-3}});
    add("layer_norm/no_affine", B::layer_norm, {{2, 9}}, {}, {{"normalized_shape", Ints{9}}, {"elementwise_affine", false}});
    add("bmm/batch1_wide", B::bmm, {{1, 2, 70}, {1, 70, 33}}, {});
    add("matmul/batched_times_2d", B::matmul, {{2, 3, 4, 5}, {5, 6}}, {});
    add("matmul/broadcast_batch", B::matmul, {{2, 1, 4, 5}, {3, 5, 2}}, {});
    add("matmul/vector_times_batched", B::matmul, {{5}, {2, 5, 3}}, {});
    add("matmul/matrix_times_vector", B::matmul, {{3, 4}, {4}}, {});
    add("matmul/dot", B::matmul, {{7}, {7}}, {});
    add("matmul/large", B::matmul, {{33, 65}, {65, 47}}, {});
    // conv2d: stride, padding, dilation, groups, depthwise, non-square, no bias, 1x1.
    auto conv = [&](std::string name, Shape x, std::int64_t o, Ints k, Ints s, Ints p, Ints d,
                    std::int64_t g, bool bias) {
        Attributes a{{"out_channels", o}, {"kernel_size", k}, {"stride", s}, {"padding", p},
                     {"dilation", d}, {"groups", g}, {"bias", bias}};
        std::vector<Shape> params{{o, x[1] / g, k[0], k[1]}};
        if (bias) params.push_back({o});
        add("conv2d/" + name, B::conv2d, {x}, params, a);
    };
    conv("3x3_pad1", {2, 3, 8, 8}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true);
    conv("stride2_no_pad", {1, 4, 9, 9}, 5, {3, 3}, {2, 2}, {0, 0}, {1, 1}, 1, true);
    conv("dilation2_pad2", {2, 3, 10, 10}, 4, {3, 3}, {1, 1}, {2, 2}, {2, 2}, 1, true);
    conv("groups2", {2, 4, 7, 7}, 6, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true);
    conv("depthwise_stride2", {2, 6, 9, 9}, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 6, true);
    conv("depthwise_multiplier2", {1, 4, 8, 8}, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 4, false);
    conv("non_square", {1, 3, 9, 7}, 4, {3, 1}, {2, 1}, {1, 0}, {1, 1}, 1, true);
    conv("no_bias_1x1", {2, 16, 5, 5}, 8, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false);
    conv("wide_channels", {1, 32, 14, 14}, 64, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true);
    conv("stride_dilation_pad_mix", {1, 8, 13, 11}, 16, {3, 5}, {2, 3}, {2, 1}, {2, 1}, 2, true);
    conv("first_layer_7x7", {1, 3, 32, 32}, 16, {7, 7}, {2, 2}, {3, 3}, {1, 1}, 1, false);
    // pools: windows, strides, padding, ceil_mode, count_include_pad.
    auto pool = [&](std::string name, B op, Shape x, Attributes a) { add(name, op, {x}, {}, a); };
    pool("max_pool2d/k2", B::max_pool2d, {2, 3, 8, 8}, {{"kernel_size", Ints{2, 2}}});
    pool("max_pool2d/k3_s2", B::max_pool2d, {1, 4, 9, 10}, {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}});
    pool("max_pool2d_pad/k3_s2_p1", B::max_pool2d_pad, {2, 3, 8, 8},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", std::int64_t(1)}});
    pool("max_pool2d_pad/ceil_no_pad", B::max_pool2d_pad, {1, 2, 13, 13},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"ceil_mode", true}});
    pool("max_pool2d_pad/ceil_pad1", B::max_pool2d_pad, {1, 2, 10, 9},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", std::int64_t(1)}, {"ceil_mode", true}});
    pool("avg_pool2d/k2", B::avg_pool2d, {2, 3, 8, 8}, {{"kernel_size", std::int64_t(2)}});
    pool("avg_pool2d/k3_s2", B::avg_pool2d, {1, 3, 9, 11}, {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}});
    pool("avg_pool2d_pad/include_pad", B::avg_pool2d_pad, {1, 3, 8, 8},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", std::int64_t(1)}});
    pool("avg_pool2d_pad/exclude_pad_ceil", B::avg_pool2d_pad, {1, 3, 10, 9},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", std::int64_t(1)},
          {"ceil_mode", true}, {"count_include_pad", false}});
    pool("avg_pool2d_pad/ceil_no_pad", B::avg_pool2d_pad, {1, 2, 13, 13},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"ceil_mode", true}});
    pool("avg_pool2d_pad/exclude_pad_h_only_ceil", B::avg_pool2d_pad, {1, 2, 6, 6},
         {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", Ints{1, 0}},
          {"ceil_mode", true}, {"count_include_pad", false}});
    pool("avg_pool2d/global_7x7", B::avg_pool2d, {2, 8, 7, 7}, {{"kernel_size", std::int64_t(7)}});
    // eltwise and softmax.
    add("relu/3d", B::relu, {{2, 3, 4}}, {});
    add("gelu/none", B::gelu, {{2, 3, 5}}, {});
    add("gelu/tanh", B::gelu, {{2, 3, 5}}, {}, {{"approximate", std::string("tanh")}});
    add("sigmoid/3d", B::sigmoid, {{4, 5, 6}}, {});
    add("abs/3d", B::abs, {{4, 5, 6}}, {});
    add("sqrt/3d", B::sqrt, {{4, 5, 6}}, {});
    add("leaky_relu/default", B::leaky_relu, {{4, 5, 6}}, {});
    add("leaky_relu/slope", B::leaky_relu, {{7, 9}}, {}, {{"negative_slope", 0.3}});

    add("tanh/3d", B::tanh, {{4, 5, 6}}, {});
    add("softmax/last", B::softmax, {{3, 4, 5}}, {});
    add("softmax/axis1", B::softmax, {{3, 4, 5}}, {}, {{"axis", std::int64_t(1)}});
    add("softmax/axis0", B::softmax, {{3, 4, 5}}, {}, {{"axis", std::int64_t(0)}});
    add("log_softmax/last", B::log_softmax, {{3, 40}}, {});
    add("log_softmax/axis_minus2", B::log_softmax, {{3, 4, 5}}, {}, {{"axis", std::int64_t(-2)}});
    // binary with broadcasting (second operand, first operand exchanged, rank 0).
    add("add/same_shape", B::add, {{2, 3, 4}, {2, 3, 4}}, {});
    add("add/row", B::add, {{2, 3, 4}, {4}}, {});
    add("add/first_broadcasts", B::add, {{3, 1}, {2, 3, 4}}, {});
    add("sub/row", B::sub, {{2, 3, 4}, {3, 1}}, {});
    add("sub/first_broadcasts", B::sub, {{4}, {2, 3, 4}}, {});
    add("mul/channel", B::mul, {{2, 3, 4, 4}, {1, 3, 1, 1}}, {});
    add("mul/scalar", B::mul, {{}, {5}}, {});
    add("mul/scalars", B::mul, {{}, {}}, {});
    add("add/both_broadcast", B::add, {{3, 1}, {1, 4}}, {});
    add("sub/both_broadcast_rank3", B::sub, {{2, 1, 5}, {3, 1}}, {});
    add("mul/both_broadcast_rank4", B::mul, {{1, 3, 1, 4}, {2, 1, 5, 1}}, {});
    // reduce_mean: global average pooling (ONNX GlobalAveragePool), one axis, every axis, rank 1.
    add("reduce_mean/spatial_keepdims", B::reduce_mean, {{2, 8, 7, 7}}, {}, {{"axes", Ints{2, 3}}, {"keepdims", true}});
    add("reduce_mean/last_axis", B::reduce_mean, {{3, 4, 50}}, {}, {{"axes", Ints{-1}}});
    add("reduce_mean/middle_axis_keepdims", B::reduce_mean, {{3, 5, 4}}, {}, {{"axes", Ints{1}}, {"keepdims", true}});
    add("reduce_mean/outer_axes", B::reduce_mean, {{4, 3, 6, 2}}, {}, {{"axes", Ints{0, 2}}});
    add("reduce_mean/every_axis", B::reduce_mean, {{6, 7, 9}}, {});
    add("reduce_mean/rank1", B::reduce_mean, {{1000}}, {}, {{"axes", Ints{0}}});
    add("reduce_mean/size1_axis", B::reduce_mean, {{3, 1, 4}}, {}, {{"axes", Ints{1}}});
    // batch_norm with the running statistics, and with the batch's (training; rank 2 to 5).
    add("batch_norm/affine_4d", B::batch_norm, {{2, 3, 4, 4}}, {{3}, {3}, {3}, {3}});
    add("batch_norm/plain_2d", B::batch_norm, {{5, 3}}, {{3}, {3}}, {{"affine", false}, {"eps", 1e-3}});
    add("batch_norm/training_4d", B::batch_norm, {{4, 3, 5, 5}}, {{3}, {3}, {3}, {3}}, {{"training", true}});
    add("batch_norm/training_2d", B::batch_norm, {{6, 4}}, {{4}, {4}}, {{"training", true}, {"affine", false}});
    add("batch_norm/training_5d_one_image", B::batch_norm, {{1, 2, 3, 2, 2}}, {{2}, {2}, {2}, {2}},
        {{"training", true}, {"eps", 1e-3}});
    add("batch_norm/rank6", B::batch_norm, {{2, 3, 2, 2, 2, 3}}, {{3}, {3}, {3}, {3}});
    add("batch_norm/training_rank6", B::batch_norm, {{2, 3, 2, 1, 2, 3}}, {{3}, {3}}, {{"training", true}, {"affine", false}});
    // Variances must be positive: make the last parameter |v| + 0.5; so must sqrt's
    // inputs (their NaN below 0 is an edge case). hardswish's kinks at ±3 want a wider range.
    for (auto& c : out) {
        if (c.op == B::batch_norm)
            for (auto& v : c.params.back().values) v = std::fabs(v) + 0.5;
        if (c.op == B::sqrt)
            for (auto& v : c.inputs[0].values) v = std::fabs(v) + 0.1;
    }
    add("hardswish/wide", B::hardswish, {{6, 50}}, {});
    for (auto& v : out.back().inputs[0].values) v *= 5.0;
    return out;
}

/// Comparison `index` as a conformance case.
KernelCase comparison_case(std::size_t index) {
    const auto cmp = comparisons()[index];
    KernelCase c;
    c.name = cmp.name;
    c.op = cmp.op;
    c.inputs = cmp.inputs;
    c.params = cmp.params;
    c.attrs = cmp.attrs;
    return c;
}

/// A comparison's name as a test name (alphanumerics and underscores).
std::string comparison_name(const ::testing::TestParamInfo<std::size_t>& info) {
    std::string name = comparisons()[info.param].name;
    for (auto& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name;
}

}  // namespace

class OnednnVersusReference : public ::testing::TestWithParam<std::size_t> {};

TEST_P(OnednnVersusReference, WithinOneInTenThousand) {
    REQUIRE_ONEDNN();
    const KernelCase c = comparison_case(GetParam());
    std::string error;
    auto want = run_forward_values(reference_plugin(), "reference." + std::string(to_string(c.op)), c, error);
    ASSERT_EQ(error, "") << "reference kernel failed";
    auto got = run_forward_values(*onednn_plugin(), capsule_name(c.op), c, error);
    ASSERT_EQ(error, "") << "onednn kernel failed";
    ASSERT_EQ(got.size(), want.size());
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::fabs(got[i] - want[i]), 1e-4 * std::fabs(want[i]) + 1e-6 * std::max(scale, 1.0))
            << c.name << " element " << i << ": onednn " << got[i] << ", reference " << want[i];
}

INSTANTIATE_TEST_SUITE_P(Shapes, OnednnVersusReference, ::testing::Range<std::size_t>(0, comparisons().size()),
                         comparison_name);

// The backward kernels on the same shapes and attributes: every gradient (inputs and parameters)
// of a oneDNN capsule, computed in float32, equals the reference capsule's, computed in float64
// on the same values with the same upstream gradient (run_gradient_values), within float32
// rounding (1e-4 of the gradient's largest magnitude).
class OnednnGradientVersusReference : public ::testing::TestWithParam<std::size_t> {};

TEST_P(OnednnGradientVersusReference, WithinOneInTenThousand) {
    REQUIRE_ONEDNN();
    KernelCase c = comparison_case(GetParam());
    c.check_gradient = true;
    std::string error;
    const auto want = run_gradient_values(reference_plugin(), "reference." + std::string(to_string(c.op)), c, error);
    ASSERT_EQ(error, "") << "reference backward failed";
    const auto got = run_gradient_values(*onednn_plugin(), capsule_name(c.op), c, error);
    ASSERT_EQ(error, "") << "onednn backward failed";
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t t = 0; t < want.size(); ++t) {
        ASSERT_EQ(got[t].size(), want[t].size()) << c.name << " gradient " << t;
        double scale = 0;
        for (double w : want[t]) scale = std::max(scale, std::fabs(w));
        for (std::size_t i = 0; i < want[t].size(); ++i)
            ASSERT_LE(std::fabs(got[t][i] - want[t][i]), 1e-4 * std::max(scale, 1e-3))
                << c.name << " gradient " << t << " element " << i << ": onednn " << got[t][i] << ", reference "
                << want[t][i];
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, OnednnGradientVersusReference,
                         ::testing::Range<std::size_t>(0, comparisons().size()), comparison_name);

// torch.mean sums float32 in double on CPU: where float32 partial sums could overflow, or an
// input is not finite, onednn.reduce_mean sums in double too (reduction.cpp) and matches the
// reference capsule, IEEE cases included (inf + -inf = NaN, NaN stays, a lone inf stays).
TEST(OnednnPlugin, ReduceMeanOfHugeAndNonFiniteValuesMatchesTheReference) {
    REQUIRE_ONEDNN();
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    KernelCase c;
    c.name = "reduce_mean/huge_and_non_finite";
    c.op = BackendOp::reduce_mean;
    // Rows: partial sums beyond FLT_MAX with a finite mean; +inf; +inf and -inf; NaN; -3e38s.
    c.inputs = {f32({5, 4}, {3e38, 3e38, -1e38, 2.0, 1.0, inf, 2.0, 3.0, inf, -inf, 1.0, 1.0,
                             nan, 1.0, 2.0, 3.0, -3e38, -3e38, -3e38, -3e38})};
    c.attrs = {{"axes", Ints{1}}};
    std::string error;
    const auto want = run_forward_values(reference_plugin(), "reference.reduce_mean", c, error);
    ASSERT_EQ(error, "");
    const auto got = run_forward_values(*onednn_plugin(), "onednn.reduce_mean", c, error);
    ASSERT_EQ(error, "");
    ASSERT_EQ(got.size(), 5u);
    EXPECT_NEAR(want[0], 1.25e38, 1e32);  // (3e38 + 3e38 - 1e38 + 2) / 4
    EXPECT_NEAR(got[0], want[0], 1e32);
    EXPECT_EQ(got[1], inf);
    EXPECT_TRUE(std::isnan(got[2]));
    EXPECT_TRUE(std::isnan(got[3]));
    EXPECT_NEAR(got[4], -3e38, 1e32);
    for (std::size_t i = 1; i < 5; ++i)
        EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) << "row " << i;
}

// Average pooling: with count_include_pad, PyTorch divides a ceil_mode window that runs past the
// explicit padding by its part within the padded input (oneDNN by the whole kernel), and a window
// of large finite values has a finite mean although its float32 sum overflows (the reference
// capsule sums in double). onednn.avg_pool2d_pad recomputes those outputs as the reference does.
TEST(OnednnPlugin, AveragePoolWindowsPastThePaddingAndOverflowingSumsMatchTheReference) {
    REQUIRE_ONEDNN();
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    auto expect_like_reference = [](const KernelCase& c) {
        std::string error;
        const auto want = run_forward_values(reference_plugin(), "reference." + std::string(to_string(c.op)), c, error);
        ASSERT_EQ(error, "") << c.name;
        const auto got = run_forward_values(*onednn_plugin(), capsule_name(c.op), c, error);
        ASSERT_EQ(error, "") << c.name;
        ASSERT_EQ(got.size(), want.size()) << c.name;
        for (std::size_t i = 0; i < want.size(); ++i) {
            if (std::isnan(want[i]) || std::isinf(want[i])) {
                EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
                    << c.name << " element " << i << ": onednn " << got[i] << ", reference " << want[i];
                continue;
            }
            EXPECT_LE(std::fabs(got[i] - want[i]), 1e-6 * std::fabs(want[i]) + 1e-7)
                << c.name << " element " << i << ": onednn " << got[i] << ", reference " << want[i];
        }
    };
    KernelCase both;  // 6x6, kernel 3, stride 2, padding 1, ceil: the last row and column run past
    both.name = "ceil_include_pad";
    both.op = BackendOp::avg_pool2d_pad;
    both.inputs = {rnd({2, 3, 6, 6}, 3)};
    both.attrs = {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", std::int64_t(1)},
                  {"ceil_mode", true}};
    expect_like_reference(both);
    KernelCase one_axis = both;  // padding on H only: W's last window runs past its (zero) padding
    one_axis.name = "ceil_include_pad_one_axis";
    one_axis.inputs = {rnd({1, 2, 5, 6}, 9)};
    one_axis.attrs["padding"] = Ints{1, 0};
    expect_like_reference(one_axis);
    // PyTorch's divisor there (hand values): input 1..16 as 4x4, kernel 3, stride 2, padding 1,
    // ceil_mode -> 3x3 output; the window of output (2, 2) covers rows and columns 3..5 of the
    // padded input, 3..4 of it inside the padded bounds [0, 5]: divisor (5 - 3) * (5 - 3) = 4, taps
    // x[3][3] = 16 only, so 16 / 4 = 4 (oneDNN's whole-kernel divisor would give 16 / 9).
    KernelCase hand;
    hand.name = "ceil_include_pad_hand";
    hand.op = BackendOp::avg_pool2d_pad;
    std::vector<double> ramp16(16);
    for (std::size_t i = 0; i < 16; ++i) ramp16[i] = double(i + 1);
    hand.inputs = {f32({1, 1, 4, 4}, ramp16)};
    hand.attrs = both.attrs;
    std::string error;
    const auto y = run_forward_values(*onednn_plugin(), "onednn.avg_pool2d_pad", hand, error);
    ASSERT_EQ(error, "");
    ASSERT_EQ(y.size(), 9u);
    EXPECT_FLOAT_EQ(y[8], 4.0f);
    EXPECT_FLOAT_EQ(y[0], (1.0 + 2 + 5 + 6) / 9);  // a window inside the padding: divided by 9
    // Windows of 3e38 (sum beyond FLT_MAX, mean 3e38), with an inf, with inf and -inf, with NaN.
    for (const bool padded : {false, true}) {
        KernelCase big;
        big.name = padded ? "huge_pad" : "huge";
        big.op = padded ? BackendOp::avg_pool2d_pad : BackendOp::avg_pool2d;
        big.inputs = {f32({1, 1, 4, 4}, {3e38, 3e38, 1, 2, 3e38, 3e38, 3, 4, inf, 1, -3e38, -3e38, -inf, nan, -3e38, -3e38})};
        big.attrs = {{"kernel_size", std::int64_t(2)}, {"stride", std::int64_t(2)}};
        if (padded) big.attrs["padding"] = std::int64_t(0);
        expect_like_reference(big);
        const auto out = run_forward_values(*onednn_plugin(), capsule_name(big.op), big, error);
        ASSERT_EQ(error, "");
        ASSERT_EQ(out.size(), 4u);
        EXPECT_NEAR(out[0], 3e38, 1e32);
        EXPECT_NEAR(out[3], -3e38, 1e32);
        EXPECT_TRUE(std::isnan(out[2])) << "a window of inf, -inf and NaN";
    }
}

// batch_norm forms var + eps and 1 / sqrt(var + eps) in double, as the reference capsule: a
// running variance of -1e-5 with eps 1e-5 is a tiny positive number there (float32 rounding of
// -1e-5 differs from the double 1e-5), not 0 (an infinite scale); eps 1e-45 with a zero variance
// is not a float32 denormal.
TEST(OnednnPlugin, BatchNormStatisticsInDoubleMatchTheReference) {
    REQUIRE_ONEDNN();
    for (const double eps : {1e-5, 1e-45}) {
        KernelCase c;
        c.name = "batch_norm/eps_" + std::to_string(eps);
        c.op = BackendOp::batch_norm;
        c.inputs = {rnd({2, 3, 2, 2}, 11)};
        c.params = {rnd({3}, 12), rnd({3}, 13), rnd({3}, 14), f32({3}, {0.5, eps == 1e-5 ? -1e-5 : 0.0, 0.0})};
        c.attrs = {{"eps", eps}};
        std::string error;
        const auto want = run_forward_values(reference_plugin(), "reference.batch_norm", c, error);
        ASSERT_EQ(error, "");
        const auto got = run_forward_values(*onednn_plugin(), "onednn.batch_norm", c, error);
        ASSERT_EQ(error, "");
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(std::isfinite(want[i])) << c.name << " element " << i;
            EXPECT_LE(std::fabs(got[i] - want[i]), 1e-5 * std::fabs(want[i]) + 1e-6)
                << c.name << " element " << i << ": onednn " << got[i] << ", reference " << want[i];
        }
    }
}

// ---- refusals ------------------------------------------------------------------------------

namespace {
std::string onednn_error(KernelCase c) {
    std::string error;
    run_forward_values(*onednn_plugin(), capsule_name(c.op), c, error);
    return error;
}
}  // namespace

TEST(OnednnRefusals, Float64IsUnsupported) {
    REQUIRE_ONEDNN();
    KernelCase c;
    c.op = BackendOp::relu;
    c.inputs = {f64({2}, {1, -1})};
    const auto err = onednn_error(c);
    EXPECT_NE(err.find("prepare failed (code 2)"), std::string::npos) << err;  // UNSUPPORTED
    EXPECT_NE(err.find("onednn.relu: input x is float64; the oneDNN capsules compute float32 only"),
              std::string::npos) << err;
}

TEST(OnednnRefusals, TheirDtypesKeepFloat64AndInt64NodesOnOtherCapsules) {
    REQUIRE_ONEDNN();
    // The oneDNN capsules declare float32 (concat every ABI 1.0 dtype): under prefer:onednn the
    // planner puts a float64 or int64 node on the reference capsule instead of one that refuses it.
    auto plan_of = [](const std::string& dtype) {
        const Graph g = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [{"id": 0, "op": "input", "name": "x", "shape": [2, 3], "dtype": ")" +
                                    dtype + R"("}, {"id": 1, "op": "add", "parents": [0, 0], "shape": [2, 3], "dtype": ")" +
                                    dtype + R"("}, {"id": 2, "op": "concat", "parents": [1, 0], "attrs": {"axis": 0}, "shape": [4, 3], "dtype": ")" +
                                    dtype + R"("}], "outputs": [2]})");
        auto accepted = find_builtin_profile("onednn_cpu").accept_graph(capsule::testing::built_host(), g);
        EXPECT_TRUE(accepted.accepted.has_value());
        std::vector<std::string> names;
        for (const auto& group : accepted.accepted->plan().groups)
            for (std::size_t i = 0; i < group.node_ids.size(); ++i) names.push_back(group.capsule->name);
        return names;
    };
    EXPECT_EQ(plan_of("float32"), (std::vector<std::string>{"onednn.add", "onednn.concat"}));
    EXPECT_EQ(plan_of("float64"), (std::vector<std::string>{"reference.add", "onednn.concat"}));
    EXPECT_EQ(plan_of("int64"), (std::vector<std::string>{"reference.add", "onednn.concat"}));
    // A dtype of ABI 1.1 that no oneDNN capsule declares: both nodes on reference.
    EXPECT_EQ(plan_of("int32"), (std::vector<std::string>{"reference.add", "reference.concat"}));
}

// Batch statistics of a single value per channel are refused, as PyTorch and the reference
// capsule refuse them, in the forward and the backward.
TEST(OnednnRefusals, TrainingBatchNormOfOneValuePerChannelIsRefused) {
    REQUIRE_ONEDNN();
    KernelCase c;
    c.op = BackendOp::batch_norm;
    c.inputs = {rnd({1, 3, 1, 1}, 4)};
    c.params = {rnd({3}, 5), rnd({3}, 6), rnd({3}, 7), rnd({3}, 8)};
    c.attrs = {{"training", true}};
    EXPECT_NE(onednn_error(c).find("training needs more than 1 value per channel"), std::string::npos)
        << onednn_error(c);
    c.check_gradient = true;
    std::string error;
    run_gradient_values(*onednn_plugin(), "onednn.batch_norm", c, error);
    EXPECT_NE(error.find("more than 1 value per channel"), std::string::npos) << error;
}

TEST(OnednnRefusals, ForwardWithoutPreparedStateIsRefused) {
    REQUIRE_ONEDNN();
    const auto& p = *onednn_plugin();
    float x[2] = {1, -1}, y[2] = {0, 0};
    const std::int64_t shape[1] = {2}, strides[1] = {1};
    capsule_tensor_view in{sizeof(capsule_tensor_view), CAPSULE_DTYPE_FLOAT32, CAPSULE_DEVICE_CPU, 1, shape, strides, x};
    capsule_tensor_view out = in;
    out.data = y;
    capsule_forward_args a{};
    a.struct_size = sizeof a;
    a.inputs = &in;
    a.num_inputs = 1;
    a.outputs = &out;
    a.num_outputs = 1;
    capsule_status st{};
    st.struct_size = sizeof st;
    const capsule_kernel* relu = find_kernel(p, "onednn.relu");
    ASSERT_NE(relu, nullptr);
    EXPECT_NE(relu->forward(&a, &st), CAPSULE_OK);
    EXPECT_NE(std::string(st.message).find("onednn.relu: called without its prepared state"), std::string::npos)
        << st.message;
}

// ---- the shared ONNX models under onednn_cpu ---------------------------------------------------

class OnednnModels : public ::testing::TestWithParam<std::string> {};

namespace {

/// One of tests/data/models: the imported ONNX model, its recorded input and PyTorch output.
struct SharedModel {
    explicit SharedModel(const std::string& name)
        : dir(fs::path(CAPSULE_SOURCE_DIR) / "tests" / "data" / "models" / name),
          model(import_onnx(dir / "model.onnx")),
          input(read_npy(dir / "input.npy")),
          expected(read_npy(dir / "output.npy")) {
        std::ifstream meta_file(dir / "meta.json");
        if (!meta_file) throw std::runtime_error("no meta.json in " + dir.string());
        input_name = nlohmann::json::parse(meta_file)["input"]["name"].get<std::string>();
    }

    /// The model's one output under `profile_name`; `described` collects its compiled groups'
    /// descriptions, one per line.
    Tensor run(const char* profile_name, std::string* described = nullptr) const {
        const auto& profile = find_builtin_profile(profile_name);
        auto accepted = profile.accept_graph(capsule::testing::built_host(), model.graph);
        if (!accepted.accepted) throw std::runtime_error(std::string(profile_name) + " rejected the model");
        ParameterMap params = model.parameters;
        auto inputs = bind_onnx_inputs(model, {{input_name, input}}, params);
        auto session = Session::create(profile, *accepted.accepted, model.graph, capsule::testing::built_host(), params);
        if (described)
            for (const auto& g : session.compiled_groups()) *described += g.fused + "\n";
        auto out = session.run(inputs);
        if (out.size() != 1) throw std::runtime_error("the model must have one output");
        return out[0];
    }

    fs::path dir;
    ImportedModel model;
    Tensor input, expected;
    std::string input_name;
};

/// max |got - want| and max |want|.
std::pair<double, double> max_difference_and_scale(const Tensor& got, const Tensor& want) {
    double max_abs = 0, scale = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) {
        max_abs = std::max(max_abs, std::fabs(got.at(i) - want.at(i)));
        scale = std::max(scale, std::fabs(want.at(i)));
    }
    return {max_abs, scale};
}

}  // namespace

TEST_P(OnednnModels, MatchPyTorchOutputsUnderOnednnCpu) {
    REQUIRE_ONEDNN();
    const SharedModel shared(GetParam());
    // The plan must actually use oneDNN (conv2d at least) and keep the rest on reference.
    auto accepted = find_builtin_profile("onednn_cpu").accept_graph(capsule::testing::built_host(), shared.model.graph);
    ASSERT_TRUE(accepted.accepted.has_value());
    std::size_t onednn_nodes = 0, other_nodes = 0;
    for (const auto& g : accepted.accepted->plan().groups)
        (g.capsule->provider == Provider::onednn ? onednn_nodes : other_nodes) += g.node_ids.size();
    std::cout << GetParam() << ": " << onednn_nodes << " nodes on onednn, " << other_nodes
              << " on other providers\n";
    EXPECT_GT(onednn_nodes, 0u);
    const Tensor out = shared.run("onednn_cpu");
    ASSERT_EQ(out.shape(), shared.expected.shape());
    const auto [max_abs, scale] = max_difference_and_scale(out, shared.expected);
    std::cout << GetParam() << " under onednn_cpu: max abs error " << max_abs << ", max |expected| "
              << scale << ", ratio " << max_abs / scale << "\n";
    EXPECT_LE(max_abs, 1e-4 * scale) << "error relative to the output scale";
}

// fpmath bf16 (profile onednn_cpu_bf16): convolutions and inner products take bfloat16 input and
// weights (8-bit significand, relative rounding up to 2^-9) with float32 accumulation, where the
// CPU computes bfloat16 natively. The value claims state 2e-2 of the output scale against
// float32 and the same top-1 class; on a CPU without native bfloat16 the float32 kernels run
// and the outputs equal onednn_cpu's.
TEST_P(OnednnModels, StayWithinTheBf16ToleranceUnderOnednnCpuBf16) {
    REQUIRE_ONEDNN();
    const SharedModel shared(GetParam());
    std::string strict_groups, bf16_groups;
    const Tensor want = shared.run("onednn_cpu", &strict_groups);
    const Tensor got = shared.run("onednn_cpu_bf16", &bf16_groups);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(strict_groups.find("bfloat16"), std::string::npos) << strict_groups;
    const auto [max_abs, scale] = max_difference_and_scale(got, want);
    const bool engaged = bf16_groups.find("in bfloat16 (fpmath bf16)") != std::string::npos;
    std::cout << GetParam() << " under onednn_cpu_bf16 (" << (engaged ? "bfloat16 engaged" : "no native bfloat16 here")
              << "): max abs difference to float32 " << max_abs << ", max |float32| " << scale << ", ratio "
              << max_abs / scale << "\n";
    if (!engaged) {
        EXPECT_EQ(max_abs, 0.0) << "without native bfloat16 the float32 kernels must run";
        return;
    }
    EXPECT_GT(max_abs, 1e-6 * scale) << "bfloat16 was reported but the outputs equal float32's";
    EXPECT_LE(max_abs, 2e-2 * scale) << "beyond the tolerance stated in the value claims";
    // Same top-1 class for each image of the batch.
    const std::int64_t classes = want.shape().back(), rows = want.numel() / classes;
    for (std::int64_t r = 0; r < rows; ++r) {
        std::int64_t best_want = 0, best_got = 0;
        for (std::int64_t c = 1; c < classes; ++c) {
            if (want.at(r * classes + c) > want.at(r * classes + best_want)) best_want = c;
            if (got.at(r * classes + c) > got.at(r * classes + best_got)) best_got = c;
        }
        EXPECT_EQ(best_got, best_want) << "image " << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Real, OnednnModels, ::testing::Values("mobilenet_v2", "squeezenet1_1"));

// ---- compiled groups: fusion inside one plugin ---------------------------------------------------

namespace {

/// An MLP x [4, 16] -> linear(16 -> 32) -> relu -> linear(32 -> 8) -> `last`, whose first linear
/// result is also a graph output when `expose_hidden` (so it must be written, not fused away).
Graph mlp_graph(bool expose_hidden, const std::string& last = "softmax") {
    std::string json = R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [4, 16], "dtype": "float32"},
      {"id": 1, "op": "linear", "name": "fc1", "parents": [0], "attrs": {"out_features": 32}, "shape": [4, 32]},
      {"id": 2, "op": "relu", "name": "relu1", "parents": [1], "shape": [4, 32]},
      {"id": 3, "op": "linear", "name": "fc2", "parents": [2], "attrs": {"out_features": 8}, "shape": [4, 8]},
      {"id": 4, "op": ")" + last + R"(", "name": "out", "parents": [3], )" +
                       (last == "softmax" ? R"("attrs": {"axis": -1}, )" : "") + R"("shape": [4, 8]}
    ], "outputs": [4)" + (expose_hidden ? ", 1" : "") + "]}";
    return parse_graph(json);
}

ParameterMap mlp_parameters() {
    using capsule::testing::pseudo_random;
    return {{"fc1.weight", Tensor::from_values(DType::float32, {32, 16}, pseudo_random(512, 11, 0.3))},
            {"fc1.bias", Tensor::from_values(DType::float32, {32}, pseudo_random(32, 12, 0.1))},
            {"fc2.weight", Tensor::from_values(DType::float32, {8, 32}, pseudo_random(256, 13, 0.3))},
            {"fc2.bias", Tensor::from_values(DType::float32, {8}, pseudo_random(8, 14, 0.1))}};
}

Session onednn_session(const Graph& graph, const ParameterMap& params, bool compile_groups) {
    SessionOptions options;
    options.compile_groups = compile_groups;
    return capsule::testing::session_under("onednn_cpu", graph, params, options);
}

/// A group's description without the thread note of a group whose kernels are all small (tested
/// in AGroupOfSmallKernelsRunsOnOneThreadAndALargerOneOnAll; it depends on the machine's cores).
std::string fusion_of(std::string description) {
    const std::string note = "; 1 thread (every kernel small)";
    if (description.ends_with(note)) description.resize(description.size() - note.size());
    // Which convolutions compute by Winograd depends on the CPU (see WinogradConvolutions...).
    return std::regex_replace(description, std::regex("; [0-9]+ convolutions by Winograd \\([^)]*\\)"), "");
}

/// Element-wise equal within `tolerance` (infinities exactly), NaN where the other is NaN.
void expect_same(const Tensor& got, const Tensor& want, double tolerance) {
    ASSERT_EQ(got.shape(), want.shape());
    for (std::int64_t i = 0; i < want.numel(); ++i) {
        if (std::isnan(want.at(i))) {
            EXPECT_TRUE(std::isnan(got.at(i))) << "element " << i << " is " << got.at(i) << ", want NaN";
        } else if (got.at(i) != want.at(i)) {  // equal infinities pass
            EXPECT_NEAR(got.at(i), want.at(i), tolerance) << "element " << i;
        }
    }
}

}  // namespace

TEST(OnednnCompiledGroups, LinearReluIsFusedAndMatchesTheNodeByNodeRunAndTheReference) {
    REQUIRE_ONEDNN();
    const Graph graph = mlp_graph(false);
    const auto params = mlp_parameters();
    auto fused = onednn_session(graph, params, true);
    auto plain = onednn_session(graph, params, false);
    const auto groups = fused.compiled_groups();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].plugin, "onednn");
    EXPECT_EQ(groups[0].node_ids, (std::vector<std::int64_t>{1, 2, 3, 4}));
    EXPECT_EQ(fusion_of(groups[0].fused), "linear+relu x1 (each a single oneDNN primitive)");
    EXPECT_TRUE(plain.compiled_groups().empty());
    // A compiled group is one backend call, timed as one.
    const auto calls = fused.steps();
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].group_nodes, (std::vector<std::int64_t>{1, 2, 3, 4}));
    EXPECT_EQ(calls[0].capsule, "onednn.linear+onednn.relu+onednn.linear+onednn.softmax");
    EXPECT_EQ(plain.steps().size(), 4u);

    const auto& checked = find_builtin_profile("checked_cpu");
    auto accepted = checked.accept_graph(capsule::testing::built_host(), graph);
    ASSERT_TRUE(accepted.accepted.has_value());
    auto reference = Session::create(checked, *accepted.accepted, graph, capsule::testing::built_host(), params);
    const Tensor x = Tensor::from_values(DType::float32, {4, 16}, capsule::testing::pseudo_random(64, 15, 2.0));
    const auto want = reference.run({{"x", x}});
    expect_same(fused.run({{"x", x}})[0], want[0], 1e-5);
    expect_same(plain.run({{"x", x}})[0], want[0], 1e-5);
    RunTimings timings;
    expect_same(fused.run({{"x", x}}, timings)[0], want[0], 1e-5);
    EXPECT_EQ(timings.steps.size(), 1u);
    // run_recording runs node by node (its tape needs every intermediate value), and backward
    // calls the oneDNN capsules' backward kernels: the input gradient equals checked_cpu's.
    const Tensor w = Tensor::from_values(DType::float32, want[0].shape(), capsule::testing::pseudo_random(std::size_t(want[0].numel()), 16, 1.0));
    const auto grad = fused.backward(fused.run_recording({{"x", x}}).tape, {w});
    const auto grad_want = reference.backward(reference.run_recording({{"x", x}}).tape, {w});
    expect_same(grad.inputs.at("x"), grad_want.inputs.at("x"), 1e-5);
}

// A state's forward calls re-point the oneDNN memory objects of its first call at each call's
// buffers (MemoryCache in plugins/cpu/onednn/common.hpp), and a call that finds them held by
// another thread makes its own. LeNet (conv, pooling, linear; fused and node by node) run from 4
// threads at once on interleaved inputs: every output equals, bit for bit, what a fresh session
// computed for that input on its first run.
TEST(OnednnPlugin, ConcurrentRunsReusingMemoryObjectsMatchFreshSessions) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const auto graph = load_graph(fs::path(CAPSULE_SOURCE_DIR) / "examples" / "lenet.json");
    const ParameterMap params = capsule::testing::random_parameters(graph, 1, 0.2);
    constexpr int kThreads = 4, kInputs = 6, kRuns = 40;
    for (const bool compile_groups : {true, false}) {
        SessionOptions options;
        options.compile_groups = compile_groups;
        options.threads = 1;  // one OpenMP thread per call: the same work split on every thread
        std::vector<Tensor> inputs, expected;
        for (int i = 0; i < kInputs; ++i) {
            inputs.push_back(Tensor::from_values(DType::float32, {1, 1, 28, 28}, pseudo_random(784, 300 + i, 1.0)));
            auto fresh = capsule::testing::session_under("onednn_cpu", graph, params, options);
            expected.push_back(fresh.run({{"image", inputs.back()}})[0]);
        }
        ASSERT_FALSE(expected[1].bitwise_equal(expected[0]));  // the inputs matter
        auto session = capsule::testing::session_under("onednn_cpu", graph, params, options);
        std::vector<int> mismatches(kThreads, 0);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
            threads.emplace_back([&, t] {
                for (int r = 0; r < kRuns; ++r) {
                    const int which = (t + r) % kInputs;
                    auto out = session.run({{"image", inputs[which]}});
                    if (out.size() != 1 || !out[0].bitwise_equal(expected[which])) ++mismatches[t];
                }
            });
        for (auto& th : threads) th.join();
        for (int t = 0; t < kThreads; ++t)
            EXPECT_EQ(mismatches[t], 0) << "thread " << t << (compile_groups ? ", compiled groups" : ", node by node");
    }
}

TEST(OnednnCompiledGroups, NonFiniteInputsKeepTorchReluSemantics) {
    // oneDNN's relu post-op maps NaN to 0; torch.relu keeps NaN. A NaN or an infinity in a row of
    // x must give that row NaN (softmax over a NaN) exactly as the node-by-node run does.
    REQUIRE_ONEDNN();
    const Graph graph = mlp_graph(false);
    const auto params = mlp_parameters();
    auto fused = onednn_session(graph, params, true);
    auto plain = onednn_session(graph, params, false);
    auto values = capsule::testing::pseudo_random(64, 16, 2.0);
    values[16 + 3] = std::numeric_limits<double>::quiet_NaN();
    values[32 + 5] = std::numeric_limits<double>::infinity();
    const Tensor x = Tensor::from_values(DType::float32, {4, 16}, values);
    const auto want = plain.run({{"x", x}});
    for (std::int64_t c = 0; c < 8; ++c) EXPECT_TRUE(std::isnan(want[0].at(8 + c))) << "row 1 of the plain run";
    expect_same(fused.run({{"x", x}})[0], want[0], 1e-6);
}

TEST(OnednnCompiledGroups, AValueReadAfterTheGroupIsWrittenAndNotFused) {
    REQUIRE_ONEDNN();
    const Graph graph = mlp_graph(true);
    const auto params = mlp_parameters();
    auto fused = onednn_session(graph, params, true);
    auto plain = onednn_session(graph, params, false);
    // fc1's result is a graph output: nothing else to fuse, so the plugin declines the group.
    EXPECT_TRUE(fused.compiled_groups().empty());
    const Tensor x = Tensor::from_values(DType::float32, {4, 16}, capsule::testing::pseudo_random(64, 17, 2.0));
    const auto got = fused.run({{"x", x}}), want = plain.run({{"x", x}});
    ASSERT_EQ(got.size(), 2u);
    expect_same(got[1], want[1], 0.0);
    expect_same(got[0], want[0], 0.0);
}

TEST(OnednnCompiledGroups, TwoProducersFuseTheirActivations) {
    REQUIRE_ONEDNN();
    const Graph graph = mlp_graph(false, "tanh");
    const auto params = mlp_parameters();
    auto fused = onednn_session(graph, params, true);
    const auto groups = fused.compiled_groups();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(fusion_of(groups[0].fused), "linear+relu x1, linear+tanh x1 (each a single oneDNN primitive)");
    auto plain = onednn_session(graph, params, false);
    const Tensor x = Tensor::from_values(DType::float32, {4, 16}, capsule::testing::pseudo_random(64, 18, 2.0));
    expect_same(fused.run({{"x", x}})[0], plain.run({{"x", x}})[0], 1e-6);
}

TEST(OnednnCompiledGroups, BatchNormIsFoldedIntoTheConvolutionAndMatchesTheReference) {
    // conv2d (with and without bias) -> batch_norm (inference) -> relu, against checked_cpu's
    // reference kernels, which compute each node from its definition.
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    for (const bool conv_bias : {true, false}) {
        const std::string bias_attr = conv_bias ? "" : R"(, "bias": false)";
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 8, 8], "dtype": "float32"},
          {"id": 1, "op": "conv2d", "name": "conv", "parents": [0], "attrs": {"out_channels": 4, "kernel_size": 3, "padding": 1)" +
                                        bias_attr + R"(}, "shape": [2, 4, 8, 8]},
          {"id": 2, "op": "batch_norm", "name": "bn", "parents": [1], "attrs": {"eps": 0.001}, "shape": [2, 4, 8, 8]},
          {"id": 3, "op": "relu", "name": "act", "parents": [2], "shape": [2, 4, 8, 8]}
        ], "outputs": [3]})");
        auto var = pseudo_random(4, 25, 0.5);
        for (auto& v : var) v = std::fabs(v) + 0.2;
        ParameterMap params{
            {"conv.weight", Tensor::from_values(DType::float32, {4, 3, 3, 3}, pseudo_random(108, 21, 0.4))},
            {"bn.weight", Tensor::from_values(DType::float32, {4}, pseudo_random(4, 22, 1.0))},
            {"bn.bias", Tensor::from_values(DType::float32, {4}, pseudo_random(4, 23, 0.5))},
            {"bn.running_mean", Tensor::from_values(DType::float32, {4}, pseudo_random(4, 24, 0.5))},
            {"bn.running_var", Tensor::from_values(DType::float32, {4}, var)}};
        if (conv_bias) params["conv.bias"] = Tensor::from_values(DType::float32, {4}, pseudo_random(4, 26, 0.3));
        auto fused = onednn_session(graph, params, true);
        const auto groups = fused.compiled_groups();
        ASSERT_EQ(groups.size(), 1u);
        EXPECT_EQ(fusion_of(groups[0].fused), "conv2d+batch_norm+relu x1 (each a single oneDNN primitive)");
        const auto& checked = find_builtin_profile("checked_cpu");
        auto accepted = checked.accept_graph(capsule::testing::built_host(), graph);
        ASSERT_TRUE(accepted.accepted.has_value());
        auto reference = Session::create(checked, *accepted.accepted, graph, capsule::testing::built_host(), params);
        const Tensor x = Tensor::from_values(DType::float32, {2, 3, 8, 8}, pseudo_random(384, 27, 2.0));
        const auto want = reference.run({{"x", x}})[0];
        std::size_t positive = 0;
        for (std::int64_t i = 0; i < want.numel(); ++i) positive += want.at(i) > 0;
        EXPECT_GT(positive, 50u) << "the relu must not zero everything for the test to mean something";
        expect_same(fused.run({{"x", x}})[0], want, 1e-5);
    }
}

// Overflow inside a fused chain: a batch_norm folded into a convolution, or a relu post-op after a
// reduction whose partial sums overflow to +inf and -inf (NaN), must give what the node-by-node
// kernels give: the fold is declined when the folded weights are not finite, and a run whose
// inputs could overflow the producer takes the node-by-node path.
namespace {

Graph conv_bn_graph(bool relu) {
    return parse_graph(std::string(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 1, 1, 4], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 1, "kernel_size": 1}, "shape": [1, 1, 1, 4]},
      {"id": 2, "op": "batch_norm", "name": "bn", "parents": [1], "attrs": {"eps": 1e-30}, "shape": [1, 1, 1, 4]})") +
                       (relu ? R"(, {"id": 3, "op": "relu", "name": "act", "parents": [2], "shape": [1, 1, 1, 4]}], "outputs": [3]})"
                             : R"(], "outputs": [2]})"));
}

ParameterMap conv_bn_parameters(double w, double b, double gamma, double beta, double var) {
    auto one = [](double v) { return Tensor::from_values(DType::float32, {1}, {v}); };
    return {{"c.weight", Tensor::from_values(DType::float32, {1, 1, 1, 1}, {w})}, {"c.bias", one(b)},
            {"bn.weight", one(gamma)}, {"bn.bias", one(beta)}, {"bn.running_mean", one(0)},
            {"bn.running_var", one(var)}};
}

void expect_fused_equals_node_by_node(const Graph& graph, const ParameterMap& params,
                                      const std::map<std::string, Tensor>& inputs) {
    auto fused = onednn_session(graph, params, true);
    auto plain = onednn_session(graph, params, false);
    expect_same(fused.run(inputs)[0], plain.run(inputs)[0], 0.0);
}

}  // namespace

TEST(OnednnCompiledGroups, OverflowsInsideAChainMatchTheNodeByNodeRun) {
    REQUIRE_ONEDNN();
    const double big = 3e38, inf = std::numeric_limits<double>::infinity();
    auto x4 = [](std::vector<double> v) { return Tensor::from_values(DType::float32, {1, 1, 1, 4}, v); };
    // Folded weight 1e30 / sqrt(1e-30) overflows: the fold is declined, nothing is fused.
    {
        const auto params = conv_bn_parameters(1e30, 0, 1, 0, 0);
        EXPECT_TRUE(onednn_session(conv_bn_graph(false), params, true).compiled_groups().empty());
        expect_fused_equals_node_by_node(conv_bn_graph(false), params, {{"x", x4({0, 1e-30, 2e-30, -1e-30})}});
    }
    // An infinite batch_norm weight: declined too.
    expect_fused_equals_node_by_node(conv_bn_graph(false), conv_bn_parameters(2, 1, inf, 0.5, 1),
                                     {{"x", x4({0, 1, 2, -1})}});
    // A zero batch_norm weight folds to finite weights, but the convolution of 3e38 overflows to
    // inf and inf * 0 is NaN node by node: that run must not take the fused path.
    {
        const auto params = conv_bn_parameters(2, 0, 0, 0.5, 1);
        auto fused = onednn_session(conv_bn_graph(true), params, true);
        ASSERT_EQ(fused.compiled_groups().size(), 1u);
        const auto out = fused.run({{"x", x4({big, 1, -big, 0})}})[0];
        EXPECT_TRUE(std::isnan(out.at(0)) && std::isnan(out.at(2))) << out.at(0) << " " << out.at(2);
        EXPECT_EQ(out.at(1), 0.5);
        expect_fused_equals_node_by_node(conv_bn_graph(true), params, {{"x", x4({big, 1, -big, 0})}});
        // Ordinary inputs do take the fused path, with the same values.
        expect_fused_equals_node_by_node(conv_bn_graph(true), params, {{"x", x4({3, 1, -2, 0})}});
    }
    // matmul + relu whose reduction sums 512 x 3e38 and 512 x -3e38: NaN node by node (relu keeps
    // it), never 0.
    const Graph mm = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "a", "shape": [1, 1024], "dtype": "float32"},
      {"id": 1, "op": "input", "name": "b", "shape": [1024, 16], "dtype": "float32"},
      {"id": 2, "op": "matmul", "name": "mm", "parents": [0, 1], "shape": [1, 16]},
      {"id": 3, "op": "relu", "name": "act", "parents": [2], "shape": [1, 16]}], "outputs": [3]})");
    std::vector<double> a(1024, big);
    std::fill(a.begin() + 512, a.end(), -big);
    const std::map<std::string, Tensor> mm_inputs{
        {"a", Tensor::from_values(DType::float32, {1, 1024}, a)},
        {"b", Tensor::from_values(DType::float32, {1024, 16}, std::vector<double>(1024 * 16, 1.0))}};
    auto fused = onednn_session(mm, {}, true);
    ASSERT_EQ(fused.compiled_groups().size(), 1u);
    const auto out = fused.run(mm_inputs)[0];
    auto plain = onednn_session(mm, {}, false);
    const auto want = plain.run(mm_inputs)[0];
    for (std::int64_t i = 0; i < 16; ++i) EXPECT_NE(out.at(i), 0.0) << "relu of an overflowed sum became 0";
    expect_same(out, want, 0.0);
}

// Values only a group sees stay channels-last (nhwc) between convolutions, pools and the
// elementwise nodes around them; a node that needs the host's layout (a broadcasting mul) keeps
// the values it touches, and every value tied to them through elementwise nodes, row-major.
namespace {

Graph nhwc_chain_graph(bool broadcast_mul) {
    // x -> conv 3x3 -> relu -> max_pool 2 -> depthwise conv 3x3 -> add(pool, dw) -> batch_norm
    //   [-> mul by s [1, 8, 1, 1]] -> conv 1x1 -> sigmoid
    std::string nodes = R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 10, 10], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c1", "parents": [0], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "shape": [2, 8, 10, 10]},
      {"id": 2, "op": "relu", "name": "r1", "parents": [1], "shape": [2, 8, 10, 10]},
      {"id": 3, "op": "max_pool2d", "name": "p1", "parents": [2], "attrs": {"kernel_size": 2, "stride": 2}, "shape": [2, 8, 5, 5]},
      {"id": 4, "op": "conv2d", "name": "dw", "parents": [3], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1, "groups": 8}, "shape": [2, 8, 5, 5]},
      {"id": 5, "op": "add", "name": "res", "parents": [3, 4], "shape": [2, 8, 5, 5]},
      {"id": 6, "op": "batch_norm", "name": "bn", "parents": [5], "attrs": {"eps": 0.001}, "shape": [2, 8, 5, 5]},)";
    if (broadcast_mul)
        nodes += R"(
      {"id": 7, "op": "input", "name": "s", "shape": [1, 8, 1, 1], "dtype": "float32"},
      {"id": 8, "op": "mul", "name": "scale", "parents": [6, 7], "shape": [2, 8, 5, 5]},)";
    nodes += std::string(R"(
      {"id": 9, "op": "conv2d", "name": "c3", "parents": [)") + (broadcast_mul ? "8" : "6") +
             R"(], "attrs": {"out_channels": 16, "kernel_size": 1}, "shape": [2, 16, 5, 5]},
      {"id": 10, "op": "sigmoid", "name": "out", "parents": [9], "shape": [2, 16, 5, 5]}
    ], "outputs": [10]})";
    return parse_graph(nodes);
}

ParameterMap nhwc_chain_parameters() {
    using capsule::testing::pseudo_random;
    auto var = pseudo_random(8, 38, 0.5);
    for (auto& v : var) v = std::fabs(v) + 0.2;
    auto t = [](Shape s, std::vector<double> v) { return Tensor::from_values(DType::float32, std::move(s), v); };
    return {{"c1.weight", t({8, 3, 3, 3}, pseudo_random(216, 31, 0.4))},
            {"c1.bias", t({8}, pseudo_random(8, 32, 0.2))},
            {"dw.weight", t({8, 1, 3, 3}, pseudo_random(72, 33, 0.5))},
            {"dw.bias", t({8}, pseudo_random(8, 34, 0.2))},
            {"bn.weight", t({8}, pseudo_random(8, 35, 1.0))},
            {"bn.bias", t({8}, pseudo_random(8, 36, 0.5))},
            {"bn.running_mean", t({8}, pseudo_random(8, 37, 0.5))},
            {"bn.running_var", t({8}, var)},
            {"c3.weight", t({16, 8, 1, 1}, pseudo_random(128, 39, 0.5))},
            {"c3.bias", t({16}, pseudo_random(16, 40, 0.2))}};
}

}  // namespace

TEST(OnednnCompiledGroups, InternalValuesStayChannelsLastAndMatchTheReference) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const auto params = nhwc_chain_parameters();
    const auto& checked = find_builtin_profile("checked_cpu");
    for (const bool broadcast_mul : {false, true}) {
        SCOPED_TRACE(broadcast_mul ? "with a broadcasting mul" : "all internal values nhwc");
        const Graph graph = nhwc_chain_graph(broadcast_mul);
        auto fused = onednn_session(graph, params, true);
        const auto groups = fused.compiled_groups();
        ASSERT_EQ(groups.size(), 1u);
        // Without the mul: conv, relu, pool, depthwise conv, add and batch_norm results (6); with
        // it, the mul ties pool .. batch_norm to the row-major s, leaving the first two. The
        // depthwise convolution adds the residual (pool) as a sum post-op in either layout (in
        // nchw oneDNN computes in a blocked layout: the residual is reordered into it).
        EXPECT_EQ(fusion_of(groups[0].fused), std::string("conv2d+add x1, conv2d+relu x1, conv2d+sigmoid x1 (each a single "
                                               "oneDNN primitive); ") +
                                       (broadcast_mul ? "2" : "6") + " internal tensors kept nhwc");
        auto plain = onednn_session(graph, params, false);
        auto accepted = checked.accept_graph(capsule::testing::built_host(), graph);
        ASSERT_TRUE(accepted.accepted.has_value());
        auto reference = Session::create(checked, *accepted.accepted, graph, capsule::testing::built_host(), params);
        std::map<std::string, Tensor> inputs{
            {"x", Tensor::from_values(DType::float32, {2, 3, 10, 10}, pseudo_random(600, 41, 2.0))}};
        if (broadcast_mul) inputs.emplace("s", Tensor::from_values(DType::float32, {1, 8, 1, 1}, pseudo_random(8, 42, 1.5)));
        const auto want = reference.run(inputs)[0];
        double spread = 0;
        for (std::int64_t i = 0; i < want.numel(); ++i) spread = std::max(spread, std::fabs(want.at(i) - 0.5));
        EXPECT_GT(spread, 0.2) << "outputs must vary for the comparison to mean something";
        expect_same(fused.run(inputs)[0], want, 1e-5);
        expect_same(plain.run(inputs)[0], want, 1e-5);
    }
}

// oneDNN's pooling_max skips NaN; torch.max_pool2d (and the reference capsule) returns NaN for a
// window that holds one: alone on a row-major input, with padding and ceil_mode, and inside a
// compiled group on a channels-last tensor.
TEST(OnednnCompiledGroups, MaxPoolKeepsNaNLikeTheReference) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const Graph alone = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 2, 5, 5], "dtype": "float32"},
      {"id": 1, "op": "max_pool2d_pad", "name": "p", "parents": [0], "attrs": {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": true}, "shape": [1, 2, 3, 3]}
    ], "outputs": [1]})");
    const Graph grouped = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 2, 5, 5], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 3, "kernel_size": 1}, "shape": [1, 3, 5, 5]},
      {"id": 2, "op": "max_pool2d", "name": "p", "parents": [1], "attrs": {"kernel_size": 2, "stride": 2}, "shape": [1, 3, 2, 2]},
      {"id": 3, "op": "sigmoid", "name": "out", "parents": [2], "shape": [1, 3, 2, 2]}
    ], "outputs": [3]})");
    const ParameterMap grouped_params{
        {"c.weight", Tensor::from_values(DType::float32, {3, 2, 1, 1}, pseudo_random(6, 51, 1.0))},
        {"c.bias", Tensor::from_values(DType::float32, {3}, pseudo_random(3, 52, 0.2))}};
    auto values = pseudo_random(50, 53, 2.0);
    values[0] = std::numeric_limits<double>::quiet_NaN();       // channel 0, corner
    values[25 + 12] = std::numeric_limits<double>::quiet_NaN();  // channel 1, centre
    const std::map<std::string, Tensor> inputs{{"x", Tensor::from_values(DType::float32, {1, 2, 5, 5}, values)}};
    const auto& checked = find_builtin_profile("checked_cpu");
    for (const auto* graph : {&alone, &grouped}) {
        const ParameterMap params = graph == &grouped ? grouped_params : ParameterMap{};
        auto accepted = checked.accept_graph(capsule::testing::built_host(), *graph);
        ASSERT_TRUE(accepted.accepted.has_value());
        auto reference = Session::create(checked, *accepted.accepted, *graph, capsule::testing::built_host(), params);
        const auto want = reference.run(inputs)[0];
        std::size_t nans = 0;
        for (std::int64_t i = 0; i < want.numel(); ++i) nans += std::isnan(want.at(i));
        EXPECT_GT(nans, 0u);
        EXPECT_LT(nans, static_cast<std::size_t>(want.numel()));
        auto fused = onednn_session(*graph, params, true);
        if (graph == &grouped) {
            ASSERT_EQ(fused.compiled_groups().size(), 1u);
            EXPECT_NE(fused.compiled_groups()[0].fused.find("kept nhwc"), std::string::npos);
        }
        expect_same(fused.run(inputs)[0], want, 1e-6);
        expect_same(onednn_session(*graph, params, false).run(inputs)[0], want, 1e-6);
    }
}

// A residual block: x -> conv 3x3 + relu (r) -> conv 3x3 -> batch_norm -> add r -> relu, the
// add's operands in either order. The second convolution computes batch_norm, add and relu
// as one primitive (oneDNN sum post-op) in nhwc, and in nchw when the block's input is an
// input of the graph and its output the group's (staged through oneDNN's blocked layout).
namespace {

Graph residual_graph(bool residual_first, bool residual_is_input) {
    const std::string r = residual_is_input ? "0" : "2";
    return parse_graph(std::string(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 8, 6, 6], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c1", "parents": [0], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "shape": [2, 8, 6, 6]},
      {"id": 2, "op": "relu", "name": "r1", "parents": [1], "shape": [2, 8, 6, 6]},
      {"id": 3, "op": "conv2d", "name": "c2", "parents": [2], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false}, "shape": [2, 8, 6, 6]},
      {"id": 4, "op": "batch_norm", "name": "bn", "parents": [3], "attrs": {"eps": 0.001}, "shape": [2, 8, 6, 6]},
      {"id": 5, "op": "add", "name": "res", "parents": [)") +
                       (residual_first ? r + ", 4" : "4, " + r) + R"(], "shape": [2, 8, 6, 6]},
      {"id": 6, "op": "relu", "name": "out", "parents": [5], "shape": [2, 8, 6, 6]}
    ], "outputs": [6]})");
}

ParameterMap residual_parameters() {
    using capsule::testing::pseudo_random;
    auto var = pseudo_random(8, 65, 0.5);
    for (auto& v : var) v = std::fabs(v) + 0.2;
    auto t = [](Shape s, std::vector<double> v) { return Tensor::from_values(DType::float32, std::move(s), v); };
    return {{"c1.weight", t({8, 8, 3, 3}, pseudo_random(576, 61, 0.3))},
            {"c1.bias", t({8}, pseudo_random(8, 62, 0.2))},
            {"c2.weight", t({8, 8, 3, 3}, pseudo_random(576, 63, 0.3))},
            {"bn.weight", t({8}, pseudo_random(8, 64, 1.0))},
            {"bn.bias", t({8}, pseudo_random(8, 66, 0.5))},
            {"bn.running_mean", t({8}, pseudo_random(8, 67, 0.5))},
            {"bn.running_var", t({8}, var)}};
}

Tensor reference_output(const Graph& graph, const ParameterMap& params, const std::map<std::string, Tensor>& inputs) {
    return capsule::testing::session_under("checked_cpu", graph, params).run(inputs)[0];
}

}  // namespace

TEST(OnednnPlugin, MaxPoolOfMinusInfinityAloneIsMinusInfinity) {
    // oneDNN's pooling_max starts from the lowest finite float: a window of -inf alone must still
    // give -inf (torch.max_pool2d), and a window holding -FLT_MAX itself keeps it. Padded and
    // not, node by node and inside a compiled group (nhwc).
    REQUIRE_ONEDNN();
    const double inf = std::numeric_limits<double>::infinity(), lowest = std::numeric_limits<float>::lowest();
    for (const std::string attrs : {R"("kernel_size": 2, "stride": 2)", R"("kernel_size": 3, "stride": 2, "padding": 1)"}) {
        SCOPED_TRACE(attrs);
        const std::string op = attrs.find("padding") != std::string::npos ? "max_pool2d_pad" : "max_pool2d";
        const std::string out_hw = "2, 2";
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 2, 4, 4], "dtype": "float32"},
      {"id": 1, "op": ")" + op + R"(", "name": "p", "parents": [0], "attrs": {)" + attrs + R"(}, "shape": [1, 2, )" + out_hw + R"(]},
      {"id": 2, "op": "relu", "name": "r", "parents": [1], "shape": [1, 2, )" + out_hw + R"(]}
    ], "outputs": [1, 2]})");
        std::vector<double> values(32, -inf);
        values[16 + 5] = lowest;  // channel 1: one window holds -FLT_MAX
        values[16 + 15] = 1.5;
        const std::map<std::string, Tensor> inputs{{"x", Tensor::from_values(DType::float32, {1, 2, 4, 4}, values)}};
        const Tensor want = reference_output(graph, {}, inputs);
        for (bool grouped : {false, true}) {
            const Tensor got = onednn_session(graph, {}, grouped).run(inputs)[0];
            ASSERT_EQ(got.shape(), want.shape());
            for (std::int64_t i = 0; i < want.numel(); ++i)
                EXPECT_EQ(got.at(i), want.at(i)) << "output " << i << (grouped ? " (grouped)" : "");
        }
        EXPECT_EQ(want.at(0), -inf);  // channel 0 is -inf throughout
    }
}

TEST(OnednnPlugin, NonFiniteWeightOnThePaddingGivesNaN) {
    // F.conv2d multiplies the zero padding by the weight (0 · inf = NaN); oneDNN skips padded
    // taps, so the plugin sets those outputs to NaN. Weight [0, 0, 0, 0] = inf reads the padding
    // at every output of the first row or column.
    REQUIRE_ONEDNN();
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 1, 3, 3], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c", "parents": [0], "attrs": {"out_channels": 2, "kernel_size": 3, "padding": 1, "bias": false}, "shape": [2, 2, 3, 3]}
    ], "outputs": [1]})");
    std::vector<double> w(18, 0.25);
    w[0] = std::numeric_limits<double>::infinity();
    const ParameterMap params{{"c.weight", Tensor::from_values(DType::float32, {2, 1, 3, 3}, w)}};
    const std::map<std::string, Tensor> inputs{
        {"x", Tensor::from_values(DType::float32, {2, 1, 3, 3}, capsule::testing::pseudo_random(18, 90, 1.0))}};
    const Tensor want = reference_output(graph, params, inputs);
    const Tensor got = onednn_session(graph, params, false).run(inputs)[0];
    for (std::int64_t i = 0; i < want.numel(); ++i) {
        const std::int64_t o = i / 9 % 2, oy = i % 9 / 3, ox = i % 3;
        EXPECT_EQ(std::isnan(want.at(i)), o == 0 && (oy == 0 || ox == 0)) << "reference output " << i;
        if (std::isnan(want.at(i)))
            EXPECT_TRUE(std::isnan(got.at(i))) << "output " << i << " is " << got.at(i);
        else if (std::isinf(want.at(i)))  // the infinite tap on the input itself
            EXPECT_EQ(got.at(i), want.at(i)) << "output " << i;
        else
            EXPECT_NEAR(got.at(i), want.at(i), 1e-5 * (1 + std::fabs(want.at(i)))) << "output " << i;
    }
}

TEST(OnednnCompiledGroups, ResidualAddIsFusedAsASumPostOpAndMatchesTheReference) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const auto params = residual_parameters();
    const std::map<std::string, Tensor> inputs{
        {"x", Tensor::from_values(DType::float32, {2, 8, 6, 6}, pseudo_random(576, 68, 2.0))}};
    for (const bool residual_first : {false, true})
        for (const bool residual_is_input : {false, true}) {
            SCOPED_TRACE(std::string(residual_first ? "add(r, bn)" : "add(bn, r)") +
                         (residual_is_input ? ", r the graph input (nchw)" : ", r internal (nhwc)"));
            const Graph graph = residual_graph(residual_first, residual_is_input);
            auto fused = onednn_session(graph, params, true);
            const auto groups = fused.compiled_groups();
            ASSERT_EQ(groups.size(), 1u);
            EXPECT_NE(groups[0].fused.find("conv2d+batch_norm+add+relu x1"), std::string::npos) << groups[0].fused;
            const auto want = reference_output(graph, params, inputs);
            std::size_t positive = 0;
            for (std::int64_t i = 0; i < want.numel(); ++i) positive += want.at(i) > 0;
            EXPECT_GT(positive, 100u) << "the relu must not zero everything for the test to mean something";
            expect_same(fused.run(inputs)[0], want, 1e-5);
            expect_same(onednn_session(graph, params, false).run(inputs)[0], want, 1e-5);
        }
}

TEST(OnednnCompiledGroups, NonFiniteResidualKeepsTorchReluSemantics) {
    // A NaN or an infinity in the residual (here the graph input x, which the first convolution
    // also reads) must reach the output as node by node: relu keeps NaN, where the fused relu
    // post-op would map it to 0; an infinity spreads through both convolutions.
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const auto params = residual_parameters();
    const Graph graph = residual_graph(false, true);
    for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
        auto values = pseudo_random(576, 69, 2.0);
        values[5] = bad;
        const std::map<std::string, Tensor> inputs{{"x", Tensor::from_values(DType::float32, {2, 8, 6, 6}, values)}};
        const auto want = onednn_session(graph, params, false).run(inputs)[0];
        std::size_t non_finite = 0;
        for (std::int64_t i = 0; i < want.numel(); ++i) non_finite += !std::isfinite(want.at(i));
        EXPECT_GT(non_finite, 0u);
        expect_same(onednn_session(graph, params, true).run(inputs)[0], want, 0.0);
        expect_same(reference_output(graph, params, inputs), want, 1e-5);
    }
}

// oneDNN's Winograd convolutions (3x3, stride 1) add and scale neighbouring inputs before the
// products, so an infinity or NaN reaches outputs whose windows never held it (inf - inf), and a
// large finite input can overflow inside the transforms. Where the CPU has them (AVX-512), the
// group computes such convolutions by Winograd only on runs whose input bounds are finite and
// within kWinogradGain of float32's range; otherwise it runs the direct convolutions node by node.
namespace {

Graph winograd_graph() {
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 64, 10, 10], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c1", "parents": [0], "attrs": {"out_channels": 64, "kernel_size": 3, "padding": 1}, "shape": [1, 64, 10, 10]},
      {"id": 2, "op": "relu", "name": "r1", "parents": [1], "shape": [1, 64, 10, 10]},
      {"id": 3, "op": "conv2d", "name": "c2", "parents": [2], "attrs": {"out_channels": 64, "kernel_size": 3, "padding": 1, "bias": false}, "shape": [1, 64, 10, 10]},
      {"id": 4, "op": "batch_norm", "name": "bn", "parents": [3], "attrs": {"eps": 0.001}, "shape": [1, 64, 10, 10]},
      {"id": 5, "op": "add", "name": "res", "parents": [4, 0], "shape": [1, 64, 10, 10]},
      {"id": 6, "op": "relu", "name": "r2", "parents": [5], "shape": [1, 64, 10, 10]},
      {"id": 7, "op": "conv2d", "name": "c3", "parents": [6], "attrs": {"out_channels": 64, "kernel_size": 3, "padding": 1}, "shape": [1, 64, 10, 10]}
    ], "outputs": [7]})");
}

ParameterMap winograd_parameters() {
    using capsule::testing::pseudo_random;
    auto var = pseudo_random(64, 75, 0.5);
    for (auto& v : var) v = std::fabs(v) + 0.2;
    auto t = [](Shape s, std::vector<double> v) { return Tensor::from_values(DType::float32, std::move(s), v); };
    return {{"c1.weight", t({64, 64, 3, 3}, pseudo_random(36864, 71, 0.06))},
            {"c1.bias", t({64}, pseudo_random(64, 72, 0.2))},
            {"c2.weight", t({64, 64, 3, 3}, pseudo_random(36864, 73, 0.06))},
            {"c3.weight", t({64, 64, 3, 3}, pseudo_random(36864, 74, 0.06))},
            {"c3.bias", t({64}, pseudo_random(64, 76, 0.2))},
            {"bn.weight", t({64}, pseudo_random(64, 77, 1.0))},
            {"bn.bias", t({64}, pseudo_random(64, 78, 0.5))},
            {"bn.running_mean", t({64}, pseudo_random(64, 79, 0.5))},
            {"bn.running_var", t({64}, var)}};
}

/// oneDNN 2.6 has its Winograd convolutions on avx512_core (AVX-512 F, BW, VL and DQ).
bool cpu_has_winograd() {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

}  // namespace

TEST(OnednnCompiledGroups, WinogradConvolutionsMatchTheReferenceAndRunDirectOnNonFiniteOrHugeInputs) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const Graph graph = winograd_graph();
    const auto params = winograd_parameters();
    auto fused = onednn_session(graph, params, true);
    auto node_by_node = onednn_session(graph, params, false);
    const auto groups = fused.compiled_groups();
    ASSERT_EQ(groups.size(), 1u);
    const std::string& described = groups[0].fused;
    EXPECT_NE(described.find("conv2d+batch_norm+add+relu x1, conv2d+relu x1 (each"), std::string::npos) << described;
    if (cpu_has_winograd())
        EXPECT_NE(described.find("3 convolutions by Winograd"), std::string::npos) << described;
    else
        std::cout << "no AVX-512 here: oneDNN has no Winograd convolution to pick (" << described << ")\n";

    const std::map<std::string, Tensor> inputs{
        {"x", Tensor::from_values(DType::float32, {1, 64, 10, 10}, pseudo_random(6400, 70, 2.0))}};
    const Tensor want = reference_output(graph, params, inputs);
    double scale = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.at(i)));
    ASSERT_GT(scale, 1.0);
    expect_same(fused.run(inputs)[0], want, 1e-4 * scale);
    expect_same(node_by_node.run(inputs)[0], want, 1e-4 * scale);

    // One bad element of x: node by node, a NaN or infinity spreads only through the windows
    // that hold it, and 1e33 stays finite through these weights (|w| row sums about 17).
    for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 1e33}) {
        SCOPED_TRACE("x[0, 3, 4, 5] = " + std::to_string(bad));
        auto values = pseudo_random(6400, 70, 2.0);
        values[3 * 100 + 4 * 10 + 5] = bad;
        const std::map<std::string, Tensor> bad_inputs{
            {"x", Tensor::from_values(DType::float32, {1, 64, 10, 10}, values)}};
        const Tensor direct = node_by_node.run(bad_inputs)[0];
        std::size_t finite = 0;
        for (std::int64_t i = 0; i < direct.numel(); ++i) finite += std::isfinite(direct.at(i));
        EXPECT_GT(finite, 0u) << "some outputs lie outside every window that holds the bad element";
        expect_same(fused.run(bad_inputs)[0], direct, 0.0);
        expect_same(fused.run(inputs)[0], want, 1e-4 * scale);  // and back on the Winograd path
    }
}

namespace {

/// Runs case `c` on the reference capsule and on the oneDNN one: within 1e-3 of the output scale.
void expect_close_to_reference(const KernelCase& c) {
    SCOPED_TRACE(c.name);
    const std::string op(to_string(c.op));
    std::string error;
    const auto want = run_forward_values(reference_plugin(), "reference." + op, c, error);
    ASSERT_EQ(error, "");
    const auto got = run_forward_values(*onednn_plugin(), "onednn." + op, c, error);
    ASSERT_EQ(error, "");
    ASSERT_EQ(got.size(), want.size());
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    ASSERT_GT(scale, 0.1);
    for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_LE(std::fabs(got[i] - want[i]), 1e-3 * scale) << "element " << i << ": onednn " << got[i]
                                                             << ", reference " << want[i];
}

}  // namespace

// layer_norm forms each row's statistics in double, as the reference capsule: rows of large
// values close together (1e4 + noise of 1e-2) keep their variance, where a float32 mean would
// shift them; a row whose variance overflows float32 (1e20, -1e20) and one whose var + eps is
// subnormal (1e-22 with eps 1e-45) are computed in double. So are batch_norm's batch statistics
// (training = true) whose mean float32 cannot hold.
TEST(OnednnPlugin, NormalisationStatisticsFloat32CannotHoldMatchTheReference) {
    REQUIRE_ONEDNN();
    std::vector<double> x(3 * 64);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e4 + 1e-2 * std::sin(double(i) * 0.7);
    KernelCase offset;
    offset.name = "layer_norm/offset_rows";
    offset.op = BackendOp::layer_norm;
    offset.inputs = {f32({3, 64}, x)};
    offset.params = {rnd({64}, 21), rnd({64}, 22)};
    offset.attrs = {{"normalized_shape", Ints{64}}};
    KernelCase overflow;
    overflow.name = "layer_norm/variance_beyond_float32";
    overflow.op = BackendOp::layer_norm;
    overflow.inputs = {f32({2, 4}, {1e20, -1e20, 0, 0, 1, 2, 3, 4})};
    overflow.attrs = {{"normalized_shape", Ints{4}}, {"elementwise_affine", false}};
    KernelCase tiny = overflow;
    tiny.name = "layer_norm/subnormal_variance";
    tiny.inputs = {f32({1, 4}, {1e-22, -1e-22, 0, 0})};
    tiny.attrs["eps"] = 1e-45;
    KernelCase batch;
    batch.name = "batch_norm/training_offset";
    batch.op = BackendOp::batch_norm;
    batch.inputs = {f32({8, 2, 2, 2}, std::vector<double>(x.begin(), x.begin() + 64))};
    batch.params = {rnd({2}, 23), rnd({2}, 24), rnd({2}, 25), f32({2}, {1, 1})};
    batch.attrs = {{"training", true}};
    for (const auto& c : {offset, overflow, tiny, batch}) expect_close_to_reference(c);
}

// A batch_norm with batch statistics (training = true) is not folded into the convolution before
// it; inside a compiled group it reads its channels-last input through the view's strides.
TEST(OnednnCompiledGroups, TrainingBatchNormInsideAGroupMatchesTheReference) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 6, 6], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c1", "parents": [0], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "shape": [2, 8, 6, 6]},
      {"id": 2, "op": "batch_norm", "name": "bn", "parents": [1], "attrs": {"training": true}, "shape": [2, 8, 6, 6]},
      {"id": 3, "op": "relu", "name": "r", "parents": [2], "shape": [2, 8, 6, 6]},
      {"id": 4, "op": "conv2d", "name": "c2", "parents": [3], "attrs": {"out_channels": 4, "kernel_size": 1}, "shape": [2, 4, 6, 6]}
    ], "outputs": [4]})");
    auto t = [](Shape s, std::vector<double> v) { return Tensor::from_values(DType::float32, std::move(s), v); };
    auto var = pseudo_random(8, 95, 0.5);
    for (auto& v : var) v = std::fabs(v) + 0.2;
    const ParameterMap params{{"c1.weight", t({8, 3, 3, 3}, pseudo_random(216, 91, 0.3))},
                              {"c1.bias", t({8}, pseudo_random(8, 92, 0.5))},
                              {"bn.weight", t({8}, pseudo_random(8, 93, 1.0))},
                              {"bn.bias", t({8}, pseudo_random(8, 94, 0.5))},
                              {"bn.running_mean", t({8}, pseudo_random(8, 96, 0.5))},
                              {"bn.running_var", t({8}, var)},
                              {"c2.weight", t({4, 8, 1, 1}, pseudo_random(32, 97, 0.3))},
                              {"c2.bias", t({4}, pseudo_random(4, 98, 0.2))}};
    auto fused = onednn_session(graph, params, true);
    const auto groups = fused.compiled_groups();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].fused.find("batch_norm"), std::string::npos) << "batch statistics are not folded: "
                                                                    << groups[0].fused;
    const std::map<std::string, Tensor> inputs{
        {"x", Tensor::from_values(DType::float32, {2, 3, 6, 6}, pseudo_random(216, 99, 2.0))}};
    const Tensor want = reference_output(graph, params, inputs);
    double scale = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.at(i)));
    ASSERT_GT(scale, 0.1);
    expect_same(fused.run(inputs)[0], want, 1e-4 * scale);
    expect_same(onednn_session(graph, params, false).run(inputs)[0], want, 1e-4 * scale);
}

// The checks of the fused paths and of the NaN passes use magnitude bounds that each node's
// bound follows from its inputs' (value_bounds.hpp). A bound that is too small would let relu or
// max_pool skip their NaN pass: an overflow inside the group (1e30 * 1e10 is inf in float32, and
// inf - inf NaN) must give NaN through relu and max_pool exactly as node by node, whether the
// large value comes from the input (scanned by the first fused convolution) or from a clamp's
// lower limit (clamp(x, min=1e30) of small x is 1e30).
TEST(OnednnCompiledGroups, BoundsThroughTheGroupKeepOverflowsAsNodeByNode) {
    REQUIRE_ONEDNN();
    // x -> conv 1x1 (w 1) + relu (fused: x is scanned) -> clamp(min) -> two convolutions 1x1
    // with weight 1e10 -> sub -> relu -> max_pool.
    auto graph = [](double min) {
        return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 1, 2, 2], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c0", "parents": [0], "attrs": {"out_channels": 1, "kernel_size": 1}, "shape": [1, 1, 2, 2]},
      {"id": 2, "op": "relu", "name": "r0", "parents": [1], "shape": [1, 1, 2, 2]},
      {"id": 3, "op": "clamp", "name": "lift", "parents": [2], "attrs": {"min": )" +
                           std::to_string(min) + R"(}, "shape": [1, 1, 2, 2]},
      {"id": 4, "op": "conv2d", "name": "a", "parents": [3], "attrs": {"out_channels": 1, "kernel_size": 1}, "shape": [1, 1, 2, 2]},
      {"id": 5, "op": "conv2d", "name": "b", "parents": [3], "attrs": {"out_channels": 1, "kernel_size": 1}, "shape": [1, 1, 2, 2]},
      {"id": 6, "op": "sub", "name": "d", "parents": [4, 5], "shape": [1, 1, 2, 2]},
      {"id": 7, "op": "relu", "name": "r1", "parents": [6], "shape": [1, 1, 2, 2]},
      {"id": 8, "op": "max_pool2d", "name": "out", "parents": [7], "attrs": {"kernel_size": 2}, "shape": [1, 1, 1, 1]}
    ], "outputs": [8]})");
    };
    auto t = [](Shape s, std::vector<double> v) { return Tensor::from_values(DType::float32, std::move(s), v); };
    const ParameterMap params{{"c0.weight", t({1, 1, 1, 1}, {1})}, {"c0.bias", t({1}, {0})},
                              {"a.weight", t({1, 1, 1, 1}, {1e10})}, {"a.bias", t({1}, {0})},
                              {"b.weight", t({1, 1, 1, 1}, {1e10})}, {"b.bias", t({1}, {0})}};
    auto x = [&](std::vector<double> v) { return std::map<std::string, Tensor>{{"x", t({1, 1, 2, 2}, v)}}; };
    struct Case {
        const char* what;
        double min;
        std::map<std::string, Tensor> inputs;
        bool nan;
    };
    const Case cases[] = {{"large input", 0, x({1e30, 2e29, 0.5, 3e29}), true},
                          {"clamp lifts small values", 1e30, x({0.5, 0.25, 0.125, 1}), true},
                          {"no overflow", 0, x({0.5, 0.25, 0.125, 1}), false}};
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        const Graph g = graph(c.min);
        auto fused = onednn_session(g, params, true);
        ASSERT_EQ(fused.compiled_groups().size(), 1u);
        EXPECT_NE(fused.compiled_groups()[0].fused.find("conv2d+relu x1"), std::string::npos)
            << fused.compiled_groups()[0].fused;
        const auto want = reference_output(g, params, c.inputs);
        EXPECT_EQ(std::isnan(want.at(0)), c.nan) << want.at(0);
        expect_same(fused.run(c.inputs)[0], want, 0.0);
        expect_same(onednn_session(g, params, false).run(c.inputs)[0], want, 0.0);
    }
}

// Two places the bounds must follow: an average pool of values near float32's largest (oneDNN
// sums its window in float32, four values of 1e38 overflowing; the capsule then computes such
// windows in double, so the mean is 1e38 and sub(v, v) gives 0, as node by node), and
// clamp(min = +inf), which makes every element +inf: sub(v, v) = inf - inf = NaN, which the relu
// after it must keep, as node by node.
TEST(OnednnCompiledGroups, BoundsCoverAveragePoolSumsAndInfiniteClampLimits) {
    REQUIRE_ONEDNN();
    auto graph = [](const std::string& middle_op, const std::string& middle_attrs, const std::string& middle_shape) {
        return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [1, 1, 2, 2], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "c0", "parents": [0], "attrs": {"out_channels": 1, "kernel_size": 1}, "shape": [1, 1, 2, 2]},
      {"id": 2, "op": "relu", "name": "r0", "parents": [1], "shape": [1, 1, 2, 2]},
      {"id": 3, "op": ")" + middle_op + R"(", "name": "m", "parents": [2], "attrs": )" + middle_attrs +
                           R"(, "shape": )" + middle_shape + R"(},
      {"id": 4, "op": "sub", "name": "d", "parents": [3, 3], "shape": )" + middle_shape + R"(},
      {"id": 5, "op": "relu", "name": "out", "parents": [4], "shape": )" + middle_shape + R"(}
    ], "outputs": [5]})");
    };
    auto t = [](Shape s, std::vector<double> v) { return Tensor::from_values(DType::float32, std::move(s), v); };
    const ParameterMap params{{"c0.weight", t({1, 1, 1, 1}, {1})}, {"c0.bias", t({1}, {0})}};
    struct Case {
        const char* what;
        Graph graph;
        std::vector<double> x;
        bool nan;  // the expected output: NaN, else 0
    };
    // JSON has no infinity: the clamp limit is set on the parsed graph (as ONNX import sets it
    // from a Clip's min input).
    auto clamped = [&](const char* limit, double value) {
        Graph g = graph("clamp", std::string(R"({")") + limit + R"(": 0})", "[1, 1, 2, 2]");
        g.nodes[3].attrs[limit] = value;
        return g;
    };
    const double inf = std::numeric_limits<double>::infinity();
    const Case cases[] = {
        {"avg_pool of 4 x 1e38", graph("avg_pool2d", R"({"kernel_size": 2})", "[1, 1, 1, 1]"), {1e38, 1e38, 1e38, 1e38}, false},
        {"clamp(min = inf)", clamped("min", inf), {0.5, 0.25, 1, 2}, true},
        {"clamp(max = -inf)", clamped("max", -inf), {0.5, 0.25, 1, 2}, true}};
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        const std::map<std::string, Tensor> inputs{{"x", t({1, 1, 2, 2}, c.x)}};
        auto fused = onednn_session(c.graph, params, true);
        ASSERT_EQ(fused.compiled_groups().size(), 1u);
        const auto want = onednn_session(c.graph, params, false).run(inputs)[0];
        if (c.nan) EXPECT_TRUE(std::isnan(want.at(0))) << want.at(0);
        else EXPECT_EQ(want.at(0), 0.0);
        expect_same(fused.run(inputs)[0], want, 0.0);
    }
}

// A channel concat of channels-last values (squeezenet's fire modules) is a per-pixel block copy;
// one operand has a single channel (its nhwc and nchw layouts coincide).
TEST(OnednnCompiledGroups, ChannelsLastConcatMatchesTheReference) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 6, 6], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "a", "parents": [0], "attrs": {"out_channels": 4, "kernel_size": 3, "padding": 1}, "shape": [2, 4, 6, 6]},
      {"id": 2, "op": "relu", "name": "ra", "parents": [1], "shape": [2, 4, 6, 6]},
      {"id": 3, "op": "conv2d", "name": "b", "parents": [0], "attrs": {"out_channels": 1, "kernel_size": 1}, "shape": [2, 1, 6, 6]},
      {"id": 4, "op": "relu", "name": "rb", "parents": [3], "shape": [2, 1, 6, 6]},
      {"id": 5, "op": "concat", "name": "cat", "parents": [2, 4], "attrs": {"axis": 1}, "shape": [2, 5, 6, 6]},
      {"id": 6, "op": "conv2d", "name": "c", "parents": [5], "attrs": {"out_channels": 3, "kernel_size": 3, "padding": 1}, "shape": [2, 3, 6, 6]},
      {"id": 7, "op": "sigmoid", "name": "out", "parents": [6], "shape": [2, 3, 6, 6]}
    ], "outputs": [7]})");
    auto t = [](Shape s, std::size_t n, std::uint64_t seed, double scale) {
        return Tensor::from_values(DType::float32, std::move(s), pseudo_random(n, seed, scale));
    };
    const ParameterMap params{{"a.weight", t({4, 3, 3, 3}, 108, 91, 0.4)}, {"a.bias", t({4}, 4, 92, 0.2)},
                              {"b.weight", t({1, 3, 1, 1}, 3, 93, 0.8)}, {"b.bias", t({1}, 1, 94, 0.2)},
                              {"c.weight", t({3, 5, 3, 3}, 135, 95, 0.4)}, {"c.bias", t({3}, 3, 96, 0.2)}};
    const std::map<std::string, Tensor> inputs{{"x", t({2, 3, 6, 6}, 216, 97, 2.0)}};
    auto fused = onednn_session(graph, params, true);
    ASSERT_EQ(fused.compiled_groups().size(), 1u);
    EXPECT_NE(fused.compiled_groups()[0].fused.find("internal tensors kept nhwc"), std::string::npos)
        << fused.compiled_groups()[0].fused;
    const auto want = reference_output(graph, params, inputs);
    double spread = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) spread = std::max(spread, std::fabs(want.at(i) - 0.5));
    EXPECT_GT(spread, 0.2) << "outputs must vary for the comparison to mean something";
    expect_same(fused.run(inputs)[0], want, 1e-5);
    expect_same(onednn_session(graph, params, false).run(inputs)[0], want, 1e-5);
}

// The elementwise capsules (hardswish, leaky_relu, abs, sqrt) work on a flat vector, so values
// between convolutions stay channels-last through them (MobileNetV3's hardswish); the results
// match the reference.
TEST(OnednnCompiledGroups, ElementwiseCapsulesKeepChannelsLastValues) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 6, 6], "dtype": "float32"},
      {"id": 1, "op": "conv2d", "name": "a", "parents": [0], "attrs": {"out_channels": 8, "kernel_size": 3, "padding": 1}, "shape": [2, 8, 6, 6]},
      {"id": 2, "op": "hardswish", "name": "hs", "parents": [1], "shape": [2, 8, 6, 6]},
      {"id": 3, "op": "conv2d", "name": "b", "parents": [2], "attrs": {"out_channels": 8, "kernel_size": 1}, "shape": [2, 8, 6, 6]},
      {"id": 4, "op": "leaky_relu", "name": "lr", "parents": [3], "attrs": {"negative_slope": 0.1}, "shape": [2, 8, 6, 6]},
      {"id": 5, "op": "conv2d", "name": "c", "parents": [4], "attrs": {"out_channels": 4, "kernel_size": 3, "padding": 1}, "shape": [2, 4, 6, 6]},
      {"id": 6, "op": "abs", "name": "ab", "parents": [5], "shape": [2, 4, 6, 6]},
      {"id": 7, "op": "sqrt", "name": "out", "parents": [6], "shape": [2, 4, 6, 6]}
    ], "outputs": [7]})");
    auto t = [](Shape s, std::size_t n, std::uint64_t seed, double scale) {
        return Tensor::from_values(DType::float32, std::move(s), pseudo_random(n, seed, scale));
    };
    const ParameterMap params{{"a.weight", t({8, 3, 3, 3}, 216, 81, 0.4)}, {"a.bias", t({8}, 8, 82, 0.2)},
                              {"b.weight", t({8, 8, 1, 1}, 64, 83, 0.5)}, {"b.bias", t({8}, 8, 84, 0.2)},
                              {"c.weight", t({4, 8, 3, 3}, 288, 85, 0.3)}, {"c.bias", t({4}, 4, 86, 0.2)}};
    const std::map<std::string, Tensor> inputs{{"x", t({2, 3, 6, 6}, 216, 87, 3.0)}};
    auto fused = onednn_session(graph, params, true);
    ASSERT_EQ(fused.compiled_groups().size(), 1u);
    // a, hs, b and lr; c and ab share a layout with the graph's output (sqrt's), which is plain.
    EXPECT_NE(fused.compiled_groups()[0].fused.find("4 internal tensors kept nhwc"), std::string::npos)
        << fused.compiled_groups()[0].fused;
    const auto want = reference_output(graph, params, inputs);
    double scale = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.at(i)));
    ASSERT_GT(scale, 0.5);
    expect_same(fused.run(inputs)[0], want, 1e-4 * scale);
    expect_same(onednn_session(graph, params, false).run(inputs)[0], want, 1e-4 * scale);
}

// Every kernel of a group runs with one OpenMP team size (UniformThreads in
// plugins/cpu/onednn/common.hpp): the session's thread count when one of them has work enough,
// else one thread for all, said in the group's description. Results match the reference.
TEST(OnednnCompiledGroups, AGroupOfSmallKernelsRunsOnOneThreadAndALargerOneOnAll) {
    REQUIRE_ONEDNN();
    using capsule::testing::pseudo_random;
    for (const std::int64_t rows : {2, 256}) {
        const std::string r = std::to_string(rows);
        const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
          {"id": 0, "op": "input", "name": "x", "shape": [)" + r + R"(, 256], "dtype": "float32"},
          {"id": 1, "op": "linear", "name": "fc1", "parents": [0], "attrs": {"out_features": 256}, "shape": [)" + r + R"(, 256]},
          {"id": 2, "op": "relu", "name": "relu1", "parents": [1], "shape": [)" + r + R"(, 256]},
          {"id": 3, "op": "linear", "name": "fc2", "parents": [2], "attrs": {"out_features": 8}, "shape": [)" + r + R"(, 8]},
          {"id": 4, "op": "relu", "name": "out", "parents": [3], "shape": [)" + r + R"(, 8]}
        ], "outputs": [4]})");
        const ParameterMap params = capsule::testing::random_parameters(graph, 21, 0.1);
        SessionOptions options;
        options.threads = 2;
        auto fused = capsule::testing::session_under("onednn_cpu", graph, params, options);
        ASSERT_EQ(fused.compiled_groups().size(), 1u);
        const std::string description = fused.compiled_groups()[0].fused;  // a copy: compiled_groups() returns a temporary
        // 2 * rows * 256 * 256 flops in fc1: 0.26 M for 2 rows, 33.6 M for 256.
        EXPECT_EQ(description.find("1 thread (every kernel small)") != std::string::npos, rows == 2) << description;
        const std::map<std::string, Tensor> inputs{
            {"x", Tensor::from_values(DType::float32, {rows, 256}, pseudo_random(std::size_t(rows) * 256, 22, 1.0))}};
        const auto want = reference_output(graph, params, inputs);
        expect_same(fused.run(inputs)[0], want, 1e-4);
    }
}

// A mean over a zero-size axis is NaN (reduce_mean's NaN fill), and stays NaN through the fused
// linear + clamp after it inside a compiled group (torch.clamp keeps NaN; oneDNN's clip post-op
// would give a limit, so the group must not take the fused path on it).
TEST(OnednnCompiledGroups, AMeanOfNoElementsStaysNaNThroughAFusedClamp) {
    REQUIRE_ONEDNN();
    const Graph graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 0, 3], "dtype": "float32"},
      {"id": 1, "op": "reduce_mean", "name": "mean", "parents": [0], "attrs": {"axes": [1]}, "shape": [2, 3]},
      {"id": 2, "op": "linear", "name": "fc", "parents": [1], "attrs": {"out_features": 4}, "shape": [2, 4]},
      {"id": 3, "op": "clamp", "name": "out", "parents": [2], "attrs": {"min": 0.0, "max": 6.0}, "shape": [2, 4]}
    ], "outputs": [3]})");
    const ParameterMap params = capsule::testing::random_parameters(graph, 31, 0.5);
    auto fused = onednn_session(graph, params, true);
    ASSERT_EQ(fused.compiled_groups().size(), 1u);
    const std::map<std::string, Tensor> inputs{{"x", Tensor::zeros(DType::float32, {2, 0, 3})}};
    const auto want = reference_output(graph, params, inputs);
    for (std::int64_t i = 0; i < want.numel(); ++i) ASSERT_TRUE(std::isnan(want.at(i))) << i;
    expect_same(fused.run(inputs)[0], want, 0.0);
}

TEST(OnednnCompiledGroups, ModelsFuseConvolutionsWithTheirRelu) {
    REQUIRE_ONEDNN();
    const fs::path dir = fs::path(CAPSULE_SOURCE_DIR) / "tests" / "data" / "models" / "squeezenet1_1";
    auto model = import_onnx(dir / "model.onnx");
    const auto& profile = find_builtin_profile("onednn_cpu");
    auto accepted = profile.accept_graph(capsule::testing::built_host(), model.graph);
    ASSERT_TRUE(accepted.accepted.has_value());
    ParameterMap params = model.parameters;
    auto session = Session::create(profile, *accepted.accepted, model.graph, capsule::testing::built_host(), params);
    std::size_t fused_nodes = 0;
    std::string described;
    for (const auto& g : session.compiled_groups()) {
        EXPECT_EQ(g.plugin, "onednn");
        fused_nodes += g.node_ids.size();
        described += g.fused + "; ";
    }
    std::cout << "squeezenet1_1 compiled groups: " << described << "\n";
    EXPECT_NE(described.find("conv2d+relu x"), std::string::npos) << described;
    EXPECT_GT(fused_nodes, 2u);
}

// ---- training on the oneDNN capsules (their backward kernels, VJP mode torchlean-tape) -------

// Four SGD steps of LeNet-5 (batch 64, momentum 0.9) under onednn_cpu, whose training plan puts
// the convolutions, pools, relus and linear layers (forward and backward) on the oneDNN capsules,
// give the loss and the parameters of the same steps under checked_cpu (reference capsules) within
// float32 rounding: the two differ only in summation order.
TEST(OnednnTraining, LeNetStepsMatchCheckedCpu) {
    REQUIRE_ONEDNN();
    const auto train = take_first(load_fashion_mnist(kDefaultFashionMnistDir, "train"), 256);
    TrainingConfig config{64, SgdOptions{.lr = 0.05, .momentum = 0.9}, 7};
    auto run = [&](const char* profile_name, double* loss, std::set<std::string>* onednn_ops) {
        const auto& profile = find_builtin_profile(profile_name);
        auto plans = plan_training(profile, capsule::testing::built_host(), ModelKind::lenet, config);
        EXPECT_TRUE(plans.accepted()) << profile_name;
        for (const auto& g : plans.training_plan.accepted->plan().groups)
            if (g.capsule->provider == Provider::onednn) onednn_ops->insert(std::string(to_string(g.op)));
        auto trainer = Trainer::create(profile, capsule::testing::built_host(), plans, config);
        *loss = trainer.train_epoch(train, {}).train_loss;
        return trainer.parameters();
    };
    double loss_onednn = 0, loss_checked = 0;
    std::set<std::string> on_onednn, on_onednn_checked;
    const auto onednn = run("onednn_cpu", &loss_onednn, &on_onednn);
    const auto checked = run("checked_cpu", &loss_checked, &on_onednn_checked);
    EXPECT_EQ(on_onednn, (std::set<std::string>{"conv2d", "linear", "max_pool2d", "relu"}));
    EXPECT_TRUE(on_onednn_checked.empty());
    EXPECT_NEAR(loss_onednn, loss_checked, 1e-4 * std::fabs(loss_checked));
    ASSERT_EQ(onednn.size(), checked.size());
    for (const auto& [key, t] : checked) {
        const Tensor& u = onednn.at(key);
        double scale = 0, diff = 0;
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            scale = std::max(scale, std::fabs(t.at(i)));
            diff = std::max(diff, std::fabs(u.at(i) - t.at(i)));
        }
        EXPECT_LE(diff, 1e-4 * scale) << key;
    }
}

// LeakSanitizer's exit-time tracer crashes (signal 11) while stopping the libgomp worker threads
// that oneDNN's kernels start, which would fail ASan runs of tests that passed. A process that
// loaded the oneDNN plugin skips the exit-time leak check (ASan's memory-error checks stay on);
// every other test process keeps it.
extern "C" int __lsan_is_turned_off() { return g_onednn_loaded.load() ? 1 : 0; }

// ---- backward edge cases: direct backward calls on float32 buffers, both plugins -----------------
// The backward kernels called directly (no forward in between unless the op needs its output),
// in float32 for both plugins, with hand-built inputs (NaN, infinities, ties, empty tensors),
// gradient buffers pre-filled with NaN garbage and guarded past their end, gradients the host
// does not want (data == nullptr), and inconsistent shapes.
// At e2df06d these tests fail on the faults they were written to show: conv2d's dbias zeroed
// when x is empty but dy is not, conv2d's dweight not NaN where F.conv2d's 0 * inf on the
// padding makes it NaN, gelu (tanh) backward's 1 - tanh^2 cancellation in the negative tail,
// unchecked shapes (out-of-bounds writes for conv2d with a weight whose C_in disagrees with x,
// batch_norm with parameters shorter than C, conv2d on a state whose cached primitives are for
// another batch), and refusals the reference makes that oneDNN does not.

namespace {

struct DT {
    Shape shape;
    std::vector<float> v;
};

std::int64_t numel_of(const Shape& s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
}

DT dt(Shape s, std::vector<double> v) {
    DT t{std::move(s), {}};
    for (double x : v) t.v.push_back(float(x));
    EXPECT_EQ(std::int64_t(t.v.size()), numel_of(t.shape)) << "bad test tensor";
    return t;
}
DT dt_rnd(Shape s, std::uint64_t seed) {
    const auto c = rnd(s, seed);
    return dt(c.shape, c.values);
}

constexpr float kGuard = 12345.0f;
constexpr std::size_t kGuardCount = 4096;

struct DirectResult {
    std::string error;
    std::vector<std::vector<double>> grads;  // wanted inputs, then wanted params (in order)
    bool guard_broken = false;
};

capsule_tensor_view view_of(const Shape& shape, void* data) {
    capsule_tensor_view v{};
    v.struct_size = sizeof v;
    v.dtype = CAPSULE_DTYPE_FLOAT32;
    v.device = CAPSULE_DEVICE_CPU;
    v.rank = int32_t(shape.size());
    v.shape = shape.data();
    v.strides = nullptr;
    v.data = data;
    return v;
}

CaseTensor case_of(const DT& t) {
    CaseTensor c{DType::float32, t.shape, {}};
    for (float x : t.v) c.values.push_back(x);
    return c;
}

/// Runs `capsule`'s backward directly. `want_in` / `want_param` select the gradients the host
/// wants (others get data == nullptr); `grad_shapes_in` overrides a wanted gradient's shape (the
/// buffer gets that many elements plus a guard). The forward output is the plugin's own forward
/// on the inputs when `with_output` (else a view without data, of `out_shape`).
DirectResult direct_backward(const capsule_plugin& plugin, const std::string& capsule, const std::vector<DT>& inputs,
                             const std::vector<DT>& params, const DT& gout, const Attributes& attrs,
                             std::vector<bool> want_in = {}, std::vector<bool> want_param = {},
                             bool with_output = false, std::map<std::size_t, Shape> grad_shapes_in = {},
                             std::map<std::size_t, Shape> grad_shapes_param = {}, void* state = nullptr) {
    DirectResult r;
    const capsule_kernel* k = find_kernel(plugin, capsule);
    if (!k || !k->backward) {
        r.error = "no backward kernel " + capsule;
        return r;
    }
    if (want_in.empty()) want_in.assign(inputs.size(), true);
    if (want_param.empty()) want_param.assign(params.size(), true);
    std::vector<DT> ins = inputs, ps = params;
    DT g = gout;
    std::vector<float> out_values;
    Shape out_shape = gout.shape;
    if (with_output) {
        KernelCase c;
        c.name = "direct";
        c.op = parse<BackendOp>(capsule.substr(capsule.find('.') + 1));
        for (auto& t : inputs) c.inputs.push_back(case_of(t));
        for (auto& t : params) c.params.push_back(case_of(t));
        c.attrs = attrs;
        std::string error;
        const auto y = run_forward_values(plugin, capsule, c, error);
        if (!error.empty()) {
            r.error = "forward: " + error;
            return r;
        }
        for (double v : y) out_values.push_back(float(v));
    }
    std::vector<capsule_tensor_view> in_views, param_views;
    for (auto& t : ins) in_views.push_back(view_of(t.shape, t.v.empty() ? nullptr : t.v.data()));
    for (auto& t : ps) param_views.push_back(view_of(t.shape, t.v.empty() ? nullptr : t.v.data()));
    // Every view needs non-null data for present tensors, even empty ones.
    static float dummy[1];
    for (auto& v : in_views) if (!v.data) v.data = dummy;
    for (auto& v : param_views) if (!v.data) v.data = dummy;
    capsule_tensor_view out_view = view_of(out_shape, with_output ? (out_values.empty() ? dummy : out_values.data()) : nullptr);
    capsule_tensor_view gout_view = view_of(g.shape, g.v.empty() ? dummy : g.v.data());
    std::vector<Shape> gin_shapes, gparam_shapes;
    std::vector<std::vector<float>> gin(ins.size()), gparam(ps.size());
    std::vector<capsule_tensor_view> gin_views, gparam_views;
    gin_shapes.resize(ins.size());
    gparam_shapes.resize(ps.size());
    // Each gradient buffer: NaN where the kernel must write, then kGuardCount guard values.
    auto guarded = [](const Shape& shape) {
        std::vector<float> buffer(std::size_t(numel_of(shape)) + kGuardCount, kGuard);
        std::fill(buffer.begin(), buffer.begin() + numel_of(shape), std::numeric_limits<float>::quiet_NaN());
        return buffer;
    };
    for (std::size_t i = 0; i < ins.size(); ++i) {
        gin_shapes[i] = grad_shapes_in.count(i) ? grad_shapes_in[i] : ins[i].shape;
        gin[i] = guarded(gin_shapes[i]);
    }
    for (std::size_t i = 0; i < ps.size(); ++i) {
        gparam_shapes[i] = grad_shapes_param.count(i) ? grad_shapes_param[i] : ps[i].shape;
        gparam[i] = guarded(gparam_shapes[i]);
    }
    for (std::size_t i = 0; i < ins.size(); ++i)
        gin_views.push_back(view_of(gin_shapes[i], want_in[i] ? gin[i].data() : nullptr));
    for (std::size_t i = 0; i < ps.size(); ++i)
        gparam_views.push_back(view_of(gparam_shapes[i], want_param[i] ? gparam[i].data() : nullptr));
    AttributeViews av(attrs);
    capsule_backward_args a{};
    a.struct_size = sizeof a;
    a.inputs = in_views.data(); a.num_inputs = in_views.size();
    a.params = param_views.data(); a.num_params = param_views.size();
    a.outputs = &out_view; a.num_outputs = 1;
    a.grad_outputs = &gout_view;
    a.grad_inputs = gin_views.data();
    a.grad_params = gparam_views.data();
    a.attrs = av.data(); a.num_attrs = av.size();
    a.state = state;
    capsule_status st{};
    st.struct_size = sizeof st;
    if (k->backward(&a, &st) != CAPSULE_OK) r.error = std::string("backward failed: ") + st.message;
    auto guard_ok = [](const std::vector<float>& b, std::int64_t n) {
        for (std::size_t i = std::size_t(n); i < b.size(); ++i)
            if (b[i] != kGuard) return false;
        return true;
    };
    for (std::size_t i = 0; i < ins.size(); ++i) {
        if (!guard_ok(gin[i], numel_of(gin_shapes[i]))) r.guard_broken = true;
        if (want_in[i]) r.grads.emplace_back(gin[i].begin(), gin[i].begin() + numel_of(gin_shapes[i]));
    }
    for (std::size_t i = 0; i < ps.size(); ++i) {
        if (!guard_ok(gparam[i], numel_of(gparam_shapes[i]))) r.guard_broken = true;
        if (want_param[i]) r.grads.emplace_back(gparam[i].begin(), gparam[i].begin() + numel_of(gparam_shapes[i]));
    }
    return r;
}

/// "" when the two plugins' gradients agree: NaN with NaN, an infinity with the same one, else
/// within 1e-4 of the gradient's largest finite magnitude (floor 1e-30), element by element.
std::string agree(const DirectResult& got, const DirectResult& want, double abs_floor = 0) {
    std::ostringstream os;
    if (got.guard_broken) os << "onednn wrote past a gradient buffer; ";
    if (want.guard_broken) os << "reference wrote past a gradient buffer; ";
    if (!got.error.empty() || !want.error.empty()) {
        if (got.error.empty() != want.error.empty())
            os << "onednn error '" << got.error << "' vs reference error '" << want.error << "'";
        return os.str();
    }
    if (got.grads.size() != want.grads.size()) {
        os << got.grads.size() << " gradients vs " << want.grads.size();
        return os.str();
    }
    for (std::size_t t = 0; t < want.grads.size(); ++t) {
        double scale = 1e-30;
        for (double w : want.grads[t]) if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
        for (std::size_t i = 0; i < want.grads[t].size(); ++i) {
            const double g = got.grads[t][i], w = want.grads[t][i];
            bool ok;
            if (std::isnan(w)) ok = std::isnan(g);
            else if (std::isinf(w)) ok = g == w;
            else ok = std::fabs(g - w) <= std::max(1e-4 * scale, abs_floor);
            if (!ok) {
                os << "gradient " << t << " element " << i << ": onednn " << g << ", reference " << w << "; ";
                break;
            }
        }
    }
    return os.str();
}

struct Edge {
    std::string name;
    std::string op;
    std::vector<DT> inputs, params;
    DT gout;
    Attributes attrs;
    std::vector<bool> want_in, want_param;
    bool with_output = false;
    /// An absolute tolerance floor (where the forward output the backward reads is itself
    /// rounded differently).
    double abs_floor = 0;
};

/// "" when the two plugins' forward outputs on edge `e` agree (as `agree` compares gradients),
/// or both refuse the call.
std::string forward_agrees(const Edge& e) {
    KernelCase c;
    c.name = e.name;
    c.op = parse<BackendOp>(e.op);
    for (const auto& t : e.inputs) c.inputs.push_back(case_of(t));
    for (const auto& t : e.params) c.params.push_back(case_of(t));
    c.attrs = e.attrs;
    DirectResult want, got;
    want.grads.push_back(run_forward_values(reference_plugin(), "reference." + e.op, c, want.error));
    got.grads.push_back(run_forward_values(*onednn_plugin(), "onednn." + e.op, c, got.error));
    const std::string differs = agree(got, want, e.abs_floor);
    return differs.empty() ? "" : "forward: " + differs;
}

std::string run_edge(const Edge& e) {
    if (std::string differs = forward_agrees(e); !differs.empty()) return differs;
    const auto want = direct_backward(reference_plugin(), "reference." + e.op, e.inputs, e.params, e.gout, e.attrs,
                                      e.want_in, e.want_param, e.with_output);
    const auto got = direct_backward(*onednn_plugin(), "onednn." + e.op, e.inputs, e.params, e.gout, e.attrs,
                                     e.want_in, e.want_param, e.with_output);
    return agree(got, want, e.abs_floor);
}

}  // namespace

namespace {

using A = Attributes;
constexpr double kI = std::numeric_limits<double>::infinity();
constexpr double kN = std::numeric_limits<double>::quiet_NaN();

DT ramp(Shape s, double start = 1.0, double step = 1.0) {
    std::vector<double> v(std::size_t(numel_of(s)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + step * double(i);
    return dt(s, v);
}

std::vector<Edge> edges() {
    std::vector<Edge> e;
    auto unary = [&](std::string name, std::string op, DT x, A a = {}, bool y = false) {
        Edge c{name, op, {x}, {}, ramp(x.shape, 0.5, 0.25), a, {}, {}, y};
        e.push_back(c);
    };
    // relu at 0, -0, NaN, infinities
    unary("relu/specials", "relu", dt({8}, {0, -0.0, kN, 1, -1, kI, -kI, 1e-45}));
    unary("relu/rank0", "relu", dt({}, {0}));
    unary("relu/empty", "relu", dt({0, 3}, {}));
    // clamp
    const DT cx = dt({10}, {0, 1, kN, -kI, kI, 0.5, 2, -1, 1e-8, 0.99999994});
    unary("clamp/both", "clamp", cx, {{"min", 0.0}, {"max", 1.0}});
    unary("clamp/min_gt_max", "clamp", cx, {{"min", 1.0}, {"max", 0.0}});
    unary("clamp/equal_bounds", "clamp", cx, {{"min", 0.5}, {"max", 0.5}});
    unary("clamp/only_min", "clamp", cx, {{"min", 0.0}});
    unary("clamp/only_max", "clamp", cx, {{"max", 1.0}});
    unary("clamp/int_bounds", "clamp", cx, {{"min", std::int64_t(0)}, {"max", std::int64_t(1)}});
    unary("clamp/bound_not_float_exact", "clamp", dt({3}, {0.1, 0.2, 0.30000001}), {{"min", 0.1}, {"max", 0.3}});
    unary("clamp/inf_bounds", "clamp", cx, {{"min", -kI}, {"max", kI}});
    // gelu
    const DT gx = dt({12}, {-10, 10, -5, 0, kN, kI, -kI, -30, 3, -3, 1e30, -1e30});
    unary("gelu/none_specials", "gelu", gx);
    unary("gelu/tanh_specials", "gelu", gx, {{"approximate", std::string("tanh")}});
    unary("gelu/tanh_negative_tail", "gelu", dt({5}, {-4.5, -5, -5.5, -6, -7}), {{"approximate", std::string("tanh")}});
    unary("gelu/none_negative_tail", "gelu", dt({5}, {-4.5, -5, -5.5, -6, -7}));
    // oneDNN's gelu forward in that tail (|y| < 2e-5) is within 1e-7 absolute, not relative, of
    // PyTorch's: its erf and tanh are polynomial approximations.
    e[e.size() - 2].abs_floor = e.back().abs_floor = 1e-7;
    unary("gelu/tanh_1e20", "gelu", dt({2}, {1e20, -1e20}), {{"approximate", std::string("tanh")}});
    // sigmoid / tanh (from the forward output)
    const DT sx = dt({8}, {-100, 100, kN, kI, -kI, 0, -20, 20});
    unary("sigmoid/specials", "sigmoid", sx, {}, true);
    unary("tanh/specials", "tanh", sx, {}, true);
    unary("sigmoid/rank0", "sigmoid", dt({}, {0.5}), {}, true);
    // softmax / log_softmax
    unary("softmax/size1_axis", "softmax", dt({3, 1}, {1, kI, -kI}), {}, true);
    unary("softmax/size1_axis0", "softmax", dt({1, 4}, {1, 2, 3, 4}), {{"axis", std::int64_t(0)}}, true);
    unary("softmax/minus_inf", "softmax", dt({2, 3}, {-kI, 0, 1, -kI, -kI, -kI}), {}, true);
    unary("softmax/rank0", "softmax", dt({}, {3}), {}, true);
    unary("softmax/empty_axis", "softmax", dt({2, 0}, {}), {}, true);
    unary("log_softmax/minus_inf", "log_softmax", dt({2, 3}, {-kI, 0, 1, -kI, -kI, -kI}), {}, true);
    // The unary eltwise capsules at their special values: 0, -0, NaN, ±inf, the kinks, tails.
    const DT specials = dt({12}, {0, -0.0, kN, kI, -kI, 1, -1, 3, -3, 50, -50, 1e-30});
    unary("abs/specials", "abs", specials);
    unary("sqrt/specials", "sqrt", specials);
    unary("leaky_relu/specials", "leaky_relu", specials);
    unary("leaky_relu/negative_slope", "leaky_relu", specials, {{"negative_slope", -2.0}});
    unary("leaky_relu/zero_slope", "leaky_relu", specials, {{"negative_slope", 0.0}});
    unary("hardswish/specials", "hardswish", dt({14}, {0, -0.0, kN, kI, -kI, 3, -3, 2.999, -2.999, 3.001, -3.001, 6, -6, 1}));
    unary("hardswish/huge", "hardswish", dt({6}, {3e38, 1e38, 6e37, 5e37, -3e38, 3.4e38}));
    // A +inf (or a NaN) makes PyTorch's whole slice NaN (inf - inf in x - max), on every axis.
    unary("softmax/plus_inf_last", "softmax", dt({3, 3}, {kI, 1, 2, kI, kI, 1, 0, 1, 2}), {}, true);
    unary("softmax/plus_inf_axis0", "softmax", dt({3, 2}, {kI, 1, 2, 3, 4, 5}), {{"axis", std::int64_t(0)}}, true);
    unary("softmax/nan_and_plus_inf", "softmax", dt({2, 4}, {kN, kI, 0, 1, -kI, 2, 3, 4}), {}, true);
    unary("log_softmax/plus_inf_last", "log_softmax", dt({2, 3}, {kI, 1, 2, 3, -kI, 1}), {}, true);
    unary("log_softmax/plus_inf_axis1", "log_softmax", dt({2, 3, 2}, {kI, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, kI}),
          {{"axis", std::int64_t(1)}}, true);
    // oneDNN's forward log_softmax gives 1.43e-6, not 0, on a size-1 axis (its log(1)); the
    // backward reads that y: dx = dy (1 - exp(y)) = -1.4e-6 dy instead of 0.
    unary("log_softmax/size1_axis", "log_softmax", dt({3, 1}, {1, kI, -kI}), {}, true);
    e.back().abs_floor = 2e-6;
    unary("log_softmax/nan", "log_softmax", dt({2, 2}, {kN, 0, 1, 2}), {}, true);
    {
        Edge c{"softmax/inf_grad", "softmax", {dt({3}, {0, 1, -kI})}, {}, dt({3}, {kI, 1, 1}), {}, {}, {}, true};
        e.push_back(c);
        c.name = "log_softmax/inf_grad";
        c.op = "log_softmax";
        e.push_back(c);
        c.name = "softmax/huge_grad_sum";
        c.op = "softmax";
        c.inputs = {dt({3}, {0, 0, 0})};
        c.gout = dt({3}, {3e38, 3e38, 3e38});
        e.push_back(c);
        c.name = "log_softmax/huge_grad_sum";
        c.op = "log_softmax";
        e.push_back(c);
    }
    // binary broadcasting
    auto bin = [&](std::string name, std::string op, DT a, DT b, Shape out, std::vector<bool> want = {}) {
        Edge c{name, op, {a, b}, {}, ramp(out, 0.5, 0.25), {}, want, {}, false};
        e.push_back(c);
    };
    for (std::string op : {"add", "sub", "mul"}) {
        bin(op + "/both_rank0", op, dt({}, {2}), dt({}, {3}), {});
        bin(op + "/rank0_and_1", op, dt({}, {2}), dt({1}, {3}), {1});
        bin(op + "/rank0_and_empty", op, dt({}, {2}), dt({0}, {}), {0});
        bin(op + "/size1_vs_empty", op, dt({1, 3}, {1, 2, 3}), dt({0, 3}, {}), {0, 3});
        bin(op + "/empty_inner", op, dt({2, 0}, {}), dt({2, 1}, {1, 2}), {2, 0});
        bin(op + "/both_broadcast_rank_diff", op, ramp({1, 3, 1}), ramp({2, 1, 1, 4}), {2, 1, 3, 4});
        bin(op + "/all_ones", op, ramp({1, 1}), ramp({1}), {1, 1});
        bin(op + "/only_b_wanted", op, ramp({2, 3}), ramp({3}), {2, 3}, {false, true});
        bin(op + "/only_a_wanted", op, ramp({2, 3}), ramp({1, 1}), {2, 3}, {true, false});
        bin(op + "/none_wanted", op, ramp({2, 3}), ramp({3}), {2, 3}, {false, false});
    }
    bin("mul/nonfinite", "mul", dt({4}, {kI, 0, kN, -kI}), dt({4}, {0, kI, 1, 2}), {4});
    bin("mul/nonfinite_broadcast", "mul", dt({2, 1}, {kI, 0}), dt({3}, {0, 1, kN}), {2, 3});
    // reduce_mean
    auto red = [&](std::string name, DT x, Shape out, A a) {
        Edge c{name, "reduce_mean", {x}, {}, ramp(out, 0.5, 0.25), a, {}, {}, false};
        e.push_back(c);
    };
    red("reduce_mean/all_axes_default", ramp({2, 3}), {}, {});
    red("reduce_mean/all_axes_keepdims", ramp({2, 3}), {1, 1}, {{"keepdims", true}});
    red("reduce_mean/all_axes_listed", ramp({2, 3}), {}, {{"axes", Ints{0, 1}}});
    red("reduce_mean/rank0", dt({}, {4}), {}, {});
    red("reduce_mean/negative_axes", ramp({2, 3, 4}), {2, 4}, {{"axes", Ints{-2}}});
    red("reduce_mean/empty_reduced", dt({0, 3}, {}), {3}, {{"axes", Ints{0}}});
    red("reduce_mean/empty_kept", dt({0, 3}, {}), {0}, {{"axes", Ints{1}}});
    red("reduce_mean/nonfinite_grad", ramp({2, 2}), {2}, {{"axes", Ints{1}}});
    e.back().gout = dt({2}, {kI, kN});
    red("reduce_mean/empty_axes_list", ramp({2, 3}), {2, 3}, {{"axes", Ints{}}});
    red("reduce_mean/repeated_axis", ramp({2, 3}), {2}, {{"axes", Ints{1, 1}}});
    // concat
    auto cat = [&](std::string name, std::vector<DT> xs, Shape out, std::int64_t axis, std::vector<bool> want = {}) {
        Edge c{name, "concat", xs, {}, ramp(out, 0.5, 0.25), {{"axis", axis}}, want, {}, false};
        e.push_back(c);
    };
    cat("concat/axis0", {ramp({1, 3}), ramp({2, 3})}, {3, 3}, 0);
    cat("concat/last_axis", {ramp({2, 1}), ramp({2, 3})}, {2, 4}, -1);
    cat("concat/zero_size_input", {ramp({2, 2}), dt({2, 0}, {}), ramp({2, 1})}, {2, 3}, 1);
    cat("concat/all_empty_outer", {dt({0, 2}, {}), dt({0, 1}, {})}, {0, 3}, 1);
    cat("concat/empty_inner", {dt({2, 0}, {}), dt({3, 0}, {})}, {5, 0}, 0);
    cat("concat/one_wanted", {ramp({2, 2}), ramp({2, 1}), ramp({2, 3})}, {2, 6}, 1, {false, true, false});
    cat("concat/rank1", {ramp({2}), ramp({3})}, {5}, 0);
    cat("concat/single", {ramp({2, 3})}, {2, 3}, 1);
    // batch_norm
    {
        Edge c{"batch_norm/no_affine", "batch_norm", {dt_rnd({2, 3, 2}, 11)}, {ramp({3}, 0.1, 0.1), ramp({3}, 0.5, 0.5)},
               ramp({2, 3, 2}, 0.5, 0.25), {{"affine", false}}, {}, {}, false};
        e.push_back(c);
        c.name = "batch_norm/affine_rank2";
        c.inputs = {dt_rnd({4, 3}, 12)};
        c.params = {ramp({3}, -1, 0.5), ramp({3}), ramp({3}, 0.1, 0.1), ramp({3}, 0.5, 0.5)};
        c.gout = ramp({4, 3}, 0.5, 0.25);
        c.attrs = {};
        e.push_back(c);
        c.name = "batch_norm/affine_only_dx";
        c.want_param = {false, false, false, false};
        e.push_back(c);
        c.name = "batch_norm/affine_only_dbias";
        c.want_in = {false};
        c.want_param = {false, true, false, false};
        e.push_back(c);
        c.name = "batch_norm/zero_batch";
        c.want_in = {};
        c.want_param = {};
        c.inputs = {dt({0, 3}, {})};
        c.gout = dt({0, 3}, {});
        e.push_back(c);
        c.name = "batch_norm/zero_var_eps0";
        c.inputs = {dt({2, 3}, {1, 2, 3, 4, 5, 6})};
        c.gout = ramp({2, 3}, 0.5, 0.25);
        c.params = {ramp({3}), ramp({3}), dt({3}, {1, 2, 3}), dt({3}, {0, 0, 1})};
        c.attrs = {{"eps", 0.0}};
        e.push_back(c);
    }
    // pools
    auto pool = [&](std::string name, std::string op, DT x, Shape out, A a) {
        Edge c{name, op, {x}, {}, ramp(out, 0.5, 0.25), a, {}, {}, false};
        e.push_back(c);
    };
    const A k2{{"kernel_size", Ints{2, 2}}};
    pool("max_pool2d/ties", "max_pool2d", dt({1, 1, 2, 4}, {1, 1, 2, 2, 1, 1, 2, 2}), {1, 1, 1, 2}, k2);
    pool("max_pool2d/nan_first", "max_pool2d", dt({1, 1, 2, 2}, {kN, 5, 1, 2}), {1, 1, 1, 1}, k2);
    pool("max_pool2d/nan_last", "max_pool2d", dt({1, 1, 2, 2}, {1, 5, 2, kN}), {1, 1, 1, 1}, k2);
    pool("max_pool2d/two_nans", "max_pool2d", dt({1, 1, 2, 2}, {kN, 5, kN, 2}), {1, 1, 1, 1}, k2);
    pool("max_pool2d/all_minus_inf", "max_pool2d", dt({1, 1, 2, 2}, {-kI, -kI, -kI, -kI}), {1, 1, 1, 1}, k2);
    pool("max_pool2d/minus_inf_and_nan", "max_pool2d", dt({1, 1, 2, 2}, {-kI, kN, -kI, -kI}), {1, 1, 1, 1}, k2);
    pool("max_pool2d/inf_tie", "max_pool2d", dt({1, 1, 2, 2}, {1, kI, kI, 2}), {1, 1, 1, 1}, k2);
    pool("max_pool2d/overlap_stride1", "max_pool2d", dt({1, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}), {1, 1, 2, 2},
         {{"kernel_size", Ints{2, 2}}, {"stride", Ints{1, 1}}});
    pool("max_pool2d/asym_stride", "max_pool2d", dt_rnd({1, 2, 5, 7}, 21), {1, 2, 2, 3},
         {{"kernel_size", Ints{2, 3}}, {"stride", Ints{2, 2}}});
    pool("max_pool2d/empty_batch", "max_pool2d", dt({0, 2, 4, 4}, {}), {0, 2, 2, 2}, k2);
    pool("max_pool2d/zero_channels", "max_pool2d", dt({1, 0, 4, 4}, {}), {1, 0, 2, 2}, k2);
    const A pad1c{{"kernel_size", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}, {"ceil_mode", true}};
    pool("max_pool2d_pad/ceil_pad_minus_inf", "max_pool2d_pad", dt({1, 1, 4, 4}, std::vector<double>(16, -kI)), {1, 1, 3, 3}, pad1c);
    pool("max_pool2d_pad/ceil_pad_nan", "max_pool2d_pad", dt({1, 1, 4, 4}, {kN, 1, 2, 3, 4, kN, 6, 7, 8, 9, kN, 11, 12, 13, 14, kN}), {1, 1, 3, 3}, pad1c);
    pool("max_pool2d_pad/ceil_ties", "max_pool2d_pad", dt({1, 1, 4, 4}, std::vector<double>(16, 1.0)), {1, 1, 3, 3}, pad1c);
    pool("avg_pool2d_pad/ceil_include_pad", "avg_pool2d_pad", ramp({1, 1, 4, 4}), {1, 1, 3, 3},
         {{"kernel_size", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}, {"ceil_mode", true}});
    pool("avg_pool2d_pad/ceil_exclude_pad", "avg_pool2d_pad", ramp({1, 1, 4, 4}), {1, 1, 3, 3},
         {{"kernel_size", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}, {"ceil_mode", true},
          {"count_include_pad", false}});
    pool("avg_pool2d_pad/ceil_no_pad_include", "avg_pool2d_pad", ramp({1, 1, 5, 5}), {1, 1, 3, 3},
         {{"kernel_size", Ints{2, 2}}, {"stride", Ints{2, 2}}, {"ceil_mode", true}});
    pool("avg_pool2d_pad/ceil_pad_k2", "avg_pool2d_pad", ramp({1, 1, 5, 5}), {1, 1, 3, 3},
         {{"kernel_size", Ints{2, 2}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}, {"ceil_mode", true}});
    pool("avg_pool2d_pad/nonfinite", "avg_pool2d_pad", dt({1, 1, 2, 2}, {kI, 1, kN, 2}), {1, 1, 3, 3},
         {{"kernel_size", Ints{2, 2}}, {"stride", Ints{1, 1}}, {"padding", Ints{1, 1}}});
    pool("avg_pool2d/asym", "avg_pool2d", dt_rnd({2, 1, 5, 6}, 22), {2, 1, 2, 3}, {{"kernel_size", Ints{3, 2}}, {"stride", Ints{2, 2}}});
    pool("max_pool2d/stride_default_int", "max_pool2d", dt_rnd({1, 1, 6, 6}, 23), {1, 1, 2, 2}, {{"kernel_size", std::int64_t(3)}});
    // conv2d
    auto conv = [&](std::string name, DT x, std::int64_t o, Ints k, Ints s, Ints p, Ints d, std::int64_t g, bool bias,
                    Shape out, std::vector<bool> want_param = {}, std::vector<bool> want_in = {}) {
        A a{{"out_channels", o}, {"kernel_size", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"groups", g}, {"bias", bias}};
        std::vector<DT> params{dt_rnd({o, g == 0 ? 0 : x.shape[1] / g, k[0], k[1]}, 31 + e.size())};
        if (bias) params.push_back(dt_rnd({o}, 32 + e.size()));
        Edge c{name, "conv2d", {x}, params, ramp(out, 0.5, 0.01), a, want_in, want_param, false};
        e.push_back(c);
    };
    conv("conv2d/pad_larger_than_kernel", dt_rnd({1, 2, 3, 3}, 40), 2, {1, 1}, {1, 1}, {2, 2}, {1, 1}, 1, true, {1, 2, 7, 7});
    conv("conv2d/pad_larger_than_kernel_3x3", dt_rnd({1, 2, 4, 4}, 41), 3, {3, 3}, {1, 1}, {4, 4}, {1, 1}, 1, true, {1, 3, 10, 10});
    conv("conv2d/asym_stride_pad", dt_rnd({2, 2, 7, 6}, 42), 3, {3, 2}, {3, 1}, {2, 0}, {1, 2}, 1, true, {2, 3, 3, 3});
    conv("conv2d/stride_skips_rows", dt_rnd({1, 1, 8, 8}, 43), 1, {1, 1}, {3, 3}, {0, 0}, {1, 1}, 1, false, {1, 1, 3, 3});
    conv("conv2d/only_dbias", dt_rnd({2, 2, 5, 5}, 44), 3, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {2, 3, 5, 5}, {false, true}, {false});
    conv("conv2d/only_dweight", dt_rnd({2, 2, 5, 5}, 45), 3, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {2, 3, 5, 5}, {true, false}, {false});
    conv("conv2d/only_dx", dt_rnd({2, 2, 5, 5}, 46), 3, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {2, 3, 5, 5}, {false, false}, {true});
    conv("conv2d/depthwise_dilated", dt_rnd({1, 4, 9, 9}, 47), 4, {3, 3}, {2, 1}, {2, 2}, {2, 3}, 4, true, {1, 4, 5, 5});
    conv("conv2d/groups3_mult2", dt_rnd({2, 6, 5, 5}, 48), 6, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 3, false, {2, 6, 4, 4});
    conv("conv2d/empty_batch", dt({0, 2, 5, 5}, {}), 3, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {0, 3, 5, 5});
    conv("conv2d/empty_width_padded_output", dt({1, 2, 5, 0}, {}), 3, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, true, {1, 3, 7, 2});
    conv("conv2d/zero_in_channels", dt({2, 0, 4, 4}, {}), 3, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {2, 3, 4, 4});
    conv("conv2d/zero_out_channels", dt_rnd({2, 2, 4, 4}, 55), 0, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {2, 0, 4, 4});
    conv("conv2d/kernel_equals_input", dt_rnd({2, 3, 4, 4}, 49), 5, {4, 4}, {1, 1}, {0, 0}, {1, 1}, 1, true, {2, 5, 1, 1});
    conv("conv2d/1x1_input_pad", dt_rnd({1, 2, 1, 1}, 50), 2, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {1, 2, 1, 1});
    {
        // An infinite upstream gradient at a border output: F.conv2d's weight gradient multiplies
        // the padding zeros by it (0 * inf = NaN).
        conv("conv2d/inf_grad_border", dt_rnd({1, 1, 3, 3}, 51), 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {1, 1, 3, 3});
        e.back().gout = dt({1, 1, 3, 3}, {kI, 0, 0, 0, 0, 0, 0, 0, 0});
        conv("conv2d/inf_weight", dt_rnd({1, 1, 3, 3}, 52), 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {1, 1, 3, 3});
        e.back().params[0].v[0] = std::numeric_limits<float>::infinity();
        conv("conv2d/inf_input", dt_rnd({1, 1, 3, 3}, 53), 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, {1, 1, 3, 3});
        e.back().inputs[0].v[4] = std::numeric_limits<float>::infinity();
        conv("conv2d/nan_grad_stride2", dt_rnd({1, 1, 5, 5}, 54), 1, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false, {1, 1, 3, 3});
        e.back().gout.v[8] = std::numeric_limits<float>::quiet_NaN();
    }
    // matmul
    auto mm = [&](std::string name, Shape a, Shape b, Shape out, std::vector<bool> want = {}) {
        Edge c{name, "matmul", {dt_rnd(a, 60 + e.size()), dt_rnd(b, 61 + e.size())}, {}, ramp(out, 0.5, 0.25), {}, want, {}, false};
        e.push_back(c);
    };
    mm("matmul/dot", {3}, {3}, {});
    mm("matmul/vec_mat", {3}, {3, 4}, {4});
    mm("matmul/mat_vec", {2, 3}, {3}, {2});
    mm("matmul/vec_batched", {3}, {2, 3, 4}, {2, 4});
    mm("matmul/batched_vec", {2, 5, 3}, {3}, {2, 5});
    mm("matmul/batch1_vs_n", {1, 2, 3}, {4, 3, 2}, {4, 2, 2});
    mm("matmul/n_vs_batch1", {4, 2, 3}, {1, 3, 2}, {4, 2, 2});
    mm("matmul/both_broadcast", {2, 1, 2, 3}, {1, 3, 3, 2}, {2, 3, 2, 2});
    mm("matmul/rank_diff", {2, 3}, {5, 1, 3, 2}, {5, 1, 2, 2});
    mm("matmul/k0", {2, 0}, {0, 3}, {2, 3});
    mm("matmul/n0", {0, 3}, {3, 2}, {0, 2});
    mm("matmul/batch0", {0, 2, 3}, {3, 2}, {0, 2, 2});
    mm("matmul/batch0_vs_1", {0, 2, 3}, {1, 3, 2}, {0, 2, 2});
    mm("matmul/only_b", {2, 3}, {3, 4}, {2, 4}, {false, true});
    mm("matmul/only_a", {2, 3}, {3, 4}, {2, 4}, {true, false});
    {
        Edge c{"matmul/nonfinite", "matmul", {dt({1, 2}, {kI, 0}), dt({2, 2}, {0, 1, kN, 2})}, {}, dt({1, 2}, {1, 0}), {}, {}, {}, false};
        e.push_back(c);
    }
    // linear
    auto lin = [&](std::string name, Shape x, std::int64_t out, bool bias, Shape y, std::vector<bool> want_param = {},
                   std::vector<bool> want_in = {}) {
        std::vector<DT> params{dt_rnd({out, x.back()}, 70 + e.size())};
        if (bias) params.push_back(dt_rnd({out}, 71 + e.size()));
        A a{{"out_features", out}};
        if (!bias) a["bias"] = false;
        Edge c{name, "linear", {dt_rnd(x, 72 + e.size())}, params, ramp(y, 0.5, 0.25), a, want_in, want_param, false};
        e.push_back(c);
    };
    lin("linear/1d", {3}, 2, true, {2});
    lin("linear/rows0", {0, 3}, 2, true, {0, 2});
    lin("linear/in0", {2, 0}, 3, true, {2, 3});
    lin("linear/out0", {2, 3}, 0, true, {2, 0});
    lin("linear/4d", {2, 1, 2, 3}, 4, false, {2, 1, 2, 4});
    lin("linear/only_dbias", {2, 3}, 4, true, {2, 4}, {false, true}, {false});
    lin("linear/only_dx", {2, 3}, 4, true, {2, 4}, {false, false}, {true});
    lin("linear/nonfinite_grad", {2, 3}, 2, true, {2, 2});
    e.back().gout = dt({2, 2}, {kI, 0, 0, kN});
    return e;
}

}  // namespace

TEST(OnednnBackwardEdges, AgreeWithTheReferenceInFloat32) {
    REQUIRE_ONEDNN();
    for (const auto& c : edges()) EXPECT_EQ(run_edge(c), "") << c.name;
}

namespace {

/// A backward call with inconsistent shapes: the oneDNN kernel must refuse it (the reference
/// capsule does) and write nothing past any gradient buffer.
struct Bad {
    std::string name;
    Edge call;
    std::map<std::size_t, Shape> grad_in, grad_param;
};

std::vector<Bad> bad_calls() {
    std::vector<Bad> b;
    const A conv_attrs{{"out_channels", std::int64_t(2)}, {"kernel_size", Ints{3, 3}}, {"stride", Ints{1, 1}},
                       {"padding", Ints{0, 0}}, {"dilation", Ints{1, 1}}, {"groups", std::int64_t(1)}, {"bias", true}};
    // weight [2, 3, 3, 3] for an input of 4 channels: weight's C_in disagrees with x.
    b.push_back({"conv2d/weight_cin_mismatch",
                 {"", "conv2d", {dt_rnd({1, 4, 5, 5}, 1)}, {dt_rnd({2, 3, 3, 3}, 2), dt_rnd({2}, 3)}, ramp({1, 2, 3, 3}),
                  conv_attrs, {}, {}, false}});
    // dy one row and column larger than the convolution's output.
    b.push_back({"conv2d/dy_too_large",
                 {"", "conv2d", {dt_rnd({1, 3, 5, 5}, 1)}, {dt_rnd({2, 3, 3, 3}, 2), dt_rnd({2}, 3)}, ramp({1, 2, 4, 4}),
                  conv_attrs, {}, {}, false}});
    // bias of 3 for 2 output channels.
    b.push_back({"conv2d/bias_too_large",
                 {"", "conv2d", {dt_rnd({1, 3, 5, 5}, 1)}, {dt_rnd({2, 3, 3, 3}, 2), dt_rnd({3}, 3)}, ramp({1, 2, 3, 3}),
                  conv_attrs, {}, {}, false}});
    // grad weight view of the wrong shape.
    b.push_back({"conv2d/grad_weight_wrong_shape",
                 {"", "conv2d", {dt_rnd({1, 3, 5, 5}, 1)}, {dt_rnd({2, 3, 3, 3}, 2), dt_rnd({2}, 3)}, ramp({1, 2, 3, 3}),
                  conv_attrs, {}, {}, false},
                 {},
                 {{0, Shape{2, 3, 2, 2}}}});
    // pools: dy larger and smaller than the pool's output.
    const A k2{{"kernel_size", Ints{2, 2}}};
    b.push_back({"max_pool2d/dy_too_large", {"", "max_pool2d", {dt_rnd({1, 1, 4, 4}, 4)}, {}, ramp({1, 1, 3, 3}), k2, {}, {}, false}});
    b.push_back({"avg_pool2d/dy_too_small", {"", "avg_pool2d", {dt_rnd({1, 1, 4, 4}, 4)}, {}, ramp({1, 1, 1, 1}), k2, {}, {}, false}});
    b.push_back({"max_pool2d/kernel_larger_than_input",
                 {"", "max_pool2d", {dt_rnd({1, 1, 2, 2}, 4)}, {}, ramp({1, 1, 1, 1}), {{"kernel_size", Ints{3, 3}}}, {}, {}, false}});
    b.push_back({"max_pool2d_pad/padding_over_half_kernel",
                 {"", "max_pool2d_pad", {dt_rnd({1, 1, 4, 4}, 4)}, {}, ramp({1, 1, 4, 4}),
                  {{"kernel_size", Ints{2, 2}}, {"stride", Ints{1, 1}}, {"padding", Ints{2, 2}}}, {}, {}, false}});
    b.push_back({"max_pool2d/grad_input_wrong_shape",
                 {"", "max_pool2d", {dt_rnd({1, 1, 4, 4}, 4)}, {}, ramp({1, 1, 2, 2}), k2, {}, {}, false}, {{0, Shape{1, 1, 2, 2}}}});
    // batch_norm: running statistics and weight shorter than C.
    b.push_back({"batch_norm/params_shorter_than_C",
                 {"", "batch_norm", {dt_rnd({2, 4, 3}, 5)}, {ramp({2}), ramp({2}), ramp({2}), ramp({2})}, ramp({2, 4, 3}), {}, {}, {}, false}});
    b.push_back({"batch_norm/dy_other_shape_same_count",
                 {"", "batch_norm", {dt_rnd({2, 4, 3}, 5)}, {ramp({4}), ramp({4}), ramp({4}), ramp({4})}, ramp({4, 2, 3}), {}, {}, {}, false}});
    // linear: dy rows disagree.
    b.push_back({"linear/dy_rows_mismatch",
                 {"", "linear", {dt_rnd({2, 3, 4}, 6)}, {dt_rnd({5, 4}, 7)}, ramp({3, 2, 5}), {{"out_features", std::int64_t(5)}, {"bias", false}}, {}, {}, false}});
    b.push_back({"linear/grad_bias_wrong_shape",
                 {"", "linear", {dt_rnd({2, 4}, 6)}, {dt_rnd({5, 4}, 7), dt_rnd({5}, 8)}, ramp({2, 5}), {{"out_features", std::int64_t(5)}}, {}, {}, false},
                 {},
                 {{1, Shape{6}}}});
    // matmul: dc of another shape with the same count.
    b.push_back({"matmul/dc_transposed_shape", {"", "matmul", {dt_rnd({2, 3}, 9), dt_rnd({3, 4}, 10)}, {}, ramp({4, 2}), {}, {}, {}, false}});
    b.push_back({"matmul/grad_a_wrong_shape",
                 {"", "matmul", {dt_rnd({2, 3}, 9), dt_rnd({3, 4}, 10)}, {}, ramp({2, 4}), {}, {}, {}, false}, {{0, Shape{3, 2}}}});
    // binary: dy not the broadcast of a and b.
    b.push_back({"add/dy_larger_than_broadcast", {"", "add", {ramp({1, 3}), ramp({3})}, {}, ramp({4, 3}), {}, {}, {}, false}});
    b.push_back({"mul/grad_b_wrong_shape",
                 {"", "mul", {ramp({2, 3}), ramp({3})}, {}, ramp({2, 3}), {}, {}, {}, false}, {{1, Shape{2, 3}}}});
    // unary: dy of another shape, same count; forward output of the wrong size.
    b.push_back({"relu/dy_other_shape", {"", "relu", {ramp({2, 3})}, {}, ramp({3, 2}), {}, {}, {}, false}});
    b.push_back({"softmax/dy_other_shape", {"", "softmax", {ramp({2, 3})}, {}, ramp({3, 2}), {}, {}, {}, true}});
    // concat: gradient of another shape with the same count; dy too large.
    b.push_back({"concat/grad_other_shape", {"", "concat", {ramp({2, 3}), ramp({2, 1})}, {}, ramp({2, 4}), {{"axis", std::int64_t(1)}}, {}, {}, false},
                 {{0, Shape{3, 2}}}});
    b.push_back({"concat/dy_other_outer", {"", "concat", {ramp({2, 3}), ramp({2, 1})}, {}, ramp({3, 4}), {{"axis", std::int64_t(1)}}, {}, {}, false}});
    // reduce_mean: dy of the right count, wrong shape.
    b.push_back({"reduce_mean/dy_other_shape", {"", "reduce_mean", {ramp({2, 3, 4})}, {}, ramp({4, 2}), {{"axes", Ints{1}}}, {}, {}, false}});
    return b;
}

}  // namespace

TEST(OnednnBackwardEdges, RefuseInconsistentShapes) {
    REQUIRE_ONEDNN();
    for (const auto& b : bad_calls()) {
        const auto& c = b.call;
        const auto ref = direct_backward(reference_plugin(), "reference." + c.op, c.inputs, c.params, c.gout, c.attrs,
                                         c.want_in, c.want_param, c.with_output, b.grad_in, b.grad_param);
        const auto got = direct_backward(*onednn_plugin(), "onednn." + c.op, c.inputs, c.params, c.gout, c.attrs,
                                         c.want_in, c.want_param, c.with_output, b.grad_in, b.grad_param);
        EXPECT_NE(ref.error, "") << b.name << ": the reference capsule accepts it";
        EXPECT_FALSE(got.guard_broken) << b.name << ": wrote past a gradient buffer";
        EXPECT_NE(got.error, "") << b.name << ": accepted";
    }
}

namespace {

/// Prepares `capsule` of the oneDNN plugin for these shapes (parameters with data) and threads.
void* prepare_onednn(const std::string& capsule, const std::vector<DT>& inputs, std::vector<DT>& params,
                     const Shape& out_shape, const Attributes& attrs, std::size_t threads, const capsule_kernel** kernel) {
    const capsule_kernel* k = find_kernel(*onednn_plugin(), capsule);
    *kernel = k;
    std::vector<capsule_tensor_view> in, ps;
    for (auto& t : inputs) in.push_back(view_of(t.shape, nullptr));
    for (auto& t : params) ps.push_back(view_of(t.shape, t.v.data()));
    capsule_tensor_view out = view_of(out_shape, nullptr);
    AttributeViews av(attrs);
    capsule_prepare_args a{};
    a.struct_size = sizeof a;
    a.inputs = in.data(); a.num_inputs = in.size();
    a.params = ps.data(); a.num_params = ps.size();
    a.outputs = &out; a.num_outputs = 1;
    a.attrs = av.data(); a.num_attrs = av.size();
    a.num_threads = threads;
    capsule_status st{};
    st.struct_size = sizeof st;
    void* state = nullptr;
    if (k->prepare(&a, &state, &st) != CAPSULE_OK) ADD_FAILURE() << "prepare failed: " << st.message;
    return state;
}

}  // namespace

TEST(OnednnBackwardEdges, Conv2dBackwardWithPreparedStateAndThreads) {
    REQUIRE_ONEDNN();
    const A attrs{{"out_channels", std::int64_t(4)}, {"kernel_size", Ints{3, 3}}, {"stride", Ints{2, 1}},
                  {"padding", Ints{1, 2}}, {"dilation", Ints{1, 2}}, {"groups", std::int64_t(2)}, {"bias", true}};
    std::vector<DT> params{dt_rnd({4, 2, 3, 3}, 81), dt_rnd({4}, 82)};
    const DT x = dt_rnd({3, 4, 9, 8}, 83);
    const Shape out{3, 4, 5, 8};
    const capsule_kernel* k = nullptr;
    void* state = prepare_onednn("onednn.conv2d", {x}, params, out, attrs, 2, &k);
    ASSERT_NE(state, nullptr);
    const DT g = dt_rnd(out, 84);
    const auto want = direct_backward(reference_plugin(), "reference.conv2d", {x}, params, g, attrs);
    for (int round = 0; round < 3; ++round) {
        const auto got = direct_backward(*onednn_plugin(), "onednn.conv2d", {x}, params, g, attrs, {}, {}, false, {}, {}, state);
        EXPECT_EQ(agree(got, want), "") << "round " << round;
    }
    // The same node state, then a call with the batch of 1 (shapes other than the prepared ones):
    // the cached primitives are for batch 3.
    const DT x1 = dt_rnd({1, 4, 9, 8}, 85);
    const DT g1 = dt_rnd({1, 4, 5, 8}, 86);
    const auto got1 = direct_backward(*onednn_plugin(), "onednn.conv2d", {x1}, params, g1, attrs, {}, {}, false, {}, {}, state);
    const auto want1 = direct_backward(reference_plugin(), "reference.conv2d", {x1}, params, g1, attrs);
    EXPECT_TRUE(!got1.error.empty() || agree(got1, want1).empty()) << got1.error;
    EXPECT_FALSE(got1.guard_broken);
    k->release(state);
}
