// Matrix products: matmul (NumPy rules, batch dimensions broadcast), bmm and linear, whose
// weight and bias are parameters.
#include "context.hpp"

#include <string>

namespace capsule::shape_inference {

TensorType matmul(Context& c) {
    c.arity(2);
    c.attributes({});
    const auto dtype = c.floats({0, 1});
    const auto& a0 = c.shape(0);
    const auto& b0 = c.shape(1);
    if (a0.empty() || b0.empty())
        fail("both parents must have rank >= 1, got " + to_string(a0) + " x " + to_string(b0));
    auto inner_error = [&] {
        fail("inner dimensions differ: " + to_string(a0) + " x " + to_string(b0));
    };
    if (a0.size() == 1 && b0.size() == 1) {
        if (a0[0] != b0[0]) inner_error();
        return {{}, dtype};
    }
    Shape a = a0, b = b0;
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    if (a[a.size() - 1] != b[b.size() - 2]) inner_error();
    Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
    Shape out;
    try {
        out = broadcast(batch_a, batch_b);
    } catch (const Error&) {
        fail("batch dimensions do not broadcast: " + to_string(a0) + " x " + to_string(b0));
    }
    if (a0.size() > 1) out.push_back(a[a.size() - 2]);
    if (b0.size() > 1) out.push_back(b[b.size() - 1]);
    return {out, dtype};
}

TensorType bmm(Context& c) {
    c.arity(2);
    c.attributes({});
    const auto dtype = c.floats({0, 1});
    c.rank_is(0, 3);
    c.rank_is(1, 3);
    const auto& a = c.shape(0);
    const auto& b = c.shape(1);
    if (a[0] != b[0]) fail("batch dimensions differ: " + to_string(a) + " x " + to_string(b));
    if (a[2] != b[1]) fail("inner dimensions differ: " + to_string(a) + " x " + to_string(b));
    return {{a[0], a[1], b[2]}, dtype};
}

TensorType det(Context& c) {
    c.arity(1);
    c.attributes({});
    const auto dtype = c.floats({0});
    c.rank_at_least(0, 2);
    Shape out = c.shape(0);
    const int64_t n = out.back();
    if (out[out.size() - 2] != n) fail("the last two axes of " + to_string(out) + " are not square");
    out.resize(out.size() - 2);
    return {out, dtype};
}

TensorType linear(Context& c) {
    c.arity(1);
    c.attributes({"out_features", "bias"});
    const auto dtype = c.floats({0});
    c.rank_at_least(0, 1);
    const int64_t out_features = c.int_min("out_features", 0, std::nullopt);
    const bool bias = c.bool_or("bias", true);
    Shape out = c.shape(0);
    const int64_t in_features = out.back();
    out.back() = out_features;
    c.param("weight", {out_features, in_features}, dtype);
    if (bias) c.param("bias", {out_features}, dtype);
    return {out, dtype};
}

}  // namespace capsule::shape_inference
