// The guard in front of libonnx's shape inference. libonnx (1.12) is third-party code that runs
// on untrusted input, and some of its inference functions index shapes with attribute values
// they never range-check: LayerNormalization with axis -3 on a rank-2 input that declares the
// Mean output writes dim(-1) and segfaults. So before inference, every node's index-like
// attributes (axis, axes, perm, window sizes, pads, split) are checked against the ranks of its
// inputs as inference will see them, and a bad value is an Error(input) naming the node, the op,
// the attribute and the value.
//
// Ranks are tracked here with per-op rules from the ONNX operator specs (graph inputs after the
// static shapes are fixed, initializers, Constant values, then each op's output rank). A value
// may also carry a rank declared in the model's value_info or outputs, which libonnx uses where
// its own inference gives none; both are checked. A node whose input rank this pass cannot tell
// (an op without a rule here, a subgraph, another domain) ends the part of the graph handed to
// libonnx: inference never runs on a node whose attributes were not checked. Import only uses
// inference to cross-check the converters' shapes, so the rest of the graph is still imported.
#include <algorithm>
#include <set>

#include "import_context.hpp"
#include "capsule/shape_math.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;

namespace {

/// What this pass knows about a value: its rank, and for a rank-1 value its length (a shape
/// vector's length decides the rank of Reshape, Expand and ConstantOfShape outputs).
struct Known {
    std::int64_t rank = -1;
    std::int64_t length = -1;  // dim 0 when rank == 1 and known
};

Known known_of_dims(const vector<std::int64_t>& dims) {
    Known k;
    k.rank = static_cast<std::int64_t>(dims.size());
    if (k.rank == 1) k.length = dims[0];
    return k;
}

class Guard {
public:
    Guard(const onnx::GraphProto& g, std::int64_t opset, const string& src) : opset_(opset), src_(src) {
        for (const auto& vi : g.value_info()) declare(vi);
        for (const auto& vi : g.output()) declare(vi);
        for (const auto& init : g.initializer())
            known_[init.name()] = known_of_dims({init.dims().begin(), init.dims().end()});
        for (const auto& in : g.input()) {
            if (known_.count(in.name())) continue;  // an initializer's default
            if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
            known_[in.name()].rank = in.type().tensor_type().shape().dim_size();
            const auto& shape = in.type().tensor_type().shape();
            if (shape.dim_size() == 1 && shape.dim(0).has_dim_value()) known_[in.name()].length = shape.dim(0).dim_value();
        }
    }

    /// Checks the nodes in order; returns how many leading nodes inference may see.
    int run(const onnx::GraphProto& g) {
        for (int i = 0; i < g.node_size(); ++i) {
            const auto& node = g.node(i);
            node_ = &node;
            if (!node.domain().empty() && node.domain() != "ai.onnx") return i;
            for (const auto& a : node.attribute())
                if (a.has_g() || a.graphs_size() > 0) return i;
            for (const auto& in : node.input())
                if (!in.empty() && rank(in) < 0) return i;
            check(node);
            if (!propagate(node)) {
                // Outputs of unknown rank: later nodes that read them end the checked part.
                for (const auto& o : node.output()) known_.erase(o);
            }
        }
        return g.node_size();
    }

private:
    std::int64_t opset_;
    const string& src_;
    const onnx::NodeProto* node_ = nullptr;
    std::unordered_map<string, Known> known_;
    std::unordered_map<string, std::int64_t> declared_;  // rank from value_info / outputs

    void declare(const onnx::ValueInfoProto& vi) {
        if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
            declared_[vi.name()] = vi.type().tensor_type().shape().dim_size();
    }

    std::int64_t rank(const string& name) const {
        auto it = known_.find(name);
        return it == known_.end() ? -1 : it->second.rank;
    }
    std::int64_t length(const string& name) const {
        auto it = known_.find(name);
        return it == known_.end() ? -1 : it->second.length;
    }
    /// Every rank inference may give input i: the one derived here and a declared one.
    vector<std::int64_t> ranks_of_input(int i) const {
        vector<std::int64_t> out;
        if (i >= node_->input_size() || node_->input(i).empty()) return out;
        const string& name = node_->input(i);
        if (auto r = rank(name); r >= 0) out.push_back(r);
        if (auto it = declared_.find(name); it != declared_.end() && std::find(out.begin(), out.end(), it->second) == out.end())
            out.push_back(it->second);
        return out;
    }

