// The LibTorch plugin (plugins/libtorch) against independently computed values: its kernel table
// against the op catalog, every backward kernel against the reference capsule's backward on the
// shared gradient cases, the shared ONNX models under libtorch_forward_cpu against checked_cpu and
// PyTorch's recorded outputs, and a few training steps against the same steps under checked_cpu.
// The shared conformance suite itself runs as ctest verify_libtorch. Skipped when the build has no
// LibTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "capsule/onnx_import.hpp"
#include "capsule/op_catalog.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule/training.hpp"
#include "built_plugins.hpp"
#include "capsule_fixtures.hpp"
#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

using namespace capsule;
using namespace capsule::conformance;
using capsule::conformance::builders::V;
namespace fs = std::filesystem;
using capsule::testing::pseudo_random;
using capsule::testing::random_parameters;
using capsule::testing::reference_plugin;

namespace {

const capsule_plugin* libtorch_plugin() {
#ifdef CAPSULE_HAVE_LIBTORCH
    static const capsule_plugin* p = capsule::testing::open_built_plugin("libcapsule_libtorch.so");
    return p;
#else
    return nullptr;
#endif
}

#define REQUIRE_LIBTORCH()                                                                      \
    if (!libtorch_plugin()) GTEST_SKIP() << "the libtorch plugin is not built (libtorch-dev missing)"

const capsule_kernel* kernel_of(const capsule_plugin& p, const std::string& name) {
    for (std::size_t i = 0; i < p.num_kernels; ++i)
        if (name == p.kernels[i].capsule_name) return &p.kernels[i];
    return nullptr;
}

}  // namespace

TEST(LibTorchPlugin, ServesEveryCatalogOpWithPreparedKernelsAndBackwardWhereDifferentiable) {
    REQUIRE_LIBTORCH();
    const capsule_plugin& p = *libtorch_plugin();
    EXPECT_EQ(p.num_kernels, op_catalog().size());
    for (const auto& entry : op_catalog()) {
        SCOPED_TRACE(std::string(entry.spelling()));
        const capsule_kernel* k = kernel_of(p, "libtorch." + std::string(entry.spelling()));
        ASSERT_NE(k, nullptr);
        EXPECT_NE(k->prepare, nullptr);
        EXPECT_NE(k->release, nullptr);
        const bool optimizer_step = entry.op == BackendOp::sgd || entry.op == BackendOp::adam;
        EXPECT_EQ(k->backward != nullptr, entry.differentiable() && !optimizer_step);
    }
}

// Every gradient case of the shared suite whose op has a LibTorch backward: the gradients torch's
// autograd gives equal the reference capsule's hand-written backward kernels (both in float64).
class LibTorchGradients : public ::testing::TestWithParam<std::size_t> {};

namespace {
const std::vector<KernelCase>& gradient_cases() {
    static const std::vector<KernelCase> cases = [] {
        std::vector<KernelCase> out;
        for (auto& c : all_cases())
            if (c.check_gradient) out.push_back(std::move(c));
        return out;
    }();
    return cases;
}
}  // namespace

TEST_P(LibTorchGradients, EqualTheReferenceBackwardKernels) {
    REQUIRE_LIBTORCH();
    const KernelCase& c = gradient_cases()[GetParam()];
    const std::string op(to_string(c.op));
    std::string error;
    const auto want = run_gradient_values(reference_plugin(), "reference." + op, c, error);
    ASSERT_EQ(error, "") << c.name << ": reference backward";
    const auto got = run_gradient_values(*libtorch_plugin(), "libtorch." + op, c, error);
    ASSERT_EQ(error, "") << c.name << ": libtorch backward";
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t t = 0; t < got.size(); ++t) {
        ASSERT_EQ(got[t].size(), want[t].size());
        double scale = 1;
        for (double w : want[t]) scale = std::max(scale, std::fabs(w));
        for (std::size_t i = 0; i < got[t].size(); ++i) {
            if (std::isnan(want[t][i])) {
                EXPECT_TRUE(std::isnan(got[t][i])) << c.name << " gradient " << t << "[" << i << "]";
                continue;
            }
            EXPECT_NEAR(got[t][i], want[t][i], 1e-9 * scale)
                << c.name << " gradient " << t << "[" << i << "]: libtorch " << got[t][i] << ", reference "
                << want[t][i];
        }
    }
}

