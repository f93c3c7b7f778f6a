// The caching memory pool of the native CUDA plugin (memory_pool.hpp).
#include "memory_pool.hpp"

#include <cstdint>
#include <map>
#include <mutex>

namespace capsule::cuda {
namespace {

/// The pool of `device`, created on first use and kept for the life of the process (blocks
/// still allocated from it may outlive any owner that would destroy it).
cudaError_t device_pool(int device, cudaMemPool_t* pool) {
    static std::mutex mutex;
    static std::map<int, cudaMemPool_t> pools;  // the plugin's one piece of shared state
    std::lock_guard lock(mutex);
    if (const auto it = pools.find(device); it != pools.end()) {
        *pool = it->second;
        return cudaSuccess;
    }
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    if (const cudaError_t e = cudaMemPoolCreate(pool, &props); e != cudaSuccess) return e;
    // Keep every freed block cached: the pool only shrinks when an allocation would fail.
    std::uint64_t threshold = UINT64_MAX;
    if (const cudaError_t e = cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &threshold);
        e != cudaSuccess) {
        (void)cudaMemPoolDestroy(*pool);
        return e;
    }
    pools.emplace(device, *pool);
    return cudaSuccess;
}

}  // namespace

cudaError_t pool_allocate(void** out, std::size_t bytes, cudaStream_t stream) {
    *out = nullptr;
    int device = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    cudaMemPool_t pool{};
    if (const cudaError_t e = device_pool(device, &pool); e != cudaSuccess) return e;
    const std::size_t size = bytes == 0 ? 1 : bytes;
    cudaError_t e = cudaMallocFromPoolAsync(out, size, pool, stream);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        // Cached blocks freed on any stream return to the driver only once those frees have run.
        (void)cudaDeviceSynchronize();
        (void)cudaMemPoolTrimTo(pool, 0);
        e = cudaMallocFromPoolAsync(out, size, pool, stream);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = nullptr;
    }
    return e;
}

void pool_release(void* pointer, cudaStream_t stream) noexcept {
    if (pointer) (void)cudaFreeAsync(pointer, stream);
}

}  // namespace capsule::cuda
