// Sessions on the reference plugin: a whole MLP against a float64 computation done here, input and
// parameter errors, and concurrent runs that must be bit-identical to a single thread.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include <unistd.h>

#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
using namespace capsule::testing;
namespace fs = std::filesystem;

namespace {



struct Mlp {
    Graph graph;
    ParameterMap params;
    Tensor x;
};

Mlp make_mlp() {
    Mlp m;
    m.graph = load_graph(fs::path(CAPSULE_SOURCE_DIR) / "examples" / "mlp.json");
    m.params["fc1.weight"] = Tensor::from_values(DType::float32, {256, 784}, pseudo_random(256 * 784, 1, 0.05));
    m.params["fc1.bias"] = Tensor::from_values(DType::float32, {256}, pseudo_random(256, 2, 0.1));
    m.params["fc2.weight"] = Tensor::from_values(DType::float32, {10, 256}, pseudo_random(2560, 3, 0.1));
    m.params["fc2.bias"] = Tensor::from_values(DType::float32, {10}, pseudo_random(10, 4, 0.1));
    m.x = Tensor::from_values(DType::float32, {4, 784}, pseudo_random(4 * 784, 5, 1.0));
    return m;
}

/// softmax(relu(x W1ᵀ + b1) W2ᵀ + b2), in double, straight from the definitions.
std::vector<double> mlp_expected(const Mlp& m) {
    auto w1 = m.params.at("fc1.weight").to_doubles(), b1 = m.params.at("fc1.bias").to_doubles();
    auto w2 = m.params.at("fc2.weight").to_doubles(), b2 = m.params.at("fc2.bias").to_doubles();
    auto x = m.x.to_doubles();
    std::vector<double> out;
    for (int r = 0; r < 4; ++r) {
        std::vector<double> h(256);
        for (int j = 0; j < 256; ++j) {
            double s = b1[j];
            for (int k = 0; k < 784; ++k) s += x[r * 784 + k] * w1[j * 784 + k];
            h[j] = std::max(0.0, s);
        }
        std::vector<double> z(10);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < 10; ++j) {
            z[j] = b2[j];
            for (int k = 0; k < 256; ++k) z[j] += h[k] * w2[j * 256 + k];
            mx = std::max(mx, z[j]);
        }
        for (auto& v : z) sum += (v = std::exp(v - mx));
        for (auto v : z) out.push_back(v / sum);
    }
    return out;
}

Session mlp_session(const Mlp& m) {
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), m.graph);
    if (!accepted.accepted) throw std::runtime_error("MLP plan rejected");
    return Session::create(profile, *accepted.accepted, m.graph, built_host(), m.params);
}

}  // namespace

TEST(Session, ReferencePluginLoads) {
    const PluginRecord* ref = nullptr;
    for (const auto& r : built_host().plugins())
        if (r.name == "reference") ref = &r;
    ASSERT_NE(ref, nullptr);
    EXPECT_EQ(ref->status, PluginStatus::available) << ref->failure;
    auto outcome = built_host().library(*ref);
    ASSERT_TRUE(outcome.plugin) << outcome.failure;
    EXPECT_EQ(outcome.plugin->kernels.size(), all_values<BackendOp>().size());
    EXPECT_TRUE(outcome.plugin->probe().usable);
}

TEST(Session, MlpMatchesADirectComputation) {
    auto m = make_mlp();
    auto session = mlp_session(m);
    EXPECT_EQ(session.kernel_trace(), (std::vector<std::string>{"reference.linear", "reference.relu",
                                                                "reference.linear", "reference.softmax"}));
    ASSERT_EQ(session.inputs().size(), 1u);
    EXPECT_EQ(session.inputs()[0].name, "x");
    EXPECT_EQ(session.outputs()[0].name, "probs");
    auto out = session.run({{"x", m.x}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{4, 10}));
    auto want = mlp_expected(m);
    auto got = out[0].to_doubles();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * want[i]) << i;
    // Runs many times with the same result.
    EXPECT_TRUE(session.run({{"x", m.x}})[0].bitwise_equal(out[0]));
}

