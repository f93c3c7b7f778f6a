// Runs the shared capsule conformance cases (tools/conformance) against the reference plugin, one
// test per case (the oneDNN plugin's run is in test_onednn.cpp; `capsule verify` runs them against
// any plugin, see test_verify.cpp). Each case is one test, so a failure names
// the plugin, the case and the first mismatching element.
#include <gtest/gtest.h>

#include <set>

#include "conformance/harness.hpp"

using namespace capsule;
using namespace capsule::conformance;

namespace {

const capsule_plugin& reference_plugin() {
    static const capsule_plugin* plugin = [] {
        std::string error;
        auto* p = open_plugin_library(std::string(CAPSULE_PLUGIN_DIR) + "/libcapsule_reference.so",
                                      error);
        if (!p) ADD_FAILURE() << "cannot open the reference plugin: " << error;
        return p;
    }();
    if (!plugin) throw std::runtime_error("reference plugin unavailable");
    return *plugin;
}

const std::vector<KernelCase>& cases() {
    static const std::vector<KernelCase> all = all_cases();
    return all;
}

std::string test_name(const ::testing::TestParamInfo<std::size_t>& info) {
    std::string name = cases()[info.param].name;
    for (auto& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name;
}

std::vector<std::size_t> case_indices(bool gradient_only) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < cases().size(); ++i)
        if (!gradient_only || cases()[i].check_gradient) out.push_back(i);
    return out;
}

class ReferenceForward : public ::testing::TestWithParam<std::size_t> {};
class ReferenceGradient : public ::testing::TestWithParam<std::size_t> {};

}  // namespace

TEST_P(ReferenceForward, MatchesExpected) {
    const auto& c = cases()[GetParam()];
    EXPECT_EQ(run_forward_case(reference_plugin(), "reference." + std::string(to_string(c.op)), c), "");
}

TEST_P(ReferenceGradient, MatchesFiniteDifferences) {
    const auto& c = cases()[GetParam()];
    EXPECT_EQ(run_gradient_case(reference_plugin(), "reference." + std::string(to_string(c.op)), c), "");
}

INSTANTIATE_TEST_SUITE_P(Conformance, ReferenceForward, ::testing::ValuesIn(case_indices(false)), test_name);
INSTANTIATE_TEST_SUITE_P(Conformance, ReferenceGradient, ::testing::ValuesIn(case_indices(true)), test_name);

TEST(ConformanceCoverage, EveryOpHasForwardCasesAndEveryDifferentiableOpAGradientCase) {
    std::set<BackendOp> forward, gradient;
    std::set<std::string> names;
    for (const auto& c : cases()) {
        EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
        forward.insert(c.op);
        if (c.check_gradient) gradient.insert(c.op);
    }
    for (auto op : all_values<BackendOp>()) {
        // Optimizer steps have several outputs; tests/test_optimizer.cpp checks them by hand.
        if (is_optimizer_step(op)) continue;
        EXPECT_TRUE(forward.count(op)) << "no forward case for " << to_string(op);
        if (!op_needs_no_vjp(op)) {
            EXPECT_TRUE(gradient.count(op)) << "no gradient case for " << to_string(op);
        }
    }
}

TEST(ConformanceCoverage, ReferencePluginImplementsEveryManifestCapsule) {
    const auto& p = reference_plugin();
    EXPECT_EQ(p.num_kernels, all_values<BackendOp>().size());
    for (std::size_t i = 0; i < p.num_kernels; ++i) {
        auto op = parse<BackendOp>(std::string(p.kernels[i].capsule_name).substr(10));
        EXPECT_EQ(p.kernels[i].backward == nullptr, op_needs_no_vjp(op)) << p.kernels[i].capsule_name;
    }
}
