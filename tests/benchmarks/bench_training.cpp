// Training-step cost of the main job's models on the reference capsules: one forward
// pass alone, forward + backward through the tape, and a whole step (forward, backward, SGD),
// batch 64 of random images. The ratio backward/forward is printed as a counter; images/s is
// Google Benchmark's items_per_second.
#include <benchmark/benchmark.h>

#include "capsule/training.hpp"

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

constexpr std::int64_t kBatch = 64;

struct Setup {
    BackendProfile profile = find_builtin_profile("checked_cpu");
    TrainingConfig config{kBatch, SgdOptions{.lr = 0.01, .momentum = 0.9}, 0};
    TrainingPlans plans;
    ParameterMap params;
    std::optional<Session> training;
    std::optional<Optimizer> optimizer;
    Tensor images = Tensor::zeros(DType::float32, {kBatch, 1, 28, 28});
    Tensor labels = Tensor::zeros(DType::int64, {kBatch});

    explicit Setup(ModelKind kind) : plans(plan_training(profile, host(), kind, config)) {
        params = initial_parameters(plans.model, 0);
        SessionOptions options;
        options.input_gradients = false;
        training.emplace(Session::create(profile, *plans.training_plan.accepted, plans.training, host(), params, options));
        optimizer.emplace(Optimizer::create(profile, *plans.optimizer_plan.accepted, host(), config.optimizer));
        auto pixels = images.values<float>();
        for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = float((i * 2654435761u) % 256) / 255.0f;
        auto classes = labels.values<std::int64_t>();
        for (std::size_t i = 0; i < classes.size(); ++i) classes[i] = std::int64_t(i % 10);
    }
    std::map<std::string, Tensor> inputs() const { return {{"image", images}, {"label", labels}}; }
};

Setup& setup(ModelKind kind) {
    static Setup mlp(ModelKind::mlp), lenet(ModelKind::lenet);
    return kind == ModelKind::mlp ? mlp : lenet;
}

const Tensor kOne = Tensor::from_values(DType::float32, {}, {1.0});

void BM_Forward(benchmark::State& state) {
    auto& s = setup(ModelKind(state.range(0)));
    for (auto _ : state) benchmark::DoNotOptimize(s.training->run(s.inputs()));
    state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_ForwardBackward(benchmark::State& state) {
    auto& s = setup(ModelKind(state.range(0)));
    for (auto _ : state) {
        auto recorded = s.training->run_recording(s.inputs());
        benchmark::DoNotOptimize(s.training->backward(recorded.tape, {kOne}));
    }
    state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_TrainingStep(benchmark::State& state) {
    auto& s = setup(ModelKind(state.range(0)));
    for (auto _ : state) {
        auto recorded = s.training->run_recording(s.inputs());
        auto grads = s.training->backward(recorded.tape, {kOne});
        s.optimizer->step(s.params, grads.parameters);
    }
    state.SetItemsProcessed(state.iterations() * kBatch);
}

}  // namespace

// Arg 0: mlp, 1: lenet.
BENCHMARK(BM_Forward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainingStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
