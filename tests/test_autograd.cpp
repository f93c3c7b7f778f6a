// Autograd through sessions (DESIGN.md section 5): the tape and backward pass under the profile's
// VJP mode. Gradients are checked against central finite differences in float64 of the same
// session's forward runs, for every gradient case of the conformance suite (so every
// differentiable op of the reference plugin), and against hand-derived values for fan-out,
// detach and a small MLP with cross-entropy.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <cmath>
#include <thread>

#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"
#include "conformance/harness.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;

namespace {


/// A graph with its parameters, planned under `profile` into a session.
struct Built {
    Graph graph;
    ParameterMap params;
    Session session;
};

Built build(const Graph& graph, ParameterMap params,
            const BackendProfile& profile = find_builtin_profile("checked_cpu")) {
    auto result = profile.accept_graph(built_host(), graph);
    if (!result.accepted) throw std::runtime_error("gate rejected the test graph");
    auto session = Session::create(profile, *result.accepted, graph, built_host(), params);
    return {graph, std::move(params), std::move(session)};
}

Tensor scalar(double v, DType dtype = DType::float64) { return Tensor::from_values(dtype, {}, {v}); }


void set_element(Tensor& t, std::int64_t i, double v) {
    if (t.dtype() == DType::float64) t.values<double>()[i] = v;
    else t.values<float>()[i] = static_cast<float>(v);
}

/// <w, outputs[0]> for the session's single output: the scalar whose gradient backward computes
/// when w is the upstream gradient.
double objective(const Session& s, const std::map<std::string, Tensor>& inputs, const Tensor& w) {
    const auto out = s.run(inputs).at(0).to_doubles();
    const auto wv = w.to_doubles();
    double sum = 0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += wv[i] * out[i];
    return sum;
}

/// Central finite differences of `objective` with respect to every element of `t` (an input
/// tensor or a parameter the session reads in place).
std::vector<double> numeric_gradient(const Session& s, std::map<std::string, Tensor>& inputs,
                                     Tensor t, const Tensor& w, double h) {
    std::vector<double> out(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const double x = t.at(i);
        set_element(t, i, x + h);
        const double plus = objective(s, inputs, w);
        set_element(t, i, x - h);
        const double minus = objective(s, inputs, w);
        set_element(t, i, x);
        out[std::size_t(i)] = (plus - minus) / (2 * h);
    }
    return out;
}

/// |got - want| <= tol * max(1, |want|) for every element; a message naming the first miss.
std::string compare(const std::vector<double>& got, const std::vector<double>& want, double tol,
                    const std::string& what) {
    if (got.size() != want.size()) return what + ": size " + std::to_string(got.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i]))))
            return what + "[" + std::to_string(i) + "] = " + std::to_string(got[i]) +
                   ", finite differences give " + std::to_string(want[i]);
    return "";
}

Tensor to_tensor(const conformance::CaseTensor& c, bool widen) {
    const bool is_float = c.dtype == DType::float32 || c.dtype == DType::float64;
    return Tensor::from_values(widen && is_float ? DType::float64 : c.dtype, c.shape, c.values);
}

/// A one-node graph running the case's op on float64 copies of its inputs and parameters.
Built single_op_session(const conformance::KernelCase& c) {
    Graph g;
    std::vector<TensorType> parent_types;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
        Node in;
        in.id = std::int64_t(i);
        in.kind = NodeKind::input;
        in.name = "in" + std::to_string(i);
        const auto t = to_tensor(c.inputs[i], true);
        in.shape = t.shape();
        in.dtype = t.dtype();
        parent_types.push_back({in.shape, in.dtype});
        g.nodes.push_back(in);
    }
    Node op;
    op.id = std::int64_t(c.inputs.size());
    op.kind = NodeKind::op;
    op.op = c.op;
    op.name = "n";
    op.attrs = c.attrs;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) op.parents.push_back(std::int64_t(i));
    const auto type = infer_type(op, parent_types);
    op.shape = type.shape;
    op.dtype = type.dtype;
    ParameterMap params;
    const auto specs = parameter_specs(op, parent_types);
    for (std::size_t i = 0; i < specs.size(); ++i) params[specs[i].key] = to_tensor(c.params.at(i), true);
    g.nodes.push_back(op);
    g.outputs = {op.id};
    return build(g, std::move(params));
}

class SessionGradient : public ::testing::TestWithParam<std::size_t> {};

const std::vector<conformance::KernelCase>& gradient_cases() {
    static const auto cases = [] {
        std::vector<conformance::KernelCase> out;
        for (auto& c : conformance::all_cases())
            if (c.check_gradient) out.push_back(std::move(c));
        return out;
    }();
    return cases;
}

