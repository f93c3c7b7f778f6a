// The optimizer ops of ONNX's ai.onnx.preview.training domain (version 1): Adagrad, Adam and
// Momentum, each one update step of the spec's formulas (onnx/defs/training/defs.cc) as
// elementwise BackendOps over every optimized tensor. R (learning rate, float scalar) and T
// (update count, int64 scalar) may be run-time values: the conditions on T are `where`s.
#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

/// The node's inputs R, T and then `groups` lists of n tensors each (X1..Xn, G1..Gn, ...).
struct OptimizerInputs {
    Id r = 0, t = 0;                 // R, and T cast to X's dtype
    vector<vector<Id>> groups;       // groups[g][i]: the i-th tensor of group g
    DType dtype = DType::float32;
};

OptimizerInputs read_inputs(ImportContext& c, const onnx::NodeProto& n, int groups) {
    const int tensors = n.input_size() - 2;
    if (tensors <= 0 || tensors % groups != 0 || n.output_size() != tensors / groups * (groups - 1))
        unsupported(n.op_type() + " has " + std::to_string(n.input_size()) + " inputs and " +
                    std::to_string(n.output_size()) + " outputs; expected R, T, then " + std::to_string(groups) +
                    " lists of n tensors and " + std::to_string(groups - 1) + " lists of n outputs");
    OptimizerInputs in;
    const int count = tensors / groups;
    in.dtype = c.type(n.input(2)).dtype;
    if (in.dtype != DType::float32 && in.dtype != DType::float64) unsupported(n.op_type() + " of " + string(to_string(in.dtype)));
    const auto cast = [&](Id v) {
        return c.node_type(v).dtype == in.dtype ? v : c.add("cast", {v}, {{"to", string(to_string(in.dtype))}});
    };
    for (int k : {0, 1})
        if (element_count(c.type(n.input(k)).shape) != 1)
            unsupported(string(k == 0 ? "R" : "T") + " must be a scalar, got shape " + to_string(c.type(n.input(k)).shape));
    in.r = cast(c.runtime(n.input(0)));
    in.t = cast(c.runtime(n.input(1)));
    for (int g = 0; g < groups; ++g) {
        in.groups.emplace_back();
        for (int i = 0; i < count; ++i) {
            const Id v = c.runtime(n.input(2 + g * count + i));
            if (c.node_type(v).dtype != in.dtype) unsupported(n.op_type() + "'s tensors must share one dtype");
            if (g > 0 && c.node_type(v).shape != c.node_type(in.groups[0][static_cast<std::size_t>(i)]).shape)
                unsupported(n.op_type() + " input " + std::to_string(2 + g * count + i) + " has shape " +
                            to_string(c.node_type(v).shape) + ", the tensor it updates " +
                            to_string(c.node_type(in.groups[0][static_cast<std::size_t>(i)]).shape));
            in.groups.back().push_back(v);
        }
    }
    return in;
}

Id scalar(ImportContext& c, const onnx::NodeProto& n, DType dtype, double v) {
    return scalar_constant(c, n, "coefficient", dtype, v);
}

/// Output k of the node, defined as node `id` (named after it).
void output_node(ImportContext& c, const onnx::NodeProto& n, int k, Id id) {
    if (!n.output(k).empty()) c.define_node(n.output(k), c.add_identity(id, n.output(k)));
}

/// g_regularized = norm_coefficient · x + g.
Id regularized(ImportContext& c, const onnx::NodeProto& n, DType dtype, Id x, Id g) {
    return c.add("add", {c.add("mul", {scalar(c, n, dtype, attr_float(n, "norm_coefficient", 0)), x}), g});
}

/// Adagrad(R, T, X..., G..., H...) → X_new..., H_new...:
/// r = R / (1 + T · decay_factor); g' = norm_coefficient · X + G; H_new = H + g'²;
/// X_new = X - r · g' / (√H_new + epsilon).
void convert_adagrad(ImportContext& c, const onnx::NodeProto& n) {
    const auto in = read_inputs(c, n, 3);
    const DType dt = in.dtype;
    const Id decayed = c.add("add", {scalar(c, n, dt, 1), c.add("mul", {in.t, scalar(c, n, dt, attr_float(n, "decay_factor", 0))})});
    const Id r = c.add("div", {in.r, decayed});
    const auto count = static_cast<int>(in.groups[0].size());
    for (int i = 0; i < count; ++i) {
        const Id x = in.groups[0][i], g = regularized(c, n, dt, x, in.groups[1][i]);
        const Id h_new = c.add("add", {in.groups[2][i], c.add("mul", {g, g})});
        const Id denominator = c.add("add", {c.add("sqrt", {h_new}), scalar(c, n, dt, attr_float(n, "epsilon", 0))});
        output_node(c, n, i, c.add("sub", {x, c.add("div", {c.add("mul", {r, g}), denominator})}));
        output_node(c, n, count + i, h_new);
    }
}

