// Training on Fashion-MNIST under a backend profile: the two models of the main job, PyTorch's
// default initialisation, and a training loop whose every kernel (forward, backward, optimizer
// step) is a capsule the profile planned and the gate accepted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "capsule/fashion_mnist.hpp"
#include "capsule/optimizer.hpp"
#include "capsule/session.hpp"

namespace capsule {

/// `mlp`: flatten, linear 784→256, relu, linear 256→256, relu, linear 256→10.
/// `lenet`: LeNet-5 (LeCun et al. 1998) for 28x28 inputs: conv2d 6@5x5 (padding 2), relu,
/// max_pool2d 2, conv2d 16@5x5, relu, max_pool2d 2, flatten, linear 400→120, relu,
/// linear 120→84, relu, linear 84→10.
enum class ModelKind : std::uint8_t { mlp, lenet };

/// Reads `mlp` or `lenet`; raises Error(input) listing both otherwise.
ModelKind parse_model_kind(std::string_view name);

/// The inference graph: input `image` float32 [batch, 1, 28, 28] → output `fc3` (the logits)
/// float32 [batch, 10]. Parameters are keyed `<layer>.weight` / `<layer>.bias` (fc1, conv1, ...).
Graph model_graph(ModelKind kind, std::int64_t batch);

/// `model` (one output: logits [batch, classes]) plus an int64 input `label` [batch] and the
/// single output `loss` = cross_entropy(logits, label), mean over the batch.
Graph training_graph(const Graph& model);

/// PyTorch's default initialisation of nn.Linear and nn.Conv2d (reset_parameters: weights
/// kaiming_uniform_(a=√5), i.e. U(−1/√fan_in, 1/√fan_in), and biases U(−1/√fan_in, 1/√fan_in)),
/// drawn from a 64-bit Mersenne Twister seeded with `seed`, layer by layer in graph order: the
/// same seed gives the same bits on every platform.
ParameterMap initial_parameters(const Graph& model, std::uint64_t seed);

/// Fraction of `data` whose arg-max logit is the label, running `inference` (input `image`
/// [B, 1, 28, 28], first output [B, 10]) over batches of B; the last, short batch is padded
/// with zero images whose predictions are ignored. Raises Error(input) when the session's input
/// or output does not have that form.
double accuracy(const Session& inference, const ImageDataset& data);

struct TrainingConfig {
    std::int64_t batch_size = 64;
    OptimizerOptions optimizer = SgdOptions{.lr = 0.05, .momentum = 0.9};
    std::uint64_t seed = 0;  ///< initialisation and shuffling
};

/// What a training loop needs gated under the profile: the training graph, the optimizer step,
/// and the inference graph used for test accuracy.
struct TrainingPlans {
    Graph model, training;
    AcceptedPlanResult training_plan, optimizer_plan, inference_plan;
    bool accepted() const {
        return training_plan.accepted && optimizer_plan.accepted && inference_plan.accepted;
    }
};

/// Plans and gates the three parts under `profile`. Raises what BackendProfile::accept_graph
/// and gate_ops raise (Error(input), Error(planning)); a rejection is reported in the results.
TrainingPlans plan_training(const BackendProfile& profile, const PluginHost& host, ModelKind kind,
                            const TrainingConfig& config);

struct EpochResult {
    double train_loss = 0;    ///< mean cross-entropy over the epoch's batches
    double train_seconds = 0; ///< wall time of the epoch's training steps, s
    std::int64_t steps = 0;
};

/// Mini-batch training: each epoch shuffles the training set (Fisher–Yates with the seeded
/// generator), drops the last incomplete batch (PyTorch's DataLoader drop_last=True), and for
/// each batch runs forward with a tape, backward from d loss = 1, and one optimizer step.
/// Deterministic: the same seed, data and profile give bit-identical parameters.
class Trainer {
public:
    /// Raises Error(input) when `plans` were not accepted, Error(other) when the profile refuses
    /// backward (Session::backward_refusal), else what Session::create and Optimizer::create
    /// raise (Error(probe), Error(input)).
    static Trainer create(const BackendProfile& profile, const PluginHost& host,
                          const TrainingPlans& plans, const TrainingConfig& config);

    /// One epoch; `progress(batch, batches, running_loss)` is called after every step.
    EpochResult train_epoch(const ImageDataset& train,
                            const std::function<void(std::int64_t, std::int64_t, double)>& progress = {});

    /// Test accuracy with the current parameters: the inference session is first refreshed
    /// (Session::refresh_parameters) when steps changed them. Raises what refresh_parameters and
    /// Session::run raise, Error(input) for images or labels the model does not take.
    double evaluate(const ImageDataset& test) const;

    /// The trained parameters (host tensors; the sessions read them in place).
    const ParameterMap& parameters() const;
    /// The inference graph (with the training batch size) the parameters belong to.
    const Graph& model() const;

    Trainer(Trainer&&) noexcept;
    Trainer& operator=(Trainer&&) noexcept;
    ~Trainer();

private:
    struct Impl;
    explicit Trainer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace capsule
