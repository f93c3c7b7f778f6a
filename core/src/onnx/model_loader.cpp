// ONNX model loading: protobuf parsing, onnx::checker, static input shapes, onnx shape inference,
// initializers, the node-by-node import loop, and the tensor-file and model-loading entry points.
#include <algorithm>
#include <type_traits>
#include <utility>
#include <cctype>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <onnx/checker.h>
#include <onnx/onnx-data_pb.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "capsule/shape_math.hpp"
#include "capsule/tensor_io.hpp"

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;

void unsupported(string reason) { throw Unsupported{std::move(reason)}; }

std::optional<DType> dtype_of_onnx(int elem_type) {
    switch (elem_type) {
        case onnx::TensorProto::FLOAT: return DType::float32;
        case onnx::TensorProto::DOUBLE: return DType::float64;
        case onnx::TensorProto::INT64: return DType::int64;
        case onnx::TensorProto::BOOL: return DType::boolean;
        case onnx::TensorProto::INT32: return DType::int32;
        case onnx::TensorProto::INT8: return DType::int8;
        case onnx::TensorProto::UINT8: return DType::uint8;
        case onnx::TensorProto::INT16: return DType::int16;
        case onnx::TensorProto::UINT16: return DType::uint16;
        case onnx::TensorProto::UINT32: return DType::uint32;
        case onnx::TensorProto::UINT64: return DType::uint64;
        case onnx::TensorProto::FLOAT16: return DType::float16;
        case onnx::TensorProto::BFLOAT16: return DType::bfloat16;
        default: return std::nullopt;
    }
}

const char* const kSupportedOnnxDtypes =
    " (supported: float, double, float16, bfloat16, int64, int32, int16, int8, uint64, uint32, uint16, uint8, bool)";

string onnx_type_name(int elem_type) {
    if (onnx::TensorProto::DataType_IsValid(elem_type)) {
        string name = onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(elem_type));
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        return name;
    }
    return "element type " + std::to_string(elem_type);
}

