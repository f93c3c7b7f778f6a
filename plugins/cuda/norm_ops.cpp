// batch_norm on cuDNN (spatial batch normalization) and the plugin's broadcasting kernels.
//
// torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
// eps) on x [N, C, ...] (rank >= 2, contiguous; the dimensions after C are one spatial extent S),
// with the reference capsule's conventions (docs/ops.md, plugins/cpu/reference/norm.cpp):
// parameters weight [C] and bias [C] when `affine` (default true), then running_mean [C] and
// running_var [C]; training = true normalizes by the batch's per-channel mean and biased variance
// over N and S, training = false by the running statistics; the kernel never writes the running
// statistics (momentum is accepted and unused, as in the reference capsule).
//
// Forward: cudnnBatchNormalizationForwardTraining (no running-average update, nothing saved) or
// cudnnBatchNormalizationForwardInference. Backward in training mode:
// cudnnBatchNormalizationBackward (dx, dweight, dbias from the batch statistics); the running
// statistics get zero gradients. In inference mode cuDNN has no backward, and with
// rstd = 1 / sqrt(running_var + eps), k = weight · rstd and s = Σ_{N,S} dy · (x − running_mean):
// dx = k · dy, dweight = rstd · s, dbias = Σ dy, drunning_mean = −k · Σ dy and
// drunning_var = −½ · k · rstd² · s, computed with the broadcasting kernels (launch.hpp).
#include <cstdint>
#include <optional>
#include <string>

#include "cudnn_common.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

/// The batch norm's sizes and attributes, checked against the tensors.
struct BatchNorm {
    int64_t n = 0, c = 0, spatial = 1;
    bool training = false, affine = true;
    double eps = 1e-5;
    std::size_t mean_index = 0, var_index = 1;  // parameter indices of the running statistics
    Dims x3() const { return {n, c, spatial}; }          // x as [N, C, S]
    Dims channel3() const { return {1, c, 1}; }          // a per-channel vector broadcast over x3
};

template <typename Call>
BatchNorm batch_norm_of(const Call& call) {
    BatchNorm b;
    plugin::require(call.num_inputs() == 1, "batch_norm expects 1 input, got " + std::to_string(call.num_inputs()));
    const auto attrs = call.attrs();
    b.training = attrs.get_bool("training", false);
    b.affine = attrs.get_bool("affine", true);
    b.eps = attrs.get_float("eps", 1e-5);
    plugin::require(b.eps > 0, "batch_norm attribute 'eps' must be > 0");
    const std::size_t want = b.affine ? 4 : 2;
    plugin::require(call.num_params() == want,
                    b.affine ? "batch_norm expects parameters weight, bias, running_mean and running_var"
                             : "batch_norm with affine = false expects parameters running_mean and running_var");
    b.mean_index = b.affine ? 2 : 0;
    b.var_index = b.mean_index + 1;
    const Tensor x = call.input(0);
    plugin::require(x.rank() >= 2, "batch_norm input must be [N, C, ...], got " + dims_text(dims_of(x)));
    b.n = x.dim(0);
    b.c = x.dim(1);
    for (int d = 2; d < x.rank(); ++d) b.spatial *= x.dim(d);
    for (std::size_t i = 0; i < want; ++i) {
        const Tensor p = call.param(i);
        const std::string what = "batch_norm parameter " + std::to_string(i);
        require_cuda_tensor(p, what);
        common_float_dtype({{x, "input 0"}, {p, what.c_str()}});
        require_shape(p, {b.c}, what);
    }
    plugin::require(!b.training || b.n * b.spatial > 1, "batch_norm training needs more than 1 value per channel");
    return b;
}

/// cuDNN's view of x as [N, C, S, 1] and the per-channel descriptor it derives from it.
struct Descriptors {
    cudnnTensorDescriptor_t x = nullptr, channel = nullptr;
    Descriptors(const BatchNorm& b, capsule_dtype dtype) {
        const auto type = dtype == CAPSULE_DTYPE_FLOAT64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
        auto dim = [](int64_t v, const char* what) {
            if (v < 0 || v > INT32_MAX)
                throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                                  std::string("batch_norm ") + what + " = " + std::to_string(v) +
                                      " exceeds the 32-bit range of cuDNN's arguments");
            return static_cast<int>(v);
        };
        check_cudnn(cudnnCreateTensorDescriptor(&x), "creating a cuDNN descriptor");
        check_cudnn(cudnnCreateTensorDescriptor(&channel), "creating a cuDNN descriptor");
        check_cudnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, dim(b.n, "batch"), dim(b.c, "channels"),
                                               dim(b.spatial, "spatial size"), 1),
                    "batch_norm input descriptor");
        check_cudnn(cudnnDeriveBNTensorDescriptor(channel, x, CUDNN_BATCHNORM_SPATIAL), "batch_norm channel descriptor");
    }
    ~Descriptors() {
        if (x) (void)cudnnDestroyTensorDescriptor(x);
        if (channel) (void)cudnnDestroyTensorDescriptor(channel);
    }
    Descriptors(const Descriptors&) = delete;
    Descriptors& operator=(const Descriptors&) = delete;
};

