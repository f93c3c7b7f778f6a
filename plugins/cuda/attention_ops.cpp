// ABI glue for native_cuda.flash_attention: scaled_dot_product_attention (docs/ops.md; the
// reference capsule plugins/cpu/reference/attention.cpp gives the same semantics) on the fused
// kernels of flash_attention.cu.
//   inputs: query [..., L, E], key [..., S, E], value [..., S, Ev], optional mask broadcastable to
//   [..., L, S] (bool: true = attend; float of the query's dtype: added to the scores);
//   attributes: is_causal (default false), scale (default 1/√E; 1 when E = 0).
// float32 and float64; max(E, Ev) up to kFlashMaxHeadDim (128), larger heads are refused as
// UNSUPPORTED; at most flash::kMaxBatchRank leading dimensions when a mask is given.
#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_common.hpp"
#include "flash_attention.hpp"
#include "kernels.hpp"

namespace capsule::cuda {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

/// Broadcast strides of the mask `m` over the scores [batch dims..., L, S].
void mask_strides(flash::Geometry& g, const Dims& scores, const Dims& mask) {
    plugin::require(mask.size() <= scores.size(), std::string(kOp) + ": mask " + dims_text(mask) +
                                                      " does not broadcast to the scores " + dims_text(scores));
    const int r = int(scores.size());
    Dims strides(scores.size(), 0);
    int64_t stride = 1;
    for (int d = r - 1; d >= r - int(mask.size()); --d) {
        const int64_t size = mask[size_t(d - (r - int(mask.size())))];
        plugin::require(size == scores[size_t(d)] || size == 1,
                        std::string(kOp) + ": mask " + dims_text(mask) + " does not broadcast to the scores " +
                            dims_text(scores));
        strides[size_t(d)] = size == 1 ? 0 : stride;
        stride *= size;
    }
    g.mask_row_stride = strides[size_t(r - 2)];
    g.mask_col_stride = strides[size_t(r - 1)];
    for (int d = 0; d < g.batch_rank; ++d) g.mask_batch_strides[d] = strides[size_t(d)];
}

/// The geometry of a call (checked), and its dtype.
template <typename Call>
flash::Geometry geometry_of(const Call& call, capsule_dtype& dtype) {
    plugin::require(call.num_inputs() == 3 || call.num_inputs() == 4,
                    std::string(kOp) + " expects 3 or 4 inputs, got " + std::to_string(call.num_inputs()));
    plugin::require(call.num_params() == 0, std::string(kOp) + " takes no parameters");
    const Tensor q = call.input(0), k = call.input(1), v = call.input(2);
    require_cuda_tensor(q, "query");
    require_cuda_tensor(k, "key");
    require_cuda_tensor(v, "value");
    dtype = common_float_dtype({{q, "query"}, {k, "key"}, {v, "value"}});
    const Dims qd = dims_of(q), kd = dims_of(k), vd = dims_of(v);
    const size_t r = qd.size();
    plugin::require(r >= 2 && kd.size() == r && vd.size() == r,
                    std::string(kOp) + ": query, key and value must have the same rank >= 2, got " +
                        dims_text(qd) + ", " + dims_text(kd) + ", " + dims_text(vd));
    flash::Geometry g;
    const Dims batch_dims(qd.begin(), qd.end() - 2);
    plugin::require(Dims(kd.begin(), kd.end() - 2) == batch_dims && Dims(vd.begin(), vd.end() - 2) == batch_dims,
                    std::string(kOp) + ": query, key and value must have the same batch dimensions, got " +
                        dims_text(qd) + ", " + dims_text(kd) + ", " + dims_text(vd));
    g.batch = element_count(batch_dims);
    g.L = qd[r - 2];
    g.E = qd[r - 1];
    g.S = kd[r - 2];
    g.Ev = vd[r - 1];
    plugin::require(kd[r - 1] == g.E, std::string(kOp) + ": query and key embeddings differ (" +
                                          dims_text(qd) + " and " + dims_text(kd) + ")");
    plugin::require(vd[r - 2] == g.S, std::string(kOp) + ": key and value lengths differ (" +
                                          dims_text(kd) + " and " + dims_text(vd) + ")");
    if (std::max(g.E, g.Ev) > kFlashMaxHeadDim)
        throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                          std::string(kOp) + ": native_cuda.flash_attention keeps a head of at most " +
                              std::to_string(kFlashMaxHeadDim) + " values per row in registers; query " +
                              dims_text(qd) + " and value " + dims_text(vd) + " have " +
                              std::to_string(std::max(g.E, g.Ev)));
    const auto attrs = call.attrs();
    g.causal = attrs.get_bool("is_causal", false);
    if (attrs.has("scale")) {
        g.scale = attrs.get_float("scale", 1.0);
        plugin::require(std::isfinite(g.scale), std::string(kOp) + ": attribute 'scale' must be finite");
    } else {
        g.scale = g.E > 0 ? 1.0 / std::sqrt(double(g.E)) : 1.0;
    }
    if (call.num_inputs() == 4) {
        plugin::require(!g.causal, std::string(kOp) + ": is_causal cannot be combined with a mask");
        const Tensor m = call.input(3);
        require_cuda_layout(m, "mask");
        const bool boolean = m.dtype() == CAPSULE_DTYPE_BOOL;
        plugin::require(boolean || m.dtype() == dtype,
                        std::string(kOp) + ": mask must be bool or " + dtype_name(dtype) + ", got " +
                            dtype_name(m.dtype()));
        g.mask = boolean ? flash::MaskKind::boolean : flash::MaskKind::additive;
        if (batch_dims.size() > size_t(flash::kMaxBatchRank))
            throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                              std::string(kOp) + ": a mask over more than " +
                                  std::to_string(flash::kMaxBatchRank) + " leading dimensions (query " +
                                  dims_text(qd) + ")");
        g.batch_rank = int(batch_dims.size());
        for (int d = 0; d < g.batch_rank; ++d) g.batch_sizes[d] = batch_dims[size_t(d)];
        Dims scores = batch_dims;
        scores.insert(scores.end(), {g.L, g.S});
        mask_strides(g, scores, dims_of(m));
    }
    return g;
}

