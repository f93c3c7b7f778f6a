// ONNX control flow (If, Loop, Scan) without a control-flow BackendOp: the graph stays a static
// DAG, so subgraphs are inlined. A Loop or Scan is unrolled over a trip count known at import (a
// constant M and constant conditions; a Scan's static sequence length), each iteration's body
// inlined with its own names; an If whose condition is a constant inlines the branch taken, and
// one whose condition is computed at run time computes both branches and selects with `where`
// (its outputs must then have the same dtype and shape in both branches). docs/onnx.md states
// the conditions.
#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

constexpr std::int64_t kMaxIterations = 4096;  // bounds the unrolled graph

const onnx::GraphProto& graph_attr(const onnx::NodeProto& n, const string& name) {
    const auto* a = find_attr(n, name);
    if (!a || !a->has_g()) unsupported("attribute '" + name + "' (a graph) is missing");
    return a->g();
}

/// Renames, in `g` and the graphs nested in it, every reference to a name of `names` (a body's
/// local names, which nested graphs may read from their outer scope).
void rename_references(onnx::GraphProto& g, const std::map<string, string>& names) {
    auto renamed = [&](const string& s) {
        auto it = names.find(s);
        return it == names.end() ? s : it->second;
    };
    for (auto& node : *g.mutable_node()) {
        for (auto& in : *node.mutable_input()) in = renamed(in);
        for (auto& a : *node.mutable_attribute()) {
            if (a.has_g()) rename_references(*a.mutable_g(), names);
            for (auto& sub : *a.mutable_graphs()) rename_references(sub, names);
        }
    }
    for (auto& o : *g.mutable_output()) o.set_name(renamed(o.name()));
}

}  // namespace

/// Inlines `body`: its inputs are bound to `inputs`, its initializers and node outputs get fresh
/// names (so that a body inlined many times defines each value once), and its nodes are folded or
/// converted in order. Returns the names of the body's outputs in the importer's scope.
vector<string> inline_subgraph(ImportContext& c, const onnx::NodeProto& owner, const onnx::GraphProto& body,
                           const vector<Value>& inputs, const string& tag) {
    if (body.input_size() != static_cast<int>(inputs.size()))
        unsupported(owner.op_type() + " body takes " + std::to_string(body.input_size()) + " inputs, given " +
                    std::to_string(inputs.size()));
    std::map<string, string> names;
    auto local = [&](const string& s) {
        if (!s.empty() && !names.count(s)) names[s] = c.fresh_value_name(s + "#" + tag);
    };
    for (const auto& in : body.input()) local(in.name());
    for (const auto& init : body.initializer()) local(init.name());
    for (const auto& node : body.node())
        for (const auto& o : node.output()) local(o);
    onnx::GraphProto copy = body;
    rename_references(copy, names);
    for (int k = 0; k < body.input_size(); ++k) c.define(names.at(body.input(k).name()), inputs[static_cast<std::size_t>(k)]);
    for (const auto& init : body.initializer()) c.define_constant(names.at(init.name()), tensor_from_proto(init));
    const onnx::NodeProto* outer = c.current;
    for (auto& node : *copy.mutable_node()) {
        for (auto& o : *node.mutable_output()) if (!o.empty()) o = names.at(o);
        c.current = &node;
        try {
            convert_node(c, node);
        } catch (const Unsupported& u) {
            c.current = outer;
            unsupported("in its body, " + node.op_type() + ": " + u.reason);
        }
    }
    c.current = outer;
    vector<string> outputs;
    for (const auto& o : copy.output()) {
        if (!c.has(o.name())) unsupported(owner.op_type() + " body output '" + o.name() + "' is not produced");
        outputs.push_back(o.name());
    }
    return outputs;
}

