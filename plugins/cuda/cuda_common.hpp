// Host-side helpers shared by the native CUDA plugin's ABI glue: CUDA errors as KernelErrors,
// the stream a call runs on, tensor guards, broadcast and reduction layouts, and stream-ordered
// scratch memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "capsule/plugin.hpp"
#include "launch.hpp"

namespace capsule::cuda {

using plugin::BackwardCall;
using plugin::ForwardCall;
using plugin::KernelError;
using plugin::Tensor;
using Dims = std::vector<int64_t>;

/// "<what>: <CUDA message> (<error name>)", e.g.
/// "cudaMalloc of 64 bytes: out of memory (cudaErrorMemoryAllocation)".
std::string cuda_error_text(cudaError_t error, const std::string& what);

/// Raises KernelError (CAPSULE_ERROR_OUT_OF_MEMORY for allocation failures, else
/// CAPSULE_ERROR_DEVICE) unless `error` is cudaSuccess.
void check_cuda(cudaError_t error, const std::string& what);

/// The stream of the call: the host's when given, else this host thread's default stream
/// (cudaStreamPerThread), so that calls from different host threads do not serialise on the
/// legacy default stream. Synchronous copies of the device interface still order after it.
inline cudaStream_t stream_of(void* stream) {
    return stream ? static_cast<cudaStream_t>(stream) : cudaStreamPerThread;
}

/// "float32", "float64", "int64", "bool" (the dtypes native_cuda kernels meet), else "unknown".
const char* dtype_name(int32_t dtype);
Dims dims_of(const Tensor& t);
std::string dims_text(const Dims& dims);
int64_t element_count(const Dims& dims);

/// Checks that `t` is a CUDA tensor of a float dtype with row-major contiguous strides and
/// device memory (unless empty); `what` names it in messages ("input 0", "output").
void require_cuda_tensor(const Tensor& t, const std::string& what);
/// The same checks without the dtype's: a CUDA tensor, row-major contiguous, with device memory.
void require_cuda_layout(const Tensor& t, const std::string& what);
/// The float dtype shared by `tensors` (all already checked with require_cuda_tensor).
capsule_dtype common_float_dtype(std::initializer_list<std::pair<Tensor, const char*>> tensors);
/// The checks of a one-input backward call: x, gy ("grad output") and gx ("grad input 0") CUDA
/// tensors of one float dtype, gy of shape `gy_shape`, gx of x's shape; returns that dtype.
capsule_dtype require_unary_grads(const Tensor& x, const Tensor& gy, const Tensor& gx, const Dims& gy_shape);
/// Raises INVALID_ARGUMENT unless `t` has shape `expected`.
void require_shape(const Tensor& t, const Dims& expected, const std::string& what);

/// NumPy broadcast of two shapes; raises INVALID_ARGUMENT when they do not broadcast.
Dims broadcast_shapes(const Dims& a, const Dims& b);
/// Layout for out = a (op) b, out = broadcast_shapes(a, b).
BroadcastLayout broadcast_layout(const Dims& a, const Dims& b, const Dims& out);
/// Layout summing `source` onto `target` (target broadcasts to source).
ReduceLayout reduce_layout(const Dims& source, const Dims& target);

/// Device memory from the plugin's caching pool (memory_pool.hpp), released on scope exit,
/// allocated and freed in the order of `stream`.
class Scratch {
public:
    Scratch(size_t bytes, cudaStream_t stream);
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void* get() const { return pointer_; }

private:
    void* pointer_ = nullptr;
    cudaStream_t stream_;
};

inline size_t dtype_bytes(capsule_dtype dtype) { return dtype == CAPSULE_DTYPE_FLOAT64 ? 8 : 4; }

/// One value of float dtype `dtype` in stream-ordered device memory (an operand to broadcast).
class DeviceScalar {
public:
    DeviceScalar(capsule_dtype dtype, double value, cudaStream_t stream);
    const void* get() const { return memory_.get(); }

private:
    Scratch memory_;
};

}  // namespace capsule::cuda
