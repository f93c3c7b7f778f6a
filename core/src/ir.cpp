// The JSON IR (DESIGN.md section 7): parsing, serialisation and the well-formedness check.
// Shape inference per op lives in shape_inference/, one file per op family.
#include "capsule/ir.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "json_reader.hpp"

namespace capsule {

using nlohmann::json;
using std::int64_t;
using std::string;

const std::array<std::pair<DType, std::string_view>, 13> Spellings<DType>::values{{
    {DType::float32, "float32"},
    {DType::float64, "float64"},
    {DType::int64, "int64"},
    {DType::boolean, "bool"},
    {DType::int32, "int32"},
    {DType::int8, "int8"},
    {DType::uint8, "uint8"},
    {DType::int16, "int16"},
    {DType::uint16, "uint16"},
    {DType::uint32, "uint32"},
    {DType::uint64, "uint64"},
    {DType::float16, "float16"},
    {DType::bfloat16, "bfloat16"},
}};

bool is_floating(DType dtype) {
    return dtype == DType::float32 || dtype == DType::float64 || dtype == DType::float16 ||
           dtype == DType::bfloat16;
}

bool is_integer(DType dtype) { return !is_floating(dtype) && dtype != DType::boolean; }

std::size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::float64:
        case DType::int64:
        case DType::uint64: return 8;
        case DType::float32:
        case DType::int32:
        case DType::uint32: return 4;
        case DType::int16:
        case DType::uint16:
        case DType::float16:
        case DType::bfloat16: return 2;
        case DType::boolean:
        case DType::int8:
        case DType::uint8: return 1;
    }
    throw Error(ErrorCode::other, "invalid dtype value " + std::to_string(static_cast<int>(dtype)));
}

string to_string(const Shape& shape) { return shape_text(shape); }

int64_t element_count(const Shape& shape) { return checked_element_count(shape); }

std::size_t byte_size(const Shape& shape, DType dtype) {
    return static_cast<std::size_t>(checked_byte_size(shape, dtype_size(dtype)));
}

string Node::op_spelling() const {
    switch (kind) {
        case NodeKind::input: return "input";
        case NodeKind::constant: return "const";
        case NodeKind::detach: return "detach";
        case NodeKind::op: break;
    }
    if (!op) return "<op missing>";
    if (static_cast<std::size_t>(*op) >= Spellings<BackendOp>::values.size()) return "<invalid op>";
    return string(to_string(*op));
}

string Node::parameter_prefix() const { return name.empty() ? std::to_string(id) : name; }

std::optional<std::size_t> Graph::index_of(int64_t id) const {
    for (std::size_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].id == id) return i;
    return std::nullopt;
}

std::unordered_map<int64_t, std::size_t> node_positions(const Graph& graph) {
    std::unordered_map<int64_t, std::size_t> out;
    out.reserve(graph.nodes.size());
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) out.emplace(graph.nodes[i].id, i);
    return out;
}

std::vector<string> output_names(const Graph& graph) {
    const auto position = node_positions(graph);
    std::unordered_set<string> taken;
    for (const auto& node : graph.nodes)
        if (!node.name.empty()) taken.insert(node.name);
    std::vector<string> names;
    for (auto id : graph.outputs) {
        auto at = position.find(id);
        if (at == position.end())
            throw Error(ErrorCode::input, "output " + std::to_string(id) + " is not a node of " +
                                              (graph.source.empty() ? "the graph" : graph.source.string()));
        const auto& node = graph.nodes[at->second];
        string name = node.name;
        if (name.empty()) {
            const string base = "output_" + std::to_string(id);
            name = base;
            for (int n = 1; taken.count(name); ++n) name = base + "_" + std::to_string(n);
            taken.insert(name);
        }
        names.push_back(std::move(name));
    }
    return names;
}

namespace {

constexpr std::string_view kFormat = "capsule-ir";
constexpr int64_t kVersion = 1;

string source_label(const std::filesystem::path& source) {
    return source.empty() ? string("graph") : source.string();
}

[[noreturn]] void fail(const string& where, const string& reason) {
    throw Error(ErrorCode::input, where + ": " + reason);
}

/// Where a reading error is, spelled only when one is raised (a graph has millions of nodes):
/// a fixed text such as the source file, or a node: `$.nodes[<index>]` before its id is known,
/// then `node <id>`, then `node <id> (<op>)`.
class Where {
public:
    Where(const string& text) : text_(&text) {}  // NOLINT: implicit, for top-level keys
    Where(const string& source, std::size_t index) : text_(&source), index_(index), node_(true) {}

