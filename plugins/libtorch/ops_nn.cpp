// Network-layer capsules of the LibTorch plugin: softmax, reductions, matrix products, losses,
// normalisation, convolution, pooling, attention and the operator-learning layers, each as the
// PyTorch function docs/ops.md names (torch.nn.functional unless said otherwise).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Context.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "ops.hpp"

namespace capsule::libtorch {

namespace {
const at::Tensor& x0(const OpArgs& a) { return a.inputs.at(0); }

/// The reduced axes of a reduce_* node: `axes` normalised, or every axis when absent.
std::vector<int64_t> reduced_axes(const OpArgs& a) {
    const int64_t rank = x0(a).dim();
    std::vector<int64_t> axes = a.attrs.get_ints("axes", {});
    if (!a.attrs.has("axes"))
        for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    for (auto& axis : axes) {
        if (axis < -std::max<int64_t>(rank, 1) || axis >= std::max<int64_t>(rank, 1))
            plugin::fail("attribute 'axes' entry " + std::to_string(axis) + " out of range for rank " +
                         std::to_string(rank));
        if (axis < 0) axis += rank;
    }
    return axes;
}

/// torch.amax / torch.amin whose gradient is split evenly among the elements equal to the result
/// and is 0 in a group whose result is NaN (no element equals it): ATen's amax_backward divides
/// by that count of 0 and gives NaN for the whole group.
struct Extremum : torch::autograd::Function<Extremum> {
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                              std::vector<int64_t> dims, bool keepdim, bool is_max) {
        const at::Tensor y = is_max ? at::amax(x, dims, keepdim) : at::amin(x, dims, keepdim);
        at::Tensor kept = y;
        if (!keepdim) {
            std::sort(dims.begin(), dims.end());
            for (auto d : dims) kept = kept.unsqueeze(d);
        }
        const at::Tensor hits = (x == kept).to(x.scalar_type());
        ctx->save_for_backward({hits / at::clamp_min(hits.sum(dims, /*keepdim=*/true), 1.0)});
        ctx->saved_data["dims"] = dims;
        ctx->saved_data["keepdim"] = keepdim;
        return y;
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const at::Tensor share = ctx->get_saved_variables()[0];
        at::Tensor g = grads[0];
        if (!ctx->saved_data["keepdim"].toBool()) {
            std::vector<int64_t> dims = ctx->saved_data["dims"].toIntVector();
            std::sort(dims.begin(), dims.end());
            for (auto d : dims) g = g.unsqueeze(d);
        }
        return {g * share, at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

/// amax/amin, with ONNX's value for an empty group (-inf for max, +inf for min: torch refuses).
at::Tensor extremum(const OpArgs& a, bool is_max) {
    const std::vector<int64_t> axes = reduced_axes(a);
    const bool keepdims = a.attrs.get_bool("keepdims", false);
    const at::Tensor& x = x0(a);
    if (x.dim() == 0) return x.clone();
    int64_t group = 1;
    for (auto axis : axes) group *= x.size(axis);
    if (group == 0) {
        std::vector<int64_t> shape;
        for (int64_t d = 0; d < x.dim(); ++d) {
            const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
            if (!reduced) shape.push_back(x.size(d));
            else if (keepdims) shape.push_back(1);
        }
        const double inf = std::numeric_limits<double>::infinity();
        return at::full(shape, is_max ? -inf : inf, x.options());
    }
    return Extremum::apply(x, axes, keepdims, is_max);
}

/// Pooling windows (docs/ops.md, Pooling): kernel, stride (default the kernel) and padding.
struct Window {
    std::vector<int64_t> kernel, stride, padding;
};
Window window(const OpArgs& a, std::size_t dims) {
    Window w;
    w.kernel = spatial(a.attrs, "kernel_size", dims, 1);
    w.stride = a.attrs.has("stride") ? spatial(a.attrs, "stride", dims, 1) : w.kernel;
    w.padding = spatial(a.attrs, "padding", dims, 0);
    return w;
}

/// The common convolution attributes (docs/ops.md, Convolution) for `dims` spatial dimensions.
struct ConvAttrs {
    std::vector<int64_t> stride, padding, dilation, output_padding;
    int64_t groups;
};
ConvAttrs conv_attrs(const OpArgs& a, std::size_t dims) {
    return {spatial(a.attrs, "stride", dims, 1), spatial(a.attrs, "padding", dims, 0),
            spatial(a.attrs, "dilation", dims, 1), spatial(a.attrs, "output_padding", dims, 0),
            a.attrs.get_int("groups", 1)};
}

/// The optional bias parameter of a convolution or linear node (`bias` attribute, default true).
c10::optional<at::Tensor> bias_of(const OpArgs& a) {
    if (!a.attrs.get_bool("bias", true)) return c10::nullopt;
    return a.params.at(1);
}

/// x in the dtype its statistics are computed in: float64 (a float32 x is widened, so that a
/// large mean does not cancel the variance, as the reference capsule computes them).
at::Tensor widened(const at::Tensor& x) { return x.to(at::kDouble); }

/// (x − mean)/√(var + eps) over `dims` with biased variance, two-pass, in float64.
at::Tensor normalized(const at::Tensor& x, at::IntArrayRef dims, double eps) {
    const at::Tensor xd = widened(x);
    const at::Tensor centred = xd - xd.mean(dims, /*keepdim=*/true);
    return centred * at::rsqrt((centred * centred).mean(dims, true) + eps);
}

/// torch.nn.functional.batch_norm (channel axis 1) written out: ATen's kernel folds the running
/// statistics into a scale and shift (x·α + β), which cancels for inputs far from 0, and in
/// training mode updates the running statistics in place (a forward kernel must not write its
/// parameters: the host's optimizer owns them).
at::Tensor batch_norm(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    const bool affine = a.attrs.get_bool("affine", true);
    const std::size_t stats = affine ? 2 : 0;
    const double eps = a.attrs.get_float("eps", 1e-5);
    std::vector<int64_t> channel_shape(x.dim(), 1);
    channel_shape[1] = x.size(1);
    at::Tensor y;
    if (a.attrs.get_bool("training", false)) {
        std::vector<int64_t> dims{0};
        for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
        y = normalized(x, dims, eps);
    } else {
        // Running statistics are buffers, not trained: no gradient (the reference gives 0).
        const at::Tensor mean = widened(a.params.at(stats).detach()).reshape(channel_shape);
        const at::Tensor var = widened(a.params.at(stats + 1).detach()).reshape(channel_shape);
        y = (widened(x) - mean) * at::rsqrt(var + eps);
    }
    if (affine) y = y * widened(a.params.at(0)).reshape(channel_shape) + widened(a.params.at(1)).reshape(channel_shape);
    return y.to(x.scalar_type());
}

/// Log-sum-exp pooling over windows already unfolded into the trailing `dims` axes:
/// m + T·log Σ exp((x − m)/T) with m the window maximum, so that x/T never overflows (3e38/0.5);
/// a window with a NaN gives NaN, one of −inf gives −inf, one with +inf gives +inf.
at::Tensor smooth_max(const at::Tensor& windows, int64_t dims, double temperature) {
    const at::Tensor flat = windows.flatten(windows.dim() - dims, windows.dim() - 1);
    const at::Tensor m = at::amax(flat, {-1}, /*keepdim=*/true).detach();
    const at::Tensor shift = at::where(at::isfinite(m), m, at::zeros_like(m));
    const at::Tensor y = at::log(at::sum(at::exp((flat - shift) / temperature), {-1})) * temperature + shift.squeeze(-1);
    return at::where(at::isnan(flat).any(-1), at::full_like(y, NAN), y);
}
}  // namespace

at::Tensor op_softmax(const OpArgs& a) { return at::softmax(x0(a), axis_of(a.attrs, "axis", x0(a).dim(), -1)); }
at::Tensor op_log_softmax(const OpArgs& a) {
    return at::log_softmax(x0(a), axis_of(a.attrs, "axis", x0(a).dim(), -1));
}

// Sums and means accumulate in float64, as the reference capsules do: a float32 running sum
// overflows to inf on [3e38, 3e38, -3e38], whose sum is finite.
at::Tensor op_sum(const OpArgs& a) { return at::sum(x0(a), at::kDouble).to(x0(a).scalar_type()); }
at::Tensor op_reduce_sum(const OpArgs& a) {
    return at::sum(x0(a), reduced_axes(a), a.attrs.get_bool("keepdims", false), at::kDouble).to(x0(a).scalar_type());
}
at::Tensor op_reduce_mean(const OpArgs& a) {
    return at::mean(x0(a).to(at::kDouble), reduced_axes(a), a.attrs.get_bool("keepdims", false)).to(x0(a).scalar_type());
}
at::Tensor op_reduce_max(const OpArgs& a) { return extremum(a, true); }
at::Tensor op_reduce_min(const OpArgs& a) { return extremum(a, false); }
// Accumulated in double (ONNX ReduceProd, docs/ops.md), one axis at a time.
at::Tensor op_reduce_prod(const OpArgs& a) {
    std::vector<int64_t> axes = reduced_axes(a);
    std::sort(axes.rbegin(), axes.rend());
    const bool keepdims = a.attrs.get_bool("keepdims", false);
    at::Tensor r = x0(a).to(at::kDouble);
    for (auto axis : axes) r = at::prod(r, axis, keepdims);
    return r.to(x0(a).scalar_type());
}

// ONNX ArgMax / ArgMin; with select_last_index the search runs on the flipped axis.
static at::Tensor arg_extremum(const OpArgs& a, bool is_max) {
    const at::Tensor& x = x0(a);
    const bool keepdims = a.attrs.get_bool("keepdims", true);
    if (x.dim() == 0) return at::zeros({}, at::kLong);
    const int64_t axis = axis_of(a.attrs, "axis", x.dim(), 0);
    if (x.size(axis) == 0) plugin::fail("argmax/argmin: axis " + std::to_string(axis) + " has size 0");
    if (!a.attrs.get_bool("select_last_index", false))
        return is_max ? at::argmax(x, axis, keepdims) : at::argmin(x, axis, keepdims);
    const at::Tensor flipped = x.flip({axis});
    const at::Tensor index = is_max ? at::argmax(flipped, axis, keepdims) : at::argmin(flipped, axis, keepdims);
    return (x.size(axis) - 1) - index;
}
at::Tensor op_argmax(const OpArgs& a) { return arg_extremum(a, true); }
at::Tensor op_argmin(const OpArgs& a) { return arg_extremum(a, false); }

// ONNX TopK's indices: a stable sort along `axis` (equal values in index order, NaN the largest,
// as torch.sort) cut to the first k.
at::Tensor op_top_k(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    if (x.dim() == 0) plugin::fail("top_k: input is a scalar; top_k needs an axis");
    const int64_t axis = axis_of(a.attrs, "axis", x.dim(), -1);
    const int64_t k = a.attrs.get_int("k", -1);
    if (k < 0 || k > x.size(axis))
        plugin::fail("top_k: k " + std::to_string(k) + " is outside [0, " + std::to_string(x.size(axis)) + "]");
    const bool largest = a.attrs.get_bool("largest", true);
    return std::get<1>(at::sort(x, /*stable=*/true, axis, /*descending=*/largest)).narrow(axis, 0, k).contiguous();
}

// ONNX NonZero: torch.nonzero(x).T (NaN counts as non-zero), in the catalog's upper bound
// [rank, numel] with the unused columns -1 (the graph's output_lengths cut it).
at::Tensor op_non_zero(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    if (x.dim() == 0) plugin::fail("non_zero: input is a scalar; non_zero needs rank >= 1");
    const at::Tensor found = at::nonzero(x).t();
    at::Tensor out = at::full({x.dim(), x.numel()}, -1, at::kLong);
    out.narrow(1, 0, found.size(1)).copy_(found);
    return out;
}

// ONNX NonMaxSuppression as ONNX Runtime computes it (torchvision's nms is the same greedy loop
// over one class): pairwise IoU of each batch's boxes with ATen (corners, in double), then per
// class the candidates above score_threshold by descending score (ties by index, NaN last), each
// kept unless its IoU with a kept box exceeds iou_threshold. Rows [batch, class, box] in the
// catalog's upper bound, the unused ones -1.
at::Tensor op_non_max_suppression(const OpArgs& a) {
    const at::Tensor boxes = a.inputs.at(0).to(at::kDouble), scores = a.inputs.at(1).to(at::kDouble).contiguous();
    const int64_t batches = boxes.size(0), n = boxes.size(1), classes = scores.size(1);
    const int64_t per_class = a.attrs.get_int("max_output_boxes_per_class", 0);
    if (per_class < 0) plugin::fail("non_max_suppression: max_output_boxes_per_class is negative");
    const double iou_threshold = a.attrs.get_float("iou_threshold", 0.0);
    const bool has_threshold = a.attrs.has("score_threshold");
    const double score_threshold = a.attrs.get_float("score_threshold", 0.0);
    at::Tensor y0, x0c, y1, x1;
    if (a.attrs.get_int("center_point_box", 0) != 0) {
        const at::Tensor xc = boxes.select(2, 0), yc = boxes.select(2, 1), w = boxes.select(2, 2), h = boxes.select(2, 3);
        y0 = yc - h / 2, x0c = xc - w / 2, y1 = yc + h / 2, x1 = xc + w / 2;
    } else {
        y0 = at::minimum(boxes.select(2, 0), boxes.select(2, 2)), y1 = at::maximum(boxes.select(2, 0), boxes.select(2, 2));
        x0c = at::minimum(boxes.select(2, 1), boxes.select(2, 3)), x1 = at::maximum(boxes.select(2, 1), boxes.select(2, 3));
    }
    const at::Tensor area = (x1 - x0c) * (y1 - y0);  // [B, N]
    const at::Tensor iw = at::minimum(x1.unsqueeze(2), x1.unsqueeze(1)) - at::maximum(x0c.unsqueeze(2), x0c.unsqueeze(1));
    const at::Tensor ih = at::minimum(y1.unsqueeze(2), y1.unsqueeze(1)) - at::maximum(y0.unsqueeze(2), y0.unsqueeze(1));
    const at::Tensor inter = iw.clamp_min(0) * ih.clamp_min(0);  // [B, N, N]
    const at::Tensor uni = area.unsqueeze(2) + area.unsqueeze(1) - inter;
    const at::Tensor valid = (iw > 0) & (ih > 0) & (inter > 0) & (area.unsqueeze(2) > 0) & (area.unsqueeze(1) > 0) & (uni > 0);
    const at::Tensor suppress = (valid & (inter / uni > iou_threshold)).contiguous();
    const auto sup = suppress.accessor<bool, 3>();
    const auto sc = scores.accessor<double, 3>();
    at::Tensor out = at::full({batches * classes * std::min(per_class, n), 3}, -1, at::kLong);
    auto rows = out.accessor<int64_t, 2>();
    int64_t written = 0;
    for (int64_t b = 0; b < batches; ++b)
        for (int64_t c = 0; c < classes; ++c) {
            std::vector<int64_t> order;
            for (int64_t i = 0; i < n; ++i)
                if (!has_threshold || sc[b][c][i] > score_threshold) order.push_back(i);
            std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
                const double si = sc[b][c][i], sj = sc[b][c][j];
                if (std::isnan(si) || std::isnan(sj)) return !std::isnan(si) && std::isnan(sj);
                return si > sj;
            });
            std::vector<int64_t> kept;
            for (int64_t i : order) {
                if (static_cast<int64_t>(kept.size()) >= per_class) break;
                if (std::any_of(kept.begin(), kept.end(), [&](int64_t k) { return sup[b][k][i]; })) continue;
                kept.push_back(i);
                rows[written][0] = b, rows[written][1] = c, rows[written][2] = i;
                ++written;
            }
        }
    return out;
}

// ONNX Det / torch.linalg.det over the last two axes, with its own backward: LibTorch 1.13's
// linalg_det backward gives 0 at a singular matrix, where Jacobi's formula, d det / dx = adj(x)ᵀ,
// gives the cofactors (the conformance case det/batch_with_singular). adj(x)ᵀ is taken from the
// SVD x = U·diag(s)·Vᵀ as det(U)·det(V)·U·diag(Π_{j≠i} s_j)·Vᵀ, defined for every x (as later
// PyTorch releases do).
struct Determinant : torch::autograd::Function<Determinant> {
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
        ctx->save_for_backward({x});
        return at::linalg_det(x);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const at::Tensor x = ctx->get_saved_variables()[0];
        const int64_t n = x.size(-1);
        if (n == 0) return {at::zeros_like(x)};
        const auto [u, s, vh] = at::linalg_svd(x, /*full_matrices=*/true);
        // Π_{j≠i} s_j as the products before and after i (no division by a zero s_i).
        const at::Tensor ones = at::ones_like(s.narrow(-1, 0, 1));
        const at::Tensor before = at::cat({ones, at::cumprod(s, -1).narrow(-1, 0, n - 1)}, -1);
        const at::Tensor after = at::cat({at::cumprod(s.flip(-1), -1).flip(-1).narrow(-1, 1, n - 1), ones}, -1);
        const at::Tensor sign = (at::linalg_det(u) * at::linalg_det(vh)).unsqueeze(-1).unsqueeze(-1);
        const at::Tensor adjugate_t = sign * at::matmul(u * (before * after).unsqueeze(-2), vh);
        return {grads[0].unsqueeze(-1).unsqueeze(-1) * adjugate_t};
    }
};
at::Tensor op_det(const OpArgs& a) { return Determinant::apply(x0(a)); }

