#include "capsule/target.hpp"

#include <algorithm>

namespace capsule {

using std::pair;
using std::string_view;

const std::array<pair<OperatingSystem, string_view>, 5> Spellings<OperatingSystem>::values{{
    {OperatingSystem::linux_os, "linux"}, {OperatingSystem::macos, "macos"},
    {OperatingSystem::windows, "windows"}, {OperatingSystem::wasi, "wasi"},
    {OperatingSystem::unknown, "unknown"},
}};

const std::array<pair<Architecture, string_view>, 4> Spellings<Architecture>::values{{
    {Architecture::x86_64, "x86_64"}, {Architecture::aarch64, "aarch64"},
    {Architecture::wasm32, "wasm32"}, {Architecture::unknown, "unknown"},
}};

const std::array<pair<BuildFeature, string_view>, 13> Spellings<BuildFeature>::values{{
    {BuildFeature::native_cuda, "native-cuda"}, {BuildFeature::libtorch, "libtorch"},
    {BuildFeature::aten, "aten"}, {BuildFeature::mps, "mps"}, {BuildFeature::webgpu, "webgpu"},
    {BuildFeature::cublas, "cublas"}, {BuildFeature::cudnn, "cudnn"},
    {BuildFeature::cufft, "cufft"}, {BuildFeature::xla, "xla"}, {BuildFeature::neuron, "neuron"},
    {BuildFeature::custom_chip, "custom-chip"},
    {BuildFeature::external_provider, "external-provider"}, {BuildFeature::onednn, "onednn"},
}};

Provider feature_provider(BuildFeature feature) {
    switch (feature) {
        case BuildFeature::native_cuda: return Provider::native_cuda;
        case BuildFeature::libtorch: return Provider::libtorch;
        case BuildFeature::aten: return Provider::aten;
        case BuildFeature::mps: return Provider::mps;
        case BuildFeature::webgpu: return Provider::webgpu;
        case BuildFeature::cublas: return Provider::cublas;
        case BuildFeature::cudnn: return Provider::cudnn;
        case BuildFeature::cufft: return Provider::cufft;
        case BuildFeature::xla: return Provider::xla;
        case BuildFeature::neuron: return Provider::neuron;
        case BuildFeature::custom_chip: return Provider::custom_chip;
        case BuildFeature::external_provider: return Provider::external;
        case BuildFeature::onednn: return Provider::onednn;
    }
    return Provider::reference;
}

std::string accelerator_to_string(const Accelerator& accelerator) {
    return accelerator ? std::string(to_string(*accelerator)) : "none";
}

Accelerator parse_accelerator(string_view text) {
    if (text == "none") return std::nullopt;
    for (const auto& [device, name] : Spellings<Device>::values)
        if (name == text) return device;
    throw Error(ErrorCode::input, "unknown accelerator '" + std::string(text) +
                          "'; valid: none, " + valid_spellings<Device>());
}

Availability Target::availability() const {
    Availability a;
    a.devices.insert(Device::cpu);
    if (accelerator) a.devices.insert(*accelerator);
    a.providers = {Provider::reference, Provider::torchlean};
    for (auto f : features) a.providers.insert(feature_provider(f));
    return a;
}

bool Target::has_feature(BuildFeature f) const {
    return std::find(features.begin(), features.end(), f) != features.end();
}

namespace {
Target make(OperatingSystem os, Architecture arch, Accelerator acc,
            std::vector<BuildFeature> features) {
    return Target{os, arch, acc, std::move(features)};
}
using OS = OperatingSystem;
using Arch = Architecture;
using F = BuildFeature;
}  // namespace

Target Target::portable_cpu() { return make(OS::unknown, Arch::unknown, std::nullopt, {}); }
Target Target::cpu_for(OperatingSystem os, Architecture arch) {
    return make(os, arch, std::nullopt, {});
}
Target Target::linux_cpu() { return cpu_for(OS::linux_os, Arch::x86_64); }
Target Target::macos_cpu() { return cpu_for(OS::macos, Arch::aarch64); }
Target Target::windows_cpu() { return cpu_for(OS::windows, Arch::x86_64); }
Target Target::linux_cuda(bool with_libtorch) {
    std::vector<F> features{F::native_cuda, F::cublas, F::cufft};
    if (with_libtorch) features.push_back(F::libtorch);
    return make(OS::linux_os, Arch::x86_64, Device::cuda, std::move(features));
}
Target Target::windows_cuda() {
    return make(OS::windows, Arch::x86_64, Device::cuda, {F::native_cuda, F::cublas, F::cufft});
}
Target Target::linux_rocm() { return make(OS::linux_os, Arch::x86_64, Device::rocm, {}); }
Target Target::macos_metal() { return make(OS::macos, Arch::aarch64, Device::metal, {F::mps}); }
Target Target::wasm() { return make(OS::wasi, Arch::wasm32, Device::wasm, {F::webgpu}); }
Target Target::linux_tpu() { return make(OS::linux_os, Arch::x86_64, Device::tpu, {F::xla}); }
Target Target::linux_trainium() {
    return make(OS::linux_os, Arch::x86_64, Device::trainium, {F::neuron});
}
Target Target::custom_chip() {
    return make(OS::unknown, Arch::unknown, Device::custom, {F::custom_chip});
}
Target Target::external() {
    return make(OS::unknown, Arch::unknown, Device::external, {F::external_provider});
}

}  // namespace capsule
