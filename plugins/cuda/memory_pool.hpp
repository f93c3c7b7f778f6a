// The native CUDA plugin's caching allocator: every device allocation of the plugin (the device
// interface's tensors and the kernels' stream-ordered scratch) comes from one CUDA memory pool
// per device, created on first use (cudaMemPoolCreate). Its release threshold is unbounded, so
// freed blocks stay cached in the pool for the next allocation instead of going back to the
// driver at every synchronisation (what the default pool does, and why a plain cudaMalloc /
// cudaFree per run costs a device-wide synchronisation each time). A separate pool keeps the
// embedding program's own use of the device's default pool unchanged.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace capsule::cuda {

/// Stream-ordered allocation of `bytes` (at least 1) from the current device's pool: usable by
/// work enqueued on `stream` after this call. When the pool cannot grow
/// (cudaErrorMemoryAllocation), waits for the device, hands the pool's cached free blocks back
/// to the driver (cudaMemPoolTrimTo) and tries once more. Returns the CUDA error of the last
/// attempt (cudaErrorMemoryAllocation when the device is full; the errors of cudaGetDevice or
/// cudaMemPoolCreate when no pool can be made) and leaves *out NULL then.
cudaError_t pool_allocate(void** out, std::size_t bytes, cudaStream_t stream);

/// Returns `pointer` (from pool_allocate; NULL is ignored) to its pool once the work enqueued
/// on `stream` before this call has finished (cudaFreeAsync). Work on other streams that reads
/// the memory must have been waited for: the runtime frees a tensor only after the synchronous
/// download that ends every run that used it.
void pool_release(void* pointer, cudaStream_t stream) noexcept;

}  // namespace capsule::cuda
