// ONNX import: hand-written models built with the onnx protobuf API (dynamic shapes, unsupported
// ops, initializers as parameters, graph inputs as parameters, constant folding of a shape
// chain, bad files), and the real architectures in tests/data/models (PyTorch exports with
// reference outputs) imported, planned under checked_cpu, run and compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using capsule::testing::built_host;
namespace fs = std::filesystem;

namespace {


void set_type(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<std::int64_t>& dims,
              const std::string& dynamic_axis_name = {}) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* shape = t->mutable_shape();
    for (auto d : dims) {
        auto* dim = shape->add_dim();
        if (d < 0) dim->set_dim_param(dynamic_axis_name);
        else dim->set_dim_value(d);
    }
}

onnx::ModelProto new_model(std::int64_t opset = 13) {
    onnx::ModelProto m;
    m.set_ir_version(7);
    m.set_producer_name("capsule-test");
    auto* imp = m.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    m.mutable_graph()->set_name("g");
    return m;
}

onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> inputs,
                          std::vector<std::string> outputs, const std::string& name = {}) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? outputs.at(0) + "_node" : name);
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return n;
}

void add_float_initializer(onnx::ModelProto& m, const std::string& name, const std::vector<std::int64_t>& dims,
                           const std::vector<float>& values) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (auto v : values) t->add_float_data(v);
}

void add_int_initializer(onnx::ModelProto& m, const std::string& name, const std::vector<std::int64_t>& values) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
}

ImportedModel import(const onnx::ModelProto& m, const OnnxImportOptions& options = {}) {
    return import_onnx_bytes(m.SerializeAsString(), "test.onnx", options);
}

std::vector<Tensor> run(const ImportedModel& model, const std::map<std::string, Tensor>& values) {
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), model.graph);
    EXPECT_TRUE(accepted.accepted.has_value());
    ParameterMap params = model.parameters;
    auto inputs = bind_onnx_inputs(model, values, params);
    auto session = Session::create(profile, *accepted.accepted, model.graph, built_host(), params);
    return session.run(inputs);
}

/// x [2, 3] → Relu → y.
onnx::ModelProto relu_model(std::vector<std::int64_t> dims = {2, 3}) {
    auto m = new_model();
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, dims, "N");
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, dims, "N");
    add_node(m, "Relu", {"x"}, {"y"});
    return m;
}

}  // namespace

TEST(OnnxImport, ReluRunsAndNamesInputsAndOutputs) {
    auto model = import(relu_model());
    EXPECT_EQ(model.opset, 13);
    EXPECT_EQ(model.input_names, std::vector<std::string>{"x"});
    EXPECT_EQ(model.output_names, std::vector<std::string>{"y"});
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {2, 3}, {-1, 2, -3, 4, -5, 6})}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 2, 0, 4, 0, 6}));
}

// NonMaxSuppression and NonZero have outputs whose length depends on the data: the node computes
// an upper bound padded with -1, the import marks the graph output's length (computed from the
// padding in the same run), and a run returns only the selected rows. A node that reads such a
// value would see the padding, so it is refused.
TEST(OnnxImport, NonMaxSuppressionAndNonZeroOutputsHaveTheirDataDependentLength) {
    auto m = new_model(11);
    set_type(m.mutable_graph()->add_input(), "boxes", onnx::TensorProto::FLOAT, {1, 4, 4});
    set_type(m.mutable_graph()->add_input(), "scores", onnx::TensorProto::FLOAT, {1, 1, 4});
    set_type(m.mutable_graph()->add_output(), "selected", onnx::TensorProto::INT64, {-1, 3}, "n");
    set_type(m.mutable_graph()->add_output(), "nonzero", onnx::TensorProto::INT64, {1, -1}, "k");
    add_int_initializer(m, "max_per_class", {10});
    add_float_initializer(m, "iou", {1}, {0.5f});
    m.mutable_graph()->mutable_initializer(0)->clear_dims();  // scalars
    m.mutable_graph()->mutable_initializer(1)->clear_dims();
    add_node(m, "NonMaxSuppression", {"boxes", "scores", "max_per_class", "iou"}, {"selected"});
    auto* axes = add_node(m, "Squeeze", {"scores"}, {"scores1d"})->add_attribute();  // [1, 1, 4] -> [4]
    axes->set_name("axes");
    axes->set_type(onnx::AttributeProto::INTS);
    axes->add_ints(0);
    axes->add_ints(1);
    add_node(m, "NonZero", {"scores1d"}, {"nonzero"});
    const auto model = import(m);
    ASSERT_EQ(model.graph.output_lengths.size(), 2u);
    // Boxes 0 and 1 overlap (IoU 0.82), 2 and 3 do not: 3 of the 4 boxes are selected.
    const Tensor boxes = Tensor::from_values(DType::float32, {1, 4, 4}, {0, 0, 1, 1, 0, 0.1, 1, 1.1, 0, 5, 1, 6, 0, 9, 1, 10});
    const Tensor scores = Tensor::from_values(DType::float32, {1, 1, 4}, {0.9, 0.8, 0, 0.7});
    const auto out = run(model, {{"boxes", boxes}, {"scores", scores}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].shape(), (Shape{3, 3}));
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 0, 0, 0, 0, 3, 0, 0, 2}));
    // NonZero of the scores [0.9, 0.8, 0, 0.7]: positions 0, 1 and 3.
    EXPECT_EQ(out[1].shape(), (Shape{1, 3}));
    EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{0, 1, 3}));
    // The graph round-trips through JSON IR with its output lengths.
    const Graph again = parse_graph(graph_to_json(model.graph));
    EXPECT_EQ(again.output_lengths, model.graph.output_lengths);
    // An output listed twice is one node, its length marked once; both entries are cut.
    auto twice = new_model(11);
    *twice.mutable_graph() = m.graph();
    twice.mutable_graph()->add_output()->CopyFrom(m.graph().output(1));
    const auto model_twice = import(twice);
    EXPECT_EQ(model_twice.graph.output_lengths.size(), 2u);
    const auto out_twice = run(model_twice, {{"boxes", boxes}, {"scores", scores}});
    ASSERT_EQ(out_twice.size(), 3u);
    EXPECT_EQ(out_twice[2].to_doubles(), (std::vector<double>{0, 1, 3}));

    // A node reading the padded value is refused, naming the value.
    auto reader = new_model(11);
    *reader.mutable_graph() = m.graph();
    reader.mutable_graph()->mutable_output()->RemoveLast();
    reader.mutable_graph()->mutable_output(0)->set_name("cast");
    add_node(reader, "Cast", {"selected"}, {"cast"})->add_attribute()->CopyFrom([] {
        onnx::AttributeProto a;
        a.set_name("to");
        a.set_type(onnx::AttributeProto::INT);
        a.set_i(onnx::TensorProto::FLOAT);
        return a;
    }());
    reader.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    try {
        import(reader);
        FAIL() << "a node reading NonMaxSuppression's padded output was imported";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'selected' has a length that depends on the input's values"), std::string::npos)
            << e.what();
    }
}

