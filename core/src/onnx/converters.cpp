// The ONNX op converters: one small function per ONNX op type, dispatching on the model's opset
// where the op's signature changed. Each maps the node to BackendOps (docs/onnx.md states every
// mapping and the conditions under which it is exact) or raises Unsupported with the reason. Ops
// are named by their BackendOp spelling: an op this build's vocabulary lacks is refused at import.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

Id constant_input(ImportContext& c, const onnx::NodeProto& n, const string& suffix, Tensor t) {
    const string name = c.fresh_value_name(n.output(0) + "#" + suffix);
    c.define_constant(name, std::move(t));
    return c.runtime(name);
}
Id scalar_constant(ImportContext& c, const onnx::NodeProto& n, const string& suffix, DType dtype, double v) {
    return constant_input(c, n, suffix, Tensor::from_values(dtype, {}, {v}));
}

Id slice_axis(ImportContext& c, Id x, std::int64_t axis, std::int64_t start, std::int64_t end, std::int64_t step,
               const string& name) {
    Attributes attrs{{"starts", vector<std::int64_t>{start}}, {"ends", vector<std::int64_t>{end}},
                     {"axes", vector<std::int64_t>{axis}}};
    if (step != 1) attrs["steps"] = vector<std::int64_t>{step};
    return c.add("slice", {x}, std::move(attrs), name);
}

std::pair<std::int64_t, std::int64_t> split_padding(std::int64_t total, bool smaller_first) {
    const std::int64_t small = total / 2, big = total - small;
    return smaller_first ? std::pair{small, big} : std::pair{big, small};
}

Id filled(ImportContext& c, const onnx::NodeProto& n, DType dtype, double v, const Shape& shape) {
    return c.add("broadcastTo", {scalar_constant(c, n, "fill", dtype, v)}, {{"shape", shape}});
}

Id round_half_to_even(ImportContext& c, const onnx::NodeProto& n, Id x, const string& name) {
    const DType dtype = c.node_type(x).dtype;
    const Id f = c.add("floor", {x});
    const Id frac = c.add("sub", {x, f});
    const Id half = scalar_constant(c, n, "half", dtype, 0.5), one = scalar_constant(c, n, "one", dtype, 1);
    const Id odd = c.add("equal", {c.add("mod", {f, scalar_constant(c, n, "two", dtype, 2)}, {{"fmod", false}}), one});
    const Id up = c.add("logical_or", {c.add("greater", {frac, half}), c.add("logical_and", {c.add("equal", {frac, half}), odd})});
    const Id rounded = c.add("where", {up, c.add("add", {f, one}), f});
    // A zero takes x's sign (numpy: round(-0.4) = -0.0); x · 0 is ±0 for every finite x, and
    // only finite x round to zero.
    const Id zero = scalar_constant(c, n, "zero", dtype, 0);
    return c.add("where", {c.add("equal", {rounded, zero}), c.add("mul", {x, zero}), rounded}, {}, name);
}

namespace {

const string& out0(const onnx::NodeProto& n) { return n.output(0); }
int present_outputs(const onnx::NodeProto& n) {
    int k = 0;
    for (const auto& o : n.output()) k += !o.empty();
    return k;
}
void only_first_output(const onnx::NodeProto& n, const string& what) {
    for (int k = 1; k < n.output_size(); ++k)
        if (!n.output(k).empty()) unsupported(what + " (output " + std::to_string(k) + ") is not supported");
}
Id x0(ImportContext& c, const onnx::NodeProto& n) { return c.runtime(n.input(0)); }
std::int64_t rank_of(ImportContext& c, Id id) { return static_cast<std::int64_t>(shape_of(c, id).size()); }
/// `out` is the same value as `in`. A graph input is materialised first, so the alias names the
/// same input node (constants stay constants and keep folding).
void alias(ImportContext& c, const string& out, const string& in) { c.define(out, c.bound(in)); }
Id reshape(ImportContext& c, Id x, const Shape& shape, const string& name = {}) {
    if (shape_of(c, x) == shape && name.empty()) return x;
    return c.add("reshape", {x}, {{"shape", shape}}, name);
}
double scalar_value(ImportContext& c, const string& name, const string& what) {
    const Tensor& t = c.constant(name, what);
    if (t.numel() != 1) unsupported(what + " must hold one value, got shape " + to_string(t.shape()));
    return t.at(0);
}

bool in_vocabulary(const string& op);
Id pad_spatial(ImportContext& c, Id x, const vector<std::int64_t>& begin, const vector<std::int64_t>& end, double value);

Converter unary(string op, Attributes attrs = {}) {
    return [op, attrs](ImportContext& c, const onnx::NodeProto& n) {
        c.define_node(out0(n), c.add(op, {x0(c, n)}, attrs, out0(n)));
    };
}
/// Before opset 7, binary ops broadcast only with `broadcast = 1`, aligning B at `axis`; without
/// `axis` that is NumPy's trailing alignment, which the BackendOps implement.
void legacy_broadcast_check(ImportContext& c, const onnx::NodeProto& n) {
    if (c.opset() < 7 && attr_int(n, "broadcast", 0) != 0 && find_attr(n, "axis")) {
        const auto rank_a = static_cast<std::int64_t>(c.type(n.input(0)).shape.size());
        const auto rank_b = static_cast<std::int64_t>(c.type(n.input(1)).shape.size());
        auto axis = attr_int(n, "axis", 0);
        if (axis < 0) axis += rank_a;
        if (axis + rank_b != rank_a) unsupported("legacy broadcast with axis (opset < 7) other than trailing alignment");
    }
}

Converter binary(string op) {
    return [op](ImportContext& c, const onnx::NodeProto& n) {
        legacy_broadcast_check(c, n);
        c.define_node(out0(n), c.add(op, {c.runtime(n.input(0)), c.runtime(n.input(1))}, {}, out0(n)));
    };
}
/// Max, Min, Sum: a left fold of the binary op (one input: identity).
Converter variadic(string op) {
    return [op](ImportContext& c, const onnx::NodeProto& n) {
        if (n.input_size() == 1) return alias(c, out0(n), n.input(0));
        Id acc = c.runtime(n.input(0));
        for (int k = 1; k < n.input_size(); ++k)
            acc = c.add(op, {acc, c.runtime(n.input(k))}, {}, k + 1 == n.input_size() ? out0(n) : string());
        c.define_node(out0(n), acc);
    };
}

/// ONNX Mod(A, B, fmod): BackendOp mod. The spec requires fmod = 1 for floating-point inputs
/// (a float Mod without it is invalid ONNX); mod computes torch.remainder there, so it is refused.
void convert_mod(ImportContext& c, const onnx::NodeProto& n) {
    const bool fmod = attr_int(n, "fmod", 0) != 0;
    Id a = c.runtime(n.input(0)), b = c.runtime(n.input(1));
    const DType dtype = c.node_type(a).dtype;
    if (!fmod && is_floating(dtype))
        unsupported("Mod on floating-point inputs needs fmod = 1 (ONNX: 'If the input type is floating point, then "
                    "fmod attribute must be set to 1')");
    c.define_node(out0(n), c.add("mod", {a, b}, {{"fmod", fmod}}, out0(n)));
}

/// ONNX Pow: `pow` when base and exponent share dtype float32 or float64. Otherwise (an integer or
/// 16-bit float operand, or
/// float32 with float64) as ONNX Runtime computes it, static_cast<T>(std::pow(double(x),
/// double(y))): both cast to float64, `pow`, and the result cast to the base's dtype T (an int64
/// result truncated toward zero; exact while it is below 2^53; one without an int64 value fails the
/// cast, naming the element).
void convert_pow(ImportContext& c, const onnx::NodeProto& n) {
    legacy_broadcast_check(c, n);
    Id x = c.runtime(n.input(0)), y = c.runtime(n.input(1));
    const DType base = c.node_type(x).dtype, exponent = c.node_type(y).dtype;
    if (base == exponent && (base == DType::float32 || base == DType::float64)) {
        c.define_node(out0(n), c.add("pow", {x, y}, {}, out0(n)));
        return;
    }
    if (base == DType::boolean || exponent == DType::boolean) unsupported("Pow of bool");
    const Attributes to_double{{"to", string("float64")}};
    if (base != DType::float64) x = c.add("cast", {x}, to_double);
    if (exponent != DType::float64) y = c.add("cast", {y}, to_double);
    if (base == DType::float64) {
        c.define_node(out0(n), c.add("pow", {x, y}, {}, out0(n)));
        return;
    }
    c.define_node(out0(n), c.add("cast", {c.add("pow", {x, y})}, {{"to", string(to_string(base))}}, out0(n)));
}

/// ONNX BitShift (unsigned integers): x << y as x · 2^y and x >> y as x / 2^y (truncating), with the
/// integer `pow` and `mul` wrapping modulo 2^bits, so a left shift by the width or more is 0; a
/// right shift by the width or more is 0 too (the divisor's exponent is clamped below the width,
/// where 2^y would wrap to 0, and such elements are then replaced by 0).
void convert_bit_shift(ImportContext& c, const onnx::NodeProto& n) {
    const string direction = attr_string(n, "direction", "");
    if (direction != "LEFT" && direction != "RIGHT") unsupported("BitShift direction '" + direction + "' (LEFT or RIGHT)");
    const Id x = c.runtime(n.input(0)), y = c.runtime(n.input(1));
    const DType dtype = c.node_type(x).dtype;
    if (dtype != DType::uint8 && dtype != DType::uint16 && dtype != DType::uint32 && dtype != DType::uint64)
        unsupported("BitShift of " + string(to_string(dtype)) + " (ONNX allows unsigned integers)");
    const Id two = scalar_constant(c, n, "two", dtype, 2);
    if (direction == "LEFT") {
        c.define_node(out0(n), c.add("mul", {x, c.add("pow", {two, y})}, {}, out0(n)));
        return;
    }
    const double width = 8.0 * static_cast<double>(dtype_size(dtype));
    const Id divisor = c.add("pow", {two, c.add("clamp", {y}, {{"max", static_cast<std::int64_t>(width) - 1}})});
    const Id shifted_out = c.add("greater_equal", {y, scalar_constant(c, n, "width", dtype, width)});
    c.define_node(out0(n), c.add("where", {shifted_out, scalar_constant(c, n, "zero", dtype, 0), c.add("div", {x, divisor})},
                                 {}, out0(n)));
}

/// ONNX TopK: Indices = `top_k` (k from the K input, opset ≥ 10, or the `k` attribute), Values =
/// gather_elements(X, Indices) along axis. `sorted` = 0 allows any order; the sorted one is given.
void convert_top_k(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const auto rank = rank_of(c, x);
    if (rank == 0) unsupported("TopK of a scalar");
    const std::int64_t axis = normalize_axis(attr_int(n, "axis", -1), rank);
    const std::int64_t k = c.opset() >= 10 ? scalar_int(c, n.input(1), "TopK's K") : attr_int(n, "k", -1);
    const Id indices = c.add("top_k", {x}, {{"k", k}, {"axis", axis}, {"largest", attr_int(n, "largest", 1) != 0}},
                             n.output_size() > 1 && !n.output(1).empty() ? n.output(1) : string());
    if (n.output_size() > 1 && !n.output(1).empty()) c.define_node(n.output(1), indices);
    if (!n.output(0).empty())
        c.define_node(out0(n), c.add("gather_elements", {x, indices}, {{"axis", axis}}, out0(n)));
}

/// The number of entries of `padded` (an int64 index tensor whose unused entries are -1) along
/// `axis` that are used: the count of non-negative values in the first slice across `axis`
/// (each used entry's first index is >= 0), summed exactly in float64, as an int64 scalar.
Id used_entries(ImportContext& c, const onnx::NodeProto& n, Id padded, std::int64_t axis) {
    const Id first = slice_axis(c, padded, 1 - axis, 0, 1);
    const Id used = c.add("greater_equal", {first, scalar_constant(c, n, "zero", DType::int64, 0)});
    const Id total = c.add("reduce_sum", {c.add("cast", {used}, {{"to", string("float64")}})});
    return c.add("cast", {total}, {{"to", string("int64")}});
}

/// ONNX NonMaxSuppression (opsets 10, 11): BackendOp `non_max_suppression`, its optional inputs
/// max_output_boxes_per_class (default 0: nothing selected), iou_threshold (0) and
/// score_threshold (none) known at import. The node computes an upper bound of
/// [batches · classes · min(max_output_boxes_per_class, boxes), 3] rows, the unused ones -1; the
/// output's length is marked (Graph::output_lengths), so only a graph output may read it.
void convert_non_max_suppression(ImportContext& c, const onnx::NodeProto& n) {
    const Id boxes = c.runtime(n.input(0)), scores = c.runtime(n.input(1));
    const string per_class = input_name(n, 2), iou = input_name(n, 3), score = input_name(n, 4);
    auto scalar = [&](const string& name, const string& what) {
        const Tensor& t = c.constant(name, "NonMaxSuppression's " + what);
        if (t.numel() != 1) unsupported("NonMaxSuppression's " + what + " must hold one value, got shape " + to_string(t.shape()));
        return t.at(0);
    };
    Attributes attrs{{"max_output_boxes_per_class",
                      per_class.empty() ? std::int64_t{0} : scalar_int(c, per_class, "NonMaxSuppression's max_output_boxes_per_class")},
                     {"center_point_box", attr_int(n, "center_point_box", 0)}};
    if (!iou.empty()) attrs["iou_threshold"] = scalar(iou, "iou_threshold");
    if (!score.empty()) attrs["score_threshold"] = scalar(score, "score_threshold");
    const Id selected = c.add("non_max_suppression", {boxes, scores}, attrs, out0(n));
    c.define_node_with_length(out0(n), selected, {0, used_entries(c, n, selected, 0)});
}

/// ONNX NonZero: BackendOp `non_zero`, [rank, numel] with the unused columns -1; the output's
/// length along axis 1 is marked (Graph::output_lengths), so only a graph output may read it.
void convert_non_zero(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    if (rank_of(c, x) == 0) unsupported("NonZero of a scalar");
    const Id indices = c.add("non_zero", {x}, {}, out0(n));
    c.define_node_with_length(out0(n), indices, {1, used_entries(c, n, indices, 1)});
}

/// ONNX Det: BackendOp `det` over the last two axes.
void convert_det(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), c.add("det", {x0(c, n)}, {}, out0(n)));
}