namespace {

template <typename T, typename Field>
void copy_typed(Tensor& t, const Field& field, const string& what) {
    if (static_cast<std::int64_t>(field.size()) != t.numel())
        throw Error(ErrorCode::input, what + ": holds " + std::to_string(field.size()) + " values, shape " +
                         to_string(t.shape()) + " needs " + std::to_string(t.numel()));
    auto out = t.values<T>();
    for (int i = 0; i < field.size(); ++i) {
        const auto v = field.Get(i);
        // A wider field (int32_data for int8 ... uint16 and the 16-bit floats' bits, uint64_data for
        // uint32) must hold values of T: anything else is a malformed tensor, not a wrapped value.
        if constexpr (std::is_integral_v<T> && std::is_integral_v<decltype(v)>)
            if (!std::in_range<T>(v))
                throw Error(ErrorCode::input, what + ": value " + std::to_string(i) + " (" + std::to_string(v) +
                                                  ") is outside its element type's range");
        out[i] = static_cast<T>(v);
    }
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& proto) {
    const string what = "tensor '" + proto.name() + "'";
    if (proto.has_segment()) unsupported("segmented tensor data (or a sequence / optional value, which is not a tensor)");
    if (proto.data_location() == onnx::TensorProto::EXTERNAL)
        unsupported(what + " keeps its data in an external file (external data is not supported)");
    auto dtype = dtype_of_onnx(proto.data_type());
    if (!dtype) unsupported("dtype " + onnx_type_name(proto.data_type()) + kSupportedOnnxDtypes);
    Shape shape(proto.dims().begin(), proto.dims().end());
    for (auto d : shape)
        if (d < 0) throw Error(ErrorCode::input, what + ": negative dimension in " + to_string(shape));
    const auto count = element_count(shape);  // raises on overflow
    const auto available = proto.has_raw_data()
                               ? static_cast<std::int64_t>(proto.raw_data().size() / dtype_size(*dtype))
                               : static_cast<std::int64_t>(proto.float_data_size() + proto.double_data_size() +
                                                           proto.int64_data_size() + proto.int32_data_size() +
                                                           proto.uint64_data_size());
    if (count != available)
        throw Error(ErrorCode::input, what + ": shape " + to_string(shape) + " needs " + std::to_string(count) +
                         " values, the tensor holds " + std::to_string(available));
    Tensor t = Tensor::zeros(*dtype, shape);
    if (proto.has_raw_data()) {
        const auto& raw = proto.raw_data();
        if (raw.size() != t.nbytes())
            throw Error(ErrorCode::input, what + ": raw_data has " + std::to_string(raw.size()) + " bytes, " +
                             string(to_string(*dtype)) + to_string(shape) + " needs " +
                             std::to_string(t.nbytes()));
        if (!raw.empty()) std::memcpy(t.data(), raw.data(), raw.size());
        if (*dtype == DType::boolean)
            for (auto& b : t.values<unsigned char>()) b = b != 0;
        return t;
    }
    switch (*dtype) {
        case DType::float32: copy_typed<float>(t, proto.float_data(), what); break;
        case DType::float64: copy_typed<double>(t, proto.double_data(), what); break;
        case DType::int64: copy_typed<std::int64_t>(t, proto.int64_data(), what); break;
        case DType::boolean: {
            copy_typed<unsigned char>(t, proto.int32_data(), what);
            for (auto& b : t.values<unsigned char>()) b = b != 0;
            break;
        }
        // onnx.proto: int32_data holds the narrow integers and the 16 bits of float16/bfloat16;
        // uint64_data holds uint32 and uint64.
        case DType::int32: copy_typed<std::int32_t>(t, proto.int32_data(), what); break;
        case DType::int16: copy_typed<std::int16_t>(t, proto.int32_data(), what); break;
        case DType::int8: copy_typed<std::int8_t>(t, proto.int32_data(), what); break;
        case DType::uint16:
        case DType::float16:
        case DType::bfloat16: copy_typed<std::uint16_t>(t, proto.int32_data(), what); break;
        case DType::uint8: copy_typed<std::uint8_t>(t, proto.int32_data(), what); break;
        case DType::uint32: copy_typed<std::uint32_t>(t, proto.uint64_data(), what); break;
        case DType::uint64: copy_typed<std::uint64_t>(t, proto.uint64_data(), what); break;
    }
    return t;
}

// ---------------------------------------------------------------------------------------------
// ImportContext

Value& ImportContext::value(const string& name) {
    // Converting a node (not binding the graph's outputs): a padded upper bound must not be read
    // as if it were the value.
    if (current && lengths_.count(name) &&
        std::find(current->output().begin(), current->output().end(), name) == current->output().end())
        unsupported("'" + name + "' has a length that depends on the input's values; only a graph output may " +
                    "(Graph::output_lengths), not an input of another node");
    auto it = values_.find(name);
    if (it == values_.end()) {
        auto bad = unusable_.find(name);
        if (bad != unusable_.end()) unsupported(bad->second);
        unsupported("value '" + name + "' is not defined by an earlier node, initializer or input");
    }
    return it->second;
}

void ImportContext::define(const string& name, Value v) {
    if (name.empty()) return;
    values_[name] = std::move(v);
}

void ImportContext::define_constant(const string& name, Tensor t) {
    constant_bytes_ += t.nbytes();
    if (constant_bytes_ > kMaxImportConstantBytes)
        unsupported("the constants made at import (folding, unrolled bodies, DFT matrices, ...) would exceed " +
                    std::to_string(kMaxImportConstantBytes >> 20) + " MiB");
    Value v;
    v.type = {t.shape(), t.dtype()};
    v.constant = std::move(t);
    define(name, std::move(v));
}

void ImportContext::define_node(const string& name, std::int64_t id) {
    Value v;
    v.type = types_.at(id);
    v.node = id;
    define(name, std::move(v));
}

void ImportContext::mark_unusable(const string& name, string reason) { unusable_[name] = std::move(reason); }

void ImportContext::define_node_with_length(const string& name, std::int64_t id, DataDependentLength length) {
    define_node(name, id);
    lengths_[name] = length;
}

std::optional<ImportContext::DataDependentLength> ImportContext::data_dependent_length(const string& name) const {
    const auto it = lengths_.find(name);
    if (it == lengths_.end()) return std::nullopt;
    return it->second;
}

std::int64_t ImportContext::push(Node node, TensorType type) {
    if (graph().nodes.size() >= kMaxImportedNodes)
        unsupported("the imported graph would exceed " + std::to_string(kMaxImportedNodes) +
                    " nodes (unrolled loops and scans, or a model of that size)");
    node.id = next_id_++;
    node.shape = type.shape;
    node.dtype = type.dtype;
    if (!node.name.empty()) names_[node.name]++;
    index_[node.id] = graph().nodes.size();
    types_[node.id] = type;
    graph().nodes.push_back(std::move(node));
    return graph().nodes.back().id;
}

string ImportContext::fresh_name(const string& base) {
    if (!names_.count(base)) return base;
    // Names are never removed, so the suffixes below next_suffix_[base] stay taken: each base
    // probes on from where it stopped (a decomposition adds thousands of names on one base).
    int& k = next_suffix_[base];
    string name;
    do name = base + "#" + std::to_string(++k);
    while (names_.count(name));
    return name;
}

string ImportContext::fresh_value_name(const string& base) {
    string name = fresh_name(base);
    while (values_.count(name)) name = fresh_name(name + "#");
    return name;
}

void ImportContext::define_sequence(const string& name, std::vector<string> elements, DType dtype) {
    Value v;
    v.type.dtype = dtype;
    v.sequence = std::move(elements);
    define(name, std::move(v));
}

const std::vector<string>& ImportContext::sequence(const string& name, const string& what) {
    Value& v = value(name);
    if (!v.sequence) unsupported(what + " ('" + name + "') must be a sequence");
    return *v.sequence;
}

Value ImportContext::bound(const string& name) {
    Value& v = value(name);
    if (v.is_tensor() && !v.constant && !v.node) runtime(name);
    return value(name);
}

void ImportContext::count_converted_node() {
    if (++converted_nodes_ > kMaxConvertedNodes)
        unsupported("the model converts over " + std::to_string(kMaxConvertedNodes) +
                    " ONNX nodes, counting every unrolled or inlined copy");
}

std::int64_t ImportContext::runtime(const string& name) {
    Value& v = value(name);
    if (v.node) return *v.node;
    if (v.sequence) unsupported("'" + name + "' is a sequence, read where a tensor is needed");
    if (v.none) unsupported("'" + name + "' is an empty optional, read where a tensor is needed");
    Node n;
    if (v.constant) {
        n.kind = NodeKind::constant;
        n.name = fresh_name(name);
        // A const node reads its value under its own name; the name must not be another key.
        if (model_.parameters.count(n.name)) n.name = fresh_name(name + "#const");
        const auto id = push(std::move(n), v.type);
        bind_parameter_value(node(id).name, *v.constant);
        v.node = id;
        return id;
    }
    if (!v.graph_input.empty()) {
        n.kind = NodeKind::input;
        n.name = v.graph_input;
        v.node = push(std::move(n), v.type);
        return *v.node;
    }
    unsupported("value '" + name + "' has no producer");
}

string ImportContext::graph_input_feeding(std::int64_t id) const {
    std::vector<std::int64_t> pending{id};
    std::set<std::int64_t> seen{id};
    while (!pending.empty()) {
        const Node& n = node(pending.back());
        pending.pop_back();
        if (n.kind == NodeKind::input) return n.name;
        for (auto p : n.parents)
            if (seen.insert(p).second) pending.push_back(p);
    }
    return {};
}

const Tensor& ImportContext::constant(const string& name, const string& what) {
    Value& v = value(name);
    if (!v.is_tensor()) unsupported(what + " ('" + name + "') must be a tensor, not a sequence or optional");
    if (!v.constant && !v.graph_input.empty()) needed_constant_input = v.graph_input;
    if (!v.constant && v.node) needed_constant_input = graph_input_feeding(*v.node);
    if (!v.constant)
        unsupported(what + " ('" + name + "') must be a constant (an initializer or computable at "
                    "import), but it is computed at run time");
    return *v.constant;
}

std::int64_t ImportContext::add(const string& op, std::vector<std::int64_t> parents, Attributes attrs,
                                string name) {
    Node n;
    n.kind = NodeKind::op;
    try {
        n.op = parse<BackendOp>(op);
    } catch (const Error&) {
        unsupported("needs BackendOp '" + op + "', which this build's vocabulary does not have");
    }
    n.parents = std::move(parents);
    n.attrs = std::move(attrs);
    std::vector<TensorType> parent_types;
    for (auto p : n.parents) parent_types.push_back(types_.at(p));
    TensorType type;
    try {
        type = infer_type(n, parent_types);
    } catch (const Error& e) {
        if (e.code() != ErrorCode::input) throw;
        unsupported(op + ": " + e.what());
    }
    if (name.empty()) {
        string base = current && current->output_size() > 0 ? current->output(0) : string("node");
        name = fresh_name(base + "/" + op);
    } else if (names_.count(name)) {
        name = fresh_name(name);
    }
    n.name = name;
    return push(std::move(n), type);
}

std::int64_t ImportContext::add_identity(std::int64_t parent, const string& name) {
    Node n;
    n.kind = NodeKind::detach;
    n.parents = {parent};
    n.name = fresh_name(name);
    return push(std::move(n), types_.at(parent));
}

void ImportContext::bind_parameter_value(const string& key, Tensor t) {
    if (model_.parameters.count(key))
        throw Error(ErrorCode::input, "internal: parameter key '" + key + "' is bound twice");
    model_.parameters.emplace(key, std::move(t));
}

void ImportContext::bind_parameters(std::int64_t id, const std::vector<string>& sources) {
    const Node& n = node(id);
    std::vector<TensorType> parent_types;
    for (auto p : n.parents) parent_types.push_back(types_.at(p));
    const auto specs = parameter_specs(n, parent_types);
    if (specs.size() != sources.size())
        throw Error(ErrorCode::input, "internal: node " + n.name + " takes " + std::to_string(specs.size()) +
                         " parameters, the converter gave " + std::to_string(sources.size()));
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const auto& spec = specs[i];
        Value& v = value(sources[i]);
        if (v.type.dtype != spec.type.dtype)
            unsupported("parameter '" + sources[i] + "' is " + string(to_string(v.type.dtype)) +
                        ", " + n.op_spelling() + " needs " + string(to_string(spec.type.dtype)));
        if (v.constant) {
            Tensor t = *v.constant;
            if (t.shape() != spec.type.shape) {
                if (t.numel() != element_count(spec.type.shape))
                    unsupported("parameter '" + sources[i] + "' has shape " + to_string(t.shape()) +
                                ", " + n.op_spelling() + " needs " + to_string(spec.type.shape));
                Tensor r = Tensor::zeros(t.dtype(), spec.type.shape);
                if (t.nbytes()) std::memcpy(r.data(), t.data(), t.nbytes());
                t = r;
            }
            bind_parameter_value(spec.key, t);
        } else if (!v.graph_input.empty()) {
            if (v.type.shape != spec.type.shape)
                unsupported("graph input '" + v.graph_input + "' feeds parameter " + spec.key +
                            " of shape " + to_string(spec.type.shape) + " but has shape " +
                            to_string(v.type.shape));
            model_.parameter_inputs[v.graph_input].push_back(spec.key);
        } else {
            unsupported("'" + sources[i] + "' feeds parameter " + spec.key +
                        " and must be an initializer or a graph input, but the graph computes it");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Attribute helpers

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const string& name) {
    for (const auto& a : node.attribute())
        if (a.name() == name) return &a;
    return nullptr;
}
std::int64_t attr_int(const onnx::NodeProto& node, const string& name, std::int64_t fallback) {
    const auto* a = find_attr(node, name);
    return a ? a->i() : fallback;
}
float attr_float(const onnx::NodeProto& node, const string& name, float fallback) {
    const auto* a = find_attr(node, name);
    return a ? a->f() : fallback;
}
string attr_string(const onnx::NodeProto& node, const string& name, const string& fallback) {
    const auto* a = find_attr(node, name);
    return a ? a->s() : fallback;
}
std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, const string& name) {
    const auto* a = find_attr(node, name);
    if (!a) return std::nullopt;
    return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
}
string input_name(const onnx::NodeProto& node, int i) {
    return i < node.input_size() ? node.input(i) : string();
}
std::vector<std::int64_t> int_values(const Tensor& t) {
    std::vector<std::int64_t> out;
    if (t.dtype() == DType::int64) {
        auto v = t.values<std::int64_t>();
        out.assign(v.begin(), v.end());
    } else if (t.dtype() == DType::uint64) {
        for (auto v : t.values<std::uint64_t>()) {
            if (v > static_cast<std::uint64_t>(INT64_MAX)) unsupported("uint64 value " + std::to_string(v) + " beyond int64");
            out.push_back(static_cast<std::int64_t>(v));
        }
    } else if (is_integer(t.dtype()) || t.dtype() == DType::boolean) {
        for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<std::int64_t>(t.at(i)));
    } else {
        unsupported("expected an integer tensor, got " + string(to_string(t.dtype())));
    }
    return out;
}
Shape broadcast_shapes(const Shape& a, const Shape& b) {
    Shape out(std::max(a.size(), b.size()));
    if (broadcast_into(a, b, out) >= 0)
        unsupported("shapes " + to_string(a) + " and " + to_string(b) + " do not broadcast");
    return out;
}
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank) {
    // A scalar has no axis: callers index the shape with the result.
    if (const auto a = try_normalize_axis(axis, rank)) return *a;
    unsupported("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
}

namespace {

struct InferredType {
    std::optional<DType> dtype;
    std::optional<Shape> shape;  // set when every dimension is static
};

InferredType inferred_of(const onnx::TypeProto& t) {
    InferredType out;
    if (!t.has_tensor_type()) return out;
    out.dtype = dtype_of_onnx(t.tensor_type().elem_type());
    if (!t.tensor_type().has_shape()) return out;
    Shape s;
    for (const auto& d : t.tensor_type().shape().dim()) {
        if (!d.has_dim_value()) return out;
        s.push_back(d.dim_value());
    }
    out.shape = s;
    return out;
}

string node_label(const onnx::NodeProto& node, std::int64_t opset) {
    string label = "ONNX op " + node.op_type() + " (node '" + node.name() + "'";
    if (node.name().empty() && node.output_size() > 0) label = "ONNX op " + node.op_type() + " (node with output '" + node.output(0) + "'";
    return label + ", opset " + std::to_string(opset) + ")";
}

onnx::ModelProto parse_model(std::string_view bytes, const string& src) {
    onnx::ModelProto model;
    if (bytes.empty()) throw Error(ErrorCode::input, src + ": empty file, not an ONNX model");
    if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw Error(ErrorCode::input, src + ": larger than 2 GiB; protobuf cannot parse it in one piece");
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        throw Error(ErrorCode::input, src + ": not a valid ONNX model (protobuf ModelProto parsing failed)");
    if (!model.has_graph())
        throw Error(ErrorCode::input, src + ": not a valid ONNX model (no graph)");
    return model;
}

string read_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw Error(ErrorCode::input, path.string() + ": no such file");
    if (std::filesystem::is_directory(path, ec)) throw Error(ErrorCode::input, path.string() + ": is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::input, path.string() + ": cannot open");
    // A regular file is read once into a string of its size: a stringstream copy cost three
    // passes over a model's weights (ResNet-18: 45 MB) and their page faults at load time.
    const auto size = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
    if (!ec && size > 0) {
        string bytes(static_cast<std::size_t>(size), '\0');
        in.read(bytes.data(), static_cast<std::streamsize>(size));
        if (in.gcount() != static_cast<std::streamsize>(size) || in.peek() != std::ifstream::traits_type::eof())
            throw Error(ErrorCode::input, path.string() + ": read error (the file changed while it was read)");
        return bytes;
    }
    std::ostringstream ss;  // a pipe or another file without a size
    ss << in.rdbuf();
    if (!in && !in.eof()) throw Error(ErrorCode::input, path.string() + ": read error");
    return std::move(ss).str();
}

}  // namespace

}  // namespace capsule::onnx_import