TEST(Session, TimedRunGivesTheSameOutputsAndOneTimingPerStep) {
    auto m = make_mlp();
    auto session = mlp_session(m);
    const auto steps = session.steps();
    ASSERT_EQ(steps.size(), 4u);
    const std::vector<std::int64_t> ids{1, 2, 3, 4};
    for (std::size_t i = 0; i < steps.size(); ++i) {
        EXPECT_EQ(steps[i].node_id, ids[i]);
        EXPECT_EQ(steps[i].capsule, session.kernel_trace()[i]);
        EXPECT_EQ(steps[i].provider, Provider::reference);
        EXPECT_EQ(steps[i].plugin, "reference");
    }
    EXPECT_EQ(steps[3].op, BackendOp::softmax);
    RunTimings timings;
    auto timed = session.run({{"x", m.x}}, timings);
    auto plain = session.run({{"x", m.x}});
    EXPECT_EQ(timed[0].to_doubles(), plain[0].to_doubles());
    ASSERT_EQ(timings.steps.size(), steps.size());
    for (std::size_t i = 0; i + 1 < steps.size(); ++i)
        EXPECT_LE(timings.steps[i].begin + timings.steps[i].duration, timings.steps[i + 1].begin);
    EXPECT_LE(timings.steps.back().begin + timings.steps.back().duration, timings.total);
}

TEST(Session, ConcurrentRunsAreBitIdenticalToOneThread) {
    auto m = make_mlp();
    auto session = mlp_session(m);
    std::vector<Tensor> inputs;
    std::vector<Tensor> expected;
    for (int i = 0; i < 8; ++i) {
        inputs.push_back(Tensor::from_values(DType::float32, {4, 784}, pseudo_random(4 * 784, 100 + i, 1.0)));
        expected.push_back(session.run({{"x", inputs.back()}})[0]);
    }
    std::vector<int> mismatches(8, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int r = 0; r < 500; ++r) {
                const int which = (t + r) % 8;  // threads interleave different inputs
                auto out = session.run({{"x", inputs[which]}});
                if (!out[0].bitwise_equal(expected[which])) ++mismatches[t];
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 8; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// One session over a convolutional graph with parameters (examples/lenet.json: conv, pooling,
// flatten, linear), run from 8 threads at once, 50 runs each: every output equals, bit for bit,
// what a single thread computed for the same input. The tsan preset runs this under
// ThreadSanitizer.
TEST(Session, ConcurrentLeNetRunsAreBitIdenticalToOneThread) {
    auto graph = load_graph(fs::path(CAPSULE_SOURCE_DIR) / "examples" / "lenet.json");
    const ParameterMap params = capsule::testing::random_parameters(graph, 1, 0.2);
    ASSERT_EQ(params.size(), 10u);  // weight and bias of conv1, conv2, fc1, fc2, fc3
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), graph);
    ASSERT_TRUE(accepted.accepted);
    auto session = Session::create(profile, *accepted.accepted, graph, built_host(), params);

    constexpr int kThreads = 8, kRuns = 50;
    std::vector<Tensor> inputs, expected;
    for (int i = 0; i < kThreads; ++i) {
        inputs.push_back(Tensor::from_values(DType::float32, {1, 1, 28, 28}, pseudo_random(784, 200 + i, 1.0)));
        expected.push_back(session.run({{"image", inputs.back()}})[0]);
    }
    for (int i = 1; i < kThreads; ++i) ASSERT_FALSE(expected[i].bitwise_equal(expected[0]));  // inputs matter
    std::vector<int> mismatches(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int r = 0; r < kRuns; ++r) {
                const int which = (t + r) % kThreads;  // threads interleave different inputs
                auto out = session.run({{"image", inputs[which]}});
                if (out.size() != 1 || !out[0].bitwise_equal(expected[which])) ++mismatches[t];
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(Session, InputErrorsNameTheInput) {
    auto m = make_mlp();
    auto session = mlp_session(m);
    EXPECT_EQ(error_of([&] { session.run({}); }), "missing input 'x'");
    auto wrong = Tensor::from_values(DType::float32, {2, 784}, pseudo_random(2 * 784, 1, 1));
    EXPECT_EQ(error_of([&] { session.run({{"x", wrong}}); }),
              "input 'x' is float32[2, 784], the graph declares float32[4, 784]");
    EXPECT_EQ(error_of([&] { session.run({{"x", m.x}, {"y", m.x}}); }), "unknown input 'y'");
    // Input x is node 0: by its id alone it binds; by its name and its id, one value would be
    // dropped silently.
    EXPECT_EQ(session.run({{"0", m.x}}).size(), 1u);
    EXPECT_EQ(error_of([&] { session.run({{"x", m.x}, {"0", m.x}}); }), "input 'x' given twice: by name and by id 0");
}

TEST(Session, ParameterErrorsNameTheParameter) {
    auto m = make_mlp();
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), m.graph);
    ASSERT_TRUE(accepted.accepted);
    auto missing = m.params;
    missing.erase("fc2.bias");
    EXPECT_EQ(error_of([&] { Session::create(profile, *accepted.accepted, m.graph, built_host(), missing); }),
              "node 3 (linear): parameter 'fc2.bias' is missing from the parameters file");
    auto wrong = m.params;
    wrong["fc1.bias"] = Tensor::zeros(DType::float64, {256});
    EXPECT_EQ(error_of([&] { Session::create(profile, *accepted.accepted, m.graph, built_host(), wrong); }),
              "node 1 (linear): parameter 'fc1.bias' is float64[256], expected float32[256]");
    auto extra = m.params;
    extra["fc3.weight"] = Tensor::zeros(DType::float32, {1});
    EXPECT_EQ(error_of([&] { Session::create(profile, *accepted.accepted, m.graph, built_host(), extra); }),
              "the parameters file holds tensors that no node uses: fc3.weight");
}

