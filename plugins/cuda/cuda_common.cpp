#include "cuda_common.hpp"
#include "memory_pool.hpp"

#include "capsule/shape_math.hpp"

#include <numeric>

namespace capsule::cuda {

std::string cuda_error_text(cudaError_t error, const std::string& what) {
    return what + ": " + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")";
}

void check_cuda(cudaError_t error, const std::string& what) {
    if (error == cudaSuccess) return;
    throw KernelError(error == cudaErrorMemoryAllocation ? CAPSULE_ERROR_OUT_OF_MEMORY
                                                         : CAPSULE_ERROR_DEVICE,
                      cuda_error_text(error, what));
}

Dims dims_of(const Tensor& t) {
    if (t.view->rank == 0) return {};
    return Dims(t.view->shape, t.view->shape + t.view->rank);
}

std::string dims_text(const Dims& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

int64_t element_count(const Dims& dims) {
    return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

const char* dtype_name(int32_t dtype) {
    switch (dtype) {
        case CAPSULE_DTYPE_FLOAT32: return "float32";
        case CAPSULE_DTYPE_FLOAT64: return "float64";
        case CAPSULE_DTYPE_INT64: return "int64";
        case CAPSULE_DTYPE_BOOL: return "bool";
        default: return "unknown";
    }
}

namespace {

const char* device_name(int32_t device) {
    switch (device) {
        case CAPSULE_DEVICE_CPU: return "cpu";
        case CAPSULE_DEVICE_CUDA: return "cuda";
        case CAPSULE_DEVICE_ROCM: return "rocm";
        case CAPSULE_DEVICE_METAL: return "metal";
        case CAPSULE_DEVICE_WASM: return "wasm";
        case CAPSULE_DEVICE_TPU: return "tpu";
        case CAPSULE_DEVICE_TRAINIUM: return "trainium";
        case CAPSULE_DEVICE_CUSTOM: return "custom";
        case CAPSULE_DEVICE_EXTERNAL: return "external";
        default: return "unknown";
    }
}

}  // namespace

void require_cuda_tensor(const Tensor& t, const std::string& what) {
    const capsule_tensor_view* v = t.view;
    plugin::require(v != nullptr, what + " is missing");
    if (v->dtype != CAPSULE_DTYPE_FLOAT32 && v->dtype != CAPSULE_DTYPE_FLOAT64 && v->device == CAPSULE_DEVICE_CUDA)
        throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                          what + " has dtype " + dtype_name(v->dtype) +
                              "; native_cuda kernels support float32 and float64");
    require_cuda_layout(t, what);
}

void require_cuda_layout(const Tensor& t, const std::string& what) {
    const capsule_tensor_view* v = t.view;
    plugin::require(v != nullptr, what + " is missing");
    if (v->device != CAPSULE_DEVICE_CUDA)
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          what + " is a " + device_name(v->device) +
                              " tensor; native_cuda kernels take CUDA tensors");
    plugin::require(v->rank >= 0 && (v->rank == 0 || v->shape != nullptr),
                    what + " has an invalid rank or no shape");
    int64_t expected_stride = 1;
    for (int d = v->rank - 1; d >= 0; --d) {
        plugin::require(v->shape[d] >= 0, what + " has a negative dimension");
        if (v->strides && v->shape[d] > 1 && v->strides[d] != expected_stride)
            throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                              what + " is not row-major contiguous (dimension " +
                                  std::to_string(d) + " has stride " +
                                  std::to_string(v->strides[d]) + ", expected " +
                                  std::to_string(expected_stride) + ")");
        expected_stride *= v->shape[d];
    }
    plugin::require(v->data != nullptr || t.numel() == 0, what + " has no device memory");
}

capsule_dtype common_float_dtype(std::initializer_list<std::pair<Tensor, const char*>> tensors) {
    const auto& first = *tensors.begin();
    for (const auto& [t, name] : tensors)
        if (t.view->dtype != first.first.view->dtype)
            throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                              std::string(name) + " has dtype " + dtype_name(t.view->dtype) +
                                  " but " + first.second + " has " +
                                  dtype_name(first.first.view->dtype));
    return first.first.dtype();
}

void require_shape(const Tensor& t, const Dims& expected, const std::string& what) {
    const Dims got = dims_of(t);
    if (got != expected)
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          what + " has shape " + dims_text(got) + ", expected " +
                              dims_text(expected));
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
    Dims out(std::max(a.size(), b.size()));
    if (broadcast_into(a, b, out) >= 0)
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "shapes " + dims_text(a) + " and " + dims_text(b) + " do not broadcast");
    return out;
}

namespace {

Dims pad_front(const Dims& d, size_t rank) {
    Dims out(rank - d.size(), 1);
    out.insert(out.end(), d.begin(), d.end());
    return out;
}

[[noreturn]] void too_many_dimensions(const char* what) {
    throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                      std::string(what) + " needs more than " + std::to_string(kMaxLayoutRank) +
                          " alternating broadcast dimensions");
}

}  // namespace

