// From a planned capsule to a kernel a caller may invoke: the checks that sessions and the
// optimizer share (host OS/arch against the profile's target, runtime support, plugin status,
// plugin probe). Every refusal is an Error(probe) naming its cause.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "plugin_loader.hpp"

namespace capsule::detail {

/// Raises Error(probe) when this host's OS/architecture is not the profile target's.
void check_host_matches_target(const BackendProfile& profile);

/// A capsule's kernel entry and the plugin that keeps it mapped.
struct BoundKernel {
    const PluginRecord* record = nullptr;
    std::shared_ptr<const LoadedPlugin> plugin;
    const capsule_kernel* kernel = nullptr;
};

/// Opens (lazily, once per host) the plugin behind capsule `k` and finds its kernel. Raises
/// Error(probe) when the capsule is planner-only or not-wired, test-only without
/// `allow_test_only`, or its plugin is missing, a stub, refused at discovery, or its library
/// fails to load (the loader's reason is kept).
BoundKernel bind_kernel(const PluginHost& host, const KernelCapsule& k, bool allow_test_only);

/// Opens the library of `record` (lazily) or raises Error(probe) naming the plugin and the reason.
std::shared_ptr<const LoadedPlugin> open_plugin(const PluginHost& host, const PluginRecord& record);

/// Probes a plugin once; raises Error(probe) with the plugin's reason when it cannot run here.
void require_usable(const PluginRecord& record, const LoadedPlugin& plugin);

/// Calls into a plugin: `call(capsule_status*)` returns the plugin function's code. Returns
/// nothing on success; otherwise the failure's text: the plugin's message and the code it
/// returned (or that it returned a code without a message), or the text of a C++ exception the
/// plugin let cross the C ABI. Allocates only on failure.
template <typename Call>
std::optional<std::string> call_plugin(Call&& call) {
    capsule_status status{sizeof(capsule_status), 0, {}};
    int32_t code = CAPSULE_ERROR_INTERNAL;
    try {
        code = call(&status);
    } catch (const std::exception& e) {
        return std::string("threw a C++ exception across the C ABI: ") + e.what();
    } catch (...) {
        return std::string("threw a non-standard C++ exception across the C ABI");
    }
    if (code == CAPSULE_OK) [[likely]]
        return std::nullopt;
    return status_text(code, status);
}

}  // namespace capsule::detail