TEST(OnnxImport, DynamicInputDimensionIsAClearErrorUnlessFixed) {
    auto m = relu_model({-1, 3});
    try {
        import(m);
        FAIL() << "expected Error(input)";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        const std::string msg = e.what();
        EXPECT_NE(msg.find("input 'x' axis 0 has a dynamic size ('N')"), std::string::npos) << msg;
        EXPECT_NE(msg.find("static shapes"), std::string::npos) << msg;
        EXPECT_NE(msg.find("input_shapes"), std::string::npos) << msg;
    }
    OnnxImportOptions options;
    options.input_shapes["x"] = {4, 3};
    auto model = import(m, options);
    EXPECT_EQ(model.graph.nodes.front().shape, (Shape{4, 3}));
    options.input_shapes["x"] = {4, 5};  // contradicts the static axis 1
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(m, options); }));
    // A shape for a name the model does not take is refused, naming the model's inputs.
    OnnxImportOptions typo;
    typo.input_shapes["X"] = {4, 3};
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(m, typo); },
                       "a shape is given for input 'X', which the model does not take (its inputs: 'x')"));
}

TEST(OnnxImport, UnsupportedOpNamesOpTypeNodeAndOpset) {
    auto m = new_model(16);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {3, 3});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {3, 3});
    add_node(m, "LpNormalization", {"x"}, {"y"}, "my_lp");
    const std::string message = "ONNX op LpNormalization (node 'my_lp', opset 16) is not supported: no converter for this ONNX op";
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(m); }, message));
    auto result = try_import_onnx_bytes(m.SerializeAsString(), "test.onnx");
    const auto* refused = std::get_if<OnnxUnsupported>(&result);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "LpNormalization");
    EXPECT_NE(refused->message.find(message), std::string::npos) << refused->message;
    EXPECT_FALSE(refused->reason.empty());
    EXPECT_EQ(refused->constant_input, "");
}

// An input the importer must know as a constant is named, and binding its value imports the model.
TEST(OnnxImport, RefusalNamesTheInputToBindAsAConstant) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
    set_type(m.mutable_graph()->add_input(), "shape", onnx::TensorProto::INT64, {2});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {3, 2});
    add_node(m, "Reshape", {"x", "shape"}, {"y"});
    auto result = try_import_onnx_bytes(m.SerializeAsString(), "test.onnx");
    const auto* refused = std::get_if<OnnxUnsupported>(&result);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->op_type, "Reshape");
    EXPECT_EQ(refused->constant_input, "shape");
    OnnxImportOptions options;
    options.constant_inputs["shape"] = Tensor::from_values(DType::int64, {2}, {3, 2});
    result = try_import_onnx_bytes(m.SerializeAsString(), "test.onnx", options);
    ASSERT_TRUE(std::holds_alternative<ImportedModel>(result));
    const auto& model = std::get<ImportedModel>(result);
    EXPECT_EQ(model.unused_inputs, (std::vector<std::string>{"shape"}));  // listed once
    auto y = run(model, {{"x", Tensor::from_values(DType::float32, {2, 3}, {1, 2, 3, 4, 5, 6})}});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].shape(), (Shape{3, 2}));
}

// An input whose type declares no shape at all is refused with the reason (the ONNX checker's),
// never read as a scalar, also when a shape is given for it.
TEST(OnnxImport, InputWithoutAShapeIsRefused) {
    auto m = new_model(13);
    auto* x = m.mutable_graph()->add_input();
    x->set_name("x");
    x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3});
    add_node(m, "Relu", {"x"}, {"y"});
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(m); }, "Field 'shape' of 'type' is required but missing"));
    OnnxImportOptions options;
    options.input_shapes["x"] = {2, 3};
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(m, options); }, "Field 'shape' of 'type' is required"));
}

TEST(OnnxImport, UnsupportedDtypeIsNamed) {
    auto m = new_model();
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::STRING, {2});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::STRING, {2});
    add_node(m, "Identity", {"x"}, {"y"});
    try {
        import(m);
        FAIL() << "expected Error(input)";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find("dtype string"), std::string::npos) << e.what();
    }
}

TEST(OnnxImport, InitializerBecomesParameterAndGemmBecomesLinear) {
    // y = x · Bᵀ + C with transB = 1 and B, C initializers: one linear node.
    auto m = new_model();
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {1, 3});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {1, 2});
    add_float_initializer(m, "B", {2, 3}, {1, 2, 3, 4, 5, 6});
    add_float_initializer(m, "C", {2}, {0.5f, -0.5f});
    auto* gemm = add_node(m, "Gemm", {"x", "B", "C"}, {"y"});
    auto* a = gemm->add_attribute();
    a->set_name("transB");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
    auto model = import(m);
    int linear = 0;
    for (const auto& n : model.graph.nodes) linear += n.op_spelling() == "linear";
    EXPECT_EQ(linear, 1);
    ASSERT_EQ(model.parameters.size(), 2u);
    EXPECT_TRUE(model.parameters.count("y.weight"));
    EXPECT_TRUE(model.parameters.count("y.bias"));
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {1, 3}, {1, 1, 1})}});
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{6.5, 14.5}));
}

TEST(OnnxImport, GraphInputFeedingAConvWeightIsAParameterInput) {
    auto m = new_model();
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {1, 1, 3, 3});
    set_type(m.mutable_graph()->add_input(), "W", onnx::TensorProto::FLOAT, {1, 1, 2, 2});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {1, 1, 2, 2});
    add_node(m, "Conv", {"x", "W"}, {"y"});
    auto model = import(m);
    ASSERT_TRUE(model.parameter_inputs.count("W"));
    EXPECT_EQ(model.parameter_inputs.at("W"), std::vector<std::string>{"y.weight"});
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})},
                           {"W", Tensor::from_values(DType::float32, {1, 1, 2, 2}, {1, 0, 0, 1})}});
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{6, 8, 12, 14}));
    ParameterMap params;
    EXPECT_TRUE(raises(ErrorCode::input, [&] { bind_onnx_inputs(model, {{"x", Tensor::zeros(DType::float32, {1, 1, 3, 3})}}, params); }));
}

TEST(OnnxImport, ShapeGatherConcatReshapeChainIsFolded) {
    // y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): [2, 3, 4] → [2, 12].
    auto m = new_model();
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 12});
    add_int_initializer(m, "zero", {0});
    add_int_initializer(m, "minus_one", {-1});
    add_node(m, "Shape", {"x"}, {"s"});
    add_node(m, "Gather", {"s", "zero"}, {"batch"});
    add_node(m, "Concat", {"batch", "minus_one"}, {"target"})->add_attribute()->CopyFrom([] {
        onnx::AttributeProto a;
        a.set_name("axis");
        a.set_type(onnx::AttributeProto::INT);
        a.set_i(0);
        return a;
    }());
    add_node(m, "Reshape", {"x", "target"}, {"y"});
    auto model = import(m);
    // Only the input and one reshape remain; no parameter is left for the folded shape values.
    ASSERT_EQ(model.graph.nodes.size(), 2u);
    EXPECT_EQ(model.graph.nodes[1].op_spelling(), "reshape");
    EXPECT_EQ(std::get<std::vector<std::int64_t>>(model.graph.nodes[1].attrs.at("shape")),
              (std::vector<std::int64_t>{2, 12}));
    EXPECT_TRUE(model.parameters.empty());
}

