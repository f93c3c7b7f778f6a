// ABI glue for layer_norm (torch.nn.functional.layer_norm / torch.nn.LayerNorm, biased variance;
// docs/ops.md, the reference capsule plugins/cpu/reference/norm.cpp) on the kernels of
// layer_norm.cu: x [..., *normalized_shape], parameters weight and bias [normalized_shape] when
// elementwise_affine (bias only with bias = true); float32 and float64. Backward: dx from the row
// kernel, dweight = Σ_rows dy · x̂ and dbias = Σ_rows dy with the reduction kernel.
#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_common.hpp"
#include "kernels.hpp"
#include "layer_norm.hpp"

namespace capsule::cuda {
namespace {

/// Raises unless `t` is a CUDA tensor of input x's dtype with shape `shape`; `what` names it.
void require_like_input(const Tensor& x, const Tensor& t, const Dims& shape, const std::string& what) {
    require_cuda_tensor(t, what);
    common_float_dtype({{x, "input 0"}, {t, what.c_str()}});
    require_shape(t, shape, what);
}

struct LayerNormCall {
    LayerNormShape shape;
    Dims normalized;
    bool affine = true, bias = true;
};

template <typename Call>
LayerNormCall layer_norm_call(const Call& call, capsule_dtype& dtype) {
    const auto attrs = call.attrs();
    LayerNormCall c;
    plugin::require(attrs.has("normalized_shape"), "layer_norm: missing attribute 'normalized_shape'");
    const auto normalized = attrs.get_ints("normalized_shape", {});
    plugin::require(!normalized.empty(), "layer_norm: attribute 'normalized_shape' is empty");
    c.normalized.assign(normalized.begin(), normalized.end());
    c.shape.eps = attrs.get_float("eps", 1e-5);
    plugin::require(c.shape.eps > 0 && std::isfinite(c.shape.eps), "layer_norm: attribute 'eps' must be > 0");
    c.affine = attrs.get_bool("elementwise_affine", true);
    c.bias = c.affine && attrs.get_bool("bias", true);
    plugin::require(call.num_inputs() == 1, "layer_norm expects 1 input, got " + std::to_string(call.num_inputs()));
    const size_t params = c.affine ? (c.bias ? 2 : 1) : 0;
    plugin::require(call.num_params() == params, "layer_norm expects " + std::to_string(params) +
                                                     " parameters (weight, bias as elementwise_affine and bias say), got " +
                                                     std::to_string(call.num_params()));
    const Tensor x = call.input(0);
    require_cuda_tensor(x, "input 0");
    dtype = x.dtype();
    const Dims shape = dims_of(x);
    plugin::require(c.normalized.size() <= shape.size() &&
                        std::equal(c.normalized.begin(), c.normalized.end(), shape.end() - std::ptrdiff_t(c.normalized.size())),
                    "layer_norm: normalized_shape " + dims_text(c.normalized) +
                        " does not match the trailing dimensions of " + dims_text(shape));
    c.shape.n = element_count(c.normalized);
    c.shape.rows = element_count(Dims(shape.begin(), shape.end() - std::ptrdiff_t(c.normalized.size())));
    for (size_t p = 0; p < params; ++p) {
        require_like_input(x, call.param(p), c.normalized, p == 0 ? "parameter weight" : "parameter bias");
    }
    return c;
}

const void* param_data(const ForwardCall& call, size_t i, bool present) {
    return present ? call.param(i).view->data : nullptr;
}

}  // namespace

void layer_norm_forward(const ForwardCall& call) {
    capsule_dtype dtype{};
    const LayerNormCall c = layer_norm_call(call, dtype);
    const Tensor x = call.input(0), y = call.output(0);
    require_like_input(x, y, dims_of(x), "output");
    check_cuda(launch_layer_norm_forward(dtype, c.shape, x.view->data, param_data(call, 0, c.affine),
                                         param_data(call, 1, c.bias), y.view->data, stream_of(call.args->stream)),
               "launching layer_norm");
}

void layer_norm_backward(const BackwardCall& call) {
    capsule_dtype dtype{};
    const LayerNormCall c = layer_norm_call(call, dtype);
    const Tensor x = call.input(0), gy = call.grad_output(0);
    require_like_input(x, gy, dims_of(x), "grad output");
    const auto wanted = [&](const Tensor& g, const Dims& shape, const std::string& what) -> void* {
        if (!g.present()) return nullptr;
        require_like_input(x, g, shape, what);
        return g.view->data;
    };
    void* dx = wanted(call.grad_input(0), dims_of(x), "grad input 0");
    void* dweight = c.affine ? wanted(call.grad_param(0), c.normalized, "grad parameter weight") : nullptr;
    void* dbias = c.bias ? wanted(call.grad_param(1), c.normalized, "grad parameter bias") : nullptr;
    const cudaStream_t stream = stream_of(call.args->stream);
    const ReduceLayout columns = reduce_layout({c.shape.rows, c.shape.n}, {c.shape.n});
    if (dbias)
        check_cuda(launch_reduce_sum(dtype, gy.view->data, dbias, columns, stream), "launching layer_norm's bias gradient");
    if (!dx && !dweight) return;
    Scratch dy_xhat(dweight ? size_t(x.numel()) * dtype_bytes(dtype) : 0, stream);
    check_cuda(launch_layer_norm_backward(dtype, c.shape, x.view->data, c.affine ? call.param(0).view->data : nullptr,
                                          gy.view->data, dx, dy_xhat.get(), stream),
               "launching layer_norm's backward");
    if (dweight)
        check_cuda(launch_reduce_sum(dtype, dy_xhat.get(), dweight, columns, stream),
                   "launching layer_norm's weight gradient");
}

}  // namespace capsule::cuda
