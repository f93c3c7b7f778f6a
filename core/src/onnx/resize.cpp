// ONNX Resize (opsets 10, 11, 13) and Upsample (opsets 7, 9) as separable interpolation: one axis
// at a time, last axis first, each as `gather`s of the input along the axis at indices computed at
// import and a weighted sum with weights computed at import. Nothing is approximated: the indices
// and weights are exactly those of the ONNX reference implementation
// (onnx/backend/test/case/node/resize.py, ONNX 1.12, which wrote the backend test data), computed
// in double and stored in the input's dtype. docs/onnx.md states the conventions.
#include <algorithm>
#include <cmath>
#include <set>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

enum class Mode { nearest, linear, cubic };

/// What one Resize / Upsample node asks for, per axis of its input.
struct ResizeSpec {
    Mode mode = Mode::nearest;
    string coordinates = "half_pixel";  // coordinate_transformation_mode
    string nearest = "round_prefer_floor";
    bool legacy = false;  // Upsample and Resize-10: asymmetric, nearest as ONNX Runtime's "simple"
    double cubic_a = -0.75;
    bool exclude_outside = false;
    double extrapolation = 0;
    vector<double> scales;  // per axis
    Shape out;              // per axis
    vector<double> roi;     // starts then ends, per axis (tf_crop_and_resize only)
};

/// The interpolation along one axis: out[j] = Σ_t weight[t][j] · in[index[t][j]], or the
/// extrapolation value where outside[j] (tf_crop_and_resize sampling outside the input).
struct AxisTaps {
    vector<vector<double>> index, weight;  // [taps][out_len]; indices clamped into [0, in_len)
    vector<bool> outside;                  // [out_len]
};

// The tables' bound: at most 4 taps × 2^22 entries for the one axis being built, about 200 MB at
// import (the gathers' constants stay: at most 16 bytes per output entry per tap).
constexpr std::int64_t kMaxAxisLength = std::int64_t(1) << 22;

/// A 1-D float constant's values; Unsupported when it is not one or holds NaN or ±inf.
vector<double> float_values(ImportContext& c, const string& name, const string& what) {
    const Tensor& t = c.constant(name, what);
    if (t.dtype() != DType::float32 && t.dtype() != DType::float64) unsupported(what + " must be float32 or float64");
    if (t.shape().size() != 1) unsupported(what + " must be 1-D, got shape " + to_string(t.shape()));
    auto values = t.to_doubles();
    for (double v : values)
        if (!std::isfinite(v)) unsupported(what + " holds " + std::to_string(v));
    return values;
}

Mode read_mode(const onnx::NodeProto& n, bool legacy) {
    const string mode = attr_string(n, "mode", "nearest");
    if (mode == "nearest") return Mode::nearest;
    if (mode == "linear") return Mode::linear;
    if (mode == "cubic" && !legacy) return Mode::cubic;
    unsupported("mode '" + mode + "' (expected nearest, linear" + string(legacy ? ")" : " or cubic)"));
}

/// The per-axis scales and output lengths: from `sizes` (scale = out / in, as the reference), or
/// from `scales`: out = floor(in · scale) in float32 arithmetic, as ONNX's shape inference and
/// ONNX Runtime compute it (also for tf_crop_and_resize: the roi does not change the length).
void read_lengths(ImportContext& c, const onnx::NodeProto& n, const Shape& in, ResizeSpec& s) {
    const auto rank = in.size();
    string scales_name, sizes_name;
    if (n.op_type() == "Upsample" && c.opset() < 9) {
        const auto* a = find_attr(n, "scales");
        if (!a) unsupported("Upsample needs its scales attribute");
        s.scales.assign(a->floats().begin(), a->floats().end());
    } else if (s.legacy) {
        scales_name = input_name(n, 1);
        if (scales_name.empty()) unsupported("scales input missing");
        s.scales = float_values(c, scales_name, n.op_type() + " scales");
    } else {
        scales_name = input_name(n, 2);
        sizes_name = input_name(n, 3);
        if (!scales_name.empty()) s.scales = float_values(c, scales_name, "Resize scales");
        if (!sizes_name.empty()) {
            if (!s.scales.empty()) unsupported("both scales and sizes are given; the spec allows one");
            for (auto v : int_values(c.constant(sizes_name, "Resize sizes"))) s.out.push_back(v);
            if (s.out.size() != rank) unsupported("sizes has " + std::to_string(s.out.size()) + " entries for an input of rank " + std::to_string(rank));
            for (std::size_t a = 0; a < rank; ++a) {
                if (s.out[a] < 1 || s.out[a] > kMaxAxisLength) unsupported("output size " + std::to_string(s.out[a]) + " outside [1, 2^22]");
                s.scales.push_back(static_cast<double>(s.out[a]) / static_cast<double>(in[a]));
            }
            return;
        }
        if (s.scales.empty()) unsupported("neither scales nor sizes is given");
    }
    if (s.scales.size() != rank) unsupported("scales has " + std::to_string(s.scales.size()) + " entries for an input of rank " + std::to_string(rank));
    for (std::size_t a = 0; a < rank; ++a) {
        if (n.op_type() == "Upsample" && s.scales[a] < 1) unsupported("Upsample scales must be >= 1, got " + std::to_string(s.scales[a]));
        if (!(std::abs(s.scales[a]) <= 3.4e38)) unsupported("scale " + std::to_string(s.scales[a]) + " is beyond float32");
        const double length = std::floor(static_cast<float>(in[a]) * static_cast<float>(s.scales[a]));
        if (!(s.scales[a] > 0) || !std::isfinite(s.scales[a]) || !(length >= 1) || length > double(kMaxAxisLength))
            unsupported("scale " + std::to_string(s.scales[a]) + " on axis " + std::to_string(a) + " of length " +
                        std::to_string(in[a]) + " gives an output length outside [1, 2^22]");
        s.out.push_back(static_cast<std::int64_t>(length));
    }
}

