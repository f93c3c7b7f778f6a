// Internal to the ONNX importer: the state one import builds up, shared by the model loader
// (model_loader.cpp), the op converters (converters.cpp) and the constant folder
// (constant_folding.cpp).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <onnx/onnx_pb.h>

#include "capsule/onnx_import.hpp"

namespace capsule::onnx_import {

/// What an ONNX value name stands for during import.
struct Value {
    TensorType type;
    std::optional<std::int64_t> node;   // graph node computing it (runtime value)
    std::optional<Tensor> constant;     // host value known at import (initializer, folded)
    std::string graph_input;            // the ONNX graph input this value is ("" otherwise)
    /// An ONNX sequence known at import: the names of its tensors, in order (`type` holds the
    /// element dtype). Sequences exist only during import: each element is a tensor value.
    std::optional<std::vector<std::string>> sequence;
    /// An empty ONNX optional (no value).
    bool none = false;
    /// Neither a tensor nor a sequence: the value has no tensor to give.
    bool is_tensor() const { return !sequence && !none; }
};

/// Raised by converters for a variant they do not map; the loader adds op, node and opset.
struct Unsupported {
    std::string reason;
};
[[noreturn]] void unsupported(std::string reason);

/// ONNX element type → DType, or nullopt.
std::optional<DType> dtype_of_onnx(int elem_type);
/// "float16", "int32", ... for messages.
/// " (supported: float, double, ...)": the ONNX element types dtype_of_onnx maps, for messages.
extern const char* const kSupportedOnnxDtypes;
std::string onnx_type_name(int elem_type);
/// TensorProto → host tensor. Raises Unsupported for other element types and Error(input) for
/// malformed data.
Tensor tensor_from_proto(const onnx::TensorProto& proto);

/// Bounds on what an import may make, so that a small model cannot exhaust memory or time by
/// unrolling (Loop, Scan, RNN, nested in one another), SequenceMap or folding: the graph's nodes,
/// the ONNX nodes converted or folded (each inlined copy counts), and the bytes of constants made
/// at import beyond the model's own initializers.
inline constexpr std::size_t kMaxImportedNodes = std::size_t(1) << 18;
inline constexpr std::size_t kMaxConvertedNodes = std::size_t(1) << 20;
inline constexpr std::size_t kMaxImportConstantBytes = std::size_t(2) << 30;

class ImportContext {
public:
    ImportContext(ImportedModel& model, std::int64_t opset) : model_(model), opset_(opset) {}

    std::int64_t opset() const { return opset_; }
    /// The ONNX node being converted (for names of helper nodes).
    const onnx::NodeProto* current = nullptr;
    /// Set when an import fails because a value must be a constant: the graph input it is, or
    /// one it is computed from (specialising the model to that input may make it foldable).
    std::string needed_constant_input;
    /// A graph input that node `id` is computed from ("" when none: e.g. only from parameters).
    std::string graph_input_feeding(std::int64_t id) const;

    bool has(const std::string& name) const { return values_.count(name) != 0; }
    Value& value(const std::string& name);
    void define(const std::string& name, Value v);
    /// Binds an ONNX output name to a constant; Unsupported once the constants made at import
    /// exceed kMaxImportConstantBytes (see start_counting_constants).
    void define_constant(const std::string& name, Tensor t);
    /// The value `name` stands for, to bind to another name: a graph input gets its input node
    /// first, so that both names refer to the same node.
    Value bound(const std::string& name);
    /// Counts one ONNX node converted or folded; Unsupported past kMaxConvertedNodes.
    void count_converted_node();
    /// Counts constant bytes from here on (after the model's initializers) against
    /// kMaxImportConstantBytes; define_constant raises Unsupported past it.
    void start_counting_constants() { constant_bytes_ = 0; }
    /// Binds an ONNX output name to an existing node.
    void define_node(const std::string& name, std::int64_t id);
    /// Binds an ONNX output name to a sequence of the tensor values `elements` (element dtype
    /// `dtype`).
    void define_sequence(const std::string& name, std::vector<std::string> elements, DType dtype);
    /// The element names of sequence `name`; Unsupported naming `what` when it is not a sequence.
    const std::vector<std::string>& sequence(const std::string& name, const std::string& what);
    /// A name that exists but cannot be used (unsupported dtype or type); using it raises
    /// Unsupported with `reason`.
    void mark_unusable(const std::string& name, std::string reason);
    /// A value whose length along `axis` depends on the data: node `id` holds an upper bound,
    /// padded, and int64 scalar node `length` the real length (NonMaxSuppression, NonZero).
    struct DataDependentLength {
        std::int64_t axis = 0, length = 0;
    };
    /// Binds an ONNX output name to node `id` of data-dependent length. Only a graph output may
    /// read it (Graph::output_lengths): a node that reads it is Unsupported.
    void define_node_with_length(const std::string& name, std::int64_t id, DataDependentLength length);
    /// The data-dependent length of value `name`, if it has one.
    std::optional<DataDependentLength> data_dependent_length(const std::string& name) const;