TEST(OnnxImport, CastLikeCastsToTheTargetsTypeAtRunTimeAndWhenFolded) {
    // y = CastLike(x, like) with x float32 [3] and like an int64 initializer: a cast to int64
    // (truncation toward zero, as ONNX Cast); z0 = CastLike(k, x) of an int64 initializer k folds
    // to a float32 constant (only x's dtype is read).
    auto m = new_model(15);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {3});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::INT64, {3});
    set_type(m.mutable_graph()->add_output(), "z", onnx::TensorProto::FLOAT, {3});
    add_int_initializer(m, "like", {0});
    add_int_initializer(m, "k", {4, -5, 6});
    add_node(m, "CastLike", {"x", "like"}, {"y"});
    add_node(m, "CastLike", {"k", "x"}, {"z0"});
    add_node(m, "Add", {"z0", "x"}, {"z"});
    auto model = import(m);
    // Only y's cast runs: z0 is folded although its target_type x is a graph input.
    std::size_t casts = 0;
    for (const auto& node : model.graph.nodes) casts += node.op_spelling() == "cast";
    EXPECT_EQ(casts, 1u);
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {3}, {1.75, -2.5, 3.0})}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].dtype(), DType::int64);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{1, -2, 3}));
    EXPECT_EQ(out[1].dtype(), DType::float32);
    EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{5.75, -7.5, 9.0}));
}

TEST(OnnxImport, BadFilesAreClearErrors) {
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_onnx("/nonexistent/model.onnx"); }));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_onnx_bytes("this is not protobuf \xff\xff\xff", "bad.onnx"); }));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_onnx_bytes("", "empty.onnx"); }));
    // Truncated model.
    auto bytes = relu_model().SerializeAsString();
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import_onnx_bytes(std::string_view(bytes).substr(0, bytes.size() / 2), "cut.onnx"); }));
    // A model the checker rejects: a node reading an undefined value.
    auto m = relu_model();
    m.mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
    try {
        import(m);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find("test.onnx"), std::string::npos) << e.what();
    }
}

TEST(OnnxImport, LoadModelChoosesByExtension) {
    const fs::path dir = fs::temp_directory_path() / ("capsule_onnx_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    {
        std::ofstream out(dir / "relu.onnx", std::ios::binary);
        out << relu_model().SerializeAsString();
    }
    auto loaded = load_model(dir / "relu.onnx");
    EXPECT_EQ(loaded.graph.nodes.size(), 2u);
    fs::remove_all(dir);
}

// Real architectures exported by PyTorch (tests/data/models/<name>: model.onnx, input.npy,
// output.npy, meta.json with rtol/atol): import, plan under checked_cpu, run, compare. The
// detection head (Resize, TopK post-processing), the LSTM text classifier (int64 ids) and the
// uint8 image classifier are defined and exported by tests/data/models/export.py.
class OnnxModels : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxModels, MatchPyTorchReference) {
    const fs::path dir = fs::path(CAPSULE_SOURCE_DIR) / "tests" / "data" / "models" / GetParam();
    std::ifstream meta_file(dir / "meta.json");
    ASSERT_TRUE(meta_file) << dir;
    const auto meta = nlohmann::json::parse(meta_file);
    const double rtol = meta["tolerance"]["rtol"], atol = meta["tolerance"]["atol"];
    auto model = import_onnx(dir / "model.onnx");
    const Tensor input = read_npy(dir / "input.npy");
    const Tensor expected = read_npy(dir / "output.npy");
    auto out = run(model, {{meta["input"]["name"].get<std::string>(), input}});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].shape(), expected.shape());
    double max_rel = 0, max_abs = 0, scale = 0;
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < expected.numel(); ++i) {
        const double a = out[0].at(i), e = expected.at(i), err = std::fabs(a - e);
        max_abs = std::max(max_abs, err);
        scale = std::max(scale, std::fabs(e));
        if (e != 0) max_rel = std::max(max_rel, err / std::fabs(e));
        bad += !(err <= atol + rtol * std::fabs(e));
    }
    // The meta tolerance (allclose) and, because the atol can dwarf small outputs (MobileNetV2
    // with random weights outputs ~1e-9), the error relative to the output's scale: ≤ 1e-4.
    std::cout << GetParam() << ": max abs error " << max_abs << ", max |expected| " << scale
              << ", max abs error / max |expected| " << max_abs / scale
              << ", max elementwise relative error " << max_rel << "\n";
    EXPECT_EQ(bad, 0) << "elements outside rtol " << rtol << " atol " << atol;
    EXPECT_LE(max_abs, 1e-4 * scale) << "error relative to the output scale";
}

INSTANTIATE_TEST_SUITE_P(Real, OnnxModels, ::testing::Values("mobilenet_v2", "squeezenet1_1", "detection_head",
                                                          "lstm_text_classifier", "uint8_classifier"));

namespace {
void add_float_vector(onnx::GraphProto& g, const std::string& name, std::vector<std::int64_t> dims,
                      const std::vector<float>& values) {
    auto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (auto v : values) t->add_float_data(v);
}
}  // namespace

// A uint8-input image classifier, as deployed models take camera frames: an NHWC uint8 image is
// Cast to float, scaled to [0, 1], normalised with ImageNet's mean and std (torchvision's
// Normalize) and transposed to NCHW in front of squeezenet1_1. Its output must be the float
// model's on the same preprocessing done here in float32, in the same order (that model matches
// PyTorch's recorded output, MatchPyTorchReference), bit for bit: the same kernels run.
TEST(OnnxModels, Uint8ImageClassifierMatchesItsFloatModel) {
    const fs::path file = fs::path(CAPSULE_SOURCE_DIR) / "tests" / "data" / "models" / "squeezenet1_1" / "model.onnx";
    onnx::ModelProto m;
    std::ifstream in(file, std::ios::binary);
    ASSERT_TRUE(m.ParseFromIstream(&in)) << file;
    onnx::GraphProto& g = *m.mutable_graph();
    ASSERT_EQ(g.input(0).name(), "input");
    g.mutable_input(0)->Clear();
    set_type(g.mutable_input(0), "image", onnx::TensorProto::UINT8, {2, 224, 224, 3});
    const std::vector<float> mean{0.485f, 0.456f, 0.406f}, std_dev{0.229f, 0.224f, 0.225f};
    add_float_vector(g, "scale", {}, {255.0f});
    add_float_vector(g, "mean", {3}, mean);
    add_float_vector(g, "std", {3}, std_dev);
    onnx::GraphProto pre;
    auto node = [&](const std::string& op, std::vector<std::string> ins, const std::string& out) {
        auto* n = pre.add_node();
        n->set_op_type(op);
        n->set_name(out + "_node");
        for (auto& i : ins) n->add_input(i);
        n->add_output(out);
        return n;
    };
    auto* cast = node("Cast", {"image"}, "pixels");
    auto* to = cast->add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::FLOAT);
    node("Div", {"pixels", "scale"}, "unit");
    node("Sub", {"unit", "mean"}, "centred");
    node("Div", {"centred", "std"}, "normalised");
    auto* perm = node("Transpose", {"normalised"}, "input")->add_attribute();
    perm->set_name("perm");
    perm->set_type(onnx::AttributeProto::INTS);
    for (auto p : {0, 3, 1, 2}) perm->add_ints(p);
    for (const auto& n : g.node()) *pre.add_node() = n;  // the classifier after the preprocessing
    g.mutable_node()->Swap(pre.mutable_node());
    const auto uint8_model = import(m);
    EXPECT_EQ(uint8_model.graph.nodes[0].dtype, DType::uint8);

    const std::int64_t n = 2 * 224 * 224 * 3;
    Tensor image = Tensor::zeros(DType::uint8, {2, 224, 224, 3});
    Tensor nchw = Tensor::zeros(DType::float32, {2, 3, 224, 224});
    for (std::int64_t i = 0; i < n; ++i) {
        const auto u = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
        image.values<std::uint8_t>()[i] = u;
        const std::int64_t c = i % 3, x = (i / 3) % 224, y = (i / (3 * 224)) % 224, b = i / (3 * 224 * 224);
        nchw.values<float>()[((b * 3 + c) * 224 + y) * 224 + x] = (static_cast<float>(u) / 255.0f - mean[c]) / std_dev[c];
    }
    const Tensor got = run(uint8_model, {{"image", image}})[0];
    const Tensor want = run(import_onnx(file), {{"input", nchw}})[0];
    ASSERT_EQ(got.shape(), (Shape{2, 1000}));
    EXPECT_TRUE(got.bitwise_equal(want));
}

