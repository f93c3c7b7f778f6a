// Launchers of the layer_norm kernels (layer_norm.cu), called by layer_norm_ops.cpp.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "capsule/plugin_abi.h"

namespace capsule::cuda {

/// x viewed as [rows, n]: each row normalised on its own.
struct LayerNormShape {
    int64_t rows = 0, n = 0;
    double eps = 1e-5;
};

/// y = (x − mean) / sqrt(var + eps) · weight + bias per row (weight, bias [n] may be NULL).
cudaError_t launch_layer_norm_forward(capsule_dtype dtype, const LayerNormShape& s, const void* x, const void* weight,
                                      const void* bias, void* y, cudaStream_t stream);
/// dx [rows, n] (when not NULL) and dy · x̂ [rows, n] into `dy_xhat` (when not NULL), whose column
/// sums are the weight's gradient.
cudaError_t launch_layer_norm_backward(capsule_dtype dtype, const LayerNormShape& s, const void* x, const void* weight,
                                       const void* dy, void* dx, void* dy_xhat, cudaStream_t stream);

}  // namespace capsule::cuda
