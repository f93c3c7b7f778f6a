// The JSON IR (DESIGN.md section 7) and its well-formedness and shape checks.
//
// A Graph is a list of nodes in topological order: every parent appears earlier than its child.
// `input`, `const` and `detach` are structural nodes that need no runtime capsule; every other op
// is a BackendOp. Attribute conventions and shape rules per op are documented in docs/ops.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "capsule/shape_math.hpp"
#include "capsule/vocabulary.hpp"

namespace capsule {

/// Element types; the values match capsule_dtype (plugin_abi.h). Spelled `float32`, `float64`,
/// `int64`, `bool`, and since ABI 1.1 `int32`, `int8`, `uint8`, `int16`, `uint16`, `uint32`,
/// `uint64`, `float16` (IEEE binary16) and `bfloat16` (capsule/float16.hpp has their conversions).
enum class DType : std::uint8_t {
    float32, float64, int64, boolean,
    int32, int8, uint8, int16, uint16, uint32, uint64, float16, bfloat16
};
template <> struct Spellings<DType> {
    static constexpr std::string_view kind = "dtype";
    static const std::array<std::pair<DType, std::string_view>, 13> values;
};
/// float32, float64, float16 or bfloat16.
bool is_floating(DType dtype);
/// One of the eight integer dtypes (int8 ... uint64); bool is not an integer dtype.
bool is_integer(DType dtype);
/// Size of one element in bytes.
std::size_t dtype_size(DType dtype);

/// Row-major tensor shape; each dimension ≥ 0.
using Shape = std::vector<std::int64_t>;
/// `[2, 3]`
std::string to_string(const Shape& shape);
/// Product of the dimensions (1 for a scalar shape `[]`): checked_element_count
/// (capsule/shape_math.hpp). Raises Error(input) naming the shape when a dimension is negative or
/// the count (or the product of the non-zero dimensions) exceeds 2^63-1.
std::int64_t element_count(const Shape& shape);
/// Bytes of a dense tensor of `shape` and `dtype`: checked_byte_size. Raises Error(input) naming the
/// shape as element_count does, or when the byte count exceeds 2^63-1.
std::size_t byte_size(const Shape& shape, DType dtype);

/// A node attribute value. JSON integers read as int64, other numbers as double, arrays of
/// integers as int list, arrays with any non-integer number as float list.
using AttrValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>,
                               std::vector<double>>;
using Attributes = std::map<std::string, AttrValue>;

/// Structural node kinds; `op` nodes carry a BackendOp.
enum class NodeKind : std::uint8_t { input, constant, detach, op };

struct Node {
    std::int64_t id = 0;
    NodeKind kind = NodeKind::op;
    std::optional<BackendOp> op;  // set iff kind == op
    std::string name;             // optional; parameters are keyed by name, or by id when empty
    std::vector<std::int64_t> parents;
    Attributes attrs;
    Shape shape;
    DType dtype = DType::float32;

    /// `input`, `const`, `detach` or the BackendOp spelling.
    std::string op_spelling() const;
    /// The key parameters of this node are stored under: name, or the id when name is empty.
    std::string parameter_prefix() const;
    /// Nodes that need no runtime work: input, const, detach.
    bool is_structural() const { return kind != NodeKind::op; }
};

/// A graph output whose length along `axis` depends on the data (ONNX NonMaxSuppression,
/// NonZero): its node's declared shape is an upper bound, the rows past the length are padding,
/// and a run returns only the first `length` entries along `axis`, where `length` is the value of
/// node `length_node`, an int64 scalar computed in the same run.
struct OutputLength {
    std::int64_t output = 0;       // a node id in Graph::outputs
    std::int64_t axis = 0;         // 0 <= axis < rank of that node
    std::int64_t length_node = 0;  // an int64 node of shape []
    bool operator==(const OutputLength&) const = default;
};

struct Graph {
    std::vector<Node> nodes;
    std::vector<std::int64_t> outputs;
    /// JSON `"output_lengths": [{"output": id, "axis": a, "length": id}]`; empty for most graphs.
    std::vector<OutputLength> output_lengths;
    std::optional<std::string> parameters;  // parameters file, relative to the graph file
    std::filesystem::path source;           // file the graph was read from (may be empty)

    /// Index into `nodes` of the node with this id; nullopt when absent. A linear scan: for
    /// lookups of many ids use node_positions.
    std::optional<std::size_t> index_of(std::int64_t id) const;
};

/// Index into `graph.nodes` of every node id (the first node when an id repeats), built in one
/// pass; lookups are O(1).
std::unordered_map<std::int64_t, std::size_t> node_positions(const Graph& graph);

/// The name of each graph output, in the order of `graph.outputs`: its node's name, or for an
/// unnamed node `output_<id>`, followed by `_1`, `_2`, ... when a node or an earlier output
/// already has that name (so that every output can be asked for by name). Raises Error(input)
/// when an output id names no node.
std::vector<std::string> output_names(const Graph& graph);

/// The inferred type of a node's output.
struct TensorType {
    Shape shape;
    DType dtype = DType::float32;
    bool operator==(const TensorType&) const = default;
};

/// Parses a JSON IR document (format "capsule-ir", version 1). `source` names the document in
/// errors. Raises Error(input) for bad JSON structure, unknown keys, unknown ops or dtypes, naming
/// the node (`node <id> (<op>)`) and the problem. Does not check shapes; see check_graph.
Graph parse_graph(std::string_view json_text, const std::filesystem::path& source = {});
/// Reads and parses a graph file; raises Error(input) when the file cannot be read.
Graph load_graph(const std::filesystem::path& path);
/// Serialises a graph back to JSON IR text.
std::string graph_to_json(const Graph& graph);

/// Checks well-formedness: unique non-negative ids, parents that exist and appear earlier (no
/// cycle, no forward reference), arity per op, attributes per op, outputs that exist, and that the
/// declared shape and dtype of every node equal shape inference. Raises Error(input) naming the
/// graph source, the node and the problem.
void check_graph(const Graph& graph);

/// Infers the output type of `node` from its parents' types (in parent order) and attributes.
/// Raises Error(input) with the reason (without the node prefix) on wrong arity, bad attribute or
/// incompatible shapes.
TensorType infer_type(const Node& node, const std::vector<TensorType>& parents);

/// A tensor a node reads from the parameters file: its full key (`<prefix>.weight`, or just
/// `<prefix>` for a `const` node) and the type the file must hold.
struct ParameterSpec {
    std::string key;
    TensorType type;
    bool operator==(const ParameterSpec&) const = default;
};
/// The parameters `node` takes (docs/ops.md), in a fixed order, given its parents' types. Raises
/// Error(input) exactly where infer_type does.
std::vector<ParameterSpec> parameter_specs(const Node& node, const std::vector<TensorType>& parents);

}  // namespace capsule