// ONNX Hardmax: a one-hot of torch.argmax along `axis` (the first largest, NaN counting as the
// largest); piecewise constant, so its autograd gradient is 0.
at::Tensor op_hardmax(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    if (x.dim() == 0) return at::ones_like(x);
    const int64_t axis = axis_of(a.attrs, "axis", x.dim(), -1);
    if (x.numel() == 0) return at::zeros_like(x);
    return at::zeros_like(x).scatter(axis, at::argmax(x, axis, /*keepdim=*/true), 1.0);
}

// ONNX CumSum; floats accumulate in double, int64 wraps (docs/ops.md).
at::Tensor op_cumsum(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    const int64_t axis = axis_of(a.attrs, "axis", x.dim(), 0);
    const bool exclusive = a.attrs.get_bool("exclusive", false), reverse = a.attrs.get_bool("reverse", false);
    at::Tensor t = at::isFloatingType(x.scalar_type()) ? x.to(at::kDouble) : x;
    if (x.dim() == 0) return exclusive ? x * 0 : x.clone();  // x * 0 keeps the graph: gradient 0
    if (reverse) t = t.flip({axis});
    at::Tensor s = at::cumsum(t, axis);
    // Exclusive: the inclusive sums shifted by one (0 first), never "inclusive − x", which loses
    // small terms next to large ones and turns inf into NaN.
    if (exclusive && t.size(axis) > 0)
        s = at::cat({at::zeros_like(s.narrow(axis, 0, 1)), s.narrow(axis, 0, t.size(axis) - 1)}, axis);
    if (reverse) s = s.flip({axis});
    return s.to(x.scalar_type());
}