std::vector<std::size_t> gradient_case_indices() {
    std::vector<std::size_t> v(gradient_cases().size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i;
    return v;
}

// Every differentiable op: the session's tape and the capsule's backward kernel against central
// differences of the session's own forward runs, in float64, with the case's step h (default
// 1e-6) and tolerance (default 1e-5, relative to max(1, |gradient|)).
TEST_P(SessionGradient, MatchesCentralFiniteDifferencesInFloat64) {
    const auto& c = gradient_cases()[GetParam()];
    SCOPED_TRACE(c.name);
    auto built = single_op_session(c);
    std::map<std::string, Tensor> inputs;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) inputs["in" + std::to_string(i)] = to_tensor(c.inputs[i], true);
    auto recorded = built.session.run_recording(inputs);
    const auto& out_type = built.session.outputs().at(0).type;
    const auto w = Tensor::from_values(out_type.dtype, out_type.shape,
                                       pseudo_random(std::size_t(element_count(out_type.shape)), 7, 1.0));
    const auto grads = built.session.backward(recorded.tape, {w});

    std::vector<std::size_t> which = c.grad_inputs;
    if (which.empty())
        for (std::size_t i = 0; i < c.inputs.size(); ++i)
            if (inputs.at("in" + std::to_string(i)).dtype() == DType::float64) which.push_back(i);
    for (auto i : which) {
        const auto name = "in" + std::to_string(i);
        auto want = numeric_gradient(built.session, inputs, inputs.at(name), w, c.fd_step);
        EXPECT_EQ(compare(grads.inputs.at(name).to_doubles(), want, c.grad_tol, "grad " + name), "");
    }
    auto storage = built.session.parameters();
    // The parameters the case checks (KernelCase::grad_params), by their keys in parameter order.
    std::set<std::string> checked;
    const auto& op = built.graph.nodes.back();
    std::vector<TensorType> parent_types;
    for (const auto& t : c.inputs)
        parent_types.push_back({t.shape, t.dtype == DType::float32 ? DType::float64 : t.dtype});
    const auto specs = parameter_specs(op, parent_types);
    for (std::size_t i = 0; i < specs.size(); ++i)
        if (c.all_param_grads || std::find(c.grad_params.begin(), c.grad_params.end(), i) != c.grad_params.end())
            checked.insert(specs[i].key);
    for (const auto& [key, t] : built.params) {
        if (!checked.count(key)) continue;
        auto want = numeric_gradient(built.session, inputs, storage.at(key), w, c.fd_step);
        EXPECT_EQ(compare(grads.parameters.at(key).to_doubles(), want, c.grad_tol, "grad " + key), "");
    }
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
    std::string name = gradient_cases()[info.param].name;
    for (auto& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name;
}

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, SessionGradient,
                         ::testing::ValuesIn(gradient_case_indices()), case_name);

TEST(SessionGradientCoverage, EveryDifferentiableOpOfTheReferencePluginIsChecked) {
    std::set<BackendOp> checked;
    for (const auto& c : gradient_cases()) checked.insert(c.op);
    for (auto op : all_values<BackendOp>())
        if (!op_needs_no_vjp(op)) {
            EXPECT_TRUE(checked.count(op)) << to_string(op);
        }
}

Graph parse(const std::string& nodes, const std::string& outputs) {
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [)" + nodes +
                       R"(], "outputs": )" + outputs + "}");
}

// y = x*x + x: x feeds two nodes and one node twice, so dy/dx = 2x + 1 is the sum of three
// backward contributions.
TEST(Autograd, FanOutGradientsAreSummed) {
    auto built = build(parse(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [3], "dtype": "float64"},
        {"id": 1, "op": "mul", "parents": [0, 0], "shape": [3], "dtype": "float64"},
        {"id": 2, "op": "add", "parents": [1, 0], "shape": [3], "dtype": "float64"},
        {"id": 3, "op": "sum", "parents": [2], "shape": [], "dtype": "float64"})", "[3]"), {});
    auto x = Tensor::from_values(DType::float64, {3}, {1.5, -2, 0.25});
    auto rec = built.session.run_recording({{"x", x}});
    EXPECT_DOUBLE_EQ(rec.outputs[0].at(0), 1.5 * 1.5 + 1.5 + 4 - 2 + 0.0625 + 0.25);
    auto g = built.session.backward(rec.tape, {scalar(1)});
    EXPECT_EQ(g.inputs.at("x").to_doubles(), (std::vector<double>{4, -3, 1.5}));
    // A second backward over the same tape gives the same answer (nothing accumulates across calls).
    auto again = built.session.backward(rec.tape, {scalar(2)});
    EXPECT_EQ(again.inputs.at("x").to_doubles(), (std::vector<double>{8, -6, 3}));
}

