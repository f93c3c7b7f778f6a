// Optimizer steps (docs/ops.md "Optimizer steps") through capsule::Optimizer on the reference
// capsules, against steps computed by hand from torch.optim.SGD's and torch.optim.Adam's
// documented update rules.
#include <gtest/gtest.h>

#include <cmath>

#include "capsule/optimizer.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
using namespace capsule::testing;

namespace {


Optimizer make(const OptimizerOptions& options) {
    const auto& profile = find_builtin_profile("checked_cpu");
    const BackendOp ops[] = {optimizer_op(options)};
    auto result = profile.gate_ops(built_host(), ops);
    if (!result.accepted) throw std::runtime_error("optimizer plan rejected");
    return Optimizer::create(profile, *result.accepted, built_host(), options);
}

Tensor vec(std::vector<double> v, DType dtype = DType::float64) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor::from_values(dtype, {n}, v);
}

TEST(Optimizer, PlansTheProfilesCapsule) {
    EXPECT_EQ(make(SgdOptions{}).capsule_name(), "reference.sgd");
    EXPECT_EQ(make(AdamOptions{}).capsule_name(), "reference.adam");
}

// p = [1, -2], g = [0.5, 0.25], lr 0.1, momentum 0.9, two steps with the same gradient:
// step 1: buf = g = [0.5, 0.25];           p = [1 - 0.05, -2 - 0.025] = [0.95, -2.025]
// step 2: buf = 0.9 buf + g = [0.95, 0.475]; p = [0.95 - 0.095, -2.025 - 0.0475] = [0.855, -2.0725]
TEST(Optimizer, SgdWithMomentumFollowsPyTorch) {
    auto opt = make(SgdOptions{.lr = 0.1, .momentum = 0.9});
    ParameterMap params{{"w", vec({1, -2})}};
    const ParameterMap grads{{"w", vec({0.5, 0.25})}};
    opt.step(params, grads);
    EXPECT_NEAR(params.at("w").at(0), 0.95, 1e-15);
    EXPECT_NEAR(params.at("w").at(1), -2.025, 1e-15);
    opt.step(params, grads);
    EXPECT_NEAR(params.at("w").at(0), 0.855, 1e-15);
    EXPECT_NEAR(params.at("w").at(1), -2.0725, 1e-15);
    EXPECT_EQ(opt.steps_taken(), 2);
}

// Nesterov, dampening 0, weight decay 0.1: p = 2, grad = 1, lr 0.5, momentum 0.5.
// step 1: g = 1 + 0.2 = 1.2; buf = 1.2; g = 1.2 + 0.6 = 1.8; p = 2 - 0.9 = 1.1
// step 2: g = 1 + 0.11 = 1.11; buf = 0.6 + 1.11 = 1.71; g = 1.11 + 0.855 = 1.965;
//         p = 1.1 - 0.9825 = 0.1175
TEST(Optimizer, SgdNesterovWithWeightDecay) {
    auto opt = make(SgdOptions{.lr = 0.5, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true});
    ParameterMap params{{"w", vec({2})}};
    const ParameterMap grads{{"w", vec({1})}};
    opt.step(params, grads);
    EXPECT_NEAR(params.at("w").at(0), 1.1, 1e-15);
    opt.step(params, grads);
    EXPECT_NEAR(params.at("w").at(0), 0.1175, 1e-14);
}

// Dampening 0.5 applies from the second step on (the first step copies the gradient).
// p = 0, grad = 1, lr 1, momentum 1: step 1: buf = 1, p = -1; step 2: buf = 1 + 0.5 = 1.5, p = -2.5
TEST(Optimizer, SgdDampeningSkipsTheFirstStep) {
    auto opt = make(SgdOptions{.lr = 1, .momentum = 1, .dampening = 0.5});
    ParameterMap params{{"w", vec({0}, DType::float32)}};
    const ParameterMap grads{{"w", vec({1}, DType::float32)}};
    opt.step(params, grads);
    EXPECT_EQ(params.at("w").at(0), -1);
    opt.step(params, grads);
    EXPECT_EQ(params.at("w").at(0), -2.5);
}

// p = 1, grad = 0.5, lr 0.1, betas (0.9, 0.999), eps 1e-8.
// step 1: m = 0.05, v = 0.00025; step size 0.1 / 0.1 = 1; denom = sqrt(0.00025)/sqrt(0.001) + eps
//         = 0.5 + 1e-8; p = 1 - 0.05 / (0.5 + 1e-8)
// step 2 (grad 0.5 again): m = 0.095, v = 0.00049975; step size 0.1 / 0.19;
//         denom = sqrt(0.00049975 / 0.001999) + eps = 0.5 + eps (v / (1 - 0.999^2) = 0.25)
TEST(Optimizer, AdamFollowsPyTorch) {
    auto opt = make(AdamOptions{.lr = 0.1});
    ParameterMap params{{"w", vec({1})}};
    const ParameterMap grads{{"w", vec({0.5})}};
    opt.step(params, grads);
    const double p1 = 1 - 0.05 / (0.5 + 1e-8);
    EXPECT_NEAR(params.at("w").at(0), p1, 1e-15);
    opt.step(params, grads);
    EXPECT_NEAR(params.at("w").at(0), p1 - (0.1 / 0.19) * 0.095 / (0.5 + 1e-8), 1e-14);
}

// Weight decay adds wd * p to the gradient before the moments (torch.optim.Adam, not AdamW).
TEST(Optimizer, AdamWeightDecayIsL2) {
    auto opt = make(AdamOptions{.lr = 0.01, .weight_decay = 1});
    ParameterMap params{{"w", vec({2, -3})}};
    opt.step(params, {{"w", vec({0, 0})}});
    // g = wd * p = [2, -3]; first Adam step moves each element by lr * sign(g) (|m̂| / sqrt(v̂) = 1).
    EXPECT_NEAR(params.at("w").at(0), 2 - 0.01, 1e-9);
    EXPECT_NEAR(params.at("w").at(1), -3 + 0.01, 1e-9);
}

TEST(Optimizer, MismatchedGradientsAreRefused) {
    auto opt = make(SgdOptions{.lr = 0.1});
    ParameterMap params{{"w", vec({1, 2})}};
    EXPECT_EQ(error_of([&] { opt.step(params, {{"v", vec({1, 2})}}); }),
              "gradient 'v' has no parameter of that name");
    EXPECT_EQ(error_of([&] { opt.step(params, {{"w", vec({1, 2, 3})}}); }),
              "gradient 'w' is float64[3], its parameter float64[2] (both must be host tensors of "
              "one dtype and shape)");
    EXPECT_EQ(opt.steps_taken(), 0);
    EXPECT_EQ(params.at("w").at(0), 1);
}

TEST(Optimizer, KernelRefusesBadAttributes) {
    auto opt = make(SgdOptions{.lr = -1});
    ParameterMap params{{"w", vec({1})}};
    EXPECT_EQ(error_of([&] { opt.step(params, {{"w", vec({1})}}); }),
              "sgd step 1 of 'w' failed in capsule reference.sgd of plugin reference: sgd: attribute "
              "'lr' = -1 must be a finite number >= 0 (code 1)");
}

}  // namespace
