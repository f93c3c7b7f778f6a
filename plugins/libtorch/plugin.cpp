// The LibTorch plugin's table: one capsule `libtorch.<op>` per entry of CAPSULE_LIBTORCH_OPS
// (ops.hpp) and the optimizer steps libtorch.sgd and libtorch.adam, each with a prepared state (the intra-op thread count), a forward kernel and, for
// differentiable ops, a backward kernel through torch's autograd. Its manifest
// (libtorch.capsule.json) is generated from this table, the op catalog and declaration.json.
#include <ATen/Parallel.h>

#include "ops.hpp"

namespace capsule::libtorch {
namespace {

// Capsule names as objects with linkage, so that they can be template arguments.
#define CAPSULE_LIBTORCH_NAME(op, kind) constexpr char name_##op[] = "libtorch." #op;
CAPSULE_LIBTORCH_OPS(CAPSULE_LIBTORCH_NAME)
#undef CAPSULE_LIBTORCH_NAME

template <OpFn Fn, const char* Name>
constexpr capsule_kernel entry(bool with_backward) {
    return capsule_kernel{sizeof(capsule_kernel), Name, forward_kernel<Fn, Name>,
                          with_backward ? backward_kernel<Fn, Name> : nullptr, prepare_node, release_node};
}

#define CAPSULE_LIBTORCH_ENTRY(op, kind) entry<op_##op, name_##op>(#kind[0] == 'b'),
constexpr capsule_kernel kKernels[] = {
    CAPSULE_LIBTORCH_OPS(CAPSULE_LIBTORCH_ENTRY)
    capsule_kernel{sizeof(capsule_kernel), "libtorch.sgd", sgd_kernel, nullptr, prepare_node, release_node},
    capsule_kernel{sizeof(capsule_kernel), "libtorch.adam", adam_kernel, nullptr, prepare_node, release_node}};
#undef CAPSULE_LIBTORCH_ENTRY

int32_t init(capsule_status* status) {
    return plugin::guarded(status, [] {
        // Intra-op threads are set per call (ThreadScope); ATen's inter-op pool is not used.
        at::init_num_threads();
    });
}

int32_t probe(capsule_status* status) {
    return guarded("probe", status, [] {
        // A small computation through ATen's CPU dispatch: fails when LibTorch cannot run here.
        const at::Tensor t = at::ones({2, 2});
        if (at::matmul(t, t).sum().item<float>() != 8.0f)
            plugin::fail(CAPSULE_ERROR_DEVICE, "LibTorch's CPU matmul gave a wrong value");
    });
}

}  // namespace
}  // namespace capsule::libtorch

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    using namespace capsule::libtorch;
    if (host_major != CAPSULE_ABI_MAJOR) return nullptr;
    static const capsule_plugin table = [] {
        capsule_plugin p{};
        p.struct_size = sizeof(capsule_plugin);
        p.abi_major = CAPSULE_ABI_MAJOR;
        p.abi_minor = CAPSULE_ABI_MINOR;
        p.name = "libtorch";
        p.version = "0.1.0";
        p.device = CAPSULE_DEVICE_CPU;
        p.init = init;
        p.shutdown = nullptr;
        p.probe = probe;
        p.kernels = kKernels;
        p.num_kernels = sizeof kKernels / sizeof kKernels[0];
        p.device_interface = nullptr;
        p.extensions = nullptr;
        p.kernel_entry_size = sizeof(capsule_kernel);
        return p;
    }();
    return &table;
}
