// The training loop: forward with a tape, backward, optimizer step, batch after batch; every
// kernel is a capsule of the plans the gate accepted under the profile.
#include <chrono>
#include <cstring>
#include <random>

#include "capsule/training.hpp"

namespace capsule {

using std::string;

namespace {

/// Copies rows `order[first..first+count)` of `source` ([N, ...]) into rows 0.. of `batch`; rows
/// past `count` are zero (padding).
void gather_rows(const Tensor& source, const std::vector<std::int64_t>& order, std::int64_t first,
                 std::int64_t count, Tensor& batch) {
    const std::size_t row = source.nbytes() / static_cast<std::size_t>(std::max<std::int64_t>(source.shape()[0], 1));
    auto* out = static_cast<unsigned char*>(batch.data());
    const auto* in = static_cast<const unsigned char*>(source.data());
    for (std::int64_t i = 0; i < count; ++i)
        std::memcpy(out + std::size_t(i) * row, in + std::size_t(order[std::size_t(first + i)]) * row, row);
    std::memset(out + std::size_t(count) * row, 0, batch.nbytes() - std::size_t(count) * row);
}

std::vector<std::int64_t> identity_order(std::int64_t n) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) order[std::size_t(i)] = i;
    return order;
}

/// Fisher–Yates with 64-bit draws reduced by rejection, so the permutation depends only on the
/// generator's output (std::shuffle's is implementation-defined).
void shuffle(std::vector<std::int64_t>& order, std::mt19937_64& engine) {
    for (std::size_t i = order.size(); i > 1; --i) {
        const std::uint64_t bound = i, limit = UINT64_MAX - UINT64_MAX % bound;
        std::uint64_t r;
        do r = engine(); while (r >= limit);
        std::swap(order[i - 1], order[r % bound]);
    }
}

}  // namespace

double accuracy(const Session& inference, const ImageDataset& data) {
    if (inference.inputs().size() != 1 || inference.outputs().empty())
        throw Error(ErrorCode::input, "accuracy needs a model with one input (image) and the logits as first output");
    const auto& in = inference.inputs()[0].type;
    const auto& out = inference.outputs()[0].type;
    if (in.dtype != DType::float32 || in.shape.size() != 4 || in.shape[1] != 1 || in.shape[2] != 28 ||
        in.shape[3] != 28)
        throw Error(ErrorCode::input, "the model's input '" + inference.inputs()[0].name + "' is " +
                         string(to_string(in.dtype)) + to_string(in.shape) +
                         ", expected float32[B, 1, 28, 28] images");
    const std::int64_t batch = in.shape[0];
    const auto classes = static_cast<std::int64_t>(fashion_mnist_classes().size());
    if (out.shape.size() != 2 || out.shape[0] != batch || out.shape[1] != classes ||
        !(out.dtype == DType::float32 || out.dtype == DType::float64))
        throw Error(ErrorCode::input, "the model's output '" + inference.outputs()[0].name + "' is " +
                         string(to_string(out.dtype)) + to_string(out.shape) + ", expected logits [" +
                         std::to_string(batch) + ", " + std::to_string(classes) + "]");
    const auto order = identity_order(data.size());
    const auto labels = data.labels.values<std::int64_t>();
    Tensor images = Tensor::zeros(DType::float32, in.shape);
    std::int64_t correct = 0;
    for (std::int64_t first = 0; first < data.size(); first += batch) {
        const std::int64_t count = std::min(batch, data.size() - first);
        gather_rows(data.images, order, first, count, images);
        const auto logits = inference.run({{inference.inputs()[0].name, images}})[0].to_doubles();
        for (std::int64_t i = 0; i < count; ++i) {
            const auto* row = logits.data() + std::size_t(i * classes);
            const auto best = std::max_element(row, row + classes) - row;
            correct += best == labels[std::size_t(first + i)];
        }
    }
    return data.size() ? double(correct) / double(data.size()) : 0.0;
}

TrainingPlans plan_training(const BackendProfile& profile, const PluginHost& host, ModelKind kind,
                            const TrainingConfig& config) {
    TrainingPlans plans{model_graph(kind, config.batch_size), {}, {}, {}, {}};
    plans.training = training_graph(plans.model);
    plans.training_plan = profile.accept_graph(host, plans.training);
    const BackendOp step[] = {optimizer_op(config.optimizer)};
    plans.optimizer_plan = profile.gate_ops(host, step);
    plans.inference_plan = profile.accept_graph(host, plans.model);
    return plans;
}