at::Tensor op_matmul(const OpArgs& a) { return at::matmul(x0(a), a.inputs.at(1)); }
at::Tensor op_bmm(const OpArgs& a) { return at::bmm(x0(a), a.inputs.at(1)); }
// In inference runs a float32 matrix of two rows or more goes through oneDNN's inner product
// (mkldnn_linear): Debian's LibTorch multiplies dense matrices with libblas.so.3, the reference
// BLAS unless an optimised one is installed, where LeNet-5's first linear at batch 64 takes
// 1.47 ms (0.07 ms in oneDNN). For one row the reference BLAS's matrix-vector product wins, as
// oneDNN's path copies the weights on every call (ResNet-18's fc: 0.25 against 0.45 ms).
at::Tensor op_linear(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    const at::Tensor& w = a.params.at(0);
    const c10::optional<at::Tensor> bias = bias_of(a);
    if (x.dim() == 2 && x.size(0) >= 2 && x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat &&
        x.numel() > 0 &&
        w.numel() > 0 && !at::GradMode::is_enabled() && at::hasMKLDNN())
        return at::mkldnn_linear(x.contiguous().to_mkldnn(), w.contiguous().to_mkldnn(),
                                 bias ? bias->contiguous().to_mkldnn() : at::Tensor())
            .to_dense();
    return at::linear(x, w, bias);
}

