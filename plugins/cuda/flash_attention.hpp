// Launchers of native_cuda.flash_attention (flash_attention.cu), called by attention_ops.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "capsule/plugin_abi.h"
#include "flash_attention_math.hpp"

namespace capsule::cuda {

/// Largest head dimension, max(E, Ev), the kernels keep in registers.
inline constexpr int64_t kFlashMaxHeadDim = 128;

/// Device pointers of one call, all contiguous row-major of `dtype` (float32 or float64) except
/// the mask (bool bytes or `dtype`, per geometry.mask; NULL without one). Backward: `lse` and
/// `delta` are [batch, L] scratch; dq, dk, dv and dmask may each be NULL (not wanted); dmask
/// must hold zeros (terms are added atomically).
struct FlashAttentionArgs {
    capsule_dtype dtype = CAPSULE_DTYPE_FLOAT32;
    flash::Geometry geometry;
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    const void* mask = nullptr;
    void* out = nullptr;         // forward: [batch, L, Ev]
    const void* dout = nullptr;  // backward: [batch, L, Ev]
    void* lse = nullptr;
    void* delta = nullptr;
    void* dq = nullptr;
    void* dk = nullptr;
    void* dv = nullptr;
    void* dmask = nullptr;
};

/// out = softmax(scale · q·kᵀ + mask) · v; needs max(E, Ev) <= kFlashMaxHeadDim.
cudaError_t launch_flash_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream);
/// The gradients of q, k, v and an additive mask from dout (recomputing the probabilities).
cudaError_t launch_flash_attention_backward(const FlashAttentionArgs& args, cudaStream_t stream);

}  // namespace capsule::cuda