namespace {

/// Binds the node's output k to the value named `from`.
void define_output(ImportContext& c, const onnx::NodeProto& n, int k, const string& from) {
    if (k < n.output_size() && !n.output(k).empty()) c.define(n.output(k), c.bound(from));
}

void define_output_node(ImportContext& c, const onnx::NodeProto& n, int k, Id id) {
    if (k < n.output_size() && !n.output(k).empty()) c.define_node(n.output(k), id);
}

/// A scalar bool or integer constant's truth, read at import.
bool constant_truth(ImportContext& c, const string& name, const string& what) {
    const Tensor& t = c.constant(name, what);
    if (t.numel() != 1) unsupported(what + " must hold one value, got shape " + to_string(t.shape()));
    return t.at(0) != 0;
}

Value constant_value(Tensor t) {
    Value v;
    v.type = {t.shape(), t.dtype()};
    v.constant = std::move(t);
    return v;
}

/// `values` (each of one shape) stacked along a new axis `axis` (in [-r - 1, r] for values of rank
/// r); the node is named `name`.
Id stack(ImportContext& c, const vector<Id>& values, std::int64_t axis, const string& name) {
    vector<Id> parts;
    for (Id v : values) {
        Shape s = c.node_type(v).shape;
        const auto slots = static_cast<std::int64_t>(s.size()) + 1;
        if (axis < -slots || axis >= slots)
            unsupported("scan output axis " + std::to_string(axis) + " out of range for outputs of rank " +
                        std::to_string(slots - 1));
        if (axis < 0) axis += slots;
        s.insert(s.begin() + axis, 1);
        parts.push_back(c.add("reshape", {v}, {{"shape", s}}));
    }
    return c.add("concat", parts, {{"axis", axis}}, name);
}

/// x[..., t, ...] along `axis`, that axis removed.
Id element_at(ImportContext& c, Id x, std::int64_t axis, std::int64_t t) {
    Shape s = c.node_type(x).shape;
    if (axis < 0 || axis >= static_cast<std::int64_t>(s.size()))
        unsupported("axis " + std::to_string(axis) + " of a rank-" + std::to_string(s.size()) + " scanned value");
    s.erase(s.begin() + axis);
    return c.add("reshape", {slice_axis(c, x, axis, t, t + 1)}, {{"shape", s}});
}

/// "" when values `a` and `b` have one type (tensors of one dtype and shape, or sequences of as
/// many such tensors), else what differs, for messages.
string branch_type_mismatch(ImportContext& c, const string& a, const string& b) {
    const Value &va = c.value(a), &vb = c.value(b);
    auto describe = [&](const Value& v, const string& name) {
        if (v.none) return string("an empty optional");
        if (v.sequence) return "a sequence of " + std::to_string(v.sequence->size()) + " tensors";
        return string(to_string(c.type(name).dtype)) + to_string(c.type(name).shape);
    };
    const string in_both = describe(va, a) + " in then_branch and " + describe(vb, b) + " in else_branch";
    if (va.none || vb.none) return in_both;
    if (static_cast<bool>(va.sequence) != static_cast<bool>(vb.sequence)) return in_both;
    if (!va.sequence) return c.type(a) == c.type(b) ? string() : in_both;
    if (va.sequence->size() != vb.sequence->size()) return in_both;
    for (std::size_t i = 0; i < va.sequence->size(); ++i)
        if (c.type((*va.sequence)[i]) != c.type((*vb.sequence)[i])) return in_both + " (element " + std::to_string(i) + " differs)";
    return {};
}

/// ONNX If: the branch a constant condition selects, inlined; with a run-time condition, both
/// branches and a `where` per output tensor (the untaken branch is computed too, so a failure in
/// it, e.g. an index out of range, fails the run); outputs whose type differs between the
/// branches need the condition at import.
void convert_if(ImportContext& c, const onnx::NodeProto& n) {
    const string cond = n.input(0);
    const auto& then_branch = graph_attr(n, "then_branch");
    const auto& else_branch = graph_attr(n, "else_branch");
    const string tag = n.output(0);
    if (c.is_constant(cond)) {
        const bool taken = constant_truth(c, cond, "If's cond");
        const auto outs = inline_subgraph(c, n, taken ? then_branch : else_branch, {}, tag + (taken ? "#then" : "#else"));
        for (int k = 0; k < n.output_size() && k < static_cast<int>(outs.size()); ++k) define_output(c, n, k, outs[k]);
        return;
    }
    if (element_count(c.type(cond).shape) != 1) unsupported("If's cond must hold one value");
    const auto then_outs = inline_subgraph(c, n, then_branch, {}, tag + "#then");
    const auto else_outs = inline_subgraph(c, n, else_branch, {}, tag + "#else");
    if (then_outs.size() != else_outs.size() || static_cast<int>(then_outs.size()) < n.output_size())
        unsupported("If branches give different numbers of outputs");
    // Each output must have one type whichever branch runs: the same tensor type, or sequences of
    // as many tensors of the same types. Otherwise the condition must be known at import (asking
    // for it names the graph input it comes from, so a caller may specialise the model to it).
    for (int k = 0; k < n.output_size(); ++k)
        if (!n.output(k).empty()) {
            const string mismatch = branch_type_mismatch(c, then_outs[k], else_outs[k]);
            if (!mismatch.empty())
                c.constant(cond, "If's cond (output " + std::to_string(k) + " is " + mismatch +
                                     ", so the branch must be chosen at import)");
        }
    const Id selector = c.add("reshape", {c.runtime(cond)}, {{"shape", Shape{}}});
    auto select = [&](const string& a, const string& b, const string& name) {
        return c.add("where", {selector, c.runtime(a), c.runtime(b)}, {}, name);
    };
    for (int k = 0; k < n.output_size(); ++k) {
        if (n.output(k).empty()) continue;
        if (!c.value(then_outs[k]).sequence) {
            c.define_node(n.output(k), select(then_outs[k], else_outs[k], n.output(k)));
            continue;
        }
        const auto a = *c.value(then_outs[k]).sequence, b = *c.value(else_outs[k]).sequence;
        vector<string> elements;
        for (std::size_t i = 0; i < a.size(); ++i) {
            const string name = c.fresh_value_name(n.output(k) + "#" + std::to_string(i));
            c.define_node(name, select(a[i], b[i], name));
            elements.push_back(name);
        }
        c.define_sequence(n.output(k), elements, c.type(then_outs[k]).dtype);
    }
}

/// ONNX Loop(M, cond, v_initial...) unrolled: M and cond (and the body's cond_out in every
/// iteration) must be known at import; the iteration number is a constant in each copy of the
/// body, so index arithmetic on it folds. Scan outputs are stacked along a new first axis.
void convert_loop(ImportContext& c, const onnx::NodeProto& n) {
    const auto& body = graph_attr(n, "body");
    std::optional<std::int64_t> trips;
    if (!input_name(n, 0).empty()) {
        const Tensor& m = c.constant(n.input(0), "Loop's trip count M");
        if (m.numel() != 1) unsupported("Loop's M must hold one value");
        trips = int_values(m).at(0);
    }
    bool running = input_name(n, 1).empty() || constant_truth(c, n.input(1), "Loop's cond");
    vector<Value> state;
    for (int k = 2; k < n.input_size(); ++k) {
        if (n.input(k).empty()) unsupported("an absent loop-carried value (optional) is not supported");
        state.push_back(c.bound(n.input(k)));
    }
    const auto carried = static_cast<int>(state.size());
    const int scans = body.output_size() - 1 - carried;
    if (scans < 0) unsupported("Loop body has fewer outputs than loop-carried values");
    vector<vector<Id>> scanned(static_cast<std::size_t>(scans));
    std::int64_t k = 0;
    for (; running && (!trips || k < *trips); ++k) {
        if (k >= kMaxIterations) unsupported("Loop runs over " + std::to_string(kMaxIterations) + " iterations (the unroll bound)");
        vector<Value> inputs{constant_value(Tensor::from_values(DType::int64, {}, {double(k)})),
                             constant_value(Tensor::from_values(DType::boolean, {}, {1.0}))};
        inputs.insert(inputs.end(), state.begin(), state.end());
        const auto outs = inline_subgraph(c, n, body, inputs, n.output(0) + "#" + std::to_string(k));
        // With M and no cond input the loop is a for loop: the spec ignores cond_out.
        if (!trips || !input_name(n, 1).empty())
            running = constant_truth(c, outs[0], "the Loop body's cond_out (the number of iterations must be known at import)");
        for (int i = 0; i < carried; ++i) state[static_cast<std::size_t>(i)] = c.bound(outs[static_cast<std::size_t>(1 + i)]);
        for (int j = 0; j < scans; ++j) scanned[static_cast<std::size_t>(j)].push_back(c.runtime(outs[static_cast<std::size_t>(1 + carried + j)]));
    }
    for (int i = 0; i < carried && i < n.output_size(); ++i)
        if (!n.output(i).empty()) c.define(n.output(i), state[static_cast<std::size_t>(i)]);
    for (int j = 0; j < scans && carried + j < n.output_size(); ++j) {
        const string& name = n.output(carried + j);
        if (name.empty()) continue;
        if (k == 0) unsupported("a Loop of zero iterations with scan outputs (their element shape is unknown)");
        c.define_node(name, stack(c, scanned[static_cast<std::size_t>(j)], 0, name));
    }
}

/// One Scan over `length` steps: states carried through the body, scan input j read at step t
/// along in_axes[j] (from the end when reversed), scan output j stacked along out_axes[j]
/// (reversed likewise). Returns the final states and the stacked outputs (named `out_names`).
struct ScanSpec {
    vector<std::int64_t> in_axes, in_reverse, out_axes, out_reverse;
};
std::pair<vector<Value>, vector<Id>> unroll_scan(ImportContext& c, const onnx::NodeProto& n, const onnx::GraphProto& body,
                                                vector<Value> state, const vector<Id>& inputs, const ScanSpec& spec,
                                                const vector<string>& out_names, const string& tag) {
    std::int64_t length = -1;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
        const Shape& s = c.node_type(inputs[j]).shape;
        const std::int64_t axis = spec.in_axes[j];
        if (axis < 0 || axis >= static_cast<std::int64_t>(s.size())) unsupported("scan input axis out of range");
        if (length >= 0 && s[static_cast<std::size_t>(axis)] != length) unsupported("scan inputs differ in sequence length");
        length = s[static_cast<std::size_t>(axis)];
    }
    if (length <= 0) unsupported("a Scan over an empty sequence");
    if (length > kMaxIterations) unsupported("Scan over " + std::to_string(length) + " steps (the unroll bound is " + std::to_string(kMaxIterations) + ")");
    const auto carried = state.size();
    const auto outputs = static_cast<std::size_t>(body.output_size()) - carried;
    vector<vector<Id>> scanned(outputs, vector<Id>(static_cast<std::size_t>(length)));
    for (std::int64_t t = 0; t < length; ++t) {
        vector<Value> in = state;
        for (std::size_t j = 0; j < inputs.size(); ++j) {
            const std::int64_t at = spec.in_reverse[j] ? length - 1 - t : t;
            const string name = c.fresh_value_name(tag + "#element");
            c.define_node(name, element_at(c, inputs[j], spec.in_axes[j], at));
            in.push_back(c.value(name));
        }
        const auto outs = inline_subgraph(c, n, body, in, tag + "#" + std::to_string(t));
        for (std::size_t i = 0; i < carried; ++i) {
            // A Scan's states keep their type from step to step (the spec; ONNX Runtime checks too).
            if (state[i].is_tensor() && c.value(outs[i]).is_tensor() && c.type(outs[i]) != state[i].type)
                unsupported("Scan state " + std::to_string(i) + " changes from " + string(to_string(state[i].type.dtype)) +
                            to_string(state[i].type.shape) + " to " + string(to_string(c.type(outs[i]).dtype)) +
                            to_string(c.type(outs[i]).shape) + " in step " + std::to_string(t));
            state[i] = c.bound(outs[i]);
        }
        for (std::size_t j = 0; j < outputs; ++j)
            scanned[j][static_cast<std::size_t>(spec.out_reverse[j] ? length - 1 - t : t)] = c.runtime(outs[carried + j]);
    }
    vector<Id> stacked;
    for (std::size_t j = 0; j < outputs; ++j) stacked.push_back(stack(c, scanned[j], spec.out_axes[j], out_names[j]));
    return {state, stacked};
}