namespace {

/// numpy.einsum by brute force, the independent check of the Einsum converter: every assignment
/// of the labels' indices, multiplying the operands' entries into the output entry. `output` is
/// explicit here; operands are row-major float64.
std::vector<double> brute_einsum(const std::vector<std::string>& terms, const std::string& output,
                                 const std::vector<Tensor>& operands) {
    std::map<char, std::int64_t> size;
    for (std::size_t t = 0; t < terms.size(); ++t)
        for (std::size_t k = 0; k < terms[t].size(); ++k) size[terms[t][k]] = operands[t].shape()[k];
    std::vector<char> labels;
    for (const auto& [label, _] : size) labels.push_back(label);
    std::int64_t out_count = 1;
    for (char ch : output) out_count *= size[ch];
    std::vector<double> out(static_cast<std::size_t>(out_count), 0.0);
    std::map<char, std::int64_t> at;
    for (char ch : labels) at[ch] = 0;
    auto offset = [&](const std::string& term, const Shape& shape) {
        std::int64_t o = 0;
        for (std::size_t k = 0; k < term.size(); ++k) o = o * shape[k] + at[term[k]];
        return o;
    };
    while (true) {
        double product = 1;
        for (std::size_t t = 0; t < terms.size(); ++t)
            product *= operands[t].to_doubles()[static_cast<std::size_t>(offset(terms[t], operands[t].shape()))];
        Shape out_shape;
        for (char ch : output) out_shape.push_back(size[ch]);
        out[static_cast<std::size_t>(offset(output, out_shape))] += product;
        std::size_t k = labels.size();
        while (k > 0 && ++at[labels[k - 1]] == size[labels[k - 1]]) at[labels[--k]] = 0;
        if (k == 0) break;
    }
    return out;
}

Tensor counting(const Shape& shape, double start) {
    std::vector<double> v(static_cast<std::size_t>(checked_element_count(shape)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + 0.25 * static_cast<double>(i % 7) - 0.1 * static_cast<double>(i);
    return Tensor::from_values(DType::float64, shape, v);
}

/// An Einsum model of `equation` over float64 inputs of `shapes` with output shape `out`.
onnx::ModelProto einsum_model(const std::string& equation, const std::vector<Shape>& shapes, const Shape& out) {
    auto m = new_model(12);
    std::vector<std::string> names;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
        names.push_back("x" + std::to_string(k));
        set_type(m.mutable_graph()->add_input(), names.back(), onnx::TensorProto::DOUBLE, shapes[k]);
    }
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::DOUBLE, out);
    auto* n = add_node(m, "Einsum", names, {"y"});
    auto* a = n->add_attribute();
    a->set_name("equation");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(equation);
    return m;
}

}  // namespace

TEST(OnnxImport, EinsumMatchesABruteForceEvaluation) {
    struct Case {
        std::string equation;             // as the model spells it
        std::vector<std::string> terms;   // for brute_einsum: ellipses and implicit output spelled out
        std::string output;
        std::vector<Shape> shapes;
        Shape out;
    };
    const Case cases[] = {
        {"ij,jk->ik", {"ij", "jk"}, "ik", {{2, 3}, {3, 4}}, {2, 4}},
        {"bij, bjk -> bik", {"bij", "bjk"}, "bik", {{2, 2, 3}, {2, 3, 4}}, {2, 2, 4}},
        {"i,i", {"i", "i"}, "", {{5}, {5}}, {}},
        {"ij->i", {"ij"}, "i", {{3, 4}}, {3}},
        {"ji", {"ji"}, "ij", {{3, 4}}, {4, 3}},  // implicit output: letters in order, a transpose
        {"ij,jk", {"ij", "jk"}, "ik", {{2, 3}, {3, 2}}, {2, 2}},
        {"ii->i", {"ii"}, "i", {{4, 4}}, {4}},
        {"...ii->...i", {"aii"}, "ai", {{3, 4, 4}}, {3, 4}},
        {"bii,bij,jk->bk", {"bii", "bij", "jk"}, "bk", {{2, 3, 3}, {2, 3, 4}, {4, 2}}, {2, 2}},
        {"ij,jk,kl->il", {"ij", "jk", "kl"}, "il", {{2, 3}, {3, 4}, {4, 2}}, {2, 2}},
        {"ab,cd->cabd", {"ab", "cd"}, "cabd", {{2, 3}, {2, 2}}, {2, 2, 3, 2}},
        {"ijk,ikl->jl", {"ijk", "ikl"}, "jl", {{2, 3, 2}, {2, 2, 3}}, {3, 3}},
        {"i,j->", {"i", "j"}, "", {{3}, {2}}, {}},
        {"...j,j...->...", {"abj", "jab"}, "ab", {{2, 3, 4}, {4, 2, 3}}, {2, 3}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.equation);
        std::map<std::string, Tensor> inputs;
        std::vector<Tensor> operands;
        for (std::size_t k = 0; k < c.shapes.size(); ++k) {
            operands.push_back(counting(c.shapes[k], 1.0 + static_cast<double>(k)));
            inputs.emplace("x" + std::to_string(k), operands.back());
        }
        auto out = run(import(einsum_model(c.equation, c.shapes, c.out)), inputs);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].shape(), c.out);
        const auto expected = brute_einsum(c.terms, c.output, operands);
        const auto got = out[0].to_doubles();
        ASSERT_EQ(got.size(), expected.size());
        for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-12 * (1 + std::abs(expected[i]))) << i;
    }
}

