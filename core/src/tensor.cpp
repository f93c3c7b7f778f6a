#include "capsule/tensor.hpp"

#include "kernel_binding.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "capsule/error.hpp"
#include "capsule/float16.hpp"

namespace capsule {

namespace {
constexpr std::size_t kAlignment = 64;

/// `v` truncated toward zero and wrapped modulo 2^bits into integer type T (as numpy's astype);
/// NaN, ±inf and |v| >= 2^64 give 0 rather than undefined behaviour.
template <typename T>
T integer_value(double v) {
    if (!(std::fabs(v) < 18446744073709551616.0)) return T{0};
    const auto magnitude = static_cast<std::uint64_t>(std::fabs(std::trunc(v)));  // < 2^64: defined
    return static_cast<T>(v < 0 ? std::uint64_t{0} - magnitude : magnitude);
}

std::shared_ptr<unsigned char> host_allocate(std::size_t bytes) {
    // Round up to the alignment (aligned_alloc requires it) and keep one byte for empty tensors.
    const std::size_t rounded = ((bytes + kAlignment - 1) / kAlignment + 1) * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (!p) throw Error(ErrorCode::other, "cannot allocate " + std::to_string(bytes) + " bytes of host memory for a tensor");
    std::memset(p, 0, rounded);
    return {static_cast<unsigned char*>(p), [](unsigned char* q) { std::free(q); }};
}
}  // namespace

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
    element_count(shape);  // raises unless every stride below fits in int64
    std::vector<std::int64_t> strides(shape.size());
    std::int64_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        strides[i] = stride;
        stride *= shape[i];
    }
    return strides;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
    Tensor t;
    t.dtype_ = dtype;
    const auto bytes = byte_size(shape, dtype);  // raises Error(input): negative dims, overflow
    t.numel_ = element_count(shape);
    t.shape_ = std::move(shape);
    t.storage_ = host_allocate(bytes);
    return t;
}

Tensor Tensor::from_values(DType dtype, Shape shape, const std::vector<double>& values) {
    Tensor t = zeros(dtype, std::move(shape));
    if (static_cast<std::int64_t>(values.size()) != t.numel_)
        throw Error(ErrorCode::input, "tensor of shape " + to_string(t.shape_) + " needs " +
                         std::to_string(t.numel_) + " values, got " +
                         std::to_string(values.size()));
    for (std::size_t i = 0; i < values.size(); ++i) {
        const double v = values[i];
        switch (dtype) {
            case DType::float32: t.values<float>()[i] = static_cast<float>(v); break;
            case DType::float64: t.values<double>()[i] = v; break;
            case DType::float16: t.values<std::uint16_t>()[i] = float16_from_double(v); break;
            case DType::bfloat16: t.values<std::uint16_t>()[i] = bfloat16_from_double(v); break;
            case DType::boolean: t.values<unsigned char>()[i] = v != 0.0; break;
            case DType::int64: t.values<std::int64_t>()[i] = integer_value<std::int64_t>(v); break;
            case DType::int32: t.values<std::int32_t>()[i] = integer_value<std::int32_t>(v); break;
            case DType::int16: t.values<std::int16_t>()[i] = integer_value<std::int16_t>(v); break;
            case DType::int8: t.values<std::int8_t>()[i] = integer_value<std::int8_t>(v); break;
            case DType::uint64: t.values<std::uint64_t>()[i] = integer_value<std::uint64_t>(v); break;
            case DType::uint32: t.values<std::uint32_t>()[i] = integer_value<std::uint32_t>(v); break;
            case DType::uint16: t.values<std::uint16_t>()[i] = integer_value<std::uint16_t>(v); break;
            case DType::uint8: t.values<std::uint8_t>()[i] = integer_value<std::uint8_t>(v); break;
        }
    }
    return t;
}

Tensor Tensor::on_device(DType dtype, Shape shape, Device device,
                         const capsule_device_interface& interface) {
    Tensor t;
    t.dtype_ = dtype;
    byte_size(shape, dtype);  // raises Error(input): negative dims, overflow
    t.numel_ = element_count(shape);
    t.shape_ = std::move(shape);
    t.device_ = device;
    void* p = nullptr;
    // Allocate at least one byte so that a defined tensor always has storage.
    auto failure = detail::call_plugin([&](capsule_status* st) {
        return interface.allocate(std::max<std::size_t>(t.nbytes(), 1), &p, st);
    });
    if (failure || !p)
        throw Error(ErrorCode::other, "device allocation of " + std::to_string(t.nbytes()) + " bytes on " +
                    std::string(to_string(device)) + " failed: " +
                    failure.value_or("the plugin returned no memory"));
    auto release = interface.release;
    t.storage_ = {static_cast<unsigned char*>(p), [release](unsigned char* q) { release(q); }};
    return t;
}

double Tensor::at(std::int64_t i) const {
    switch (dtype_) {
        case DType::float32: return values<float>()[i];
        case DType::float64: return values<double>()[i];
        case DType::int64: return static_cast<double>(values<std::int64_t>()[i]);
        case DType::boolean: return values<unsigned char>()[i] ? 1.0 : 0.0;
        case DType::int32: return values<std::int32_t>()[i];
        case DType::int16: return values<std::int16_t>()[i];
        case DType::int8: return values<std::int8_t>()[i];
        case DType::uint64: return static_cast<double>(values<std::uint64_t>()[i]);
        case DType::uint32: return values<std::uint32_t>()[i];
        case DType::uint16: return values<std::uint16_t>()[i];
        case DType::uint8: return values<std::uint8_t>()[i];
        case DType::float16: return float16_to_float(values<std::uint16_t>()[i]);
        case DType::bfloat16: return bfloat16_to_float(values<std::uint16_t>()[i]);
    }
    return 0.0;
}

std::vector<double> Tensor::to_doubles() const {
    std::vector<double> out(static_cast<std::size_t>(numel_));
    for (std::int64_t i = 0; i < numel_; ++i) out[i] = at(i);
    return out;
}

Tensor Tensor::clone() const {
    Tensor t = zeros(dtype_, shape_);
    if (nbytes()) std::memcpy(t.data(), data(), nbytes());
    return t;
}

bool Tensor::bitwise_equal(const Tensor& other) const {
    return dtype_ == other.dtype_ && shape_ == other.shape_ &&
           (nbytes() == 0 || std::memcmp(data(), other.data(), nbytes()) == 0);
}

}  // namespace capsule