INSTANTIATE_TEST_SUITE_P(SharedCases, LibTorchGradients, ::testing::Range<std::size_t>(0, gradient_cases().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& case_info) {
                             std::string name = gradient_cases()[case_info.param].name;
                             for (auto& ch : name)
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return name + "_" + std::to_string(case_info.param);
                         });

// ---- the shared ONNX models under libtorch_forward_cpu ------------------------------------------

class LibTorchModels : public ::testing::TestWithParam<std::string> {};

namespace {

Tensor run_model(const ImportedModel& model, const std::string& input_name, const Tensor& input,
                 const char* profile_name, std::size_t* libtorch_nodes) {
    const auto& profile = find_builtin_profile(profile_name);
    auto accepted = profile.accept_graph(capsule::testing::built_host(), model.graph);
    if (!accepted.accepted) throw std::runtime_error(std::string(profile_name) + " rejected the model");
    if (libtorch_nodes) {
        *libtorch_nodes = 0;
        for (const auto& g : accepted.accepted->plan().groups)
            if (g.capsule->provider == Provider::libtorch) *libtorch_nodes += g.node_ids.size();
    }
    ParameterMap params = model.parameters;
    auto inputs = bind_onnx_inputs(model, {{input_name, input}}, params);
    auto session = Session::create(profile, *accepted.accepted, model.graph, capsule::testing::built_host(), params);
    auto out = session.run(inputs);
    if (out.size() != 1) throw std::runtime_error("the model must have one output");
    return out[0];
}

}  // namespace

TEST_P(LibTorchModels, MatchCheckedCpuAndPyTorchWithinOneInTenThousand) {
    REQUIRE_LIBTORCH();
    const fs::path dir = fs::path(CAPSULE_SOURCE_DIR) / "tests" / "data" / "models" / GetParam();
    const ImportedModel model = import_onnx(dir / "model.onnx");
    const Tensor input = read_npy(dir / "input.npy"), pytorch = read_npy(dir / "output.npy");
    std::ifstream meta(dir / "meta.json");
    const std::string input_name = nlohmann::json::parse(meta)["input"]["name"].get<std::string>();

    std::size_t libtorch_nodes = 0;
    const Tensor got = run_model(model, input_name, input, "libtorch_forward_cpu", &libtorch_nodes);
    std::size_t op_nodes = 0;
    for (const auto& n : model.graph.nodes) op_nodes += n.kind == NodeKind::op;
    EXPECT_EQ(libtorch_nodes, op_nodes) << "every op node runs on a LibTorch capsule (only:libtorch)";
    const Tensor checked = run_model(model, input_name, input, "checked_cpu", nullptr);
    ASSERT_EQ(got.shape(), checked.shape());
    double scale = 0, versus_checked = 0, versus_pytorch = 0;
    for (std::int64_t i = 0; i < got.numel(); ++i) {
        scale = std::max(scale, std::fabs(checked.at(i)));
        versus_checked = std::max(versus_checked, std::fabs(got.at(i) - checked.at(i)));
        versus_pytorch = std::max(versus_pytorch, std::fabs(got.at(i) - pytorch.at(i)));
    }
    std::cout << GetParam() << " under libtorch_forward_cpu: max abs difference " << versus_checked
              << " from checked_cpu, " << versus_pytorch << " from PyTorch; max |output| " << scale << "\n";
    EXPECT_LE(versus_checked, 1e-4 * scale);
    EXPECT_LE(versus_pytorch, 1e-4 * scale);
}

INSTANTIATE_TEST_SUITE_P(Shared, LibTorchModels, ::testing::Values("mobilenet_v2", "squeezenet1_1"));

// ---- training under libtorch_forward_cpu and libtorch_autograd_cpu --------------------------------

