// The oneDNN plugin's kernel entries, one per capsule of onednn.capsule.json; each source file
// defines the entries of its family.
#pragma once

#include "common.hpp"

namespace capsule::onednn {

extern const capsule_kernel linear_kernel;       // linalg.cpp
extern const capsule_kernel matmul_kernel;
extern const capsule_kernel conv2d_kernel;       // conv_pool.cpp
extern const capsule_kernel max_pool2d_kernel;
extern const capsule_kernel max_pool2d_pad_kernel;
extern const capsule_kernel avg_pool2d_kernel;
extern const capsule_kernel avg_pool2d_pad_kernel;
extern const capsule_kernel relu_kernel;         // elementwise.cpp
extern const capsule_kernel gelu_kernel;
extern const capsule_kernel sigmoid_kernel;
extern const capsule_kernel tanh_kernel;
extern const capsule_kernel softmax_kernel;
extern const capsule_kernel log_softmax_kernel;
extern const capsule_kernel add_kernel;
extern const capsule_kernel sub_kernel;
extern const capsule_kernel mul_kernel;
extern const capsule_kernel batch_norm_kernel;

}  // namespace capsule::onednn