// y = detach(x) * x: the detached factor is a constant, so dy/dx = x, not 2x.
TEST(Autograd, DetachStopsGradients) {
    auto built = build(parse(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [2], "dtype": "float64"},
        {"id": 1, "op": "detach", "parents": [0], "shape": [2], "dtype": "float64"},
        {"id": 2, "op": "mul", "parents": [1, 0], "shape": [2], "dtype": "float64"})", "[2]"), {});
    auto rec = built.session.run_recording({{"x", Tensor::from_values(DType::float64, {2}, {3, -1})}});
    auto g = built.session.backward(rec.tape, {Tensor::from_values(DType::float64, {2}, {1, 1})});
    EXPECT_EQ(g.inputs.at("x").to_doubles(), (std::vector<double>{3, -1}));
}

// Integer inputs get no gradient; a parameter of a branch no output depends on gets zeros.
TEST(Autograd, IntegerInputsHaveNoGradientAndUnusedBranchesGetZeros) {
    auto built = build(parse(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [2, 3], "dtype": "float64"},
        {"id": 1, "op": "input", "name": "labels", "shape": [2], "dtype": "int64"},
        {"id": 2, "op": "cross_entropy", "parents": [0, 1], "shape": [], "dtype": "float64"},
        {"id": 3, "op": "linear", "name": "unused", "parents": [0], "attrs": {"out_features": 1}, "shape": [2, 1], "dtype": "float64"})",
                             "[2]"),
                       {{"unused.weight", Tensor::from_values(DType::float64, {1, 3}, {1, 2, 3})},
                        {"unused.bias", Tensor::from_values(DType::float64, {1}, {1})}});
    auto rec = built.session.run_recording(
        {{"x", Tensor::from_values(DType::float64, {2, 3}, {0, 0, 0, 1, 2, 3})},
         {"labels", Tensor::from_values(DType::int64, {2}, {1, 2})}});
    auto g = built.session.backward(rec.tape, {scalar(1)});
    EXPECT_EQ(g.inputs.count("labels"), 0u);
    // Row 0: uniform softmax 1/3, minus one-hot at 1; halved by the mean over 2 rows.
    const auto gx = g.inputs.at("x").to_doubles();
    EXPECT_NEAR(gx[0], 1.0 / 6, 1e-15);
    EXPECT_NEAR(gx[1], (1.0 / 3 - 1) / 2, 1e-15);
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    EXPECT_NEAR(gx[5], (std::exp(3.0) / z - 1) / 2, 1e-15);
    EXPECT_EQ(g.parameters.at("unused.weight").to_doubles(), (std::vector<double>{0, 0, 0}));
    EXPECT_EQ(g.parameters.at("unused.bias").to_doubles(), (std::vector<double>{0}));
}

// A 5-4-3 MLP with cross-entropy, float64: every parameter gradient against finite differences.
TEST(Autograd, MlpWithCrossEntropyMatchesFiniteDifferences) {
    auto built = build(parse(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [6, 5], "dtype": "float64"},
        {"id": 1, "op": "input", "name": "labels", "shape": [6], "dtype": "int64"},
        {"id": 2, "op": "linear", "name": "fc1", "parents": [0], "attrs": {"out_features": 4}, "shape": [6, 4], "dtype": "float64"},
        {"id": 3, "op": "relu", "parents": [2], "shape": [6, 4], "dtype": "float64"},
        {"id": 4, "op": "linear", "name": "fc2", "parents": [3], "attrs": {"out_features": 3}, "shape": [6, 3], "dtype": "float64"},
        {"id": 5, "op": "cross_entropy", "parents": [4, 1], "shape": [], "dtype": "float64"})", "[5]"),
                       {{"fc1.weight", Tensor::from_values(DType::float64, {4, 5}, pseudo_random(20, 1, 0.5))},
                        {"fc1.bias", Tensor::from_values(DType::float64, {4}, pseudo_random(4, 2, 0.5))},
                        {"fc2.weight", Tensor::from_values(DType::float64, {3, 4}, pseudo_random(12, 3, 0.5))},
                        {"fc2.bias", Tensor::from_values(DType::float64, {3}, pseudo_random(3, 4, 0.5))}});
    std::map<std::string, Tensor> inputs{
        {"x", Tensor::from_values(DType::float64, {6, 5}, pseudo_random(30, 5, 1.0))},
        {"labels", Tensor::from_values(DType::int64, {6}, {0, 1, 2, 2, 1, 0})}};
    auto rec = built.session.run_recording(inputs);
    auto g = built.session.backward(rec.tape, {scalar(1)});
    auto storage = built.session.parameters();
    for (const auto& key : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
        auto want = numeric_gradient(built.session, inputs, storage.at(key), scalar(1), 1e-6);
        EXPECT_EQ(compare(g.parameters.at(key).to_doubles(), want, 1e-7, key), "");
    }
    auto want_x = numeric_gradient(built.session, inputs, inputs.at("x"), scalar(1), 1e-6);
    EXPECT_EQ(compare(g.inputs.at("x").to_doubles(), want_x, 1e-7, "x"), "");
}