namespace capsule {

using namespace onnx_import;
using std::string;

namespace {
/// Carries an OnnxUnsupported from deep in the import to the entry points, which return it
/// (try_ forms) or raise it as Error(input).
struct Refused {
    OnnxUnsupported what;
};
[[noreturn]] void refuse(string message, string op_type, string reason, string constant_input = "") {
    throw Refused{{std::move(message), std::move(op_type), std::move(reason), std::move(constant_input)}};
}
}  // namespace

namespace {

/// The model's ai.onnx opset. Refuses a model that imports none, and an opset newer than this
/// build's libonnx knows: its semantics are unchecked here.
std::int64_t default_opset(const onnx::ModelProto& model, const string& src) {
    std::int64_t opset = -1;
    bool training = false;
    for (const auto& imp : model.opset_import()) {
        if (imp.domain().empty() || imp.domain() == "ai.onnx") opset = imp.version();
        if (imp.domain() == kTrainingDomain && imp.version() != 1)
            refuse(src + ": the model imports " + kTrainingDomain + " version " + std::to_string(imp.version()) +
                       "; only version 1 (Adagrad, Adam, Momentum) is supported",
                   "", string("op domain ") + kTrainingDomain + " version " + std::to_string(imp.version()));
        training = training || imp.domain() == kTrainingDomain;
    }
    const int newest = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(onnx::ONNX_DOMAIN).second;
    // A model of optimizer ops alone imports only the training domain; its nodes have no
    // default-domain semantics to version.
    if (opset < 0 && training) return newest;
    if (opset < 0) {
        string domains;
        for (const auto& imp : model.opset_import()) domains += (domains.empty() ? "" : ", ") + imp.domain();
        refuse(src + ": the model imports no default-domain (ai.onnx) opset, only " + domains +
                   "; ops outside ai.onnx are not supported",
               "", "op domain " + domains + " (only ai.onnx is supported)");
    }
    if (opset > newest)
        refuse(src + ": the model imports ai.onnx opset " + std::to_string(opset) +
                   ", newer than the newest this build's libonnx knows (" + std::to_string(newest) +
                   "); re-export with opset <= " + std::to_string(newest),
               "opset", "opset " + std::to_string(opset) + " is newer than libonnx knows");
    return opset;
}

/// A shape given for a name the model does not take is a typo, not something to ignore.
void check_given_names(const onnx::GraphProto& g, const std::set<string>& initializers,
                       const OnnxImportOptions& options, const string& src) {
    for (const auto& [name, shape] : options.input_shapes) {
        bool known = false;
        string inputs;
        for (const auto& input : g.input()) {
            known = known || input.name() == name;
            if (!initializers.count(input.name())) inputs += (inputs.empty() ? "'" : ", '") + input.name() + "'";
        }
        if (!known)
            throw Error(ErrorCode::input, src + ": a shape is given for input '" + name +
                                              "', which the model does not take (its inputs: " +
                                              (inputs.empty() ? string("none") : inputs) + ")");
    }
}

/// The shape `options` give for graph input `name`, by name or else by `position`; null if none.
const Shape* given_shape(const OnnxImportOptions& options, const string& name, std::size_t position) {
    if (auto it = options.input_shapes.find(name); it != options.input_shapes.end()) return &it->second;
    if (position < options.positional_input_shapes.size()) return &options.positional_input_shapes[position];
    return nullptr;
}

/// Replaces the declared shape of input `name` with the given shape `s`, which must agree with
/// every static size the model declares (`declared`: the model declares a shape at all).
void fix_input_shape(onnx::TensorShapeProto& shape, bool declared, const Shape& s,
                     const string& name, const string& src) {
    if (declared && shape.dim_size() != static_cast<int>(s.size()))
        throw Error(ErrorCode::input, src + ": input '" + name + "' has rank " +
                         std::to_string(shape.dim_size()) + " but the given shape " +
                         to_string(s) + " has rank " + std::to_string(s.size()));
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] < 0) throw Error(ErrorCode::input, src + ": input '" + name + "': negative dimension in the given shape " + to_string(s));
        if (static_cast<int>(i) < shape.dim_size() && shape.dim(int(i)).has_dim_value() &&
            shape.dim(int(i)).dim_value() != s[i])
            throw Error(ErrorCode::input, src + ": input '" + name + "' axis " + std::to_string(i) +
                             " is " + std::to_string(shape.dim(int(i)).dim_value()) +
                             " in the model, but the given shape is " + to_string(s));
    }
    shape.clear_dim();
    for (auto d : s) shape.add_dim()->set_dim_value(d);
}