// The same LeNet-5 steps (seed, data, SGD with momentum) under a LibTorch profile and checked_cpu
// (the reference capsules) give the same losses and parameters up to float32 rounding:
// libtorch_forward_cpu runs every forward, backward and optimizer step as a LibTorch capsule
// called by Capsule's tape; libtorch_autograd_cpu (external-autograd) records the whole training
// graph as one group with torch's autograd and differentiates it with one torch::autograd::grad
// call per step.
class LibTorchTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(LibTorchTraining, LeNetStepsMatchCheckedCpu) {
    REQUIRE_LIBTORCH();
    const auto train = take_first(load_fashion_mnist(kDefaultFashionMnistDir, "train"), 256);
    TrainingConfig config{64, SgdOptions{.lr = 0.05, .momentum = 0.9}, 7};
    auto run = [&](const char* profile_name, double* loss) {
        const auto& profile = find_builtin_profile(profile_name);
        auto plans = plan_training(profile, capsule::testing::built_host(), ModelKind::lenet, config);
        EXPECT_TRUE(plans.accepted()) << profile_name;
        auto trainer = Trainer::create(profile, capsule::testing::built_host(), plans, config);
        *loss = trainer.train_epoch(train, {}).train_loss;
        return trainer.parameters();
    };
    double loss_libtorch = 0, loss_checked = 0;
    const auto libtorch = run(GetParam(), &loss_libtorch);
    const auto checked = run("checked_cpu", &loss_checked);
    EXPECT_NEAR(loss_libtorch, loss_checked, 1e-4 * std::fabs(loss_checked));
    ASSERT_EQ(libtorch.size(), checked.size());
    for (const auto& [key, t] : checked) {
        const Tensor& u = libtorch.at(key);
        double scale = 0, diff = 0;
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            scale = std::max(scale, std::fabs(t.at(i)));
            diff = std::max(diff, std::fabs(u.at(i) - t.at(i)));
        }
        EXPECT_LE(diff, 1e-4 * scale) << key;
    }
}

INSTANTIATE_TEST_SUITE_P(Profiles, LibTorchTraining, ::testing::Values("libtorch_forward_cpu", "libtorch_autograd_cpu"));

// ---- compiled groups and external autograd (plugins/libtorch/group.cpp) ---------------------------

namespace {

Graph ir_graph(const std::string& nodes, const std::string& outputs) {
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" +
                       outputs + "}");
}

// Two groups under external autograd (the detached read of node 2 starts the second): node 2
// leaves the first group through node 3 (a graph output read again inside the group that makes
// it) and through the detach; x enters both groups (its gradient sums two group calls).
//   h = tanh(fc1(x)); y = h * h; z = sum(fc2(detach(h) * y) + fc3(x)); outputs z, y
const char* kTwoGroupNodes = R"(
    {"id": 0, "op": "input", "name": "x", "shape": [4, 5], "dtype": "float64"},
    {"id": 1, "op": "linear", "name": "fc1", "parents": [0], "attrs": {"out_features": 6}, "shape": [4, 6], "dtype": "float64"},
    {"id": 2, "op": "tanh", "parents": [1], "shape": [4, 6], "dtype": "float64"},
    {"id": 3, "op": "mul", "parents": [2, 2], "shape": [4, 6], "dtype": "float64"},
    {"id": 4, "op": "detach", "parents": [2], "shape": [4, 6], "dtype": "float64"},
    {"id": 5, "op": "mul", "parents": [4, 3], "shape": [4, 6], "dtype": "float64"},
    {"id": 6, "op": "linear", "name": "fc2", "parents": [5], "attrs": {"out_features": 3}, "shape": [4, 3], "dtype": "float64"},
    {"id": 7, "op": "linear", "name": "fc3", "parents": [0], "attrs": {"out_features": 3}, "shape": [4, 3], "dtype": "float64"},
    {"id": 8, "op": "add", "parents": [6, 7], "shape": [4, 3], "dtype": "float64"},
    {"id": 9, "op": "sum", "parents": [8], "shape": [], "dtype": "float64"})";

double max_relative_difference(const Tensor& got, const Tensor& want) {
    double scale = 0, diff = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) {
        scale = std::max(scale, std::fabs(want.at(i)));
        diff = std::max(diff, std::fabs(got.at(i) - want.at(i)));
    }
    return diff / std::max(scale, 1e-300);
}

}  // namespace