namespace {
int64_t reduction_of(const OpArgs& a) {
    const std::string r = a.attrs.get_string("reduction", "mean");
    if (r == "mean") return at::Reduction::Mean;
    if (r == "sum") return at::Reduction::Sum;
    if (r == "none") return at::Reduction::None;
    plugin::fail("attribute 'reduction' must be mean, sum or none, got '" + r + "'");
}
}  // namespace

at::Tensor op_mse_loss(const OpArgs& a) { return at::mse_loss(x0(a), a.inputs.at(1), reduction_of(a)); }

// torch.nn.functional.cross_entropy with class-index targets; a target outside [0, C) that is
// not ignore_index is an error (ATen's own check raises it).
at::Tensor op_cross_entropy(const OpArgs& a) {
    const at::Tensor& target = a.inputs.at(1);
    const int64_t classes = x0(a).size(1), ignore = a.attrs.get_int("ignore_index", -100);
    if (target.numel() > 0) {
        const at::Tensor bad = (target < 0).logical_or(target >= classes).logical_and(target != ignore);
        if (bad.any().item<bool>())
            plugin::fail("cross_entropy: a target is outside [0, " + std::to_string(classes) +
                         ") and is not ignore_index");
    }
    return at::cross_entropy_loss(x0(a), target, c10::nullopt, reduction_of(a), ignore, 0.0);
}

