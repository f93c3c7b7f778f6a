// Capsule registries (DESIGN.md section 2): the ordered capsules of one registry mode that the
// planner chooses from, and what planning needs to know of plugins that failed to load. Where a
// registry comes from is a RegistrySource; the runtime's PluginHost (capsule/registry.hpp) is the
// one built from discovered plugins.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/capsule.hpp"

namespace capsule {

/// A plugin that discovery refused, as the planner reports it: a plugin whose manifest could be
/// read lists its device, providers and declared ops, so that a planning failure can say that the
/// plugin that would have served the op is broken, and why.
struct FailedPlugin {
    std::string name;
    std::string reason;
    std::optional<Device> device;           // absent when the manifest could not be read
    std::vector<Provider> providers;
    std::vector<BackendOp> ops;
};

using CapsuleRef = std::shared_ptr<const KernelCapsule>;

/// An ordered capsule list: plugins in priority order (higher first, ties by plugin name), then
/// each plugin's declaration order. Registry order is meaningful to the planner.
struct CapsuleRegistry {
    std::string mode;
    std::vector<CapsuleRef> capsules;
    std::vector<std::string> plugin_of;  // plugin name per capsule, same index
    /// Plugins refused at discovery that join this mode (or whose manifest could not be read, so
    /// their modes are unknown).
    std::vector<FailedPlugin> failed_plugins;
};

/// Gives the capsule registry of a registry mode. Planning through a BackendProfile asks one for
/// the registry of the profile's mode.
class RegistrySource {
public:
    virtual ~RegistrySource() = default;
    virtual CapsuleRegistry registry(std::string_view mode) const = 0;
    /// For the `verified` acceptance policy: nullopt when a passing `capsule verify` evidence
    /// record backs `capsule`'s test-suite evidence for the library that would run it, else why
    /// not. A source that keeps no evidence records verifies nothing.
    virtual std::optional<std::string> unverified_evidence(const KernelCapsule& capsule) const {
        (void)capsule;
        return std::string("this registry source keeps no evidence records");
    }

protected:
    RegistrySource() = default;
    RegistrySource(const RegistrySource&) = default;
    RegistrySource(RegistrySource&&) = default;
    RegistrySource& operator=(const RegistrySource&) = default;
    RegistrySource& operator=(RegistrySource&&) = default;
};

}  // namespace capsule