// Gradients of inputs and parameters through two external-autograd groups equal the reference
// tape's (checked_cpu) in float64, for both outputs' upstream gradients at once; a second backward
// over the same tape gives the same gradients scaled with the upstream ones.
TEST(LibTorchExternalAutograd, GroupGradientsEqualTheReferenceTape) {
    REQUIRE_LIBTORCH();
    const Graph graph = ir_graph(kTwoGroupNodes, "[9, 3]");
    const ParameterMap params = random_parameters(graph, 11, 0.7);
    const auto x = Tensor::from_values(DType::float64, {4, 5}, pseudo_random(20, 99, 1.5));
    const auto w = Tensor::from_values(DType::float64, {4, 6}, pseudo_random(24, 98, 1.0));
    auto gradients = [&](const char* profile, double factor) {
        auto session = capsule::testing::session_under(profile, graph, params);
        EXPECT_EQ(session.backward_refusal(), "") << profile;
        auto recorded = session.run_recording({{"x", x}});
        session.backward(recorded.tape, {Tensor::from_values(DType::float64, {}, {1.0}), w});
        std::vector<double> scaled_w = w.to_doubles();
        for (auto& v : scaled_w) v *= factor;
        return std::make_pair(session.backward(recorded.tape, {Tensor::from_values(DType::float64, {}, {factor}),
                                                               Tensor::from_values(DType::float64, {4, 6}, scaled_w)}),
                              session.compiled_groups());
    };
    const auto [want, no_groups] = gradients("checked_cpu", 1.0);
    const auto [got, groups] = gradients("libtorch_autograd_cpu", 2.0);
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].plugin, "libtorch_autograd");
    EXPECT_EQ(groups[0].node_ids, (std::vector<std::int64_t>{1, 2, 3}));
    EXPECT_EQ(groups[1].node_ids, (std::vector<std::int64_t>{5, 6, 7, 8, 9}));
    ASSERT_EQ(got.parameters.size(), 6u);
    for (const auto& [key, t] : want.parameters) {
        Tensor halved = got.parameters.at(key);
        for (auto& v : halved.values<double>()) v /= 2;
        EXPECT_LE(max_relative_difference(halved, t), 1e-12) << key;
    }
    Tensor gx = got.inputs.at("x");
    for (auto& v : gx.values<double>()) v /= 2;
    EXPECT_LE(max_relative_difference(gx, want.inputs.at("x")), 1e-12);
    // The detached factor carries no gradient: without the detach, fc1's gradient would differ.
    EXPECT_GT(max_relative_difference(want.parameters.at("fc1.weight"), Tensor::zeros(DType::float64, {6, 5})), 0.0);
}

// External autograd needs the provider to record whole groups: a session without compiled groups
// refuses backward, naming the first node a gradient flows through and why.
TEST(LibTorchExternalAutograd, WithoutCompiledGroupsBackwardIsRefusedWithItsReason) {
    REQUIRE_LIBTORCH();
    const Graph graph = ir_graph(kTwoGroupNodes, "[9]");
    SessionOptions node_by_node;
    node_by_node.compile_groups = false;
    auto session = capsule::testing::session_under("libtorch_autograd_cpu", graph, random_parameters(graph, 3, 0.5),
                                                   node_by_node);
    EXPECT_NE(session.backward_refusal().find("node 1 (linear) runs capsule libtorch_autograd.linear of plugin "
                                              "libtorch_autograd outside a group its provider's autograd records"),
              std::string::npos)
        << session.backward_refusal();
    // Inference runs are unaffected.
    EXPECT_EQ(session.run({{"x", Tensor::zeros(DType::float64, {4, 5})}}).size(), 1u);
}