/// Adam(R, T, X..., G..., V..., H...) → X_new..., V_new..., H_new...:
/// g' = norm_coefficient · X + G; V_new = alpha · V + (1 - alpha) · g';
/// H_new = beta · H + (1 - beta) · g'²; r = R · √(1 - beta^T) / (1 - alpha^T) when T > 0, else R;
/// X_new = (1 - norm_coefficient_post) · (X - r · V_new / (√H_new + epsilon)).
void convert_adam(ImportContext& c, const onnx::NodeProto& n) {
    const auto in = read_inputs(c, n, 4);
    const DType dt = in.dtype;
    const double alpha = attr_float(n, "alpha", 0.9f), beta = attr_float(n, "beta", 0.999f);
    const Id one = scalar(c, n, dt, 1);
    const Id bias_beta = c.add("sqrt", {c.add("sub", {one, c.add("pow", {scalar(c, n, dt, beta), in.t})})});
    const Id bias_alpha = c.add("sub", {one, c.add("pow", {scalar(c, n, dt, alpha), in.t})});
    const Id adjusted = c.add("div", {c.add("mul", {in.r, bias_beta}), bias_alpha});
    const Id r = c.add("where", {c.add("greater", {in.t, scalar(c, n, dt, 0)}), adjusted, in.r});
    const auto count = static_cast<int>(in.groups[0].size());
    for (int i = 0; i < count; ++i) {
        const Id x = in.groups[0][i], g = regularized(c, n, dt, x, in.groups[1][i]);
        const Id v_new = c.add("add", {c.add("mul", {scalar(c, n, dt, alpha), in.groups[2][i]}),
                                       c.add("mul", {scalar(c, n, dt, 1 - alpha), g})});
        const Id h_new = c.add("add", {c.add("mul", {scalar(c, n, dt, beta), in.groups[3][i]}),
                                       c.add("mul", {scalar(c, n, dt, 1 - beta), c.add("mul", {g, g})})});
        const Id denominator = c.add("add", {c.add("sqrt", {h_new}), scalar(c, n, dt, attr_float(n, "epsilon", 1e-6f))});
        const Id x_new = c.add("sub", {x, c.add("mul", {r, c.add("div", {v_new, denominator})})});
        const double post = attr_float(n, "norm_coefficient_post", 0);
        output_node(c, n, i, c.add("mul", {scalar(c, n, dt, 1 - post), x_new}));
        output_node(c, n, count + i, v_new);
        output_node(c, n, 2 * count + i, h_new);
    }
}

/// Momentum(R, T, X..., G..., V...) → X_new..., V_new...: g' = norm_coefficient · X + G;
/// V_new = alpha · V + beta' · g' with beta' = beta when T > 0, else 1; mode "standard":
/// X_new = X - R · V_new; "nesterov": X_new = X - R · (g' + alpha · V_new).
void convert_momentum(ImportContext& c, const onnx::NodeProto& n) {
    const auto in = read_inputs(c, n, 3);
    const DType dt = in.dtype;
    const string mode = attr_string(n, "mode", "");
    if (mode != "standard" && mode != "nesterov") unsupported("Momentum mode '" + mode + "' (standard or nesterov)");
    const double alpha = attr_float(n, "alpha", 0);
    const Id beta = c.add("where", {c.add("greater", {in.t, scalar(c, n, dt, 0)}), scalar(c, n, dt, attr_float(n, "beta", 0)),
                                    scalar(c, n, dt, 1)});
    const auto count = static_cast<int>(in.groups[0].size());
    for (int i = 0; i < count; ++i) {
        const Id x = in.groups[0][i], g = regularized(c, n, dt, x, in.groups[1][i]);
        const Id v_new = c.add("add", {c.add("mul", {scalar(c, n, dt, alpha), in.groups[2][i]}), c.add("mul", {beta, g})});
        const Id step = mode == "standard" ? v_new : c.add("add", {g, c.add("mul", {scalar(c, n, dt, alpha), v_new})});
        output_node(c, n, i, c.add("sub", {x, c.add("mul", {in.r, step})}));
        output_node(c, n, count + i, v_new);
    }
}

}  // namespace

const std::map<string, Converter>& training_converters() {
    static const std::map<string, Converter> table{
        {"Adagrad", convert_adagrad}, {"Adam", convert_adam}, {"Momentum", convert_momentum}};
    return table;
}

}  // namespace capsule::onnx_import
