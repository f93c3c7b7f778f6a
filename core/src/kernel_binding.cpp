#include "kernel_binding.hpp"

#include "capsule/session.hpp"

namespace capsule::detail {

using std::string;

void check_host_matches_target(const BackendProfile& profile) {
    const auto& t = profile.target;
    const auto os = host_operating_system();
    const auto arch = host_architecture();
    if ((t.os != OperatingSystem::unknown && t.os != os) ||
        (t.arch != Architecture::unknown && t.arch != arch))
        throw Error(ErrorCode::probe, "profile " + profile.name + " targets " + string(to_string(t.os)) + "/" +
                         string(to_string(t.arch)) + ", but this host is " +
                         string(to_string(os)) + "/" + string(to_string(arch)));
}

std::shared_ptr<const LoadedPlugin> open_plugin(const PluginHost& host, const PluginRecord& record) {
    if (record.status == PluginStatus::stub || record.status == PluginStatus::failed)
        throw Error(ErrorCode::probe, "plugin " + record.name + " is " + record.status_text());
    auto outcome = host.library(record);
    if (!outcome.plugin)
        throw Error(ErrorCode::probe, "plugin " + record.name + " failed to load: " + outcome.failure);
    return outcome.plugin;
}

BoundKernel bind_kernel(const PluginHost& host, const KernelCapsule& k, bool allow_test_only) {
    if (k.runtime == RuntimeSupport::planner_only || k.runtime == RuntimeSupport::not_wired)
        throw Error(ErrorCode::probe, "capsule " + k.name + " is " + string(to_string(k.runtime)) +
                         ": it can be planned and audited, but no kernel is wired to run it");
    if (k.runtime == RuntimeSupport::test_only && !allow_test_only)
        throw Error(ErrorCode::probe, "capsule " + k.name + " is test-only; sessions refuse it unless "
                         "SessionOptions::allow_test_only is set");
    const PluginRecord* record = host.plugin_of(k.name);
    if (!record) throw Error(ErrorCode::probe, "no plugin of this host declares capsule " + k.name);
    if (record->status == PluginStatus::stub || record->status == PluginStatus::failed)
        throw Error(ErrorCode::probe, "capsule " + k.name + " belongs to plugin " + record->name + ", which is " +
                         record->status_text());
    BoundKernel bound{record, open_plugin(host, *record), nullptr};
    bound.kernel = bound.plugin->kernel(k.name);
    if (!bound.kernel)
        throw Error(ErrorCode::probe, "plugin " + record->name + " has no kernel for capsule " + k.name);
    return bound;
}

void require_usable(const PluginRecord& record, const LoadedPlugin& plugin) {
    auto probe = plugin.probe();
    if (!probe.usable)
        throw Error(ErrorCode::probe, "plugin " + record.name + " cannot run on this machine: " + probe.reason);
}

}  // namespace capsule::detail
