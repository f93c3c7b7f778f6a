// conv2d and 2-D pooling on cuDNN, forward and backward.
//
// torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation, groups) on x
// [N, C_in, H, W] and weight [out_channels, C_in / groups, kh, kw], both NCHW and contiguous, bias
// [out_channels]; output [N, out_channels, H_out, W_out] with H_out = (H + 2·pad − dil·(kh − 1)
// − 1) / stride + 1 (floor), the same for W. cuDNN's CUDNN_CROSS_CORRELATION mode is PyTorch's
// convolution (the kernel is not flipped). Attributes as the reference capsule's (docs/ops.md:
// kernel_size, stride, padding, dilation as an int or a pair; groups; bias, default true).
//
// The calls are cuDNN's single-operation convolution API (cudnnConvolutionForward and the two
// backward ones; kept by cuDNN 9 beside its graph API). The math type is CUDNN_FMA_MATH: no TF32
// tensor-core arithmetic, so float32 results are IEEE single precision like the cuBLAS kernels.
// The algorithm is the first deterministic one of cuDNN's heuristics (cudnnGet*Algorithm_v7), so
// a run repeats its bits; its workspace is stream-ordered scratch memory. cuDNN handles are per
// host thread, as the cuBLAS ones (blas_ops.cpp); so are the plans (descriptors and the three
// passes' algorithms, keyed by shapes and attributes: conv_plan), made on a session's first run.
//
// max_pool2d[_pad] and avg_pool2d[_pad] follow torch.nn.functional.max_pool2d / avg_pool2d
// (docs/ops.md): kernel_size, stride (default kernel_size), padding (at most half the kernel),
// ceil_mode, count_include_pad (avg, default true). Max pooling never picks padding and
// propagates NaN (CUDNN_PROPAGATE_NAN), as torch.max_pool2d; its backward sends each gradient to
// one maximum of its window, deterministically (CUDNN_POOLING_MAX_DETERMINISTIC). cuDNN's pooling
// windows all start inside the symmetric padding, so a ceil_mode that adds a last window past it
// is refused (UNSUPPORTED), not computed differently.
#include <array>
#include <climits>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "cudnn_common.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

/// Owns one cuDNN descriptor (Create / Destroy pair).
template <typename D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class Descriptor {
public:
    Descriptor() { check_cudnn(Create(&d_), "creating a cuDNN descriptor"); }
    ~Descriptor() { (void)Destroy(d_); }
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    D get() const { return d_; }

private:
    D d_{};
};
using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

/// A value for cuDNN's 32-bit int arguments; UNSUPPORTED beyond that range.
int as_int(int64_t v, const std::string& what) {
    if (v < 0 || v > INT_MAX)
        throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                          what + " = " + std::to_string(v) + " exceeds the 32-bit range of cuDNN's arguments");
    return static_cast<int>(v);
}

/// The attribute `name` of op `op` as an (height, width) pair: an int for both or a list of two.
std::array<int64_t, 2> pair_attr(const plugin::Attributes& attrs, const char* name, std::array<int64_t, 2> fallback,
                                 const char* op = "conv2d") {
    const auto v = attrs.get_ints(name, {fallback[0], fallback[1]});
    plugin::require(v.size() == 1 || v.size() == 2, std::string(op) + " attribute '" + name +
                                                        "' must be an int or a pair, got " +
                                                        std::to_string(v.size()) + " values");
    return {v[0], v.size() == 2 ? v[1] : v[0]};
}

/// The convolution's sizes, checked against the tensors (INVALID_ARGUMENT names the mismatch).
struct ConvShape {
    int64_t n = 0, c = 0, h = 0, w = 0, k = 0, kh = 0, kw = 0, groups = 1, oh = 0, ow = 0;
    std::array<int64_t, 2> stride{}, padding{}, dilation{};
    bool bias = true;
    Dims x() const { return {n, c, h, w}; }
    Dims weight() const { return {k, c / groups, kh, kw}; }
    Dims y() const { return {n, k, oh, ow}; }
};

