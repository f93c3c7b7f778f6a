// Intra-op threads of the reference plugin's GEMM-based kernels (conv2d, linear, matmul and bmm
// forward) and pooling forward: the host grants each node a thread count at prepare time (ABI
// 1.1, capsule_prepare_args::num_threads, from ExecutionConfig / `--threads`), which the kernel
// keeps as its prepared state; gemm splits C's columns (or rows) between the threads, pooling its
// planes.
#pragma once

#include <functional>
#include <memory>

#include "capsule/plugin.hpp"

namespace capsule::reference {

/// The prepared state of a threaded kernel: the intra-op threads granted to its node.
struct ThreadGrant {
    int threads = 1;
};

/// prepare of the threaded kernels: records PrepareCall::threads() (at least 1).
std::unique_ptr<ThreadGrant> prepare_thread_grant(const plugin::PrepareCall& call);

/// The threads granted to `call`'s node; 1 when the call carries no prepared state (a host of
/// ABI 1.0 prepares nothing).
int granted_threads(const plugin::ForwardCall& call);

/// Runs body(part) for every part in [0, parts): parts - 1 on new threads, one on the caller's,
/// and returns when all have finished. An exception of a part is rethrown (the first one) after
/// the others finished; std::system_error when a thread cannot be started.
void run_parts(int parts, const std::function<void(int)>& body);

}  // namespace capsule::reference