TEST(Session, GraphParametersAreReadFromTheSafetensorsFileBesideTheGraph) {
    auto m = make_mlp();
    auto dir = fs::temp_directory_path() / ("capsule-session-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    write_safetensors(dir / "weights.safetensors", m.params);
    m.graph.parameters = "weights.safetensors";
    m.graph.source = dir / "mlp.json";
    auto loaded = load_graph_parameters(m.graph);
    ASSERT_EQ(loaded.size(), 4u);
    EXPECT_TRUE(loaded.at("fc1.weight").bitwise_equal(m.params.at("fc1.weight")));
    fs::remove_all(dir);
}

TEST(Session, PlanFromAnotherGraphIsRefused) {
    auto m = make_mlp();
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), m.graph);
    ASSERT_TRUE(accepted.accepted);
    auto other = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [3]}], "outputs": [1]})");
    auto msg = error_of([&] { Session::create(profile, *accepted.accepted, other, built_host(), {}); });
    EXPECT_NE(msg.find("the accepted plan does not match the graph"), std::string::npos) << msg;
}

// A plan made for one graph and used for another whose node has a dtype its capsule does not
// declare (reference.gather_scalar keeps ABI 1.0's four) is refused before any kernel runs.
TEST(Session, APlanWhoseCapsuleDoesNotDeclareTheNodesDtypeIsRefused) {
    auto graph_of = [](const std::string& dtype) {
        return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
            {"id": 0, "op": "input", "name": "x", "shape": [3], "dtype": ")" + dtype + R"("},
            {"id": 1, "op": "gather_scalar", "parents": [0], "attrs": {"index": 1}, "shape": [], "dtype": ")" +
                           dtype + R"("}], "outputs": [1]})");
    };
    const auto& profile = find_builtin_profile("checked_cpu");
    const Graph float32 = graph_of("float32"), int32 = graph_of("int32");
    EXPECT_THROW(profile.accept_graph(built_host(), int32), Error);  // the planner refuses it itself
    auto accepted = profile.accept_graph(built_host(), float32);
    ASSERT_TRUE(accepted.accepted);
    try {
        Session::create(profile, *accepted.accepted, int32, built_host(), {});
        ADD_FAILURE() << "the session was created";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::planning);
        EXPECT_NE(std::string(e.what()).find("the accepted plan puts node 1 on capsule reference.gather_scalar, which "
                                             "does not accept dtype int32 (its output)"),
                  std::string::npos)
            << e.what();
    }
    // The float32 graph runs: x[1].
    auto session = Session::create(profile, *accepted.accepted, float32, built_host(), {});
    EXPECT_EQ(session.run({{"x", Tensor::from_values(DType::float32, {3}, {4, 5, 6})}})[0].at(0), 5.0);
}

