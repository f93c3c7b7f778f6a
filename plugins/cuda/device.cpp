// The native CUDA plugin's probe and device interface (memory from the caching pool of
// memory_pool.hpp, host<->device copies).
//
// All of it uses the calling thread's current CUDA device (device 0 unless the embedding program
// chose another; CUDA_VISIBLE_DEVICES selects which physical GPU that is).
#include <string>

#include "cuda_common.hpp"
#include "kernels.hpp"
#include "memory_pool.hpp"

#ifndef CAPSULE_CUDA_ARCHITECTURES
#define CAPSULE_CUDA_ARCHITECTURES "unknown"
#endif

namespace capsule::cuda {
namespace {

using plugin::set_status;

/// 13000 -> "13.0"
std::string version_text(int version) {
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

/// "CUDA runtime 13.0, driver supports CUDA 12.4" (or "no NVIDIA driver found").
std::string versions() {
    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    const cudaError_t driver_error = cudaDriverGetVersion(&driver);
    std::string text = "CUDA runtime " + version_text(runtime) + ", ";
    if (driver_error != cudaSuccess || driver == 0)
        text += "no NVIDIA driver found (libcuda.so.1 could not be loaded)";
    else
        text += "driver supports CUDA " + version_text(driver);
    return text;
}

/// What to do about a failed cudaGetDeviceCount, from the driver and runtime versions.
std::string advice(cudaError_t error) {
    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    if (driver == 0)
        return "; install the NVIDIA driver, or run on a machine with a CUDA-capable GPU";
    if (driver < runtime || error == cudaErrorInsufficientDriver)
        return "; the driver is older than the CUDA " + version_text(runtime) +
               " runtime this plugin was built with: update the NVIDIA driver";
    if (error == cudaErrorNoDevice)
        return "; check that a GPU is installed and visible (CUDA_VISIBLE_DEVICES)";
    return "";
}

int32_t fail(capsule_status* status, const std::string& message) {
    return set_status(status, CAPSULE_ERROR_DEVICE, "native_cuda: %s", message.c_str());
}

/// Back to the caching pool, after the work this thread enqueued (the runtime releases a tensor
/// only once the runs that used it have downloaded their outputs, so no other stream reads it).
void release(void* pointer) noexcept { pool_release(pointer, cudaStreamPerThread); }

int32_t allocate(size_t bytes, void** out, capsule_status* status) noexcept {
    if (!out) return set_status(status, CAPSULE_ERROR_INVALID_ARGUMENT, "allocate: out is NULL");
    *out = nullptr;
    // A zero-byte request still gets a distinct, valid pointer (NULL means "absent" to kernels).
    // From the caching pool, ordered on this thread's stream; waiting for that stream makes the
    // block usable from any stream on return, as cudaMalloc's would be.
    cudaError_t e = pool_allocate(out, bytes, cudaStreamPerThread);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
    if (e == cudaSuccess) return CAPSULE_OK;
    release(*out);
    *out = nullptr;
    return set_status(status,
                      e == cudaErrorMemoryAllocation ? CAPSULE_ERROR_OUT_OF_MEMORY
                                                     : CAPSULE_ERROR_DEVICE,
                      "%s",
                      cuda_error_text(e, "allocating " + std::to_string(bytes) +
                                             " bytes from the device's memory pool").c_str());
}

int32_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what,
             capsule_status* status) noexcept {
    if (bytes == 0) return CAPSULE_OK;
    if (!dst || !src)
        return set_status(status, CAPSULE_ERROR_INVALID_ARGUMENT, "%s: NULL pointer", what);
    // cudaMemcpy runs on the legacy default stream, which waits for the kernels every host thread
    // enqueued on its per-thread default stream; the copy to the host returns when data is there.
    const cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
    if (e == cudaSuccess) return CAPSULE_OK;
    return set_status(status, CAPSULE_ERROR_DEVICE, "%s",
                      cuda_error_text(e, std::string(what) + " of " + std::to_string(bytes) +
                                             " bytes").c_str());
}

int32_t copy_to_device(void* device_dst, const void* host_src, size_t bytes,
                       capsule_status* status) noexcept {
    return copy(device_dst, host_src, bytes, cudaMemcpyHostToDevice, "cudaMemcpy host to device",
                status);
}

int32_t copy_to_host(void* host_dst, const void* device_src, size_t bytes,
                     capsule_status* status) noexcept {
    return copy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, "cudaMemcpy device to host",
                status);
}

int32_t synchronize(capsule_status* status) noexcept {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return CAPSULE_OK;
    return set_status(status, CAPSULE_ERROR_DEVICE, "%s",
                      cuda_error_text(e, "cudaDeviceSynchronize").c_str());
}

}  // namespace

int32_t probe(capsule_status* status) noexcept {
    try {
        int count = 0;
        const cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return fail(status, "no usable CUDA device: " +
                                    cuda_error_text(e, "cudaGetDeviceCount") + "; " + versions() +
                                    advice(e));
        }
        if (count == 0)
            return fail(status, "no usable CUDA device: cudaGetDeviceCount found 0 devices; " +
                                    versions() + advice(cudaErrorNoDevice));
        int device = 0;
        if (const cudaError_t d = cudaGetDevice(&device); d != cudaSuccess)
            return fail(status, cuda_error_text(d, "cudaGetDevice") + "; " + versions());
        cudaDeviceProp props{};
        if (const cudaError_t p = cudaGetDeviceProperties(&props, device); p != cudaSuccess)
            return fail(status, cuda_error_text(p, "cudaGetDeviceProperties") + "; " + versions());
        const std::string label = "device " + std::to_string(device) + " (" + props.name +
                                  ", compute capability " + std::to_string(props.major) + "." +
                                  std::to_string(props.minor) + ")";
        // Creates the context: fails for a prohibited or busy (exclusive-process) device.
        if (const cudaError_t c = cudaFree(nullptr); c != cudaSuccess)
            return fail(status, label + " is unusable: " + cuda_error_text(c, "creating a context") +
                                    "; " + versions());
        if (const cudaError_t k = check_kernel_image(); k != cudaSuccess)
            return fail(status, label + " cannot run this plugin's kernels (built for CUDA "
                                        "architectures " CAPSULE_CUDA_ARCHITECTURES "): " +
                                    cuda_error_text(k, "cudaFuncGetAttributes"));
        return set_status(status, CAPSULE_OK, "%s; %s", label.c_str(), versions().c_str());
    } catch (const std::exception& e) {
        return set_status(status, CAPSULE_ERROR_INTERNAL, "native_cuda probe: %s", e.what());
    }
}

const capsule_device_interface kDeviceInterface{
    sizeof(capsule_device_interface), &allocate, &release, &copy_to_device, &copy_to_host,
    &synchronize};

}  // namespace capsule::cuda