ConvShape conv_shape(const Tensor& x, const Tensor& weight, const plugin::Attributes& attrs) {
    ConvShape s;
    plugin::require(x.rank() == 4, "conv2d input must be [N, C_in, H, W], got " + dims_text(dims_of(x)));
    plugin::require(weight.rank() == 4,
                    "conv2d weight must be [out_channels, C_in/groups, kh, kw], got " + dims_text(dims_of(weight)));
    s.n = x.dim(0), s.c = x.dim(1), s.h = x.dim(2), s.w = x.dim(3);
    s.k = weight.dim(0), s.kh = weight.dim(2), s.kw = weight.dim(3);
    s.groups = attrs.get_int("groups", 1);
    s.bias = attrs.get_bool("bias", true);
    s.stride = pair_attr(attrs, "stride", {1, 1});
    s.padding = pair_attr(attrs, "padding", {0, 0});
    s.dilation = pair_attr(attrs, "dilation", {1, 1});
    const auto kernel = pair_attr(attrs, "kernel_size", {s.kh, s.kw});
    plugin::require(kernel[0] == s.kh && kernel[1] == s.kw,
                    "conv2d kernel_size does not match the weight " + dims_text(dims_of(weight)));
    plugin::require(attrs.get_int("out_channels", s.k) == s.k,
                    "conv2d out_channels does not match the weight " + dims_text(dims_of(weight)));
    plugin::require(s.groups >= 1 && s.c % s.groups == 0 && s.k % s.groups == 0,
                    "conv2d groups " + std::to_string(s.groups) + " must divide the input channels " +
                        std::to_string(s.c) + " and out_channels " + std::to_string(s.k));
    for (int i = 0; i < 2; ++i) {
        plugin::require(s.stride[i] >= 1 && s.dilation[i] >= 1 && s.padding[i] >= 0,
                        "conv2d needs stride >= 1, dilation >= 1 and padding >= 0");
        const int64_t size = i == 0 ? s.h : s.w, k = i == 0 ? s.kh : s.kw;
        const int64_t span = s.dilation[i] * (k - 1) + 1, padded = size + 2 * s.padding[i];
        plugin::require(k >= 1 && padded >= span, "conv2d padded input " + std::to_string(padded) +
                                                      " is smaller than the dilated kernel " + std::to_string(span));
        (i == 0 ? s.oh : s.ow) = (padded - span) / s.stride[i] + 1;
    }
    require_shape(weight, s.weight(), "weight");
    return s;
}

