// ONNX's quantization ops (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger,
// MatMulInteger, QLinearConv, QLinearMatMul; opsets 10-13) as float BackendOps, following the
// formulas of the ONNX spec. Integer accumulations run in float64, where every sum of 8-bit
// products below 2^53 is exact, so they equal ONNX Runtime's int32 accumulation until int32
// itself would overflow (then the cast to int32 refuses the element instead of wrapping).
// Requantization rounds half to even (std::nearbyint, numpy.rint) and saturates to the output
// dtype's range, as ONNX Runtime does.
#include <array>
#include <cmath>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

DType dtype_of(ImportContext& c, Id id) { return c.node_type(id).dtype; }

Id cast(ImportContext& c, Id x, DType to) {
    if (dtype_of(c, x) == to) return x;
    return c.add("cast", {x}, {{"to", string(to_string(to))}});
}

/// The 8-bit dtype a quantized value may have (ONNX: uint8 or int8).
void require_8bit(DType dtype, const string& what) {
    if (dtype != DType::uint8 && dtype != DType::int8)
        unsupported(what + " has dtype " + string(to_string(dtype)) + "; quantized tensors are uint8 or int8");
}

/// `v` (a scalar, or a 1-D tensor as long as axis `axis` of `like`: per-axis quantization) shaped to
/// broadcast against a tensor of shape `like` along `axis` (in [-rank, rank), read only for a 1-D
/// `v`: a per-tensor scale leaves the default axis unused).
Id along_axis(ImportContext& c, Id v, const Shape& like, std::int64_t axis, const string& what) {
    const auto x_rank = static_cast<std::int64_t>(like.size());
    const Shape& s = shape_of(c, v);
    if (s.size() <= 1 && (s.empty() || s[0] == 1)) return v;
    if (s.size() != 1) unsupported(what + " must be a scalar or 1-D (per-axis), got shape " + to_string(s));
    axis = normalize_axis(axis, x_rank);
    if (const std::int64_t along = like[static_cast<std::size_t>(axis)]; s[0] != along)
        unsupported(what + " has " + std::to_string(s[0]) + " values for an axis of " + std::to_string(along));
    Shape target(static_cast<std::size_t>(x_rank), 1);
    target[static_cast<std::size_t>(axis)] = s[0];
    return c.add("reshape", {v}, {{"shape", target}});
}

/// The quantized range of `dtype` (uint8 [0, 255], int8 [-128, 127]).
std::pair<double, double> quantized_range(DType dtype) {
    return dtype == DType::uint8 ? std::pair{0.0, 255.0} : std::pair{-128.0, 127.0};
}

/// saturate(round_half_to_even(y) + zero_point) cast to `dtype` (ONNX QuantizeLinear's last step);
/// `y` and `zero_point` are floats of one dtype. The last node is named `name`.
Id requantize(ImportContext& c, const onnx::NodeProto& n, Id y, Id zero_point, DType dtype, const string& name) {
    const auto [lo, hi] = quantized_range(dtype);
    Id q = c.add("add", {round_half_to_even(c, n, y), zero_point});
    q = c.add("clamp", {q}, {{"min", lo}, {"max", hi}});
    return c.add("cast", {q}, {{"to", string(to_string(dtype))}}, name);
}

/// Input k as a runtime value, or the scalar 0 of `dtype` when it is absent (a zero point left out).
Id zero_point_or_zero(ImportContext& c, const onnx::NodeProto& n, int k, DType dtype) {
    const string name = input_name(n, k);
    return name.empty() ? scalar_constant(c, n, "zero_point", dtype, 0) : c.runtime(name);
}

/// A scale (input 1) and zero point (input 2): per tensor (one element), or before opset 13 never
/// anything else; from opset 13 also 1-D (per axis), the zero point of the scale's shape.
void check_scale_and_zero_point(ImportContext& c, const onnx::NodeProto& n, const string& of) {
    const Shape& scale = c.type(n.input(1)).shape;
    const bool per_tensor = element_count(scale) == 1 && scale.size() <= 1;
    if (!per_tensor && c.opset() < 13)
        unsupported(of + "_scale of shape " + to_string(scale) + ": per-axis quantization needs opset 13");
    if (!input_name(n, 2).empty() && c.type(n.input(2)).shape != scale &&
        !(per_tensor && element_count(c.type(n.input(2)).shape) == 1))
        unsupported(of + "_zero_point has shape " + to_string(c.type(n.input(2)).shape) + ", " + of + "_scale " +
                    to_string(scale));
}

/// The per-axis quantization axis (opset 13's `axis`, default 1; before, per-tensor only).
std::int64_t quantization_axis(ImportContext& c, const onnx::NodeProto& n) {
    return c.opset() >= 13 ? attr_int(n, "axis", 1) : 1;
}

