// onednn_cpu against checked_cpu on whole models, in one process, interleaved: an MLP
// 784-256-256-10 (batch 1 and 64), a ResNet-like stem and two basic blocks at 224x224 (batch 1
// and 8), and the shared ONNX models squeezenet1_1 and mobilenet_v2 (tests/data/models; their
// batch is fixed at 2 in the files). For each workload three sessions are created once (threads:
// SessionOptions default, all cores): checked_cpu, onednn_cpu node by node (compiled groups off)
// and onednn_cpu with compiled groups (the plugin's fusion); they are warmed up, then run
// alternately for `rounds` rounds; each round times `reps` runs of each. Prints the median ms per
// run of each and the ratios fused / checked and fused / node by node.
// Usage: bench_onednn [rounds=7] [reps=3] [threads=0 (all cores)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>

#include "capsule/onnx_import.hpp"
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

Tensor random_tensor(const Shape& shape, std::mt19937& rng, double scale) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::uniform_real_distribution<double> dist(-scale, scale);
    std::vector<double> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = dist(rng);
    return Tensor::from_values(DType::float32, shape, v);
}

/// Builds a graph node by node, inferring shapes and drawing random parameters.
struct Builder {
    Graph graph;
    ParameterMap params;
    std::mt19937 rng{42};

    std::int64_t input(const std::string& name, Shape shape) {
        Node n;
        n.id = static_cast<std::int64_t>(graph.nodes.size());
        n.kind = NodeKind::input;
        n.name = name;
        n.shape = std::move(shape);
        graph.nodes.push_back(n);
        return n.id;
    }
    std::int64_t op(BackendOp op, std::vector<std::int64_t> parents, Attributes attrs = {}) {
        Node n;
        n.id = static_cast<std::int64_t>(graph.nodes.size());
        n.op = op;
        n.name = "n" + std::to_string(n.id);
        n.parents = std::move(parents);
        n.attrs = std::move(attrs);
        std::vector<TensorType> types;
        for (auto p : n.parents) types.push_back({graph.nodes[p].shape, graph.nodes[p].dtype});
        n.shape = infer_type(n, types).shape;
        for (const auto& spec : parameter_specs(n, types)) {
            double fan_in = 1;
            for (std::size_t i = 1; i < spec.type.shape.size(); ++i) fan_in *= double(spec.type.shape[i]);
            const bool variance = spec.key.ends_with("running_var");
            Tensor t = random_tensor(spec.type.shape, rng, 1.0 / std::sqrt(fan_in));
            if (variance) t = Tensor::from_values(DType::float32, spec.type.shape,
                                                  std::vector<double>(t.numel(), 1.0));
            params[spec.key] = t;
        }
        graph.nodes.push_back(n);
        return n.id;
    }
};

struct Workload {
    std::string name;
    Graph graph;
    ParameterMap params;
    std::map<std::string, Tensor> inputs;
};

Workload mlp(std::int64_t batch) {
    Builder b;
    auto x = b.input("x", {batch, 784});
    auto h = b.op(BackendOp::relu, {b.op(BackendOp::linear, {x}, {{"out_features", std::int64_t(256)}})});
    h = b.op(BackendOp::relu, {b.op(BackendOp::linear, {h}, {{"out_features", std::int64_t(256)}})});
    auto y = b.op(BackendOp::linear, {h}, {{"out_features", std::int64_t(10)}});
    b.graph.outputs = {y};
    std::mt19937 rng(1);
    return {"MLP 784-256-256-10, batch " + std::to_string(batch), b.graph, b.params,
            {{"x", random_tensor({batch, 784}, rng, 1.0)}}};
}