/// Refuses input `name` when the model leaves its shape, or a size in it, dynamic.
void require_static_shape(const onnx::TensorShapeProto& shape, bool declared, const string& name,
                          const string& src) {
    if (!declared)
        throw Error(ErrorCode::input, src + ": input '" + name + "' has no shape; capsule needs static "
                         "shapes: re-export the model with fixed input sizes, or give the shape "
                         "(OnnxImportOptions::input_shapes; `capsule run` takes it from the --input arrays)");
    for (int i = 0; i < shape.dim_size(); ++i) {
        const auto& d = shape.dim(i);
        if (!d.has_dim_value())
            throw Error(ErrorCode::input, 
                src + ": input '" + name + "' axis " + std::to_string(i) +
                " has a dynamic size" + (d.has_dim_param() ? " ('" + d.dim_param() + "')" : string()) +
                "; capsule needs static shapes: re-export the model with a fixed size for that axis, "
                "or give the input's shape (OnnxImportOptions::input_shapes; `capsule run` takes it "
                "from the --input arrays)");
    }
}

/// What graph input `name` of `dtype` and static `shape` is bound to: a runtime input, or the
/// constant `options` give for it (which must match the declared type).
Value input_value(const string& name, DType dtype, const onnx::TensorShapeProto& shape,
                  const OnnxImportOptions& options, const string& src) {
    Value v;
    v.graph_input = name;
    v.type.dtype = dtype;
    for (const auto& d : shape.dim()) v.type.shape.push_back(d.dim_value());
    if (auto c = options.constant_inputs.find(name); c != options.constant_inputs.end()) {
        if (c->second.dtype() != v.type.dtype || c->second.shape() != v.type.shape)
            throw Error(ErrorCode::input, src + ": constant value for input '" + name + "' is " +
                             string(to_string(c->second.dtype())) + to_string(c->second.shape()) +
                             ", the model declares " + string(to_string(v.type.dtype)) + to_string(v.type.shape));
        v.graph_input.clear();
        v.constant = c->second;
    }
    return v;
}

