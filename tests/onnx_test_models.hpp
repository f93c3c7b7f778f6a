// Building small ONNX models with the protobuf API and running them, for the ONNX import tests of
// decomposed ops (test_onnx_resize, _windows, _recurrent, _grid_sample).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"

namespace capsule_test::onnx_models {

using capsule::Shape;
using capsule::Tensor;

/// An empty model importing the default domain at `opset`.
inline onnx::ModelProto model(std::int64_t opset, std::int64_t ir_version = 7) {
    onnx::ModelProto m;
    m.set_ir_version(ir_version);
    m.add_opset_import()->set_version(opset);
    m.mutable_graph()->set_name("g");
    return m;
}

/// Declares a tensor value `name` of element type `elem` and shape `dims`; `named_dims`: each
/// dimension a named (unknown) one instead.
inline void typed(onnx::ValueInfoProto* v, const std::string& name, const Shape& dims,
                  int elem = onnx::TensorProto::FLOAT, bool named_dims = false) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* shape = t->mutable_shape();
    for (std::size_t a = 0; a < dims.size(); ++a) {
        auto* d = shape->add_dim();
        if (named_dims) d->set_dim_param("d" + std::to_string(a));
        else d->set_dim_value(dims[a]);
    }
}

inline void float_initializer(onnx::GraphProto* g, const std::string& name, const Shape& dims, const std::vector<double>& values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (double v : values) t->add_float_data(static_cast<float>(v));
}

inline void int64_initializer(onnx::GraphProto* g, const std::string& name, const Shape& dims, const std::vector<std::int64_t>& values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto v : values) t->add_int64_data(v);
}

inline onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& inputs,
                             const std::vector<std::string>& outputs) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(op + "_node");
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
}

inline onnx::AttributeProto* attribute(onnx::NodeProto* n, const std::string& name, onnx::AttributeProto::AttributeType type) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
}
inline void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) { attribute(n, name, onnx::AttributeProto::INT)->set_i(v); }
inline void set_float(onnx::NodeProto* n, const std::string& name, float v) { attribute(n, name, onnx::AttributeProto::FLOAT)->set_f(v); }
inline void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    attribute(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
inline void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = attribute(n, name, onnx::AttributeProto::INTS);
    for (auto e : v) a->add_ints(e);
}
inline void set_floats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v) {
    auto* a = attribute(n, name, onnx::AttributeProto::FLOATS);
    for (auto e : v) a->add_floats(e);
}
inline void set_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
    auto* a = attribute(n, name, onnx::AttributeProto::STRINGS);
    for (const auto& e : v) a->add_strings(e);
}

inline capsule::ImportedModel import(const onnx::ModelProto& m) {
    return capsule::import_onnx_bytes(m.SerializeAsString(), "test.onnx", {});
}

/// Expects importing `m` to fail with an error whose message contains `reason`.
inline void expect_refused(const onnx::ModelProto& m, const std::string& reason) {
    try {
        import(m);
        ADD_FAILURE() << "imported; expected a refusal naming: " << reason;
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
}

/// Imports `m`, plans and gates it under `profile_name` (the plan must be accepted) and runs it
/// on `given` (graph input name → tensor); the outputs in the model's order.
inline std::vector<Tensor> run(const onnx::ModelProto& m, const std::map<std::string, Tensor>& given,
                               const std::string& profile_name = "checked_cpu") {
    const auto imported = import(m);
    const auto& profile = capsule::find_builtin_profile(profile_name);
    auto accepted = profile.accept_graph(capsule::testing::built_host(), imported.graph);
    if (!accepted.accepted) throw std::runtime_error("the gate rejects the plan under " + profile_name);
    capsule::ParameterMap params = imported.parameters;
    auto inputs = capsule::bind_onnx_inputs(imported, given, params);
    return capsule::Session::create(profile, *accepted.accepted, imported.graph, capsule::testing::built_host(), params).run(inputs);
}

}  // namespace capsule_test::onnx_models
