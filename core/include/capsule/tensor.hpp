// Tensors: dtype, shape, device and row-major contiguous storage (DESIGN.md section 5).
//
// Host tensors own 64-byte aligned memory. Device tensors own memory from their device plugin's
// allocator (capsule_device_interface) and are released through it. Copies of a Tensor share
// storage; `clone` copies the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "capsule/ir.hpp"
#include "capsule/plugin_abi.h"

namespace capsule {

class Tensor {
public:
    Tensor() = default;

    /// A zero-filled host tensor. Raises Error(input) naming the shape for negative dimensions or
    /// a size past 2^63-1 elements or bytes (checked_byte_size), Error when memory is exhausted.
    static Tensor zeros(DType dtype, Shape shape);
    /// A host tensor holding `values` converted to `dtype`: integers truncated toward zero and
    /// wrapped to the dtype's width (NaN, ±inf and |value| >= 2^64 give 0), bool as value != 0,
    /// float16/bfloat16 rounded to nearest even.
    /// Raises Error(input) when the count differs from the shape's element count.
    static Tensor from_values(DType dtype, Shape shape, const std::vector<double>& values);
    /// An uninitialised tensor on a non-CPU device, allocated through `device`. Raises Error(input)
    /// for a shape as `zeros` does, Error with the plugin's message when allocation fails.
    static Tensor on_device(DType dtype, Shape shape, Device device,
                            const capsule_device_interface& interface);

    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    Device device() const { return device_; }
    std::int64_t numel() const { return numel_; }
    std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
    bool defined() const { return storage_ != nullptr || numel_ == 0; }

    void* data() { return storage_.get(); }
    const void* data() const { return storage_.get(); }
    template <typename T>
    std::span<T> values() {
        return {static_cast<T*>(data()), static_cast<std::size_t>(numel_)};
    }
    template <typename T>
    std::span<const T> values() const {
        return {static_cast<const T*>(data()), static_cast<std::size_t>(numel_)};
    }

    /// Element i as double (host tensors only).
    double at(std::int64_t i) const;
    /// Every element as double (host tensors only).
    std::vector<double> to_doubles() const;
    /// A host copy with its own storage (host tensors only).
    Tensor clone() const;
    /// Same dtype, shape and bytes (host tensors only).
    bool bitwise_equal(const Tensor& other) const;

private:
    DType dtype_ = DType::float32;
    Shape shape_;
    Device device_ = Device::cpu;
    std::int64_t numel_ = 0;
    std::shared_ptr<unsigned char> storage_;
};

/// Row-major contiguous strides, in elements, for `shape`. Raises Error(input) as element_count.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);

}  // namespace capsule
