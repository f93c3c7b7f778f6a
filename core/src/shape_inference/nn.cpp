// Network layers that are not convolutions: losses, layer and batch normalisation (with their
// parameters), the FNO spectral layer, the selective scan and attention.
#include "context.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace capsule::shape_inference {

TensorType mse_loss(Context& c) {
    c.arity(2);
    c.attributes({"reduction"});
    const auto dtype = c.floats({0, 1});
    const auto reduction = c.string_or("reduction", "mean", {"mean", "sum", "none"});
    if (c.shape(0) != c.shape(1))
        fail("input shape " + to_string(c.shape(0)) + " and target shape " + to_string(c.shape(1)) +
             " differ");
    if (reduction == "none") return {c.shape(0), dtype};
    return {{}, dtype};
}

TensorType cross_entropy(Context& c) {
    c.arity(2);
    c.attributes({"reduction", "ignore_index"});
    const auto dtype = c.floats({0});
    c.index_dtype(1);
    c.rank_is(0, 2, "input");
    c.rank_is(1, 1, "target");
    const auto reduction = c.string_or("reduction", "mean", {"mean", "sum", "none"});
    c.int_or("ignore_index", -100);
    if (c.shape(1)[0] != c.shape(0)[0])
        fail("target shape " + to_string(c.shape(1)) + " does not match the batch of input shape " +
             to_string(c.shape(0)));
    if (reduction == "none") return {{c.shape(0)[0]}, dtype};
    return {{}, dtype};
}

TensorType layer_norm(Context& c) {
    c.arity(1);
    c.attributes({"normalized_shape", "eps", "elementwise_affine", "bias"});
    const auto dtype = c.floats({0});
    Shape normalized;
    if (const auto* v = c.find("normalized_shape"); v && std::holds_alternative<int64_t>(*v))
        normalized = {std::get<int64_t>(*v)};
    else
        normalized = c.req_ints("normalized_shape");
    c.positive("eps", 1e-5);
    const bool affine = c.bool_or("elementwise_affine", true);
    const bool bias = c.bool_or("bias", true);
    if (normalized.empty()) fail("attribute 'normalized_shape' is empty");
    const auto& in = c.shape(0);
    if (normalized.size() > in.size() ||
        !std::equal(normalized.begin(), normalized.end(), in.end() - int64_t(normalized.size())))
        fail("attribute 'normalized_shape' = " + to_string(normalized) +
             " does not match the trailing dimensions of " + to_string(in));
    if (affine) {
        c.param("weight", normalized, dtype);
        if (bias) c.param("bias", normalized, dtype);
    }
    return {in, dtype};
}

TensorType batch_norm(Context& c) {
    c.arity(1);
    c.attributes({"eps", "momentum", "training", "affine"});
    const auto dtype = c.floats({0});
    c.positive("eps", 1e-5);
    const double momentum = c.double_or("momentum", 0.1);
    if (!(momentum >= 0 && momentum <= 1))
        fail("attribute 'momentum' = " + num(momentum) + " must be in [0, 1]");
    const bool training = c.bool_or("training", false);
    const bool affine = c.bool_or("affine", true);
    c.rank_at_least(0, 2);
    const auto& in = c.shape(0);
    const int64_t channels = in[1];
    if (training && product(in) != 0 && product(in) / channels == 1)
        fail("training needs more than 1 value per channel, got input shape " + to_string(in));
    if (affine) {
        c.param("weight", {channels}, dtype);
        c.param("bias", {channels}, dtype);
    }
    c.param("running_mean", {channels}, dtype);
    c.param("running_var", {channels}, dtype);
    return {in, dtype};
}

