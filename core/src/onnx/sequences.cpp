// ONNX sequence and optional ops, resolved at import: a sequence is a list of tensor values whose
// length and element positions are known when the model is imported (positions and splits must
// be constants), so SequenceAt is the element itself, ConcatFromSequence a `concat`,
// SplitToSequence `slice`s, and SequenceMap its body inlined once per element. An optional is
// present (its value) or empty, which is known at import too.
#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

/// A sequence position (ONNX: in [-n, n - 1], or [-n, n] where `insert`), made non-negative.
std::size_t position(ImportContext& c, const onnx::NodeProto& n, int k, std::size_t size, bool insert) {
    const std::int64_t given = scalar_int(c, n.input(k), n.op_type() + "'s position");
    const auto count = static_cast<std::int64_t>(size);
    const std::int64_t p = given < 0 ? given + count : given;
    if (p < 0 || p > count || (!insert && p == count))
        unsupported("position " + std::to_string(given) + " is outside a sequence of " + std::to_string(size) +
                    " tensors");
    return static_cast<std::size_t>(p);
}

/// A tensor value of the sequence's element dtype (SequenceEmpty's `dtype` for an empty one),
/// checked.
void require_element(ImportContext& c, const string& seq, const string& tensor) {
    const Value& s = c.value(seq);
    const Value& t = c.value(tensor);
    if (!t.is_tensor()) unsupported("'" + tensor + "' is not a tensor");
    if (s.type.dtype != t.type.dtype)
        unsupported("a " + string(to_string(t.type.dtype)) + " tensor inserted into a sequence of " +
                    string(to_string(s.type.dtype)));
}

void convert_sequence_empty(ImportContext& c, const onnx::NodeProto& n) {
    const int onnx_dtype = static_cast<int>(attr_int(n, "dtype", 1));
    const auto dtype = dtype_of_onnx(onnx_dtype);
    if (!dtype) unsupported("SequenceEmpty of " + onnx_type_name(onnx_dtype) + kSupportedOnnxDtypes);
    c.define_sequence(n.output(0), {}, *dtype);
}

void convert_sequence_construct(ImportContext& c, const onnx::NodeProto& n) {
    vector<string> elements;
    for (const auto& in : n.input()) {
        if (!c.value(in).is_tensor()) unsupported("'" + in + "' is not a tensor");
        if (c.type(in).dtype != c.type(n.input(0)).dtype) unsupported("SequenceConstruct of tensors of different dtypes");
        elements.push_back(in);
    }
    c.define_sequence(n.output(0), elements, c.type(n.input(0)).dtype);
}

void convert_sequence_insert(ImportContext& c, const onnx::NodeProto& n) {
    vector<string> elements = c.sequence(n.input(0), "SequenceInsert's input_sequence");
    require_element(c, n.input(0), n.input(1));
    const std::size_t at = input_name(n, 2).empty() ? elements.size() : position(c, n, 2, elements.size(), true);
    elements.insert(elements.begin() + static_cast<std::ptrdiff_t>(at), n.input(1));
    c.define_sequence(n.output(0), elements, c.type(n.input(1)).dtype);
}

void convert_sequence_erase(ImportContext& c, const onnx::NodeProto& n) {
    vector<string> elements = c.sequence(n.input(0), "SequenceErase's input_sequence");
    if (elements.empty()) unsupported("SequenceErase of an empty sequence");
    const std::size_t at = input_name(n, 1).empty() ? elements.size() - 1 : position(c, n, 1, elements.size(), false);
    elements.erase(elements.begin() + static_cast<std::ptrdiff_t>(at));
    c.define_sequence(n.output(0), elements, c.type(n.input(0)).dtype);
}

void convert_sequence_at(ImportContext& c, const onnx::NodeProto& n) {
    const auto& elements = c.sequence(n.input(0), "SequenceAt's input_sequence");
    c.define(n.output(0), c.bound(elements[position(c, n, 1, elements.size(), false)]));
}