cudnnDataType_t data_type(capsule_dtype dtype) {
    return dtype == CAPSULE_DTYPE_FLOAT64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

/// The descriptors of a convolution's output y [N, K, H_out, W_out] and bias [1, K, 1, 1].
struct OutputDescriptors {
    TensorDescriptor y, bias;

    OutputDescriptors(const ConvShape& s, capsule_dtype dtype) {
        const auto type = data_type(dtype);
        check_cudnn(cudnnSetTensor4dDescriptor(y.get(), CUDNN_TENSOR_NCHW, type, as_int(s.n, "batch"),
                                               as_int(s.k, "out_channels"), as_int(s.oh, "output height"),
                                               as_int(s.ow, "output width")),
                    "conv2d output descriptor");
        check_cudnn(cudnnSetTensor4dDescriptor(bias.get(), CUDNN_TENSOR_NCHW, type, 1, as_int(s.k, "out_channels"), 1, 1),
                    "conv2d bias descriptor");
    }
};

/// The descriptors of one convolution (at least one input channel).
struct ConvDescriptors : OutputDescriptors {
    TensorDescriptor x;
    FilterDescriptor weight;
    ConvolutionDescriptor conv;

    ConvDescriptors(const ConvShape& s, capsule_dtype dtype) : OutputDescriptors(s, dtype) {
        const auto type = data_type(dtype);
        check_cudnn(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NCHW, type, as_int(s.n, "batch"),
                                               as_int(s.c, "input channels"), as_int(s.h, "height"),
                                               as_int(s.w, "width")),
                    "conv2d input descriptor");
        check_cudnn(cudnnSetFilter4dDescriptor(weight.get(), type, CUDNN_TENSOR_NCHW, as_int(s.k, "out_channels"),
                                               as_int(s.c / s.groups, "input channels per group"),
                                               as_int(s.kh, "kernel height"), as_int(s.kw, "kernel width")),
                    "conv2d weight descriptor");
        check_cudnn(cudnnSetConvolution2dDescriptor(
                        conv.get(), as_int(s.padding[0], "padding"), as_int(s.padding[1], "padding"),
                        as_int(s.stride[0], "stride"), as_int(s.stride[1], "stride"),
                        as_int(s.dilation[0], "dilation"), as_int(s.dilation[1], "dilation"),
                        CUDNN_CROSS_CORRELATION, type),
                    "conv2d convolution descriptor");
        check_cudnn(cudnnSetConvolutionGroupCount(conv.get(), as_int(s.groups, "groups")), "conv2d groups");
        check_cudnn(cudnnSetConvolutionMathType(conv.get(), CUDNN_FMA_MATH), "conv2d math type");
        // cuDNN's own output size must be the one checked against the output tensor.
        int dims[4] = {};
        check_cudnn(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), weight.get(), &dims[0], &dims[1],
                                                          &dims[2], &dims[3]),
                    "conv2d output size");
        if (Dims{dims[0], dims[1], dims[2], dims[3]} != s.y())
            throw KernelError(CAPSULE_ERROR_DEVICE, "cuDNN computes conv2d output " +
                                                        dims_text({dims[0], dims[1], dims[2], dims[3]}) +
                                                        ", expected " + dims_text(s.y()));
    }
};

/// The first deterministic algorithm of cuDNN's heuristics among `count` results (else the first
/// usable one), with its workspace size in bytes.
template <typename Perf>
std::pair<decltype(Perf{}.algo), size_t> pick_algorithm(const Perf* perf, int count, const char* what) {
    for (int i = 0; i < count; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC)
            return {perf[i].algo, perf[i].memory};
    for (int i = 0; i < count; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS) return {perf[i].algo, perf[i].memory};
    throw KernelError(CAPSULE_ERROR_UNSUPPORTED, std::string("cuDNN has no ") + what + " algorithm for these shapes");
}

constexpr int kMaxAlgorithms = 16;

/// A cuDNN algorithm with its workspace size in bytes, chosen on first use from the results of
/// the pass's heuristics (`Perf`: the pass's cudnn*AlgoPerf_t).
template <typename Perf>
struct Choice {
    decltype(Perf{}.algo) algo{};
    size_t workspace = 0;
    bool chosen = false;

    /// `query(perf, &count)` runs the heuristics into up to kMaxAlgorithms results; `what` names
    /// the pass in pick_algorithm's message.
    template <typename Query>
    const Choice& ensure(const char* what, Query&& query) {
        if (!chosen) {
            Perf perf[kMaxAlgorithms];
            int count = 0;
            query(perf, &count);
            std::tie(algo, workspace) = pick_algorithm(perf, count, what);
            chosen = true;
        }
        return *this;
    }
};

/// A convolution's descriptors and the algorithms cuDNN's heuristics chose for its forward,
/// backward-data and backward-filter passes (each asked for on its first use).
struct ConvPlan {
    ConvDescriptors d;
    Choice<cudnnConvolutionFwdAlgoPerf_t> forward;
    Choice<cudnnConvolutionBwdDataAlgoPerf_t> backward_data;
    Choice<cudnnConvolutionBwdFilterAlgoPerf_t> backward_filter;
    ConvPlan(const ConvShape& s, capsule_dtype dtype) : d(s, dtype) {}
};

