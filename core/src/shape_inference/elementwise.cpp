// Elementwise ops: the output has the input's shape, or the parents' NumPy broadcast; random
// sources and masks are here too, since their output is shaped the same way.
#include "context.hpp"

#include <cmath>
#include <string>

namespace capsule::shape_inference {

TensorType rand_uniform(Context& c) {
    c.arity(0);
    c.attributes({"shape", "seed", "dtype"});
    const auto shape = c.req_shape("shape");
    c.int_or("seed", 0);
    const auto dtype = c.string_or("dtype", "float32", {"float32", "float64"});
    const auto type = dtype == "float64" ? DType::float64 : DType::float32;
    byte_size(shape, type);  // the output is allocated from this untrusted shape
    return {shape, type};
}

TensorType bernoulli_mask(Context& c) {
    c.arity(1);
    c.attributes({"seed"});
    c.int_or("seed", 0);
    return {c.shape(0), c.floats({0})};
}

TensorType unary_float(Context& c) {
    c.arity(1);
    c.attributes({});
    return {c.shape(0), c.floats({0})};
}

TensorType unary_numeric(Context& c) {
    c.arity(1);
    c.attributes({});
    if (c.in(0).dtype == DType::boolean) fail("parent 0 has dtype bool; expected a float or integer dtype");
    return {c.shape(0), c.in(0).dtype};
}

TensorType binary_broadcast(Context& c) {
    c.arity(2);
    c.attributes({});
    const auto dtype = c.floats({0, 1});
    return {broadcast(c.shape(0), c.shape(1)), dtype};
}

namespace {
/// The broadcast of two parents of one numeric dtype (any but bool).
TensorType numeric_broadcast(Context& c) {
    const DType dtype = c.same_dtype({0, 1});
    if (dtype == DType::boolean) fail("parents have dtype bool; expected a float or integer dtype");
    return {broadcast(c.shape(0), c.shape(1)), dtype};
}
}  // namespace

TensorType binary_broadcast_numeric(Context& c) {
    c.arity(2);
    c.attributes({});
    return numeric_broadcast(c);
}

TensorType mod(Context& c) {
    c.arity(2);
    c.attributes({"fmod"});
    c.bool_or("fmod", false);
    return numeric_broadcast(c);
}

TensorType scale(Context& c) {
    c.arity(1);
    c.attributes({"factor"});
    if (!c.opt_double("factor")) Context::missing("factor", "number");
    return {c.shape(0), c.floats({0})};
}

TensorType clamp(Context& c) {
    c.arity(1);
    c.attributes({"min", "max"});
    const auto lo = c.opt_double("min");
    const auto hi = c.opt_double("max");
    if (!lo && !hi) fail("needs attribute 'min' or 'max' (or both)");
    if (c.in(0).dtype == DType::boolean) fail("parent 0 has dtype bool; expected a float or integer dtype");
    return {c.shape(0), c.in(0).dtype};
}

TensorType gelu(Context& c) {
    c.arity(1);
    c.attributes({"approximate"});
    c.string_or("approximate", "none", {"none", "tanh"});
    return {c.shape(0), c.floats({0})};
}

TensorType softplus(Context& c) {
    c.arity(1);
    c.attributes({"beta", "threshold"});
    c.positive("beta", 1.0);
    c.double_or("threshold", 20.0);
    return {c.shape(0), c.floats({0})};
}

TensorType safe_log(Context& c) {
    c.arity(1);
    c.attributes({"eps"});
    c.positive("eps", 1e-12);
    return {c.shape(0), c.floats({0})};
}

TensorType unary_with_numbers(Context& c, std::initializer_list<const char*> names,
                              bool nonzero) {
    c.arity(1);
    c.attributes(names);
    for (auto name : names)
        if (auto v = c.opt_double(name); v && (!std::isfinite(*v) || (nonzero && *v == 0)))
            fail("attribute " + quoted(name) + " = " + num(*v) + " must be a finite " +
                 (nonzero ? "nonzero " : "") + "number");
    return {c.shape(0), c.floats({0})};
}

TensorType is_inf(Context& c) {
    c.arity(1);
    c.attributes({"detect_negative", "detect_positive"});
    c.floats({0});
    c.bool_or("detect_negative", true);
    c.bool_or("detect_positive", true);
    return {c.shape(0), DType::boolean};
}

TensorType predicate(Context& c, size_t parents, bool bool_only) {
    c.arity(parents);
    c.attributes({});
    for (size_t i = 0; bool_only && i < parents; ++i)
        if (c.in(i).dtype != DType::boolean)
            fail(c.parent_label(i) + " has dtype " + string(to_string(c.in(i).dtype)) +
                 "; expected bool");
    if (parents == 1) return {c.shape(0), DType::boolean};
    c.same_dtype({0, 1});
    return {broadcast(c.shape(0), c.shape(1)), DType::boolean};
}

namespace {

/// Parents `which` broadcast together (NumPy rules, left to right).
Shape broadcast_all(const Context& c, std::initializer_list<size_t> which) {
    Shape out;
    for (auto i : which) out = broadcast(out, c.shape(i));
    return out;
}

}  // namespace

TensorType where(Context& c) {
    c.arity(3);
    c.attributes({});
    if (c.in(0).dtype != DType::boolean)
        fail(c.parent_label(0, "condition") + " has dtype " + string(to_string(c.in(0).dtype)) +
             "; expected bool");
    const auto dtype = c.same_dtype({1, 2});
    return {broadcast_all(c, {0, 1, 2}), dtype};
}

TensorType cast(Context& c) {
    c.arity(1);
    c.attributes({"to"});
    if (!c.find("to")) Context::missing("to", "string");
    return {c.shape(0), parse<DType>(c.string_or("to", "", {"float32", "float64", "float16", "bfloat16", "int64",
                                                            "int32", "int16", "int8", "uint64", "uint32", "uint16",
                                                            "uint8", "bool"}))};
}

}  // namespace capsule::shape_inference