// An output with a data-dependent length (Graph::output_lengths) comes back cut to its length
// node's value, also under compiled groups; a length outside 0..bound is the runtime's error,
// naming the output, never an out-of-bounds read.
TEST(SessionOutputLengths, OutputsAreCutToTheirLengthAndBadLengthsAreRefused) {
    auto graph = [](const std::string& length_node) {
        return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
      {"id": 0, "op": "input", "name": "x", "shape": [2, 3]},
      {"id": 1, "op": "non_zero", "parents": [0], "shape": [2, 6], "dtype": "int64"},
      {"id": 2, "op": "slice", "parents": [1], "attrs": {"starts": [0], "ends": [1], "axes": [0]}, "shape": [1, 6], "dtype": "int64"},
      {"id": 3, "op": "const", "name": "zero", "shape": [], "dtype": "int64"},
      {"id": 4, "op": "greater_equal", "parents": [2, 3], "shape": [1, 6], "dtype": "bool"},
      {"id": 5, "op": "cast", "parents": [4], "attrs": {"to": "float64"}, "shape": [1, 6], "dtype": "float64"},
      {"id": 6, "op": "reduce_sum", "parents": [5], "shape": [], "dtype": "float64"},
      {"id": 7, "op": "cast", "parents": [6], "attrs": {"to": "int64"}, "shape": [], "dtype": "int64"},
      {"id": 8, "op": "const", "name": "wrong", "shape": [], "dtype": "int64"}
    ], "outputs": [1], "output_lengths": [{"output": 1, "axis": 1, "length": )" + length_node + "}]}");
    };
    const ParameterMap params{{"zero", Tensor::from_values(DType::int64, {}, {0})},
                              {"wrong", Tensor::from_values(DType::int64, {}, {7})}};
    const std::map<std::string, Tensor> x{{"x", Tensor::from_values(DType::float32, {2, 3}, {0, 1, 0, 2, 0, 3})}};
    for (const bool grouped : {false, true}) {
        SessionOptions options;
        options.compile_groups = grouped;
        auto session = session_under("checked_cpu", graph("7"), params, options);
        const Tensor out = session.run(x)[0];
        EXPECT_EQ(out.shape(), (Shape{2, 3}));
        EXPECT_EQ(out.to_doubles(), (std::vector<double>{0, 1, 1, 1, 0, 2}));  // (0,1), (1,0), (1,2)
    }
    auto wrong = session_under("checked_cpu", graph("8"), params);
    const std::string why = error_of([&] { wrong.run(x); });
    EXPECT_NE(why.find("output 'output_1': its length node gave 7, outside 0..6 along axis 1"), std::string::npos) << why;
    // A graph changed in code after planning: its lengths are checked when the session is made.
    Graph changed = graph("7");
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), changed);
    ASSERT_TRUE(accepted.accepted.has_value());
    for (const auto& [axis, node] : {std::pair<std::int64_t, std::int64_t>{2, 7}, {1, 0}, {1, 99}}) {
        changed.output_lengths = {{1, axis, node}};
        const std::string bad = error_of([&] { Session::create(profile, *accepted.accepted, changed, built_host(), params); });
        EXPECT_NE(bad.find("output_lengths of output 1: axis"), std::string::npos) << bad;
    }
}