    [[noreturn]] void refuse(const string& attr, const string& value, const string& why) const {
        string label = "ONNX op " + node_->op_type() + " (node '" + node_->name() + "'";
        if (node_->name().empty() && node_->output_size() > 0)
            label = "ONNX op " + node_->op_type() + " (node with output '" + node_->output(0) + "'";
        throw Error(ErrorCode::input, src_ + ": " + label + ", opset " + std::to_string(opset_) + "): attribute '" + attr +
                         "' = " + value + " " + why + "; refused before ONNX shape inference");
    }
    static string list(const vector<std::int64_t>& v) {
        string s = "[";
        for (std::size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
        return s + "]";
    }

    /// An integer axis attribute that must lie in [-r, r) ([-r, r] with `end_inclusive`) for every
    /// rank r (+ `extra`) of input `input`. An absent attribute takes `fallback`, or is not
    /// checked when `fallback` is nullopt (a default libonnx range-checks itself).
    void check_axis(const string& attr, std::optional<std::int64_t> fallback, int input, std::int64_t extra = 0,
                    bool end_inclusive = false) {
        const auto* a = find_attr(*node_, attr);
        if (!a && !fallback) return;
        const std::int64_t v = a ? a->i() : *fallback;
        for (auto r0 : ranks_of_input(input)) {
            const std::int64_t r = r0 + extra;
            const std::int64_t hi = end_inclusive ? r : r - 1;
            if (v < -r || v > hi)
                refuse(attr, std::to_string(v),
                       "is out of range for input " + std::to_string(input) + " of rank " + std::to_string(r0) +
                           (hi < -r ? string(" (it has no axes)")
                                    : " (valid: [" + std::to_string(-r) + ", " + std::to_string(hi) + "])"));
        }
    }
    /// A list of axes, each in [-r, r) for every rank r (+ extra) of input 0, without repeats.
    void check_axes(const string& attr, std::int64_t extra = 0) {
        auto axes = attr_ints(*node_, attr);
        if (!axes) return;
        for (auto r0 : ranks_of_input(0)) {
            const std::int64_t r = r0 + extra;
            std::set<std::int64_t> seen;
            for (auto v : *axes) {
                const auto axis = try_normalize_axis(v, r);
                if (!axis)
                    refuse(attr, list(*axes),
                           "has axis " + std::to_string(v) + ", out of range for " +
                               (extra ? "an output of rank " + std::to_string(r) : "input 0 of rank " + std::to_string(r0)) +
                               (r == 0 ? string(" (it has no axes)")
                                       : " (valid: [" + std::to_string(-r) + ", " + std::to_string(r - 1) + "])"));
                if (!seen.insert(*axis).second)
                    refuse(attr, list(*axes), "names axis " + std::to_string(*axis) + " twice");
            }
        }
    }
    /// A window attribute (kernel_shape, strides, dilations, pads, output_padding) whose length
    /// must be `per_axis` × the spatial rank (input 0's rank − 2).
    void check_window(const string& attr, std::int64_t per_axis, bool positive) {
        auto v = attr_ints(*node_, attr);
        if (!v) return;
        for (auto r : ranks_of_input(0)) {
            if (r < 3)
                refuse(attr, list(*v), "needs an input with spatial dimensions ([N, C, ...]); input 0 has rank " + std::to_string(r));
            const auto want = per_axis * (r - 2);
            if (static_cast<std::int64_t>(v->size()) != want)
                refuse(attr, list(*v), "has " + std::to_string(v->size()) + " entries; input 0 of rank " + std::to_string(r) +
                                           " needs " + std::to_string(want));
        }
        for (auto x : *v)
            if (positive ? x < 1 : x < 0)
                refuse(attr, list(*v), positive ? "must hold positive values" : "must hold non-negative values");
    }

    void check(const onnx::NodeProto& n) {
        const string& op = n.op_type();
        if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
            check_axis("axis", std::nullopt, 0);
        } else if (op == "LayerNormalization") {
            check_axis("axis", -1, 0);
        } else if (op == "Concat") {
            for (int k = 0; k < n.input_size(); ++k) check_axis("axis", std::nullopt, k);
        } else if (op == "Gather" || op == "GatherElements" || op == "ScatterElements" || op == "Scatter" ||
                   op == "ArgMax" || op == "ArgMin" || op == "Split" || op == "TopK" || op == "LpNormalization" ||
                   op == "Compress" || op == "Unique") {
            check_axis("axis", std::nullopt, 0);
        } else if (op == "Flatten") {
            check_axis("axis", std::nullopt, 0, 0, true);
        } else if (op == "OneHot") {
            check_axis("axis", std::nullopt, 0, 1);
        } else if (op == "ReverseSequence") {
            check_axis("batch_axis", std::nullopt, 0);
            check_axis("time_axis", std::nullopt, 0);
        } else if (op == "Transpose") {
            if (auto perm = attr_ints(n, "perm")) {
                for (auto r : ranks_of_input(0)) {
                    if (static_cast<std::int64_t>(perm->size()) != r)
                        refuse("perm", list(*perm), "has " + std::to_string(perm->size()) + " entries; input 0 has rank " + std::to_string(r));
                    std::set<std::int64_t> seen;
                    for (auto p : *perm)
                        if (p < 0 || p >= r || !seen.insert(p).second)
                            refuse("perm", list(*perm), "is not a permutation of the " + std::to_string(r) + " axes of input 0");
                }
            }
        } else if (op.rfind("Reduce", 0) == 0 || op == "MeanVarianceNormalization") {
            check_axes("axes");
        } else if (op == "Squeeze" || (op == "Slice" && opset_ < 10)) {
            check_axes("axes");
        } else if (op == "Unsqueeze") {
            if (auto axes = attr_ints(n, "axes")) check_axes("axes", static_cast<std::int64_t>(axes->size()));
        } else if (op == "Conv" || op == "ConvTranspose" || op == "MaxPool" || op == "AveragePool" || op == "LpPool" ||
                   op == "MaxUnpool") {
            check_window("kernel_shape", 1, true);
            check_window("strides", 1, true);
            check_window("dilations", 1, true);
            check_window("pads", 2, false);
            check_window("output_padding", 1, false);
            if (const auto* g = find_attr(n, "group"); g && g->i() < 1) refuse("group", std::to_string(g->i()), "must be positive");
        } else if (op == "Pad" && opset_ < 11) {
            const string attr = opset_ < 2 ? "paddings" : "pads";
            if (auto pads = attr_ints(n, attr))
                for (auto r : ranks_of_input(0))
                    if (static_cast<std::int64_t>(pads->size()) != 2 * r)
                        refuse(attr, list(*pads), "has " + std::to_string(pads->size()) + " entries; input 0 of rank " +
                                                      std::to_string(r) + " needs " + std::to_string(2 * r));
        } else if (op == "DepthToSpace" || op == "SpaceToDepth") {
            if (const auto* b = find_attr(n, "blocksize"); b && b->i() < 1)
                refuse("blocksize", std::to_string(b->i()), "must be positive");
        } else if (op == "LRN") {
            if (const auto* s = find_attr(n, "size"); s && s->i() < 1) refuse("size", std::to_string(s->i()), "must be positive");
        }
        if (op == "Split") {
            if (auto split = attr_ints(n, "split")) {
                if (static_cast<int>(split->size()) != n.output_size())
                    refuse("split", list(*split), "has " + std::to_string(split->size()) + " entries for " +
                                                      std::to_string(n.output_size()) + " outputs");
                for (auto s : *split)
                    if (s < 0) refuse("split", list(*split), "holds a negative size");
            }
        }
    }

