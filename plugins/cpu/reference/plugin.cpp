// The reference plugin's table: every capsule declared in reference.capsule.json, by name.
#include "dtypes.hpp"
#include "halves_in_float.hpp"
#include "kernels.hpp"
#include "parallel.hpp"

namespace capsule::reference {
namespace {

using plugin::backward_entry;
using plugin::forward_entry;
using plugin::kernel;

// The GEMM-based, pooling and elementwise kernels keep the intra-op thread count their node was
// granted (parallel.hpp).
constexpr capsule_prepare_fn kThreadGrant = plugin::prepare_entry<ThreadGrant, prepare_thread_grant>;
constexpr capsule_release_fn kReleaseGrant = plugin::release_entry<ThreadGrant>;

// The dtypes each kernel implements (dtypes.hpp; the planner hands a kernel only these). Kernels
// without a mask take ABI 1.0's float32, float64, int64 and bool (the logical ops, on bool).
constexpr uint64_t kMoves = kAllDtypes;  // they move elements: every dtype (index tensors int64)
constexpr uint64_t kCompares = kAllDtypes;  // any operand dtype, bool result
// Kernels written for ABI 1.0's float32, float64, int64 and bool; float16 and bfloat16 operands
// compute in float32, rounded once (halves_in_float.hpp).
constexpr uint64_t kFloatCompute = kFloatDtypes | dtype_bit(CAPSULE_DTYPE_INT64) | kBoolDtype | kHalfDtypes;

constexpr capsule_kernel kKernels[] = {
    kernel("reference.rand_uniform", forward_entry<halves_in_float<rand_uniform_forward>>, nullptr, nullptr, nullptr, kFloatCompute),
    kernel("reference.bernoulli_mask", forward_entry<halves_in_float<bernoulli_mask_forward>>, nullptr, nullptr, nullptr, kFloatCompute),
    kernel("reference.add", forward_entry<add_forward>, backward_entry<add_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.sub", forward_entry<sub_forward>, backward_entry<sub_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.mul", forward_entry<mul_forward>, backward_entry<mul_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.scale", forward_entry<scale_forward>, backward_entry<scale_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.abs", forward_entry<abs_forward>, backward_entry<abs_backward>, kThreadGrant, kReleaseGrant, kOrdered),
    kernel("reference.sqrt", forward_entry<sqrt_forward>, backward_entry<sqrt_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.clamp", forward_entry<clamp_forward>, backward_entry<clamp_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.max", forward_entry<max_forward>, backward_entry<max_backward>, kThreadGrant, kReleaseGrant, kOrdered),
    kernel("reference.min", forward_entry<min_forward>, backward_entry<min_backward>, kThreadGrant, kReleaseGrant, kOrdered),
    kernel("reference.relu", forward_entry<relu_forward>, backward_entry<relu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.gelu", forward_entry<gelu_forward>, backward_entry<gelu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.sigmoid", forward_entry<sigmoid_forward>, backward_entry<sigmoid_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.tanh", forward_entry<tanh_forward>, backward_entry<tanh_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.softplus", forward_entry<softplus_forward>, backward_entry<softplus_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.exp", forward_entry<exp_forward>, backward_entry<exp_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.log", forward_entry<log_forward>, backward_entry<log_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.sin", forward_entry<sin_forward>, backward_entry<sin_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.cos", forward_entry<cos_forward>, backward_entry<cos_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.inv", forward_entry<inv_forward>, backward_entry<inv_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.safe_log", forward_entry<safe_log_forward>, backward_entry<safe_log_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.log_softmax", forward_entry<halves_in_float<log_softmax_forward>>, backward_entry<halves_in_float_backward<log_softmax_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.softmax", forward_entry<halves_in_float<softmax_forward>>, backward_entry<halves_in_float_backward<softmax_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.sum", forward_entry<halves_in_float<sum_forward>>, backward_entry<halves_in_float_backward<sum_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.reduce_sum", forward_entry<halves_in_float<reduce_sum_forward>>, backward_entry<halves_in_float_backward<reduce_sum_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.reduce_mean", forward_entry<halves_in_float<reduce_mean_forward>>, backward_entry<halves_in_float_backward<reduce_mean_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.flatten", forward_entry<flatten_forward>, backward_entry<flatten_backward>, nullptr, nullptr, kMoves),
    kernel("reference.reshape", forward_entry<reshape_forward>, backward_entry<reshape_backward>, nullptr, nullptr, kMoves),
    kernel("reference.permute", forward_entry<permute_forward>, backward_entry<permute_backward>, nullptr, nullptr, kMoves),
    kernel("reference.transpose2d", forward_entry<transpose2d_forward>, backward_entry<transpose2d_backward>, nullptr, nullptr, kMoves),
    kernel("reference.swapAdjacentAtDepth", forward_entry<swapAdjacentAtDepth_forward>, backward_entry<swapAdjacentAtDepth_backward>, nullptr, nullptr, kMoves),
    kernel("reference.transpose3d_first_to_last", forward_entry<transpose3d_first_to_last_forward>, backward_entry<transpose3d_first_to_last_backward>, nullptr, nullptr, kMoves),
    kernel("reference.transpose3d_last_to_first", forward_entry<transpose3d_last_to_first_forward>, backward_entry<transpose3d_last_to_first_backward>, nullptr, nullptr, kMoves),
    kernel("reference.transpose3d_last_two", forward_entry<transpose3d_last_two_forward>, backward_entry<transpose3d_last_two_backward>, nullptr, nullptr, kMoves),
    kernel("reference.broadcastTo", forward_entry<broadcastTo_forward>, backward_entry<broadcastTo_backward>, nullptr, nullptr, kMoves),
    kernel("reference.concat_vectors", forward_entry<concat_vectors_forward>, backward_entry<concat_vectors_backward>, nullptr, nullptr, kMoves),
    kernel("reference.concat_leading_axis", forward_entry<concat_leading_axis_forward>, backward_entry<concat_leading_axis_backward>, nullptr, nullptr, kMoves),
    kernel("reference.slice_leading_axis_range", forward_entry<slice_leading_axis_range_forward>, backward_entry<slice_leading_axis_range_backward>, nullptr, nullptr, kMoves),
    kernel("reference.gather_scalar", forward_entry<halves_in_float<gather_scalar_forward>>, backward_entry<halves_in_float_backward<gather_scalar_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.gather_scalar_nat", forward_entry<halves_in_float<gather_scalar_nat_forward>>, backward_entry<halves_in_float_backward<gather_scalar_nat_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.gather_row", forward_entry<halves_in_float<gather_row_forward>>, backward_entry<halves_in_float_backward<gather_row_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.gather_vec_nat", forward_entry<halves_in_float<gather_vec_nat_forward>>, backward_entry<halves_in_float_backward<gather_vec_nat_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.gather_rows_nat", forward_entry<halves_in_float<gather_rows_nat_forward>>, backward_entry<halves_in_float_backward<gather_rows_nat_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.scatter_add_vec", forward_entry<halves_in_float<scatter_add_vec_forward>>, backward_entry<halves_in_float_backward<scatter_add_vec_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.scatter_add_row", forward_entry<halves_in_float<scatter_add_row_forward>>, backward_entry<halves_in_float_backward<scatter_add_row_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.matmul", forward_entry<halves_in_float<matmul_forward>>, backward_entry<halves_in_float_backward<matmul_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.bmm", forward_entry<halves_in_float<bmm_forward>>, backward_entry<halves_in_float_backward<bmm_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.det", forward_entry<halves_in_float<det_forward>>, backward_entry<halves_in_float_backward<det_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.linear", forward_entry<halves_in_float<linear_forward>>, backward_entry<halves_in_float_backward<linear_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.mse_loss", forward_entry<halves_in_float<mse_loss_forward>>, backward_entry<halves_in_float_backward<mse_loss_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.layer_norm", forward_entry<halves_in_float<layer_norm_forward>>, backward_entry<halves_in_float_backward<layer_norm_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.batch_norm", forward_entry<halves_in_float<batch_norm_forward>>, backward_entry<halves_in_float_backward<batch_norm_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.batchnorm_channel_first", forward_entry<halves_in_float<batchnorm_channel_first_forward>>, backward_entry<halves_in_float_backward<batchnorm_channel_first_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.conv", forward_entry<halves_in_float<conv_forward>>, backward_entry<halves_in_float_backward<conv_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.conv2d", forward_entry<halves_in_float<conv2d_forward>>, backward_entry<halves_in_float_backward<conv2d_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.conv_transpose", forward_entry<halves_in_float<conv_transpose_forward>>, backward_entry<halves_in_float_backward<conv_transpose_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.conv_transpose2d", forward_entry<halves_in_float<conv_transpose2d_forward>>, backward_entry<halves_in_float_backward<conv_transpose2d_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.max_pool", forward_entry<halves_in_float<max_pool_forward>>, backward_entry<halves_in_float_backward<max_pool_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.max_pool2d", forward_entry<halves_in_float<max_pool2d_forward>>, backward_entry<halves_in_float_backward<max_pool2d_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.max_pool2d_pad", forward_entry<halves_in_float<max_pool2d_pad_forward>>, backward_entry<halves_in_float_backward<max_pool2d_pad_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.smooth_max_pool", forward_entry<halves_in_float<smooth_max_pool_forward>>, backward_entry<halves_in_float_backward<smooth_max_pool_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.smooth_max_pool2d", forward_entry<halves_in_float<smooth_max_pool2d_forward>>, backward_entry<halves_in_float_backward<smooth_max_pool2d_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.avg_pool", forward_entry<halves_in_float<avg_pool_forward>>, backward_entry<halves_in_float_backward<avg_pool_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.avg_pool2d", forward_entry<halves_in_float<avg_pool2d_forward>>, backward_entry<halves_in_float_backward<avg_pool2d_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.avg_pool2d_pad", forward_entry<halves_in_float<avg_pool2d_pad_forward>>, backward_entry<halves_in_float_backward<avg_pool2d_pad_backward>>, kThreadGrant, kReleaseGrant, kFloatCompute),
    kernel("reference.fft_fno", forward_entry<halves_in_float<fft_fno_forward>>, backward_entry<halves_in_float_backward<fft_fno_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.selective_scan", forward_entry<halves_in_float<selective_scan_forward>>, backward_entry<halves_in_float_backward<selective_scan_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.scaled_dot_product_attention", forward_entry<halves_in_float<scaled_dot_product_attention_forward>>, backward_entry<halves_in_float_backward<scaled_dot_product_attention_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.div", forward_entry<div_forward>, backward_entry<div_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.pow", forward_entry<pow_forward>, backward_entry<pow_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.mod", forward_entry<mod_forward>, backward_entry<mod_backward>, kThreadGrant, kReleaseGrant, kOrdered),
    kernel("reference.neg", forward_entry<neg_forward>, backward_entry<neg_backward>, kThreadGrant, kReleaseGrant, kNegates),
    kernel("reference.erf", forward_entry<erf_forward>, backward_entry<erf_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.where", forward_entry<where_forward>, backward_entry<where_backward>, nullptr, nullptr, kMoves),
    kernel("reference.concat", forward_entry<concat_forward>, backward_entry<concat_backward>, nullptr, nullptr, kMoves),
    kernel("reference.gather", forward_entry<gather_forward>, backward_entry<gather_backward>, nullptr, nullptr, kMoves),
    kernel("reference.gather_elements", forward_entry<gather_elements_forward>, backward_entry<gather_elements_backward>, nullptr, nullptr, kMoves),
    kernel("reference.scatter_elements", forward_entry<halves_in_float<scatter_elements_forward>>, backward_entry<halves_in_float_backward<scatter_elements_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.slice", forward_entry<slice_forward>, backward_entry<slice_backward>, nullptr, nullptr, kMoves),
    kernel("reference.pad", forward_entry<pad_forward>, backward_entry<pad_backward>, nullptr, nullptr, kMoves),
    kernel("reference.reduce_max", forward_entry<halves_in_float<reduce_max_forward>>, backward_entry<halves_in_float_backward<reduce_max_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.reduce_min", forward_entry<halves_in_float<reduce_min_forward>>, backward_entry<halves_in_float_backward<reduce_min_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.reduce_prod", forward_entry<halves_in_float<reduce_prod_forward>>, backward_entry<halves_in_float_backward<reduce_prod_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.argmax", forward_entry<argmax_forward>, nullptr, nullptr, nullptr, kOrdered),
    kernel("reference.argmin", forward_entry<argmin_forward>, nullptr, nullptr, nullptr, kOrdered),
    kernel("reference.hardmax", forward_entry<halves_in_float<hardmax_forward>>, backward_entry<halves_in_float_backward<hardmax_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.top_k", forward_entry<top_k_forward>, nullptr, nullptr, nullptr, kOrdered),
    kernel("reference.non_max_suppression", forward_entry<non_max_suppression_forward>, nullptr, nullptr, nullptr, kFloatDtypes | dtype_bit(CAPSULE_DTYPE_INT64)),
    kernel("reference.non_zero", forward_entry<non_zero_forward>, nullptr, nullptr, nullptr, kAllDtypes),
    kernel("reference.floor", forward_entry<floor_forward>, backward_entry<floor_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.ceil", forward_entry<ceil_forward>, backward_entry<ceil_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.sign", forward_entry<sign_forward>, backward_entry<sign_backward>, kThreadGrant, kReleaseGrant, kArithmetic),
    kernel("reference.tan", forward_entry<tan_forward>, backward_entry<tan_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.asin", forward_entry<asin_forward>, backward_entry<asin_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.acos", forward_entry<acos_forward>, backward_entry<acos_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.atan", forward_entry<atan_forward>, backward_entry<atan_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.sinh", forward_entry<sinh_forward>, backward_entry<sinh_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.cosh", forward_entry<cosh_forward>, backward_entry<cosh_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.asinh", forward_entry<asinh_forward>, backward_entry<asinh_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.acosh", forward_entry<acosh_forward>, backward_entry<acosh_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.atanh", forward_entry<atanh_forward>, backward_entry<atanh_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.leaky_relu", forward_entry<leaky_relu_forward>, backward_entry<leaky_relu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.elu", forward_entry<elu_forward>, backward_entry<elu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.selu", forward_entry<selu_forward>, backward_entry<selu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.celu", forward_entry<celu_forward>, backward_entry<celu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.hardsigmoid", forward_entry<hardsigmoid_forward>, backward_entry<hardsigmoid_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.hardswish", forward_entry<hardswish_forward>, backward_entry<hardswish_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.softsign", forward_entry<softsign_forward>, backward_entry<softsign_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.thresholded_relu", forward_entry<thresholded_relu_forward>, backward_entry<thresholded_relu_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.shrink", forward_entry<shrink_forward>, backward_entry<shrink_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.is_inf", forward_entry<halves_in_float<is_inf_forward>>, nullptr, nullptr, nullptr, kFloatCompute),
    kernel("reference.mish", forward_entry<mish_forward>, backward_entry<mish_backward>, kThreadGrant, kReleaseGrant, kFloating),
    kernel("reference.equal", forward_entry<equal_forward>, nullptr, nullptr, nullptr, kCompares),
    kernel("reference.less", forward_entry<less_forward>, nullptr, nullptr, nullptr, kCompares),
    kernel("reference.less_equal", forward_entry<less_equal_forward>, nullptr, nullptr, nullptr, kCompares),
    kernel("reference.greater", forward_entry<greater_forward>, nullptr, nullptr, nullptr, kCompares),
    kernel("reference.greater_equal", forward_entry<greater_equal_forward>, nullptr, nullptr, nullptr, kCompares),
    kernel("reference.logical_not", forward_entry<logical_not_forward>),
    kernel("reference.logical_and", forward_entry<logical_and_forward>),
    kernel("reference.logical_or", forward_entry<logical_or_forward>),
    kernel("reference.logical_xor", forward_entry<logical_xor_forward>),
    kernel("reference.cast", forward_entry<cast_forward>, backward_entry<cast_backward>, nullptr, nullptr, kAllDtypes),
    kernel("reference.cumsum", forward_entry<cumsum_forward>, backward_entry<cumsum_backward>, nullptr, nullptr, kFloatDtypes | kIntegerDtypes),
    kernel("reference.tile", forward_entry<tile_forward>, backward_entry<tile_backward>, nullptr, nullptr, kMoves),
    kernel("reference.triu", forward_entry<triu_forward>, backward_entry<triu_backward>, nullptr, nullptr, kMoves),
    kernel("reference.tril", forward_entry<tril_forward>, backward_entry<tril_backward>, nullptr, nullptr, kMoves),
    kernel("reference.cross_entropy", forward_entry<halves_in_float<cross_entropy_forward>>, backward_entry<halves_in_float_backward<cross_entropy_backward>>, nullptr, nullptr, kFloatCompute),
    kernel("reference.sgd", forward_entry<halves_in_float<sgd_forward>>, nullptr, nullptr, nullptr, kFloatCompute),
    kernel("reference.adam", forward_entry<halves_in_float<adam_forward>>, nullptr, nullptr, nullptr, kFloatCompute),
};

int32_t probe(capsule_status*) { return CAPSULE_OK; }  // the CPU is always usable

const capsule_plugin kPlugin{
    sizeof(capsule_plugin), CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR, "reference", "0.1.0",
    CAPSULE_DEVICE_CPU, nullptr, nullptr, &probe, kKernels, sizeof kKernels / sizeof kKernels[0],
    nullptr, &compiled_groups_extension.base, sizeof(capsule_kernel)};

}  // namespace

const capsule_kernel* find_kernel(std::string_view capsule_name) {
    for (const auto& k : kKernels)
        if (capsule_name == k.capsule_name) return &k;
    return nullptr;
}
}  // namespace capsule::reference

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    return host_major == CAPSULE_ABI_MAJOR ? &capsule::reference::kPlugin : nullptr;
}
