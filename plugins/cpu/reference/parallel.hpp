// Intra-op threads of the reference plugin: the host grants each node a thread count at prepare
// time (ABI 1.1, capsule_prepare_args::num_threads, from ExecutionConfig / `--threads`), which the
// kernel keeps as its prepared state. GEMM splits C's columns (or rows) between the threads,
// convolution its blocks of output positions or its planes, pooling and batch norm their planes,
// and the elementwise forward kernels their elements. The threads are one process-wide pool of workers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>

#include "capsule/plugin.hpp"
#include "epilogue.hpp"

namespace capsule::reference {

/// The prepared state of a threaded kernel: the intra-op threads granted to its node, and the
/// activation a compiled group fused into it (a convolution's; none for a node on its own).
struct ThreadGrant {
    int threads = 1;
    Epilogue epilogue;
};

/// prepare of the threaded kernels: records PrepareCall::threads() (at least 1).
std::unique_ptr<ThreadGrant> prepare_thread_grant(const plugin::PrepareCall& call);

/// The threads granted to `call`'s node; 1 when the call carries no prepared state (a host of
/// ABI 1.0 prepares nothing).
int granted_threads(const plugin::ForwardCall& call);

/// The activation `call`'s kernel applies to what it writes (none without prepared state).
const Epilogue& epilogue_of(const plugin::ForwardCall& call);

/// Runs body(part) for every part in [0, parts) and returns when all have finished: the caller
/// runs parts itself while the plugin's process-wide workers (started on first demand, as many as
/// the largest request less one) take the others; in a forked child the caller runs them all.
/// An exception of a part is rethrown (the first one) after the others finished;
/// std::system_error when no worker thread can be started at all.
void run_parts(int parts, const std::function<void(int)>& body);

/// Elements per part below which an elementwise loop is not split (about 50 µs of a memory-bound
/// loop: handing a part to a worker costs a few microseconds).
inline constexpr int64_t kMinElementsPerPart = int64_t(1) << 16;

/// Runs body(begin, end) over consecutive ranges covering [0, n): one range per part, at most
/// `threads` parts and each at least kMinElementsPerPart long. A short n is one direct call on
/// the caller's thread (no std::function, no allocation). For loops whose iterations are
/// independent.
template <typename Body>
void parallel_ranges(int threads, int64_t n, Body&& body) {
    const int64_t by_size = n / kMinElementsPerPart;
    const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, by_size)));
    if (parts == 1) {
        if (n > 0) body(int64_t{0}, n);
        return;
    }
    run_parts(parts, [&](int part) { body(n * part / parts, n * (part + 1) / parts); });
}

}  // namespace capsule::reference
