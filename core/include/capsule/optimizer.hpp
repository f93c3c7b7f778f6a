// Optimizers: one step of torch.optim.SGD or torch.optim.Adam for every parameter of a model,
// run by the profile's capsule for the `sgd` / `adam` op (docs/ops.md, "Optimizer steps").
//
// Like a Session, an Optimizer is built from a plan the gate accepted under the profile
// (`profile.gate_ops(host, {optimizer_op(options)})`), so the update runs on a capsule the
// profile admits and never on a silent fallback. State buffers (momentum, exp_avg, exp_avg_sq)
// start at zero, one set per parameter key, as PyTorch's optimizer state does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>

#include "capsule/acceptance.hpp"
#include "capsule/profile.hpp"
#include "capsule/session.hpp"

namespace capsule {

/// torch.optim.SGD's arguments (lr has no default there; 0.01 here).
struct SgdOptions {
    double lr = 0.01;
    double momentum = 0;
    double dampening = 0;
    double weight_decay = 0;
    bool nesterov = false;
};

/// torch.optim.Adam's arguments and defaults (amsgrad off).
struct AdamOptions {
    double lr = 1e-3;
    double beta1 = 0.9, beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0;
};

using OptimizerOptions = std::variant<SgdOptions, AdamOptions>;

/// The BackendOp that runs a step of these options: `sgd` or `adam`.
BackendOp optimizer_op(const OptimizerOptions& options);

class Optimizer {
public:
    /// Resolves the kernel of the accepted plan's single optimizer-step group. Raises Error(input)
    /// when the plan is not one `sgd`/`adam` group matching `options`, Error(probe) when the
    /// capsule cannot run here (as Session::create) or the profile's device is not cpu
    /// (optimizer state lives in host memory).
    static Optimizer create(const BackendProfile& profile, const AcceptedPlan& plan,
                            const PluginHost& host, const OptimizerOptions& options);

    /// One step (PyTorch's update rule) for every parameter that has a gradient: `parameters`
    /// are updated in place (the tensors a CPU Session reads, see Session::parameters(); call
    /// Session::refresh_parameters before its next run).
    /// Raises Error(input) when a gradient names no parameter or differs in dtype/shape, or a
    /// parameter's dtype is not among the capsule's (KernelCapsule::dtypes),
    /// Error(other) when the capsule fails (its message kept).
    void step(const ParameterMap& parameters, const ParameterMap& gradients);

    /// Steps taken so far (PyTorch's state['step']).
    std::int64_t steps_taken() const { return steps_; }
    /// The capsule that runs each step, e.g. `reference.adam`.
    const std::string& capsule_name() const;

    Optimizer(Optimizer&&) noexcept;
    Optimizer& operator=(Optimizer&&) noexcept;
    ~Optimizer();

private:
    struct Impl;
    explicit Optimizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    std::int64_t steps_ = 0;
};

}  // namespace capsule
