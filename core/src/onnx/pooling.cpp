// Pooling windows the pool BackendOps cannot take directly (3 or more spatial axes, dilations,
// averages over asymmetric padding without count_include_pad or with ceil_mode), as their
// definition: the padded input's strided `slice`s, one per window position along one axis at a
// time (a box's max or sum is the max or sum along each axis in turn), combined with `max` or
// `add`; averages are divided by each window's count of counted positions (a constant computed at
// import). docs/onnx.md states where the converters use it.
#include <algorithm>
#include <limits>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

constexpr std::int64_t kMaxTaps = 4096;  // slices one window axis may take: bounds the graph's size
constexpr std::int64_t kMaxPositions = std::int64_t(1) << 24;  // bounds the divisor table (192 MB at import)

struct AxisPlan {
    std::int64_t out = 0;       // output length
    std::int64_t pad_end = 0;   // padding the slices need after the input (may exceed the declared)
};

/// Output length and needed end padding of one axis: floor (or, with ceil_mode, ceil) of
/// (in + pads − dilated kernel) / stride + 1, where a ceil-mode window must start inside the input
/// or the left padding (PyTorch's rule, as the pool BackendOps).
AxisPlan plan_axis(const Window& w, bool ceil_mode, std::size_t a, std::int64_t in) {
    const auto k = w.kernel[a], s = w.stride[a], d = w.dilation[a], pb = w.pad_begin[a], pe = w.pad_end[a];
    if (k < 1 || s < 1 || d < 1 || pb < 0 || pe < 0)
        unsupported("kernel, strides and dilations must be >= 1 and pads >= 0");
    if (k > (std::int64_t(1) << 20) || d > (std::int64_t(1) << 20) || pb > (std::int64_t(1) << 30) || pe > (std::int64_t(1) << 30))
        unsupported("kernel, dilations or pads beyond 2^20 / 2^30");
    const std::int64_t extent = (k - 1) * d + 1, span = in + pb + pe - extent;
    if (span < 0)
        unsupported("padded input length " + std::to_string(in + pb + pe) + " is smaller than the dilated kernel " + std::to_string(extent));
    std::int64_t out = span / s + 1 + (ceil_mode && span % s != 0 ? 1 : 0);
    if (ceil_mode && (out - 1) * s >= in + pb) --out;
    if (out > kMaxPositions) unsupported("more than 2^24 output positions per channel");
    return {out, std::max<std::int64_t>(0, (out - 1) * s + extent - in - pb)};
}

/// Per output position of axis `a`, how many taps of its window a count_include_pad=`with_pad`
/// average counts: positions inside the input, or inside the input and its declared padding.
vector<double> window_counts(const Window& w, std::size_t a, std::int64_t in, std::int64_t out, bool with_pad) {
    const std::int64_t low = with_pad ? -w.pad_begin[a] : 0, high = with_pad ? in + w.pad_end[a] : in;
    // Tap t is at p = o·s + t·d − pb; low <= p < high holds for t in [ceil((low − start) / d),
    // ceil((high − start) / d)), clipped to [0, kernel): O(out), not O(out · kernel).
    auto ceil_div = [](std::int64_t num, std::int64_t den) { return num >= 0 ? (num + den - 1) / den : -((-num) / den); };
    const std::int64_t d = w.dilation[a], k = w.kernel[a];
    vector<double> counts(static_cast<std::size_t>(out), 0);
    for (std::int64_t o = 0; o < out; ++o) {
        const std::int64_t start = o * w.stride[a] - w.pad_begin[a];
        const std::int64_t first = std::clamp<std::int64_t>(ceil_div(low - start, d), 0, k);
        const std::int64_t last = std::clamp<std::int64_t>(ceil_div(high - start, d), 0, k);
        counts[static_cast<std::size_t>(o)] = static_cast<double>(std::max<std::int64_t>(0, last - first));
    }
    return counts;
}