// torch.nn.LayerNorm written out with float64 statistics (ATen's float32 layer_norm loses the
// variance of inputs far from 0).
at::Tensor op_layer_norm(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    const int64_t k = static_cast<int64_t>(a.attrs.get_ints("normalized_shape", {}).size());
    std::vector<int64_t> dims;
    for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
    at::Tensor y = normalized(x, dims, a.attrs.get_float("eps", 1e-5));
    if (a.attrs.get_bool("elementwise_affine", true)) {
        y = y * widened(a.params.at(0));
        if (a.attrs.get_bool("bias", true)) y = y + widened(a.params.at(1));
    }
    return y.to(x.scalar_type());
}
at::Tensor op_batch_norm(const OpArgs& a) { return batch_norm(a); }
at::Tensor op_batchnorm_channel_first(const OpArgs& a) { return batch_norm(a); }

namespace {
/// A convolution whose weight has no elements (0 input channels per group): each output is its
/// bias, or 0 (an empty sum); ATen refuses or mis-shapes these.
c10::optional<at::Tensor> empty_weight_result(const OpArgs& a) {
    if (a.params.at(0).numel() != 0) return c10::nullopt;
    at::Tensor y = at::zeros(a.out_shape, x0(a).options());
    if (auto b = bias_of(a)) {
        std::vector<int64_t> shape(a.out_shape.size(), 1);
        shape[1] = b->numel();
        y = y + b->reshape(shape);
    }
    return y;
}
}  // namespace