TEST(OnnxImport, EinsumRefusesWhatItCannotComputeWithAReason) {
    // Each reason is the converter's or, where ONNX's own shape inference refuses first, ONNX's.
    struct Case { std::string equation; std::vector<Shape> shapes; Shape out; std::string reason; };
    const Case cases[] = {
        {"ij,jk->ik", {{2, 3}, {4, 2}}, {2, 2}, "label 'j' has sizes 3 and 4"},
        {"ij->ii", {{2, 2}}, {2, 2}, "output label 'i' repeats"},
        {"ij->k", {{2, 2}}, {2}, "output label 'k' is in no operand"},
        {"ijk->i", {{2, 2}}, {2}, "operand 0 has rank 2 but 'ijk' labels 3 axes"},
        {"i,i,i->i", {{2}, {2}}, {2}, "has 3 operands, the node 2"},
        {"i_->i", {{2, 2}}, {2}, "label '_'"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.equation);
        try {
            import(einsum_model(c.equation, c.shapes, c.out));
            FAIL() << "imported";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(c.reason), std::string::npos) << e.what();
        }
    }
}

TEST(OnnxImport, OneHotCountsNegativeIndicesFromTheEndAndLeavesOutOfRangeRowsOff) {
    // indices [2, 3] int64, depth 4, values [off, on] = [-1, 5]; axis 1 and -1 (the default).
    const std::vector<double> idx = {0, 3, -1, 4, -4, -5};
    for (const std::int64_t axis : {1, -1}) {
        SCOPED_TRACE(axis);
        auto m = new_model(11);
        set_type(m.mutable_graph()->add_input(), "i", onnx::TensorProto::INT64, {2, 3});
        const Shape out_shape = axis == 1 ? Shape{2, 4, 3} : Shape{2, 3, 4};
        set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, out_shape);
        add_float_initializer(m, "depth", {}, {4.f});
        add_float_initializer(m, "values", {2}, {-1.f, 5.f});
        auto* n = add_node(m, "OneHot", {"i", "depth", "values"}, {"y"});
        if (axis != -1) {
            auto* a = n->add_attribute();
            a->set_name("axis");
            a->set_type(onnx::AttributeProto::INT);
            a->set_i(axis);
        }
        auto out = run(import(m), {{"i", Tensor::from_values(DType::int64, {2, 3}, idx)}});
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].dtype(), DType::float32);
        EXPECT_EQ(out[0].shape(), out_shape);
        // Hand values: index → class (0 → 0, 3 → 3, -1 → 3, 4 → none, -4 → 0, -5 → none).
        const std::int64_t cls[] = {0, 3, 3, -9, 0, -9};
        std::vector<double> expected(24);
        for (std::int64_t r = 0; r < 2; ++r)
            for (std::int64_t c = 0; c < 3; ++c)
                for (std::int64_t k = 0; k < 4; ++k) {
                    const auto at = axis == 1 ? (r * 4 + k) * 3 + c : (r * 3 + c) * 4 + k;
                    expected[static_cast<std::size_t>(at)] = cls[r * 3 + c] == k ? 5 : -1;
                }
        EXPECT_EQ(out[0].to_doubles(), expected);
    }
}

namespace {

void set_attr(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}
void set_attr(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
}

/// A one-node model `op`(x) → y over float32 x of `in` and y of `out`.
onnx::ModelProto unary_model(const std::string& op, const Shape& in, const Shape& out, int out_type = onnx::TensorProto::FLOAT) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, in);
    set_type(m.mutable_graph()->add_output(), "y", out_type, out);
    add_node(m, op, {"x"}, {"y"});
    return m;
}

}  // namespace

TEST(OnnxImport, IsNanIsTrueForNanOnly) {
    auto out = run(import(unary_model("IsNaN", {4}, {4}, onnx::TensorProto::BOOL)),
                   {{"x", Tensor::from_values(DType::float32, {4}, {1, NAN, INFINITY, -0.0})}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].dtype(), DType::boolean);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 1, 0, 0}));
}

TEST(OnnxImport, LrnSumsTheSquaresOfTheChannelWindow) {
    // x [1, 5, 2, 1], size 4: channels c-1 .. c+2 (floor(3/2) before, ceil(3/2) after), clipped.
    const float alpha = 0.5f, beta = 0.75f, bias = 2.0f;
    auto m = unary_model("LRN", {1, 5, 2, 1}, {1, 5, 2, 1});
    auto* n = m.mutable_graph()->mutable_node(0);
    set_attr(n, "size", std::int64_t{4});
    set_attr(n, "alpha", alpha);
    set_attr(n, "beta", beta);
    set_attr(n, "bias", bias);
    const std::vector<double> x = {1, -2, 3, 0.5, -1, 4, 2, -3, 0, 1.5};
    auto out = run(import(m), {{"x", Tensor::from_values(DType::float32, {1, 5, 2, 1}, x)}});
    ASSERT_EQ(out.size(), 1u);
    const auto got = out[0].to_doubles();
    for (int c = 0; c < 5; ++c)
        for (int s = 0; s < 2; ++s) {
            double sum = 0;
            for (int i = std::max(0, c - 1); i <= std::min(4, c + 2); ++i) sum += x[i * 2 + s] * x[i * 2 + s];
            const double expected = x[c * 2 + s] / std::pow(bias + alpha / 4 * sum, beta);
            EXPECT_NEAR(got[c * 2 + s], expected, 1e-6 * std::abs(expected) + 1e-7) << c << "," << s;
        }
}

TEST(OnnxImport, MeanVarianceNormalizationStaysAccurateForLargeMeans) {
    // x [2, 1, 2, 2] around 10000 in float32: E[x²] − E[x]² would lose every digit of the
    // variance (x² ≈ 1e8, whose float32 spacing is 8); mean((x − mean)²) keeps them.
    std::vector<double> x;
    for (int i = 0; i < 8; ++i) x.push_back(static_cast<double>(static_cast<float>(10000.0 + 0.125 * i * i)));
    auto out = run(import(unary_model("MeanVarianceNormalization", {2, 1, 2, 2}, {2, 1, 2, 2})),
                   {{"x", Tensor::from_values(DType::float32, {2, 1, 2, 2}, x)}});
    ASSERT_EQ(out.size(), 1u);
    double mean = 0, var = 0;  // over axes 0, 2, 3: all 8 values (one channel)
    for (double v : x) mean += v / 8;
    for (double v : x) var += (v - mean) * (v - mean) / 8;
    const auto got = out[0].to_doubles();
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], (x[i] - mean) / (std::sqrt(var) + 1e-9), 2e-4) << i;
}

TEST(OnnxImport, ConstantOfShapeFoldsToAConstant) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3});
    add_int_initializer(m, "shape", {2, 3});
    auto* n = add_node(m, "ConstantOfShape", {"shape"}, {"filled"});
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_dims(1);
    a->mutable_t()->add_float_data(7.5f);
    add_node(m, "Add", {"x", "filled"}, {"y"});
    auto model = import(m);
    for (const auto& node : model.graph.nodes) EXPECT_NE(node.op_spelling(), "constant_of_shape");
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {2, 3}, {0, 1, 2, 3, 4, 5})}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{7.5, 8.5, 9.5, 10.5, 11.5, 12.5}));
}

