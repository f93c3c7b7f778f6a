// Stable spellings and the trust-policy table (DESIGN.md section 2).
#include <gtest/gtest.h>

#include "capsule/capsule.hpp"
#include "capsule/target.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;

template <typename E>
void expect_round_trip() {
    for (auto v : all_values<E>()) EXPECT_EQ(parse<E>(to_string(v)), v) << to_string(v);
}

TEST(Vocabulary, EverySpellingRoundTrips) {
    expect_round_trip<Device>();
    expect_round_trip<Provider>();
    expect_round_trip<BackendOp>();
    expect_round_trip<TrustLevel>();
    expect_round_trip<TrustPolicy>();
    expect_round_trip<VJPMode>();
    expect_round_trip<RuntimeSupport>();
    expect_round_trip<OperatingSystem>();
    expect_round_trip<Architecture>();
    expect_round_trip<BuildFeature>();
    expect_round_trip<Layout>();
    expect_round_trip<ClaimKind>();
    expect_round_trip<Evidence>();
    expect_round_trip<Disposition>();
}

TEST(Vocabulary, StableSpellingsMatchTheDesign) {
    EXPECT_EQ(to_string(Provider::native_cuda), "native-cuda");
    EXPECT_EQ(to_string(Provider::custom_chip), "custom-chip");
    EXPECT_EQ(to_string(TrustLevel::trusted_external), "trusted-external");
    EXPECT_EQ(to_string(TrustPolicy::verified_only), "verified-only");
    EXPECT_EQ(to_string(VJPMode::torchlean_tape), "torchlean-tape");
    EXPECT_EQ(to_string(RuntimeSupport::planner_only), "planner-only");
    EXPECT_EQ(to_string(BackendOp::swapAdjacentAtDepth), "swapAdjacentAtDepth");
    EXPECT_EQ(to_string(BackendOp::scaled_dot_product_attention), "scaled_dot_product_attention");
    EXPECT_EQ(to_string(OperatingSystem::linux_os), "linux");
    EXPECT_EQ(to_string(BuildFeature::external_provider), "external-provider");
    EXPECT_EQ(all_values<BackendOp>().size(), 130u);
    EXPECT_EQ(all_values<Provider>().size(), 15u);
}

TEST(Vocabulary, UnknownSpellingListsValidNames) {
    try {
        parse<Device>("gpu0");
        FAIL() << "expected Error(input)";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        std::string msg = e.what();
        EXPECT_NE(msg.find("unknown device 'gpu0'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cpu, cuda, rocm, metal, wasm, tpu, trainium, custom, external"),
                  std::string::npos)
            << msg;
    }
    EXPECT_TRUE(raises(ErrorCode::input, [&] { parse<BackendOp>("Relu"); }));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { parse<TrustLevel>(""); }));
}

TEST(Vocabulary, DeviceAliases) {
    EXPECT_EQ(parse_device_alias("gpu"), Device::cuda);
    EXPECT_EQ(parse_device_alias("amd"), Device::rocm);
    EXPECT_EQ(parse_device_alias("mps"), Device::metal);
    EXPECT_EQ(parse_device_alias("webgpu"), Device::wasm);
    EXPECT_EQ(parse_device_alias("xla"), Device::tpu);
    EXPECT_EQ(parse_device_alias("neuron"), Device::trainium);
    EXPECT_EQ(parse_device_alias("custom-chip"), Device::custom);
    EXPECT_EQ(parse_device_alias("cpu"), Device::cpu);
    try {
        parse_device_alias("tpu9");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find("gpu→cuda"), std::string::npos) << e.what();
    }
}

TEST(Vocabulary, BackendPreferenceSpellings) {
    EXPECT_EQ(parse_backend_preference("auto"), BackendPreference::automatic());
    EXPECT_EQ(parse_backend_preference("prefer:onednn"),
              BackendPreference::prefer(Provider::onednn));
    EXPECT_EQ(parse_backend_preference("only:libtorch"),
              BackendPreference::only(Provider::libtorch));
    EXPECT_EQ(to_string(BackendPreference::only(Provider::native_cuda)), "only:native-cuda");
    EXPECT_TRUE(raises(ErrorCode::input, [&] { parse_backend_preference("only:torch"); }));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { parse_backend_preference("first:reference"); }));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { parse_backend_preference("prefer"); }));
}

// The table of DESIGN.md section 2, row by row.
TEST(TrustPolicy, Table) {
    using L = TrustLevel;
    using P = TrustPolicy;
    struct Row { P policy; bool verified, checked, fuzzed, external; };
    const Row rows[] = {
        {P::verified_only, true, false, false, false},
        {P::checked, true, true, false, false},
        {P::fuzzed_ok, true, true, true, false},
        {P::trusted_external_ok, true, true, true, true},
    };
    for (const auto& r : rows) {
        SCOPED_TRACE(std::string(to_string(r.policy)));
        EXPECT_EQ(trust_policy_admits(r.policy, L::verified), r.verified);
        EXPECT_EQ(trust_policy_admits(r.policy, L::checked), r.checked);
        EXPECT_EQ(trust_policy_admits(r.policy, L::fuzzed), r.fuzzed);
        EXPECT_EQ(trust_policy_admits(r.policy, L::trusted_external), r.external);
    }
}

TEST(Target, AvailabilityIsCpuPlusAcceleratorAndFeatureProviders) {
    auto cuda = Target::linux_cuda().availability();
    EXPECT_EQ(cuda.devices, (std::set<Device>{Device::cpu, Device::cuda}));
    EXPECT_EQ(cuda.providers,
              (std::set<Provider>{Provider::reference, Provider::torchlean, Provider::native_cuda,
                                  Provider::cublas, Provider::cufft}));
    EXPECT_TRUE(Target::linux_cuda(true).availability().providers.count(Provider::libtorch));
    auto portable = Target::portable_cpu().availability();
    EXPECT_EQ(portable.devices, std::set<Device>{Device::cpu});
    EXPECT_EQ(portable.providers, (std::set<Provider>{Provider::reference, Provider::torchlean}));
    EXPECT_TRUE(Target::external().availability().providers.count(Provider::external));
    EXPECT_TRUE(Target::macos_metal().availability().admits(Device::metal, Provider::mps));
    EXPECT_FALSE(Target::macos_metal().availability().admits(Device::cuda, Provider::mps));
    EXPECT_FALSE(Target::linux_rocm().availability().admits(Device::rocm, Provider::native_cuda));
    EXPECT_EQ(Target::wasm().os, OperatingSystem::wasi);
    EXPECT_EQ(Target::wasm().arch, Architecture::wasm32);
    EXPECT_EQ(parse_accelerator("none"), std::nullopt);
    EXPECT_EQ(parse_accelerator("cuda"), Device::cuda);
    EXPECT_TRUE(raises(ErrorCode::input, [&] { parse_accelerator("gpu"); }));
}