void convert_mean(ImportContext& c, const onnx::NodeProto& n) {
    Id acc = c.runtime(n.input(0));
    for (int k = 1; k < n.input_size(); ++k) acc = c.add("add", {acc, c.runtime(n.input(k))});
    c.define_node(out0(n), c.add("scale", {acc}, {{"factor", 1.0 / n.input_size()}}, out0(n)));
}

void convert_identity(ImportContext& c, const onnx::NodeProto& n) { alias(c, out0(n), n.input(0)); }

void convert_dropout(ImportContext& c, const onnx::NodeProto& n) {
    // Inference: the output is the input and the mask (opset ≥ 12: bool) is all true.
    if (n.output_size() > 1 && !n.output(1).empty()) {
        if (c.opset() < 12) unsupported("Dropout's mask output before opset 12 (not bool)");
        const Shape shape = c.type(n.input(0)).shape;
        Tensor ones = Tensor::zeros(DType::boolean, shape);
        for (auto& b : ones.values<unsigned char>()) b = 1;
        c.define_constant(n.output(1), ones);
    }
    // Training mode drops at random, except with ratio 0 (then it is the identity, as inference).
    if (c.opset() >= 12 && !input_name(n, 2).empty() && scalar_value(c, n.input(2), "Dropout's training_mode") != 0 &&
        (input_name(n, 1).empty() || scalar_value(c, n.input(1), "Dropout's ratio") != 0))
        unsupported("Dropout in training mode (random) is not supported");
    if (c.opset() < 7 && attr_int(n, "is_test", 0) == 0) unsupported("Dropout with is_test = 0");
    alias(c, out0(n), n.input(0));
}

void convert_clip(ImportContext& c, const onnx::NodeProto& n) {
    Attributes attrs;
    if (c.opset() < 11) {
        if (find_attr(n, "min")) attrs["min"] = double(attr_float(n, "min", 0));
        if (find_attr(n, "max")) attrs["max"] = double(attr_float(n, "max", 0));
    } else {
        // Integer bounds are read exactly (through double, int64 bounds beyond 2^53 would round);
        // a uint64 bound beyond int64 is refused by scalar_int.
        const bool integer = is_integer(c.node_type(x0(c, n)).dtype);
        auto bound = [&](int k, const char* what) -> AttrValue {
            if (integer) return scalar_int(c, n.input(k), what);
            return scalar_value(c, n.input(k), what);
        };
        if (!input_name(n, 1).empty()) attrs["min"] = bound(1, "Clip's min");
        if (!input_name(n, 2).empty()) attrs["max"] = bound(2, "Clip's max");
    }
    if (attrs.empty()) return alias(c, out0(n), n.input(0));
    c.define_node(out0(n), c.add("clamp", {x0(c, n)}, attrs, out0(n)));
}

void convert_neg(ImportContext& c, const onnx::NodeProto& n) {
    // Floats: -x is exact as x * -1 in IEEE arithmetic. Integers: `neg`, modulo 2^bits.
    const Id x = x0(c, n);
    if (is_integer(c.node_type(x).dtype)) return c.define_node(out0(n), c.add("neg", {x}, {}, out0(n)));
    c.define_node(out0(n), c.add("scale", {x}, {{"factor", -1.0}}, out0(n)));
}

void convert_prelu(ImportContext& c, const onnx::NodeProto& n) {
    // prelu(x) = relu(x) + slope * min(x, 0): for x ≥ 0 the second term is ±0, for x < 0 the first is 0.
    Id x = x0(c, n), slope = c.runtime(n.input(1));
    const auto dtype = c.node_type(x).dtype;
    // Before opset 7 a 1-D slope of C entries is per channel (axis 1), as PyTorch's PReLU exports it.
    const Shape& xs = shape_of(c, x);
    const Shape& ss = shape_of(c, slope);
    if (c.opset() < 7 && ss.size() == 1 && xs.size() > 2 && ss[0] == xs[1] && ss[0] != 1) {
        Shape per_channel(xs.size() - 1, 1);
        per_channel[0] = ss[0];
        slope = reshape(c, slope, per_channel);
    }
    const Id zero = scalar_constant(c, n, "zero", dtype, 0);
    Id pos = c.add("relu", {x});
    Id neg = c.add("mul", {slope, c.add("min", {x, zero})});
    c.define_node(out0(n), c.add("add", {pos, neg}, {}, out0(n)));
}

void convert_softmax_like(ImportContext& c, const onnx::NodeProto& n, const string& op) {
    Id x = x0(c, n);
    const auto rank = rank_of(c, x);
    if (c.opset() >= 13) {
        auto axis = attr_int(n, "axis", -1);
        c.define_node(out0(n), c.add(op, {x}, {{"axis", axis}}, out0(n)));
        return;
    }
    // Before opset 13 the input is coerced to 2-D [prod(:axis), prod(axis:)]; softmax over the
    // second dimension, then back. Exact (reshapes move no values).
    auto axis = normalize_axis(attr_int(n, "axis", 1), rank);
    const Shape& in = shape_of(c, x);
    const std::int64_t a = element_count(Shape(in.begin(), in.begin() + axis));
    const std::int64_t b = element_count(Shape(in.begin() + axis, in.end()));
    if (axis == rank - 1 || rank <= 1) {
        c.define_node(out0(n), c.add(op, {x}, {{"axis", std::int64_t(-1)}}, out0(n)));
        return;
    }
    Id flat = reshape(c, x, {a, b});
    Id y = c.add(op, {flat}, {{"axis", std::int64_t(1)}});
    c.define_node(out0(n), reshape(c, y, in, out0(n)));
}

void convert_reshape_like(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    Shape target = reshape_target(c, n, shape_of(c, x));
    if (target == shape_of(c, x)) return alias(c, out0(n), n.input(0));
    c.define_node(out0(n), c.add("reshape", {x}, {{"shape", target}}, out0(n)));
}

void convert_transpose(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const auto rank = rank_of(c, x);
    vector<std::int64_t> perm;
    if (auto p = attr_ints(n, "perm")) perm = *p;
    else for (std::int64_t k = rank - 1; k >= 0; --k) perm.push_back(k);
    bool identity = true;
    for (std::size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == std::int64_t(k);
    if (identity && static_cast<std::int64_t>(perm.size()) == rank) return alias(c, out0(n), n.input(0));
    c.define_node(out0(n), c.add("permute", {x}, {{"dims", perm}}, out0(n)));
}

void convert_expand(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    auto target = int_values(c.constant(n.input(1), "Expand's shape"));
    Shape out = broadcast_shapes(shape_of(c, x), Shape(target.begin(), target.end()));
    if (out == shape_of(c, x)) return alias(c, out0(n), n.input(0));
    c.define_node(out0(n), c.add("broadcastTo", {x}, {{"shape", out}}, out0(n)));
}

void convert_concat(ImportContext& c, const onnx::NodeProto& n) {
    vector<Id> xs;
    for (int k = 0; k < n.input_size(); ++k)
        if (!n.input(k).empty()) xs.push_back(c.runtime(n.input(k)));
    if (xs.size() == 1) return alias(c, out0(n), n.input(0));
    const auto rank = rank_of(c, xs[0]);
    const auto axis = normalize_axis(attr_int(n, "axis", 0), rank);
    Id y;
    try {
        parse<BackendOp>("concat");
        y = c.add("concat", xs, {{"axis", axis}}, out0(n));
    } catch (const Error&) {
        if (axis != 0) unsupported("Concat on axis " + std::to_string(axis) + " needs BackendOp 'concat'");
        y = c.add("concat_leading_axis", xs, {}, out0(n));
    }
    c.define_node(out0(n), y);
}

void convert_matmul(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), c.add("matmul", {c.runtime(n.input(0)), c.runtime(n.input(1))}, {}, out0(n)));
}

Tensor transposed2d(const Tensor& t) {
    if (t.shape().size() != 2) unsupported("Gemm operand must be 2-D, got " + to_string(t.shape()));
    const auto r = t.shape()[0], k = t.shape()[1];
    Tensor out = Tensor::zeros(t.dtype(), {k, r});
    const auto es = dtype_size(t.dtype());
    auto* dst = static_cast<unsigned char*>(out.data());
    const auto* src = static_cast<const unsigned char*>(t.data());
    for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < k; ++j) std::memcpy(dst + (j * r + i) * es, src + (i * k + j) * es, es);
    return out;
}

Tensor scaled(const Tensor& t, double factor) {
    auto values = t.to_doubles();
    for (auto& v : values) v *= factor;
    return Tensor::from_values(t.dtype(), t.shape(), values);
}

void convert_gemm(ImportContext& c, const onnx::NodeProto& n) {
    const double alpha = attr_float(n, "alpha", 1.0f), beta = attr_float(n, "beta", 1.0f);
    const bool trans_a = attr_int(n, "transA", 0) != 0, trans_b = attr_int(n, "transB", 0) != 0;
    const string a_name = n.input(0), b_name = n.input(1), c_name = input_name(n, 2);
    Id a = c.runtime(a_name);
    if (rank_of(c, a) != 2) unsupported("Gemm's A must be 2-D");
    if (trans_a) a = c.add("transpose2d", {a});
    const auto& bt = c.type(b_name);
    if (bt.shape.size() != 2) unsupported("Gemm's B must be 2-D");
    const std::int64_t n_out = trans_b ? bt.shape[0] : bt.shape[1];
    // C, if present: a constant becomes beta*C at import; a runtime C is scaled by a node.
    // linear: y = A·Wᵀ + bias, exact for Gemm when alpha = 1, B is a constant (W = B if transB,
    // else Bᵀ transposed at import) and C is absent or a constant with N elements ([N], [1, N]).
    const bool c_const = !c_name.empty() && c.is_constant(c_name);
    const bool c_vector = c_const && c.constant(c_name, "C").numel() == n_out &&
                          (c.type(c_name).shape.size() == 1 ||
                           (c.type(c_name).shape.size() == 2 && c.type(c_name).shape[0] == 1));
    if (alpha == 1.0 && c.is_constant(b_name) && (c_name.empty() || c_vector)) {
        const string w_name = c.fresh_value_name(out0(n) + "#W"), bias_name = c.fresh_value_name(out0(n) + "#b");
        Tensor w = c.constant(b_name, "Gemm's B");
        c.define_constant(w_name, trans_b ? w : transposed2d(w));
        vector<string> params{w_name};
        if (!c_name.empty()) {
            Tensor bias = c.constant(c_name, "Gemm's C");
            c.define_constant(bias_name, beta == 1.0 ? bias : scaled(bias, beta));
            params.push_back(bias_name);
        }
        Id y = c.add("linear", {a}, {{"out_features", n_out}, {"bias", !c_name.empty()}}, out0(n));
        c.bind_parameters(y, params);
        c.define_node(out0(n), y);
        return;
    }
    // General form: alpha * (A' · B') + beta * C with matmul, scale and add.
    Id b;
    if (c.is_constant(b_name) && trans_b) {
        b = constant_input(c, n, "Bt", transposed2d(c.constant(b_name, "B")));
    } else {
        b = c.runtime(b_name);
        if (trans_b) b = c.add("transpose2d", {b});
    }
    Id y = c.add("matmul", {a, b}, {}, c_name.empty() && alpha == 1.0 ? out0(n) : string());
    if (alpha != 1.0) y = c.add("scale", {y}, {{"factor", alpha}}, c_name.empty() ? out0(n) : string());
    if (!c_name.empty()) {
        Id cc;
        if (c_const && beta != 1.0) {
            cc = constant_input(c, n, "C", scaled(c.constant(c_name, "C"), beta));
        } else {
            cc = c.runtime(c_name);
            if (beta != 1.0) cc = c.add("scale", {cc}, {{"factor", beta}});
        }
        y = c.add("add", {y, cc}, {}, out0(n));
    }
    c.define_node(out0(n), y);
}