vector<std::int64_t> ints_or(const onnx::NodeProto& n, const string& name, std::size_t count, std::int64_t fallback) {
    auto v = attr_ints(n, name).value_or(vector<std::int64_t>(count, fallback));
    if (v.size() != count) unsupported(name + " lists " + std::to_string(v.size()) + " values for " + std::to_string(count));
    return v;
}

/// ONNX Scan (opset 8, with its leading batch axis, and 9+ with scan axes and directions),
/// unrolled over the static sequence length.
void convert_scan(ImportContext& c, const onnx::NodeProto& n) {
    const auto& body = graph_attr(n, "body");
    const bool batched = c.opset() < 9;
    const int first = batched ? 1 : 0;
    if (batched && !input_name(n, 0).empty()) unsupported("Scan's sequence_lens (opset 8) is not supported");
    const auto scan_inputs = static_cast<std::size_t>(attr_int(n, "num_scan_inputs", 0));
    const auto total = static_cast<std::size_t>(n.input_size() - first);
    if (scan_inputs == 0 || scan_inputs > total) unsupported("num_scan_inputs out of range");
    const std::size_t carried = total - scan_inputs;
    if (static_cast<std::size_t>(body.output_size()) < carried)
        unsupported("Scan body has " + std::to_string(body.output_size()) + " outputs for " + std::to_string(carried) +
                    " loop-carried states");
    const auto outputs = static_cast<std::size_t>(body.output_size()) - carried;
    ScanSpec spec;
    spec.in_reverse = ints_or(n, batched ? "directions" : "scan_input_directions", scan_inputs, 0);
    spec.in_axes = ints_or(n, "scan_input_axes", scan_inputs, 0);
    spec.out_reverse = ints_or(n, "scan_output_directions", outputs, 0);
    spec.out_axes = ints_or(n, "scan_output_axes", outputs, 0);
    vector<Value> state;
    vector<Id> inputs;
    for (std::size_t k = 0; k < total; ++k) {
        const string& name = n.input(static_cast<int>(first + k));
        if (k < carried) state.push_back(c.bound(name));
        else inputs.push_back(c.runtime(name));
    }
    for (std::size_t j = 0; j < inputs.size(); ++j) {
        const auto rank = static_cast<std::int64_t>(c.node_type(inputs[j]).shape.size()) - (batched ? 1 : 0);
        spec.in_axes[j] = normalize_axis(spec.in_axes[j], rank);
    }
    vector<string> out_names;
    for (std::size_t j = 0; j < outputs; ++j) {
        const auto k = static_cast<int>(carried + j);
        out_names.push_back(k < n.output_size() && !batched ? n.output(k) : string());
    }
    if (!batched) {
        auto [final_state, stacked] = unroll_scan(c, n, body, state, inputs, spec, out_names, n.output(0));
        for (std::size_t i = 0; i < carried && static_cast<int>(i) < n.output_size(); ++i)
            if (!n.output(static_cast<int>(i)).empty()) c.define(n.output(static_cast<int>(i)), final_state[i]);
        for (std::size_t j = 0; j < outputs; ++j) define_output_node(c, n, static_cast<int>(carried + j), stacked[j]);
        return;
    }
    // Opset 8: every tensor has a leading batch axis; each batch element is scanned on its own
    // (scan axis 1 of the input is axis 0 of the element) and the results are stacked again.
    std::int64_t batch = -1;
    auto batch_of = [&](Id v, const string& what) {
        const Shape& s = c.node_type(v).shape;
        if (s.empty()) unsupported("opset-8 Scan " + what + " has no batch axis (rank 0)");
        if (batch >= 0 && s[0] != batch)
            unsupported("opset-8 Scan " + what + " has batch " + std::to_string(s[0]) + ", another has " + std::to_string(batch));
        batch = s[0];
    };
    for (Id v : inputs) batch_of(v, "scan input");
    for (std::size_t i = 0; i < carried; ++i) batch_of(c.runtime(n.input(static_cast<int>(first + i))), "state");
    vector<vector<Id>> states_out(carried), scans_out(outputs);
    for (std::int64_t b = 0; b < batch; ++b) {
        vector<Value> s;
        for (std::size_t i = 0; i < carried; ++i) {
            const string name = c.fresh_value_name(n.output(0) + "#state");
            c.define_node(name, element_at(c, c.runtime(n.input(static_cast<int>(first + i))), 0, b));
            s.push_back(c.value(name));
        }
        vector<Id> xs;
        for (Id v : inputs) xs.push_back(element_at(c, v, 0, b));
        auto [final_state, stacked] = unroll_scan(c, n, body, s, xs, spec, vector<string>(outputs), n.output(0) + "#" + std::to_string(b));
        for (std::size_t i = 0; i < carried; ++i) {
            const string name = c.fresh_value_name(n.output(0) + "#final");
            c.define(name, final_state[i]);
            states_out[i].push_back(c.runtime(name));
        }
        for (std::size_t j = 0; j < outputs; ++j) scans_out[j].push_back(stacked[j]);
    }
    for (std::size_t i = 0; i < carried; ++i)
        define_output_node(c, n, static_cast<int>(i), stack(c, states_out[i], 0, n.output(static_cast<int>(i))));
    for (std::size_t j = 0; j < outputs; ++j) {
        const auto k = static_cast<int>(carried + j);
        define_output_node(c, n, k, stack(c, scans_out[j], 0, k < n.output_size() ? n.output(k) : string()));
    }
}

}  // namespace

void add_control_flow_converters(std::map<string, Converter>& table) {
    table["If"] = convert_if;
    table["Loop"] = convert_loop;
    table["Scan"] = convert_scan;
}

}  // namespace capsule::onnx_import