/// The input padded for sliced windows (−∞ or 0), with each axis's output length.
struct PaddedInput {
    Id x = -1;
    Shape shape;  // the padded shape
    vector<AxisPlan> axes;
};

PaddedInput pad_for_windows(ImportContext& c, Id x, const Window& w, bool ceil_mode, double fill) {
    const Shape in = c.node_type(x).shape;
    const std::size_t sp = w.kernel.size();
    if (in.size() != sp + 2) unsupported("kernel_shape has " + std::to_string(sp) + " entries for an input of rank " + std::to_string(in.size()));
    PaddedInput p;
    std::int64_t positions = 1;
    for (std::size_t a = 0; a < sp; ++a) {
        p.axes.push_back(plan_axis(w, ceil_mode, a, in[2 + a]));
        if (w.kernel[a] > kMaxTaps) unsupported("a window more than " + std::to_string(kMaxTaps) + " positions long");
        if (p.axes.back().out > kMaxPositions / positions) unsupported("more than 2^24 output positions per channel");
        positions *= p.axes.back().out;
    }
    // A window over padding alone would be −∞ (max) or 0/0 (average): refused, as ONNX Runtime
    // and PyTorch refuse pads that large.
    for (std::size_t a = 0; a < sp; ++a)
        for (double count : window_counts(w, a, in[2 + a], p.axes[a].out, false))
            if (count == 0) unsupported("a window covers only padding (pads too large for the kernel)");
    vector<std::int64_t> pads(2 * in.size(), 0);
    bool padded = false;
    for (std::size_t a = 0; a < sp; ++a) {
        pads[2 + a] = w.pad_begin[a];
        pads[in.size() + 2 + a] = p.axes[a].pad_end;
        padded = padded || w.pad_begin[a] || p.axes[a].pad_end;
    }
    p.x = padded ? c.add("pad", {x}, {{"pads", pads}, {"mode", string("constant")}, {"value", fill}}) : x;
    p.shape = c.node_type(p.x).shape;
    return p;
}

/// Window position `t` along spatial axis `a` of every output position: a strided slice.
Id window_slice(ImportContext& c, Id x, const Window& w, const PaddedInput& p, std::size_t a, std::int64_t t) {
    const std::int64_t start = t * w.dilation[a];
    return slice_axis(c, x, static_cast<std::int64_t>(a + 2), start, start + (p.axes[a].out - 1) * w.stride[a] + 1, w.stride[a]);
}

/// Whether axis `a` of the padded input is its own window (kernel 1, stride 1, same length).
bool identity_axis(const Window& w, const PaddedInput& p, std::size_t a) {
    return w.kernel[a] == 1 && w.stride[a] == 1 && p.axes[a].out == p.shape[a + 2];
}

}  // namespace

Id pool_by_slices(ImportContext& c, const onnx::NodeProto& n, Id x, const Window& w, bool is_max, bool ceil_mode,
                  bool count_include_pad, const string& name) {
    const Shape in = c.node_type(x).shape;
    const DType dtype = c.node_type(x).dtype;
    const std::size_t sp = w.kernel.size();
    const PaddedInput p = pad_for_windows(c, x, w, ceil_mode, is_max ? -std::numeric_limits<double>::infinity() : 0.0);
    // Max and sum over a box are max and sum over one axis after another: Σ kernel slices, not Π.
    Id acc = p.x;
    for (std::size_t a = 0; a < sp; ++a) {
        if (identity_axis(w, p, a)) continue;
        const Id along = acc;
        for (std::int64_t t = 0; t < w.kernel[a]; ++t) {
            const Id slice = window_slice(c, along, w, p, a, t);
            acc = t == 0 ? slice : c.add(is_max ? "max" : "add", {acc, slice});
        }
    }
    if (is_max) return c.add_identity(acc, name);
    // The divisor of each output position: the product of its axes' counts (the window is a box).
    Shape out_shape;
    vector<double> divisor{1};
    for (std::size_t a = 0; a < sp; ++a) {
        out_shape.push_back(p.axes[a].out);
        const auto counts = window_counts(w, a, in[2 + a], p.axes[a].out, count_include_pad);
        vector<double> next;
        next.reserve(divisor.size() * counts.size());
        for (double prefix : divisor)
            for (double count : counts) next.push_back(prefix * count);
        divisor = std::move(next);
    }
    return c.add("div", {acc, constant_input(c, n, "window_count", Tensor::from_values(dtype, out_shape, divisor))}, {}, name);
}

