// The reference plugin's table: every capsule declared in reference.capsule.json, by name.
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using plugin::backward_entry;
using plugin::forward_entry;
using plugin::kernel;

constexpr capsule_kernel kKernels[] = {
    kernel("reference.rand_uniform", forward_entry<rand_uniform_forward>),
    kernel("reference.bernoulli_mask", forward_entry<bernoulli_mask_forward>),
    kernel("reference.add", forward_entry<add_forward>, backward_entry<add_backward>),
    kernel("reference.sub", forward_entry<sub_forward>, backward_entry<sub_backward>),
    kernel("reference.mul", forward_entry<mul_forward>, backward_entry<mul_backward>),
    kernel("reference.scale", forward_entry<scale_forward>, backward_entry<scale_backward>),
    kernel("reference.abs", forward_entry<abs_forward>, backward_entry<abs_backward>),
    kernel("reference.sqrt", forward_entry<sqrt_forward>, backward_entry<sqrt_backward>),
    kernel("reference.clamp", forward_entry<clamp_forward>, backward_entry<clamp_backward>),
    kernel("reference.max", forward_entry<max_forward>, backward_entry<max_backward>),
    kernel("reference.min", forward_entry<min_forward>, backward_entry<min_backward>),
    kernel("reference.relu", forward_entry<relu_forward>, backward_entry<relu_backward>),
    kernel("reference.gelu", forward_entry<gelu_forward>, backward_entry<gelu_backward>),
    kernel("reference.sigmoid", forward_entry<sigmoid_forward>, backward_entry<sigmoid_backward>),
    kernel("reference.tanh", forward_entry<tanh_forward>, backward_entry<tanh_backward>),
    kernel("reference.softplus", forward_entry<softplus_forward>, backward_entry<softplus_backward>),
    kernel("reference.exp", forward_entry<exp_forward>, backward_entry<exp_backward>),
    kernel("reference.log", forward_entry<log_forward>, backward_entry<log_backward>),
    kernel("reference.sin", forward_entry<sin_forward>, backward_entry<sin_backward>),
    kernel("reference.cos", forward_entry<cos_forward>, backward_entry<cos_backward>),
    kernel("reference.inv", forward_entry<inv_forward>, backward_entry<inv_backward>),
    kernel("reference.safe_log", forward_entry<safe_log_forward>, backward_entry<safe_log_backward>),
    kernel("reference.log_softmax", forward_entry<log_softmax_forward>, backward_entry<log_softmax_backward>),
    kernel("reference.softmax", forward_entry<softmax_forward>, backward_entry<softmax_backward>),
    kernel("reference.sum", forward_entry<sum_forward>, backward_entry<sum_backward>),
    kernel("reference.reduce_sum", forward_entry<reduce_sum_forward>, backward_entry<reduce_sum_backward>),
    kernel("reference.reduce_mean", forward_entry<reduce_mean_forward>, backward_entry<reduce_mean_backward>),
    kernel("reference.flatten", forward_entry<flatten_forward>, backward_entry<flatten_backward>),
    kernel("reference.reshape", forward_entry<reshape_forward>, backward_entry<reshape_backward>),
    kernel("reference.permute", forward_entry<permute_forward>, backward_entry<permute_backward>),
    kernel("reference.transpose2d", forward_entry<transpose2d_forward>, backward_entry<transpose2d_backward>),
    kernel("reference.swapAdjacentAtDepth", forward_entry<swapAdjacentAtDepth_forward>, backward_entry<swapAdjacentAtDepth_backward>),
    kernel("reference.transpose3d_first_to_last", forward_entry<transpose3d_first_to_last_forward>, backward_entry<transpose3d_first_to_last_backward>),
    kernel("reference.transpose3d_last_to_first", forward_entry<transpose3d_last_to_first_forward>, backward_entry<transpose3d_last_to_first_backward>),
    kernel("reference.transpose3d_last_two", forward_entry<transpose3d_last_two_forward>, backward_entry<transpose3d_last_two_backward>),
    kernel("reference.broadcastTo", forward_entry<broadcastTo_forward>, backward_entry<broadcastTo_backward>),
    kernel("reference.concat_vectors", forward_entry<concat_vectors_forward>, backward_entry<concat_vectors_backward>),
    kernel("reference.concat_leading_axis", forward_entry<concat_leading_axis_forward>, backward_entry<concat_leading_axis_backward>),
    kernel("reference.slice_leading_axis_range", forward_entry<slice_leading_axis_range_forward>, backward_entry<slice_leading_axis_range_backward>),
    kernel("reference.gather_scalar", forward_entry<gather_scalar_forward>, backward_entry<gather_scalar_backward>),
    kernel("reference.gather_scalar_nat", forward_entry<gather_scalar_nat_forward>, backward_entry<gather_scalar_nat_backward>),
    kernel("reference.gather_row", forward_entry<gather_row_forward>, backward_entry<gather_row_backward>),
    kernel("reference.gather_vec_nat", forward_entry<gather_vec_nat_forward>, backward_entry<gather_vec_nat_backward>),
    kernel("reference.gather_rows_nat", forward_entry<gather_rows_nat_forward>, backward_entry<gather_rows_nat_backward>),
    kernel("reference.scatter_add_vec", forward_entry<scatter_add_vec_forward>, backward_entry<scatter_add_vec_backward>),
    kernel("reference.scatter_add_row", forward_entry<scatter_add_row_forward>, backward_entry<scatter_add_row_backward>),
    kernel("reference.matmul", forward_entry<matmul_forward>, backward_entry<matmul_backward>),
    kernel("reference.bmm", forward_entry<bmm_forward>, backward_entry<bmm_backward>),
    kernel("reference.linear", forward_entry<linear_forward>, backward_entry<linear_backward>),
    kernel("reference.mse_loss", forward_entry<mse_loss_forward>, backward_entry<mse_loss_backward>),
    kernel("reference.layer_norm", forward_entry<layer_norm_forward>, backward_entry<layer_norm_backward>),
    kernel("reference.batch_norm", forward_entry<batch_norm_forward>, backward_entry<batch_norm_backward>),
    kernel("reference.batchnorm_channel_first", forward_entry<batchnorm_channel_first_forward>, backward_entry<batchnorm_channel_first_backward>),
    kernel("reference.conv", forward_entry<conv_forward>, backward_entry<conv_backward>),
    kernel("reference.conv2d", forward_entry<conv2d_forward>, backward_entry<conv2d_backward>),
    kernel("reference.conv_transpose", forward_entry<conv_transpose_forward>, backward_entry<conv_transpose_backward>),
    kernel("reference.conv_transpose2d", forward_entry<conv_transpose2d_forward>, backward_entry<conv_transpose2d_backward>),
    kernel("reference.max_pool", forward_entry<max_pool_forward>, backward_entry<max_pool_backward>),
    kernel("reference.max_pool2d", forward_entry<max_pool2d_forward>, backward_entry<max_pool2d_backward>),
    kernel("reference.max_pool2d_pad", forward_entry<max_pool2d_pad_forward>, backward_entry<max_pool2d_pad_backward>),
    kernel("reference.smooth_max_pool", forward_entry<smooth_max_pool_forward>, backward_entry<smooth_max_pool_backward>),
    kernel("reference.smooth_max_pool2d", forward_entry<smooth_max_pool2d_forward>, backward_entry<smooth_max_pool2d_backward>),
    kernel("reference.avg_pool", forward_entry<avg_pool_forward>, backward_entry<avg_pool_backward>),
    kernel("reference.avg_pool2d", forward_entry<avg_pool2d_forward>, backward_entry<avg_pool2d_backward>),
    kernel("reference.avg_pool2d_pad", forward_entry<avg_pool2d_pad_forward>, backward_entry<avg_pool2d_pad_backward>),
    kernel("reference.fft_fno", forward_entry<fft_fno_forward>, backward_entry<fft_fno_backward>),
    kernel("reference.selective_scan", forward_entry<selective_scan_forward>, backward_entry<selective_scan_backward>),
    kernel("reference.scaled_dot_product_attention", forward_entry<scaled_dot_product_attention_forward>, backward_entry<scaled_dot_product_attention_backward>),
    kernel("reference.div", forward_entry<div_forward>, backward_entry<div_backward>),
    kernel("reference.pow", forward_entry<pow_forward>, backward_entry<pow_backward>),
    kernel("reference.neg", forward_entry<neg_forward>, backward_entry<neg_backward>),
    kernel("reference.erf", forward_entry<erf_forward>, backward_entry<erf_backward>),
    kernel("reference.where", forward_entry<where_forward>, backward_entry<where_backward>),
    kernel("reference.concat", forward_entry<concat_forward>, backward_entry<concat_backward>),
    kernel("reference.gather", forward_entry<gather_forward>, backward_entry<gather_backward>),
    kernel("reference.slice", forward_entry<slice_forward>, backward_entry<slice_backward>),
    kernel("reference.pad", forward_entry<pad_forward>, backward_entry<pad_backward>),
};

int32_t probe(capsule_status*) { return CAPSULE_OK; }  // the CPU is always usable

const capsule_plugin kPlugin{
    sizeof(capsule_plugin), CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR, "reference", "0.1.0",
    CAPSULE_DEVICE_CPU, nullptr, nullptr, &probe, kKernels, sizeof kKernels / sizeof kKernels[0],
    nullptr, nullptr};

}  // namespace
}  // namespace capsule::reference

extern "C" CAPSULE_EXPORT const capsule_plugin* capsule_plugin_entry(uint32_t host_major, uint32_t) {
    return host_major == CAPSULE_ABI_MAJOR ? &capsule::reference::kPlugin : nullptr;
}