at::Tensor op_conv(const OpArgs& a) {
    if (auto y = empty_weight_result(a)) return *y;
    const ConvAttrs c = conv_attrs(a, 1);
    return at::conv1d(x0(a), a.params.at(0), bias_of(a), c.stride, c.padding, c.dilation, c.groups);
}
namespace {
/// Whether a 2-D convolution runs on oneDNN's primitive (at::mkldnn_convolution) instead of
/// at::conv2d: float32, no gradient recorded, non-empty, and attributes ATen's checks would pass
/// (mkldnn_convolution does not check them). at::conv2d takes the same primitive for most such
/// shapes (ATen's use_mkldnn); taking it always makes a compiled group's run on a prepacked
/// weight and the node-by-node run the same arithmetic.
bool onednn_conv2d(const at::Tensor& x, const at::Tensor& w, const ConvAttrs& c) {
    if (x.dim() != 4 || w.dim() != 4 || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
        x.numel() == 0 || w.numel() == 0 || at::GradMode::is_enabled() || !at::hasMKLDNN())
        return false;
    if (c.groups < 1 || x.size(1) != w.size(1) * c.groups || w.size(0) % c.groups != 0) return false;
    for (std::size_t i = 0; i < 2; ++i)
        if (c.stride.at(i) < 1 || c.padding.at(i) < 0 || c.dilation.at(i) < 1) return false;
    return true;
}

/// conv2d of `a`, on oneDNN with `packed` (prepack_conv2d_weight) for the weight when given.
at::Tensor conv2d(const OpArgs& a, const at::Tensor* packed) {
    if (auto y = empty_weight_result(a)) return *y;
    const ConvAttrs c = conv_attrs(a, 2);
    const at::Tensor& w = a.params.at(0);
    if (onednn_conv2d(x0(a), w, c))
        return at::mkldnn_convolution(x0(a).contiguous(), packed ? *packed : w.contiguous(), bias_of(a), c.padding,
                                      c.stride, c.dilation, c.groups);
    return at::conv2d(x0(a), w, bias_of(a), c.stride, c.padding, c.dilation, c.groups);
}
}  // namespace

at::Tensor op_conv2d(const OpArgs& a) { return conv2d(a, nullptr); }

at::Tensor prepack_conv2d_weight(const OpArgs& a) {
    const at::Tensor& w = a.params.at(0);
    if (w.dim() != 4 || w.scalar_type() != at::kFloat || w.numel() == 0 || !at::hasMKLDNN()) return {};
    const ConvAttrs c = conv_attrs(a, 2);
    return at::mkldnn_reorder_conv2d_weight(w.contiguous().to_mkldnn(), c.padding, c.stride, c.dilation, c.groups);
}