capsule_dtype require_unary_grads(const Tensor& x, const Tensor& gy, const Tensor& gx, const Dims& gy_shape) {
    require_cuda_tensor(x, "input 0");
    require_cuda_tensor(gy, "grad output");
    require_cuda_tensor(gx, "grad input 0");
    const auto dtype = common_float_dtype({{x, "input 0"}, {gy, "grad output"}, {gx, "grad input 0"}});
    require_shape(gy, gy_shape, "grad output");
    require_shape(gx, dims_of(x), "grad input 0");
    return dtype;
}

BroadcastLayout broadcast_layout(const Dims& a0, const Dims& b0, const Dims& out) {
    const Dims a = pad_front(a0, out.size()), b = pad_front(b0, out.size());
    struct Group { int64_t size; bool a_broadcast, b_broadcast; };
    std::vector<Group> groups;
    for (size_t d = 0; d < out.size(); ++d) {
        if (out[d] == 1) continue;
        const bool ab = a[d] != out[d], bb = b[d] != out[d];
        if (!groups.empty() && groups.back().a_broadcast == ab && groups.back().b_broadcast == bb)
            groups.back().size *= out[d];
        else
            groups.push_back({out[d], ab, bb});
    }
    BroadcastLayout l;
    l.same_shape = true;
    for (const auto& g : groups) l.same_shape = l.same_shape && !g.a_broadcast && !g.b_broadcast;
    if (l.same_shape) {  // linear indexing over all elements
        l.rank = 1;
        l.shape[0] = element_count(out);
        l.a_strides[0] = l.b_strides[0] = 1;
        return l;
    }
    if (groups.size() > static_cast<size_t>(kMaxLayoutRank)) too_many_dimensions("broadcasting");
    l.rank = static_cast<int>(groups.size());
    int64_t sa = 1, sb = 1;
    for (int d = l.rank - 1; d >= 0; --d) {
        const auto& g = groups[d];
        l.shape[d] = g.size;
        l.a_strides[d] = g.a_broadcast ? 0 : sa;
        l.b_strides[d] = g.b_broadcast ? 0 : sb;
        if (!g.a_broadcast) sa *= g.size;
        if (!g.b_broadcast) sb *= g.size;
    }
    return l;
}

ReduceLayout reduce_layout(const Dims& source, const Dims& target0) {
    if (target0.size() > source.size())
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "cannot sum " + dims_text(source) + " onto " + dims_text(target0));
    const Dims target = pad_front(target0, source.size());
    struct Group { int64_t size, stride; bool reduced; };
    std::vector<Group> groups;  // from the innermost dimension outwards
    int64_t stride = 1;
    for (size_t i = source.size(); i-- > 0;) {
        if (target[i] != 1 && target[i] != source[i])
            throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                              "cannot sum " + dims_text(source) + " onto " + dims_text(target0));
        if (source[i] != 1) {
            const bool reduced = target[i] == 1;
            if (!groups.empty() && groups.back().reduced == reduced)
                groups.back().size *= source[i];
            else
                groups.push_back({source[i], stride, reduced});
        }
        stride *= source[i];
    }
    ReduceLayout l;
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
        if (it->reduced) {
            if (l.reduced_rank == kMaxLayoutRank) too_many_dimensions("summing onto a shape");
            l.reduced_sizes[l.reduced_rank] = it->size;
            l.reduced_strides[l.reduced_rank++] = it->stride;
            l.reduced_count *= it->size;
        } else {
            if (l.kept_rank == kMaxLayoutRank) too_many_dimensions("summing onto a shape");
            l.kept_sizes[l.kept_rank] = it->size;
            l.kept_strides[l.kept_rank++] = it->stride;
            l.target_count *= it->size;
        }
    }
    return l;
}

Scratch::Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    check_cuda(pool_allocate(&pointer_, bytes, stream),
               "allocating " + std::to_string(bytes) + " bytes of scratch from the device's memory pool");
}

Scratch::~Scratch() { pool_release(pointer_, stream_); }

DeviceScalar::DeviceScalar(capsule_dtype dtype, double value, cudaStream_t stream)
    : memory_(dtype_bytes(dtype), stream) {
    const float single = static_cast<float>(value);
    // A copy from pageable host memory returns once it has staged the value (CUDA's API
    // synchronization behaviour), so the stack value may go.
    check_cuda(cudaMemcpyAsync(memory_.get(), dtype == CAPSULE_DTYPE_FLOAT64 ? static_cast<const void*>(&value) : &single,
                               dtype_bytes(dtype), cudaMemcpyHostToDevice, stream),
               "copying a scalar to the device");
}

}  // namespace capsule::cuda
