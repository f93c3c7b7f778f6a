// The importer's guard in front of libonnx's shape inference: attributes that libonnx would use
// to index a shape are checked against the input ranks first, so a malformed model is an
// Error(input) naming node, op, attribute and value, never a crash inside libonnx (LayerNormalization
// with axis -3 on a rank-2 input and its Mean / InvStdDev outputs declared made libonnx 1.12
// segfault). Models are built with the onnx protobuf API.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "capsule/onnx_import.hpp"
#include "onnx_builders.hpp"

using namespace capsule;
using namespace capsule::testing::onnx_builders;

namespace {

constexpr int F = onnx::TensorProto::FLOAT;

void add_float_initializer(onnx::ModelProto& m, const std::string& name, const std::vector<std::int64_t>& dims,
                           float value) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) {
        t->add_dims(d);
        n *= d;
    }
    for (std::int64_t k = 0; k < n; ++k) t->add_float_data(value);
}

/// x float32 [2, 3] → LayerNormalization(axis) with scale and B [3] → y, mean, inv_std_dev (all
/// three declared as graph outputs, as in the crashing model).
onnx::ModelProto layer_norm_model(std::int64_t axis, bool after_relu = false) {
    auto m = new_model(17);
    set_type(m.mutable_graph()->add_input(), "x", F, {2, 3});
    add_float_initializer(m, "scale", {3}, 1);
    add_float_initializer(m, "bias", {3}, 0);
    std::string in = "x";
    if (after_relu) {
        add_node(m, "Relu", {"x"}, {"r"});
        in = "r";
    }
    auto* n = add_node(m, "LayerNormalization", {in, "scale", "bias"}, {"y", "mean", "inv_std_dev"});
    n->set_name("ln");
    add_int_attr(n, "axis", axis);
    set_type(m.mutable_graph()->add_output(), "y", F, {2, 3});
    set_type(m.mutable_graph()->add_output(), "mean", F, {2, 1});
    set_type(m.mutable_graph()->add_output(), "inv_std_dev", F, {2, 1});
    return m;
}

/// x float32 [2, 3] (and a second input x2 [2, 3] for Concat) → op with `setup` → y.
onnx::ModelProto rank2_model(const std::string& op, const std::function<void(onnx::NodeProto*)>& setup,
                             std::vector<std::string> extra_inputs = {}, int outputs = 1) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", F, {2, 3});
    std::vector<std::string> inputs{"x"};
    for (const auto& e : extra_inputs) inputs.push_back(e);
    std::vector<std::string> outs;
    for (int k = 0; k < outputs; ++k) outs.push_back("y" + std::to_string(k));
    auto* n = add_node(m, op, inputs, outs);
    n->set_name("bad");
    setup(n);
    for (const auto& o : outs) {
        auto* v = m.mutable_graph()->add_output();
        v->set_name(o);
        auto* t = v->mutable_type()->mutable_tensor_type();
        t->set_elem_type(F);
        for (auto d : {"a", "b"}) t->mutable_shape()->add_dim()->set_dim_param(d);  // rank 2, sizes open
    }
    return m;
}

/// Imports `m` and expects Error(input) whose message holds every piece of `needles`.
void expect_refused(const onnx::ModelProto& m, const std::vector<std::string>& needles) {
    try {
        import_onnx_bytes(m.SerializeAsString(), "bad.onnx");
        FAIL() << "expected Error(input)";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        const std::string msg = e.what();
        for (const auto& needle : needles) EXPECT_NE(msg.find(needle), std::string::npos) << "missing '" << needle << "' in: " << msg;
        EXPECT_NE(msg.find("refused before ONNX shape inference"), std::string::npos) << msg;
    }
}

}  // namespace

TEST(OnnxInferenceGuard, LayerNormalizationAxisOutOfRangeWithStatisticsOutputsIsAnError) {
    expect_refused(layer_norm_model(-3), {"bad.onnx: ONNX op LayerNormalization (node 'ln', opset 17)",
                                          "attribute 'axis' = -3", "input 0 of rank 2", "[-2, 1]"});
    expect_refused(layer_norm_model(2), {"LayerNormalization", "attribute 'axis' = 2"});
    // The rank reaches the check through another node (Relu keeps it).
    expect_refused(layer_norm_model(-3, true), {"LayerNormalization", "attribute 'axis' = -3"});
}

TEST(OnnxInferenceGuard, LayerNormalizationWithAValidAxisStillImports) {
    auto model = import_onnx_bytes(layer_norm_model(-1).SerializeAsString(), "ok.onnx");
    EXPECT_EQ(model.output_names, (std::vector<std::string>{"y", "mean", "inv_std_dev"}));
}