/// This thread's plan for (device, dtype, shapes, attributes), made on first use: the heuristic
/// queries and the descriptors then cost nothing on a session's next runs. Plans hold no device
/// memory; the cache is cleared past kMaxPlans shapes (a model whose shapes keep changing).
ConvPlan& conv_plan(const ConvShape& s, capsule_dtype dtype) {
    constexpr size_t kMaxPlans = 256;
    using Key = std::array<int64_t, 18>;
    thread_local std::map<Key, std::unique_ptr<ConvPlan>> plans;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    const Key key{device,       int64_t(dtype), s.n,          s.c,          s.h,           s.w,
                  s.k,          s.kh,           s.kw,         s.groups,     s.stride[0],   s.stride[1],
                  s.padding[0], s.padding[1],   s.dilation[0], s.dilation[1], s.oh,        s.ow};
    if (const auto it = plans.find(key); it != plans.end()) return *it->second;
    auto plan = std::make_unique<ConvPlan>(s, dtype);
    if (plans.size() >= kMaxPlans) plans.clear();
    return *plans.emplace(key, std::move(plan)).first->second;
}

/// y (already holding the convolution) += bias, broadcast over N, H and W.
void add_bias(cudnnHandle_t h, const OutputDescriptors& d, const Scaling& s, const void* bias, void* y) {
    check_cudnn(cudnnAddTensor(h, s.one(), d.bias.get(), bias, s.one(), d.y.get(), y), "conv2d bias");
}

void require_params(size_t got, bool bias) {
    plugin::require(got == (bias ? 2u : 1u), bias ? "conv2d expects parameters weight and bias"
                                                  : "conv2d with bias = false expects the parameter weight only");
}

}  // namespace

void conv2d_forward(const ForwardCall& call) {
    plugin::require(call.num_inputs() == 1, "conv2d expects 1 input, got " + std::to_string(call.num_inputs()));
    const auto attrs = call.attrs();
    require_params(call.num_params(), attrs.get_bool("bias", true));
    const Tensor x = call.input(0), weight = call.param(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(weight, "weight");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {weight, "weight"}, {y, "output"}});
    const ConvShape s = conv_shape(x, weight, attrs);
    require_shape(y, s.y(), "output");
    Tensor bias{};
    if (s.bias) {
        bias = call.param(1);
        require_cuda_tensor(bias, "bias");
        common_float_dtype({{x, "input 0"}, {bias, "bias"}});
        require_shape(bias, {s.k}, "bias");
    }
    if (y.numel() == 0) return;
    const cudaStream_t stream = stream_of(call.args->stream);
    const cudnnHandle_t h = dnn_handle(stream);
    const Scaling one_zero(dtype);
    if (s.c == 0) {  // no input channels: the bias alone (or zeros)
        check_cuda(cudaMemsetAsync(y.view->data, 0, size_t(y.numel()) * dtype_bytes(dtype), stream), "conv2d output");
        if (s.bias) add_bias(h, OutputDescriptors(s, dtype), one_zero, bias.view->data, y.view->data);
        return;
    }
    ConvPlan& plan = conv_plan(s, dtype);
    const ConvDescriptors& d = plan.d;
    const auto& choice = plan.forward.ensure("forward convolution", [&](auto* perf, int* count) {
        check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.weight.get(), d.conv.get(), d.y.get(),
                                                           kMaxAlgorithms, count, perf),
                    "conv2d forward heuristics");
    });
    Scratch workspace(choice.workspace, stream);
    check_cudnn(cudnnConvolutionForward(h, one_zero.one(), d.x.get(), x.view->data, d.weight.get(), weight.view->data,
                                        d.conv.get(), choice.algo, workspace.get(), choice.workspace, one_zero.zero(),
                                        d.y.get(), y.view->data),
                "cudnnConvolutionForward");
    if (s.bias) add_bias(h, d, one_zero, bias.view->data, y.view->data);
}