/// Conv / pool window attributes resolved for `spatial` dims: kernel, stride, dilation, and
/// begin/end pads (auto_pad applied).
Window window(const onnx::NodeProto& n, const Shape& in, const vector<std::int64_t>& kernel, bool stride_default_one = true) {
    const std::size_t sp = kernel.size();
    Window w;
    w.kernel = kernel;
    w.stride = attr_ints(n, "strides").value_or(vector<std::int64_t>(sp, 1));
    w.dilation = attr_ints(n, "dilations").value_or(vector<std::int64_t>(sp, 1));
    (void)stride_default_one;
    auto pads = attr_ints(n, "pads").value_or(vector<std::int64_t>(2 * sp, 0));
    if (w.stride.size() != sp || w.dilation.size() != sp || pads.size() != 2 * sp)
        unsupported("strides, dilations or pads do not match the kernel's rank");
    // Checked here for every converter: ONNX's own checks may not have run (a node whose input
    // rank inference could not tell), and these values size divisions and products.
    constexpr std::int64_t kBound = std::int64_t(1) << 30;
    for (std::size_t k = 0; k < sp; ++k)
        if (w.kernel[k] < 1 || w.kernel[k] > kBound || w.stride[k] < 1 || w.stride[k] > kBound || w.dilation[k] < 1 ||
            w.dilation[k] > kBound)
            unsupported("kernel_shape, strides and dilations must be in [1, 2^30], got kernel " + std::to_string(w.kernel[k]) +
                        ", stride " + std::to_string(w.stride[k]) + ", dilation " + std::to_string(w.dilation[k]));
    for (auto p : pads)
        if (p < 0 || p > kBound) unsupported("pads must be in [0, 2^30], got " + std::to_string(p));
    w.pad_begin.assign(pads.begin(), pads.begin() + sp);
    w.pad_end.assign(pads.begin() + sp, pads.end());
    const string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    if (auto_pad == "VALID") {
        w.pad_begin.assign(sp, 0);
        w.pad_end.assign(sp, 0);
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        for (std::size_t k = 0; k < sp; ++k) {
            const auto size = in[2 + k];
            const auto out = (size + w.stride[k] - 1) / w.stride[k];
            const auto total = std::max<std::int64_t>(0, (out - 1) * w.stride[k] + (w.kernel[k] - 1) * w.dilation[k] + 1 - size);
            std::tie(w.pad_begin[k], w.pad_end[k]) = split_padding(total, auto_pad == "SAME_UPPER");
        }
    } else if (auto_pad != "NOTSET") {
        unsupported("auto_pad '" + auto_pad + "'");
    }
    return w;
}

bool symmetric(const Window& w) { return w.pad_begin == w.pad_end; }

void convert_conv(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    const auto& wt = c.type(n.input(1));
    if (in.size() < 3 || in.size() > 5)
        unsupported("Conv with " + std::to_string(int(in.size()) - 2) + " spatial dimensions (1-D, 2-D and 3-D are supported)");
    if (wt.shape.size() != in.size()) unsupported("Conv weight rank differs from the input's");
    vector<std::int64_t> kernel(wt.shape.begin() + 2, wt.shape.end());
    if (auto ks = attr_ints(n, "kernel_shape"); ks && *ks != kernel)
        unsupported("kernel_shape differs from the weight's shape");
    Window w = window(n, in, kernel);
    if (in.size() == 5) {
        c.define_node(out0(n), conv3d_by_depth_slices(c, x, w, attr_int(n, "group", 1), n.input(1), input_name(n, 2), out0(n)));
        return;
    }
    if (!symmetric(w)) {
        // Zero padding first, then the convolution without padding: the same sums.
        if (!in_vocabulary("pad")) unsupported("asymmetric padding needs BackendOp 'pad'");
        x = pad_spatial(c, x, w.pad_begin, w.pad_end, 0.0);
        w.pad_begin.assign(kernel.size(), 0);
    }
    const bool has_bias = !input_name(n, 2).empty();
    Attributes attrs{{"out_channels", wt.shape[0]}, {"kernel_size", kernel}, {"stride", w.stride},
                     {"padding", w.pad_begin}, {"dilation", w.dilation},
                     {"groups", attr_int(n, "group", 1)}, {"bias", has_bias}};
    Id y = c.add(in.size() == 4 ? "conv2d" : "conv", {x}, attrs, out0(n));
    vector<string> params{n.input(1)};
    if (has_bias) params.push_back(n.input(2));
    c.bind_parameters(y, params);
    c.define_node(out0(n), y);
}

/// The begin and end cropping of a ConvTranspose whose full output (no padding) has `full` entries
/// along an axis and must have `target`: the ONNX spec's split of the total padding (SAME_UPPER:
/// the smaller half first; otherwise the larger half first; ONNX Runtime 1.30 agrees). A
/// target beyond the full output is more output_padding at the end (`extra`): zeros past the last
/// input, plus the bias, as the ONNX backend data and ONNX Runtime.
struct TransposeCrop {
    std::int64_t begin = 0, end = 0, extra = 0;
};
TransposeCrop transpose_crop(std::int64_t full, std::int64_t target, bool same_upper) {
    const std::int64_t total = full - target;
    if (total < 0) return {0, 0, -total};
    const auto [begin, end] = split_padding(total, same_upper);
    return {begin, end, 0};
}

/// ConvTranspose: symmetric pads directly; asymmetric pads, auto_pad SAME_* (output = input ·
/// stride) and output_shape as the unpadded transposed convolution, cropped by `slice`.
void convert_conv_transpose(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    const auto& wt = c.type(n.input(1));
    if (in.size() != 3 && in.size() != 4) unsupported("ConvTranspose with other than 1 or 2 spatial dimensions");
    if (wt.shape.size() != in.size()) unsupported("ConvTranspose weight rank differs from the input's");
    vector<std::int64_t> kernel(wt.shape.begin() + 2, wt.shape.end());
    if (auto ks = attr_ints(n, "kernel_shape"); ks && *ks != kernel)
        unsupported("kernel_shape differs from the weight's shape");
    const auto sp = kernel.size();
    const string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (!same && auto_pad != "NOTSET" && auto_pad != "VALID") unsupported("auto_pad '" + auto_pad + "'");
    Window w = same ? Window{kernel, attr_ints(n, "strides").value_or(vector<std::int64_t>(sp, 1)),
                             attr_ints(n, "dilations").value_or(vector<std::int64_t>(sp, 1)),
                             vector<std::int64_t>(sp, 0), vector<std::int64_t>(sp, 0)}
                    : window(n, in, kernel);
    if (w.stride.size() != sp || w.dilation.size() != sp) unsupported("strides or dilations do not match the kernel's rank");
    auto out_pad = attr_ints(n, "output_padding").value_or(vector<std::int64_t>(sp, 0));
    if (out_pad.size() != sp) unsupported("output_padding does not match the kernel's rank");
    for (auto p : out_pad)
        if (p < 0 || p > (std::int64_t(1) << 30)) unsupported("output_padding must be in [0, 2^30], got " + std::to_string(p));
    auto output_shape = attr_ints(n, "output_shape");
    if (output_shape && output_shape->size() == sp + 2) output_shape->erase(output_shape->begin(), output_shape->begin() + 2);
    if (output_shape && output_shape->size() != sp) unsupported("output_shape does not match the kernel's rank");
    const bool cropped = same || output_shape || !symmetric(w);
    vector<TransposeCrop> crops(sp);
    if (cropped) {
        for (std::size_t a = 0; a < sp; ++a) {
            const auto s = w.stride[a], d = w.dilation[a], len = in[2 + a];
            if (s < 1 || d < 1 || kernel[a] < 1 || len > (std::int64_t(1) << 40) || s > (std::int64_t(1) << 20) || d > (std::int64_t(1) << 20))
                unsupported("strides, dilations and kernel must be >= 1 (and below 2^20)");
            const std::int64_t full = s * (len - 1) + out_pad[a] + (kernel[a] - 1) * d + 1;
            if (output_shape || same) {
                const std::int64_t target = output_shape ? (*output_shape)[a] : len * s;
                if (target < 1) unsupported("output_shape entries must be >= 1");
                crops[a] = transpose_crop(full, target, auto_pad == "SAME_UPPER");
                // SAME with a full output shorter than input · stride (a dilated kernel shorter
                // than the stride) keeps the full output, as ONNX's shape inference and Runtime.
                if (!output_shape) crops[a].extra = 0;
                if (crops[a].extra > 0 && out_pad[a] + crops[a].extra >= std::max(s, d))
                    unsupported("output_shape " + std::to_string(target) + " on spatial axis " + std::to_string(a) +
                                " exceeds the full output " + std::to_string(full) + " by more than output_padding may (below the stride or the dilation)");
            } else {
                if (w.pad_begin[a] < 0 || w.pad_end[a] < 0) unsupported("pads must be >= 0");
                crops[a] = {w.pad_begin[a], w.pad_end[a], 0};
            }
            out_pad[a] += crops[a].extra;
        }
        w.pad_begin.assign(sp, 0);
    }
    const auto group = attr_int(n, "group", 1);
    const bool has_bias = !input_name(n, 2).empty();
    Attributes attrs{{"out_channels", wt.shape[1] * group}, {"kernel_size", kernel}, {"stride", w.stride},
                     {"padding", w.pad_begin}, {"dilation", w.dilation}, {"groups", group},
                     {"bias", has_bias}, {"output_padding", out_pad}};
    Id y = c.add(sp == 2 ? "conv_transpose2d" : "conv_transpose", {x}, attrs, cropped ? string() : out0(n));
    vector<string> params{n.input(1)};
    if (has_bias) params.push_back(n.input(2));
    c.bind_parameters(y, params);
    if (cropped) {
        const Shape full = shape_of(c, y);
        vector<std::int64_t> starts, ends, axes;
        for (std::size_t a = 0; a < sp; ++a) {
            starts.push_back(crops[a].begin);
            ends.push_back(full[2 + a] - crops[a].end);
            axes.push_back(static_cast<std::int64_t>(2 + a));
            if (ends.back() <= starts.back()) unsupported("the padding crops the whole output along spatial axis " + std::to_string(a));
        }
        y = c.add("slice", {y}, {{"starts", starts}, {"ends", ends}, {"axes", axes}}, out0(n));
    }
    c.define_node(out0(n), y);
}

/// MaxPool / AveragePool: 2-D directly, 1-D through a [N, C, 1, L] view (exact: a 1×k window);
/// 3 or more spatial axes, dilations, and averages over asymmetric padding without
/// count_include_pad or with ceil_mode as strided slices (pool_by_slices).
void convert_pool(ImportContext& c, const onnx::NodeProto& n, bool is_max) {
    Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    if (in.size() < 3) unsupported(n.op_type() + " input must have spatial dimensions, got rank " + std::to_string(in.size()));
    auto kernel = attr_ints(n, "kernel_shape");
    if (!kernel) unsupported("missing kernel_shape");
    if (kernel->size() + 2 != in.size())
        unsupported("kernel_shape has " + std::to_string(kernel->size()) + " entries for an input of rank " + std::to_string(in.size()));
    Window w = window(n, in, *kernel);
    const bool ceil_mode = attr_int(n, "ceil_mode", 0) != 0;
    const bool include_pad = attr_int(n, "count_include_pad", 0) != 0;
    bool over_half = false, dilated = false, pad_reaches_kernel = false;
    for (std::size_t k = 0; k < w.kernel.size(); ++k) {
        over_half = over_half || 2 * w.pad_begin[k] > w.kernel[k];
        dilated = dilated || w.dilation[k] != 1;
        pad_reaches_kernel = pad_reaches_kernel || w.pad_begin[k] >= w.kernel[k] || w.pad_end[k] >= w.kernel[k];
    }
    const bool padded_first = !symmetric(w) || over_half;
    const auto storage_order = attr_int(n, "storage_order", 0);
    if (storage_order != 0 && storage_order != 1) unsupported("storage_order " + std::to_string(storage_order) + " (0: row major, 1: column major)");
    if (is_max && n.output_size() > 1 && !n.output(1).empty()) {  // with Indices
        const auto [values, indices] = max_pool_with_indices(c, n, x, w, ceil_mode, storage_order == 1, out0(n), n.output(1));
        if (!out0(n).empty()) c.define_node(out0(n), values);
        c.define_node(n.output(1), indices);
        return;
    }
    // Padding first keeps every window only without ceil_mode (whose rule drops a window starting
    // in the right padding, which a padded input no longer tells apart) and while every window
    // still touches the input (pads below the kernel); averages also need count_include_pad.
    if (in.size() > 4 || dilated ||
        (padded_first && (ceil_mode || pad_reaches_kernel || (!is_max && !include_pad)))) {
        c.define_node(out0(n), pool_by_slices(c, n, x, w, is_max, ceil_mode, include_pad, out0(n)));
        return;
    }
    if (padded_first) {
        // Pad first (−∞ for max, 0 for an average that counts the padding), then pool without
        // padding: every window sees the same values.
        if (!in_vocabulary("pad")) unsupported("asymmetric padding needs BackendOp 'pad'");
        x = pad_spatial(c, x, w.pad_begin, w.pad_end, is_max ? -std::numeric_limits<double>::infinity() : 0.0);
        w.pad_begin.assign(w.kernel.size(), 0);
    }
    Id src = x;
    const Shape padded = shape_of(c, x);
    if (in.size() == 3) {
        src = reshape(c, x, {padded[0], padded[1], 1, padded[2]});
        w.kernel.insert(w.kernel.begin(), 1);
        w.stride.insert(w.stride.begin(), 1);
        w.pad_begin.insert(w.pad_begin.begin(), 0);
    }
    Attributes attrs{{"kernel_size", w.kernel}, {"stride", w.stride}, {"padding", w.pad_begin},
                     {"ceil_mode", ceil_mode}};
    if (!is_max) attrs["count_include_pad"] = include_pad;
    const bool direct = in.size() == 4;
    Id y = c.add(is_max ? "max_pool2d_pad" : "avg_pool2d_pad", {src}, attrs, direct ? out0(n) : string());
    if (!direct) {
        const auto& s = shape_of(c, y);
        y = reshape(c, y, {s[0], s[1], s[3]}, out0(n));
    }
    c.define_node(out0(n), y);
}

