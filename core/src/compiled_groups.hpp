// Compiled groups (ABI 1.1 extension, DESIGN.md section 10): at session creation, each run of
// two or more consecutive steps whose kernels come from one plugin that offers the
// compiled-groups extension is handed to that plugin once; what it compiles replaces those steps
// in inference runs (`Session::run`). Recorded runs keep calling the kernels node by node: their
// tape needs every intermediate value, which a fused executable may not write. Under VJP mode
// external-autograd a group whose plugin offers the group-autograd extension (one node or more)
// is recorded by the provider's own autograd instead, and differentiated as one call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "session_impl.hpp"

namespace capsule::detail {

/// Compiles the session's eligible step runs (each step's `groups` says whether its plugin offers
/// the extension) with `threads` intra-op threads, reading the parameters' current values. A
/// group the plugin declines is left to its steps. Raises Error(other) naming the group's nodes,
/// the plugin and its message when compile fails, after releasing the groups it compiled.
std::vector<CompiledGroup> compile_groups(const Session::Impl& impl, int threads);

/// Runs one compiled group on a run's slot data. Raises Error(other) naming the group's nodes,
/// the plugin and its message when the executable fails.
void run_group(const Session::Impl& impl, const CompiledGroup& group, const std::vector<void*>& slot_data);

/// Runs an autograd group (`group.autograd` set) under its provider's autograd and returns the
/// record its backward needs (released with the tape). Raises Error naming the group, the plugin
/// and its message when recording fails.
void* record_group(const Session::Impl& impl, const CompiledGroup& group, const GroupRecordFlags& flags,
                   const std::vector<void*>& slot_data);

/// One backward call of an autograd group's record: `grad_values` one view per group value,
/// `grad_params` one per group parameter (see capsule_group_backward_args). Raises Error naming
/// the group, the plugin and its message.
void backward_group(const Session::Impl& impl, const CompiledGroup& group, void* record,
                    const std::vector<capsule_tensor_view>& grad_values,
                    const std::vector<capsule_tensor_view>& grad_params);

/// Releases every group's executable (in reverse order of compilation).
void release_groups(std::vector<CompiledGroup>& groups);

}  // namespace capsule::detail