at::Tensor conv2d_prepacked(const OpArgs& a, const at::Tensor& packed) { return conv2d(a, &packed); }
at::Tensor op_conv_transpose(const OpArgs& a) {
    if (auto y = empty_weight_result(a)) return *y;
    const ConvAttrs c = conv_attrs(a, 1);
    return at::conv_transpose1d(x0(a), a.params.at(0), bias_of(a), c.stride, c.padding, c.output_padding,
                                c.groups, c.dilation);
}
at::Tensor op_conv_transpose2d(const OpArgs& a) {
    if (auto y = empty_weight_result(a)) return *y;
    const ConvAttrs c = conv_attrs(a, 2);
    return at::conv_transpose2d(x0(a), a.params.at(0), bias_of(a), c.stride, c.padding, c.output_padding,
                                c.groups, c.dilation);
}

at::Tensor op_max_pool(const OpArgs& a) {
    const Window w = window(a, 1);
    return at::max_pool1d(x0(a), w.kernel, w.stride);
}
namespace {
// 2-D max pooling, by speed on Debian's LibTorch 1.13 (one thread here): in inference runs, a
// float32 x goes through oneDNN (mkldnn_max_pool2d: 0.18 ms for LeNet-5's first pool at batch 64,
// 0.30 ms for ResNet-18's 3x3/2 stem pool) unless it holds a NaN, which oneDNN's max drops, or a
// -inf, since oneDNN starts each window at -FLT_MAX and so gives -FLT_MAX for a window of -inf
// (one at::aminmax pass checks both); otherwise, and under autograd,
// ATen's channels-last kernel (1.4 / 0.85 ms with the copies), which is vectorised where its kernel
// for contiguous NCHW is scalar (1.4 / 5.6 ms). Every path picks the first maximum; ATen's keep NaN.
/// A window ATen accepts (it raises for the others; oneDNN would divide by a zero stride).
bool valid_window(at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding) {
    if (kernel.size() != 2 || stride.size() != 2 || padding.size() != 2) return false;
    for (std::size_t i = 0; i < 2; ++i)
        if (kernel[i] < 1 || stride[i] < 1 || padding[i] < 0 || 2 * padding[i] > kernel[i]) return false;
    return true;
}

/// Whether float32 x holds neither NaN nor -inf (+inf is a value oneDNN's max keeps).
bool finite_or_inf(const at::Tensor& x) {
    const auto [low, high] = at::aminmax(x);
    const float lowest = low.item<float>(), highest = high.item<float>();
    return !std::isnan(lowest) && !std::isnan(highest) && lowest != -std::numeric_limits<float>::infinity();
}

at::Tensor max_pool2d(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                      bool ceil_mode) {
    if (x.dim() == 4 && x.scalar_type() == at::kFloat && x.numel() > 0 && !at::GradMode::is_enabled() &&
        valid_window(kernel, stride, padding) && at::hasMKLDNN() && finite_or_inf(x))
        return at::mkldnn_max_pool2d(x.contiguous().to_mkldnn(), kernel, stride, padding, {1, 1}, ceil_mode).to_dense();
    const at::Tensor input = x.dim() == 4 ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
    return at::max_pool2d(input, kernel, stride, padding, {1, 1}, ceil_mode);
}
}  // namespace

at::Tensor op_max_pool2d(const OpArgs& a) {
    const Window w = window(a, 2);
    return max_pool2d(x0(a), w.kernel, w.stride, {0, 0}, false);
}
at::Tensor op_max_pool2d_pad(const OpArgs& a) {
    const Window w = window(a, 2);
    return max_pool2d(x0(a), w.kernel, w.stride, w.padding, a.attrs.get_bool("ceil_mode", false));
}
at::Tensor op_avg_pool(const OpArgs& a) {
    const Window w = window(a, 1);
    return at::avg_pool1d(x0(a), w.kernel, w.stride);
}
at::Tensor op_avg_pool2d(const OpArgs& a) {
    const Window w = window(a, 2);
    return at::avg_pool2d(x0(a), w.kernel, w.stride);
}
at::Tensor op_avg_pool2d_pad(const OpArgs& a) {
    const Window w = window(a, 2);
    return at::avg_pool2d(x0(a), w.kernel, w.stride, w.padding, a.attrs.get_bool("ceil_mode", false),
                          a.attrs.get_bool("count_include_pad", true));
}
// T * logsumexp(x.unfold(-1, k, s) / T, dim=-1) (docs/ops.md).
at::Tensor op_smooth_max_pool(const OpArgs& a) {
    const Window w = window(a, 1);
    return smooth_max(x0(a).unfold(2, w.kernel[0], w.stride[0]), 1, a.attrs.get_float("temperature", 1.0));
}
at::Tensor op_smooth_max_pool2d(const OpArgs& a) {
    const Window w = window(a, 2);
    const at::Tensor windows = x0(a).unfold(2, w.kernel[0], w.stride[0]).unfold(3, w.kernel[1], w.stride[1]);
    return smooth_max(windows, 2, a.attrs.get_float("temperature", 1.0));
}

