#include "cudnn_common.hpp"

namespace capsule::cuda {

void check_cudnn(cudnnStatus_t status, const std::string& what) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    const bool memory = status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                        status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
    throw KernelError(memory ? CAPSULE_ERROR_OUT_OF_MEMORY : CAPSULE_ERROR_DEVICE,
                      what + ": " + cudnnGetErrorString(status));
}

namespace {

struct ThreadHandle {
    cudnnHandle_t handle = nullptr;
    int device = -1;
    ThreadHandle() = default;
    ThreadHandle(const ThreadHandle&) = delete;
    ThreadHandle& operator=(const ThreadHandle&) = delete;
    ~ThreadHandle() {
        if (handle) (void)cudnnDestroy(handle);
    }
};

}  // namespace

cudnnHandle_t dnn_handle(cudaStream_t stream) {
    thread_local ThreadHandle local;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    if (!local.handle || local.device != device) {
        if (local.handle) (void)cudnnDestroy(local.handle);
        local.handle = nullptr;
        check_cudnn(cudnnCreate(&local.handle), "cudnnCreate");
        local.device = device;
    }
    check_cudnn(cudnnSetStream(local.handle, stream), "cudnnSetStream");
    return local.handle;
}

}  // namespace capsule::cuda
