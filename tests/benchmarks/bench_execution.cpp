// Executor overhead: a chain of 1,000 tiny ops run through a Session vs the same kernels
// called directly through the plugin table; plugin discovery + load time per plugin; session
// creation time. The per-node dispatch overhead is (session - direct) / 1000, printed as the
// `overhead_ns_per_node` counter of BM_SessionChain.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

#include "capsule/session.hpp"

using namespace capsule;

namespace {

constexpr int kChain = 1000;

PluginSearchPath plugin_dir() {
    PluginSearchPath search;
    search.entries.push_back(CAPSULE_PLUGIN_DIR);
    return search;
}

const PluginHost& host() {
    static const PluginHost h = PluginHost::discover(plugin_dir());
    return h;
}

/// x [8] → relu → neg-free unary chain (relu, abs, relu, ...) of kChain nodes.
Graph chain() {
    Graph g;
    Node x;
    x.id = 0;
    x.kind = NodeKind::input;
    x.name = "x";
    x.shape = {8};
    g.nodes.push_back(x);
    for (int i = 1; i <= kChain; ++i) {
        Node n;
        n.id = i;
        n.op = i % 2 ? BackendOp::relu : BackendOp::abs;
        n.parents = {i - 1};
        n.shape = {8};
        g.nodes.push_back(n);
    }
    g.outputs = {kChain};
    return g;
}

struct Fixture {
    Graph graph = chain();
    BackendProfile profile = find_builtin_profile("checked_cpu");
    AcceptedPlanResult accepted = profile.accept_graph(host(), graph);
    Tensor input = Tensor::from_values(DType::float32, {8}, {1, -2, 3, -4, 5, -6, 7, -8});
};

Fixture& fixture() {
    static Fixture f;
    return f;
}

/// Time of one run of the 1,000 kernels called directly, in ns (median of 200 runs).
double direct_ns() {
    const auto plugin = host().library(*host().plugin_of("reference.relu")).plugin;
    const auto* relu = plugin->kernel("reference.relu");
    const auto* abs = plugin->kernel("reference.abs");
    std::vector<float> a(8), b(8);
    const std::int64_t shape[1] = {8}, strides[1] = {1};
    capsule_tensor_view va{sizeof(capsule_tensor_view), 0, 0, 1, shape, strides, a.data()};
    capsule_tensor_view vb = va;
    vb.data = b.data();
    capsule_forward_args args{};
    args.struct_size = sizeof args;
    args.num_inputs = 1;
    args.num_outputs = 1;
    std::vector<double> samples;
    for (int rep = 0; rep < 200; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 1; i <= kChain; ++i) {
            args.inputs = i % 2 ? &va : &vb;
            args.outputs = i % 2 ? &vb : &va;
            capsule_status st{};
            (i % 2 ? relu : abs)->forward(&args, &st);
        }
        samples.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
}

void BM_DirectKernelChain(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(direct_ns());
    state.counters["ns_per_node"] = direct_ns() / kChain;
}
BENCHMARK(BM_DirectKernelChain)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_SessionChain(benchmark::State& state) {
    auto& f = fixture();
    if (!f.accepted.accepted) return state.SkipWithError("chain plan rejected");
    auto session = Session::create(f.profile, *f.accepted.accepted, f.graph, host(), {});
    const std::map<std::string, Tensor> inputs{{"x", f.input}};
    for (auto _ : state) benchmark::DoNotOptimize(session.run(inputs));
    // Medians of 200 runs each, measured back to back so both see the same machine load.
    std::vector<double> samples;
    for (int rep = 0; rep < 200; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        benchmark::DoNotOptimize(session.run(inputs));
        samples.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(samples.begin(), samples.end());
    const double session_ns = samples[samples.size() / 2], direct = direct_ns();
    state.counters["session_ns_per_node"] = session_ns / kChain;
    state.counters["direct_ns_per_node"] = direct / kChain;
    state.counters["overhead_ns_per_node"] = (session_ns - direct) / kChain;
}
BENCHMARK(BM_SessionChain)->Unit(benchmark::kMicrosecond);

void BM_PluginDiscoveryAndLoad(benchmark::State& state) {
    std::size_t plugins = 0;
    for (auto _ : state) {
        auto h = PluginHost::discover(plugin_dir());
        plugins = h.plugins().size();
        benchmark::DoNotOptimize(h);
    }
    state.counters["plugins"] = static_cast<double>(plugins);
    state.counters["us_per_plugin"] = benchmark::Counter(
        static_cast<double>(plugins) / 1e6,
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PluginDiscoveryAndLoad)->Unit(benchmark::kMillisecond);

void BM_SessionCreate(benchmark::State& state) {
    auto& f = fixture();
    if (!f.accepted.accepted) return state.SkipWithError("chain plan rejected");
    for (auto _ : state)
        benchmark::DoNotOptimize(Session::create(f.profile, *f.accepted.accepted, f.graph, host(), {}));
    state.counters["nodes"] = kChain;
}
BENCHMARK(BM_SessionCreate)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