    /// The node id of a runtime value, creating an `input` or `const` node on first use.
    std::int64_t runtime(const std::string& name);
    const TensorType& type(const std::string& name) { return value(name).type; }
    bool is_constant(const std::string& name) { return value(name).constant.has_value(); }
    /// The constant value; raises Unsupported naming `what` when the value is computed at run time
    /// (recording the graph input in `needed_constant_input` when it is one).
    const Tensor& constant(const std::string& name, const std::string& what);

    /// Adds a BackendOp node (by spelling: an op missing from this build's vocabulary is
    /// Unsupported), infers its type (an inference error is Unsupported with that reason) and
    /// returns its id. `name` empty: a fresh helper name derived from the current node.
    std::int64_t add(const std::string& op, std::vector<std::int64_t> parents, Attributes attrs = {},
                     std::string name = {});
    /// A structural `detach` (identity) node named `name`.
    std::int64_t add_identity(std::int64_t parent, const std::string& name);
    const Node& node(std::int64_t id) const { return graph().nodes[index_.at(id)]; }
    const TensorType& node_type(std::int64_t id) const {
        return types_.at(id);
    }
    /// Binds the parameters of node `id` (parameter_specs order) from ONNX values: each source
    /// must be a constant (stored under the key) or a graph input (recorded in parameter_inputs).
    /// A source whose type differs from the spec is reshaped when only the shape differs and the
    /// element count agrees (e.g. a [1, C] bias for a [C] parameter), else Unsupported.
    void bind_parameters(std::int64_t id, const std::vector<std::string>& sources);
    /// Binds one parameter key to a host tensor directly.
    void bind_parameter_value(const std::string& key, Tensor t);

    /// A fresh unique node name.
    std::string fresh_name(const std::string& base);
    /// A fresh_name that also names no value defined so far (a model's initializer or output
    /// may be spelled like an importer helper, e.g. `y#index`): for the importer's own constants.
    std::string fresh_value_name(const std::string& base);
    bool name_used(const std::string& name) const { return names_.count(name) != 0; }