/// ONNX QuantizeLinear: y = saturate(round(x / y_scale) + y_zero_point); y takes the zero point's
/// dtype (uint8 when it is absent). float32 x is divided in float32 as ONNX Runtime; int32 x in
/// float64.
void convert_quantize_linear(ImportContext& c, const onnx::NodeProto& n) {
    Id x = c.runtime(n.input(0));
    const DType xt = dtype_of(c, x);
    if (xt != DType::float32 && xt != DType::int32) unsupported("QuantizeLinear of " + string(to_string(xt)));
    const DType compute = xt == DType::float32 ? DType::float32 : DType::float64;
    const DType out = input_name(n, 2).empty() ? DType::uint8 : c.type(n.input(2)).dtype;
    require_8bit(out, "y_zero_point");
    const std::int64_t axis = quantization_axis(c, n);
    check_scale_and_zero_point(c, n, "y");
    const Shape like = shape_of(c, x);
    const Id scale = along_axis(c, cast(c, c.runtime(n.input(1)), compute), like, axis, "y_scale");
    const Id zp = along_axis(c, cast(c, zero_point_or_zero(c, n, 2, out), compute), like, axis, "y_zero_point");
    const Id y = c.add("div", {cast(c, x, compute), scale});
    c.define_node(n.output(0), requantize(c, n, y, zp, out, n.output(0)));
}

/// ONNX DequantizeLinear: y = (x - x_zero_point) · x_scale in float32 (8-bit and int32 x; an int32
/// x has no zero point, as the spec requires).
void convert_dequantize_linear(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = c.runtime(n.input(0));
    const DType xt = dtype_of(c, x);
    if (xt != DType::int32) require_8bit(xt, "x");
    const std::int64_t axis = quantization_axis(c, n);
    check_scale_and_zero_point(c, n, "x");
    const Shape like = shape_of(c, x);
    const Id scale = along_axis(c, c.runtime(n.input(1)), like, axis, "x_scale");
    if (dtype_of(c, scale) != DType::float32) unsupported("x_scale must be float32");
    Id centred = cast(c, x, DType::float32);
    if (!input_name(n, 2).empty()) {
        // x - zero_point exactly (in float64: int32 operands too), then rounded once to float32
        // as ONNX Runtime's static_cast<float>(x - zero_point).
        const Id zp = along_axis(c, cast(c, c.runtime(n.input(2)), DType::float64), like, axis, "x_zero_point");
        centred = cast(c, c.add("sub", {cast(c, x, DType::float64), zp}), DType::float32);
    }
    c.define_node(n.output(0), c.add("mul", {centred, scale}, {}, n.output(0)));
}

/// ONNX DynamicQuantizeLinear (uint8): x_min = min(0, min(x)), x_max = max(0, max(x)),
/// y_scale = (x_max - x_min) / 255, y_zero_point = saturate(round((0 - x_min) / y_scale)),
/// y = saturate(round(x / y_scale) + y_zero_point), all in float32 as the spec's function body;
/// scale 1 when the range is 0 (ONNX Runtime).
void convert_dynamic_quantize_linear(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = c.runtime(n.input(0));
    if (dtype_of(c, x) != DType::float32) unsupported("DynamicQuantizeLinear of " + string(to_string(dtype_of(c, x))));
    if (shape_of(c, x).empty()) unsupported("DynamicQuantizeLinear of a scalar");
    const Id zero = scalar_constant(c, n, "zero", DType::float32, 0);
    const Attributes all{{"keepdims", false}};
    const Id x_min = c.add("min", {c.add("reduce_min", {x}, all), zero});
    const Id x_max = c.add("max", {c.add("reduce_max", {x}, all), zero});
    const string& scale_name = n.output_size() > 1 && !n.output(1).empty() ? n.output(1) : string();
    // A range of 0 (x all zero, or empty) gives scale 1, y 0 and zero point 0, as ONNX Runtime,
    // instead of 0 / 0.
    const Id range = c.add("sub", {x_max, x_min});
    const Id scale = c.add("where", {c.add("equal", {range, zero}), scalar_constant(c, n, "one", DType::float32, 1),
                                     c.add("div", {range, scalar_constant(c, n, "qrange", DType::float32, 255)})},
                           {}, scale_name);
    const Id zp_float = c.add("clamp", {round_half_to_even(c, n, c.add("div", {c.add("sub", {zero, x_min}), scale}))},
                              {{"min", 0.0}, {"max", 255.0}});
    const string& zp_name = n.output_size() > 2 && !n.output(2).empty() ? n.output(2) : string();
    const Id zp = c.add("cast", {zp_float}, {{"to", string("uint8")}}, zp_name);
    c.define_node(n.output(0), requantize(c, n, c.add("div", {x, scale}), zp_float, DType::uint8, n.output(0)));
    if (!scale_name.empty()) c.define_node(scale_name, scale);
    if (!zp_name.empty()) c.define_node(zp_name, zp);
}