void conv2d_backward(const BackwardCall& call) {
    plugin::require(call.num_inputs() == 1, "conv2d expects 1 input, got " + std::to_string(call.num_inputs()));
    const auto attrs = call.attrs();
    require_params(call.num_params(), attrs.get_bool("bias", true));
    const Tensor gx = call.grad_input(0), gw = call.grad_param(0);
    const Tensor gb = call.num_params() > 1 ? call.grad_param(1) : Tensor{};
    if (!gx.present() && !gw.present() && !gb.present()) return;
    const Tensor x = call.input(0), weight = call.param(0), gy = call.grad_output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(weight, "weight");
    require_cuda_tensor(gy, "grad output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {weight, "weight"}, {gy, "grad output"}});
    const ConvShape s = conv_shape(x, weight, attrs);
    require_shape(gy, s.y(), "grad output");
    for (const auto& [g, want, what] : {std::tuple{gx, s.x(), "grad input 0"}, std::tuple{gw, s.weight(), "grad weight"},
                                        std::tuple{gb, Dims{s.k}, "grad bias"}}) {
        if (!g.present()) continue;
        require_cuda_tensor(g, what);
        common_float_dtype({{x, "input 0"}, {g, what}});
        require_shape(g, want, what);
    }
    const cudaStream_t stream = stream_of(call.args->stream);
    const size_t width = dtype_bytes(dtype);
    if (gy.numel() == 0 || s.c == 0) {  // nothing flows back: every gradient is zero
        for (const Tensor& g : {gx, gw, gb})
            if (g.present() && g.numel() > 0)
                check_cuda(cudaMemsetAsync(g.view->data, 0, size_t(g.numel()) * width, stream), "conv2d gradient");
        return;
    }
    const cudnnHandle_t h = dnn_handle(stream);
    const Scaling one_zero(dtype);
    ConvPlan& plan = conv_plan(s, dtype);
    const ConvDescriptors& d = plan.d;
    if (gx.present()) {
        const auto& choice = plan.backward_data.ensure("backward-data convolution", [&](auto* perf, int* count) {
            check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.weight.get(), d.y.get(), d.conv.get(),
                                                                    d.x.get(), kMaxAlgorithms, count, perf),
                        "conv2d backward-data heuristics");
        });
        Scratch workspace(choice.workspace, stream);
        check_cudnn(cudnnConvolutionBackwardData(h, one_zero.one(), d.weight.get(), weight.view->data, d.y.get(),
                                                 gy.view->data, d.conv.get(), choice.algo, workspace.get(),
                                                 choice.workspace, one_zero.zero(), d.x.get(), gx.view->data),
                    "cudnnConvolutionBackwardData");
    }
    if (gw.present()) {
        const auto& choice = plan.backward_filter.ensure("backward-filter convolution", [&](auto* perf, int* count) {
            check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(),
                                                                      d.weight.get(), kMaxAlgorithms, count, perf),
                        "conv2d backward-filter heuristics");
        });
        Scratch workspace(choice.workspace, stream);
        check_cudnn(cudnnConvolutionBackwardFilter(h, one_zero.one(), d.x.get(), x.view->data, d.y.get(),
                                                   gy.view->data, d.conv.get(), choice.algo, workspace.get(),
                                                   choice.workspace, one_zero.zero(), d.weight.get(), gw.view->data),
                    "cudnnConvolutionBackwardFilter");
    }
    if (gb.present())
        check_cudnn(cudnnConvolutionBackwardBias(h, one_zero.one(), d.y.get(), gy.view->data, one_zero.zero(),
                                                 d.bias.get(), gb.view->data),
                    "cudnnConvolutionBackwardBias");
}


// ---- pooling -----------------------------------------------------------------------------------

