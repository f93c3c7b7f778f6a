// Targets and declared availability (DESIGN.md section 2).
//
// A Target is what a profile *declares* it plans for: OS, architecture, accelerator and build
// features. Its Availability (devices and providers) filters the registry at planning time. This
// is not discovery: before execution the plugin host probes the real machine.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "capsule/vocabulary.hpp"

namespace capsule {

enum class OperatingSystem : std::uint8_t { linux_os, macos, windows, wasi, unknown };
enum class Architecture : std::uint8_t { x86_64, aarch64, wasm32, unknown };
enum class BuildFeature : std::uint8_t {
    native_cuda, libtorch, aten, mps, webgpu, cublas, cudnn, cufft, xla, neuron, custom_chip,
    external_provider, onednn
};

template <>
struct Spellings<OperatingSystem> {
    static constexpr std::string_view kind = "operating system";
    static const std::array<std::pair<OperatingSystem, std::string_view>, 5> values;
};
template <>
struct Spellings<Architecture> {
    static constexpr std::string_view kind = "architecture";
    static const std::array<std::pair<Architecture, std::string_view>, 4> values;
};
template <>
struct Spellings<BuildFeature> {
    static constexpr std::string_view kind = "build feature";
    static const std::array<std::pair<BuildFeature, std::string_view>, 13> values;
};

/// The provider a build feature makes available (external-provider → external, others same name).
Provider feature_provider(BuildFeature feature);

/// Accelerator: `none` or a device. Spelled `none` or the device's spelling.
using Accelerator = std::optional<Device>;
std::string accelerator_to_string(const Accelerator& accelerator);
/// Reads `none` or a device spelling; raises Error(input) listing both.
Accelerator parse_accelerator(std::string_view text);

/// What a profile's planner may use: devices and providers.
struct Availability {
    std::set<Device> devices;
    std::set<Provider> providers;

    /// A capsule is available when both its device and its provider are.
    bool admits(Device device, Provider provider) const {
        return devices.count(device) && providers.count(provider);
    }
    bool operator==(const Availability&) const = default;
};

/// Declared build/planning target.
struct Target {
    OperatingSystem os = OperatingSystem::unknown;
    Architecture arch = Architecture::unknown;
    Accelerator accelerator{};
    std::vector<BuildFeature> features;  // in declaration order, no duplicates

    /// Devices: cpu plus the accelerator's device. Providers: reference, torchlean plus the
    /// provider of each feature.
    Availability availability() const;
    bool has_feature(BuildFeature f) const;
    bool operator==(const Target&) const = default;

    // Named targets of DESIGN.md section 2.
    static Target portable_cpu();
    static Target cpu_for(OperatingSystem os, Architecture arch);
    static Target linux_cpu();    // linux x86_64
    static Target macos_cpu();    // macos aarch64
    static Target windows_cpu();  // windows x86_64
    /// linux x86_64 + cuda, features native-cuda cublas cufft (+ libtorch when with_libtorch).
    static Target linux_cuda(bool with_libtorch = false);
    static Target windows_cuda();
    static Target linux_rocm();
    static Target macos_metal();
    static Target wasm();
    static Target linux_tpu();
    static Target linux_trainium();
    static Target custom_chip();
    static Target external();
};

}  // namespace capsule