/// x - zero_point in float64 (the zero point absent: x), for an integer accumulation.
Id centred64(ImportContext& c, const onnx::NodeProto& n, Id x, int zp_input, std::int64_t axis,
             const string& what) {
    Id x64 = cast(c, x, DType::float64);
    if (input_name(n, zp_input).empty()) return x64;
    const Shape like = shape_of(c, x);
    const Id zp = along_axis(c, cast(c, c.runtime(n.input(zp_input)), DType::float64), like, axis, what);
    return c.add("sub", {x64, zp});
}

/// The constant weight w [M, C/group, k...] minus its zero point (a scalar, or one per output
/// channel M), as float64: the convolution's parameter.
Tensor centred_weight(ImportContext& c, const onnx::NodeProto& n, int w_input, int zp_input, const string& op) {
    const Tensor& w = c.constant(n.input(w_input), op + "'s weight w");
    require_8bit(w.dtype(), "w");
    vector<double> zps{0};
    if (!input_name(n, zp_input).empty()) {
        const Tensor& zp = c.constant(n.input(zp_input), op + "'s w_zero_point");
        zps.clear();
        for (std::int64_t i = 0; i < zp.numel(); ++i) zps.push_back(zp.at(i));
    }
    const std::int64_t channels = w.shape().empty() ? 1 : w.shape()[0];
    if (zps.size() != 1 && static_cast<std::int64_t>(zps.size()) != channels)
        unsupported("w_zero_point has " + std::to_string(zps.size()) + " values for " + std::to_string(channels) +
                    " output channels");
    vector<double> out(static_cast<std::size_t>(w.numel()));
    const std::int64_t per_channel = channels == 0 ? 0 : w.numel() / channels;
    for (std::int64_t i = 0; i < w.numel(); ++i)
        out[static_cast<std::size_t>(i)] = w.at(i) - zps[zps.size() == 1 ? 0 : static_cast<std::size_t>(i / per_channel)];
    return Tensor::from_values(DType::float64, w.shape(), out);
}

/// Σ (x - x_zero_point) ⋆ (w - w_zero_point) by the Conv converter on float64 (the node's conv
/// attributes: pads, strides, dilations, group, auto_pad, kernel_shape).
Id integer_conv(ImportContext& c, const onnx::NodeProto& n, int x_input, int xzp_input, int w_input, int wzp_input) {
    const Id x = c.runtime(n.input(x_input));
    require_8bit(dtype_of(c, x), "x");
    if (!input_name(n, xzp_input).empty() && c.type(n.input(xzp_input)).shape != Shape{} &&
        c.type(n.input(xzp_input)).shape != Shape{1})
        unsupported("x_zero_point must be a scalar (per-tensor)");
    onnx::NodeProto conv = n;
    conv.set_op_type("Conv");
    conv.set_domain("");
    conv.clear_input();
    conv.clear_output();
    const string x_name = c.fresh_value_name(n.output(0) + "#x_centred");
    c.define_node(x_name, centred64(c, n, x, xzp_input, 1, "x_zero_point"));
    const string w_name = c.fresh_value_name(n.output(0) + "#w_centred");
    c.define_constant(w_name, centred_weight(c, n, w_input, wzp_input, n.op_type()));
    const string y_name = c.fresh_value_name(n.output(0) + "#accumulated");
    conv.add_input(x_name);
    conv.add_input(w_name);
    conv.add_output(y_name);
    converters().at("Conv")(c, conv);
    return c.runtime(y_name);
}

/// ONNX ConvInteger: int32 y = (x - x_zero_point) ⋆ (w - w_zero_point); w must be a constant.
void convert_conv_integer(ImportContext& c, const onnx::NodeProto& n) {
    const Id acc = integer_conv(c, n, 0, 2, 1, 3);
    c.define_node(n.output(0), c.add("cast", {acc}, {{"to", string("int32")}}, n.output(0)));
}

/// ONNX MatMulInteger: int32 y = (a - a_zero_point) · (b - b_zero_point), NumPy matmul; a's zero
/// point may be one per row of a (shape [M]), b's one per column (shape [N]).
void convert_matmul_integer(ImportContext& c, const onnx::NodeProto& n) {
    const Id a = c.runtime(n.input(0)), b = c.runtime(n.input(1));
    require_8bit(dtype_of(c, a), "A");
    require_8bit(dtype_of(c, b), "B");
    const auto ra = static_cast<std::int64_t>(shape_of(c, a).size()), rb = static_cast<std::int64_t>(shape_of(c, b).size());
    if (ra < 2 || rb < 2) unsupported("MatMulInteger of rank < 2 operands");
    const Id a64 = centred64(c, n, a, 2, ra - 2, "a_zero_point");
    const Id b64 = centred64(c, n, b, 3, rb - 1, "b_zero_point");
    c.define_node(n.output(0), c.add("cast", {c.add("matmul", {a64, b64})}, {{"to", string("int32")}}, n.output(0)));
}