std::pair<Id, Id> max_pool_with_indices(ImportContext& c, const onnx::NodeProto& n, Id x, const Window& w, bool ceil_mode,
                                        bool column_major, const string& values_name, const string& indices_name) {
    const Shape in = c.node_type(x).shape;
    const std::size_t sp = w.kernel.size();
    const PaddedInput p = pad_for_windows(c, x, w, ceil_mode, -std::numeric_limits<double>::infinity());
    const std::int64_t count = checked_element_count(p.shape);
    if (count > kMaxPositions) unsupported("Indices of an input of more than 2^24 elements (after padding)");
    // Every padded position's index into the unpadded input, flattened over N, C and the spatial
    // axes (storage_order 1: spatial axes in reverse order); −1 on padding.
    vector<double> index(static_cast<std::size_t>(count));
    vector<std::int64_t> pos(p.shape.size(), 0);
    for (std::int64_t i = 0; i < count; ++i) {
        std::int64_t flat = pos[0] * in[1] + pos[1];
        bool inside = true;
        for (std::size_t k = 0; k < sp; ++k) {
            const std::size_t a = column_major ? sp - 1 - k : k;
            const std::int64_t q = pos[a + 2] - w.pad_begin[a];
            inside = inside && q >= 0 && q < in[a + 2];
            flat = flat * in[a + 2] + q;
        }
        index[static_cast<std::size_t>(i)] = inside ? static_cast<double>(flat) : -1;
        for (std::size_t a = p.shape.size(); a-- > 0;) {
            if (++pos[a] < p.shape[a]) break;
            pos[a] = 0;
        }
    }
    Id value = p.x, where_from = constant_input(c, n, "index", Tensor::from_values(DType::int64, p.shape, index));
    const Id minus_one = scalar_constant(c, n, "minus_one", DType::int64, -1);
    // Last spatial axis first, a later tap replacing the running maximum only when strictly
    // greater: the first maximum in row-major window order wins, as ONNX Runtime and PyTorch.
    // (Along each axis in turn, the row holding the first maximum is the first row whose own
    // first maximum is the window's.)
    for (std::size_t a = sp; a-- > 0;) {
        if (identity_axis(w, p, a)) continue;
        const Id values_along = value, index_along = where_from;
        for (std::int64_t t = 0; t < w.kernel[a]; ++t) {
            const Id v = window_slice(c, values_along, w, p, a, t), i = window_slice(c, index_along, w, p, a, t);
            if (t == 0) {
                value = v;
                where_from = i;
                continue;
            }
            // PyTorch's order: a NaN wins over a number, the first NaN stays; an input position
            // wins over padding (index −1), so a window of −∞ inputs names one of them.
            const Id v_nan = c.add("logical_not", {c.add("equal", {v, v})});
            const Id value_nan = c.add("logical_not", {c.add("equal", {value, value})});
            const Id over_padding = c.add("logical_and", {c.add("equal", {where_from, minus_one}),
                                                          c.add("logical_not", {c.add("equal", {i, minus_one})})});
            const Id better = c.add("logical_or", {c.add("logical_and", {c.add("greater", {v, value}), c.add("logical_not", {value_nan})}),
                                                   c.add("logical_or", {c.add("logical_and", {v_nan, c.add("logical_not", {value_nan})}), over_padding})});
            value = c.add("where", {better, v, value});
            where_from = c.add("where", {better, i, where_from});
        }
    }
    return {c.add_identity(value, values_name), c.add_identity(where_from, indices_name)};
}

}  // namespace capsule::onnx_import
