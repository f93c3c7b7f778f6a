// linear's forward on cuBLASLt with the bias added in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS):
// one kernel instead of a GEMM and a broadcast addition over y.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "capsule/plugin_abi.h"

namespace capsule::cuda {

/// y [rows, out] = x [rows, in] · wᵀ (w [out, in]) + bias [out], all row-major contiguous of
/// `dtype` (float32 or float64, IEEE arithmetic: CUBLAS_COMPUTE_32F / 64F, no TF32), on `stream`.
/// Returns false, having enqueued nothing, when cuBLASLt offers no algorithm for these shapes,
/// dtype and pointer alignments (the caller then runs its GEMM and bias kernels); raises
/// KernelError (DEVICE, or OUT_OF_MEMORY) when cuBLASLt fails otherwise. Plans (descriptors and
/// the heuristic's algorithm) are cached per host thread, keyed by dtype, shapes and alignments.
bool lt_linear_with_bias(capsule_dtype dtype, cudaStream_t stream, int64_t rows, int64_t in, int64_t out,
                         const void* x, const void* w, const void* bias, void* y);

}  // namespace capsule::cuda
