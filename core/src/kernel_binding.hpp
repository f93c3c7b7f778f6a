// From a planned capsule to a kernel a caller may invoke: the checks that sessions and the
// optimizer share (host OS/arch against the profile's target, runtime support, plugin status,
// plugin probe). Every refusal is an Error(probe) naming its cause.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "capsule/error.hpp"
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

/// A failed plugin call: the status code it returned (CAPSULE_ERROR_INTERNAL for an exception
/// that crossed the C ABI) and its text (see call_plugin).
struct PluginFailure {
    int32_t code;
    std::string text;
};

/// call_plugin, keeping the status code of a failure.
template <typename Call>
std::optional<PluginFailure> call_plugin_coded(Call&& call) {
    capsule_status status{sizeof(capsule_status), 0, {}};
    int32_t code = CAPSULE_ERROR_INTERNAL;
    try {
        code = call(&status);
    } catch (const std::exception& e) {
        return PluginFailure{CAPSULE_ERROR_INTERNAL, std::string("threw a C++ exception across the C ABI: ") + e.what()};
    } catch (...) {
        return PluginFailure{CAPSULE_ERROR_INTERNAL, "threw a non-standard C++ exception across the C ABI"};
    }
    if (code == CAPSULE_OK) [[likely]]
        return std::nullopt;
    return PluginFailure{code, status_text(code, status)};
}

/// The ErrorCode of a kernel or compiled group that failed while a session ran:
/// CAPSULE_ERROR_INVALID_DATA (the plugin refused the values of an input, e.g. an index out of
/// range) is the caller's input, ErrorCode::input; any other failure, CAPSULE_ERROR_INVALID_ARGUMENT
/// included (plugins also use it when host and plugin disagree on shapes), is ErrorCode::other.
inline ErrorCode run_failure_code(int32_t code) {
    return code == CAPSULE_ERROR_INVALID_DATA ? ErrorCode::input : ErrorCode::other;
}

/// Calls into a plugin: `call(capsule_status*)` returns the plugin function's code. Returns
/// nothing on success; otherwise the failure's text: the plugin's message and the code it
/// returned (or that it returned a code without a message), or the text of a C++ exception the
/// plugin let cross the C ABI. Allocates only on failure.
template <typename Call>
std::optional<std::string> call_plugin(Call&& call) {
    if (auto failure = call_plugin_coded(std::forward<Call>(call))) return std::move(failure->text);
    return std::nullopt;
}

}  // namespace capsule::detail