// LibTorch's 2-D max pooling takes oneDNN's kernel in inference runs unless x holds a NaN (which
// oneDNN's max drops) or a -inf (oneDNN gives -FLT_MAX for a window of -inf): finite, with NaN,
// and with -inf windows (no NaN), with padding and ceil_mode, every value equals the reference's.
TEST(LibTorchMaxPool, OneDnnPathAndNaNFallbackEqualTheReference) {
    REQUIRE_LIBTORCH();
    const Graph graph = ir_graph(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [2, 3, 9, 9], "dtype": "float32"},
        {"id": 1, "op": "max_pool2d_pad", "parents": [0], "attrs": {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": true}, "shape": [2, 3, 5, 5], "dtype": "float32"},
        {"id": 2, "op": "max_pool2d", "parents": [0], "attrs": {"kernel_size": [2, 3], "stride": [2, 1]}, "shape": [2, 3, 4, 7], "dtype": "float32"})",
                                 "[1, 2]");
    auto torch = capsule::testing::session_under("libtorch_forward_cpu", graph, {});
    auto reference = capsule::testing::session_under("checked_cpu", graph, {});
    auto values = pseudo_random(2 * 3 * 9 * 9, 21, 5.0);
    for (const char* variant : {"finite", "-inf windows", "NaN and -inf"}) {
        SCOPED_TRACE(variant);
        const bool with_nan = variant[0] == 'N';
        if (variant[0] == '-') {
            // Channel 0 of image 0 all -inf; the top rows of channel 1 too.
            for (std::size_t i = 0; i < 81; ++i) values[i] = -std::numeric_limits<double>::infinity();
            for (std::size_t i = 81; i < 81 + 27; ++i) values[i] = -std::numeric_limits<double>::infinity();
        }
        if (with_nan) {
            values[4] = std::numeric_limits<double>::quiet_NaN();
            values[100] = std::numeric_limits<double>::quiet_NaN();
        }
        const auto x = Tensor::from_values(DType::float32, {2, 3, 9, 9}, values);
        const auto got = torch.run({{"x", x}});
        const auto want = reference.run({{"x", x}});
        for (std::size_t o = 0; o < 2; ++o) {
            const auto g = got[o].to_doubles(), w = want[o].to_doubles();
            ASSERT_EQ(g.size(), w.size());
            std::size_t nan = 0, minus_inf = 0;
            for (std::size_t i = 0; i < w.size(); ++i) {
                nan += std::isnan(w[i]);
                minus_inf += w[i] == -std::numeric_limits<double>::infinity();
                if (std::isnan(w[i])) EXPECT_TRUE(std::isnan(g[i])) << o << "[" << i << "]";
                else EXPECT_EQ(g[i], w[i]) << o << "[" << i << "]";
            }
            EXPECT_EQ(nan > 0, with_nan) << o;
            EXPECT_EQ(minus_inf > 0, variant[0] != 'f') << o;
        }
    }
}