/// A sequence graph input given by `options` as `elements` tensors: one runtime input per element,
/// named `<name>[k]` (listed in input_names in the sequence's place).
void define_sequence_input(ImportContext& ctx, ImportedModel& out, const string& name,
                           const std::vector<TensorType>& elements, DType declared, const std::set<string>& taken,
                           const string& src) {
    std::vector<string> names;
    for (std::size_t k = 0; k < elements.size(); ++k) {
        const string element = name + "[" + std::to_string(k) + "]";
        if (ctx.has(element) || taken.count(element)) throw Error(ErrorCode::input, src + ": sequence input '" + name + "' element name '" +
                                                               element + "' is also a value of the model");
        if (elements[k].dtype != declared)
            throw Error(ErrorCode::input, src + ": sequence input '" + name + "' element " + std::to_string(k) +
                                              " is " + string(to_string(elements[k].dtype)) + ", the model declares " +
                                              string(to_string(declared)));
        Value v;
        v.graph_input = element;
        v.type = elements[k];
        ctx.define(element, v);
        out.input_names.push_back(element);
        names.push_back(element);
    }
    ctx.define_sequence(name, names, declared);
}

/// Every value name `g` and its subgraphs define (inputs, initializers, node outputs).
void collect_value_names(const onnx::GraphProto& g, std::set<string>& names) {
    for (const auto& v : g.input()) names.insert(v.name());
    for (const auto& t : g.initializer()) names.insert(t.name());
    for (const auto& node : g.node()) {
        for (const auto& o : node.output()) names.insert(o);
        for (const auto& a : node.attribute()) {
            if (a.has_g()) collect_value_names(a.g(), names);
            for (const auto& sub : a.graphs()) collect_value_names(sub, names);
        }
    }
}

/// Graph inputs: static shapes (fixed by options where dynamic), supported dtypes. A sequence
/// input (or an optional holding one) is expanded into its elements when `options` give their
/// types; an optional `options` list as absent is an empty optional; an optional holding a tensor
/// is that tensor. An input that is not a tensor or sequence of a supported dtype is only an
/// error where a node reads it.
void define_graph_inputs(ImportContext& ctx, ImportedModel& out, onnx::GraphProto& g,
                         const std::set<string>& initializers, const OnnxImportOptions& options,
                         const string& src) {
    std::size_t position = 0;  // among the graph inputs that are not initializers
    std::set<string> taken;    // a sequence input's element names must be new
    if (!options.sequence_inputs.empty()) collect_value_names(g, taken);
    for (auto& input : *g.mutable_input()) {
        if (initializers.count(input.name())) continue;  // an initializer's default (IR < 4)
        const string& name = input.name();
        onnx::TypeProto* type = input.mutable_type();
        const std::size_t at = position++;
        if (type->has_optional_type()) {
            if (options.absent_inputs.count(name)) {
                Value none;
                none.none = true;
                ctx.define(name, none);
                continue;
            }
            type = type->mutable_optional_type()->mutable_elem_type();
        }
        if (type->has_sequence_type() && type->sequence_type().elem_type().has_tensor_type()) {
            const int elem = type->sequence_type().elem_type().tensor_type().elem_type();
            auto given = options.sequence_inputs.find(name);
            auto dtype = dtype_of_onnx(elem);
            if (given == options.sequence_inputs.end() || !dtype) {
                out.input_names.push_back(name);
                ctx.mark_unusable(name, "graph input '" + name + "' is a sequence" +
                                            (dtype ? string(": give its element types (OnnxImportOptions::sequence_inputs)")
                                                   : " of " + onnx_type_name(elem) + kSupportedOnnxDtypes));
                continue;
            }
            define_sequence_input(ctx, out, name, given->second, *dtype, taken, src);
            continue;
        }
        out.input_names.push_back(name);
        if (!type->has_tensor_type()) {
            ctx.mark_unusable(name, "graph input '" + name + "' is not a tensor or a sequence of tensors (maps are not supported)");
            continue;
        }
        auto dtype = dtype_of_onnx(type->tensor_type().elem_type());
        // Read before mutable_shape(), which marks the shape present (a shapeless input would
        // otherwise pass as a scalar).
        const bool declared = type->tensor_type().has_shape();
        auto* shape = type->mutable_tensor_type()->mutable_shape();
        if (const Shape* given = given_shape(options, name, at))
            fix_input_shape(*shape, declared, *given, name, src);
        else
            require_static_shape(*shape, declared, name, src);
        if (!dtype) {
            ctx.mark_unusable(name, "graph input '" + name + "' has dtype " +
                                        onnx_type_name(type->tensor_type().elem_type()) + kSupportedOnnxDtypes);
            continue;
        }
        ctx.define(name, input_value(name, *dtype, *shape, options, src));
    }
}

/// Initializers: constants (kept only where a node reads them).
void define_initializers(ImportContext& ctx, const onnx::GraphProto& g) {
    for (const auto& init : g.initializer()) {
        try {
            ctx.define_constant(init.name(), tensor_from_proto(init));
        } catch (const Unsupported& u) {
            ctx.mark_unusable(init.name(), "initializer '" + init.name() + "': " + u.reason);
        }
    }
}

/// Spells out attribute defaults that libonnx 1.12's shape inference reads wrongly, in `g` and
/// its subgraphs: STFT's inference takes an absent `onesided` as 0 while the schema's default is
/// 1, so with a constant window or frame_length it would infer frame_length bins instead of
/// frame_length / 2 + 1 and refuse a model declaring the spec's shape.
void spell_out_misread_defaults(onnx::GraphProto& g) {
    for (auto& node : *g.mutable_node()) {
        if (node.op_type() == "STFT" && (node.domain().empty() || node.domain() == "ai.onnx") && !find_attr(node, "onesided")) {
            auto* a = node.add_attribute();
            a->set_name("onesided");
            a->set_type(onnx::AttributeProto::INT);
            a->set_i(1);
        }
        for (auto& a : *node.mutable_attribute()) {
            if (a.has_g()) spell_out_misread_defaults(*a.mutable_g());
            for (auto& sub : *a.mutable_graphs()) spell_out_misread_defaults(sub);
        }
    }
}

