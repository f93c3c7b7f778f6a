// cuDNN helpers shared by the plugin's cuDNN kernels (dnn_ops.cpp, norm_ops.cpp): status codes as
// KernelErrors, the per-thread handle, and the 1 / 0 scaling factors cuDNN's calls take.
#pragma once

#include <string>

#include <cudnn.h>

#include "cuda_common.hpp"

namespace capsule::cuda {

/// Raises KernelError (CAPSULE_ERROR_OUT_OF_MEMORY for allocation failures, else
/// CAPSULE_ERROR_DEVICE) with cuDNN's message unless `status` is CUDNN_STATUS_SUCCESS.
void check_cudnn(cudnnStatus_t status, const std::string& what);

/// This host thread's cuDNN handle for the current device, bound to `stream`. Created on first
/// use (and again when the thread's current device changed), destroyed when the thread exits:
/// like the cuBLAS handles (blas_ops.cpp), no locking and no per-call cudnnCreate.
cudnnHandle_t dnn_handle(cudaStream_t stream);

/// 1 and 0 in the scaling type cuDNN expects for `dtype` (double for double data, else float).
struct Scaling {
    float f1 = 1, f0 = 0;
    double d1 = 1, d0 = 0;
    bool wide;
    explicit Scaling(capsule_dtype dtype) : wide(dtype == CAPSULE_DTYPE_FLOAT64) {}
    const void* one() const { return wide ? static_cast<const void*>(&d1) : &f1; }
    const void* zero() const { return wide ? static_cast<const void*>(&d0) : &f0; }
};

}  // namespace capsule::cuda