    void set(const string& name, std::int64_t r, std::int64_t len = -1) {
        if (name.empty()) return;
        known_[name] = Known{r, r == 1 ? len : -1};
    }
    void set_all(const onnx::NodeProto& n, std::int64_t r) {
        for (const auto& o : n.output()) set(o, r);
    }
    std::int64_t max_input_rank(const onnx::NodeProto& n) const {
        std::int64_t r = -1;
        for (const auto& in : n.input())
            if (!in.empty()) r = std::max(r, rank(in));
        return r;
    }
    /// Number of axes a reduction removes (keepdims = 0), or -1 when not known here.
    std::int64_t reduced_axes(const onnx::NodeProto& n, std::int64_t r) const {
        const bool axes_input = n.op_type() == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
        if (!axes_input) {
            auto axes = attr_ints(n, "axes");
            return axes && !axes->empty() ? static_cast<std::int64_t>(axes->size()) : r;
        }
        const string axes = input_name(n, 1);
        if (axes.empty()) return attr_int(n, "noop_with_empty_axes", 0) ? 0 : r;
        const auto len = length(axes);
        if (len == 0) return attr_int(n, "noop_with_empty_axes", 0) ? 0 : r;
        return len;
    }

    /// Output ranks of `n` from its input ranks (ONNX operator specs); false when unknown here.
    bool propagate(const onnx::NodeProto& n) {
        static const std::set<string> same_rank = {
            "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh", "Tan", "Tanh",
            "Ceil", "Floor", "Round", "Sign", "Erf", "Exp", "Log", "Neg", "Not", "Reciprocal", "Relu", "Sigmoid",
            "Softplus", "Softsign", "Sqrt", "IsNaN", "IsInf", "HardSwish", "Mish", "LeakyRelu", "Elu", "Celu",
            "Selu", "HardSigmoid", "ThresholdedRelu", "Shrink", "Identity", "Cast", "CastLike", "Clip", "Softmax",
            "LogSoftmax", "Hardmax", "Transpose", "Pad", "Tile", "CumSum", "Trilu", "DepthToSpace", "SpaceToDepth",
            "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "MaxUnpool", "GlobalAveragePool",
            "GlobalMaxPool", "GlobalLpPool", "InstanceNormalization", "LayerNormalization",
            "LRN", "LpNormalization", "MeanVarianceNormalization", "Dropout", "Split", "Slice", "TopK",
            "GatherElements", "ScatterElements", "Scatter", "ScatterND", "ReverseSequence", "Resize", "Upsample"};
        static const std::set<string> broadcast = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "Equal",
                                                    "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
                                                    "Xor", "Max", "Min", "Sum", "Mean", "Where", "PRelu"};
        const string& op = n.op_type();
        const std::int64_t r0 = n.input_size() > 0 && !n.input(0).empty() ? rank(n.input(0)) : -1;
        if (op == "Constant") {
            for (const auto& a : n.attribute()) {
                if (a.name() == "value") return set(n.output(0), a.t().dims_size(), a.t().dims_size() == 1 ? a.t().dims(0) : -1), true;
                if (a.name() == "value_float" || a.name() == "value_int") return set(n.output(0), 0), true;
                if (a.name() == "value_floats") return set(n.output(0), 1, a.floats_size()), true;
                if (a.name() == "value_ints") return set(n.output(0), 1, a.ints_size()), true;
            }
            return false;
        }
        if (op == "BatchNormalization") {
            if (r0 < 0) return false;
            set(n.output(0), r0);  // Y; the training outputs (mean, var) are [C]
            for (int k = 1; k < n.output_size(); ++k) set(n.output(k), 1);
            return true;
        }
        if (same_rank.count(op)) {
            if (r0 < 0) return false;
            // A rank-1 value keeps its length through elementwise ops and casts.
            const bool keeps_length = !(op == "Pad" || op == "Tile" || op == "Slice" || op == "Split" || op == "TopK" ||
                                        op == "Resize" || op == "Upsample");
            for (const auto& o : n.output()) set(o, r0, keeps_length ? length(n.input(0)) : -1);
            return true;
        }
        if (broadcast.count(op)) {
            const auto r = max_input_rank(n);
            if (r < 0) return false;
            std::int64_t len = 1;  // a rank-1 result: the length of an operand that is not 1
            for (const auto& in : n.input())
                if (!in.empty() && rank(in) == 1 && length(in) != 1) len = length(in) < 0 || len == -1 ? -1 : length(in);
            set_all(n, r);
            if (r == 1) set(n.output(0), 1, len);
            return true;
        }
        if (op == "Shape") {
            if (r0 < 0) return false;
            auto start = attr_int(n, "start", 0), end = attr_int(n, "end", r0);
            if (start < 0) start += r0;
            if (end < 0) end += r0;
            start = std::clamp<std::int64_t>(start, 0, r0);
            end = std::clamp<std::int64_t>(end, 0, r0);
            set(n.output(0), 1, std::max<std::int64_t>(0, end - start));
            return true;
        }
        if (op == "Size") return set(n.output(0), 0), true;
        if (op == "Flatten" || op == "Gemm" || op == "EyeLike" || op == "NonZero") return set_all(n, 2), true;
        if (op == "Range") return set(n.output(0), 1), true;
        if (op == "MatMul") {
            const auto a = r0, b = n.input_size() > 1 ? rank(n.input(1)) : -1;
            if (a < 0 || b < 0) return false;
            set(n.output(0), a == 1 && b == 1 ? 0 : a == 1 ? b - 1 : b == 1 ? a - 1 : std::max(a, b));
            return true;
        }
        if (op == "Gather") {
            const auto ri = n.input_size() > 1 ? rank(n.input(1)) : -1;
            if (r0 < 0 || ri < 0) return false;
            set(n.output(0), r0 - 1 + ri, r0 == 1 && ri == 1 ? length(n.input(1)) : -1);
            return true;
        }
        if (op == "Concat") {
            const auto r = max_input_rank(n);
            if (r < 0) return false;
            std::int64_t len = 0;
            for (const auto& in : n.input())
                if (!in.empty()) len = len < 0 || length(in) < 0 ? -1 : len + length(in);
            set(n.output(0), r, r == 1 ? len : -1);
            return true;
        }
        if (op == "Reshape") {
            const auto len = n.input_size() > 1 ? length(n.input(1)) : -1;
            if (len < 0) return false;
            return set(n.output(0), len), true;
        }
        if (op == "Expand") {
            const auto len = n.input_size() > 1 ? length(n.input(1)) : -1;
            if (r0 < 0 || len < 0) return false;
            return set(n.output(0), std::max(r0, len)), true;
        }
        if (op == "ConstantOfShape") {
            const auto len = length(n.input(0));
            if (len < 0) return false;
            return set(n.output(0), len), true;
        }
        if (op == "Unsqueeze" || op == "Squeeze") {
            std::int64_t k = -1;
            if (opset_ < 13) {
                if (auto axes = attr_ints(n, "axes")) k = static_cast<std::int64_t>(axes->size());
            } else if (!input_name(n, 1).empty()) {
                k = length(n.input(1));
            }
            if (r0 < 0 || k < 0) return false;  // Squeeze without axes depends on the dims
            const auto r = op == "Unsqueeze" ? r0 + k : r0 - k;
            return set(n.output(0), r, r == 1 && r0 == 0 ? 1 : -1), true;
        }
        if (op.rfind("Reduce", 0) == 0) {
            if (r0 < 0) return false;
            if (attr_int(n, "keepdims", 1) != 0) return set(n.output(0), r0), true;
            const auto k = reduced_axes(n, r0);
            if (k < 0) return false;
            return set(n.output(0), r0 - k), true;
        }
        if (op == "ArgMax" || op == "ArgMin") {
            if (r0 < 0) return false;
            return set(n.output(0), attr_int(n, "keepdims", 1) != 0 ? r0 : r0 - 1), true;
        }
        if (op == "NegativeLogLikelihoodLoss" || op == "SoftmaxCrossEntropyLoss") {
            if (r0 < 0) return false;
            set(n.output(0), attr_string(n, "reduction", "mean") == "none" ? r0 - 1 : 0);
            if (n.output_size() > 1) set(n.output(1), r0);
            return true;
        }
        if (op == "OneHot") {
            const auto ri = r0;
            if (ri < 0) return false;
            return set(n.output(0), ri + 1), true;
        }
        return false;
    }
};

}  // namespace

int nodes_safe_for_inference(const onnx::GraphProto& g, std::int64_t opset, const string& src) {
    return Guard(g, opset, src).run(g);
}

}  // namespace capsule::onnx_import
