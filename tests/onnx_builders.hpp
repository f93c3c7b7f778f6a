// Builders for small ONNX models in tests, with the onnx protobuf API: typed graph inputs and
// outputs, nodes, attributes and Constant nodes.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "capsule/tensor.hpp"

namespace capsule::testing::onnx_builders {

inline void set_type(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<std::int64_t>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* shape = t->mutable_shape();
    for (auto d : dims) shape->add_dim()->set_dim_value(d);
}

inline onnx::ModelProto new_model(std::int64_t opset = 13) {
    onnx::ModelProto m;
    m.set_ir_version(7);
    m.set_producer_name("capsule-test");
    auto* imp = m.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    m.mutable_graph()->set_name("g");
    return m;
}

inline onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> inputs,
                          std::vector<std::string> outputs) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(outputs.at(0) + "_node");
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return n;
}

inline void add_int_attr(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

inline void add_ints_attr(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}

/// A Constant node `name` holding `t` (float32, float64 or int64).
inline void add_constant(onnx::ModelProto& m, const std::string& name, const Tensor& t) {
    auto* n = add_node(m, "Constant", {}, {name});
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    auto* p = a->mutable_t();
    for (auto d : t.shape()) p->add_dims(d);
    switch (t.dtype()) {
        case DType::float32:
            p->set_data_type(onnx::TensorProto::FLOAT);
            for (auto v : t.values<float>()) p->add_float_data(v);
            break;
        case DType::float64:
            p->set_data_type(onnx::TensorProto::DOUBLE);
            for (auto v : t.values<double>()) p->add_double_data(v);
            break;
        case DType::int64:
            p->set_data_type(onnx::TensorProto::INT64);
            for (auto v : t.values<std::int64_t>()) p->add_int64_data(v);
            break;
        default: FAIL() << to_string(t.dtype()) << " constants are not used here";
    }
}

inline void add_string_attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
}

}  // namespace capsule::testing::onnx_builders
