// Compiled groups and external autograd for the LibTorch plugins (ABI 1.1 extensions, DESIGN.md
// section 10 and section 5): a run of consecutive libtorch capsules is one backend call that
// computes each node with the op function its capsule runs node by node (ops.hpp), passing values
// between nodes as ATen tensors (no copy into the host's buffers for values used only inside the
// group). Under VJP mode external-autograd the same call is recorded by torch's autograd, and its
// backward is one torch::autograd::grad call over the whole group.
#pragma once

#include "common.hpp"

namespace capsule::libtorch {

/// An op of the plugin's kernel table: its function and its capsule name as the table spells it
/// (a static string), or {nullptr, nullptr} when `capsule_name` names no op function (e.g. the
/// optimizer steps, which have several outputs).
struct NamedOp {
    OpFn fn = nullptr;
    const char* capsule = nullptr;
};

/// Defined by each plugin library's plugin.cpp, from its own kernel table.
NamedOp op_named(const char* capsule_name);

/// The extension list of the `libtorch` plugin: compiled groups only (compile declines a group
/// holding a capsule with no op function; run; release).
const capsule_extension* compiled_groups_extensions();

/// The extension list of the `libtorch_autograd` plugin: the group-autograd extension (record,
/// backward, release_record), then the same compiled groups.
const capsule_extension* group_autograd_extensions();

}  // namespace capsule::libtorch