    Graph& graph() const { return model_.graph; }
    ImportedModel& model() { return model_; }

private:
    ImportedModel& model_;
    std::int64_t opset_;
    std::unordered_map<std::string, Value> values_;
    std::unordered_map<std::int64_t, std::size_t> index_;
    std::unordered_map<std::int64_t, TensorType> types_;
    std::map<std::string, int> names_;
    std::unordered_map<std::string, int> next_suffix_;  // fresh_name: the last suffix given per base
    std::map<std::string, std::string> unusable_;
    std::map<std::string, DataDependentLength> lengths_;
    std::int64_t next_id_ = 0;
    std::size_t converted_nodes_ = 0;
    std::size_t constant_bytes_ = 0;
    std::int64_t push(Node node, TensorType type);
};

/// A converter for one ONNX op type: reads the node, adds graph nodes and defines every output.
using Converter = std::function<void(ImportContext&, const onnx::NodeProto&)>;
/// The converter table (converters.cpp): ONNX op type (default domain) → converter.
const std::map<std::string, Converter>& converters();
/// ONNX's training domain, whose optimizer ops (Adagrad, Adam, Momentum) are imported.
inline constexpr const char* kTrainingDomain = "ai.onnx.preview.training";
/// The converters of that domain's optimizer ops (training_ops.cpp).
const std::map<std::string, Converter>& training_converters();
/// Adds the converters of ONNX's quantization ops (quantization.cpp) to `table`.
void add_quantization_converters(std::map<std::string, Converter>& table);
/// Adds the converters of ONNX's signal-processing ops (signal.cpp) to `table`.
void add_signal_converters(std::map<std::string, Converter>& table);
/// Adds the converters of ONNX's control flow, If, Loop and Scan, inlined and unrolled
/// (control_flow.cpp), to `table`.
void add_control_flow_converters(std::map<std::string, Converter>& table);
/// Inlines subgraph `body` of node `owner` (control_flow.cpp): binds its inputs to `inputs`, gives
/// its initializers and node outputs fresh names tagged with `tag` (a body inlined many times
/// defines each value once), folds or converts its nodes in order, and returns the names of its
/// outputs. A refusal inside names the body's node.
std::vector<std::string> inline_subgraph(ImportContext& c, const onnx::NodeProto& owner, const onnx::GraphProto& body,
                                         const std::vector<Value>& inputs, const std::string& tag);
/// Adds the converters of ONNX's sequence and optional ops, resolved at import (sequences.cpp),
/// to `table`.
void add_sequence_converters(std::map<std::string, Converter>& table);
/// ONNX Resize (opsets 10-13) and Upsample (7, 9) as per-axis gathers and weighted sums
/// (resize.cpp).
void convert_resize(ImportContext& c, const onnx::NodeProto& n);
/// A convolution or pooling window over the spatial axes of an [N, C, spatial...] input (ONNX
/// kernel_shape, strides, dilations, and pads split into begin and end), one entry per axis.
struct Window {
    std::vector<std::int64_t> kernel, stride, dilation, pad_begin, pad_end;
};
/// Max or average pooling of `x` by `w` as strided slices of the padded input combined with
/// max / add, averages divided by each window's count of input positions (with
/// `count_include_pad`, of input and declared padding positions) (pooling.cpp); output lengths
/// as PyTorch's with `ceil_mode`; the last node is named `name`. Unsupported when a window covers
/// only padding, is longer than 4096, or the output has over 2^24 positions per channel.
std::int64_t pool_by_slices(ImportContext& c, const onnx::NodeProto& n, std::int64_t x, const Window& w,
                            bool is_max, bool ceil_mode, bool count_include_pad, const std::string& name);
/// MaxPool with its Indices output (pooling.cpp): values and the int64 index of each window's
/// first maximum in row-major window order, flattened over the whole input (N, C, then the
/// spatial axes; `column_major`: spatial axes reversed, ONNX storage_order 1). Unsupported beyond
/// 2^24 padded input elements (the index table is built at import).
std::pair<std::int64_t, std::int64_t> max_pool_with_indices(ImportContext& c, const onnx::NodeProto& n, std::int64_t x,
                                                            const Window& w, bool ceil_mode, bool column_major,
                                                            const std::string& values_name, const std::string& indices_name);
/// A 3-D convolution of `x` [N, C, D, H, W] with the constant weight `weight` [M, C/groups, kD,
/// kH, kW] (and bias [M] when `bias` is not empty) as Σ over kd of `conv2d`s of depth slices
/// (conv3d.cpp); the last node is named `name`. Unsupported when the weight is not a constant.
std::int64_t conv3d_by_depth_slices(ImportContext& c, std::int64_t x, const Window& w,
                                    std::int64_t groups, const std::string& weight, const std::string& bias,
                                    const std::string& name);
/// ONNX RNN, GRU and LSTM unrolled over their static sequence length (recurrent.cpp): each
/// defines the node's present outputs (Y, Y_h, and LSTM's Y_c).
void convert_rnn(ImportContext& c, const onnx::NodeProto& n);
void convert_gru(ImportContext& c, const onnx::NodeProto& n);
void convert_lstm(ImportContext& c, const onnx::NodeProto& n);
/// x rounded half to even (numpy.round, ONNX Round): floor(x) + 1 where x − floor(x) > 0.5, or
/// = 0.5 with an odd floor; exact, NaN and ±inf kept, a zero with x's sign. The last node is
/// named `name`.
std::int64_t round_half_to_even(ImportContext& c, const onnx::NodeProto& n, std::int64_t x, const std::string& name = {});
/// ONNX GridSample (opset 16) as gathers at positions computed at run time (grid_sample.cpp).
void convert_grid_sample(ImportContext& c, const onnx::NodeProto& n);
/// The constant `t`, named after the node's first output and `suffix` (made unique), as a runtime
/// value (a `const` node).
std::int64_t constant_input(ImportContext& c, const onnx::NodeProto& n, const std::string& suffix, Tensor t);
/// x[start : end : step] along `axis` (BackendOp `slice`; a step of 1 is left implicit); the
/// node is named `name` (empty: a fresh helper name).
std::int64_t slice_axis(ImportContext& c, std::int64_t x, std::int64_t axis, std::int64_t start, std::int64_t end,
                        std::int64_t step = 1, const std::string& name = {});
/// A total padding split in two: {smaller half, larger half} when `smaller_first` (ONNX's
/// SAME_UPPER), else {larger, smaller}.
std::pair<std::int64_t, std::int64_t> split_padding(std::int64_t total, bool smaller_first);
/// A tensor of `shape` holding `v` everywhere: a scalar constant broadcast at run time (nothing
/// of `shape`'s size is made at import).
std::int64_t filled(ImportContext& c, const onnx::NodeProto& n, DType dtype, double v, const Shape& shape);
/// A scalar constant of `dtype`, as constant_input.
std::int64_t scalar_constant(ImportContext& c, const onnx::NodeProto& n, const std::string& suffix, DType dtype, double v);
/// Reason an op type has no converter (string ops, random ops, region-of-interest pooling,
/// outputs of data-dependent length), or "" when unknown.
std::string known_unsupported_reason(const std::string& op_type);

/// Folds `node` into constants where it can, else converts it by its converter; Unsupported when
/// neither (model_loader.cpp). Control-flow converters call it for the nodes of a subgraph.
void convert_node(ImportContext& ctx, const onnx::NodeProto& node);
/// Tries to fold `node` on the host (constant_folding.cpp): when every input it needs is a
/// constant (Shape and Size only need a static input shape) and the op is foldable, defines the
/// outputs as constants and returns true.
bool try_fold(ImportContext& ctx, const onnx::NodeProto& node);

/// Output shape of Reshape / Squeeze / Unsqueeze / Flatten for input shape `in` (constant
/// shape/axes inputs are read through ctx); Unsupported when they are not constants.
Shape reshape_target(ImportContext& ctx, const onnx::NodeProto& node, const Shape& in);
/// Slice's ranges for input shape `in`: per axis {start, step, count} after NumPy clamping.
std::vector<std::array<std::int64_t, 3>> slice_ranges(ImportContext& ctx, const onnx::NodeProto& node,
                                                      const Shape& in);

// Attribute helpers (converters and folding).
const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name);
std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback);
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback);
std::string attr_string(const onnx::NodeProto& node, const std::string& name,
                        const std::string& fallback);