// A compiled LibTorch group computes what its capsules compute node by node, bit for bit (each
// node reads a contiguous tensor, as it reads the host's buffer node by node): LeNet-5's forward
// under libtorch_forward_cpu with and without compiled groups.
TEST(LibTorchCompiledGroups, LeNetEqualsNodeByNodeBitForBit) {
    REQUIRE_LIBTORCH();
    const Graph graph = model_graph(ModelKind::lenet, 8);
    const ParameterMap params = random_parameters(graph, 5, 0.3);
    const auto images = Tensor::from_values(DType::float32, {8, 1, 28, 28}, pseudo_random(8 * 28 * 28, 4, 1.0));
    SessionOptions node_by_node;
    node_by_node.compile_groups = false;
    auto grouped = capsule::testing::session_under("libtorch_forward_cpu", graph, params);
    auto single = capsule::testing::session_under("libtorch_forward_cpu", graph, params, node_by_node);
    ASSERT_EQ(grouped.compiled_groups().size(), 1u);
    EXPECT_EQ(grouped.compiled_groups()[0].plugin, "libtorch");
    EXPECT_TRUE(single.compiled_groups().empty());
    const std::string input = grouped.inputs()[0].name;
    const auto a = grouped.run({{input, images}}).at(0);
    const auto b = single.run({{input, images}}).at(0);
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

// Backward kernels at kinks, bounds and non-finite inputs, where torch's autograd and the
// reference's formulas can differ (cases found when the plugin was tried from outside): the
// LibTorch gradients equal the reference's, NaN where it gives NaN.
TEST(LibTorchGradients, AtKinksBoundsAndNonFiniteInputsEqualTheReference) {
    REQUIRE_LIBTORCH();
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    using builders::make;
    std::vector<KernelCase> cases = {
        make("sign_nan", BackendOp::sign, {f64({2}, {nan, 2})}, f64({2}, {nan, 1})),
        make("thresholded_relu_nan", BackendOp::thresholded_relu, {f64({2}, {nan, 2})}, f64({2}, {nan, 2})),
        make("softsign_inf", BackendOp::softsign, {f64({3}, {-inf, inf, 1})}, f64({3}, {-1, 1, 0.5})),
        make("hardsigmoid_bounds", BackendOp::hardsigmoid, {f64({4}, {-2.5, 2.5, -0.5, 0.5})},
             f64({4}, {0, 1, 0.4, 0.6})),
        make("hardswish_at_3_vectorised", BackendOp::hardswish, {f64({17}, V(17, 3.0))}, f64({17}, V(17, 3.0))),
        make("reduce_max_nan_group", BackendOp::reduce_max, {f64({3}, {1, nan, 3})}, f64({}, {nan})),
        make("reduce_min_nan_group", BackendOp::reduce_min, {f64({3}, {1, nan, 3})}, f64({}, {nan})),
        make("reduce_max_ties", BackendOp::reduce_max, {f64({4}, {3, 1, 3, 3})}, f64({}, {3})),
        make("elu_nan", BackendOp::elu, {f64({2}, {nan, -1})}, f64({2}, {nan, std::expm1(-1.0)})),
        make("selu_nan", BackendOp::selu, {f64({1}, {nan})}, f64({1}, {nan})),
        make("celu_nan", BackendOp::celu, {f64({1}, {nan})}, f64({1}, {nan})),
        make("softplus_nan", BackendOp::softplus, {f64({2}, {nan, 0})}, f64({2}, {nan, std::log(2.0)})),
        make("cumsum_exclusive_rank0", BackendOp::cumsum, {f64({}, {2})}, f64({}, {0}),
             {{"axis", std::int64_t(0)}, {"exclusive", true}}),
        make("batch_norm_eval_running_stats", BackendOp::batch_norm, {f64({2, 1, 2}, {1, 2, 3, 4})},
             {f64({1}, {1.5}), f64({1}, {0.25}), f64({1}, {0.5}), f64({1}, {2})}, f64({2, 1, 2}, {0, 0, 0, 0}), {},
             {1e-6, 1e-12}),
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        const std::string op(to_string(c.op));
        std::string error;
        const auto want = run_gradient_values(reference_plugin(), "reference." + op, c, error);
        ASSERT_EQ(error, "");
        const auto got = run_gradient_values(*libtorch_plugin(), "libtorch." + op, c, error);
        ASSERT_EQ(error, "");
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t t = 0; t < got.size(); ++t)
            for (std::size_t i = 0; i < got[t].size(); ++i) {
                if (std::isnan(want[t][i])) {
                    EXPECT_TRUE(std::isnan(got[t][i])) << "gradient " << t << "[" << i << "] = " << got[t][i];
                } else {
                    EXPECT_NEAR(got[t][i], want[t][i], 1e-12 * std::max(1.0, std::fabs(want[t][i])))
                        << "gradient " << t << "[" << i << "]";
                }
            }
    }
}

// pad's `value` for an int64 input is the integer attribute itself, not its double: 2^53 + 1 and
// INT64_MAX pad exactly, on the reference capsule and on LibTorch's (when built).
TEST(PadInt64Value, IsExactOnEveryPlugin) {
    std::vector<const capsule_plugin*> plugins{&reference_plugin()};
    if (libtorch_plugin()) plugins.push_back(libtorch_plugin());
    for (const std::int64_t value : {std::int64_t(9007199254740993), std::numeric_limits<std::int64_t>::max()}) {
        for (const capsule_plugin* p : plugins) {
            SCOPED_TRACE(std::string(p->name) + " value " + std::to_string(value));
            const std::string name = std::string(p->name) + ".pad";
            const capsule_kernel* k = kernel_of(*p, name);
            ASSERT_NE(k, nullptr);
            std::int64_t in[2] = {1, 2}, out[4] = {0, 0, 0, 0};
            const std::int64_t in_shape[1] = {2}, out_shape[1] = {4}, stride[1] = {1};
            capsule_tensor_view x{sizeof(capsule_tensor_view), CAPSULE_DTYPE_INT64, CAPSULE_DEVICE_CPU, 1, in_shape, stride, in};
            capsule_tensor_view y{sizeof(capsule_tensor_view), CAPSULE_DTYPE_INT64, CAPSULE_DEVICE_CPU, 1, out_shape, stride, out};
            const std::int64_t pads[2] = {1, 1};
            capsule_attribute attrs[2] = {};
            attrs[0] = {sizeof(capsule_attribute), "pads", CAPSULE_ATTR_INTS, 0, 0, nullptr, pads, nullptr, 2};
            attrs[1] = {sizeof(capsule_attribute), "value", CAPSULE_ATTR_INT, value, 0, nullptr, nullptr, nullptr, 0};
            void* state = nullptr;
            capsule_status status{};
            status.struct_size = sizeof status;
            if (k->prepare) {
                capsule_tensor_view xp = x, yp = y;
                xp.data = yp.data = nullptr;
                capsule_prepare_args pa{};
                pa.struct_size = sizeof pa;
                pa.inputs = &xp; pa.num_inputs = 1; pa.outputs = &yp; pa.num_outputs = 1;
                pa.attrs = attrs; pa.num_attrs = 2; pa.num_threads = 1;
                ASSERT_EQ(k->prepare(&pa, &state, &status), CAPSULE_OK) << status.message;
            }
            capsule_forward_args fa{};
            fa.struct_size = sizeof fa;
            fa.inputs = &x; fa.num_inputs = 1; fa.outputs = &y; fa.num_outputs = 1;
            fa.attrs = attrs; fa.num_attrs = 2; fa.state = state;
            EXPECT_EQ(k->forward(&fa, &status), CAPSULE_OK) << status.message;
            if (state) k->release(state);
            EXPECT_EQ(out[0], value);
            EXPECT_EQ(out[1], 1);
            EXPECT_EQ(out[2], 2);
            EXPECT_EQ(out[3], value);
        }
    }
}