/// ONNX shape inference with the static input shapes: every value's type, for cross-checks.
/// libonnx is not trusted with unchecked attributes: the guard refuses bad ones, and nodes it
/// cannot check are held back from inference (their outputs are then not cross-checked).
/// Whether `node` (or a graph nested in it) reads a name in `names`.
bool reads_any(const onnx::NodeProto& node, const std::set<string>& names) {
    for (const auto& in : node.input())
        if (names.count(in)) return true;
    for (const auto& a : node.attribute()) {
        auto graph_reads = [&](const onnx::GraphProto& g) {
            for (const auto& inner : g.node())
                if (reads_any(inner, names)) return true;
            return false;
        };
        if (a.has_g() && graph_reads(a.g())) return true;
        for (const auto& sub : a.graphs())
            if (graph_reads(sub)) return true;
    }
    return false;
}

/// The values whose libonnx 1.12 inference is wrong: STFT's outputs (its frame count disagrees
/// with the spec's (length − frame_length) / frame_step + 1 for most frame lengths and steps) and
/// everything computed from them. Their declared shapes are dropped before inference (libonnx
/// would refuse a model that declares the right ones) and their inferred types are not
/// cross-checked.
std::set<string> values_inferred_wrongly(onnx::GraphProto& g) {
    std::set<string> names;
    for (const auto& node : g.node()) {
        const bool stft = node.op_type() == "STFT" && (node.domain().empty() || node.domain() == "ai.onnx");
        if (stft || reads_any(node, names))
            for (const auto& o : node.output()) names.insert(o);
    }
    if (names.empty()) return names;
    auto* infos = g.mutable_value_info();
    for (int k = infos->size() - 1; k >= 0; --k)
        if (names.count(infos->Get(k).name())) infos->DeleteSubrange(k, 1);
    for (auto& o : *g.mutable_output())
        if (names.count(o.name()) && o.type().has_tensor_type()) o.mutable_type()->mutable_tensor_type()->clear_shape();
    return names;
}

std::map<string, InferredType> infer_onnx_types(onnx::ModelProto& model, std::int64_t opset, const string& src) {
    auto& g = *model.mutable_graph();
    spell_out_misread_defaults(g);
    const std::set<string> unchecked = values_inferred_wrongly(g);
    std::map<string, InferredType> inferred;
    const int checked = nodes_safe_for_inference(g, opset, src);
    std::vector<onnx::NodeProto*> held_back(static_cast<std::size_t>(g.node_size() - checked));
    if (!held_back.empty()) g.mutable_node()->ExtractSubrange(checked, static_cast<int>(held_back.size()), held_back.data());
    // Shape inference also runs in a child process: a crash inside libonnx becomes an Error(input).
    auto error = run_libonnx_isolated(model, src, "shape inference", true, [](onnx::ModelProto& m) {
        onnx::ShapeInferenceOptions si(false, 0, false);
        onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), si);
    });
    for (auto* node : held_back) g.mutable_node()->AddAllocated(node);
    if (error) throw Error(ErrorCode::input, src + ": ONNX shape inference fails: " + *error);
    for (const auto& vi : g.value_info()) inferred[vi.name()] = inferred_of(vi.type());
    for (const auto& vi : g.output()) inferred[vi.name()] = inferred_of(vi.type());
    for (const auto& name : unchecked) inferred.erase(name);
    return inferred;
}

/// Lists a folded node in ImportedModel::folded with the constants it produced.
void record_folded(ImportContext& ctx, const onnx::NodeProto& node) {
    string line = node.op_type() + " '" + node.name() + "' ->";
    bool first = true;
    for (const auto& o : node.output()) {
        if (o.empty()) continue;
        const auto& type = ctx.type(o);
        line += string(first ? " " : ", ") + o + " " + string(to_string(type.dtype)) + to_string(type.shape);
        first = false;
    }
    ctx.model().folded.push_back(std::move(line));
}

}  // namespace

void onnx_import::convert_node(ImportContext& ctx, const onnx::NodeProto& node) {
    ctx.count_converted_node();
    if (node.domain() == kTrainingDomain) {
        auto it = training_converters().find(node.op_type());
        if (it == training_converters().end())
            unsupported("op " + node.op_type() + " of domain '" + node.domain() + "' is not supported (of that domain: "
                        "Adagrad, Adam, Momentum)");
        return it->second(ctx, node);
    }
    if (!node.domain().empty() && node.domain() != "ai.onnx")
        unsupported("op domain '" + node.domain() + "' is not supported (only the default ai.onnx domain and " +
                    kTrainingDomain + "'s optimizers)");
    if (try_fold(ctx, node)) {
        record_folded(ctx, node);
        return;
    }
    const auto& table = converters();
    auto it = table.find(node.op_type());
    if (it == table.end()) {
        auto reason = known_unsupported_reason(node.op_type());
        unsupported(reason.empty() ? "no converter for this ONNX op" : reason);
    }
    it->second(ctx, node);
}

namespace {

/// Every output of `node` is produced, with the dtype and shape ONNX shape inference gave it.
void check_outputs(ImportContext& ctx, const onnx::NodeProto& node,
                   const std::map<string, InferredType>& inferred) {
    for (const auto& o : node.output()) {
        if (o.empty()) continue;
        if (!ctx.has(o)) unsupported("output '" + o + "' is not produced (the converter does not map this output)");
        auto found = inferred.find(o);
        if (found == inferred.end() || !ctx.value(o).is_tensor()) continue;
        const auto& ours = ctx.type(o);
        if (found->second.dtype && *found->second.dtype != ours.dtype)
            unsupported("converted dtype " + string(to_string(ours.dtype)) + " of '" + o +
                        "' differs from ONNX's " + string(to_string(*found->second.dtype)));
        if (!found->second.shape) continue;
        Shape theirs = *found->second.shape;
        // A data-dependent length: ours is an upper bound along its axis, which ONNX's (a
        // declared or inferred count) may not exceed.
        if (const auto length = ctx.data_dependent_length(o);
            length && theirs.size() == ours.shape.size() && theirs[length->axis] <= ours.shape[length->axis])
            theirs[length->axis] = ours.shape[length->axis];
        if (theirs != ours.shape)
            unsupported("converted shape " + to_string(ours.shape) + " of '" + o +
                        "' differs from ONNX shape inference " + to_string(*found->second.shape));
    }
}

/// Converts the nodes in order; a refusal or an input error names the node. Returns the op
/// types the model uses.
std::vector<string> convert_nodes(ImportContext& ctx, const onnx::GraphProto& g,
                                  const std::map<string, InferredType>& inferred, std::int64_t opset,
                                  const string& src) {
    std::set<string> op_types;
    for (const auto& node : g.node()) {
        op_types.insert(node.op_type());
        ctx.current = &node;
        try {
            convert_node(ctx, node);
            check_outputs(ctx, node, inferred);
        } catch (const Unsupported& u) {
            refuse(src + ": " + node_label(node, opset) + " is not supported: " + u.reason, node.op_type(),
                   u.reason, ctx.needed_constant_input);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::input) throw;
            throw Error(ErrorCode::input, src + ": " + node_label(node, opset) + ": " + e.what());
        }
    }
    ctx.current = nullptr;
    return {op_types.begin(), op_types.end()};
}

