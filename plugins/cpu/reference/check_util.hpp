// Allocation-free building blocks of the reference kernels' validation and index math, shared by
// every kernel family: fixed-capacity dimension lists (ranks are small, so shapes, strides and
// permutations live on the stack), a stack-first scratch buffer for small per-call accumulators,
// and tensor labels for error messages that stay as `const char*` pieces until a check fails.
//
// A kernel call on small tensors that passes every check therefore touches the heap not at all.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "capsule/plugin.hpp"

namespace capsule::reference {

/// The largest rank the reference kernels handle (every dimension list has this capacity).
inline constexpr std::size_t kMaxRank = 64;

[[noreturn]] [[gnu::cold]] [[gnu::noinline]] inline void fail_too_many_dims(std::size_t n,
                                                                           std::size_t capacity) {
    plugin::fail(std::to_string(n) + " dimensions exceed the limit of " + std::to_string(capacity) +
                 " of the reference CPU kernels");
}

/// A vector of at most N trivially copyable elements stored inline (std::vector's interface, as
/// far as the kernels use it). Growing past N raises KernelError rather than allocating.
template <typename T, std::size_t N = kMaxRank>
class InlineVec {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    using value_type = T;
    using size_type = std::size_t;
    using iterator = T*;
    using const_iterator = const T*;
    using reference = T&;
    using const_reference = const T&;

    InlineVec() noexcept {}
    explicit InlineVec(std::size_t n, const T& value = T{}) { assign(n, value); }
    InlineVec(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
    template <std::input_iterator It>
    InlineVec(It first, It last) {
        assign(first, last);
    }
    explicit InlineVec(std::span<const T> values) { assign(values.begin(), values.end()); }
    InlineVec(const InlineVec& other) { assign(other.begin(), other.end()); }
    InlineVec& operator=(const InlineVec& other) {
        if (this != &other) assign(other.begin(), other.end());
        return *this;
    }

    void assign(std::size_t n, const T& value) {
        if (n > N) fail_too_many_dims(n, N);
        std::fill_n(data_, n, value);
        size_ = n;
    }
    template <std::input_iterator It>
    void assign(It first, It last) {
        size_ = 0;
        for (; first != last; ++first) push_back(static_cast<T>(*first));
    }
    void push_back(const T& value) {
        if (size_ == N) fail_too_many_dims(N + 1, N);
        data_[size_++] = value;
    }
    void resize(std::size_t n, const T& value = T{}) {
        if (n > N) fail_too_many_dims(n, N);
        for (std::size_t i = size_; i < n; ++i) data_[i] = value;
        size_ = n;
    }
    void clear() noexcept { size_ = 0; }

    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    static constexpr std::size_t capacity() noexcept { return N; }
    T* data() noexcept { return data_; }
    const T* data() const noexcept { return data_; }
    T* begin() noexcept { return data_; }
    T* end() noexcept { return data_ + size_; }
    const T* begin() const noexcept { return data_; }
    const T* end() const noexcept { return data_ + size_; }
    T& operator[](std::size_t i) noexcept { return data_[i]; }
    const T& operator[](std::size_t i) const noexcept { return data_[i]; }
    T& front() noexcept { return data_[0]; }
    const T& front() const noexcept { return data_[0]; }
    T& back() noexcept { return data_[size_ - 1]; }
    const T& back() const noexcept { return data_[size_ - 1]; }

    operator std::span<const T>() const noexcept { return {data_, size_}; }

private:
    std::size_t size_ = 0;
    T data_[N];
};

/// Scratch of `n` elements: on the stack when n <= N, else on the heap (one allocation per call,
/// proportional to the data). Uninitialised unless `value` is given.
template <typename T, std::size_t N = 64>
class SmallBuffer {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    explicit SmallBuffer(std::size_t n) : size_(n) {
        if (n > N) {
            heap_ = std::make_unique_for_overwrite<T[]>(n);
            data_ = heap_.get();
        }
    }
    SmallBuffer(std::size_t n, const T& value) : SmallBuffer(n) { std::fill_n(data_, n, value); }
    SmallBuffer(const SmallBuffer&) = delete;
    SmallBuffer& operator=(const SmallBuffer&) = delete;

    T* data() noexcept { return data_; }
    const T* data() const noexcept { return data_; }
    T* begin() noexcept { return data_; }
    T* end() noexcept { return data_ + size_; }
    std::size_t size() const noexcept { return size_; }
    T& operator[](std::size_t i) noexcept { return data_[i]; }
    const T& operator[](std::size_t i) const noexcept { return data_[i]; }

private:
    std::size_t size_;
    T inline_[N];
    std::unique_ptr<T[]> heap_;
    T* data_ = inline_;
};

/// The name of a tensor in error messages ("relu: input", "conv2d grad weight", "concat: input
/// 3"), kept as pieces so that naming a tensor costs nothing until a check fails:
/// str() = head + tail, followed by `index` in decimal when it is >= 0.
struct Label {
    const char* head;
    const char* tail = "";
    int64_t index = -1;

    constexpr Label(const char* h) noexcept : head(h) {}
    constexpr Label(const char* h, const char* t, int64_t i = -1) noexcept
        : head(h), tail(t), index(i) {}

    std::string str() const {
        std::string s(head);
        s += tail;
        if (index >= 0) s += std::to_string(index);
        return s;
    }
};

/// "[2, 3, 4]": a shape (or any dimension list) for error messages.
inline std::string shape_string(std::span<const int64_t> shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(shape[i]);
    }
    return out + "]";
}

/// The name of a dtype for error messages ("float32", ...; "unknown" for any other value).
inline const char* dtype_name(capsule_dtype d) {
    switch (d) {
        case CAPSULE_DTYPE_FLOAT32: return "float32";
        case CAPSULE_DTYPE_FLOAT64: return "float64";
        case CAPSULE_DTYPE_INT64: return "int64";
        case CAPSULE_DTYPE_BOOL: return "bool";
        case CAPSULE_DTYPE_INT32: return "int32";
        case CAPSULE_DTYPE_INT8: return "int8";
        case CAPSULE_DTYPE_UINT8: return "uint8";
        case CAPSULE_DTYPE_INT16: return "int16";
        case CAPSULE_DTYPE_UINT16: return "uint16";
        case CAPSULE_DTYPE_UINT32: return "uint32";
        case CAPSULE_DTYPE_UINT64: return "uint64";
        case CAPSULE_DTYPE_FLOAT16: return "float16";
        case CAPSULE_DTYPE_BFLOAT16: return "bfloat16";
    }
    return "unknown";
}

}  // namespace capsule::reference