namespace {

/// A pooling's sizes from x [N, C, H, W] and the attributes (INVALID_ARGUMENT names what is wrong).
struct PoolShape {
    int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
    std::array<int64_t, 2> kernel{}, stride{}, padding{};
    Dims x() const { return {n, c, h, w}; }
    Dims y() const { return {n, c, oh, ow}; }
};

PoolShape pool_shape(const Tensor& x, const plugin::Attributes& attrs, bool padded, const char* op) {
    PoolShape s;
    plugin::require(x.rank() == 4, std::string(op) + " input must be [N, C, H, W], got " + dims_text(dims_of(x)));
    s.n = x.dim(0), s.c = x.dim(1), s.h = x.dim(2), s.w = x.dim(3);
    plugin::require(attrs.has("kernel_size"), std::string(op) + " needs attribute 'kernel_size'");
    s.kernel = pair_attr(attrs, "kernel_size", {1, 1}, op);
    s.stride = attrs.has("stride") ? pair_attr(attrs, "stride", {1, 1}, op) : s.kernel;
    s.padding = padded ? pair_attr(attrs, "padding", {0, 0}, op) : std::array<int64_t, 2>{0, 0};
    const bool ceil = padded && attrs.get_bool("ceil_mode", false);
    for (int i = 0; i < 2; ++i) {
        const int64_t k = s.kernel[i], st = s.stride[i], p = s.padding[i], size = i == 0 ? s.h : s.w;
        plugin::require(k >= 1 && st >= 1 && p >= 0 && 2 * p <= k,
                        std::string(op) + " needs kernel_size >= 1, stride >= 1 and 0 <= padding <= kernel_size / 2");
        plugin::require(size + 2 * p >= k, std::string(op) + " window " + std::to_string(k) +
                                               " is larger than the padded input " + std::to_string(size + 2 * p));
        const int64_t floor_out = (size + 2 * p - k) / st + 1;
        int64_t out = (size + 2 * p - k + (ceil ? st - 1 : 0)) / st + 1;
        if (ceil && (out - 1) * st >= size + p) --out;  // a last window starting in the right padding is dropped
        if (out != floor_out)
            throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                              std::string(op) + " with ceil_mode adds a window past the padding here; cuDNN pooling has "
                                                "no such window");
        (i == 0 ? s.oh : s.ow) = out;
    }
    return s;
}

/// The descriptors of one pooling: x, y and the window.
struct PoolDescriptors {
    TensorDescriptor x, y;
    PoolingDescriptor pool;

    PoolDescriptors(const PoolShape& s, capsule_dtype dtype, cudnnPoolingMode_t mode) {
        const auto type = data_type(dtype);
        check_cudnn(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NCHW, type, as_int(s.n, "batch"),
                                               as_int(s.c, "channels"), as_int(s.h, "height"), as_int(s.w, "width")),
                    "pooling input descriptor");
        check_cudnn(cudnnSetTensor4dDescriptor(y.get(), CUDNN_TENSOR_NCHW, type, as_int(s.n, "batch"),
                                               as_int(s.c, "channels"), as_int(s.oh, "output height"),
                                               as_int(s.ow, "output width")),
                    "pooling output descriptor");
        check_cudnn(cudnnSetPooling2dDescriptor(pool.get(), mode, CUDNN_PROPAGATE_NAN, as_int(s.kernel[0], "kernel"),
                                                as_int(s.kernel[1], "kernel"), as_int(s.padding[0], "padding"),
                                                as_int(s.padding[1], "padding"), as_int(s.stride[0], "stride"),
                                                as_int(s.stride[1], "stride")),
                    "pooling descriptor");
    }
};

enum class Pool { max, avg };

cudnnPoolingMode_t pooling_mode(Pool kind, const plugin::Attributes& attrs, bool padded) {
    if (kind == Pool::max) return CUDNN_POOLING_MAX_DETERMINISTIC;
    return !padded || attrs.get_bool("count_include_pad", true) ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                               : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
}

template <Pool Kind, bool Padded>
void pool_forward(const ForwardCall& call, const char* op) {
    plugin::require(call.num_inputs() == 1 && call.num_params() == 0,
                    std::string(op) + " expects 1 input and no parameters");
    const Tensor x = call.input(0), y = call.output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(y, "output");
    const auto dtype = common_float_dtype({{x, "input 0"}, {y, "output"}});
    const auto attrs = call.attrs();
    const PoolShape s = pool_shape(x, attrs, Padded, op);
    require_shape(y, s.y(), "output");
    if (y.numel() == 0) return;
    const cudaStream_t stream = stream_of(call.args->stream);
    const Scaling one_zero(dtype);
    const PoolDescriptors d(s, dtype, pooling_mode(Kind, attrs, Padded));
    check_cudnn(cudnnPoolingForward(dnn_handle(stream), d.pool.get(), one_zero.one(), d.x.get(), x.view->data,
                                    one_zero.zero(), d.y.get(), y.view->data),
                "cudnnPoolingForward");
}