/// The shape of the output (and of the gradient of the output): [..., L, Ev].
Dims output_dims(const Tensor& q, const flash::Geometry& g) {
    Dims out = dims_of(q);
    out.back() = g.Ev;
    return out;
}

/// The data of a wanted gradient of `like` (checked), else NULL.
void* gradient(const Tensor& grad, const Tensor& like, capsule_dtype dtype, const std::string& what) {
    if (!grad.present()) return nullptr;
    require_cuda_tensor(grad, what);
    plugin::require(grad.dtype() == dtype, what + " has dtype " + dtype_name(grad.dtype()) + ", expected " +
                                               dtype_name(dtype));
    require_shape(grad, dims_of(like), what);
    return grad.view->data;
}

}  // namespace

void flash_attention_forward(const ForwardCall& call) {
    FlashAttentionArgs a;
    a.geometry = geometry_of(call, a.dtype);
    const Tensor q = call.input(0), out = call.output(0);
    require_cuda_tensor(out, "output");
    plugin::require(out.dtype() == a.dtype, "output has dtype " + std::string(dtype_name(out.dtype())) +
                                                ", expected " + dtype_name(a.dtype));
    require_shape(out, output_dims(q, a.geometry), "output");
    a.q = q.view->data;
    a.k = call.input(1).view->data;
    a.v = call.input(2).view->data;
    a.mask = call.num_inputs() == 4 ? call.input(3).view->data : nullptr;
    a.out = out.view->data;
    check_cuda(launch_flash_attention_forward(a, stream_of(call.args->stream)),
               "launching native_cuda.flash_attention");
}

void flash_attention_backward(const BackwardCall& call) {
    FlashAttentionArgs a;
    a.geometry = geometry_of(call, a.dtype);
    const flash::Geometry& g = a.geometry;
    const Tensor q = call.input(0), k = call.input(1), v = call.input(2), gout = call.grad_output(0);
    require_cuda_tensor(gout, "grad output");
    plugin::require(gout.dtype() == a.dtype, "grad output has dtype " + std::string(dtype_name(gout.dtype())) +
                                                 ", expected " + dtype_name(a.dtype));
    require_shape(gout, output_dims(q, g), "grad output");
    a.q = q.view->data;
    a.k = k.view->data;
    a.v = v.view->data;
    a.dout = gout.view->data;
    a.dq = gradient(call.grad_input(0), q, a.dtype, "grad query");
    a.dk = gradient(call.grad_input(1), k, a.dtype, "grad key");
    a.dv = gradient(call.grad_input(2), v, a.dtype, "grad value");
    const cudaStream_t stream = stream_of(call.args->stream);
    if (call.num_inputs() == 4) {
        const Tensor m = call.input(3);
        a.mask = m.view->data;
        // Only an additive mask has a gradient; its terms are added atomically onto zeros.
        if (g.mask == flash::MaskKind::additive)
            a.dmask = gradient(call.grad_input(3), m, a.dtype, "grad mask");
        if (a.dmask)
            check_cuda(cudaMemsetAsync(a.dmask, 0, size_t(m.numel()) * dtype_bytes(a.dtype), stream),
                       "clearing the mask's gradient");
    }
    if (!a.dq && !a.dk && !a.dv && !a.dmask) return;
    const size_t row_stats = size_t(g.batch * g.L) * dtype_bytes(a.dtype);
    Scratch lse(row_stats, stream), delta(row_stats, stream);
    a.lse = lse.get();
    a.delta = delta.get();
    check_cuda(launch_flash_attention_backward(a, stream), "launching native_cuda.flash_attention's backward");
}

}  // namespace capsule::cuda