/// ONNX MaxUnpool: zeros of the output shape with each X value written at its flat index I
/// (`scatter_elements` over the flattened output; an index outside it fails the kernel, naming
/// it). The shape is output_shape when given (a constant), else (in − 1)·stride + kernel − pads per
/// spatial axis. With output_shape the indices address that shape directly, as ONNX Runtime
/// (microsoft/onnxruntime#2193) and PyTorch's max_unpool2d(output_size); ONNX 1.12's backend case
/// for it pads instead (onnx/onnx#2398) and is listed as disputed by `capsule onnx-test`.
void convert_max_unpool(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    if (in.size() < 3) unsupported("input must have spatial dimensions, got shape " + to_string(in));
    const Id indices = c.runtime(n.input(1));
    if (shape_of(c, indices) != in) unsupported("I has shape " + to_string(shape_of(c, indices)) + ", X " + to_string(in));
    auto kernel = attr_ints(n, "kernel_shape");
    if (!kernel || kernel->size() + 2 != in.size()) unsupported("kernel_shape must have one entry per spatial axis");
    Shape out{in[0], in[1]};
    if (const string given = input_name(n, 2); !given.empty()) {
        out.clear();
        for (auto v : int_values(c.constant(given, "MaxUnpool output_shape"))) out.push_back(v);
        if (out.size() != in.size() || out[0] != in[0] || out[1] != in[1])
            unsupported("output_shape " + to_string(out) + " does not keep the input's rank, N and C");
    } else {
        const Window w = window(n, in, *kernel);
        for (std::size_t a = 0; a < kernel->size(); ++a)
            out.push_back((in[a + 2] - 1) * w.stride[a] + (*kernel)[a] - w.pad_begin[a] - w.pad_end[a]);
    }
    for (auto d : out)
        if (d < 1) unsupported("output shape " + to_string(out) + " has an empty dimension");
    const std::int64_t total = checked_element_count(out), count = checked_element_count(in);
    const Id zeros = filled(c, n, c.node_type(x).dtype, 0, {total});
    // scatter_elements counts negative indices from the end; MaxUnpool's must lie in [0, total)
    // (ONNX Runtime refuses others): a negative index i is moved to i − total, which the kernel
    // refuses as out of range.
    Id flat = reshape(c, indices, {count});
    flat = c.add("where", {c.add("less", {flat, scalar_constant(c, n, "zero_index", DType::int64, 0)}),
                           c.add("sub", {flat, scalar_constant(c, n, "total", DType::int64, double(total))}), flat});
    const Id scattered = c.add("scatter_elements", {zeros, flat, reshape(c, x, {count})}, {{"axis", std::int64_t{0}}});
    c.define_node(out0(n), reshape(c, scattered, out, out0(n)));
}

void convert_global_pool(ImportContext& c, const onnx::NodeProto& n, const string& op) {
    // Mean (or max) over every spatial axis, keeping them as 1: exactly ONNX's Global*Pool.
    Id x = x0(c, n);
    const auto rank = rank_of(c, x);
    if (rank < 3) unsupported("input must have spatial dimensions");
    vector<std::int64_t> axes;
    for (std::int64_t k = 2; k < rank; ++k) axes.push_back(k);
    c.define_node(out0(n), c.add(op, {x}, {{"axes", axes}, {"keepdims", true}}, out0(n)));
}

/// BatchNormalization with training_mode = 1 (opset 14+), as the ONNX reference: Y normalised by
/// the batch's mean and biased variance over every axis but 1, and the running statistics
/// input · momentum + batch · (1 − momentum) as outputs 1 and 2.
void convert_batch_norm_training(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    if (in.size() < 2) unsupported("input must have rank >= 2");
    const DType dtype = c.node_type(x).dtype;
    vector<std::int64_t> axes{0};
    for (std::int64_t a = 2; a < static_cast<std::int64_t>(in.size()); ++a) axes.push_back(a);
    const Attributes reduce{{"axes", axes}, {"keepdims", true}};
    Shape per_channel(in.size() - 1, 1);  // [C, 1, ...]: broadcasts over the axes after 1
    per_channel[0] = in[1];
    const Id mean = c.add("reduce_mean", {x}, reduce);
    const Id centred = c.add("sub", {x, mean});
    const Id var = c.add("reduce_mean", {c.add("mul", {centred, centred})}, reduce);
    const Id eps = scalar_constant(c, n, "epsilon", dtype, attr_float(n, "epsilon", 1e-5f));
    const Id normalised = c.add("div", {centred, c.add("sqrt", {c.add("add", {var, eps})})});
    const Id scale = reshape(c, c.runtime(n.input(1)), per_channel), bias = reshape(c, c.runtime(n.input(2)), per_channel);
    c.define_node(out0(n), c.add("add", {c.add("mul", {normalised, scale}), bias}, {}, out0(n)));
    const double momentum = attr_float(n, "momentum", 0.9f);
    const Id keep = scalar_constant(c, n, "momentum", dtype, momentum), update = scalar_constant(c, n, "one_minus_momentum", dtype, 1 - momentum);
    for (int k = 1; k <= 2; ++k) {
        if (n.output_size() <= k || n.output(k).empty()) continue;
        const Id batch = reshape(c, k == 1 ? mean : var, {in[1]});
        c.define_node(n.output(k), c.add("add", {c.add("mul", {c.runtime(n.input(2 + k)), keep}), c.add("mul", {batch, update})}, {}, n.output(k)));
    }
}

void convert_batch_norm(ImportContext& c, const onnx::NodeProto& n) {
    if (attr_int(n, "training_mode", 0) != 0) return convert_batch_norm_training(c, n);
    only_first_output(n, "BatchNormalization's running statistics outside training mode");
    if (c.opset() < 9 && attr_int(n, "spatial", 1) != 1) unsupported("spatial = 0");
    Id x = x0(c, n);
    Attributes attrs{{"eps", double(attr_float(n, "epsilon", 1e-5f))}, {"training", false}, {"affine", true}};
    Id y = c.add("batch_norm", {x}, attrs, out0(n));
    c.bind_parameters(y, {n.input(1), n.input(2), n.input(3), n.input(4)});
    c.define_node(out0(n), y);
}

void convert_layer_norm(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    const auto axis = normalize_axis(attr_int(n, "axis", -1), static_cast<std::int64_t>(in.size()));
    Shape normalized(in.begin() + axis, in.end());
    const bool has_bias = !input_name(n, 2).empty();
    Attributes attrs{{"normalized_shape", normalized}, {"eps", double(attr_float(n, "epsilon", 1e-5f))},
                     {"elementwise_affine", true}, {"bias", has_bias}};
    Id y = c.add("layer_norm", {x}, attrs, out0(n));
    vector<string> params{n.input(1)};
    if (has_bias) params.push_back(n.input(2));
    c.bind_parameters(y, params);
    c.define_node(out0(n), y);
    // Optional outputs: Mean = mean over the normalised axes (kept as 1), InvStdDev =
    // 1/sqrt(var + eps) with the biased variance, as ONNX defines them.
    if (present_outputs(n) == 1) return;
    if (attr_int(n, "stash_type", 1) != 1 || c.node_type(x).dtype != DType::float32)
        unsupported("Mean / InvStdDev outputs other than float32 (stash_type 1)");
    vector<std::int64_t> axes;
    for (auto k = axis; k < static_cast<std::int64_t>(in.size()); ++k) axes.push_back(k);
    const string mean_name = n.output_size() > 1 && !n.output(1).empty() ? n.output(1) : string();
    Id mean = c.add("reduce_mean", {x}, {{"axes", axes}, {"keepdims", true}}, mean_name);
    if (!mean_name.empty()) c.define_node(mean_name, mean);
    if (n.output_size() > 2 && !n.output(2).empty()) {
        Id d = c.add("sub", {x, mean});
        Id var = c.add("reduce_mean", {c.add("mul", {d, d})}, {{"axes", axes}, {"keepdims", true}});
        const Id eps = scalar_constant(c, n, "eps", DType::float32, attr_float(n, "epsilon", 1e-5f));
        Id inv_std = c.add("inv", {c.add("sqrt", {c.add("add", {var, eps})})}, {}, n.output(2));
        c.define_node(n.output(2), inv_std);
    }
}

/// Reduce* ops: axes from the attribute (or, for ReduceSum from opset 13, the input), keepdims.
vector<std::int64_t> reduce_axes(ImportContext& c, const onnx::NodeProto& n, bool& noop) {
    vector<std::int64_t> axes;
    noop = false;
    const bool axes_input = n.op_type() == "ReduceSum" ? c.opset() >= 13 : c.opset() >= 18;
    if (axes_input) {
        if (!input_name(n, 1).empty()) axes = int_values(c.constant(n.input(1), n.op_type() + "'s axes"));
        if (axes.empty() && attr_int(n, "noop_with_empty_axes", 0) != 0) noop = true;
    } else if (auto a = attr_ints(n, "axes")) {
        axes = *a;
    }
    return axes;
}

/// reduce op over axes (all when empty) with keepdims; `pre`/`post` add elementwise steps.
Converter reduce(string op, string pre = {}, string post = {}) {
    return [op, pre, post](ImportContext& c, const onnx::NodeProto& n) {
        bool noop = false;
        auto axes = reduce_axes(c, n, noop);
        Id x = x0(c, n);
        if (noop) {
            // ONNX: empty axes with noop_with_empty_axes pass the input through.
            if (!pre.empty() || !post.empty()) unsupported("noop_with_empty_axes on a composite reduction");
            return alias(c, out0(n), n.input(0));
        }
        const bool keepdims = attr_int(n, "keepdims", 1) != 0;
        if (!pre.empty()) x = pre == "square" ? c.add("mul", {x, x}) : c.add(pre, {x});
        Attributes attrs{{"keepdims", keepdims}};
        if (!axes.empty()) attrs["axes"] = axes;
        if (rank_of(c, x) == 0) unsupported("reduction of a scalar");
        Id y = c.add(op, {x}, attrs, post.empty() ? out0(n) : string());
        if (!post.empty()) y = c.add(post, {y}, {}, out0(n));
        c.define_node(out0(n), y);
    };
}

/// What a reduction written with a shift (ReduceLogSumExp, ReduceL2) needs: its input, dtype,
/// and the attributes of a reduction that keeps the reduced dims (for the shift) and of one
/// that follows the node's keepdims (for the result).
struct ShiftedReduction {
    Id x;
    DType dtype;
    Attributes kept, attrs;
};

ShiftedReduction shifted_reduction(ImportContext& c, const onnx::NodeProto& n) {
    bool noop = false;
    auto axes = reduce_axes(c, n, noop);
    if (noop) unsupported("noop_with_empty_axes on a composite reduction");
    ShiftedReduction r{x0(c, n), DType::float32, {{"keepdims", true}}, {{"keepdims", attr_int(n, "keepdims", 1) != 0}}};
    if (rank_of(c, r.x) == 0) unsupported("reduction of a scalar");
    r.dtype = c.node_type(r.x).dtype;
    if (!axes.empty()) r.kept["axes"] = r.attrs["axes"] = axes;
    return r;
}

/// ReduceLogSumExp: log Σ exp(x) with the maximum shifted out, as torch.logsumexp computes it
/// (aten/src/ATen/native/ReduceOps.cpp, logsumexp_out_impl):
///   m = reduce_max(x, keepdims), with ±inf (and NaN) replaced by 0,
///   y = log(reduce_sum(exp(x − m))) + m.
/// exp never overflows (every x − m ≤ 0 and the largest is 0, so the sum is in [1, n]), and a row
/// far below 0 keeps its value: [[100, 0], [200, 0]] over axis 1 gives [100, 200] and
/// [-1000, -1000] gives −1000 + log 2, where log(Σ exp(x)) gives inf and −inf. A non-finite
/// maximum is not shifted, so an all −inf row still gives −inf and a +inf entry +inf.
/// Existing BackendOps only (reduce_max, abs, less, where, sub, exp, reduce_sum, log, add):
/// a dedicated op would need its own kernels, backward and conformance on every plugin.
void convert_reduce_log_sum_exp(ImportContext& c, const onnx::NodeProto& n) {
    const auto [x, dtype, kept, attrs] = shifted_reduction(c, n);
    Id m = c.add("reduce_max", {x}, kept);
    Id finite = c.add("less", {c.add("abs", {m}), scalar_constant(c, n, "inf", dtype, std::numeric_limits<double>::infinity())});
    Id shift = c.add("where", {finite, m, scalar_constant(c, n, "zero", dtype, 0.0)});
    Id sum = c.add("reduce_sum", {c.add("exp", {c.add("sub", {x, shift})})}, attrs);
    Id y = c.add("add", {c.add("log", {sum}), reshape(c, shift, shape_of(c, sum))}, {}, out0(n));
    c.define_node(out0(n), y);
}

/// ReduceL2: sqrt(Σ x²) scaled by the largest |x| (as LAPACK's dnrm2 scales), so squares neither
/// overflow nor underflow: with s = max|x| (1 where that is 0, inf or NaN),
///   y = s · sqrt(reduce_sum((x / s)²)).
/// float32 [3e20, 4e20] gives 5e20 (the plain form overflows to inf) and [3e-30, 4e-30] gives
/// 5e-30 (the plain form underflows to 0). An inf or NaN input still gives inf or NaN.
void convert_reduce_l2(ImportContext& c, const onnx::NodeProto& n) {
    const auto [x, dtype, kept, attrs] = shifted_reduction(c, n);
    Id a = c.add("abs", {x});
    Id m = c.add("reduce_max", {a}, kept);
    Id zero = scalar_constant(c, n, "zero", dtype, 0.0);
    Id usable = c.add("logical_and", {c.add("greater", {m, zero}),
                                      c.add("less", {m, scalar_constant(c, n, "inf", dtype, std::numeric_limits<double>::infinity())})});
    Id scale = c.add("where", {usable, m, scalar_constant(c, n, "one", dtype, 1.0)});
    Id q = c.add("div", {a, scale});
    Id root = c.add("sqrt", {c.add("reduce_sum", {c.add("mul", {q, q})}, attrs)});
    Id y = c.add("mul", {root, reshape(c, scale, shape_of(c, root))}, {}, out0(n));
    c.define_node(out0(n), y);
}

