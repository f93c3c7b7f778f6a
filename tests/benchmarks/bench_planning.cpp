// Plan + lower + gate time of checked_cpu for chain graphs of 1k, 10k and 100k nodes (issue 2's
// target: a 10,000-node graph plans in milliseconds). Graph checking (shape inference) is part of
// planning and is included; JSON parsing is not.
#include <benchmark/benchmark.h>

#include "capsule/profile.hpp"

using namespace capsule;

namespace {

const PluginHost& host() {
    static const PluginHost h = [] {
        PluginSearchPath search;
        search.entries.push_back(CAPSULE_PLUGIN_DIR);
        return PluginHost::discover(search);
    }();
    return h;
}

/// input [16, 32] followed by n-1 unary/binary nodes cycling through five ops.
Graph chain_graph(std::int64_t n) {
    Graph g;
    Node input;
    input.id = 0;
    input.kind = NodeKind::input;
    input.name = "x";
    input.shape = {16, 32};
    g.nodes.push_back(input);
    const BackendOp cycle[] = {BackendOp::relu, BackendOp::sigmoid, BackendOp::add, BackendOp::tanh,
                               BackendOp::mul};
    for (std::int64_t i = 1; i < n; ++i) {
        Node node;
        node.id = i;
        node.op = cycle[i % 5];
        node.parents = {i - 1};
        if (*node.op == BackendOp::add || *node.op == BackendOp::mul) node.parents.push_back(0);
        node.shape = {16, 32};
        g.nodes.push_back(node);
    }
    g.outputs = {n - 1};
    return g;
}

void BM_PlanLowerGate(benchmark::State& state) {
    const auto graph = chain_graph(state.range(0));
    const auto& profile = find_builtin_profile("checked_cpu");
    for (auto _ : state) {
        try {
            auto result = profile.accept_graph(host(), graph);
            if (!result.accepted) state.SkipWithError("plan was rejected");
            benchmark::DoNotOptimize(result);
        } catch (const Error& e) {
            state.SkipWithError(e.what());
            break;
        }
    }
    state.counters["nodes"] = static_cast<double>(state.range(0));
    state.counters["ns_per_node"] = benchmark::Counter(
        static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate |
                                                 benchmark::Counter::kInvert);
}
BENCHMARK(BM_PlanLowerGate)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