    void set_id(int64_t id) { id_ = id; }
    void set_node(const Node& node) { op_of_ = &node; }

    string str() const {
        if (!node_) return *text_;
        if (!id_) return *text_ + ": $.nodes[" + std::to_string(index_) + "]";
        string out = *text_ + ": node " + std::to_string(*id_);
        if (op_of_) out += " (" + op_of_->op_spelling() + ")";
        return out;
    }

private:
    const string* text_;
    std::size_t index_ = 0;
    bool node_ = false;
    std::optional<int64_t> id_;
    const Node* op_of_ = nullptr;
};

[[noreturn]] void fail(const Where& where, const string& reason) { fail(where.str(), reason); }

/// User text inside an error message: quoted, shortened when long.
string quote(std::string_view text) {
    constexpr std::size_t kMax = 64;
    if (text.size() <= kMax) return "'" + string(text) + "'";
    return "'" + string(text.substr(0, kMax)) + "...'";
}

string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// "string \"abc\"", "number 1.5", "array", "object", ... for error messages.
string describe(const json& j) {
    if (j.is_array() || j.is_object() || j.is_null()) return j.type_name();
    string text = dump(j);
    if (text.size() > 64) text = text.substr(0, 64) + "...";
    return string(j.type_name()) + " " + text;
}

bool fits_int64(const json& j) {
    if (j.is_number_unsigned())
        return j.get<std::uint64_t>() <=
               static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max());
    return j.is_number_integer();
}

/// Reads an integer; `what` names it in errors.
int64_t read_int(const json& j, const Where& where, const string& what) {
    if (j.is_number_integer() && !fits_int64(j))
        fail(where, what + " = " + dump(j) + " is out of range");
    if (!j.is_number_integer()) fail(where, what + ": expected an integer, got " + describe(j));
    return j.get<int64_t>();
}

std::vector<int64_t> read_int_list(const json& j, const Where& where, const string& what) {
    if (!j.is_array()) fail(where, what + ": expected an array of integers, got " + describe(j));
    std::vector<int64_t> out;
    out.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) {
        const auto& e = j[i];
        if (e.is_number_integer() && fits_int64(e))
            out.push_back(e.get<int64_t>());
        else
            read_int(e, where, what + "[" + std::to_string(i) + "]");  // raises
    }
    return out;
}

/// `"output_lengths": [{"output": id, "axis": a, "length": id}, ...]` (checked by check_graph).
std::vector<OutputLength> read_output_lengths(const json& j, const Where& where) {
    if (!j.is_array()) fail(where, "$.output_lengths: expected an array, got " + describe(j));
    std::vector<OutputLength> out;
    for (std::size_t i = 0; i < j.size(); ++i) {
        const string what = "$.output_lengths[" + std::to_string(i) + "]";
        const auto& e = j[i];
        if (!e.is_object()) fail(where, what + ": expected an object, got " + describe(e));
        for (const auto& [key, _] : e.items())
            if (key != "output" && key != "axis" && key != "length")
                fail(where, what + ": unknown key " + quote(key) + "; valid keys: output, axis, length");
        for (const char* key : {"output", "axis", "length"})
            if (!e.contains(key)) fail(where, what + ": missing key '" + key + "'");
        out.push_back({read_int(e["output"], where, what + ".output"), read_int(e["axis"], where, what + ".axis"),
                       read_int(e["length"], where, what + ".length")});
    }
    return out;
}

AttrValue read_attr(const json& v, const Where& where, const string& name) {
    const string what = "attribute " + quote(name);
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer()) return read_int(v, where, what);
    if (v.is_number_float()) return v.get<double>();
    if (v.is_string()) return v.get<string>();
    if (v.is_array()) {
        bool all_int = true;
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (!v[i].is_number())
                fail(where, what + "[" + std::to_string(i) +
                                "]: list entries must be numbers, got " + describe(v[i]));
            if (!v[i].is_number_integer()) all_int = false;
        }
        if (all_int) return read_int_list(v, where, what);
        std::vector<double> out;
        out.reserve(v.size());
        for (const auto& e : v) out.push_back(e.get<double>());
        return out;
    }
    fail(where, what + ": unsupported value " + describe(v) +
                    "; use a number, boolean, string or list of numbers");
}

