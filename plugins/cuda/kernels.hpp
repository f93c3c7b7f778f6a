// The native CUDA plugin's kernels, as the ABI sees them (plugin.cpp assembles the table).
// Elementwise and softmax kernels: elementwise_ops.cpp; matmul and linear: blas_ops.cpp;
// reshape, flatten, concat, reduce_sum and reduce_mean: shape_ops.cpp; cross_entropy, sgd and
// adam: training_ops.cpp; scaled_dot_product_attention (native_cuda.flash_attention):
// attention_ops.cpp; permutations, slice, pad and gather: index_ops.cpp; layer_norm:
// layer_norm_ops.cpp;
// conv2d and pooling: dnn_ops.cpp, batch_norm: norm_ops.cpp (those when CMake found cuDNN:
// CAPSULE_CUDA_WITH_CUDNN); probe and device memory: device.cpp.
#pragma once

#include "capsule/plugin.hpp"

namespace capsule::cuda {

using plugin::BackwardCall;
using plugin::ForwardCall;

#define CAPSULE_CUDA_KERNEL(op)                \
    void op##_forward(const ForwardCall& call); \
    void op##_backward(const BackwardCall& call);

CAPSULE_CUDA_KERNEL(add)
CAPSULE_CUDA_KERNEL(sub)
CAPSULE_CUDA_KERNEL(mul)
CAPSULE_CUDA_KERNEL(max)
CAPSULE_CUDA_KERNEL(min)
CAPSULE_CUDA_KERNEL(scale)
CAPSULE_CUDA_KERNEL(abs)
CAPSULE_CUDA_KERNEL(sqrt)
CAPSULE_CUDA_KERNEL(clamp)
CAPSULE_CUDA_KERNEL(relu)
CAPSULE_CUDA_KERNEL(gelu)
CAPSULE_CUDA_KERNEL(sigmoid)
CAPSULE_CUDA_KERNEL(tanh)
CAPSULE_CUDA_KERNEL(softplus)
CAPSULE_CUDA_KERNEL(exp)
CAPSULE_CUDA_KERNEL(log)
CAPSULE_CUDA_KERNEL(sin)
CAPSULE_CUDA_KERNEL(cos)
CAPSULE_CUDA_KERNEL(inv)
CAPSULE_CUDA_KERNEL(softmax)
CAPSULE_CUDA_KERNEL(log_softmax)
CAPSULE_CUDA_KERNEL(matmul)
CAPSULE_CUDA_KERNEL(linear)
CAPSULE_CUDA_KERNEL(reshape)  // shape_ops.cpp
CAPSULE_CUDA_KERNEL(flatten)
CAPSULE_CUDA_KERNEL(concat)
CAPSULE_CUDA_KERNEL(reduce_sum)
CAPSULE_CUDA_KERNEL(reduce_mean)
CAPSULE_CUDA_KERNEL(cross_entropy)  // training_ops.cpp
CAPSULE_CUDA_KERNEL(flash_attention)  // attention_ops.cpp: scaled_dot_product_attention
CAPSULE_CUDA_KERNEL(permute)  // index_ops.cpp
CAPSULE_CUDA_KERNEL(transpose2d)
CAPSULE_CUDA_KERNEL(swapAdjacentAtDepth)
CAPSULE_CUDA_KERNEL(transpose3d_first_to_last)
CAPSULE_CUDA_KERNEL(transpose3d_last_to_first)
CAPSULE_CUDA_KERNEL(transpose3d_last_two)
CAPSULE_CUDA_KERNEL(slice)
CAPSULE_CUDA_KERNEL(pad)
CAPSULE_CUDA_KERNEL(gather)
CAPSULE_CUDA_KERNEL(layer_norm)  // layer_norm_ops.cpp
#if CAPSULE_CUDA_WITH_CUDNN
CAPSULE_CUDA_KERNEL(conv2d)  // dnn_ops.cpp, on cuDNN
CAPSULE_CUDA_KERNEL(max_pool2d)
CAPSULE_CUDA_KERNEL(max_pool2d_pad)
CAPSULE_CUDA_KERNEL(avg_pool2d)
CAPSULE_CUDA_KERNEL(avg_pool2d_pad)
CAPSULE_CUDA_KERNEL(batch_norm)  // norm_ops.cpp
#endif

#undef CAPSULE_CUDA_KERNEL

/// The optimizer steps (training_ops.cpp): forward only, run by capsule::Optimizer.
void sgd_forward(const ForwardCall& call);
void adam_forward(const ForwardCall& call);

/// Is a CUDA device usable here? Names the CUDA error, the runtime and driver versions.
int32_t probe(capsule_status* status) noexcept;
/// Memory from the caching pool (memory_pool.hpp), cudaMemcpy and cudaDeviceSynchronize on the
/// current device.
extern const capsule_device_interface kDeviceInterface;

}  // namespace capsule::cuda