/// Outputs: nodes named after the ONNX outputs.
void bind_outputs(ImportContext& ctx, ImportedModel& out, const onnx::GraphProto& g, const string& src) {
    try {
        for (const auto& o : g.output()) {
            if (ctx.value(o.name()).sequence) {
                // A sequence output: one output per element, `<name>[k]`.
                const auto elements = *ctx.value(o.name()).sequence;
                auto& names = out.sequence_outputs[o.name()];
                for (std::size_t k = 0; k < elements.size(); ++k) {
                    const string element = o.name() + "[" + std::to_string(k) + "]";
                    std::int64_t id = ctx.runtime(elements[k]);
                    if (ctx.name_used(element)) unsupported("sequence output element name '" + element + "' is taken");
                    id = ctx.add_identity(id, element);
                    out.output_names.push_back(element);
                    names.push_back(element);
                    out.graph.outputs.push_back(id);
                }
                continue;
            }
            out.output_names.push_back(o.name());
            std::int64_t id = ctx.runtime(o.name());
            if (ctx.node(id).name != o.name() && !ctx.name_used(o.name()))
                id = ctx.add_identity(id, o.name());
            out.graph.outputs.push_back(id);
            // An output listed twice is one node: its length is marked once.
            const bool marked = std::any_of(out.graph.output_lengths.begin(), out.graph.output_lengths.end(),
                                            [&](const OutputLength& l) { return l.output == id; });
            if (const auto length = ctx.data_dependent_length(o.name()); length && !marked)
                out.graph.output_lengths.push_back({id, length->axis, length->length});
        }
    } catch (const Unsupported& u) {
        refuse(src + ": graph outputs: " + u.reason, "", u.reason);
    }
    if (out.graph.outputs.empty())
        throw Error(ErrorCode::input, src + ": the graph has no outputs" +
                                          (out.sequence_outputs.empty() ? string() : string(" (its sequence outputs are empty)")));
}

/// Graph inputs no node reads, and those bound to constants by `options`, each once, in model
/// order.
void list_unused_inputs(ImportContext& ctx, ImportedModel& out, const OnnxImportOptions& options) {
    for (const auto& name : out.input_names) {
        const bool constant = options.constant_inputs.count(name) > 0;
        const bool unread = ctx.has(name) && !ctx.value(name).node && !out.parameter_inputs.count(name);
        if (constant || unread) out.unused_inputs.push_back(name);
    }
}

ImportedModel import_model(std::string_view bytes, const std::filesystem::path& source,
                           const OnnxImportOptions& options) {
    const string src = source.empty() ? string("model.onnx") : source.string();
    onnx::ModelProto model = parse_model(bytes, src);

    ImportedModel out;
    out.graph.source = source;
    out.ir_version = model.ir_version();
    out.opset = default_opset(model, src);

    if (auto error = run_libonnx_isolated(model, src, "checker", false,
                                          [](onnx::ModelProto& m) { onnx::checker::check_model(m); }))
        throw Error(ErrorCode::input, src + ": the ONNX checker rejects the model: " + *error);
    auto& g = *model.mutable_graph();

    std::set<string> initializers;
    for (const auto& init : g.initializer()) initializers.insert(init.name());
    if (g.sparse_initializer_size() > 0)
        refuse(src + ": sparse initializers are not supported", "", "sparse initializer");

    ImportContext ctx(out, out.opset);
    check_given_names(g, initializers, options, src);
    define_graph_inputs(ctx, out, g, initializers, options, src);
    define_initializers(ctx, g);
    ctx.start_counting_constants();  // the model's own initializers are not import-time growth
    const auto inferred = infer_onnx_types(model, out.opset, src);
    out.op_types = convert_nodes(ctx, g, inferred, out.opset, src);
    bind_outputs(ctx, out, g, src);
    list_unused_inputs(ctx, out, options);
    check_graph(out.graph);
    return out;
}

}  // namespace

OnnxImportResult try_import_onnx_bytes(std::string_view bytes, const std::filesystem::path& source,
                                       const OnnxImportOptions& options) {
    try {
        return import_model(bytes, source, options);
    } catch (Refused& r) {
        return std::move(r.what);
    }
}

OnnxImportResult try_import_onnx(const std::filesystem::path& path, const OnnxImportOptions& options) {
    const string bytes = read_file(path);
    return try_import_onnx_bytes(bytes, path, options);
}

ImportedModel import_onnx_bytes(std::string_view bytes, const std::filesystem::path& source,
                                const OnnxImportOptions& options) {
    auto result = try_import_onnx_bytes(bytes, source, options);
    if (auto* refused = std::get_if<OnnxUnsupported>(&result)) throw Error(ErrorCode::input, refused->message);
    return std::get<ImportedModel>(std::move(result));
}

ImportedModel import_onnx(const std::filesystem::path& path, const OnnxImportOptions& options) {
    const string bytes = read_file(path);
    return import_onnx_bytes(bytes, path, options);
}

std::vector<string> onnx_graph_inputs(const std::filesystem::path& path) {
    const auto model = parse_model(read_file(path), path.string());
    std::set<string> initializers;
    for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
    std::vector<string> out;
    for (const auto& input : model.graph().input())
        if (!initializers.count(input.name())) out.push_back(input.name());
    return out;
}

namespace {
onnx::TensorProto read_tensor_proto(const std::filesystem::path& path) {
    const string bytes = read_file(path);
    onnx::TensorProto proto;
    if (!proto.ParseFromString(bytes))
        throw Error(ErrorCode::input, path.string() + ": not a serialised ONNX TensorProto");
    return proto;
}
}  // namespace