Node parse_node(const json& j, const string& source, std::size_t index) {
    Where where(source, index);
    if (!j.is_object()) fail(where, "expected a node object, got " + describe(j));
    Node node;

    auto id = j.find("id");
    if (id == j.end()) fail(where, "missing key 'id'");
    node.id = read_int(*id, where, "key 'id'");
    where.set_id(node.id);

    auto op = j.find("op");
    if (op == j.end()) fail(where, "missing key 'op'");
    if (!op->is_string()) fail(where, "key 'op': expected a string, got " + describe(*op));
    const auto& spelling = op->get_ref<const string&>();
    if (spelling == "input") {
        node.kind = NodeKind::input;
    } else if (spelling == "const") {
        node.kind = NodeKind::constant;
    } else if (spelling == "detach") {
        node.kind = NodeKind::detach;
    } else {
        try {
            node.op = parse<BackendOp>(spelling);
            node.kind = NodeKind::op;
        } catch (const Error&) {
            fail(where, "unknown op " + quote(spelling) + "; valid: input, const, detach, " +
                            valid_spellings<BackendOp>());
        }
    }
    where.set_node(node);

    static constexpr std::string_view kKeys[] = {"id", "op", "name", "parents", "attrs", "shape", "dtype"};
    for (const auto& [key, _] : j.get_ref<const json::object_t&>())
        if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
            fail(where, "unknown key " + quote(key) +
                            "; valid keys: id, op, name, parents, attrs, shape, dtype");

    if (auto it = j.find("name"); it != j.end()) {
        if (!it->is_string()) fail(where, "key 'name': expected a string, got " + describe(*it));
        node.name = it->get<string>();
    }
    if (auto it = j.find("parents"); it != j.end())
        node.parents = read_int_list(*it, where, "key 'parents'");
    if (auto it = j.find("attrs"); it != j.end()) {
        if (!it->is_object()) fail(where, "key 'attrs': expected an object, got " + describe(*it));
        for (const auto& [key, value] : it->items()) node.attrs[key] = read_attr(value, where, key);
    }
    auto shape = j.find("shape");
    if (shape == j.end()) fail(where, "missing key 'shape'");
    node.shape = read_int_list(*shape, where, "key 'shape'");
    for (auto d : node.shape)
        if (d < 0) fail(where, "key 'shape': dimension " + std::to_string(d) + " is negative");
    if (auto it = j.find("dtype"); it != j.end()) {
        if (!it->is_string()) fail(where, "key 'dtype': expected a string, got " + describe(*it));
        try {
            node.dtype = parse<DType>(it->get<string>());
        } catch (const Error& e) {
            fail(where, "key 'dtype': " + string(e.what()));
        }
    }
    return node;
}

/// The id whose std::to_string is `text` (canonical decimal, no sign, no leading zero), if any.
std::optional<int64_t> decimal_id(std::string_view text) {
    if (text.empty() || text.size() > 19 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
    int64_t value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, c - '0', &value))
            return std::nullopt;
    }
    return value;
}

nlohmann::ordered_json attr_to_json(const AttrValue& value) {
    return std::visit([](const auto& v) { return nlohmann::ordered_json(v); }, value);
}

}  // namespace

