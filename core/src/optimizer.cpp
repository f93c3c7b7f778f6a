#include "capsule/optimizer.hpp"

#include "capsule/attribute_views.hpp"
#include "kernel_binding.hpp"

namespace capsule {

using std::string;

BackendOp optimizer_op(const OptimizerOptions& options) {
    return std::holds_alternative<SgdOptions>(options) ? BackendOp::sgd : BackendOp::adam;
}

namespace {

/// The op's attributes for step `t` (docs/ops.md, "Optimizer steps").
Attributes step_attributes(const OptimizerOptions& options, std::int64_t t) {
    if (const auto* sgd = std::get_if<SgdOptions>(&options))
        return {{"lr", sgd->lr}, {"momentum", sgd->momentum}, {"dampening", sgd->dampening},
                {"weight_decay", sgd->weight_decay}, {"nesterov", sgd->nesterov}, {"step", t}};
    const auto& adam = std::get<AdamOptions>(options);
    return {{"lr", adam.lr}, {"betas", std::vector<double>{adam.beta1, adam.beta2}},
            {"eps", adam.eps}, {"weight_decay", adam.weight_decay}, {"step", t}};
}

capsule_tensor_view view_of(const Tensor& t) {
    capsule_tensor_view v{};
    v.struct_size = sizeof v;
    v.dtype = static_cast<int32_t>(t.dtype());
    v.device = static_cast<int32_t>(Device::cpu);
    v.rank = static_cast<int32_t>(t.shape().size());
    v.shape = t.shape().data();
    v.data = const_cast<void*>(t.data());
    return v;
}

}  // namespace

struct Optimizer::Impl {
    OptimizerOptions options;
    const KernelCapsule* capsule = nullptr;
    capsule_forward_fn forward = nullptr;
    std::shared_ptr<const LoadedPlugin> plugin;  // keeps the library mapped
    string plugin_name;
    std::map<string, std::vector<Tensor>> state;  // per parameter key: 1 (sgd) or 2 (adam) buffers
};

Optimizer::Optimizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;
Optimizer::~Optimizer() = default;

const string& Optimizer::capsule_name() const { return impl_->capsule->name; }

Optimizer Optimizer::create(const BackendProfile& profile, const AcceptedPlan& plan,
                            const PluginHost& host, const OptimizerOptions& options) {
    const BackendOp op = optimizer_op(options);
    const auto& groups = plan.plan().groups;
    if (groups.size() != 1 || groups[0].op != op)
        throw Error(ErrorCode::input, "the accepted plan for the optimizer must be a single " +
                         string(to_string(op)) + " group");
    if (profile.config.device != Device::cpu)
        throw Error(ErrorCode::probe, "optimizer steps keep their state in host memory; profile " + profile.name +
                         " runs on " + string(to_string(profile.config.device)));
    detail::check_host_matches_target(profile);
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->capsule = groups[0].capsule.get();
    auto bound = detail::bind_kernel(host, *impl->capsule, false);
    detail::require_usable(*bound.record, *bound.plugin);
    impl->plugin = bound.plugin;
    impl->plugin_name = bound.record->name;
    impl->forward = bound.kernel->forward;
    return Optimizer(std::move(impl));
}

void Optimizer::step(const ParameterMap& parameters, const ParameterMap& gradients) {
    Impl& m = *impl_;
    const std::size_t buffers = optimizer_op(m.options) == BackendOp::sgd ? 1 : 2;
    for (const auto& [key, grad] : gradients) {
        auto it = parameters.find(key);
        if (it == parameters.end())
            throw Error(ErrorCode::input, "gradient '" + key + "' has no parameter of that name");
        const Tensor& p = it->second;
        if (p.device() != Device::cpu || grad.device() != Device::cpu || p.dtype() != grad.dtype() ||
            p.shape() != grad.shape())
            throw Error(ErrorCode::input, "gradient '" + key + "' is " + string(to_string(grad.dtype())) +
                             to_string(grad.shape()) + ", its parameter " +
                             string(to_string(p.dtype())) + to_string(p.shape()) +
                             " (both must be host tensors of one dtype and shape)");
        if (!(m.capsule->dtypes >> static_cast<unsigned>(p.dtype()) & 1))
            throw Error(ErrorCode::input, "parameter '" + key + "' is " + string(to_string(p.dtype())) + ", which " +
                                              m.capsule->name + " does not accept (its manifest's dtypes)");
    }
    ++steps_;
    const AttributeViews attrs(step_attributes(m.options, steps_));
    for (const auto& [key, grad] : gradients) {
        const Tensor& p = parameters.at(key);
        auto& state = m.state[key];
        if (state.empty())
            for (std::size_t b = 0; b < buffers; ++b) state.push_back(Tensor::zeros(p.dtype(), p.shape()));
        std::vector<capsule_tensor_view> inputs{view_of(p), view_of(grad)}, outputs{view_of(p)};
        for (const auto& s : state) {
            inputs.push_back(view_of(s));
            outputs.push_back(view_of(s));
        }
        const auto strides = contiguous_strides(p.shape());
        for (auto* views : {&inputs, &outputs})
            for (auto& v : *views) v.strides = strides.data();
        capsule_forward_args args{};
        args.struct_size = sizeof args;
        args.inputs = inputs.data();
        args.num_inputs = inputs.size();
        args.outputs = outputs.data();
        args.num_outputs = outputs.size();
        args.attrs = attrs.data();
        args.num_attrs = attrs.size();
        if (auto failure = detail::call_plugin([&](capsule_status* st) { return m.forward(&args, st); }))
            throw Error(ErrorCode::other, string(to_string(m.capsule->op)) + " step " + std::to_string(steps_) +
                                 " of '" + key + "' failed in capsule " + m.capsule->name +
                                 " of plugin " + m.plugin_name + ": " + *failure);
    }
}

}  // namespace capsule