Graph relu_graph() {
    return parse(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [2]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [2]})", "[1]");
}

TEST(Autograd, VjpModeNoneRefusesBackward) {
    auto profile = BackendProfile::checked_cpu();
    profile.name = "inference_cpu";
    profile.config.vjp_mode = VJPMode::none;
    auto built = build(relu_graph(), {}, profile);
    const std::string why = "profile inference_cpu has VJP mode none (inference only): backward is "
                            "refused; use a profile whose VJP mode is torchlean-tape or backend-vjp";
    EXPECT_EQ(built.session.backward_refusal(), why);
    const auto x = Tensor::from_values(DType::float32, {2}, {1, -1});
    EXPECT_EQ(error_of([&] { built.session.run_recording({{"x", x}}); }), why);
    EXPECT_TRUE(raises(ErrorCode::other, [&] { built.session.run_recording({{"x", x}}); }));
    // Inference is unaffected.
    EXPECT_EQ(built.session.run({{"x", x}})[0].to_doubles(), (std::vector<double>{1, 0}));
}

TEST(Autograd, BadUpstreamGradientsAndForeignTapesAreRefused) {
    auto a = build(relu_graph(), {});
    auto b = build(relu_graph(), {});
    const auto x = Tensor::from_values(DType::float32, {2}, {1, -1});
    auto rec = a.session.run_recording({{"x", x}});
    EXPECT_EQ(error_of([&] { a.session.backward(rec.tape, {}); }),
              "backward needs one upstream gradient per graph output (1), got 0");
    EXPECT_EQ(error_of([&] { a.session.backward(rec.tape, {Tensor::zeros(DType::float32, {3})}); }),
              "upstream gradient of output 'output_1' is float32[3], expected a host float32[2]");
    EXPECT_EQ(error_of([&] { b.session.backward(rec.tape, {Tensor::zeros(DType::float32, {2})}); }),
              "the tape was recorded by another session (or moved from)");
    auto g = a.session.backward(rec.tape, {Tensor::from_values(DType::float32, {2}, {5, 5})});
    EXPECT_EQ(g.inputs.at("x").to_doubles(), (std::vector<double>{5, 0}));
}

// Tapes are per run: concurrent record + backward from many threads equals one thread's answer.
TEST(Autograd, ConcurrentTapesAreIndependent) {
    auto built = build(parse(R"(
        {"id": 0, "op": "input", "name": "x", "shape": [4, 8]},
        {"id": 1, "op": "linear", "name": "fc", "parents": [0], "attrs": {"out_features": 3}, "shape": [4, 3]},
        {"id": 2, "op": "tanh", "parents": [1], "shape": [4, 3]},
        {"id": 3, "op": "sum", "parents": [2], "shape": []})", "[3]"),
                       {{"fc.weight", Tensor::from_values(DType::float32, {3, 8}, pseudo_random(24, 9, 0.5))},
                        {"fc.bias", Tensor::from_values(DType::float32, {3}, pseudo_random(3, 10, 0.5))}});
    auto grad_for = [&](std::uint64_t seed) {
        auto x = Tensor::from_values(DType::float32, {4, 8}, pseudo_random(32, seed, 1.0));
        auto rec = built.session.run_recording({{"x", x}});
        return built.session.backward(rec.tape, {scalar(1, DType::float32)}).parameters.at("fc.weight");
    };
    std::vector<Tensor> single;
    for (std::uint64_t s = 0; s < 8; ++s) single.push_back(grad_for(s));
    std::vector<std::thread> threads;
    std::vector<int> mismatches(8, 0);
    for (std::uint64_t s = 0; s < 8; ++s)
        threads.emplace_back([&, s] {
            for (int r = 0; r < 50; ++r) mismatches[s] += !grad_for(s).bitwise_equal(single[s]);
        });
    for (auto& t : threads) t.join();
    for (auto m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