Graph parse_graph(std::string_view json_text, const std::filesystem::path& source) {
    const string src = source_label(source);

    // Nodes are decoded as the parser completes each one, so the document never holds the whole
    // node list (a million-node graph would take gigabytes as a JSON tree). The first bad node's
    // error is kept and raised after the top-level checks, in the order a whole-document read
    // gives.
    std::vector<Node> nodes;
    // About one node per 40 bytes of text (a compact unary node is about that long): the vector
    // rarely grows, and reserved pages that stay unused are never touched.
    nodes.reserve(json_text.size() / 40);
    std::optional<Error> node_error;
    const detail::StreamedArray node_stream{
        "nodes", [&](const json& element, std::size_t index) {
            if (node_error) return;
            try {
                nodes.push_back(parse_node(element, src, index));
            } catch (const Error& e) {
                node_error = e;
            }
        }};
    const json doc = detail::parse_json_text(json_text, src, node_stream);

    if (!doc.is_object())
        fail(src, "expected a JSON object at the top level, got " + describe(doc));
    for (const auto& [key, _] : doc.items())
        if (key != "format" && key != "version" && key != "nodes" && key != "outputs" &&
            key != "output_lengths" && key != "parameters")
            fail(src, "unknown top-level key " + quote(key) +
                          "; valid keys: format, version, nodes, outputs, output_lengths, parameters");
    for (const char* key : {"format", "version", "nodes", "outputs"})
        if (!doc.contains(key)) fail(src, string("missing top-level key '") + key + "'");

    const auto& format = doc["format"];
    if (!format.is_string() || format.get<string>() != kFormat)
        fail(src, "$.format: expected \"capsule-ir\", got " + describe(format));
    const auto version = read_int(doc["version"], src, "$.version");
    if (version != kVersion)
        fail(src, "$.version: unsupported version " + std::to_string(version) +
                      "; this runtime reads version " + std::to_string(kVersion));

    Graph graph;
    graph.source = source;
    if (!doc["nodes"].is_array())
        fail(src, "$.nodes: expected an array of nodes, got " + describe(doc["nodes"]));
    if (node_error) throw *node_error;
    graph.nodes = std::move(nodes);

    graph.outputs = read_int_list(doc["outputs"], src, "$.outputs");
    if (auto it = doc.find("output_lengths"); it != doc.end()) graph.output_lengths = read_output_lengths(*it, src);
    if (auto it = doc.find("parameters"); it != doc.end()) {
        if (!it->is_string() || it->get<string>().empty())
            fail(src, "$.parameters: expected a non-empty file name, got " + describe(*it));
        graph.parameters = it->get<string>();
    }
    return graph;
}

Graph load_graph(const std::filesystem::path& path) {
    const string where = path.string();
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status))
        throw Error(ErrorCode::input, 
            where + ": cannot read graph file: " + (ec ? ec.message() : string("no such file")));
    if (std::filesystem::is_directory(status))
        throw Error(ErrorCode::input, where + ": cannot read graph file: it is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::input, where + ": cannot read graph file: " + std::strerror(errno));
    // Read in one piece into a buffer of the file's size (a stringstream would grow by
    // doubling and then copy: three times the memory of a large graph).
    string text;
    if (auto size = std::filesystem::file_size(path, ec); !ec) text.reserve(size);
    std::array<char, 1 << 16> chunk;
    while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0)
        text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (in.bad()) throw Error(ErrorCode::input, where + ": cannot read graph file: read error");
    return parse_graph(text, path);
}

string graph_to_json(const Graph& graph) {
    using ojson = nlohmann::ordered_json;
    auto compact = [](const ojson& j) {
        return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
    };
    string out = "{\n  \"format\": \"capsule-ir\",\n  \"version\": 1,\n  \"nodes\": [";
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
        const auto& node = graph.nodes[i];
        ojson j;
        j["id"] = node.id;
        j["op"] = node.op_spelling();
        if (!node.name.empty()) j["name"] = node.name;
        if (!node.parents.empty()) j["parents"] = node.parents;
        if (!node.attrs.empty()) {
            ojson attrs = ojson::object();
            for (const auto& [key, value] : node.attrs) attrs[key] = attr_to_json(value);
            j["attrs"] = std::move(attrs);
        }
        j["shape"] = ojson::array();
        for (auto d : node.shape) j["shape"].push_back(d);
        j["dtype"] = string(to_string(node.dtype));
        out += (i ? ",\n    " : "\n    ") + compact(j);
    }
    out += graph.nodes.empty() ? "],\n" : "\n  ],\n";
    ojson outputs = ojson::array();
    for (auto id : graph.outputs) outputs.push_back(id);
    out += "  \"outputs\": " + compact(outputs);
    if (!graph.output_lengths.empty()) {
        ojson lengths = ojson::array();
        for (const auto& l : graph.output_lengths)
            lengths.push_back(ojson{{"output", l.output}, {"axis", l.axis}, {"length", l.length_node}});
        out += ",\n  \"output_lengths\": " + compact(lengths);
    }
    if (graph.parameters) out += ",\n  \"parameters\": " + compact(ojson(*graph.parameters));
    return out + "\n}\n";
}