ResizeSpec read_spec(ImportContext& c, const onnx::NodeProto& n, const Shape& in) {
    for (const auto* later : {"antialias", "axes", "keep_aspect_ratio_policy"})
        if (find_attr(n, later)) unsupported(string("attribute ") + later + " (opset 18) is not supported");
    ResizeSpec s;
    s.legacy = n.op_type() == "Upsample" || c.opset() < 11;
    s.mode = read_mode(n, s.legacy);
    if (s.legacy) {
        s.coordinates = "asymmetric";
    } else {
        s.coordinates = attr_string(n, "coordinate_transformation_mode", "half_pixel");
        static const std::set<string> known{"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                            "tf_half_pixel_for_nn", "tf_crop_and_resize"};
        if (!known.count(s.coordinates)) unsupported("coordinate_transformation_mode '" + s.coordinates + "'");
        s.nearest = attr_string(n, "nearest_mode", "round_prefer_floor");
        static const std::set<string> rounding{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        if (!rounding.count(s.nearest)) unsupported("nearest_mode '" + s.nearest + "'");
        s.cubic_a = attr_float(n, "cubic_coeff_a", -0.75f);
        s.exclude_outside = attr_int(n, "exclude_outside", 0) != 0;
        s.extrapolation = attr_float(n, "extrapolation_value", 0.0f);
        if (s.coordinates == "tf_crop_and_resize") {
            const string roi = input_name(n, 1);
            if (roi.empty()) unsupported("tf_crop_and_resize needs the roi input");
            s.roi = float_values(c, roi, "Resize roi");
            if (s.roi.size() != 2 * in.size()) unsupported("roi has " + std::to_string(s.roi.size()) + " entries, expected 2 × rank = " + std::to_string(2 * in.size()));
        }
    }
    read_lengths(c, n, in, s);
    return s;
}

/// The input coordinate that output position `x` of axis `a` samples, as the reference computes it
/// (its "output_width" is in · scale, not the rounded output length); sets `outside` when a
/// tf_crop_and_resize sample falls outside [0, in − 1].
double source_coordinate(const ResizeSpec& s, std::size_t a, std::int64_t x_int, std::int64_t in_int, bool& outside) {
    const double x = static_cast<double>(x_int), in = static_cast<double>(in_int), scale = s.scales[a];
    const double width = scale * in;
    const string& m = s.coordinates;
    if (m == "align_corners") return width == 1 ? 0.0 : x * (in - 1) / (width - 1);
    if (m == "asymmetric") return x / scale;
    if (m == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
    if (m == "pytorch_half_pixel") return width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    if (m == "tf_crop_and_resize") {
        const double start = s.roi[a], end = s.roi[s.scales.size() + a];
        double v = width == 1 ? (end - start) * (in - 1) / 2 : x * (end - start) * (in - 1) / (width - 1);
        v += start * (in - 1);
        outside = v < 0 || v > in - 1;
        return v;
    }
    return (x + 0.5) / scale - 0.5;  // half_pixel
}

/// The input position nearest to `v` by the node's rounding (an integral `v` is itself).
double nearest_position(const ResizeSpec& s, double v, double scale) {
    const double f = std::floor(v), r = v - f;
    if (r == 0) return v;
    if (s.legacy) return scale < 1 ? f + 1 : f;  // ONNX Runtime's "simple": ceil when downsampling
    if (s.nearest == "round_prefer_floor") return r <= 0.5 ? f : f + 1;
    if (s.nearest == "round_prefer_ceil") return r < 0.5 ? f : f + 1;
    return s.nearest == "floor" ? f : f + 1;
}

/// The reference's cubic convolution weights (Keys 1981, a = cubic_coeff_a) of the taps at
/// floor(v) − 1 .. floor(v) + 2, for ratio = v − floor(v).
vector<double> cubic_weights(double ratio, double A) {
    const double r1 = ratio + 1, r2 = 1 - ratio, r3 = (1 - ratio) + 1;
    return {((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A, ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
            ((A + 2) * r2 - (A + 3)) * r2 * r2 + 1, ((A * r3 - 5 * A) * r3 + 8 * A) * r3 - 4 * A};
}

AxisTaps axis_taps(const ResizeSpec& s, std::size_t a, std::int64_t in) {
    const std::int64_t out = s.out[a];
    const std::size_t taps = s.mode == Mode::nearest ? 1 : s.mode == Mode::linear ? 2 : 4;
    AxisTaps t{vector<vector<double>>(taps, vector<double>(static_cast<std::size_t>(out), 0)),
               vector<vector<double>>(taps, vector<double>(static_cast<std::size_t>(out), 0)),
               vector<bool>(static_cast<std::size_t>(out), false)};
    const double last = static_cast<double>(in - 1);
    for (std::int64_t x = 0; x < out; ++x) {
        const auto j = static_cast<std::size_t>(x);
        bool outside = false;
        const double v = source_coordinate(s, a, x, in, outside);
        if (outside) {  // the weights do not matter (the value is replaced): nearest keeps a plain gather
            t.outside[j] = true;
            t.weight[0][j] = s.mode == Mode::nearest ? 1 : 0;
            continue;
        }
        if (s.mode == Mode::nearest) {
            t.index[0][j] = std::clamp(nearest_position(s, v, s.scales[a]), 0.0, last);
            t.weight[0][j] = 1;
            continue;
        }
        const double f = std::floor(v), ratio = v - f;
        const vector<double> w = s.mode == Mode::linear ? vector<double>{1 - ratio, ratio} : cubic_weights(ratio, s.cubic_a);
        const double first = s.mode == Mode::linear ? f : f - 1;
        double sum = 0;
        for (std::size_t k = 0; k < taps; ++k) {
            const double p = first + static_cast<double>(k);
            t.index[k][j] = std::clamp(p, 0.0, last);  // the reference pads with edge values
            t.weight[k][j] = s.exclude_outside && (p < 0 || p > last) ? 0 : w[k];
            sum += t.weight[k][j];
        }
        if (s.exclude_outside && sum != 0)
            for (std::size_t k = 0; k < taps; ++k) t.weight[k][j] /= sum;
    }
    return t;
}

/// Whether the taps copy the input unchanged: same length, and each output position weighs only
/// the input at its own position, with weight 1.
bool is_identity(const AxisTaps& t, std::int64_t in) {
    if (static_cast<std::int64_t>(t.outside.size()) != in) return false;
    for (std::size_t j = 0; j < t.outside.size(); ++j) {
        if (t.outside[j]) return false;
        double self = 0;
        for (std::size_t k = 0; k < t.index.size(); ++k) {
            if (t.weight[k][j] == 0) continue;
            if (t.index[k][j] != static_cast<double>(j)) return false;
            self += t.weight[k][j];
        }
        if (self != 1) return false;
    }
    return true;
}

/// Whether tap `k` weighs every sampled (not outside) position by `x`.
bool all_inside_equal(const AxisTaps& t, std::size_t k, double x) {
    for (std::size_t j = 0; j < t.outside.size(); ++j)
        if (!t.outside[j] && t.weight[k][j] != x) return false;
    return true;
}

/// x interpolated along `axis` by `t`; the last node added is named `name` (empty: a fresh name).
/// A tap is left out where its weight is 0 (`where`, not a product with 0), so that an infinite
/// input next to a sample that does not use it gives no NaN.
Id interpolate_axis(ImportContext& c, const onnx::NodeProto& n, Id x, std::size_t axis, const AxisTaps& t,
                    double extrapolation, const string& name) {
    const Shape in = c.node_type(x).shape;
    const DType dtype = c.node_type(x).dtype;
    const auto out = static_cast<std::int64_t>(t.outside.size());
    Shape along(in.size() - axis, 1);  // [out, 1, ...]: broadcasts along the axes after `axis`
    along[0] = out;
    const bool any_outside = std::find(t.outside.begin(), t.outside.end(), true) != t.outside.end();
    vector<std::size_t> used;  // the taps with a nonzero weight somewhere
    for (std::size_t k = 0; k < t.index.size(); ++k)
        if (!all_inside_equal(t, k, 0)) used.push_back(k);
    Id acc = -1;
    for (std::size_t u = 0; u < used.size(); ++u) {
        const std::size_t k = used[u];
        const string term_name = u + 1 == used.size() && !any_outside ? name : string();
        const Id index = constant_input(c, n, "index", Tensor::from_values(DType::int64, {out}, t.index[k]));
        const bool unit = all_inside_equal(t, k, 1);
        vector<double> nonzero(static_cast<std::size_t>(out));
        bool some_zero = false;
        for (std::size_t j = 0; j < nonzero.size(); ++j) {
            nonzero[j] = t.outside[j] || t.weight[k][j] != 0;
            some_zero = some_zero || !nonzero[j];
        }
        const string alone = used.size() == 1 ? term_name : string();  // the term is the result
        Id term = c.add("gather", {x, index}, {{"axis", static_cast<std::int64_t>(axis)}}, unit && !some_zero ? alone : string());
        if (!unit)
            term = c.add("mul", {term, constant_input(c, n, "weight", Tensor::from_values(dtype, along, t.weight[k]))}, {},
                         some_zero ? string() : alone);
        if (some_zero)
            term = c.add("where", {constant_input(c, n, "used", Tensor::from_values(DType::boolean, along, nonzero)), term,
                                   scalar_constant(c, n, "zero", dtype, 0)}, {}, alone);
        acc = acc < 0 ? term : c.add("add", {acc, term}, {}, term_name);
    }
    if (!any_outside) {
        if (acc < 0) unsupported("internal: an axis with no weighted tap");
        return acc;
    }
    // Samples outside the crop take the extrapolation value itself, never a weighted input (which
    // would turn an infinite or NaN input into NaN there).
    vector<double> mask(t.outside.begin(), t.outside.end());
    Shape full = in;
    full[axis] = out;
    const Id fill = filled(c, n, dtype, extrapolation, full);
    if (acc < 0) return name.empty() ? fill : c.add_identity(fill, name);
    const Id where_outside = constant_input(c, n, "outside", Tensor::from_values(DType::boolean, along, mask));
    return c.add("where", {where_outside, fill, acc}, {}, name);
}

}  // namespace

void convert_resize(ImportContext& c, const onnx::NodeProto& n) {
    Id x = c.runtime(n.input(0));
    const Shape in = c.node_type(x).shape;
    const DType dtype = c.node_type(x).dtype;
    if (in.empty()) unsupported("input must have rank >= 1");
    for (auto d : in)
        if (d < 1) unsupported("input has an empty dimension, shape " + to_string(in));
    const ResizeSpec s = read_spec(c, n, in);
    // An int64 input's extrapolation value is truncated toward zero (as ONNX Runtime casts it).
    if (s.coordinates == "tf_crop_and_resize" && dtype == DType::int64 &&
        !(std::abs(s.extrapolation) < 9223372036854775808.0))
        unsupported("extrapolation_value " + std::to_string(s.extrapolation) + " is not an int64 value for an int64 input");
    if (s.mode != Mode::nearest && dtype != DType::float32 && dtype != DType::float64)
        unsupported("linear and cubic interpolation need a float input, got " + string(to_string(dtype)));
    // Every axis's index and weight constants stay in the graph: their entries are bounded in all.
    const std::int64_t taps = s.mode == Mode::nearest ? 1 : s.mode == Mode::linear ? 2 : 4;
    std::int64_t entries = 0;
    for (auto o : s.out) entries += o * taps;
    if (entries > (std::int64_t(1) << 24))
        unsupported("the interpolation tables would hold " + std::to_string(entries) + " entries (at most 2^24)");
    // The axes that change, last axis first. Each axis's tables are built, used and freed in turn
    // (twice: once to find the identity axes), so import memory stays one axis's worth.
    vector<std::size_t> steps;
    for (std::size_t a = in.size(); a-- > 0;)
        if (!is_identity(axis_taps(s, a, in[a]), in[a])) steps.push_back(a);
    if (steps.empty()) {
        c.define_node(n.output(0), c.add_identity(x, n.output(0)));
        return;
    }
    for (std::size_t k = 0; k < steps.size(); ++k)
        x = interpolate_axis(c, n, x, steps[k], axis_taps(s, steps[k], in[steps[k]]), s.extrapolation,
                             k + 1 == steps.size() ? n.output(0) : string());
    c.define_node(n.output(0), x);
}

}  // namespace capsule::onnx_import