void convert_sequence_length(ImportContext& c, const onnx::NodeProto& n) {
    const auto size = static_cast<double>(c.sequence(n.input(0), "SequenceLength's input_sequence").size());
    c.define_constant(n.output(0), Tensor::from_values(DType::int64, {}, {size}));
}

/// ConcatFromSequence(axis, new_axis): `concat` along axis, or along a new axis (each element
/// given a unit axis there first; axis may then be in [-r - 1, r]).
void convert_concat_from_sequence(ImportContext& c, const onnx::NodeProto& n) {
    const auto& elements = c.sequence(n.input(0), "ConcatFromSequence's input_sequence");
    if (elements.empty()) unsupported("ConcatFromSequence of an empty sequence");
    const bool new_axis = attr_int(n, "new_axis", 0) != 0;
    const auto rank = static_cast<std::int64_t>(c.type(elements[0]).shape.size());
    const std::int64_t axis = normalize_axis(attr_int(n, "axis", 0), rank + (new_axis ? 1 : 0));
    vector<Id> parts;
    for (const auto& e : elements) {
        Id id = c.runtime(e);
        if (new_axis) {
            Shape s = c.node_type(id).shape;
            s.insert(s.begin() + axis, 1);
            id = c.add("reshape", {id}, {{"shape", s}});
        }
        parts.push_back(id);
    }
    c.define_node(n.output(0), parts.size() == 1 ? c.add_identity(parts[0], n.output(0))
                                                 : c.add("concat", parts, {{"axis", axis}}, n.output(0)));
}

/// SplitToSequence(input, split, axis, keepdims): without split, one element per index of axis
/// (squeezed when keepdims = 0); a scalar split cuts chunks of that length (the last may be
/// shorter); a 1-D split gives the lengths. Each element is a `slice`.
void convert_split_to_sequence(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = c.runtime(n.input(0));
    const Shape shape = c.node_type(x).shape;
    const std::int64_t axis = normalize_axis(attr_int(n, "axis", 0), static_cast<std::int64_t>(shape.size()));
    const std::int64_t length = shape[static_cast<std::size_t>(axis)];
    vector<std::int64_t> sizes;
    bool squeeze = false;
    constexpr std::int64_t kMaxElements = 65536;
    if (input_name(n, 1).empty()) {
        if (length > kMaxElements) unsupported("SplitToSequence into over 65536 tensors");
        sizes.assign(static_cast<std::size_t>(length), 1);
        squeeze = attr_int(n, "keepdims", 1) == 0;
    } else {
        const Tensor& split = c.constant(n.input(1), "SplitToSequence's split");
        const auto values = int_values(split);
        if (split.shape().empty()) {
            if (values.at(0) <= 0) unsupported("split must be positive");
            if ((length + values[0] - 1) / values[0] > kMaxElements) unsupported("SplitToSequence into over 65536 tensors");
            for (std::int64_t at = 0; at < length; at += values[0]) sizes.push_back(std::min(values[0], length - at));
        } else {
            if (static_cast<std::int64_t>(values.size()) > kMaxElements) unsupported("SplitToSequence into over 65536 tensors");
            sizes = values;
            std::int64_t total = 0;
            for (auto v : sizes) {
                if (v < 0 || v > length - total)
                    unsupported("split lengths sum past the axis length " + std::to_string(length) + " (or one is negative)");
                total += v;
            }
            if (total != length) unsupported("split lengths sum to " + std::to_string(total) + ", the axis has " + std::to_string(length));
        }
    }
    vector<string> elements;
    std::int64_t at = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        Id part = slice_axis(c, x, axis, at, at + sizes[k]);
        at += sizes[k];
        if (squeeze) {
            Shape s = c.node_type(part).shape;
            s.erase(s.begin() + axis);
            part = c.add("reshape", {part}, {{"shape", s}});
        }
        const string name = c.fresh_value_name(n.output(0) + "[" + std::to_string(k) + "]");
        c.define_node(name, part);
        elements.push_back(name);
    }
    c.define_sequence(n.output(0), elements, c.node_type(x).dtype);
}