TEST(OnnxImport, ReverseSequenceReversesEachBatchEntrysPrefix) {
    // x [T=4, B=2, 2] (time_axis 0) with lengths [4, 2]; then the same data as [B, T, 2].
    for (const bool time_first : {true, false}) {
        SCOPED_TRACE(time_first);
        const Shape shape = time_first ? Shape{4, 2, 2} : Shape{2, 4, 2};
        auto m = new_model(13);
        set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, shape);
        set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, shape);
        add_int_initializer(m, "lens", {4, 2});
        auto* n = add_node(m, "ReverseSequence", {"x", "lens"}, {"y"});
        set_attr(n, "time_axis", std::int64_t{time_first ? 0 : 1});
        set_attr(n, "batch_axis", std::int64_t{time_first ? 1 : 0});
        std::vector<double> x(16);
        auto at = [&](int t, int b, int f) { return time_first ? (t * 2 + b) * 2 + f : (b * 4 + t) * 2 + f; };
        for (int t = 0; t < 4; ++t)
            for (int b = 0; b < 2; ++b)
                for (int f = 0; f < 2; ++f) x[at(t, b, f)] = 100 * b + 10 * t + f;
        auto out = run(import(m), {{"x", Tensor::from_values(DType::float32, shape, x)}});
        ASSERT_EQ(out.size(), 1u);
        const int lens[] = {4, 2};
        std::vector<double> expected(16);
        for (int t = 0; t < 4; ++t)
            for (int b = 0; b < 2; ++b)
                for (int f = 0; f < 2; ++f) expected[at(t, b, f)] = 100 * b + 10 * (t < lens[b] ? lens[b] - 1 - t : t) + f;
        EXPECT_EQ(out[0].to_doubles(), expected);
    }
}

namespace {

/// A model of `op` over float32 x [shape] and the constant int64/bool initializers `constants`
/// (inputs 1, 2, ... in order), with extra float32 inputs `floats`.
onnx::ModelProto constant_input_model(const std::string& op, const Shape& shape, const std::vector<std::pair<std::string, Tensor>>& constants,
                                      const Shape& out) {
    auto m = new_model(16);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, shape);
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, out);
    std::vector<std::string> inputs{"x"};
    for (const auto& [name, t] : constants) {
        if (t.dtype() == DType::float32) {
            set_type(m.mutable_graph()->add_input(), name, onnx::TensorProto::FLOAT, t.shape());
        } else {
            auto* init = m.mutable_graph()->add_initializer();
            init->set_name(name);
            for (auto d : t.shape()) init->add_dims(d);
            init->set_data_type(t.dtype() == DType::boolean ? onnx::TensorProto::BOOL : onnx::TensorProto::INT64);
            for (double v : t.to_doubles()) {
                if (t.dtype() == DType::boolean) init->add_int32_data(v != 0);
                else init->add_int64_data(static_cast<std::int64_t>(v));
            }
        }
        inputs.push_back(name);
    }
    add_node(m, op, inputs, {"y"});
    return m;
}

std::vector<double> iota_values(std::size_t n) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
    return v;
}

}  // namespace

TEST(OnnxImport, GatherNdPicksTheAddressedSlicesWithBatchDims) {
    // data [2, 3, 2] = 0..11; batch_dims 1, indices [2, 2, 1]: batch 0 rows [2, -3], batch 1 rows [1, 1].
    auto m = constant_input_model("GatherND", {2, 3, 2}, {{"i", Tensor::from_values(DType::int64, {2, 2, 1}, {2, -3, 1, 1})}}, {2, 2, 2});
    auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
    a->set_name("batch_dims");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
    auto out = run(import(m), {{"x", Tensor::from_values(DType::float32, {2, 3, 2}, iota_values(12))}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{2, 2, 2}));
    // batch 0: data[0][2] = {4, 5}, data[0][0] = {0, 1}; batch 1: data[1][1] = {8, 9} twice.
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{4, 5, 0, 1, 8, 9, 8, 9}));
    // An index outside its axis is refused at import, naming it.
    auto bad = constant_input_model("GatherND", {2, 3, 2}, {{"i", Tensor::from_values(DType::int64, {1, 2}, {0, 3})}}, {1, 2});
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(bad); }, "GatherND index 3 outside [-3, 3)"));
}

TEST(OnnxImport, ScatterNdWritesOrReducesEachAddressedSlice) {
    // data [3, 2] = 0..5, indices [[2], [0], [2]], updates [[10, 20], [30, 40], [1, 2]].
    const std::vector<double> updates = {10, 20, 30, 40, 1, 2};
    struct Case { std::string reduction; std::vector<double> expected; };
    const Case cases[] = {
        {"add", {0 + 30, 1 + 40, 2, 3, 4 + 10 + 1, 5 + 20 + 2}},
        {"mul", {0 * 30, 1 * 40, 2, 3, 4 * 10 * 1, 5 * 20 * 2}},
        {"max", {30, 40, 2, 3, 10, 20}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.reduction);
        auto m = constant_input_model("ScatterND", {3, 2},
                                      {{"i", Tensor::from_values(DType::int64, {3, 1}, {2, 0, 2})},
                                       {"u", Tensor::from_values(DType::float32, {3, 2}, updates)}},
                                      {3, 2});
        auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
        a->set_name("reduction");
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(c.reduction);
        auto out = run(import(m), {{"x", Tensor::from_values(DType::float32, {3, 2}, iota_values(6))},
                                   {"u", Tensor::from_values(DType::float32, {3, 2}, updates)}});
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].to_doubles(), c.expected);
    }
}

TEST(OnnxImport, CompressKeepsTheTrueEntriesAlongTheAxisOrFlattened) {
    // x [2, 3] = 0..5; condition [1, 0, 1] along axis 1; [0, 1, 1, 0] on the flattened input
    // (shorter than its 6 entries: the rest is dropped).
    auto along = constant_input_model("Compress", {2, 3}, {{"c", Tensor::from_values(DType::boolean, {3}, {1, 0, 1})}}, {2, 2});
    auto* a = along.mutable_graph()->mutable_node(0)->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(-1);
    auto out = run(import(along), {{"x", Tensor::from_values(DType::float32, {2, 3}, iota_values(6))}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 2, 3, 5}));
    auto flat = constant_input_model("Compress", {2, 3}, {{"c", Tensor::from_values(DType::boolean, {4}, {0, 1, 1, 0})}}, {2});
    out = run(import(flat), {{"x", Tensor::from_values(DType::float32, {2, 3}, iota_values(6))}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{1, 2}));
}

// A constant the model would fold to billions of elements is refused with its shape, not left to
// exhaust the memory (the ONNX model holding it is a few bytes).
TEST(OnnxImport, HugeFoldedConstantIsRefusedWithItsShape) {
    for (const auto& dims : {std::vector<std::int64_t>{1 << 20, 1 << 22}, std::vector<std::int64_t>{1 << 13, 1 << 14}}) {
        auto m = new_model(13);
        set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, dims);
        add_int_initializer(m, "shape", dims);
        add_node(m, "ConstantOfShape", {"shape"}, {"y"});
        EXPECT_TRUE(raises(ErrorCode::input, [&] { import(m); },
                           "constant folding would make a value of shape " + to_string(Shape(dims))));
    }
}