TensorType fft_fno(Context& c) {
    c.arity(1);
    c.attributes({"modes", "out_channels"});
    const auto dtype = c.floats({0});
    const int64_t modes = c.int_min("modes", 1, std::nullopt);
    const int64_t out_channels = c.int_min("out_channels", 1, std::nullopt);
    c.rank_is(0, 3);
    const auto& in = c.shape(0);
    if (modes > in[2] / 2 + 1)
        fail("attribute 'modes' = " + str(modes) + " exceeds L/2 + 1 = " + str(in[2] / 2 + 1) +
             " for length " + str(in[2]));
    c.param("weight_real", {in[1], out_channels, modes}, dtype);
    c.param("weight_imag", {in[1], out_channels, modes}, dtype);
    return {{in[0], out_channels, in[2]}, dtype};
}

TensorType selective_scan(Context& c) {
    c.arity(5);
    c.attributes({"delta_softplus"});
    const auto dtype = c.all_floats();
    c.bool_or("delta_softplus", false);
    c.rank_is(0, 3, "u");
    c.rank_is(1, 3, "delta");
    c.rank_is(2, 2, "A");
    c.rank_is(3, 3, "B");
    c.rank_is(4, 3, "C");
    const auto& u = c.shape(0);
    const int64_t batch = u[0], d = u[1], length = u[2];
    const int64_t n = c.shape(2)[1];
    auto expect = [&](size_t i, const char* role, const Shape& want, const char* spelled) {
        if (c.shape(i) != want)
            fail("expects parent " + std::to_string(i) + " (" + role + ") of shape " + spelled +
                 " = " + to_string(want) + ", got " + to_string(c.shape(i)));
    };
    expect(1, "delta", u, "[B, D, L]");
    expect(2, "A", {d, n}, "[D, N]");
    expect(3, "B", {batch, n, length}, "[B, N, L]");
    expect(4, "C", {batch, n, length}, "[B, N, L]");
    return {u, dtype};
}

TensorType attention(Context& c) {
    c.arity_between(3, 4);
    c.attributes({"is_causal", "scale"});
    const auto dtype = c.floats({0, 1, 2});
    const bool causal = c.bool_or("is_causal", false);
    if (auto scale = c.opt_double("scale"); scale && !std::isfinite(*scale))
        fail("attribute 'scale' must be finite");
    c.rank_at_least(0, 2, "query");
    c.rank_at_least(1, 2, "key");
    c.rank_at_least(2, 2, "value");
    const auto& q = c.shape(0);
    const auto& k = c.shape(1);
    const auto& v = c.shape(2);
    if (k.size() != q.size() || v.size() != q.size() ||
        !std::equal(q.begin(), q.end() - 2, k.begin()) ||
        !std::equal(q.begin(), q.end() - 2, v.begin()))
        fail("query, key and value must have the same batch dimensions: " + to_string(q) + ", " +
             to_string(k) + ", " + to_string(v));
    const size_t r = q.size();
    if (q[r - 1] != k[r - 1])
        fail("query embedding " + str(q[r - 1]) + " differs from key embedding " + str(k[r - 1]) +
             ": " + to_string(q) + " vs " + to_string(k));
    if (k[r - 2] != v[r - 2])
        fail("key length " + str(k[r - 2]) + " differs from value length " + str(v[r - 2]) + ": " +
             to_string(k) + " vs " + to_string(v));
    Shape scores(q.begin(), q.end() - 1);
    scores.push_back(k[r - 2]);  // [..., L, S]
    if (c.count() == 4) {
        if (causal) fail("attribute 'is_causal' = true cannot be combined with a mask parent");
        const auto mask_dtype = c.in(3).dtype;
        if (mask_dtype != DType::boolean && mask_dtype != dtype)
            fail("parent 3 (mask) has dtype " + string(to_string(mask_dtype)) +
                 "; expected bool or the query's " + string(to_string(dtype)));
        Shape b;
        try {
            b = broadcast(c.shape(3), scores);
        } catch (const Error&) {
        }
        if (b != scores)
            fail("parent 3 (mask) of shape " + to_string(c.shape(3)) +
                 " does not broadcast to the attention scores " + to_string(scores));
    }
    Shape out(q.begin(), q.end() - 1);
    out.push_back(v[r - 1]);
    return {out, dtype};
}

}  // namespace capsule::shape_inference