/// SequenceMap(input_sequence, additional_inputs...): the body inlined once per element of the
/// first sequence, given element i of every sequence input and each tensor input whole; its
/// outputs gathered into sequences.
void convert_sequence_map(ImportContext& c, const onnx::NodeProto& n) {
    const auto* attr = find_attr(n, "body");
    if (!attr || !attr->has_g()) unsupported("SequenceMap needs its body");
    const std::size_t count = c.sequence(n.input(0), "SequenceMap's input_sequence").size();
    if (n.output_size() > attr->g().output_size())
        unsupported("SequenceMap has " + std::to_string(n.output_size()) + " outputs, its body " +
                    std::to_string(attr->g().output_size()));
    vector<vector<string>> outputs(static_cast<std::size_t>(n.output_size()));
    for (std::size_t i = 0; i < count; ++i) {
        vector<Value> inputs;
        for (const auto& in : n.input()) {
            const Value& v = c.value(in);
            if (v.sequence && v.sequence->size() != count) unsupported("SequenceMap's sequences differ in length");
            inputs.push_back(c.bound(v.sequence ? (*v.sequence)[i] : in));
        }
        const auto outs = inline_subgraph(c, n, attr->g(), inputs, n.output(0) + "#" + std::to_string(i));
        for (std::size_t k = 0; k < outputs.size() && k < outs.size(); ++k) outputs[k].push_back(outs[k]);
    }
    for (int k = 0; k < n.output_size(); ++k) {
        const auto& out_type = attr->g().output(k).type();
        DType dtype = DType::float32;
        if (out_type.has_tensor_type())
            if (auto d = dtype_of_onnx(out_type.tensor_type().elem_type())) dtype = *d;
        if (!outputs[static_cast<std::size_t>(k)].empty()) dtype = c.type(outputs[static_cast<std::size_t>(k)][0]).dtype;
        c.define_sequence(n.output(k), outputs[static_cast<std::size_t>(k)], dtype);
    }
}

/// Optional(input): the input (present); without an input, an empty optional.
void convert_optional(ImportContext& c, const onnx::NodeProto& n) {
    if (input_name(n, 0).empty()) {
        Value v;
        v.none = true;
        c.define(n.output(0), v);
        return;
    }
    c.define(n.output(0), c.bound(n.input(0)));
}

void convert_optional_has_element(ImportContext& c, const onnx::NodeProto& n) {
    const bool present = !input_name(n, 0).empty() && !c.value(n.input(0)).none;
    c.define_constant(n.output(0), Tensor::from_values(DType::boolean, {}, {present ? 1.0 : 0.0}));
}

void convert_optional_get_element(ImportContext& c, const onnx::NodeProto& n) {
    const Value& v = c.value(n.input(0));
    if (v.none) unsupported("OptionalGetElement of an empty optional");
    c.define(n.output(0), c.bound(n.input(0)));
}

}  // namespace

void add_sequence_converters(std::map<string, Converter>& table) {
    table["SequenceEmpty"] = convert_sequence_empty;
    table["SequenceConstruct"] = convert_sequence_construct;
    table["SequenceInsert"] = convert_sequence_insert;
    table["SequenceErase"] = convert_sequence_erase;
    table["SequenceAt"] = convert_sequence_at;
    table["SequenceLength"] = convert_sequence_length;
    table["ConcatFromSequence"] = convert_concat_from_sequence;
    table["SplitToSequence"] = convert_split_to_sequence;
    table["SequenceMap"] = convert_sequence_map;
    table["Optional"] = convert_optional;
    table["OptionalHasElement"] = convert_optional_has_element;
    table["OptionalGetElement"] = convert_optional_get_element;
}

}  // namespace capsule::onnx_import