TEST(OnnxImport, RoundGoesHalfToEvenAndKeepsNonFiniteValues) {
    const double inf = INFINITY;
    const std::vector<double> x = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.4, -0.7, 3.7, 8388609.0, NAN, inf, -inf};
    auto out = run(import(unary_model("Round", {13}, {13})), {{"x", Tensor::from_values(DType::float32, {13}, x)}});
    ASSERT_EQ(out.size(), 1u);
    const auto got = out[0].to_doubles();
    // numpy.round's values (half to even); 2^23 + 1 is already an integer.
    const std::vector<double> expected = {-2, -2, -0.0, 0, 2, 2, -0.0, -1, 4, 8388609.0};
    for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(got[i], expected[i]) << x[i];
        EXPECT_EQ(std::signbit(got[i]), std::signbit(expected[i])) << "the sign of " << x[i] << "'s rounding";
    }
    EXPECT_TRUE(std::isnan(got[10]));
    EXPECT_EQ(got[11], inf);
    EXPECT_EQ(got[12], -inf);
}

TEST(OnnxImport, PReluBeforeOpset7TakesAOneDimensionalSlopePerChannel) {
    // x [2, 3, 2], slope [3] (opset 6: one slope per channel, axis 1; from opset 7 it would
    // broadcast against the last axis and not fit).
    auto m = new_model(6);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 2});
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 2});
    add_float_initializer(m, "slope", {3}, {0.5f, -2.0f, 0.25f});
    add_node(m, "PRelu", {"x", "slope"}, {"y"});
    std::vector<double> x(12);
    for (int i = 0; i < 12; ++i) x[i] = (i % 2 ? 1.0 : -1.0) * (i + 1);
    auto out = run(import(m), {{"x", Tensor::from_values(DType::float32, {2, 3, 2}, x)}});
    ASSERT_EQ(out.size(), 1u);
    const double slope[] = {0.5, -2.0, 0.25};
    const auto got = out[0].to_doubles();
    for (int i = 0; i < 12; ++i) EXPECT_EQ(got[i], x[i] >= 0 ? x[i] : slope[(i / 2) % 3] * x[i]) << i;
}

TEST(OnnxImport, PowWithInt64OperandsComputesInDoubleAsOnnxRuntime) {
    // static_cast<T>(std::pow(double(x), double(y))), T the base's dtype.
    auto model = [](int x_type, int y_type, int out_type) {
        auto m = new_model(15);
        set_type(m.mutable_graph()->add_input(), "x", x_type, {4});
        set_type(m.mutable_graph()->add_input(), "y", y_type, {4});
        set_type(m.mutable_graph()->add_output(), "z", out_type, {4});
        add_node(m, "Pow", {"x", "y"}, {"z"});
        return import(m);
    };
    auto int64s = [](std::vector<std::int64_t> v) {
        Tensor t = Tensor::zeros(DType::int64, {4});
        std::copy(v.begin(), v.end(), static_cast<std::int64_t*>(t.data()));
        return t;
    };
    const auto I64 = onnx::TensorProto::INT64, F32 = onnx::TensorProto::FLOAT;
    // int64 ^ int64: exact integers.
    auto out = run(model(I64, I64, I64), {{"x", int64s({2, 3, -2, 7})}, {"y", int64s({10, 3, 3, 0})}});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].dtype(), DType::int64);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{1024, 27, -8, 1}));
    // int64 ^ float: truncated toward zero (7^0.5 = 2.65 -> 2, 10^-1 = 0.1 -> 0).
    out = run(model(I64, F32, I64), {{"x", int64s({7, 10, 2, 9})}, {"y", Tensor::from_values(DType::float32, {4}, {0.5, -1, 3, 0.5})}});
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{2, 0, 8, 3}));
    // float32 ^ int64: the exponent 2^24 + 1 is odd in double (float32 would round it to 2^24).
    out = run(model(F32, I64, F32), {{"x", Tensor::from_values(DType::float32, {4}, {-1, 2, 0.5, 3})},
                                     {"y", int64s({(1 << 24) + 1, 3, -2, 0})}});
    ASSERT_EQ(out[0].dtype(), DType::float32);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{-1, 8, 4, 1}));
    // A result with no int64 value (3^40 > 2^63) fails the run, naming it.
    EXPECT_THROW(run(model(I64, I64, I64), {{"x", int64s({3, 1, 1, 1})}, {"y", int64s({40, 1, 1, 1})}}), Error);
}

// ---- ABI 1.1 dtypes through the importer ---------------------------------------------------

namespace {
/// x (elem, [n]) and a constant bound b (elem, []) -> op -> y; the bound as a typed initializer.
onnx::ModelProto clip_model(int elem, std::int64_t n, std::int64_t max_bits) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", elem, {n});
    set_type(m.mutable_graph()->add_output(), "y", elem, {n});
    auto* b = m.mutable_graph()->add_initializer();
    b->set_name("hi");
    b->set_data_type(elem);
    if (elem == onnx::TensorProto::INT64) b->add_int64_data(max_bits);
    else b->add_int32_data(static_cast<std::int32_t>(max_bits));
    add_node(m, "Clip", {"x", "", "hi"}, {"y"});
    return m;
}
}  // namespace

// Integer Clip bounds are read exactly: 2^53 + 1 survives (through a double it would round to 2^53).
TEST(OnnxImport, IntegerClipBoundsAreExact) {
    const std::int64_t big = (std::int64_t{1} << 53) + 1;
    Tensor x = Tensor::zeros(DType::int64, {3});
    x.values<std::int64_t>()[0] = big;
    x.values<std::int64_t>()[1] = big + 2;
    x.values<std::int64_t>()[2] = 5;
    const auto y = run(import(clip_model(onnx::TensorProto::INT64, 3, big)), {{"x", x}})[0];
    EXPECT_EQ(std::vector<std::int64_t>(y.values<std::int64_t>().begin(), y.values<std::int64_t>().end()),
              (std::vector<std::int64_t>{big, big, 5}));
    // int8: 100 clipped to the bound 7, -128 kept.
    const auto z = run(import(clip_model(onnx::TensorProto::INT8, 2, 7)),
                       {{"x", Tensor::from_values(DType::int8, {2}, {100, -128})}})[0];
    EXPECT_EQ(z.dtype(), DType::int8);
    EXPECT_EQ(z.to_doubles(), (std::vector<double>{7, -128}));
}

// A typed field holding a value outside its element type's range is a malformed model, not a
// wrapped value (int8 300 would read as 44).
TEST(OnnxImport, NarrowTypedFieldsOutOfRangeAreRefused) {
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(clip_model(onnx::TensorProto::INT8, 2, 300)); },
                       "tensor 'hi': value 0 (300) is outside its element type's range"));
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(clip_model(onnx::TensorProto::UINT8, 2, -1)); },
                       "tensor 'hi': value 0 (-1) is outside its element type's range"));
}