void convert_flatten(ImportContext& c, const onnx::NodeProto& n) { convert_reshape_like(c, n); }

bool in_vocabulary(const string& op) {
    try {
        parse<BackendOp>(op);
        return true;
    } catch (const Error&) {
        return false;
    }
}

/// Pads `x` (rank ≥ 3, [N, C, spatial...]) on its spatial axes with `value`; the first of two
/// steps that make an asymmetric window exact (pad, then the window op without padding).
Id pad_spatial(ImportContext& c, Id x, const vector<std::int64_t>& begin, const vector<std::int64_t>& end, double value) {
    const auto rank = rank_of(c, x);
    vector<std::int64_t> pads(2 * rank, 0);
    for (std::size_t k = 0; k < begin.size(); ++k) {
        pads[2 + k] = begin[k];
        pads[rank + 2 + k] = end[k];
    }
    return c.add("pad", {x}, {{"pads", pads}, {"mode", string("constant")}, {"value", value}});
}

void convert_where(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), c.add("where", {c.runtime(n.input(0)), c.runtime(n.input(1)), c.runtime(n.input(2))}, {}, out0(n)));
}

void convert_gather(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), c.add("gather", {c.runtime(n.input(0)), c.runtime(n.input(1))},
                                 {{"axis", attr_int(n, "axis", 0)}}, out0(n)));
}

/// ONNX ScatterElements (and its predecessor Scatter, opset 9-10): BackendOp scatter_elements
/// with `axis` and `reduction` (opset 16: add, mul; 18: max, min).
void convert_scatter_elements(ImportContext& c, const onnx::NodeProto& n) {
    Attributes attrs{{"axis", attr_int(n, "axis", 0)}};
    if (const auto* r = find_attr(n, "reduction")) attrs["reduction"] = r->s();
    c.define_node(out0(n), c.add("scatter_elements", {c.runtime(n.input(0)), c.runtime(n.input(1)), c.runtime(n.input(2))},
                                 attrs, out0(n)));
}

void convert_gather_elements(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), c.add("gather_elements", {c.runtime(n.input(0)), c.runtime(n.input(1))},
                                 {{"axis", attr_int(n, "axis", 0)}}, out0(n)));
}

void convert_is_inf(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), c.add("is_inf", {c.runtime(n.input(0))},
                                 {{"detect_negative", attr_int(n, "detect_negative", 1) != 0},
                                  {"detect_positive", attr_int(n, "detect_positive", 1) != 0}},
                                 out0(n)));
}

void convert_slice(ImportContext& c, const onnx::NodeProto& n) {
    vector<std::int64_t> starts, ends, axes, steps;
    if (c.opset() < 10) {
        starts = attr_ints(n, "starts").value_or(vector<std::int64_t>{});
        ends = attr_ints(n, "ends").value_or(vector<std::int64_t>{});
        axes = attr_ints(n, "axes").value_or(vector<std::int64_t>{});
    } else {
        starts = int_values(c.constant(n.input(1), "Slice's starts"));
        ends = int_values(c.constant(n.input(2), "Slice's ends"));
        if (!input_name(n, 3).empty()) axes = int_values(c.constant(n.input(3), "Slice's axes"));
        if (!input_name(n, 4).empty()) steps = int_values(c.constant(n.input(4), "Slice's steps"));
    }
    Attributes attrs{{"starts", starts}, {"ends", ends}};
    if (!axes.empty()) attrs["axes"] = axes;
    if (!steps.empty()) attrs["steps"] = steps;
    c.define_node(out0(n), c.add("slice", {x0(c, n)}, attrs, out0(n)));
}

void convert_split(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const Shape& in = shape_of(c, x);
    const auto axis = normalize_axis(attr_int(n, "axis", 0), static_cast<std::int64_t>(in.size()));
    vector<std::int64_t> split;
    if (c.opset() < 13) split = attr_ints(n, "split").value_or(vector<std::int64_t>{});
    else if (!input_name(n, 1).empty()) split = int_values(c.constant(n.input(1), "Split's split"));
    const auto parts = n.output_size();
    if (split.empty()) {
        if (in[axis] % parts != 0) unsupported("Split into unequal parts without 'split'");
        split.assign(parts, in[axis] / parts);
    }
    if (static_cast<int>(split.size()) != parts) unsupported("Split's 'split' does not match the output count");
    std::int64_t offset = 0;
    for (int k = 0; k < parts; ++k) {
        const std::int64_t start = offset;
        offset += split[k];
        if (n.output(k).empty()) continue;
        c.define_node(n.output(k), slice_axis(c, x, axis, start, offset, 1, n.output(k)));
    }
}

void convert_pad(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    string mode = attr_string(n, "mode", "constant");
    vector<std::int64_t> pads;
    double value = 0;
    std::int64_t int_value = 0;  // an int64 tensor's value, read without a detour through double
    const bool int_data = is_integer(c.node_type(x).dtype);
    if (c.opset() < 11) {
        pads = attr_ints(n, c.opset() < 2 ? "paddings" : "pads").value_or(vector<std::int64_t>{});
        value = attr_float(n, "value", 0.0f);  // a float attribute: shape inference checks it for int64 data
    } else {
        pads = int_values(c.constant(n.input(1), "Pad's pads"));
        if (!input_name(n, 2).empty()) {
            if (int_data) int_value = scalar_int(c, n.input(2), "Pad's constant_value");
            else value = scalar_value(c, n.input(2), "Pad's constant_value");
        }
        if (!input_name(n, 3).empty()) unsupported("Pad with axes");
    }
    Attributes attrs{{"pads", pads}, {"mode", mode}};
    if (mode == "constant") {
        // Before opset 11 the value is a float attribute even for int64 data: it is passed as a
        // number (never cast here: a value outside int64's range would be undefined behaviour),
        // and shape inference refuses one that is not an integer in int64's range.
        if (int_data && c.opset() >= 11) attrs["value"] = int_value;
        else attrs["value"] = value;
    }
    c.define_node(out0(n), c.add("pad", {x}, attrs, out0(n)));
}

void convert_cast(ImportContext& c, const onnx::NodeProto& n) {
    const int to = static_cast<int>(attr_int(n, "to", 0));
    auto dtype = dtype_of_onnx(to);
    if (!dtype) unsupported("Cast to " + onnx_type_name(to) + kSupportedOnnxDtypes);
    Id x = x0(c, n);
    if (c.node_type(x).dtype == *dtype) return alias(c, out0(n), n.input(0));
    c.define_node(out0(n), c.add("cast", {x}, {{"to", string(to_string(*dtype))}}, out0(n)));
}

/// ONNX CastLike(input, target_type): Cast to the element type of target_type, whose values are
/// not read (it may be a constant or a run-time value).
void convert_cast_like(ImportContext& c, const onnx::NodeProto& n) {
    if (n.input_size() < 2 || n.input(1).empty()) unsupported("CastLike needs its target_type input");
    const DType to = c.type(n.input(1)).dtype;
    Id x = x0(c, n);
    if (c.node_type(x).dtype == to) return alias(c, out0(n), n.input(0));
    c.define_node(out0(n), c.add("cast", {x}, {{"to", string(to_string(to))}}, out0(n)));
}

void convert_arg(ImportContext& c, const onnx::NodeProto& n, const string& op) {
    Attributes attrs{{"axis", attr_int(n, "axis", 0)}, {"keepdims", attr_int(n, "keepdims", 1) != 0}};
    if (attr_int(n, "select_last_index", 0) != 0) attrs["select_last_index"] = true;
    c.define_node(out0(n), c.add(op, {x0(c, n)}, attrs, out0(n)));
}

void convert_trilu(ImportContext& c, const onnx::NodeProto& n) {
    std::int64_t k = 0;
    if (!input_name(n, 1).empty()) k = scalar_int(c, n.input(1), "Trilu's k");
    const bool upper = attr_int(n, "upper", 1) != 0;
    c.define_node(out0(n), c.add(upper ? "triu" : "tril", {x0(c, n)}, {{"k", k}}, out0(n)));
}

void convert_cumsum(ImportContext& c, const onnx::NodeProto& n) {
    const auto axis = scalar_int(c, n.input(1), "CumSum's axis");
    Attributes attrs{{"axis", axis}};
    if (attr_int(n, "exclusive", 0)) attrs["exclusive"] = true;
    if (attr_int(n, "reverse", 0)) attrs["reverse"] = true;
    c.define_node(out0(n), c.add("cumsum", {x0(c, n)}, attrs, out0(n)));
}

void convert_tile(ImportContext& c, const onnx::NodeProto& n) {
    auto repeats = int_values(c.constant(n.input(1), "Tile's repeats"));
    c.define_node(out0(n), c.add("tile", {x0(c, n)}, {{"repeats", repeats}}, out0(n)));
}


/// DepthToSpace / SpaceToDepth: a reshape, a permutation and a reshape, as ONNX defines them.
void convert_depth_space(ImportContext& c, const onnx::NodeProto& n, bool to_space) {
    Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    if (in.size() != 4) unsupported("input must be 4-D");
    const auto bs = attr_int(n, "blocksize", 0);
    if (bs <= 0) unsupported("blocksize must be positive");
    const auto N = in[0], C = in[1], H = in[2], W = in[3];
    Shape split, out;
    vector<std::int64_t> perm;
    if (to_space) {
        if (C % (bs * bs) != 0) unsupported("channels not divisible by blocksize²");
        const bool crd = attr_string(n, "mode", "DCR") == "CRD";
        split = crd ? Shape{N, C / (bs * bs), bs, bs, H, W} : Shape{N, bs, bs, C / (bs * bs), H, W};
        perm = crd ? vector<std::int64_t>{0, 1, 4, 2, 5, 3} : vector<std::int64_t>{0, 3, 4, 1, 5, 2};
        out = {N, C / (bs * bs), H * bs, W * bs};
    } else {
        if (H % bs != 0 || W % bs != 0) unsupported("spatial size not divisible by blocksize");
        split = {N, C, H / bs, bs, W / bs, bs};
        perm = {0, 3, 5, 1, 2, 4};
        out = {N, C * bs * bs, H / bs, W / bs};
    }
    Id y = c.add("permute", {reshape(c, x, split)}, {{"dims", perm}});
    c.define_node(out0(n), reshape(c, y, out, out0(n)));
}

/// One operand of an einsum: its node and one label per axis.
struct EinsumTerm {
    Id id;
    string labels;
};

/// The terms of an Einsum `equation` (ONNX Einsum, numpy.einsum's grammar): whitespace dropped;
/// `...` replaced by one private label per broadcast axis, right-aligned across operands (the
/// labels 1, 2, ... stand for them: letters are the only user labels); the output spelled out
/// when the equation leaves it implicit (the ellipsis axes, then the letters used once, sorted).
std::pair<vector<string>, string> einsum_labels(string equation, const vector<std::int64_t>& ranks) {
    std::erase_if(equation, [](char ch) { return std::isspace(static_cast<unsigned char>(ch)); });
    const auto arrow = equation.find("->");
    const bool explicit_output = arrow != string::npos;
    const string lhs = equation.substr(0, arrow);
    vector<string> terms(1);
    for (char ch : lhs) {
        if (ch == ',') terms.emplace_back();
        else terms.back().push_back(ch);
    }
    if (terms.size() != ranks.size())
        unsupported("equation '" + equation + "' has " + std::to_string(terms.size()) + " operands, the node " +
                    std::to_string(ranks.size()));
    std::int64_t ellipsis_rank = 0;
    vector<std::int64_t> term_ellipsis(terms.size(), -1);
    for (std::size_t t = 0; t < terms.size(); ++t) {
        const auto dots = terms[t].find("...");
        const std::int64_t letters = static_cast<std::int64_t>(terms[t].size()) - (dots == string::npos ? 0 : 3);
        if (dots != string::npos) {
            term_ellipsis[t] = ranks[t] - letters;
            if (term_ellipsis[t] < 0) unsupported("operand " + std::to_string(t) + " has fewer axes than labels");
            ellipsis_rank = std::max(ellipsis_rank, term_ellipsis[t]);
        } else if (letters != ranks[t]) {
            unsupported("operand " + std::to_string(t) + " has rank " + std::to_string(ranks[t]) + " but '" + terms[t] +
                        "' labels " + std::to_string(letters) + " axes");
        }
    }
    auto broadcast_labels = [&](std::int64_t count) {
        string out;
        for (std::int64_t k = ellipsis_rank - count; k < ellipsis_rank; ++k) out.push_back(static_cast<char>('1' + k));
        return out;
    };
    if (ellipsis_rank > 9) unsupported("more than 9 axes under '...'");
    auto expand = [&](string term, std::int64_t count) {
        if (const auto dots = term.find("..."); dots != string::npos) term.replace(dots, 3, broadcast_labels(count));
        for (char ch : term)
            if (!std::isalpha(static_cast<unsigned char>(ch)) && !(ch >= '1' && ch <= '9'))
                unsupported("label '" + string(1, ch) + "' in equation '" + equation + "': labels are letters");
        return term;
    };
    for (std::size_t t = 0; t < terms.size(); ++t) terms[t] = expand(terms[t], term_ellipsis[t]);
    string output;
    if (explicit_output) {
        output = expand(equation.substr(arrow + 2), ellipsis_rank);
        for (std::size_t i = 0; i < output.size(); ++i) {
            if (output.find(output[i], i + 1) != string::npos) unsupported("output label '" + string(1, output[i]) + "' repeats");
            if (std::none_of(terms.begin(), terms.end(), [&](const string& t) { return t.find(output[i]) != string::npos; }))
                unsupported("output label '" + string(1, output[i]) + "' is in no operand");
        }
    } else {
        output = broadcast_labels(ellipsis_rank);
        string once;
        for (const auto& t : terms)
            for (char ch : t)
                if (std::isalpha(static_cast<unsigned char>(ch))) once.push_back(ch);
        std::sort(once.begin(), once.end());
        for (std::size_t i = 0; i < once.size(); ++i)
            if ((i == 0 || once[i] != once[i - 1]) && (i + 1 == once.size() || once[i + 1] != once[i])) output.push_back(once[i]);
    }
    return {terms, output};
}

