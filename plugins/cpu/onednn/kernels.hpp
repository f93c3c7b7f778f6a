// The oneDNN plugin's kernel entries, one per capsule of onednn.capsule.json; each source file
// defines the entries of its family.
#pragma once

#include "common.hpp"

namespace capsule::onednn {

extern const capsule_kernel linear_kernel;       // linalg.cpp
extern const capsule_kernel matmul_kernel;
extern const capsule_kernel bmm_kernel;
extern const capsule_kernel conv2d_kernel;       // conv_pool.cpp
extern const capsule_kernel max_pool2d_kernel;
extern const capsule_kernel max_pool2d_pad_kernel;
extern const capsule_kernel avg_pool2d_kernel;
extern const capsule_kernel avg_pool2d_pad_kernel;
extern const capsule_kernel relu_kernel;         // elementwise.cpp
extern const capsule_kernel gelu_kernel;
extern const capsule_kernel sigmoid_kernel;
extern const capsule_kernel tanh_kernel;
extern const capsule_kernel clamp_kernel;
extern const capsule_kernel abs_kernel;
extern const capsule_kernel sqrt_kernel;
extern const capsule_kernel leaky_relu_kernel;
extern const capsule_kernel hardswish_kernel;
extern const capsule_kernel softmax_kernel;
extern const capsule_kernel log_softmax_kernel;
extern const capsule_kernel add_kernel;
extern const capsule_kernel sub_kernel;
extern const capsule_kernel mul_kernel;
extern const capsule_kernel batch_norm_kernel;
extern const capsule_kernel concat_kernel;       // concat.cpp
extern const capsule_kernel layer_norm_kernel;   // layer_norm.cpp
extern const capsule_kernel conv_transpose2d_kernel;  // conv_transpose.cpp
extern const capsule_kernel reduce_mean_kernel;  // reduction.cpp

/// The kernel entry of a capsule of this plugin, or nullptr (plugin.cpp).
const capsule_kernel* find_kernel(std::string_view capsule_name);

/// Prepares a conv2d / linear / matmul node with `fusion` fused into its primitive: the state is
/// then used with that capsule's own forward and release (a forward call then passes the addend
/// as input 1 when `fusion.add_input1`). Returns nullptr when the node's shapes take a path
/// without a primitive (an empty result, a zero inner dimension), where nothing can be fused, and
/// when the fusion asks for an addend that the capsule does not take (linear, matmul) or that
/// oneDNN has no optimised convolution for. Raises what the capsule's prepare raises, and
/// dnnl::error.
void* prepare_conv2d_fused(const PrepareCall& call, const Fusion& fusion);  // conv_pool.cpp
void* prepare_linear_fused(const PrepareCall& call, const Fusion& fusion);  // linalg.cpp
void* prepare_matmul_fused(const PrepareCall& call, const Fusion& fusion);

/// The forward entry of `kernel` for a call whose input holds no NaN (nor infinity): relu, clamp
/// and the max pools skip the pass that gives NaN where oneDNN's primitive drops it
/// (elementwise.cpp run_keeping_nan, conv_pool.cpp fix_max_pool); nullptr for every other kernel.
capsule_forward_fn finite_input_forward(const capsule_kernel* kernel);      // plugin.cpp
capsule_forward_fn elementwise_finite_input_forward(const capsule_kernel* kernel);  // elementwise.cpp
capsule_forward_fn pool_finite_input_forward(const capsule_kernel* kernel);         // conv_pool.cpp

/// True when the prepared state of `kernel` computes in bfloat16 (fpmath bf16): conv2d
/// (conv_pool.cpp) and linear (linalg.cpp, linear_computes_in_bf16).
bool computes_in_bf16(const capsule_kernel* kernel, const void* state);
bool linear_computes_in_bf16(const capsule_kernel* kernel, const void* state);

/// True when the prepared state of `kernel` is a convolution computed by Winograd
/// (Fusion::winograd, conv_pool.cpp).
bool computes_winograd(const capsule_kernel* kernel, const void* state);

/// The compiled-groups extension (compiled_group.cpp).
extern const capsule_compiled_groups_extension compiled_groups_extension;

}  // namespace capsule::onednn