// Neg of an integer is `neg` (modulo 2^bits); Mod with fmod = 0 stays refused on float16 as on
// every float dtype (invalid ONNX).
TEST(OnnxImport, IntegerNegAndFloat16ModRules) {
    auto neg = new_model(13);
    set_type(neg.mutable_graph()->add_input(), "x", onnx::TensorProto::INT32, {3});
    set_type(neg.mutable_graph()->add_output(), "y", onnx::TensorProto::INT32, {3});
    add_node(neg, "Neg", {"x"}, {"y"});
    const auto y = run(import(neg), {{"x", Tensor::from_values(DType::int32, {3}, {5, -7, -2147483648.0})}})[0];
    EXPECT_EQ(y.to_doubles(), (std::vector<double>{-5, 7, -2147483648.0}));  // -INT_MIN wraps to INT_MIN

    auto mod = new_model(13);
    set_type(mod.mutable_graph()->add_input(), "a", onnx::TensorProto::FLOAT16, {2});
    set_type(mod.mutable_graph()->add_input(), "b", onnx::TensorProto::FLOAT16, {2});
    set_type(mod.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT16, {2});
    add_node(mod, "Mod", {"a", "b"}, {"y"});
    EXPECT_TRUE(raises(ErrorCode::input, [&] { import(mod); }, "Mod on floating-point inputs needs fmod = 1"));
}

// Decompositions into several float ops (InstanceNormalization: reduce_mean, sub, mul, reduce_mean,
// add, sqrt, div, mul, add) compute float16 / bfloat16 operands in float32 and round once, as a
// fused kernel does: in float16 step by step, x − mean of values spread by 300 squared past
// float16's range and every output was 0. Expected: the definition in double, rounded once.
TEST(OnnxImport, HalfPrecisionDecompositionsComputeInFloat32AndRoundOnce) {
    auto values = [](std::size_t n, double scale, double offset) {
        std::vector<double> v;
        for (std::size_t i = 0; i < n; ++i) v.push_back(offset + scale * std::sin(1.7 * double(i) + 0.3));
        return v;
    };
    // Within one unit in the last place of the half type (float32 intermediates may sit on the
    // other side of a rounding boundary than double ones).
    auto expect_near_rounded = [](const Tensor& got, const std::vector<double>& want, DType dtype) {
        ASSERT_EQ(got.dtype(), dtype);
        const auto g = got.to_doubles();
        ASSERT_EQ(g.size(), want.size());
        const double ulp = dtype == DType::float16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
        for (std::size_t i = 0; i < g.size(); ++i)
            EXPECT_NEAR(g[i], want[i], ulp * std::max(std::fabs(want[i]), 1e-3)) << "element " << i;
    };
    for (const auto& [elem, dtype] : {std::pair{onnx::TensorProto::FLOAT16, DType::float16},
                                      std::pair{onnx::TensorProto::BFLOAT16, DType::bfloat16}}) {
        SCOPED_TRACE(to_string(dtype));
        // InstanceNormalization of x [1, 2, 4, 4], spread 300 around 0 (float16 overflows x²).
        auto inst = new_model(13);
        set_type(inst.mutable_graph()->add_input(), "x", elem, {1, 2, 4, 4});
        set_type(inst.mutable_graph()->add_input(), "s", elem, {2});
        set_type(inst.mutable_graph()->add_input(), "b", elem, {2});
        set_type(inst.mutable_graph()->add_output(), "y", elem, {1, 2, 4, 4});
        add_node(inst, "InstanceNormalization", {"x", "s", "b"}, {"y"});
        const Tensor x = Tensor::from_values(dtype, {1, 2, 4, 4}, values(32, 300, 0));
        const Tensor s = Tensor::from_values(dtype, {2}, {1.5, -0.5}), b = Tensor::from_values(dtype, {2}, {0.25, 2});
        const auto xv = x.to_doubles(), sv = s.to_doubles(), bv = b.to_doubles();
        std::vector<double> want;
        for (int c = 0; c < 2; ++c) {
            double mean = 0, var = 0;
            for (int i = 0; i < 16; ++i) mean += xv[c * 16 + i] / 16;
            for (int i = 0; i < 16; ++i) var += (xv[c * 16 + i] - mean) * (xv[c * 16 + i] - mean) / 16;
            for (int i = 0; i < 16; ++i) want.push_back((xv[c * 16 + i] - mean) / std::sqrt(var + 1e-5) * sv[c] + bv[c]);
        }
        expect_near_rounded(run(import(inst), {{"x", x}, {"s", s}, {"b", b}})[0], want, dtype);

        // MeanVarianceNormalization of x [2, 3, 2, 2] at 100 ± 1 (bfloat16's mean loses the
        // spread) over axes (0, 2, 3): (x − mean) / (sqrt(var) + 1e-9).
        auto mvn = new_model(13);
        set_type(mvn.mutable_graph()->add_input(), "x", elem, {2, 3, 2, 2});
        set_type(mvn.mutable_graph()->add_output(), "y", elem, {2, 3, 2, 2});
        add_node(mvn, "MeanVarianceNormalization", {"x"}, {"y"});
        const Tensor m = Tensor::from_values(dtype, {2, 3, 2, 2}, values(24, 1, 100));
        const auto mv = m.to_doubles();
        std::vector<double> mean(3, 0), var(3, 0), want_mvn(24);
        for (int i = 0; i < 24; ++i) mean[i / 4 % 3] += mv[i] / 8;
        for (int i = 0; i < 24; ++i) var[i / 4 % 3] += (mv[i] - mean[i / 4 % 3]) * (mv[i] - mean[i / 4 % 3]) / 8;
        for (int i = 0; i < 24; ++i) want_mvn[i] = (mv[i] - mean[i / 4 % 3]) / (std::sqrt(var[i / 4 % 3]) + 1e-9);
        expect_near_rounded(run(import(mvn), {{"x", m}})[0], want_mvn, dtype);

        // Gemm with alpha 0.5 and a run-time C: 0.5 · A·B + C in one rounding.
        auto gemm = new_model(13);
        set_type(gemm.mutable_graph()->add_input(), "a", elem, {2, 3});
        set_type(gemm.mutable_graph()->add_input(), "bm", elem, {3, 2});
        set_type(gemm.mutable_graph()->add_input(), "c", elem, {2, 2});
        set_type(gemm.mutable_graph()->add_output(), "y", elem, {2, 2});
        auto* alpha = add_node(gemm, "Gemm", {"a", "bm", "c"}, {"y"})->add_attribute();
        alpha->set_name("alpha");
        alpha->set_type(onnx::AttributeProto::FLOAT);
        alpha->set_f(0.5f);
        const Tensor a = Tensor::from_values(dtype, {2, 3}, values(6, 10, 3)), bm = Tensor::from_values(dtype, {3, 2}, values(6, 7, -1)),
                     cm = Tensor::from_values(dtype, {2, 2}, values(4, 50, 0));
        const auto av = a.to_doubles(), bmv = bm.to_doubles(), cv = cm.to_doubles();
        std::vector<double> want_gemm(4);
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
                double dot = 0;
                for (int k = 0; k < 3; ++k) dot += av[i * 3 + k] * bmv[k * 2 + j];
                want_gemm[i * 2 + j] = 0.5 * dot + cv[i * 2 + j];
            }
        expect_near_rounded(run(import(gemm), {{"a", a}, {"bm", bm}, {"c", cm}})[0], want_gemm, dtype);
    }
}
