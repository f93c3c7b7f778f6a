// ONNX import (DESIGN.md section 5, "Graph formats"): an ONNX model becomes a capsule Graph plus
// its parameters, so that the rest of the pipeline (plan, lower, gate, execute) is the same as for
// the JSON IR.
//
// The importer is built on Debian's libonnx: the protobuf model is parsed, checked with
// `onnx::checker::check_model`, and its shapes are inferred with `onnx::shape_inference`. Every
// ONNX node maps to BackendOps (docs/onnx.md lists each ONNX op, the ops it becomes and the exact
// conditions), is folded on the host when it only computes on constants (Shape, Constant,
// Gather, Concat, ... so that Reshape's shape becomes an attribute), or is refused with a message
// that names the ONNX op type, the node name and the opset (import_onnx raises Error(input);
// try_import_onnx returns the refusal as OnnxUnsupported). Static shapes are required. This header
// does not expose protobuf types.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "capsule/error.hpp"
#include "capsule/ir.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor.hpp"

namespace capsule {

/// Something the model (or a tensor file) uses that the importer does not map: an ONNX op, an op
/// variant (attribute value, input count, output count), a dtype, an op domain or opset.
struct OnnxUnsupported {
    /// The full message, e.g. `model.onnx: ONNX op LpNormalization (node 'lp_1', opset 16) is not
    /// supported: no converter for this ONNX op`; import_onnx raises Error(input) with it.
    std::string message;
    /// The ONNX op type ("" for a model-level problem such as a dtype of a graph input).
    std::string op_type;
    /// The short, groupable reason (`no converter for this ONNX op`).
    std::string reason;
    /// When the import failed because a graph input must be known at import (Reshape's shape,
    /// Clip's bounds, reduction axes fed by an input): that input's name; else "". Importing again
    /// with its value in OnnxImportOptions::constant_inputs specialises the model to it.
    std::string constant_input;
};

struct OnnxImportOptions {
    /// Static shapes for graph inputs, by ONNX input name. A given shape must agree with every
    /// static dimension the model declares; it fixes the dynamic ones (`N`, `batch`, unnamed).
    std::map<std::string, Shape> input_shapes;
    /// The same by position among the graph inputs (initializers excluded), for callers that
    /// know the inputs' order but not their names (the backend test data's input_K.pb files).
    /// A name in `input_shapes` wins over a position.
    std::vector<Shape> positional_input_shapes;
    /// Values for graph inputs that the importer must know (see OnnxUnsupported::constant_input):
    /// each such input is replaced by the constant, its shape and dtype must be the declared ones,
    /// and the imported model lists it among `unused_inputs`.
    std::map<std::string, Tensor> constant_inputs;
    /// Element types of graph inputs that are sequences of tensors (or optionals holding one), by
    /// ONNX input name. Such an input is imported as one runtime input per element, named
    /// `<name>[k]` and listed in that order in ImportedModel::input_names in the sequence's place
    /// (positions in `positional_input_shapes` still count the sequence as one input). Without an
    /// entry, a node reading the sequence is refused (Unsupported). An element whose dtype differs
    /// from the declared one is Error(input).
    std::map<std::string, std::vector<TensorType>> sequence_inputs;
    /// Graph inputs of optional type given no value (empty optionals): OptionalHasElement is false
    /// for them, and they are not listed in ImportedModel::input_names.
    std::set<std::string> absent_inputs;
};

/// An imported ONNX model.
struct ImportedModel {
    /// The graph, checked (check_graph): every node's shape and dtype are the inferred ones.
    /// Runtime inputs are `input` nodes named after the ONNX graph inputs; outputs are nodes named
    /// after the ONNX graph outputs, in the model's order.
    Graph graph;
    /// Values of initializers and folded constants, keyed as the graph's nodes read them
    /// (`<node name>.weight`, `<const node name>`). Only what a node reads is kept.
    ParameterMap parameters;
    /// ONNX graph inputs that feed a parameter position (e.g. a Conv weight that the model takes
    /// as an input rather than an initializer): input name → the parameter keys its value
    /// supplies. The caller provides their values at session creation (see bind_onnx_inputs).
    std::map<std::string, std::vector<std::string>> parameter_inputs;
    /// ONNX graph inputs that no node reads after folding (e.g. the input of a folded Shape).
    std::vector<std::string> unused_inputs;
    /// ONNX nodes computed at import (constant folding: Shape, Constant, Gather on shapes, ...),
    /// in model order, one line each: `<op type> '<node name>' -> <output> <dtype>[<shape>], ...`.
    /// Plan reports and lockfiles list them, so nothing runs unseen.
    std::vector<std::string> folded;
    /// ONNX graph input names in model order (initializers excluded), and output names; a
    /// sequence input or output appears as its elements `<name>[k]`.
    std::vector<std::string> input_names;
    std::vector<std::string> output_names;
    /// Graph outputs that are sequences (known at import): ONNX output name → the outputs holding
    /// its tensors, in order (`<name>[k]`).
    std::map<std::string, std::vector<std::string>> sequence_outputs;
    /// The default-domain opset the model imports (e.g. 13), and its IR version.
    std::int64_t opset = 0;
    std::int64_t ir_version = 0;
    /// ONNX op types of the model's nodes, sorted and distinct (for reports).
    std::vector<std::string> op_types;
};

/// Reads, checks and imports an ONNX model file. Raises Error(input) for a missing or unreadable
/// file, a file that is not an ONNX ModelProto, a model the ONNX checker rejects, a dynamic input
/// dimension not fixed by `options.input_shapes` (naming the input, the axis and the fix), external
/// tensor data, or an op, variant or dtype the importer does not map (naming op type, node name
/// and opset).
ImportedModel import_onnx(const std::filesystem::path& path, const OnnxImportOptions& options = {});
/// The same for a serialised ModelProto held in memory; `source` names it in errors.
ImportedModel import_onnx_bytes(std::string_view bytes, const std::filesystem::path& source,
                                const OnnxImportOptions& options = {});

/// The imported model, or what the importer does not map.
using OnnxImportResult = std::variant<ImportedModel, OnnxUnsupported>;
/// import_onnx, returning an op, variant or dtype the importer does not map as OnnxUnsupported
/// (with the op type, the groupable reason and the graph input to bind as a constant) instead of
/// raising it. Raises Error(input) for the other failures import_onnx names.
OnnxImportResult try_import_onnx(const std::filesystem::path& path, const OnnxImportOptions& options = {});
/// try_import_onnx for a serialised ModelProto held in memory.
OnnxImportResult try_import_onnx_bytes(std::string_view bytes, const std::filesystem::path& source,
                                       const OnnxImportOptions& options = {});

/// The graph input names of an ONNX model file in model order (initializers excluded), without
/// importing it. Raises Error(input) for a missing or malformed file.
std::vector<std::string> onnx_graph_inputs(const std::filesystem::path& path);

/// Reads a serialised ONNX TensorProto (the `input_K.pb` / `output_K.pb` files of the ONNX
/// backend test data). Supported element types: float, double, float16, bfloat16, int64, int32,
/// int16, int8, uint64, uint32, uint16, uint8, bool. Raises Error(input) for a missing or
/// malformed file (a value outside its element type's range included) or another element type.
Tensor read_onnx_tensor(const std::filesystem::path& path);
/// read_onnx_tensor, returning another element type as OnnxUnsupported instead of raising it.
std::variant<Tensor, OnnxUnsupported> try_read_onnx_tensor(const std::filesystem::path& path);
/// A value of a backend test data file as ONNX types it: a tensor, a sequence of tensors, or an
/// empty optional (an optional holding a value reads as that value).
struct OnnxValue {
    enum class Kind { tensor, sequence, none };
    Kind kind = Kind::tensor;
    std::vector<Tensor> tensors;  // tensor: one; sequence: its elements in order; none: empty
};
/// Reads the data file of graph input (`output` false) or output `index` of `model` (initializers
/// excluded from the inputs) as the type the model declares for it: a TensorProto, a
/// SequenceProto of tensors, or an OptionalProto. Raises Error(input) for a missing or malformed
/// file or model, or an index out of range; returns a map, a sequence of non-tensors or an
/// unsupported element type as OnnxUnsupported.
std::variant<OnnxValue, OnnxUnsupported> try_read_onnx_value(const std::filesystem::path& file,
                                                             const std::filesystem::path& model, bool output,
                                                             std::size_t index);
/// The tensor's `name` field in such a file ("" when absent).
std::string read_onnx_tensor_name(const std::filesystem::path& path);

/// Splits caller-supplied values by ONNX input name into the session's runtime inputs and the
/// parameters fed by graph inputs (ImportedModel::parameter_inputs), which are added to
/// `parameters`. Values for unused inputs are dropped. Raises Error(input) for an unknown name or
/// a missing parameter input.
std::map<std::string, Tensor> bind_onnx_inputs(const ImportedModel& model,
                                               const std::map<std::string, Tensor>& values,
                                               ParameterMap& parameters);

/// A model ready to plan: a JSON IR graph with its parameters file, or an imported ONNX model.
struct LoadedModel {
    Graph graph;
    ParameterMap parameters;
    /// ONNX graph inputs that supply parameters (empty for JSON IR); see ImportedModel.
    std::map<std::string, std::vector<std::string>> parameter_inputs;
    std::vector<std::string> unused_inputs;
    /// ONNX nodes folded at import (ImportedModel::folded); empty for JSON IR.
    std::vector<std::string> folded;
};

/// Loads a model by extension: `.onnx` through import_onnx, anything else as JSON IR
/// (load_graph + load_graph_parameters). Raises what those raise.
LoadedModel load_model(const std::filesystem::path& path, const OnnxImportOptions& options = {});

/// bind_onnx_inputs for a LoadedModel (a JSON IR model passes every value through).
std::map<std::string, Tensor> bind_model_inputs(const LoadedModel& model,
                                                const std::map<std::string, Tensor>& values,
                                                ParameterMap& parameters);

}  // namespace capsule
