// infer_type and parameter_specs: the structural nodes, and one dispatch from each BackendOp to
// its family's inference (the families' files hold the rules).
#include "context.hpp"

#include <string>

namespace capsule {
namespace shape_inference {
namespace {

/// input, constant and detach: their type is declared on the node or passed through.
TensorType structural(Context& c) {
    const Node& node = c.node();
    c.arity(node.kind == NodeKind::detach ? 1 : 0);
    c.attributes({});
    if (node.kind == NodeKind::detach) return c.in(0);
    if (node.kind == NodeKind::constant) c.param("", node.shape, node.dtype);
    return {node.shape, node.dtype};
}

TensorType infer_op(Context& c, BackendOp op) {
    switch (op) {
        case BackendOp::rand_uniform: return rand_uniform(c);
        case BackendOp::bernoulli_mask: return bernoulli_mask(c);
        case BackendOp::add:
        case BackendOp::sub:
        case BackendOp::mul:
        case BackendOp::max:
        case BackendOp::min:
        case BackendOp::div:
        case BackendOp::pow: return binary_broadcast_numeric(c);
        case BackendOp::mod: return mod(c);
        case BackendOp::scale: return scale(c);
        case BackendOp::clamp: return clamp(c);
        case BackendOp::abs:
        case BackendOp::neg:
        case BackendOp::sign: return unary_numeric(c);
        case BackendOp::sqrt:
        case BackendOp::relu:
        case BackendOp::sigmoid:
        case BackendOp::tanh:
        case BackendOp::exp:
        case BackendOp::log:
        case BackendOp::sin:
        case BackendOp::cos:
        case BackendOp::inv:
        case BackendOp::erf:
        case BackendOp::floor:
        case BackendOp::ceil:
        case BackendOp::tan:
        case BackendOp::asin:
        case BackendOp::acos:
        case BackendOp::atan:
        case BackendOp::sinh:
        case BackendOp::cosh:
        case BackendOp::asinh:
        case BackendOp::acosh:
        case BackendOp::atanh:
        case BackendOp::hardswish:
        case BackendOp::softsign:
        case BackendOp::mish: return unary_float(c);
        case BackendOp::gelu: return gelu(c);
        case BackendOp::softplus: return softplus(c);
        case BackendOp::safe_log: return safe_log(c);
        case BackendOp::leaky_relu: return unary_with_numbers(c, {"negative_slope"});
        case BackendOp::elu:
        case BackendOp::thresholded_relu: return unary_with_numbers(c, {"alpha"});
        case BackendOp::shrink: return unary_with_numbers(c, {"lambd", "bias"});
        case BackendOp::is_inf: return is_inf(c);
        case BackendOp::celu: return unary_with_numbers(c, {"alpha"}, true);
        case BackendOp::selu: return unary_with_numbers(c, {"alpha", "gamma"});
        case BackendOp::hardsigmoid: return unary_with_numbers(c, {"alpha", "beta"});
        case BackendOp::equal:
        case BackendOp::less:
        case BackendOp::less_equal:
        case BackendOp::greater:
        case BackendOp::greater_equal: return predicate(c, 2, false);
        case BackendOp::logical_not: return predicate(c, 1, true);
        case BackendOp::logical_and:
        case BackendOp::logical_or:
        case BackendOp::logical_xor: return predicate(c, 2, true);
        case BackendOp::where: return where(c);
        case BackendOp::cast: return cast(c);

        case BackendOp::log_softmax:
        case BackendOp::softmax: return softmax_like(c);
        case BackendOp::sum: return sum(c);
        case BackendOp::reduce_sum:
        case BackendOp::reduce_mean:
        case BackendOp::reduce_max:
        case BackendOp::reduce_min:
        case BackendOp::reduce_prod: return reduce(c);
        case BackendOp::argmax:
        case BackendOp::argmin: return arg_reduce(c);
        case BackendOp::top_k: return top_k(c);
        case BackendOp::non_max_suppression: return non_max_suppression(c);
        case BackendOp::non_zero: return non_zero(c);
        case BackendOp::cumsum: return cumsum(c);

        case BackendOp::flatten: return flatten(c);
        case BackendOp::reshape: return reshape(c);
        case BackendOp::permute: return permute(c);
        case BackendOp::transpose2d: return fixed_permutation(c, 2, {1, 0});
        case BackendOp::swapAdjacentAtDepth: return swap_adjacent(c);
        case BackendOp::transpose3d_first_to_last: return fixed_permutation(c, 3, {1, 2, 0});
        case BackendOp::transpose3d_last_to_first: return fixed_permutation(c, 3, {2, 0, 1});
        case BackendOp::transpose3d_last_two: return fixed_permutation(c, 3, {0, 2, 1});
        case BackendOp::broadcastTo: return broadcast_to(c);
        case BackendOp::concat_vectors: return concat_vectors(c);
        case BackendOp::concat_leading_axis: return concat_leading(c);
        case BackendOp::concat: return concat(c);
        case BackendOp::slice_leading_axis_range: return slice_leading(c);
        case BackendOp::slice: return slice(c);
        case BackendOp::pad: return pad(c);
        case BackendOp::tile: return tile(c);
        case BackendOp::triu:
        case BackendOp::tril: return triangle(c);

        case BackendOp::gather_scalar: return gather_by_attribute(c, 1);
        case BackendOp::gather_scalar_nat: return gather_by_parent(c, 0);
        case BackendOp::gather_row: return gather_by_attribute(c, 2);
        case BackendOp::gather_vec_nat: return gather_by_parent(c, 1);
        case BackendOp::gather_rows_nat: return gather_rows_nat(c);
        case BackendOp::scatter_add_vec: return scatter_add(c, false);
        case BackendOp::scatter_add_row: return scatter_add(c, true);
        case BackendOp::gather: return gather(c);
        case BackendOp::gather_elements: return gather_elements(c);
        case BackendOp::scatter_elements: return scatter_elements(c);
        case BackendOp::hardmax: return softmax_like(c);

        case BackendOp::matmul: return matmul(c);
        case BackendOp::bmm: return bmm(c);
        case BackendOp::det: return det(c);
        case BackendOp::linear: return linear(c);

        case BackendOp::mse_loss: return mse_loss(c);
        case BackendOp::cross_entropy: return cross_entropy(c);
        case BackendOp::layer_norm: return layer_norm(c);
        case BackendOp::batch_norm:
        case BackendOp::batchnorm_channel_first: return batch_norm(c);
        case BackendOp::fft_fno: return fft_fno(c);
        case BackendOp::selective_scan: return selective_scan(c);
        case BackendOp::scaled_dot_product_attention: return attention(c);

        case BackendOp::conv: return convolution(c, 1, false);
        case BackendOp::conv2d: return convolution(c, 2, false);
        case BackendOp::conv_transpose: return convolution(c, 1, true);
        case BackendOp::conv_transpose2d: return convolution(c, 2, true);
        case BackendOp::max_pool: return pooling(c, 1, PoolKind::max, false);
        case BackendOp::max_pool2d: return pooling(c, 2, PoolKind::max, false);
        case BackendOp::max_pool2d_pad: return pooling(c, 2, PoolKind::max, true);
        case BackendOp::smooth_max_pool: return pooling(c, 1, PoolKind::smooth_max, false);
        case BackendOp::smooth_max_pool2d: return pooling(c, 2, PoolKind::smooth_max, false);
        case BackendOp::avg_pool: return pooling(c, 1, PoolKind::avg, false);
        case BackendOp::avg_pool2d: return pooling(c, 2, PoolKind::avg, false);
        case BackendOp::avg_pool2d_pad: return pooling(c, 2, PoolKind::avg, true);

        case BackendOp::sgd:
        case BackendOp::adam:
            fail(c.node().op_spelling() + " is an optimizer step (it updates a parameter and its "
                 "state buffers in place, several outputs); capsule::Optimizer runs it, a graph "
                 "cannot hold it");
    }
    fail("invalid op value " + std::to_string(static_cast<int>(op)));
}

TensorType infer(Context& c) {
    const Node& node = c.node();
    for (size_t i = 0; i < c.count(); ++i)
        for (auto d : c.shape(i))
            if (d < 0)
                fail("parent " + std::to_string(i) + " has a negative dimension in shape " +
                     to_string(c.shape(i)));
    switch (node.kind) {
        case NodeKind::input:
        case NodeKind::constant:
        case NodeKind::detach: return structural(c);
        case NodeKind::op: break;
    }
    if (!node.op) fail("op node has no op");
    return infer_op(c, *node.op);
}

}  // namespace
}  // namespace shape_inference

TensorType infer_type(const Node& node, const std::vector<TensorType>& parents) {
    shape_inference::Context context(node, parents, nullptr);
    return shape_inference::infer(context);
}

std::vector<ParameterSpec> parameter_specs(const Node& node,
                                           const std::vector<TensorType>& parents) {
    std::vector<ParameterSpec> params;
    shape_inference::Context context(node, parents, &params);
    shape_inference::infer(context);
    return params;
}

}  // namespace capsule