/// `term` with its axes in the order of `labels` (a permutation of its labels).
EinsumTerm einsum_permute(ImportContext& c, const EinsumTerm& term, const string& labels) {
    if (term.labels == labels) return term;
    vector<std::int64_t> dims;
    for (char ch : labels) dims.push_back(static_cast<std::int64_t>(term.labels.find(ch)));
    return {c.add("permute", {term.id}, {{"dims", dims}}), labels};
}

/// `term` summed over the axes whose labels are not in `keep`.
EinsumTerm einsum_reduce(ImportContext& c, const EinsumTerm& term, const string& keep) {
    vector<std::int64_t> axes;
    string kept;
    for (std::size_t k = 0; k < term.labels.size(); ++k)
        if (keep.find(term.labels[k]) == string::npos) axes.push_back(static_cast<std::int64_t>(k));
        else kept.push_back(term.labels[k]);
    if (axes.empty()) return term;
    return {c.add("reduce_sum", {term.id}, {{"axes", axes}, {"keepdims", false}}), kept};
}

/// `term` with each label that repeats within it (a diagonal, `ii`) taken once: the two axes move
/// last, merge, and gather picks the entries k·(d + 1), exactly (no multiplication by a mask).
EinsumTerm einsum_diagonals(ImportContext& c, EinsumTerm term) {
    for (std::size_t i = 0; i < term.labels.size(); ++i) {
        const auto j = term.labels.find(term.labels[i], i + 1);
        if (j == string::npos) continue;
        const Shape shape = shape_of(c, term.id);
        if (shape[i] != shape[j]) unsupported("diagonal of axes of sizes " + std::to_string(shape[i]) + " and " + std::to_string(shape[j]));
        string rest;
        for (std::size_t k = 0; k < term.labels.size(); ++k)
            if (k != i && k != j) rest.push_back(term.labels[k]);
        const char label = term.labels[i];
        string moved = rest;
        moved.push_back(label);
        moved.push_back('\0');  // the second occurrence, told apart while permuting
        EinsumTerm marked{term.id, term.labels};
        marked.labels[j] = '\0';
        const EinsumTerm last = einsum_permute(c, marked, moved);
        const auto d = shape[i];
        Shape merged;
        for (char ch : rest) merged.push_back(shape[term.labels.find(ch)]);
        merged.push_back(d * d);
        vector<double> picks;
        for (std::int64_t k = 0; k < d; ++k) picks.push_back(static_cast<double>(k * (d + 1)));
        const Id rows = constant_input(c, *c.current, "diagonal", Tensor::from_values(DType::int64, {d}, picks));
        const Id picked = c.add("gather", {reshape(c, last.id, merged), rows},
                                {{"axis", static_cast<std::int64_t>(rest.size())}});
        return einsum_diagonals(c, {picked, rest + label});
    }
    return term;
}

/// Contracts two terms with bmm: the labels in both and in `needed` are batch axes, those in both
/// only are summed, the others are kept (a's, then b's). Sizes of a shared label must agree.
EinsumTerm einsum_contract(ImportContext& c, EinsumTerm a, EinsumTerm b, const string& needed) {
    auto in = [](const string& s, char ch) { return s.find(ch) != string::npos; };
    string keep_a = needed + b.labels, keep_b = needed + a.labels;
    a = einsum_reduce(c, a, keep_a);
    b = einsum_reduce(c, b, keep_b);
    string batch, summed, only_a, only_b;
    for (char ch : a.labels) (in(b.labels, ch) ? (in(needed, ch) ? batch : summed) : only_a).push_back(ch);
    for (char ch : b.labels)
        if (!in(a.labels, ch)) only_b.push_back(ch);
    const Shape sa = shape_of(c, a.id), sb = shape_of(c, b.id);
    auto size = [&](char ch) {
        if (in(a.labels, ch) && in(b.labels, ch) && sa[a.labels.find(ch)] != sb[b.labels.find(ch)])
            unsupported("label '" + string(1, ch) + "' has sizes " + std::to_string(sa[a.labels.find(ch)]) + " and " +
                        std::to_string(sb[b.labels.find(ch)]) + " (einsum broadcasting of size-1 axes is not supported)");
        return in(a.labels, ch) ? sa[a.labels.find(ch)] : sb[b.labels.find(ch)];
    };
    auto product = [&](const string& labels) {
        std::int64_t p = 1;
        for (char ch : labels) p *= size(ch);
        return p;
    };
    const auto B = product(batch), M = product(only_a), K = product(summed), N = product(only_b);
    const EinsumTerm pa = einsum_permute(c, a, batch + only_a + summed);
    const EinsumTerm pb = einsum_permute(c, b, batch + summed + only_b);
    const Id r = c.add("bmm", {reshape(c, pa.id, {B, M, K}), reshape(c, pb.id, {B, K, N})});
    Shape out;
    for (char ch : batch + only_a + only_b) out.push_back(size(ch));
    return {reshape(c, r, out), batch + only_a + only_b};
}

/// ONNX Einsum (numpy.einsum's grammar and implicit output): diagonals by gather, sums by
/// reduce_sum, each pair of operands by one bmm (left to right), then a permute to the output's
/// order. Floating-point operands only (bmm's dtypes); labels of one size across operands.
void convert_einsum(ImportContext& c, const onnx::NodeProto& n) {
    vector<EinsumTerm> terms;
    vector<std::int64_t> ranks;
    for (const auto& input : n.input()) {
        const Id id = c.runtime(input);
        const auto dtype = c.node_type(id).dtype;
        if (dtype != DType::float32 && dtype != DType::float64) unsupported("einsum of " + string(to_string(dtype)) + " tensors");
        terms.push_back({id, ""});
        ranks.push_back(rank_of(c, id));
    }
    if (terms.empty()) unsupported("einsum needs at least one operand");
    auto [labels, output] = einsum_labels(attr_string(n, "equation", ""), ranks);
    for (std::size_t t = 0; t < terms.size(); ++t) terms[t] = einsum_diagonals(c, {terms[t].id, labels[t]});
    EinsumTerm acc = terms[0];
    for (std::size_t t = 1; t < terms.size(); ++t) {
        string needed = output;
        for (std::size_t later = t + 1; later < terms.size(); ++later) needed += terms[later].labels;
        acc = einsum_contract(c, acc, terms[t], needed);
    }
    acc = einsum_permute(c, einsum_reduce(c, acc, output), output);
    c.define_node(out0(n), reshape(c, acc.id, shape_of(c, acc.id), out0(n)));
}

/// ONNX OneHot(indices, depth, values = [off, on], axis): off everywhere, on where the new axis's
/// position equals the index; an index in [−depth, −1] counts from the end, one outside
/// [−depth, depth) gives a row of off values, as the spec says. As where(equal(i, k) or
/// equal(i, k − depth), on, off) over k = 0..depth−1: comparisons only, exact. Float indices are
/// cast to int64 first (truncation, as the spec says). depth and values must be constants.
void convert_one_hot(ImportContext& c, const onnx::NodeProto& n) {
    Id indices = c.runtime(n.input(0));
    if (c.node_type(indices).dtype == DType::boolean) unsupported("boolean indices");
    if (c.node_type(indices).dtype != DType::int64)
        indices = c.add("cast", {indices}, {{"to", string("int64")}});
    const double depth_value = scalar_value(c, n.input(1), "OneHot depth");
    const auto depth = static_cast<std::int64_t>(depth_value);
    if (depth < 1 || depth > (std::int64_t(1) << 31)) unsupported("depth must be between 1 and 2^31, got " + std::to_string(depth_value));
    const Tensor& values = c.constant(n.input(2), "OneHot values");
    if (values.numel() != 2) unsupported("values must hold [off, on], got shape " + to_string(values.shape()));
    const auto rank = rank_of(c, indices) + 1;
    auto axis = attr_int(n, "axis", -1);
    if (axis < -rank || axis >= rank) unsupported("axis " + std::to_string(axis) + " outside [-" + std::to_string(rank) + ", " + std::to_string(rank) + ")");
    if (axis < 0) axis += rank;
    Shape view = shape_of(c, indices), classes_shape(static_cast<std::size_t>(rank), 1);
    view.insert(view.begin() + axis, 1);
    classes_shape[static_cast<std::size_t>(axis)] = depth;
    vector<double> up, down;
    for (std::int64_t k = 0; k < depth; ++k) up.push_back(double(k)), down.push_back(double(k - depth));
    const Id k = constant_input(c, n, "k", Tensor::from_values(DType::int64, classes_shape, up));
    const Id k_from_end = constant_input(c, n, "k_from_end", Tensor::from_values(DType::int64, classes_shape, down));
    const Id off = scalar_constant(c, n, "off", values.dtype(), values.at(0));
    const Id on = scalar_constant(c, n, "on", values.dtype(), values.at(1));
    const Id i = reshape(c, indices, view);
    const Id hit = c.add("logical_or", {c.add("equal", {i, k}), c.add("equal", {i, k_from_end})});
    c.define_node(out0(n), c.add("where", {hit, on, off}, {}, out0(n)));
}

/// ONNX IsNaN as logical_not(equal(x, x)): NaN is the only value unequal to itself (IEEE 754).
void convert_is_nan(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const auto dtype = c.node_type(x).dtype;
    if (dtype != DType::float32 && dtype != DType::float64) unsupported("IsNaN of " + string(to_string(dtype)) + " tensors");
    c.define_node(out0(n), c.add("logical_not", {c.add("equal", {x, x})}, {}, out0(n)));
}

/// ONNX LRN (Krizhevsky et al. 2012, section 3.3): y = x / (bias + alpha / size · Σ x²)^beta with
/// the sum over the channels c − ⌊(size−1)/2⌋ .. c + ⌈(size−1)/2⌉ inside [0, C). As a zero `pad` of
/// x² along C and an average pool of `size` channels over a [N, 1, C, rest] view: alpha / size · Σ
/// is alpha · mean.
void convert_lrn(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    if (in.size() < 3) unsupported("input must be [N, C, D1, ...]");
    const auto size = attr_int(n, "size", 0);
    if (size < 1) unsupported("size must be positive");
    const double alpha = attr_float(n, "alpha", 1e-4f), beta = attr_float(n, "beta", 0.75f), bias = attr_float(n, "bias", 1.0f);
    const auto dtype = c.node_type(x).dtype;
    std::int64_t rest = 1;
    for (std::size_t k = 2; k < in.size(); ++k) rest *= in[k];
    const Id squares = reshape(c, c.add("mul", {x, x}), {in[0], 1, in[1], rest});
    const Id padded = c.add("pad", {squares}, {{"pads", vector<std::int64_t>{0, 0, (size - 1) / 2, 0, 0, 0, size / 2, 0}}});
    const Id mean = c.add("avg_pool2d_pad", {padded}, {{"kernel_size", vector<std::int64_t>{size, 1}},
                                                       {"stride", vector<std::int64_t>{1, 1}}});
    const Id scaled_sum = c.add("mul", {reshape(c, mean, in), scalar_constant(c, n, "alpha", dtype, alpha)});
    const Id base = c.add("add", {scaled_sum, scalar_constant(c, n, "bias", dtype, bias)});
    const Id denominator = c.add("pow", {base, scalar_constant(c, n, "beta", dtype, beta)});
    c.define_node(out0(n), c.add("div", {x, denominator}, {}, out0(n)));
}

/// ONNX MeanVarianceNormalization: (x − mean) / (sqrt(variance) + 1e-9) over `axes` (default
/// [0, 2, 3]), as the spec's function body, with the variance taken as mean((x − mean)²) rather
/// than the body's E[x²] − E[x]², which cancels catastrophically for large means.
void convert_mean_variance_normalization(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const auto axes = attr_ints(n, "axes").value_or(vector<std::int64_t>{0, 2, 3});
    const Attributes reduce{{"axes", axes}, {"keepdims", true}};
    const Id centred = c.add("sub", {x, c.add("reduce_mean", {x}, reduce)});
    const Id variance = c.add("reduce_mean", {c.add("mul", {centred, centred})}, reduce);
    const Id deviation = c.add("add", {c.add("sqrt", {variance}),
                                       scalar_constant(c, n, "epsilon", c.node_type(x).dtype, 1e-9)});
    c.define_node(out0(n), c.add("div", {centred, deviation}, {}, out0(n)));
}