std::variant<Tensor, OnnxUnsupported> try_read_onnx_tensor(const std::filesystem::path& path) {
    auto proto = read_tensor_proto(path);
    try {
        return tensor_from_proto(proto);
    } catch (const Unsupported& u) {
        return OnnxUnsupported{path.string() + ": " + u.reason, "", u.reason, ""};
    } catch (const Error& e) {
        if (e.code() != ErrorCode::input) throw;
        throw Error(ErrorCode::input, path.string() + ": " + e.what());
    }
}

Tensor read_onnx_tensor(const std::filesystem::path& path) {
    auto result = try_read_onnx_tensor(path);
    if (auto* refused = std::get_if<OnnxUnsupported>(&result)) throw Error(ErrorCode::input, refused->message);
    return std::get<Tensor>(std::move(result));
}

std::variant<OnnxValue, OnnxUnsupported> try_read_onnx_value(const std::filesystem::path& file,
                                                             const std::filesystem::path& model_path, bool output,
                                                             std::size_t index) {
    const auto model = parse_model(read_file(model_path), model_path.string());
    std::vector<const onnx::ValueInfoProto*> values;
    std::set<string> initializers;
    for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
    if (output) for (const auto& v : model.graph().output()) values.push_back(&v);
    else for (const auto& v : model.graph().input()) if (!initializers.count(v.name())) values.push_back(&v);
    if (index >= values.size())
        throw Error(ErrorCode::input, model_path.string() + ": has no graph " + (output ? "output " : "input ") +
                                          std::to_string(index) + " (it has " + std::to_string(values.size()) + ")");
    const onnx::TypeProto& type = values[index]->type();
    const string bytes = read_file(file);
    auto refused = [&](const string& reason) { return OnnxUnsupported{file.string() + ": " + reason, "", reason, ""}; };
    auto tensor = [&](const onnx::TensorProto& proto) -> Tensor {
        try {
            return tensor_from_proto(proto);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::input) throw;
            throw Error(ErrorCode::input, file.string() + ": " + e.what());
        }
    };
    auto sequence = [&](const onnx::SequenceProto& seq) -> std::variant<OnnxValue, OnnxUnsupported> {
        if (seq.elem_type() != onnx::SequenceProto::TENSOR && seq.elem_type() != onnx::SequenceProto::UNDEFINED)
            return refused("a sequence of non-tensors (sequences, maps or optionals) is not supported");
        OnnxValue v{OnnxValue::Kind::sequence, {}};
        for (const auto& t : seq.tensor_values()) v.tensors.push_back(tensor(t));
        return v;
    };
    try {
        if (type.has_tensor_type()) {
            onnx::TensorProto proto;
            if (!proto.ParseFromString(bytes)) throw Error(ErrorCode::input, file.string() + ": not a serialised ONNX TensorProto");
            return OnnxValue{OnnxValue::Kind::tensor, {tensor(proto)}};
        }
        if (type.has_sequence_type()) {
            onnx::SequenceProto proto;
            if (!proto.ParseFromString(bytes)) throw Error(ErrorCode::input, file.string() + ": not a serialised ONNX SequenceProto");
            return sequence(proto);
        }
        if (type.has_optional_type()) {
            onnx::OptionalProto proto;
            if (!proto.ParseFromString(bytes)) throw Error(ErrorCode::input, file.string() + ": not a serialised ONNX OptionalProto");
            if (proto.has_tensor_value()) return OnnxValue{OnnxValue::Kind::tensor, {tensor(proto.tensor_value())}};
            if (proto.has_sequence_value()) return sequence(proto.sequence_value());
            if (proto.has_optional_value() || proto.has_map_value() || proto.has_sparse_tensor_value())
                return refused("an optional holding a map, an optional or a sparse tensor is not supported");
            return OnnxValue{OnnxValue::Kind::none, {}};
        }
    } catch (const Unsupported& u) {
        return refused(u.reason);
    }
    return refused("graph value '" + values[index]->name() + "' is a map or sparse tensor (not supported)");
}

string read_onnx_tensor_name(const std::filesystem::path& path) { return read_tensor_proto(path).name(); }

std::map<string, Tensor> bind_onnx_inputs(const ImportedModel& model, const std::map<string, Tensor>& values,
                                          ParameterMap& parameters) {
    std::map<string, Tensor> runtime;
    std::set<string> runtime_inputs;
    for (const auto& n : model.graph.nodes)
        if (n.kind == NodeKind::input) runtime_inputs.insert(n.name);
    for (const auto& [name, t] : values) {
        bool known = false;
        if (auto it = model.parameter_inputs.find(name); it != model.parameter_inputs.end()) {
            for (const auto& key : it->second) parameters[key] = t;
            known = true;
        }
        if (runtime_inputs.count(name)) {
            runtime.emplace(name, t);
            known = true;
        }
        if (std::find(model.unused_inputs.begin(), model.unused_inputs.end(), name) != model.unused_inputs.end())
            known = true;
        if (!known) {
            string valid;
            for (const auto& i : model.input_names) valid += (valid.empty() ? "" : ", ") + i;
            throw Error(ErrorCode::input, "unknown input '" + name + "'; the model's inputs are: " + valid);
        }
    }
    for (const auto& [name, keys] : model.parameter_inputs)
        if (!values.count(name))
            throw Error(ErrorCode::input, "missing input '" + name + "' (it supplies parameter " + keys.front() + ")");
    return runtime;
}

LoadedModel load_model(const std::filesystem::path& path, const OnnxImportOptions& options) {
    LoadedModel out;
    string extension = path.extension().string();
    for (auto& ch : extension) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (extension == ".onnx") {
        auto m = import_onnx(path, options);
        out.graph = std::move(m.graph);
        out.parameters = std::move(m.parameters);
        out.parameter_inputs = std::move(m.parameter_inputs);
        out.unused_inputs = std::move(m.unused_inputs);
        out.folded = std::move(m.folded);
        return out;
    }
    out.graph = load_graph(path);
    out.parameters = load_graph_parameters(out.graph);
    return out;
}

std::map<string, Tensor> bind_model_inputs(const LoadedModel& model, const std::map<string, Tensor>& values,
                                           ParameterMap& parameters) {
    if (model.parameter_inputs.empty() && model.unused_inputs.empty()) return values;
    ImportedModel view;
    view.graph = model.graph;
    view.parameter_inputs = model.parameter_inputs;
    view.unused_inputs = model.unused_inputs;
    return bind_onnx_inputs(view, values, parameters);
}

}  // namespace capsule