TEST(LibTorchIntegerData, DivTruncatesAndRefusedDataIsBadInputAsOnTheReference) {
    // ONNX Div of int64 truncates toward zero (at::div alone would give a float quotient);
    // INT64_MIN / -1 wraps as on the reference; a zero divisor and an index out of range are the
    // caller's data: Error(input), not a kernel failure, under both profiles.
    REQUIRE_LIBTORCH();
    const Graph div = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "a", "shape": [5], "dtype": "int64"},
      {"id": 1, "op": "input", "name": "b", "shape": [5], "dtype": "int64"},
      {"id": 2, "op": "div", "name": "q", "parents": [0, 1], "shape": [5], "dtype": "int64"},
      {"id": 3, "op": "mod", "name": "r", "parents": [0, 1], "attrs": {"fmod": true}, "shape": [5], "dtype": "int64"}
    ], "outputs": [2, 3]})");
    const Graph gather = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [4], "dtype": "float32"},
      {"id": 1, "op": "input", "name": "i", "shape": [2], "dtype": "int64"},
      {"id": 2, "op": "gather", "name": "g", "parents": [0, 1], "attrs": {"axis": 0}, "shape": [2]}
    ], "outputs": [2]})");
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
    const auto ints = [](std::vector<std::int64_t> v) {
        Tensor t = Tensor::zeros(DType::int64, {static_cast<std::int64_t>(v.size())});
        std::memcpy(t.data(), v.data(), v.size() * sizeof(std::int64_t));
        return t;
    };
    const Tensor a = ints({-7, 7, kMin, 9, -9}), b = ints({2, -2, -1, 4, 4});
    for (const std::string profile : {"checked_cpu", "libtorch_forward_cpu"}) {
        SCOPED_TRACE(profile);
        auto s = capsule::testing::session_under(profile, div, {});
        const auto out = s.run({{"a", a}, {"b", b}});
        const auto* q = static_cast<const std::int64_t*>(out[0].data());
        EXPECT_EQ(std::vector<std::int64_t>(q, q + 5), (std::vector<std::int64_t>{-3, -3, kMin, 2, -2}));
        const auto* r = static_cast<const std::int64_t*>(out[1].data());
        EXPECT_EQ(std::vector<std::int64_t>(r, r + 5), (std::vector<std::int64_t>{-1, 1, 0, 1, -1}));
        try {
            s.run({{"a", a}, {"b", ints({1, 1, 0, 1, 1})}});
            ADD_FAILURE() << "a zero divisor ran";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
            EXPECT_NE(std::string(e.what()).find("int64 division by zero"), std::string::npos) << e.what();
        }
        auto g = capsule::testing::session_under(profile, gather, {});
        const Tensor x = Tensor::from_values(DType::float32, {4}, {0.5, 1.5, 2.5, 3.5});
        try {
            g.run({{"x", x}, {"i", ints({1, 7})}});
            ADD_FAILURE() << "an index out of range ran";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
            EXPECT_NE(std::string(e.what()).find("index 7"), std::string::npos) << e.what();
        }
    }
}