/// ONNX ConstantOfShape is folded at import when its shape is a constant (constant_folding.cpp:
/// its output's shape is the input's values). Otherwise the shape input must be bound as one.
void convert_constant_of_shape(ImportContext& c, const onnx::NodeProto& n) {
    c.constant(n.input(0), "ConstantOfShape shape");  // raises, naming the input to bind
    unsupported("ConstantOfShape that constant folding refused");
}

/// ONNX Round (half to even, as numpy.round): round_half_to_even.
void convert_round(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), round_half_to_even(c, n, x0(c, n), out0(n)));
}

/// ONNX Range is folded at import when start, limit and delta are constants (constant_folding.cpp:
/// its length depends on their values). Otherwise they must be bound as constants.
void convert_range(ImportContext& c, const onnx::NodeProto& n) {
    for (int k = 0; k < 3; ++k) c.constant(n.input(k), "Range input " + std::to_string(k));  // raises, naming the input to bind
    unsupported("Range that constant folding refused");
}

/// ONNX ReverseSequence: along `time_axis`, the first sequence_lens[b] entries of each batch
/// entry b (along `batch_axis`) reversed, the rest kept. As gather_elements with a constant index
/// tensor (sequence_lens must be a constant).
void convert_reverse_sequence(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    const auto time_axis = attr_int(n, "time_axis", 0), batch_axis = attr_int(n, "batch_axis", 1);
    if (in.size() < 2 || time_axis == batch_axis || std::min(time_axis, batch_axis) < 0 || std::max(time_axis, batch_axis) > 1)
        unsupported("time_axis and batch_axis must be 0 and 1 in some order, on an input of rank >= 2");
    const auto lens = int_values(c.constant(n.input(1), "ReverseSequence sequence_lens"));
    const auto T = in[static_cast<std::size_t>(time_axis)], B = in[static_cast<std::size_t>(batch_axis)];
    if (static_cast<std::int64_t>(lens.size()) != B) unsupported("sequence_lens must have one entry per batch entry");
    for (auto l : lens)
        if (l < 0 || l > T) unsupported("sequence length " + std::to_string(l) + " outside [0, " + std::to_string(T) + "]");
    const auto count = checked_element_count(in);
    if (count > (std::int64_t(1) << 26)) unsupported("more than 2^26 elements");
    const std::int64_t inner = count / (T * B);
    vector<double> index(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t outer = i / inner;  // position along axes 0 and 1
        const std::int64_t t = time_axis == 0 ? outer / B : outer % T, b = time_axis == 0 ? outer % B : outer / T;
        index[static_cast<std::size_t>(i)] = static_cast<double>(t < lens[static_cast<std::size_t>(b)] ? lens[static_cast<std::size_t>(b)] - 1 - t : t);
    }
    const Id reversed = constant_input(c, n, "reversed", Tensor::from_values(DType::int64, in, index));
    c.define_node(out0(n), c.add("gather_elements", {x, reversed}, {{"axis", time_axis}}, out0(n)));
}

/// The rows addressed by the constant index tuples of GatherND / ScatterND (ONNX): `indices` of
/// shape [..., k], each tuple (negative entries counting from the end) naming a slice of `data`
/// whose first `batch_dims` axes are batch axes matched by the tuple's position, as a row number
/// of `data` viewed as [rows, slice elements]. Out-of-range tuples are refused at import.
struct NdRows {
    vector<double> rows;         // one per tuple, in indices' order
    std::int64_t row_count = 1;  // rows of the view
    std::int64_t slice = 1;      // elements per row
};
NdRows nd_rows(const Shape& data, const Tensor& indices_tensor, std::int64_t batch_dims, const string& op) {
    const Shape& ishape = indices_tensor.shape();
    if (ishape.empty()) unsupported(op + " indices must have rank >= 1");
    const auto k = ishape.back();
    const auto b = batch_dims;
    if (b < 0 || k < 1 || b + k > static_cast<std::int64_t>(data.size()) || b >= static_cast<std::int64_t>(ishape.size()))
        unsupported(op + " indices of shape " + to_string(ishape) + " with batch_dims " + std::to_string(b) +
                    " do not fit data of shape " + to_string(data));
    for (std::int64_t a = 0; a < b; ++a)
        if (ishape[static_cast<std::size_t>(a)] != data[static_cast<std::size_t>(a)]) unsupported(op + " batch dimensions differ");
    NdRows out;
    std::int64_t per_batch = 1, batch_count = 1;
    for (std::int64_t a = 0; a < static_cast<std::int64_t>(data.size()); ++a) {
        const auto d = data[static_cast<std::size_t>(a)];
        if (a < b) batch_count *= d;
        else if (a < b + k) per_batch *= d;
        else out.slice *= d;
    }
    out.row_count = batch_count * per_batch;
    const auto values = int_values(indices_tensor);
    const auto tuples = static_cast<std::int64_t>(values.size()) / k;
    std::int64_t tuples_per_batch = 1;  // tuples in one batch entry
    for (std::size_t a = static_cast<std::size_t>(b); a + 1 < ishape.size(); ++a) tuples_per_batch *= ishape[a];
    for (std::int64_t t = 0; t < tuples; ++t) {
        std::int64_t row = 0;
        for (std::int64_t j = 0; j < k; ++j) {
            const auto d = data[static_cast<std::size_t>(b + j)];
            auto v = values[static_cast<std::size_t>(t * k + j)];
            if (v < -d || v >= d) unsupported(op + " index " + std::to_string(v) + " outside [-" + std::to_string(d) + ", " + std::to_string(d) + ")");
            if (v < 0) v += d;
            row = row * d + v;
        }
        const std::int64_t batch = tuples_per_batch ? t / tuples_per_batch : 0;
        out.rows.push_back(static_cast<double>(batch * per_batch + row));
    }
    return out;
}

/// ONNX GatherND with constant indices: `gather` of rows of data viewed as [rows, slice].
void convert_gather_nd(ImportContext& c, const onnx::NodeProto& n) {
    const Id data = x0(c, n);
    const Shape shape = shape_of(c, data);
    const Tensor& indices = c.constant(n.input(1), "GatherND indices");
    const auto b = attr_int(n, "batch_dims", 0);
    const NdRows r = nd_rows(shape, indices, b, "GatherND");
    Shape picked(indices.shape().begin(), indices.shape().end() - 1), out = picked;
    out.insert(out.end(), shape.begin() + b + indices.shape().back(), shape.end());
    const Id rows = constant_input(c, n, "rows", Tensor::from_values(DType::int64, picked, r.rows));
    const Id gathered = c.add("gather", {reshape(c, data, {r.row_count, r.slice}), rows}, {{"axis", std::int64_t{0}}});
    c.define_node(out0(n), reshape(c, gathered, out, out0(n)));
}

/// ONNX ScatterND with constant indices: `scatter_elements` along axis 0 of data viewed as
/// [rows, slice], each update row written to (or reduced into) its row; `reduction` as the spec
/// (none, add, mul, max, min).
void convert_scatter_nd(ImportContext& c, const onnx::NodeProto& n) {
    const Id data = x0(c, n);
    const Shape shape = shape_of(c, data);
    const Tensor& indices = c.constant(n.input(1), "ScatterND indices");
    const NdRows r = nd_rows(shape, indices, 0, "ScatterND");
    const auto tuples = static_cast<std::int64_t>(r.rows.size());
    vector<double> index;
    index.reserve(static_cast<std::size_t>(tuples * r.slice));
    for (double row : r.rows) index.insert(index.end(), static_cast<std::size_t>(r.slice), row);
    const Id rows = constant_input(c, n, "rows", Tensor::from_values(DType::int64, {tuples, r.slice}, index));
    Attributes attrs{{"axis", std::int64_t{0}}};
    if (const auto* red = find_attr(n, "reduction")) attrs["reduction"] = red->s();
    const Id updates = reshape(c, c.runtime(n.input(2)), {tuples, r.slice});
    const Id scattered = c.add("scatter_elements", {reshape(c, data, {r.row_count, r.slice}), rows, updates}, attrs);
    c.define_node(out0(n), reshape(c, scattered, shape, out0(n)));
}

/// ONNX Compress with a constant condition: `gather` of the positions where it is true along
/// `axis` (of the flattened input without one); entries beyond the condition's length are dropped.
void convert_compress(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const Tensor& condition = c.constant(n.input(1), "Compress condition");
    if (condition.shape().size() != 1) unsupported("condition must be 1-D");
    std::int64_t axis = 0;
    if (const auto* a = find_attr(n, "axis")) {
        axis = a->i();
        const auto r = rank_of(c, x);
        if (axis < -r || axis >= r) unsupported("axis " + std::to_string(axis) + " outside the input's rank");
        if (axis < 0) axis += r;
    } else {
        x = reshape(c, x, {checked_element_count(shape_of(c, x))});
    }
    const auto length = shape_of(c, x)[static_cast<std::size_t>(axis)];
    if (condition.numel() > length) unsupported("condition has " + std::to_string(condition.numel()) + " entries, the axis " + std::to_string(length));
    vector<double> positions;
    for (std::int64_t i = 0; i < condition.numel(); ++i)
        if (condition.at(i) != 0) positions.push_back(static_cast<double>(i));
    const Id kept = constant_input(c, n, "positions", Tensor::from_values(DType::int64, {static_cast<std::int64_t>(positions.size())}, positions));
    c.define_node(out0(n), c.add("gather", {x, kept}, {{"axis", axis}}, out0(n)));
}