/// Device memory for `count` values of `dtype`, set to `value` (cudnnSetTensor over `desc`).
struct Filled {
    Scratch memory;
    Filled(cudnnHandle_t h, cudnnTensorDescriptor_t desc, capsule_dtype dtype, int64_t count, double value,
           cudaStream_t stream)
        : memory(size_t(count) * dtype_bytes(dtype), stream) {
        const float f = static_cast<float>(value);
        check_cudnn(cudnnSetTensor(h, desc, memory.get(), dtype == CAPSULE_DTYPE_FLOAT64 ? static_cast<const void*>(&value)
                                                                                           : static_cast<const void*>(&f)),
                    "cudnnSetTensor");
    }
    void* get() const { return memory.get(); }
};

void zero_fill(const Tensor& t, capsule_dtype dtype, cudaStream_t stream) {
    if (t.present() && t.numel() > 0)
        check_cuda(cudaMemsetAsync(t.view->data, 0, size_t(t.numel()) * dtype_bytes(dtype), stream),
                   "batch_norm gradient");
}

/// The elementwise and reduction launches of the inference-mode backward, on one dtype and stream.
struct Kernels {
    capsule_dtype dtype;
    cudaStream_t stream;
    void binary(Binary op, const void* a, const Dims& as, const void* b, const Dims& bs, void* out, const Dims& os) const {
        check_cuda(launch_binary_forward(op, dtype, a, b, out, broadcast_layout(as, bs, os), stream),
                   "batch_norm backward");
    }
    void unary(Unary op, const void* x, void* y, int64_t n, double factor = 0) const {
        UnaryParams p;
        p.a = factor;
        check_cuda(launch_unary_forward(op, dtype, x, y, n, p, stream), "batch_norm backward");
    }
    void sum(const void* source, const Dims& ss, void* target, const Dims& ts) const {
        check_cuda(launch_reduce_sum(dtype, source, target, reduce_layout(ss, ts), stream), "batch_norm backward");
    }
};

void inference_backward(const BackwardCall& call, const BatchNorm& b, capsule_dtype dtype, cudaStream_t stream) {
    const Tensor x = call.input(0), gy = call.grad_output(0), gx = call.grad_input(0);
    const Kernels k{dtype, stream};
    const size_t width = dtype_bytes(dtype);
    const Dims cs{b.c}, c3 = b.channel3(), x3 = b.x3(), one{1};
    const void* mean = call.param(b.mean_index).view->data;
    const void* var = call.param(b.var_index).view->data;
    // rstd = 1 / sqrt(var + eps); scale = weight · rstd (rstd without affine).
    const DeviceScalar eps(dtype, b.eps, stream);
    Scratch rstd(size_t(b.c) * width, stream), scale(size_t(b.c) * width, stream);
    k.binary(Binary::add, var, cs, eps.get(), one, rstd.get(), cs);
    k.unary(Unary::sqrt, rstd.get(), rstd.get(), b.c);
    k.unary(Unary::inv, rstd.get(), rstd.get(), b.c);
    if (b.affine)
        k.binary(Binary::mul, call.param(0).view->data, cs, rstd.get(), cs, scale.get(), cs);
    else
        check_cuda(cudaMemcpyAsync(scale.get(), rstd.get(), size_t(b.c) * width, cudaMemcpyDeviceToDevice, stream),
                   "batch_norm backward");
    if (gx.present()) k.binary(Binary::mul, gy.view->data, x3, scale.get(), c3, gx.view->data, x3);
    // sum_dy = Σ dy and s = Σ dy · (x − mean), per channel.
    Scratch sum_dy(size_t(b.c) * width, stream), s(size_t(b.c) * width, stream),
        centered(size_t(x.numel()) * width, stream);
    k.sum(gy.view->data, x3, sum_dy.get(), c3);
    k.binary(Binary::sub, x.view->data, x3, mean, c3, centered.get(), x3);
    k.binary(Binary::mul, centered.get(), x3, gy.view->data, x3, centered.get(), x3);
    k.sum(centered.get(), x3, s.get(), c3);
    if (b.affine) {
        if (const Tensor gw = call.grad_param(0); gw.present()) k.binary(Binary::mul, s.get(), cs, rstd.get(), cs, gw.view->data, cs);
        if (const Tensor gb = call.grad_param(1); gb.present())
            check_cuda(cudaMemcpyAsync(gb.view->data, sum_dy.get(), size_t(b.c) * width, cudaMemcpyDeviceToDevice, stream),
                       "batch_norm backward");
    }
    if (const Tensor gm = call.grad_param(b.mean_index); gm.present()) {
        k.binary(Binary::mul, sum_dy.get(), cs, scale.get(), cs, gm.view->data, cs);
        k.unary(Unary::scale, gm.view->data, gm.view->data, b.c, -1.0);
    }
    if (const Tensor gv = call.grad_param(b.var_index); gv.present()) {
        k.binary(Binary::mul, s.get(), cs, scale.get(), cs, gv.view->data, cs);
        k.binary(Binary::mul, gv.view->data, cs, rstd.get(), cs, gv.view->data, cs);
        k.binary(Binary::mul, gv.view->data, cs, rstd.get(), cs, gv.view->data, cs);
        k.unary(Unary::scale, gv.view->data, gv.view->data, b.c, -0.5);
    }
}

}  // namespace