struct Trainer::Impl {
    TrainingConfig config;
    Graph model;
    ParameterMap parameters;
    Session training, inference;
    bool inference_stale = false;  // parameters written since the inference session's refresh
    Optimizer optimizer;
    std::mt19937_64 shuffler;
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;
Trainer::~Trainer() = default;

const ParameterMap& Trainer::parameters() const { return impl_->parameters; }
const Graph& Trainer::model() const { return impl_->model; }

Trainer Trainer::create(const BackendProfile& profile, const PluginHost& host,
                        const TrainingPlans& plans, const TrainingConfig& config) {
    if (!plans.accepted())
        throw Error(ErrorCode::input, "the training plans were not accepted under profile " + profile.name);
    auto params = initial_parameters(plans.model, config.seed);
    SessionOptions no_input_grads;
    no_input_grads.input_gradients = false;
    // The training session only records (run_recording calls kernels node by node), so compiled
    // groups would be compiled, at creation and at every step's refresh, and never run; external
    // autograd is the exception: it records whole groups.
    no_input_grads.compile_groups = profile.config.vjp_mode == VJPMode::external_autograd;
    // Both sessions read `params` in place (CPU); after optimizer steps each is refreshed
    // (Session::refresh_parameters), as its kernels and groups may keep copies of weights.
    auto training = Session::create(profile, *plans.training_plan.accepted, plans.training, host,
                                    params, no_input_grads);
    if (!training.backward_refusal().empty()) throw Error(ErrorCode::other, training.backward_refusal());
    auto inference = Session::create(profile, *plans.inference_plan.accepted, plans.model, host, params);
    auto optimizer = Optimizer::create(profile, *plans.optimizer_plan.accepted, host, config.optimizer);
    // The shuffling stream is separate from initialisation's, derived from the same seed.
    std::mt19937_64 shuffler(config.seed ^ 0x9e3779b97f4a7c15ull);
    return Trainer(std::make_unique<Impl>(Impl{config, plans.model, std::move(params),
                                               std::move(training), std::move(inference), false,
                                               std::move(optimizer), shuffler}));
}

EpochResult Trainer::train_epoch(const ImageDataset& train,
                                 const std::function<void(std::int64_t, std::int64_t, double)>& progress) {
    Impl& m = *impl_;
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t batch = m.config.batch_size;
    const std::int64_t batches = train.size() / batch;
    if (batches == 0)
        throw Error(ErrorCode::input, "the training set (" + std::to_string(train.size()) +
                         " images) is smaller than one batch (" + std::to_string(batch) + ")");
    auto order = identity_order(train.size());
    shuffle(order, m.shuffler);
    Tensor images = Tensor::zeros(DType::float32, {batch, 1, 28, 28});
    Tensor labels = Tensor::zeros(DType::int64, {batch});
    const Tensor one = Tensor::from_values(DType::float32, {}, {1.0});
    double loss_sum = 0;
    for (std::int64_t b = 0; b < batches; ++b) {
        gather_rows(train.images, order, b * batch, batch, images);
        gather_rows(train.labels, order, b * batch, batch, labels);
        auto recorded = m.training.run_recording({{"image", images}, {"label", labels}});
        const double loss = recorded.outputs[0].at(0);
        if (!std::isfinite(loss))
            throw Error(ErrorCode::other, "training diverged: loss is " + std::to_string(loss) + " at step " +
                                 std::to_string(m.optimizer.steps_taken() + 1) +
                                 "; lower the learning rate");
        const auto grads = m.training.backward(recorded.tape, {one});
        m.optimizer.step(m.parameters, grads.parameters);
        m.inference_stale = true;
        m.training.refresh_parameters();
        loss_sum += loss;
        if (progress) progress(b + 1, batches, loss_sum / double(b + 1));
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return {loss_sum / double(batches), elapsed.count(), batches};
}

double Trainer::evaluate(const ImageDataset& test) const {
    // Refreshed here rather than per step: evaluation is rare, steps are many.
    if (impl_->inference_stale) {
        impl_->inference.refresh_parameters();
        impl_->inference_stale = false;
    }
    return accuracy(impl_->inference, test);
}

}  // namespace capsule