/// InstanceNormalization: y = scale · (x − mean) / sqrt(var + eps) + B per (n, c) over the spatial
/// axes, with the biased variance, scale and B of shape [C] (viewed as [C, 1, ...]).
void convert_instance_norm(ImportContext& c, const onnx::NodeProto& n) {
    Id x = x0(c, n);
    const Shape in = shape_of(c, x);
    if (in.size() < 3) unsupported("input must have spatial dimensions");
    const auto dtype = c.node_type(x).dtype;
    vector<std::int64_t> axes;
    for (std::size_t k = 2; k < in.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
    Shape channel_shape(in.size() - 1, 1);
    channel_shape[0] = in[1];
    auto channel_view = [&](const string& name) {
        Id v = c.runtime(name);
        if (shape_of(c, v) != Shape{in[1]}) unsupported("scale and B must have shape [C]");
        return reshape(c, v, channel_shape);
    };
    Id mean = c.add("reduce_mean", {x}, {{"axes", axes}, {"keepdims", true}});
    Id d = c.add("sub", {x, mean});
    Id var = c.add("reduce_mean", {c.add("mul", {d, d})}, {{"axes", axes}, {"keepdims", true}});
    const string eps_name = out0(n) + "#eps";
    c.define_constant(eps_name, Tensor::from_values(dtype, {}, {double(attr_float(n, "epsilon", 1e-5f))}));
    Id norm = c.add("div", {d, c.add("sqrt", {c.add("add", {var, c.runtime(eps_name)})})});
    Id y = c.add("add", {c.add("mul", {norm, channel_view(n.input(1))}), channel_view(n.input(2))}, {}, out0(n));
    c.define_node(out0(n), y);
}


/// NegativeLogLikelihoodLoss on log-probabilities x [N, C, d...] and int64 target [N, d...]:
/// the picked value x[n, target, d] is selected exactly with a one-hot mask
/// (equal(target, arange(C))) and `where` (never multiplied by 0, so ±inf stays as it is), then
/// summed over C (one value plus zeros). A target equal to ignore_index, or outside [0, C),
/// selects nothing (loss 0, weight 0). reduction none / sum / mean (mean = Σ loss / Σ weight).
Id nll_loss(ImportContext& c, const onnx::NodeProto& n, Id x, const string& out_name) {
    const Shape in = shape_of(c, x);
    if (in.size() < 2) unsupported("input must be [N, C, ...]");
    const auto dtype = c.node_type(x).dtype;
    const std::int64_t C = in[1];
    Id target = c.runtime(n.input(1));
    if (c.node_type(target).dtype != DType::int64) unsupported("target must be int64");
    Shape t_view = shape_of(c, target);
    Shape expected = in;
    expected.erase(expected.begin() + 1);
    if (t_view != expected)
        unsupported("target has shape " + to_string(t_view) + ", the input " + to_string(in) + " needs " +
                    to_string(expected) + " ([N, C, d1, ...] → [N, d1, ...])");
    t_view.insert(t_view.begin() + 1, 1);
    Shape class_view(in.size(), 1);
    class_view[1] = C;
    vector<double> classes(C);
    for (std::int64_t k = 0; k < C; ++k) classes[k] = double(k);
    const string base = out_name.empty() ? out0(n) : out_name;
    c.define_constant(base + "#classes", Tensor::from_values(DType::int64, class_view, classes));
    c.define_constant(base + "#zero", Tensor::zeros(dtype, {}));
    Id zero = c.runtime(base + "#zero");
    Id mask = c.add("equal", {reshape(c, target, t_view), c.runtime(base + "#classes")});
    if (const auto* ii = find_attr(n, "ignore_index")) {
        c.define_constant(base + "#ignore", Tensor::from_values(DType::int64, {}, {double(ii->i())}));
        Id keep = c.add("logical_not", {c.add("equal", {reshape(c, target, t_view), c.runtime(base + "#ignore")})});
        mask = c.add("logical_and", {mask, keep});
    }
    Id picked = c.add("reduce_sum", {c.add("where", {mask, x, zero})}, {{"axes", vector<std::int64_t>{1}}, {"keepdims", false}});
    // Selected weight per element: w[target] (or 1), 0 where nothing is selected.
    Id weight;
    const bool has_weight = !input_name(n, 2).empty();
    if (has_weight) {
        Id w = c.runtime(n.input(2));
        if (shape_of(c, w) != Shape{C}) unsupported("weight must have shape [C]");
        weight = c.add("reduce_sum", {c.add("where", {mask, reshape(c, w, class_view), zero})},
                       {{"axes", vector<std::int64_t>{1}}, {"keepdims", false}});
    } else {
        weight = c.add("reduce_sum", {c.add("cast", {mask}, {{"to", string(to_string(dtype))}})},
                       {{"axes", vector<std::int64_t>{1}}, {"keepdims", false}});
    }
    const string reduction = attr_string(n, "reduction", "mean");
    Id loss = c.add("neg", {has_weight ? c.add("mul", {picked, weight}) : picked}, {}, reduction == "none" ? out_name : string());
    if (reduction == "none") return loss;
    if (reduction == "sum") return c.add("sum", {loss}, {}, out_name);
    if (reduction != "mean") unsupported("reduction '" + reduction + "'");
    return c.add("div", {c.add("sum", {loss}), c.add("sum", {weight})}, {}, out_name);
}

void convert_nll(ImportContext& c, const onnx::NodeProto& n) {
    c.define_node(out0(n), nll_loss(c, n, x0(c, n), out0(n)));
}

void convert_softmax_cross_entropy(ImportContext& c, const onnx::NodeProto& n) {
    // log_softmax over the class axis, then the NLL above; the optional second output is it.
    Id log_prob = c.add("log_softmax", {x0(c, n)}, {{"axis", std::int64_t(1)}},
                        n.output_size() > 1 ? n.output(1) : string());
    if (n.output_size() > 1 && !n.output(1).empty()) c.define_node(n.output(1), log_prob);
    c.define_node(out0(n), nll_loss(c, n, log_prob, out0(n)));
}

/// Activations with float attributes: ONNX attribute name → BackendOp attribute, with defaults.
Converter activation(string op, vector<std::tuple<string, string, float>> attrs) {
    return [op, attrs](ImportContext& c, const onnx::NodeProto& n) {
        Attributes a;
        for (const auto& [onnx_name, name, fallback] : attrs) a[name] = double(attr_float(n, onnx_name, fallback));
        c.define_node(out0(n), c.add(op, {x0(c, n)}, a, out0(n)));
    };
}


bool is_half(DType t) { return t == DType::float16 || t == DType::bfloat16; }

/// `convert` for a converter whose decomposition chains several float ops, run in float32 when
/// its float inputs are float16 or bfloat16: each such input widened exactly (a cast node, or a
/// widened constant, so weights stay parameters), the decomposition in float32, and each float32
/// output rounded once to that half type, as one fused kernel computes them (ONNX Runtime,
/// PyTorch's half kernels; the reference capsules' halves_in_float.hpp). Step by step in half
/// precision every op would round: InstanceNormalization of values with a standard deviation of
/// 300 squared them past float16's range and gave 0 everywhere.
Converter in_float32(Converter convert) {
    return [convert = std::move(convert)](ImportContext& c, const onnx::NodeProto& n) {
        auto half_input = [&](const string& name) {
            return !name.empty() && c.has(name) && c.value(name).is_tensor() && is_half(c.type(name).dtype);
        };
        std::optional<DType> half;
        for (const auto& name : n.input())
            if (half_input(name) && !half) half = c.type(name).dtype;
        if (!half) return convert(c, n);
        onnx::NodeProto wide = n;
        for (int i = 0; i < n.input_size(); ++i) {
            const string& name = n.input(i);
            if (!half_input(name)) continue;
            const string widened = c.fresh_value_name(name + "#float32");
            if (c.is_constant(name)) {
                const Tensor& t = c.constant(name, "input");
                c.define_constant(widened, Tensor::from_values(DType::float32, t.shape(), t.to_doubles()));
            } else {
                c.define_node(widened, c.add("cast", {c.runtime(name)}, {{"to", string("float32")}}));
            }
            wide.set_input(i, widened);
        }
        for (int o = 0; o < n.output_size(); ++o)
            if (!n.output(o).empty()) wide.set_output(o, c.fresh_value_name(n.output(o) + "#float32"));
        convert(c, wide);
        for (int o = 0; o < n.output_size(); ++o) {
            const string &name = n.output(o), &computed = wide.output(o);
            if (name.empty() || !c.has(computed)) continue;
            if (c.type(computed).dtype != DType::float32) {  // an int64 or bool output: as it is
                c.define(name, c.bound(computed));
            } else if (c.is_constant(computed)) {
                const Tensor& t = c.constant(computed, "output");
                c.define_constant(name, Tensor::from_values(*half, t.shape(), t.to_doubles()));
            } else {
                c.define_node(name, c.add("cast", {c.runtime(computed)}, {{"to", string(to_string(*half))}}, name));
            }
        }
    };
}

}  // namespace

const std::map<string, Converter>& converters() {
    static const std::map<string, Converter> table = [] {
        std::map<string, Converter> t;
        for (auto [onnx_op, op] : vector<std::pair<string, string>>{
                 {"Abs", "abs"}, {"Sqrt", "sqrt"}, {"Relu", "relu"}, {"Sigmoid", "sigmoid"},
                 {"Tanh", "tanh"}, {"Exp", "exp"}, {"Log", "log"}, {"Sin", "sin"}, {"Cos", "cos"},
                 {"Reciprocal", "inv"}, {"Softplus", "softplus"}, {"Erf", "erf"}, {"Floor", "floor"},
                 {"Ceil", "ceil"}, {"Sign", "sign"}, {"Tan", "tan"}, {"Asin", "asin"}, {"Acos", "acos"},
                 {"Atan", "atan"}, {"Sinh", "sinh"}, {"Cosh", "cosh"}, {"Asinh", "asinh"}, {"Acosh", "acosh"},
                 {"Atanh", "atanh"}, {"Softsign", "softsign"}, {"HardSwish", "hardswish"}, {"Mish", "mish"},
                 {"Not", "logical_not"}})
            t[onnx_op] = unary(op);
        for (auto [onnx_op, op] : vector<std::pair<string, string>>{
                 {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"},
                 {"Equal", "equal"}, {"Less", "less"}, {"Greater", "greater"}, {"LessOrEqual", "less_equal"},
                 {"GreaterOrEqual", "greater_equal"}, {"And", "logical_and"}, {"Or", "logical_or"},
                 {"Xor", "logical_xor"}})
            t[onnx_op] = binary(op);
        t["Where"] = convert_where;
        t["NegativeLogLikelihoodLoss"] = convert_nll;
        t["SoftmaxCrossEntropyLoss"] = convert_softmax_cross_entropy;
        t["DepthToSpace"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_depth_space(c, n, true); };
        t["SpaceToDepth"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_depth_space(c, n, false); };
        t["InstanceNormalization"] = convert_instance_norm;
        t["Gather"] = convert_gather;
        t["GatherElements"] = convert_gather_elements;
        t["ScatterElements"] = convert_scatter_elements;
        t["Scatter"] = convert_scatter_elements;
        t["Slice"] = convert_slice;
        t["Split"] = convert_split;
        t["Pad"] = convert_pad;
        t["Cast"] = convert_cast;
        t["CastLike"] = convert_cast_like;
        t["Mod"] = convert_mod;
        t["BitShift"] = convert_bit_shift;
        t["TopK"] = convert_top_k;
        t["NonMaxSuppression"] = convert_non_max_suppression;
        t["NonZero"] = convert_non_zero;
        t["Det"] = convert_det;
        t["Einsum"] = convert_einsum;
        t["GatherND"] = convert_gather_nd;
        t["ScatterND"] = convert_scatter_nd;
        t["Compress"] = convert_compress;
        t["Range"] = convert_range;
        t["Round"] = convert_round;
        t["Pow"] = convert_pow;
        t["RNN"] = convert_rnn;
        t["GRU"] = convert_gru;
        t["LSTM"] = convert_lstm;
        t["GridSample"] = convert_grid_sample;
        t["MaxUnpool"] = convert_max_unpool;
        t["Resize"] = convert_resize;
        t["Upsample"] = convert_resize;
        t["IsNaN"] = convert_is_nan;
        t["LRN"] = convert_lrn;
        t["MeanVarianceNormalization"] = convert_mean_variance_normalization;
        t["ConstantOfShape"] = convert_constant_of_shape;
        t["ReverseSequence"] = convert_reverse_sequence;
        t["OneHot"] = convert_one_hot;
        t["ArgMax"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_arg(c, n, "argmax"); };
        t["ArgMin"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_arg(c, n, "argmin"); };
        t["Trilu"] = convert_trilu;
        t["CumSum"] = convert_cumsum;
        t["Tile"] = convert_tile;
        t["LeakyRelu"] = activation("leaky_relu", {{"alpha", "negative_slope", 0.01f}});
        t["Elu"] = activation("elu", {{"alpha", "alpha", 1.0f}});
        t["Celu"] = activation("celu", {{"alpha", "alpha", 1.0f}});
        t["Selu"] = activation("selu", {{"alpha", "alpha", 1.67326319217681884765625f}, {"gamma", "gamma", 1.05070102214813232421875f}});
        t["HardSigmoid"] = activation("hardsigmoid", {{"alpha", "alpha", 0.2f}, {"beta", "beta", 0.5f}});
        t["ThresholdedRelu"] = activation("thresholded_relu", {{"alpha", "alpha", 1.0f}});
        t["Shrink"] = activation("shrink", {{"lambd", "lambd", 0.5f}, {"bias", "bias", 0.0f}});
        t["IsInf"] = convert_is_inf;
        t["Max"] = variadic("max");
        t["Min"] = variadic("min");
        t["Sum"] = variadic("add");
        t["Mean"] = convert_mean;
        t["Neg"] = convert_neg;
        t["PRelu"] = convert_prelu;
        t["Identity"] = convert_identity;
        t["Dropout"] = convert_dropout;
        t["Clip"] = convert_clip;
        t["Softmax"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_softmax_like(c, n, "softmax"); };
        t["LogSoftmax"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_softmax_like(c, n, "log_softmax"); };
        t["Hardmax"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_softmax_like(c, n, "hardmax"); };
        t["Reshape"] = convert_reshape_like;
        t["Squeeze"] = convert_reshape_like;
        t["Unsqueeze"] = convert_reshape_like;
        t["Flatten"] = convert_flatten;
        t["Transpose"] = convert_transpose;
        t["Expand"] = convert_expand;
        t["Concat"] = convert_concat;
        t["MatMul"] = convert_matmul;
        t["Gemm"] = convert_gemm;
        t["Conv"] = convert_conv;
        t["ConvTranspose"] = convert_conv_transpose;
        t["MaxPool"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_pool(c, n, true); };
        t["AveragePool"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_pool(c, n, false); };
        t["GlobalAveragePool"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_global_pool(c, n, "reduce_mean"); };
        t["GlobalMaxPool"] = [](ImportContext& c, const onnx::NodeProto& n) { convert_global_pool(c, n, "reduce_max"); };
        t["BatchNormalization"] = convert_batch_norm;
        t["LayerNormalization"] = convert_layer_norm;
        t["ReduceSum"] = reduce("reduce_sum");
        t["ReduceMean"] = reduce("reduce_mean");
        t["ReduceMax"] = reduce("reduce_max");
        t["ReduceMin"] = reduce("reduce_min");
        t["ReduceProd"] = reduce("reduce_prod");
        t["ReduceSumSquare"] = reduce("reduce_sum", "square");
        t["ReduceL1"] = reduce("reduce_sum", "abs");
        t["ReduceL2"] = convert_reduce_l2;
        t["ReduceLogSum"] = reduce("reduce_sum", {}, "log");
        t["ReduceLogSumExp"] = convert_reduce_log_sum_exp;
        // Decompositions into several float ops compute half-precision operands in float32.
        for (const char* op : {"InstanceNormalization", "MeanVarianceNormalization", "Gemm", "LRN", "ReduceL2",
                               "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "Mean", "RNN", "GRU", "LSTM",
                               "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Einsum"})
            t[op] = in_float32(t.at(op));
        add_quantization_converters(t);
        add_signal_converters(t);
        add_control_flow_converters(t);
        add_sequence_converters(t);
        return t;
    }();
    return table;
}

string known_unsupported_reason(const string& op) {
    static const std::map<string, string> reasons = [] {
        std::map<string, string> r;
        for (auto o : {"StringNormalizer", "TfIdfVectorizer", "RegexFullMatch", "StringConcat"})
            r[o] = "string tensors are not supported";
        for (auto o : {"RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal", "Bernoulli", "Multinomial"})
            r[o] = "random ops cannot be checked against fixed outputs and are not imported";
        for (auto o : {"RoiAlign", "MaxRoiPool"}) r[o] = "region-of-interest pooling is not supported";
        r["Unique"] = "its outputs' lengths depend on the input's values (only NonMaxSuppression and NonZero are "
                      "imported with such a length)";
        return r;
    }();
    auto it = reasons.find(op);
    return it == reasons.end() ? string() : it->second;
}

std::int64_t scalar_int(ImportContext& c, const std::string& name, const std::string& what) {
    const Tensor& t = c.constant(name, what);
    if (t.numel() != 1) unsupported(what + " must hold one value, got shape " + to_string(t.shape()));
    // Read as int64 itself: through double, values beyond 2^53 would round.
    return int_values(t).at(0);
}

}  // namespace capsule::onnx_import
