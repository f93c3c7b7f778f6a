// Plan + lower + gate time of checked_cpu for chain graphs of 1k to 1M nodes (targets: a
// 10,000-node graph plans in milliseconds; 100,000 nodes in at most 50 ms; time per node flat, i.e.
// linear cost). Graph checking (shape inference) is part of planning and is included; JSON parsing
// and session creation are measured separately (BM_ReadGraph, BM_CreateSession).
#include <benchmark/benchmark.h>

#include "capsule/profile.hpp"
#include "capsule/session.hpp"

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
BENCHMARK(BM_PlanLowerGate)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond);

void set_node_counters(benchmark::State& state) {
    state.counters["nodes"] = static_cast<double>(state.range(0));
    state.counters["ns_per_node"] = benchmark::Counter(
        static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate |
                                                 benchmark::Counter::kInvert);
}

/// Parsing the JSON IR text of the chain graph (strict JSON reader + node decoding).
void BM_ReadGraph(benchmark::State& state) {
    const auto text = graph_to_json(chain_graph(state.range(0)));
    for (auto _ : state) {
        auto graph = parse_graph(text, "chain.json");
        benchmark::DoNotOptimize(graph);
    }
    set_node_counters(state);
}
BENCHMARK(BM_ReadGraph)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

/// Session creation (slots, views, steps, backward program) from an accepted plan.
void BM_CreateSession(benchmark::State& state) {
    const auto graph = chain_graph(state.range(0));
    const auto& profile = find_builtin_profile("checked_cpu");
    auto result = profile.accept_graph(host(), graph);
    if (!result.accepted) {
        state.SkipWithError("plan was rejected");
        return;
    }
    for (auto _ : state) {
        try {
            auto session = Session::create(profile, *result.accepted, graph, host(), {});
            benchmark::DoNotOptimize(session);
        } catch (const Error& e) {
            state.SkipWithError(e.what());
            break;
        }
    }
    set_node_counters(state);
}
BENCHMARK(BM_CreateSession)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
