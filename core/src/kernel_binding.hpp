// From a planned capsule to a kernel a caller may invoke: the checks that sessions and the
// optimizer share (host OS/arch against the profile's target, runtime support, plugin status,
// plugin probe). Every refusal is a ProbeError naming its cause.
#pragma once

#include <memory>
#include <string>

#include "capsule/profile.hpp"
#include "capsule/registry.hpp"

namespace capsule::detail {

/// Raises ProbeError when this host's OS/architecture is not the profile target's.
void check_host_matches_target(const BackendProfile& profile);

/// The loaded plugin behind capsule `k`. Raises ProbeError when the capsule is planner-only or
/// not-wired, test-only without `allow_test_only`, or its plugin is missing, a stub or failed.
const PluginRecord& runnable_plugin(const PluginHost& host, const KernelCapsule& k,
                                    bool allow_test_only);

/// Probes a plugin once; raises ProbeError with the plugin's reason when it cannot run here.
void require_usable(const PluginRecord& record);

}  // namespace capsule::detail