void check_graph(const Graph& graph) {
    const string src = source_label(graph.source);
    auto where = [&](const Node& node) {
        return src + ": node " + std::to_string(node.id) + " (" + node.op_spelling() + ")";
    };

    // Ids, node kinds and parameter prefixes.
    // Parameter prefixes are names, or the decimal id of an unnamed node; ids are unique, so a
    // clash is name vs name or a name that spells the id of an unnamed node. Tracked without
    // building a string per node.
    std::unordered_map<int64_t, std::size_t> position;
    std::unordered_map<std::string_view, int64_t> names;
    std::unordered_map<int64_t, int64_t> numeric_names;  // id spelled by a name -> named node
    position.reserve(graph.nodes.size());
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
        const auto& node = graph.nodes[i];
        if (node.id < 0)
            fail(where(node), "id " + std::to_string(node.id) + " is negative; ids must be >= 0");
        if (auto [it, fresh] = position.emplace(node.id, i); !fresh)
            fail(where(node), "duplicate id " + std::to_string(node.id) + " ($.nodes[" +
                                  std::to_string(it->second) + "] and $.nodes[" +
                                  std::to_string(i) + "])");
        if ((node.kind == NodeKind::op) != node.op.has_value() ||
            (node.op && static_cast<std::size_t>(*node.op) >= Spellings<BackendOp>::values.size()))
            fail(where(node), "node kind and op disagree");
        if (node.name.empty()) {
            if (auto it = numeric_names.find(node.id); it != numeric_names.end())
                fail(where(node), "its id " + std::to_string(node.id) +
                                      " is already used as the name of node " +
                                      std::to_string(it->second));
            continue;
        }
        auto clash = [&](int64_t other) {
            fail(where(node), "name " + quote(node.name) + " is already used by node " +
                                  std::to_string(other));
        };
        if (auto [it, fresh] = names.emplace(node.name, node.id); !fresh) clash(it->second);
        if (auto spelled = decimal_id(node.name)) {
            // An earlier unnamed node with that id already owns the prefix.
            if (auto it = position.find(*spelled);
                it != position.end() && it->second < i && graph.nodes[it->second].name.empty())
                clash(*spelled);
            numeric_names.emplace(*spelled, node.id);
        }
    }

    // Parents, arity, attributes and declared types, in list order.
    std::vector<TensorType> parent_types;
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
        const auto& node = graph.nodes[i];
        try {
            byte_size(node.shape, node.dtype);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::input) throw;
            fail(where(node), string("declared ") + e.what());
        }
        parent_types.clear();
        for (auto parent : node.parents) {
            auto it = position.find(parent);
            if (it == position.end())
                fail(where(node), "unknown parent id " + std::to_string(parent));
            if (it->second == i)
                fail(where(node),
                     "parent " + std::to_string(parent) + " is the node itself (cycle)");
            if (it->second > i)
                fail(where(node), "parent " + std::to_string(parent) +
                                      " appears later (cycle or forward reference)");
            const auto& p = graph.nodes[it->second];
            parent_types.push_back({p.shape, p.dtype});
        }
        TensorType inferred;
        try {
            inferred = infer_type(node, parent_types);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::input) throw;
            fail(where(node), e.what());
        }
        if (inferred.shape != node.shape)
            fail(where(node), "declared shape " + to_string(node.shape) + " but inferred " +
                                  to_string(inferred.shape));
        if (inferred.dtype != node.dtype)
            fail(where(node), "declared dtype " + string(to_string(node.dtype)) + " but inferred " +
                                  string(to_string(inferred.dtype)));
    }

    if (graph.outputs.empty()) fail(src, "graph has no outputs");
    for (auto id : graph.outputs)
        if (!position.count(id)) fail(src, "output " + std::to_string(id) + " is not a node id");
    std::set<std::int64_t> trimmed;
    for (const auto& l : graph.output_lengths) {
        const string what = "output_lengths: output " + std::to_string(l.output);
        if (std::find(graph.outputs.begin(), graph.outputs.end(), l.output) == graph.outputs.end())
            fail(src, what + " is not in outputs");
        if (!trimmed.insert(l.output).second) fail(src, what + " has more than one length");
        const Node& out = graph.nodes[position.at(l.output)];
        if (l.axis < 0 || l.axis >= static_cast<std::int64_t>(out.shape.size()))
            fail(src, what + ": axis " + std::to_string(l.axis) + " is outside its shape " + to_string(out.shape));
        const auto length = position.find(l.length_node);
        if (length == position.end())
            fail(src, what + ": length " + std::to_string(l.length_node) + " is not a node id");
        const Node& n = graph.nodes[length->second];
        if (n.dtype != DType::int64 || !n.shape.empty())
            fail(src, what + ": length node " + std::to_string(l.length_node) + " must be an int64 scalar, got " +
                          string(to_string(n.dtype)) + " " + to_string(n.shape));
    }
}

}  // namespace capsule