std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node,
                                                   const std::string& name);
/// Input i's name, or "" when absent or empty (optional input left out).
std::string input_name(const onnx::NodeProto& node, int i);
/// Values of an int64 (or int32) constant tensor.
std::vector<std::int64_t> int_values(const Tensor& t);
/// The shape of node `id` of the graph being built.
inline const Shape& shape_of(ImportContext& c, std::int64_t id) { return c.node_type(id).shape; }
/// The one integer value of input `name`, which must be known at import (a constant, or a graph
/// input that onnx-test specialises); raises UnsupportedOnnx naming `what` when it is not, holds
/// more or fewer values, or is not of an integer dtype (or bool) (through int_values: a uint64
/// beyond int64 is refused). (converters.cpp)
std::int64_t scalar_int(ImportContext& c, const std::string& name, const std::string& what);

/// Checks every node's index-like attributes (axis, axes, perm, window sizes, pads, split)
/// against the ranks its inputs have, so that libonnx's shape inference, which indexes shapes
/// with some of them unchecked, never sees a bad one; raises Error(input) naming the node, op,
/// attribute and value. Returns how many leading nodes inference may be given: a node whose
/// input rank cannot be told here (inference_guard.cpp) and every node after it are left out.
int nodes_safe_for_inference(const onnx::GraphProto& g, std::int64_t opset, const std::string& src);

/// NumPy broadcast of two shapes, or Unsupported when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// Normalises an axis in [-rank, rank) to [0, rank); Unsupported when out of range (always for
/// rank 0).
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank);
/// Runs `step`, a call into libonnx on `model` (checker, shape inference), in a child process,
/// so that a crash or hang of libonnx on a malformed model refuses the model instead of ending
/// the host. Returns the message of an exception `step` raised, or nullopt on success; with
/// `want_types`, copies the graph's value_info and output types the child computed into `model`.
/// Raises Error(input) naming `src` and `what` when the child crashes or runs over 60 s.
std::optional<std::string> run_libonnx_isolated(onnx::ModelProto& model, const std::string& src,
                                                const std::string& what, bool want_types,
                                                const std::function<void(onnx::ModelProto&)>& step);


}  // namespace capsule::onnx_import
