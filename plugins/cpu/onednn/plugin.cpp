// The oneDNN plugin's table: every capsule declared in onednn.capsule.json, by name, each with a
// prepared kernel (prepare builds the oneDNN primitive once per node; forward wraps the host's
// buffers and executes it), and a backward kernel (VJP mode torchlean-tape: convolutions on
// oneDNN's backward primitives, linear, matmul and bmm on its sgemm, the elementwise ops, pools,
// batch norm and layer norm as loops of PyTorch's derivative formulas), so training runs on them.
#include <array>

#include "kernels.hpp"

namespace capsule::onednn {
namespace {

int32_t init(capsule_status* status) {
    return plugin::guarded(status, [] {
        try {
            (void)cpu_engine();
        } catch (const dnnl::error& e) {
            rethrow_dnnl("init (creating the CPU engine)", e);
        }
    });
}

int32_t probe(capsule_status* status) {
    return plugin::guarded(status, [] {
        try {
            dnnl::engine engine(dnnl::engine::kind::cpu, 0);
            (void)engine;
        } catch (const dnnl::error& e) {
            rethrow_dnnl("probe (creating a CPU engine)", e);
        }
    });
}

const std::array<capsule_kernel, 27>& kernels() {
    static const std::array<capsule_kernel, 27> table{
        linear_kernel,      matmul_kernel,         conv2d_kernel,     max_pool2d_kernel,
        max_pool2d_pad_kernel, avg_pool2d_kernel,  avg_pool2d_pad_kernel, relu_kernel,
        gelu_kernel,        sigmoid_kernel,        tanh_kernel,       softmax_kernel,
        log_softmax_kernel, add_kernel,            sub_kernel,        mul_kernel,
        batch_norm_kernel,  clamp_kernel,          concat_kernel,     reduce_mean_kernel,
        abs_kernel,         sqrt_kernel,           leaky_relu_kernel, hardswish_kernel,
        bmm_kernel,         layer_norm_kernel,     conv_transpose2d_kernel};
    return table;
}

}  // namespace

const capsule_kernel* find_kernel(std::string_view capsule_name) {
    for (const auto& k : kernels())
        if (capsule_name == k.capsule_name) return &k;
    return nullptr;
}

capsule_forward_fn finite_input_forward(const capsule_kernel* kernel) {
    if (auto f = elementwise_finite_input_forward(kernel)) return f;
    return pool_finite_input_forward(kernel);
}

}  // namespace capsule::onednn

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    using namespace capsule::onednn;
    if (host_major != CAPSULE_ABI_MAJOR) return nullptr;
    static const capsule_plugin table = [] {
        capsule_plugin p{};
        p.struct_size = sizeof(capsule_plugin);
        p.abi_major = CAPSULE_ABI_MAJOR;
        p.abi_minor = CAPSULE_ABI_MINOR;
        p.name = "onednn";
        p.version = "0.1.0";
        p.device = CAPSULE_DEVICE_CPU;
        p.init = init;
        p.shutdown = nullptr;
        p.probe = probe;
        p.kernels = kernels().data();
        p.num_kernels = kernels().size();
        p.device_interface = nullptr;
        p.extensions = &compiled_groups_extension.base;
        p.kernel_entry_size = sizeof(capsule_kernel);
        return p;
    }();
    return &table;
}