TEST(OnnxInferenceGuard, OutOfRangeAxesAndPermutationsOfSiblingOpsAreErrors) {
    expect_refused(rank2_model("Softmax", [](auto* n) { add_int_attr(n, "axis", 2); }),
                   {"ONNX op Softmax (node 'bad'", "attribute 'axis' = 2", "rank 2"});
    expect_refused(rank2_model("LogSoftmax", [](auto* n) { add_int_attr(n, "axis", -3); }),
                   {"LogSoftmax", "attribute 'axis' = -3"});
    expect_refused(rank2_model("Concat", [](auto* n) { add_int_attr(n, "axis", 3); }, {"x"}),
                   {"Concat", "attribute 'axis' = 3"});
    expect_refused(rank2_model("Gather", [](auto* n) { add_int_attr(n, "axis", -3); }, {"x"}),
                   {"Gather", "attribute 'axis' = -3"});
    expect_refused(rank2_model("Flatten", [](auto* n) { add_int_attr(n, "axis", 3); }),
                   {"Flatten", "attribute 'axis' = 3", "[-2, 2]"});
    expect_refused(rank2_model("Split", [](auto* n) { add_int_attr(n, "axis", 5); }, {}, 2),
                   {"Split", "attribute 'axis' = 5"});
    expect_refused(rank2_model("ArgMax", [](auto* n) { add_int_attr(n, "axis", 2); }),
                   {"ArgMax", "attribute 'axis' = 2"});
    expect_refused(rank2_model("Transpose", [](auto* n) { add_ints_attr(n, "perm", {0, 2}); }),
                   {"Transpose", "attribute 'perm' = [0, 2]", "not a permutation"});
    expect_refused(rank2_model("Transpose", [](auto* n) { add_ints_attr(n, "perm", {1, 1}); }),
                   {"Transpose", "attribute 'perm' = [1, 1]"});
    expect_refused(rank2_model("Transpose", [](auto* n) { add_ints_attr(n, "perm", {1, 0, 2}); }),
                   {"Transpose", "attribute 'perm' = [1, 0, 2]", "has 3 entries; input 0 has rank 2"});
    expect_refused(rank2_model("ReduceMean", [](auto* n) { add_ints_attr(n, "axes", {0, 7}); }),
                   {"ReduceMean", "attribute 'axes' = [0, 7]", "has axis 7"});
    expect_refused(rank2_model("ReduceMax", [](auto* n) { add_ints_attr(n, "axes", {1, -1}); }),
                   {"ReduceMax", "names axis 1 twice"});
    expect_refused(rank2_model("MaxPool", [](auto* n) { add_ints_attr(n, "kernel_shape", {2}); }),
                   {"MaxPool", "attribute 'kernel_shape' = [2]", "needs an input with spatial dimensions"});
}

TEST(OnnxInferenceGuard, WindowAttributesMustMatchTheSpatialRank) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", F, {1, 1, 4, 4});
    auto* n = add_node(m, "MaxPool", {"x"}, {"y"});
    n->set_name("pool");
    add_ints_attr(n, "kernel_shape", {2, 2});
    add_ints_attr(n, "pads", {0, 0, 0});
    set_type(m.mutable_graph()->add_output(), "y", F, {1, 1, 3, 3});
    expect_refused(m, {"MaxPool (node 'pool'", "attribute 'pads' = [0, 0, 0]", "has 3 entries", "needs 4"});
}

TEST(OnnxInferenceGuard, NodesAfterAnOpOfUnknownRankAreHeldBackFromInference) {
    // Unique has no rank rule here: the LayerNormalization after it is not handed to libonnx's
    // inference, and import fails cleanly at Unique (no converter), not inside libonnx.
    auto m = new_model(17);
    set_type(m.mutable_graph()->add_input(), "x", F, {2, 3});
    add_float_initializer(m, "scale", {3}, 1);
    add_node(m, "Unique", {"x"}, {"e"});
    auto* n = add_node(m, "LayerNormalization", {"e", "scale"}, {"y", "mean"});
    add_int_attr(n, "axis", -3);
    set_type(m.mutable_graph()->add_output(), "y", F, {2, 3});
    set_type(m.mutable_graph()->add_output(), "mean", F, {2, 1});
    try {
        import_onnx_bytes(m.SerializeAsString(), "held.onnx");
        FAIL() << "expected the import to fail at Unique";
    } catch (const Error& err) {
        EXPECT_EQ(err.code(), ErrorCode::input) << err.what();
        EXPECT_NE(std::string(err.what()).find("ONNX op Unique"), std::string::npos) << err.what();
    }
}
