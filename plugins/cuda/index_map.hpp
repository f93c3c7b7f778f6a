// Launchers of the element-moving kernels (index_map.cu): permutations, slices and padding as one
// per-dimension index map, and gather along an axis. Called by index_ops.cpp.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "capsule/plugin_abi.h"
#include "launch.hpp"

namespace capsule::cuda {

enum class PadMode : int { none, constant, reflect, edge };

/// Output element at coordinates c (row-major over out_shape) reads input element
/// base + Σ_d i_d · in_stride[d] with i_d = c_d − begin[d]. With a pad mode, an i_d outside
/// [0, in_size[d]) reads `value` (constant), the nearest edge (edge) or the mirror image without
/// repeating the edge (reflect). Permutations: in_stride = the input's strides in the output's
/// dimension order; slices: base = the first element, in_stride = stride · step.
struct IndexMap {
    int rank = 0;
    PadMode mode = PadMode::none;
    double value = 0;
    int64_t base = 0;
    int64_t out_shape[kMaxLayoutRank] = {};
    int64_t in_size[kMaxLayoutRank] = {};
    int64_t in_stride[kMaxLayoutRank] = {};
    int64_t begin[kMaxLayoutRank] = {};
};

/// Gather along one axis of x viewed as [outer, axis, inner]: y [outer, count, inner] with
/// y[p, k, q] = x[p, indices[k] (+ axis when negative), q].
struct GatherShape {
    int64_t outer = 1, axis = 0, count = 0, inner = 1;
};

/// y[o] = x[source(o)] for the n output elements.
cudaError_t launch_index_map_forward(capsule_dtype dtype, const IndexMap& map, const void* x, void* y, int64_t n,
                                     cudaStream_t stream);
/// gx[source(o)] += gy[o] (gx must hold zeros first).
cudaError_t launch_index_map_backward(capsule_dtype dtype, const IndexMap& map, const void* gy, void* gx, int64_t n,
                                      cudaStream_t stream);
/// y = gather(x, indices); an index outside [−axis, axis) sets *bad to 1 (its outputs are NaN).
cudaError_t launch_gather_forward(capsule_dtype dtype, const GatherShape& shape, const void* x, const int64_t* indices,
                                  void* y, int* bad, int64_t n, cudaStream_t stream);
/// gx[p, indices[k], q] += gy[p, k, q] (gx must hold zeros first; repeated indices accumulate).
cudaError_t launch_gather_backward(capsule_dtype dtype, const GatherShape& shape, const int64_t* indices, const void* gy,
                                   void* gx, int* bad, int64_t n, cudaStream_t stream);

}  // namespace capsule::cuda
