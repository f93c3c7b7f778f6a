// Intra-op threads of the reference plugin: the host grants each node a thread count at prepare
// time (ABI 1.1, capsule_prepare_args::num_threads, from ExecutionConfig / `--threads`), which the
// kernel keeps as its prepared state. GEMM splits C's columns (or rows) between the threads,
// convolution its blocks of output positions or its planes, pooling its planes, and the
// elementwise forward kernels their elements. The threads are one process-wide pool of workers.
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

/// Elements per part below which an elementwise loop is not split (about 50 µs of a memory-bound
/// loop: handing a part to a worker costs a few microseconds).
inline constexpr int64_t kMinElementsPerPart = int64_t(1) << 16;

/// Runs body(begin, end) over consecutive ranges covering [0, n): one range per part, at most
/// `threads` parts and each at least kMinElementsPerPart long (one part, on the caller's
/// thread, for a short n). For loops whose iterations are independent.
void parallel_ranges(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& body);

}  // namespace capsule::reference