Workload resnet_like(std::int64_t batch) {
    Builder b;
    auto conv = [&](std::int64_t x, std::int64_t out, std::int64_t k, std::int64_t s, std::int64_t p) {
        return b.op(BackendOp::conv2d, {x},
                    {{"out_channels", out}, {"kernel_size", k}, {"stride", s}, {"padding", p}, {"bias", false}});
    };
    auto bn = [&](std::int64_t x) { return b.op(BackendOp::batch_norm, {x}); };
    auto x = b.input("x", {batch, 3, 224, 224});
    auto h = b.op(BackendOp::relu, {bn(conv(x, 64, 7, 2, 3))});
    h = b.op(BackendOp::max_pool2d_pad, {h}, {{"kernel_size", std::int64_t(3)}, {"stride", std::int64_t(2)}, {"padding", std::int64_t(1)}});
    for (int block = 0; block < 2; ++block) {
        auto y = b.op(BackendOp::relu, {bn(conv(h, 64, 3, 1, 1))});
        y = bn(conv(y, 64, 3, 1, 1));
        h = b.op(BackendOp::relu, {b.op(BackendOp::add, {y, h})});
    }
    h = b.op(BackendOp::avg_pool2d, {h}, {{"kernel_size", std::int64_t(56)}});
    h = b.op(BackendOp::flatten, {h});
    auto out = b.op(BackendOp::linear, {h}, {{"out_features", std::int64_t(10)}});
    b.graph.outputs = {out};
    std::mt19937 rng(2);
    return {"ResNet-like stem + 2 blocks (64 ch, 56x56), batch " + std::to_string(batch), b.graph, b.params,
            {{"x", random_tensor({batch, 3, 224, 224}, rng, 1.0)}}};
}

Workload onnx_model(const std::string& name, std::int64_t batch) {
    OnnxImportOptions options;
    options.input_shapes["input"] = {batch, 3, 224, 224};
    auto model = import_onnx(std::filesystem::path(CAPSULE_SOURCE_DIR) / "tests/data/models" / name / "model.onnx", options);
    std::mt19937 rng(3);
    ParameterMap params = model.parameters;
    auto inputs = bind_onnx_inputs(model, {{"input", random_tensor({batch, 3, 224, 224}, rng, 1.0)}}, params);
    return {name + ", batch " + std::to_string(batch), model.graph, params, inputs};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
    SessionOptions options;
    options.threads = argc > 3 ? std::atoi(argv[3]) : 0;
    std::printf("threads per session: %d (0 = all cores), %d rounds x %d runs each\n\n", options.threads, rounds, reps);
    std::vector<std::function<Workload()>> workloads{
        [] { return mlp(1); },           [] { return mlp(64); },
        [] { return resnet_like(1); },   [] { return resnet_like(8); },
        [] { return onnx_model("squeezenet1_1", 2); }, [] { return onnx_model("mobilenet_v2", 2); },
    };
    const auto& checked = find_builtin_profile("checked_cpu");
    const auto& dnn = find_builtin_profile("onednn_cpu");
    std::printf("| workload | checked_cpu ms | onednn node by node ms | onednn fused ms | fused / checked | "
                "fused / node by node | nodes on onednn | nodes in fused groups |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& make : workloads) {
        const Workload w = make();
        auto a1 = checked.accept_graph(host(), w.graph);
        auto a2 = dnn.accept_graph(host(), w.graph);
        if (!a1.accepted || !a2.accepted) {
            std::printf("| %s | plan rejected | | | |\n", w.name.c_str());
            continue;
        }
        std::size_t on_dnn = 0, total = 0;
        for (const auto& g : a2.accepted->plan().groups) {
            total += g.node_ids.size();
            if (g.capsule->provider == Provider::onednn) on_dnn += g.node_ids.size();
        }
        auto s1 = Session::create(checked, *a1.accepted, w.graph, host(), w.params, options);
        SessionOptions unfused = options;
        unfused.compile_groups = false;
        auto s2 = Session::create(dnn, *a2.accepted, w.graph, host(), w.params, unfused);
        auto s3 = Session::create(dnn, *a2.accepted, w.graph, host(), w.params, options);
        std::size_t in_groups = 0;
        for (const auto& g : s3.compiled_groups()) in_groups += g.node_ids.size();
        for (int i = 0; i < 2; ++i) {
            (void)s1.run(w.inputs);
            (void)s2.run(w.inputs);
            (void)s3.run(w.inputs);
        }
        std::vector<double> t1, t2, t3;
        auto time = [&](const Session& s, std::vector<double>& out) {
            for (int r = 0; r < reps; ++r) {
                auto t0 = std::chrono::steady_clock::now();
                (void)s.run(w.inputs);
                out.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
        };
        for (int r = 0; r < rounds; ++r) {
            time(s1, t1);
            time(s2, t2);
            time(s3, t3);
        }
        const double m1 = median(t1), m2 = median(t2), m3 = median(t3);
        std::printf("| %s | %.3f | %.3f | %.3f | %.2fx | %.2fx | %zu / %zu | %zu |\n", w.name.c_str(), m1, m2, m3,
                    m3 / m1, m3 / m2, on_dnn, total, in_groups);
        std::fflush(stdout);
    }
}
