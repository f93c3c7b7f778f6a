// The LibTorch plugin's ops: one function per capsule `libtorch.<op>`, each computing the op
// with ATen (ops_elementwise.cpp, ops_shape.cpp, ops_nn.cpp). CAPSULE_LIBTORCH_OPS lists them in
// the op catalog's order with whether the capsule has a backward kernel (differentiable ops:
// torch's autograd through the same function, common.hpp run_backward); plugin.cpp makes the
// kernel table from it. The optimizer steps sgd and adam (several outputs) have their own
// forward kernels (ops_training.cpp).
#pragma once

#include "common.hpp"

#define CAPSULE_LIBTORCH_OPS(X) \
    X(rand_uniform, forward_only) \
    X(bernoulli_mask, forward_only) \
    X(add, backward) \
    X(sub, backward) \
    X(mul, backward) \
    X(scale, backward) \
    X(abs, backward) \
    X(sqrt, backward) \
    X(clamp, backward) \
    X(max, backward) \
    X(min, backward) \
    X(relu, backward) \
    X(gelu, backward) \
    X(sigmoid, backward) \
    X(tanh, backward) \
    X(softplus, backward) \
    X(exp, backward) \
    X(log, backward) \
    X(sin, backward) \
    X(cos, backward) \
    X(inv, backward) \
    X(safe_log, backward) \
    X(log_softmax, backward) \
    X(softmax, backward) \
    X(sum, backward) \
    X(reduce_sum, backward) \
    X(reduce_mean, backward) \
    X(flatten, backward) \
    X(reshape, backward) \
    X(permute, backward) \
    X(transpose2d, backward) \
    X(swapAdjacentAtDepth, backward) \
    X(transpose3d_first_to_last, backward) \
    X(transpose3d_last_to_first, backward) \
    X(transpose3d_last_two, backward) \
    X(broadcastTo, backward) \
    X(concat_vectors, backward) \
    X(concat_leading_axis, backward) \
    X(slice_leading_axis_range, backward) \
    X(gather_scalar, backward) \
    X(gather_scalar_nat, backward) \
    X(gather_row, backward) \
    X(gather_vec_nat, backward) \
    X(gather_rows_nat, backward) \
    X(scatter_add_vec, backward) \
    X(scatter_add_row, backward) \
    X(matmul, backward) \
    X(bmm, backward) \
    X(det, backward) \
    X(linear, backward) \
    X(mse_loss, backward) \
    X(layer_norm, backward) \
    X(batch_norm, backward) \
    X(batchnorm_channel_first, backward) \
    X(conv, backward) \
    X(conv2d, backward) \
    X(conv_transpose, backward) \
    X(conv_transpose2d, backward) \
    X(max_pool, backward) \
    X(max_pool2d, backward) \
    X(max_pool2d_pad, backward) \
    X(smooth_max_pool, backward) \
    X(smooth_max_pool2d, backward) \
    X(avg_pool, backward) \
    X(avg_pool2d, backward) \
    X(avg_pool2d_pad, backward) \
    X(fft_fno, backward) \
    X(selective_scan, backward) \
    X(scaled_dot_product_attention, backward) \
    X(div, backward) \
    X(pow, backward) \
    X(mod, backward) \
    X(neg, backward) \
    X(erf, backward) \
    X(where, backward) \
    X(concat, backward) \
    X(gather, backward) \
    X(gather_elements, backward) \
    X(scatter_elements, backward) \
    X(slice, backward) \
    X(pad, backward) \
    X(reduce_max, backward) \
    X(reduce_min, backward) \
    X(reduce_prod, backward) \
    X(argmax, forward_only) \
    X(argmin, forward_only) \
    X(hardmax, backward) \
    X(top_k, forward_only) \
    X(non_max_suppression, forward_only) \
    X(non_zero, forward_only) \
    X(floor, backward) \
    X(ceil, backward) \
    X(sign, backward) \
    X(tan, backward) \
    X(asin, backward) \
    X(acos, backward) \
    X(atan, backward) \
    X(sinh, backward) \
    X(cosh, backward) \
    X(asinh, backward) \
    X(acosh, backward) \
    X(atanh, backward) \
    X(leaky_relu, backward) \
    X(elu, backward) \
    X(selu, backward) \
    X(celu, backward) \
    X(hardsigmoid, backward) \
    X(hardswish, backward) \
    X(softsign, backward) \
    X(thresholded_relu, backward) \
    X(mish, backward) \
    X(shrink, backward) \
    X(equal, forward_only) \
    X(less, forward_only) \
    X(less_equal, forward_only) \
    X(greater, forward_only) \
    X(greater_equal, forward_only) \
    X(logical_not, forward_only) \
    X(logical_and, forward_only) \
    X(logical_or, forward_only) \
    X(logical_xor, forward_only) \
    X(is_inf, forward_only) \
    X(cast, backward) \
    X(cumsum, backward) \
    X(tile, backward) \
    X(triu, backward) \
    X(tril, backward) \
    X(cross_entropy, backward)

namespace capsule::libtorch {

#define CAPSULE_LIBTORCH_DECLARE(op, kind) at::Tensor op_##op(const OpArgs& a);
CAPSULE_LIBTORCH_OPS(CAPSULE_LIBTORCH_DECLARE)
#undef CAPSULE_LIBTORCH_DECLARE

/// conv2d's weight (params[0] of `a`; `a.inputs` may be empty) reordered once into the blocked
/// layout oneDNN's convolution primitive wants (at::mkldnn_reorder_conv2d_weight, as
/// torch.jit.optimize_for_inference's frozen convolutions), or an undefined tensor when the
/// convolution would not run on oneDNN (not float32, empty). Raises plugin::KernelError for
/// malformed attributes.
at::Tensor prepack_conv2d_weight(const OpArgs& a);
/// op_conv2d with `packed` (prepack_conv2d_weight of the same node) for the weight when it runs on
/// oneDNN: the same primitive and result without reordering the weight on every call.
at::Tensor conv2d_prepacked(const OpArgs& a, const at::Tensor& packed);

/// Forward kernels of the optimizer steps (ops_training.cpp).
int32_t sgd_kernel(const capsule_forward_args* args, capsule_status* status) noexcept;
int32_t adam_kernel(const capsule_forward_args* args, capsule_status* status) noexcept;

}  // namespace capsule::libtorch