void batch_norm_forward(const ForwardCall& call) {
    const BatchNorm b = batch_norm_of(call);
    const Tensor x = call.input(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    require_shape(y, dims_of(x), "output");
    if (y.numel() == 0) return;
    const cudaStream_t stream = stream_of(call.args->stream);
    const cudnnHandle_t h = dnn_handle(stream);
    const Descriptors d(b, dtype);
    const Scaling s(dtype);
    std::optional<Filled> ones, zeros;
    if (!b.affine) {
        ones.emplace(h, d.channel, dtype, b.c, 1.0, stream);
        zeros.emplace(h, d.channel, dtype, b.c, 0.0, stream);
    }
    const void* scale = b.affine ? call.param(0).view->data : ones->get();
    const void* shift = b.affine ? call.param(1).view->data : zeros->get();
    if (b.training)
        check_cudnn(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), d.x,
                                                           x.view->data, d.x, y.view->data, d.channel, scale, shift,
                                                           0.0, nullptr, nullptr, b.eps, nullptr, nullptr),
                    "cudnnBatchNormalizationForwardTraining");
    else
        check_cudnn(cudnnBatchNormalizationForwardInference(
                        h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), d.x, x.view->data, d.x, y.view->data,
                        d.channel, scale, shift, call.param(b.mean_index).view->data,
                        call.param(b.var_index).view->data, b.eps),
                    "cudnnBatchNormalizationForwardInference");
}

void batch_norm_backward(const BackwardCall& call) {
    const BatchNorm b = batch_norm_of(call);
    const Tensor x = call.input(0), gy = call.grad_output(0), gx = call.grad_input(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(gy, "grad output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {gy, "grad output"}});
    require_shape(gy, dims_of(x), "grad output");
    if (gx.present()) {
        require_cuda_tensor(gx, "grad input 0");
        common_float_dtype({{x, "input 0"}, {gx, "grad input 0"}});
        require_shape(gx, dims_of(x), "grad input 0");
    }
    for (std::size_t i = 0; i < call.num_params(); ++i)
        if (const Tensor g = call.grad_param(i); g.present()) {
            const std::string what = "batch_norm grad parameter " + std::to_string(i);
            require_cuda_tensor(g, what);
            common_float_dtype({{x, "input 0"}, {g, what.c_str()}});
            require_shape(g, {b.c}, what);
        }
    const cudaStream_t stream = stream_of(call.args->stream);
    if (x.numel() == 0) {  // nothing flows back
        for (std::size_t i = 0; i < call.num_params(); ++i) zero_fill(call.grad_param(i), dtype, stream);
        return;
    }
    if (!b.training) return inference_backward(call, b, dtype, stream);
    // Training: the running statistics do not reach the output.
    zero_fill(call.grad_param(b.mean_index), dtype, stream);
    zero_fill(call.grad_param(b.var_index), dtype, stream);
    const cudnnHandle_t h = dnn_handle(stream);
    const Descriptors d(b, dtype);
    const Scaling s(dtype);
    const size_t width = dtype_bytes(dtype);
    std::optional<Filled> ones;
    if (!b.affine) ones.emplace(h, d.channel, dtype, b.c, 1.0, stream);
    const Tensor gw = b.affine ? call.grad_param(0) : Tensor{}, gb = b.affine ? call.grad_param(1) : Tensor{};
    // cuDNN writes dx, dweight and dbias together: scratch stands in for those not wanted.
    Scratch dx_scratch(gx.present() ? 0 : size_t(x.numel()) * width, stream),
        dw_scratch(gw.present() ? 0 : size_t(b.c) * width, stream), db_scratch(gb.present() ? 0 : size_t(b.c) * width, stream);
    check_cudnn(cudnnBatchNormalizationBackward(
                    h, CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), s.one(), s.zero(), d.x, x.view->data, d.x,
                    gy.view->data, d.x, gx.present() ? gx.view->data : dx_scratch.get(), d.channel,
                    b.affine ? call.param(0).view->data : ones->get(), gw.present() ? gw.view->data : dw_scratch.get(),
                    gb.present() ? gb.view->data : db_scratch.get(), b.eps, nullptr, nullptr),
                "cudnnBatchNormalizationBackward");
}

}  // namespace capsule::cuda
