// A complete minimal capsule plugin: one capsule, `example.relu`, float32 and float64, forward
// and backward. Build it as a shared library next to my_plugin.capsule.json (see README, "Write
// your own plugin").
#include <cmath>

#include "capsule/plugin.hpp"

using namespace capsule::plugin;

namespace {

void relu_forward(const ForwardCall& call) {
    Tensor x = call.input(0), y = call.output();
    require(x.numel() == y.numel(), "relu: output size differs from input");
    dispatch_float(x.dtype(), [&](auto zero) {
        using T = decltype(zero);
        const T* in = x.data<T>();
        T* out = y.data<T>();
        for (int64_t i = 0; i < x.numel(); ++i) out[i] = std::isnan(in[i]) ? in[i] : (in[i] > 0 ? in[i] : T(0));
    });
}

// d relu / dx = 1 where x > 0, else 0 (PyTorch's convention at 0).
void relu_backward(const BackwardCall& call) {
    Tensor x = call.input(0), dy = call.grad_output(), dx = call.grad_input(0);
    if (!dx.present()) return;
    dispatch_float(x.dtype(), [&](auto zero) {
        using T = decltype(zero);
        for (int64_t i = 0; i < x.numel(); ++i)
            dx.data<T>()[i] = x.data<T>()[i] > 0 ? dy.data<T>()[i] : T(0);
    });
}

constexpr capsule_kernel kKernels[] = {
    kernel("example.relu", forward_entry<relu_forward>, backward_entry<relu_backward>),
};

int32_t probe(capsule_status*) { return CAPSULE_OK; }

const capsule_plugin kPlugin{sizeof(capsule_plugin), CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR,
                             "example", "1.0.0", CAPSULE_DEVICE_CPU, nullptr, nullptr, &probe,
                             kKernels, 1, nullptr, nullptr, sizeof(capsule_kernel)};

}  // namespace

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    return host_major == CAPSULE_ABI_MAJOR ? &kPlugin : nullptr;
}
