// The LibTorch plugins' table: one capsule `<plugin>.<op>` per entry of CAPSULE_LIBTORCH_OPS
// (ops.hpp) and the optimizer steps sgd and adam, each with a prepared state (the intra-op thread
// count), a forward kernel and, for differentiable ops, a backward kernel through torch's autograd.
// This file is built twice (CMakeLists.txt), with the same op files:
//   - `libtorch` (CAPSULE_LIBTORCH_PLUGIN "libtorch"): VJP mode backend-vjp, the host's tape calls
//     each capsule's backward kernel; compiled groups for inference.
//   - `libtorch_autograd` (CAPSULE_LIBTORCH_EXTERNAL_AUTOGRAD): VJP mode external-autograd, the
//     group-autograd extension records a whole group with torch's autograd (group.hpp).
// Each manifest is generated from its table, the op catalog and its declaration.
#include <ATen/Parallel.h>

#include <cstring>

#include "group.hpp"
#include "ops.hpp"

#ifndef CAPSULE_LIBTORCH_PLUGIN
#error "CAPSULE_LIBTORCH_PLUGIN (the plugin's name) must be defined"
#endif

namespace capsule::libtorch {
namespace {

// Capsule names as objects with linkage, so that they can be template arguments.
#define CAPSULE_LIBTORCH_NAME(op, kind) constexpr char name_##op[] = CAPSULE_LIBTORCH_PLUGIN "." #op;
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
    capsule_kernel{sizeof(capsule_kernel), CAPSULE_LIBTORCH_PLUGIN ".sgd", sgd_kernel, nullptr, prepare_node,
                   release_node},
    capsule_kernel{sizeof(capsule_kernel), CAPSULE_LIBTORCH_PLUGIN ".adam", adam_kernel, nullptr, prepare_node,
                   release_node}};
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

NamedOp op_named(const char* capsule_name) {
#define CAPSULE_LIBTORCH_LOOKUP(op, kind) \
    if (std::strcmp(capsule_name, name_##op) == 0) return {op_##op, name_##op};
    CAPSULE_LIBTORCH_OPS(CAPSULE_LIBTORCH_LOOKUP)
#undef CAPSULE_LIBTORCH_LOOKUP
    return {};
}

}  // namespace capsule::libtorch

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    using namespace capsule::libtorch;
    if (host_major != CAPSULE_ABI_MAJOR) return nullptr;
    static const capsule_plugin table = [] {
        capsule_plugin p{};
        p.struct_size = sizeof(capsule_plugin);
        p.abi_major = CAPSULE_ABI_MAJOR;
        p.abi_minor = CAPSULE_ABI_MINOR;
        p.name = CAPSULE_LIBTORCH_PLUGIN;
        p.version = "0.1.0";
        p.device = CAPSULE_DEVICE_CPU;
        p.init = init;
        p.shutdown = nullptr;
        p.probe = probe;
        p.kernels = kKernels;
        p.num_kernels = sizeof kKernels / sizeof kKernels[0];
        p.device_interface = nullptr;
#ifdef CAPSULE_LIBTORCH_EXTERNAL_AUTOGRAD
        p.extensions = group_autograd_extensions();
#else
        p.extensions = compiled_groups_extensions();
#endif
        p.kernel_entry_size = sizeof(capsule_kernel);
        return p;
    }();
    return &table;
}