/// a_scale · b_scale / y_scale in float32 (ONNX Runtime's requantization multiplier), as float64,
/// each scale shaped along its own axis of the accumulation of shape `like` (QLinearMatMul: a's and
/// y's per row, b's per column; QLinearConv: w's per output channel).
Id requantization_scale(ImportContext& c, const onnx::NodeProto& n, const Shape& like,
                        const std::array<std::pair<int, std::int64_t>, 3>& scales_and_axes) {
    vector<Id> s;
    for (const auto& [k, axis] : scales_and_axes) {
        if (c.type(n.input(k)).dtype != DType::float32) unsupported("scales must be float32");
        s.push_back(along_axis(c, c.runtime(n.input(k)), like, axis, n.op_type() + " input " + std::to_string(k)));
    }
    return cast(c, c.add("div", {c.add("mul", {s[0], s[1]}), s[2]}), DType::float64);
}

/// ONNX QLinearMatMul: y = saturate(round((a - a_zp) · (b - b_zp) · a_scale · b_scale / y_scale)
/// + y_zp).
void convert_qlinear_matmul(ImportContext& c, const onnx::NodeProto& n) {
    const Id a = c.runtime(n.input(0)), b = c.runtime(n.input(3));
    require_8bit(dtype_of(c, a), "a");
    require_8bit(dtype_of(c, b), "b");
    const DType out = c.type(n.input(7)).dtype;
    require_8bit(out, "y_zero_point");
    const auto ra = static_cast<std::int64_t>(shape_of(c, a).size()), rb = static_cast<std::int64_t>(shape_of(c, b).size());
    if (ra < 2 || rb < 2) unsupported("QLinearMatMul of rank < 2 operands");
    const Id acc = c.add("matmul", {centred64(c, n, a, 2, ra - 2, "a_zero_point"),
                                    centred64(c, n, b, 5, rb - 1, "b_zero_point")});
    const Shape like = shape_of(c, acc);
    const auto rank = static_cast<std::int64_t>(like.size());
    const Id y = c.add("mul", {acc, requantization_scale(c, n, like, {{{1, rank - 2}, {4, rank - 1}, {6, rank - 2}}})});
    const Id zp = along_axis(c, cast(c, c.runtime(n.input(7)), DType::float64), like, rank - 2, "y_zero_point");
    c.define_node(n.output(0), requantize(c, n, y, zp, out, n.output(0)));
}

/// ONNX QLinearConv: y = saturate(round(((x - x_zp) ⋆ (w - w_zp) + B) · x_scale · w_scale /
/// y_scale) + y_zp); w (and its zero point) must be constants, B is int32 [M].
void convert_qlinear_conv(ImportContext& c, const onnx::NodeProto& n) {
    Id acc = integer_conv(c, n, 0, 2, 3, 5);
    const Shape like = shape_of(c, acc);
    // x_scale, y_scale and y_zero_point are per tensor (the spec); w's scale may be per channel.
    for (int k : {1, 6, 7})
        if (element_count(c.type(n.input(k)).shape) != 1) unsupported("QLinearConv input " + std::to_string(k) + " must be a scalar");
    if (!input_name(n, 8).empty()) {
        const Id bias = c.runtime(n.input(8));
        if (dtype_of(c, bias) != DType::int32) unsupported("B must be int32");
        acc = c.add("add", {acc, along_axis(c, cast(c, bias, DType::float64), like, 1, "B")});
    }
    const DType out = c.type(n.input(7)).dtype;
    require_8bit(out, "y_zero_point");
    const Id y = c.add("mul", {acc, requantization_scale(c, n, like, {{{1, 1}, {4, 1}, {6, 1}}})});
    const Id zp = cast(c, c.runtime(n.input(7)), DType::float64);
    c.define_node(n.output(0), requantize(c, n, y, zp, out, n.output(0)));
}

}  // namespace

void add_quantization_converters(std::map<string, Converter>& table) {
    table["QuantizeLinear"] = convert_quantize_linear;
    table["DequantizeLinear"] = convert_dequantize_linear;
    table["DynamicQuantizeLinear"] = convert_dynamic_quantize_linear;
    table["ConvInteger"] = convert_conv_integer;
    table["MatMulInteger"] = convert_matmul_integer;
    table["QLinearMatMul"] = convert_qlinear_matmul;
    table["QLinearConv"] = convert_qlinear_conv;
}

}  // namespace capsule::onnx_import