template <Pool Kind, bool Padded>
void pool_backward(const BackwardCall& call, const char* op) {
    plugin::require(call.num_inputs() == 1 && call.num_params() == 0,
                    std::string(op) + " expects 1 input and no parameters");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    const Tensor x = call.input(0), gy = call.grad_output(0);
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(gy, "grad output");
    require_cuda_tensor(gx, "grad input 0");
    const auto dtype = common_float_dtype({{x, "input 0"}, {gy, "grad output"}, {gx, "grad input 0"}});
    const auto attrs = call.attrs();
    const PoolShape s = pool_shape(x, attrs, Padded, op);
    require_shape(gy, s.y(), "grad output");
    require_shape(gx, s.x(), "grad input 0");
    const cudaStream_t stream = stream_of(call.args->stream);
    if (gy.numel() == 0) {  // an empty output: nothing flows back
        if (gx.numel() > 0)
            check_cuda(cudaMemsetAsync(gx.view->data, 0, size_t(gx.numel()) * dtype_bytes(dtype), stream),
                       std::string(op) + " gradient");
        return;
    }
    const cudnnHandle_t h = dnn_handle(stream);
    const Scaling one_zero(dtype);
    const PoolDescriptors d(s, dtype, pooling_mode(Kind, attrs, Padded));
    // cuDNN's backward reads the forward result: the host's when it passed it, else computed again.
    const Tensor y = call.args->outputs && call.args->num_outputs == 1 ? call.output(0) : Tensor{};
    const bool have_y = y.present() && dims_of(y) == s.y() && y.dtype() == dtype;
    Scratch recomputed(have_y ? 0 : size_t(gy.numel()) * dtype_bytes(dtype), stream);
    const void* y_data = have_y ? y.view->data : recomputed.get();
    if (!have_y)
        check_cudnn(cudnnPoolingForward(h, d.pool.get(), one_zero.one(), d.x.get(), x.view->data, one_zero.zero(),
                                        d.y.get(), recomputed.get()),
                    "cudnnPoolingForward");
    check_cudnn(cudnnPoolingBackward(h, d.pool.get(), one_zero.one(), d.y.get(), y_data, d.y.get(), gy.view->data,
                                     d.x.get(), x.view->data, one_zero.zero(), d.x.get(), gx.view->data),
                "cudnnPoolingBackward");
}

}  // namespace

void max_pool2d_forward(const ForwardCall& c) { pool_forward<Pool::max, false>(c, "max_pool2d"); }
void max_pool2d_backward(const BackwardCall& c) { pool_backward<Pool::max, false>(c, "max_pool2d"); }
void max_pool2d_pad_forward(const ForwardCall& c) { pool_forward<Pool::max, true>(c, "max_pool2d_pad"); }
void max_pool2d_pad_backward(const BackwardCall& c) { pool_backward<Pool::max, true>(c, "max_pool2d_pad"); }
void avg_pool2d_forward(const ForwardCall& c) { pool_forward<Pool::avg, false>(c, "avg_pool2d"); }
void avg_pool2d_backward(const BackwardCall& c) { pool_backward<Pool::avg, false>(c, "avg_pool2d"); }
void avg_pool2d_pad_forward(const ForwardCall& c) { pool_forward<Pool::avg, true>(c, "avg_pool2d_pad"); }
void avg_pool2d_pad_backward(const BackwardCall& c) { pool_backward<Pool::avg, true>(c, "avg_pool2d_pad"); }

}  // namespace capsule::cuda
