// The native CUDA plugin's table: exactly the capsules native_cuda.capsule.json marks `eager`,
// by name, with the probe and the device interface. The other capsules of the manifest are
// `planner-only` and have no kernel here.
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

using plugin::backward_entry;
using plugin::forward_entry;
using plugin::kernel;

#define CAPSULE_CUDA_ENTRY(op) \
    kernel("native_cuda." #op, forward_entry<op##_forward>, backward_entry<op##_backward>)

constexpr capsule_kernel kKernels[] = {
    CAPSULE_CUDA_ENTRY(add),     CAPSULE_CUDA_ENTRY(sub),         CAPSULE_CUDA_ENTRY(mul),
    CAPSULE_CUDA_ENTRY(scale),   CAPSULE_CUDA_ENTRY(abs),         CAPSULE_CUDA_ENTRY(sqrt),
    CAPSULE_CUDA_ENTRY(clamp),   CAPSULE_CUDA_ENTRY(max),         CAPSULE_CUDA_ENTRY(min),
    CAPSULE_CUDA_ENTRY(relu),    CAPSULE_CUDA_ENTRY(gelu),        CAPSULE_CUDA_ENTRY(sigmoid),
    CAPSULE_CUDA_ENTRY(tanh),    CAPSULE_CUDA_ENTRY(softplus),    CAPSULE_CUDA_ENTRY(exp),
    CAPSULE_CUDA_ENTRY(log),     CAPSULE_CUDA_ENTRY(sin),         CAPSULE_CUDA_ENTRY(cos),
    CAPSULE_CUDA_ENTRY(inv),     CAPSULE_CUDA_ENTRY(log_softmax), CAPSULE_CUDA_ENTRY(softmax),
    CAPSULE_CUDA_ENTRY(matmul),  CAPSULE_CUDA_ENTRY(linear),
    CAPSULE_CUDA_ENTRY(reshape), CAPSULE_CUDA_ENTRY(flatten),     CAPSULE_CUDA_ENTRY(concat),
    CAPSULE_CUDA_ENTRY(reduce_sum), CAPSULE_CUDA_ENTRY(reduce_mean), CAPSULE_CUDA_ENTRY(cross_entropy),
    CAPSULE_CUDA_ENTRY(flash_attention), CAPSULE_CUDA_ENTRY(permute),    CAPSULE_CUDA_ENTRY(transpose2d),
    CAPSULE_CUDA_ENTRY(swapAdjacentAtDepth), CAPSULE_CUDA_ENTRY(transpose3d_first_to_last),
    CAPSULE_CUDA_ENTRY(transpose3d_last_to_first), CAPSULE_CUDA_ENTRY(transpose3d_last_two),
    CAPSULE_CUDA_ENTRY(slice),   CAPSULE_CUDA_ENTRY(pad),         CAPSULE_CUDA_ENTRY(gather),
    CAPSULE_CUDA_ENTRY(layer_norm),
    kernel("native_cuda.sgd", forward_entry<sgd_forward>, nullptr),
    kernel("native_cuda.adam", forward_entry<adam_forward>, nullptr),
#if CAPSULE_CUDA_WITH_CUDNN
    CAPSULE_CUDA_ENTRY(conv2d),  CAPSULE_CUDA_ENTRY(max_pool2d), CAPSULE_CUDA_ENTRY(max_pool2d_pad),
    CAPSULE_CUDA_ENTRY(avg_pool2d), CAPSULE_CUDA_ENTRY(avg_pool2d_pad), CAPSULE_CUDA_ENTRY(batch_norm),
#endif
};

#undef CAPSULE_CUDA_ENTRY

const capsule_plugin kPlugin{sizeof(capsule_plugin),
                             CAPSULE_ABI_MAJOR,
                             CAPSULE_ABI_MINOR,
                             "native_cuda",
                             "0.1.0",
                             CAPSULE_DEVICE_CUDA,
                             nullptr,  // init: nothing to set up; the probe says whether a GPU works
                             nullptr,  // shutdown: per-thread cuBLAS handles die with their threads
                             &probe,
                             kKernels,
                             sizeof kKernels / sizeof kKernels[0],
                             &kDeviceInterface,
                             nullptr,
                             sizeof(capsule_kernel)};

}  // namespace
}  // namespace capsule::cuda

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    return host_major == CAPSULE_ABI_MAJOR ? &capsule::cuda::kPlugin : nullptr;
}