// torch.nn.functional.scaled_dot_product_attention without dropout, written out (LibTorch 1.13
// predates the fused op): softmax(q·kᵀ·scale + mask)·v; a bool mask keeps the `true` positions.
at::Tensor op_scaled_dot_product_attention(const OpArgs& a) {
    const at::Tensor &q = a.inputs.at(0), &k = a.inputs.at(1), &v = a.inputs.at(2);
    const double scale = a.attrs.has("scale") ? a.attrs.get_float("scale", 1.0) : 1.0 / std::sqrt(double(q.size(-1)));
    // E = 0: every score is an empty dot product, 0 (the default scale 1/√0 would make it NaN).
    at::Tensor scores = q.size(-1) == 0 ? at::zeros({q.size(-2), k.size(-2)}, q.options()).expand_as(at::matmul(q, k.transpose(-2, -1)))
                                        : at::matmul(q, k.transpose(-2, -1)) * scale;
    const bool causal = a.attrs.get_bool("is_causal", false);
    c10::optional<at::Tensor> keep;  // bool, broadcastable to the scores: positions attended to
    if (a.inputs.size() > 3) {
        if (causal) plugin::fail("scaled_dot_product_attention: a mask together with is_causal");
        const at::Tensor& mask = a.inputs[3];
        if (mask.scalar_type() == at::kBool) keep = mask;
        else scores = scores + mask;
    } else if (causal) {
        keep = at::ones({q.size(-2), k.size(-2)}, at::kBool).tril();
    }
    if (keep) scores = at::where(*keep, scores, -std::numeric_limits<double>::infinity());
    // A row without any attended position (a bool mask, or a float mask of −inf) gives 0, as the
    // reference capsule (softmax over no positions would be 0/0): its scores are zeroed before
    // the softmax and its weights after.
    const at::Tensor any = (scores.amax(-1, /*keepdim=*/true) > -std::numeric_limits<double>::infinity()).detach();
    scores = at::where(any, scores, at::zeros_like(scores));
    return at::matmul(at::softmax(scores, -1) * any, v);
}

// FNO spectral convolution (Li et al., ICLR 2021; SpectralConv1d): rfft, a complex channel mix
// of the lowest `modes` frequencies, irfft back to length L.
at::Tensor op_fft_fno(const OpArgs& a) {
    const at::Tensor& x = x0(a);
    const int64_t modes = a.attrs.get_int("modes", 1);
    const int64_t length = x.size(2);
    const at::Tensor spectrum = at::fft_rfft(x);
    const at::Tensor weight = at::complex(a.params.at(0), a.params.at(1));
    const at::Tensor mixed = at::einsum("bim,iom->bom", {spectrum.narrow(2, 0, modes), weight});
    const at::Tensor full = at::constant_pad_nd(mixed, {0, spectrum.size(2) - modes});
    return at::fft_irfft(full, length);
}

// Mamba's selective scan (selective_scan_ref in mamba_ssm), one step per time position.
at::Tensor op_selective_scan(const OpArgs& a) {
    const at::Tensor &u = a.inputs.at(0), &A = a.inputs.at(2), &B = a.inputs.at(3), &C = a.inputs.at(4);
    at::Tensor delta = a.inputs.at(1);
    if (a.attrs.get_bool("delta_softplus", false)) delta = at::softplus(delta);
    const int64_t length = u.size(2);
    at::Tensor h = at::zeros({u.size(0), u.size(1), A.size(1)}, u.options());
    std::vector<at::Tensor> ys;
    for (int64_t t = 0; t < length; ++t) {
        const at::Tensor d = delta.select(2, t).unsqueeze(-1);                     // [B, D, 1]
        h = at::exp(d * A) * h + d * B.select(2, t).unsqueeze(1) * u.select(2, t).unsqueeze(-1);
        ys.push_back((h * C.select(2, t).unsqueeze(1)).sum(-1));                   // [B, D]
    }
    if (ys.empty()) return at::zeros_like(u);
    return at::stack(ys, 2);
}

}  // namespace capsule::libtorch
