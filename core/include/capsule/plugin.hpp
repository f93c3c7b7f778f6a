// Header-only C++ helper for writing capsule plugins against plugin_abi.h (after oneDNN's dnnl.hpp
// over dnnl.h): typed views of tensors and attributes, and adapters that turn C++ exceptions into
// status codes so that none crosses the C boundary.
//
// A kernel is written as `void my_relu(const capsule::plugin::ForwardCall& call)`; it throws
// KernelError (or any std::exception) on bad input, and is exported with
// `capsule::plugin::forward_entry<my_relu>` in the plugin's kernel table.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "capsule/plugin_abi.h"
#include "capsule/shape_math.hpp"

namespace capsule::plugin {

/// An error a kernel raises inside its plugin; `code` is a capsule_status_code. It never reaches
/// the host: `guarded` (behind every *_entry adapter) turns it into that status and message at
/// the C boundary, and the host reports a failed call as capsule::Error (code `other`) naming the
/// node, capsule, plugin and this message.
struct KernelError : std::exception {
    int32_t code;
    std::string message;
    KernelError(int32_t c, std::string m) : code(c), message(std::move(m)) {}
    const char* what() const noexcept override { return message.c_str(); }
};

/// Raises KernelError(code, message): the cold half of a check. Build the message only on the
/// failing branch (`if (!ok) fail(...)`) so that a passing check allocates nothing.
[[noreturn]] [[gnu::cold]] [[gnu::noinline]] inline void fail(int32_t code, std::string message) {
    throw KernelError(code, std::move(message));
}

/// Raises KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, message).
[[noreturn]] [[gnu::cold]] [[gnu::noinline]] inline void fail(std::string message) {
    throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, std::move(message));
}

/// Raises KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, printf-style message).
[[noreturn]] [[gnu::cold]] [[gnu::noinline]] [[gnu::format(printf, 1, 2)]] inline void failf(
    const char* format, ...) {
    char buffer[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, buffer);
}

/// Raises KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, message) unless `condition` holds.
/// (Building `message` costs an allocation even when the check passes: in hot kernels prefer the
/// `const char*` or lazy overloads below.)
inline void require(bool condition, const std::string& message) {
    if (!condition) throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT, message);
}

/// require with a fixed message: nothing is built unless the check fails.
inline void require(bool condition, const char* message) {
    if (!condition) [[unlikely]]
        fail(message);
}

/// require with a lazily built message: `make_message()` (returning something convertible to
/// std::string) runs only when the check fails, e.g.
/// `require(n > 0, [&] { return name + ": empty"; })`.
template <typename MakeMessage>
    requires std::is_invocable_r_v<std::string, MakeMessage&>
inline void require(bool condition, MakeMessage&& make_message) {
    if (!condition) [[unlikely]]
        fail(make_message());
}

/// Writes `code` and a printf-style message into `status` (may be NULL); returns `code`.
inline int32_t set_status(capsule_status* status, int32_t code, const char* format, ...) {
    if (status) {
        status->code = code;
        va_list args;
        va_start(args, format);
        std::vsnprintf(status->message, sizeof status->message, format, args);
        va_end(args);
    }
    return code;
}

/// Typed access to a tensor view (contiguous row-major, as the host always passes).
struct Tensor {
    const capsule_tensor_view* view;

    int rank() const { return view->rank; }
    std::span<const int64_t> shape() const {
        return {view->shape, static_cast<std::size_t>(view->rank)};
    }
    int64_t dim(int i) const { return view->shape[i < 0 ? i + view->rank : i]; }
    /// Element count; raises KernelError when a dimension is negative or the count (or the
    /// product of the non-zero dimensions) exceeds 2^63-1 (try_element_count).
    int64_t numel() const {
        if (auto n = try_element_count(shape())) return *n;
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "tensor of shape " + shape_text(shape()) +
                              " has a negative dimension or more than 2^63-1 elements");
    }
    capsule_dtype dtype() const { return static_cast<capsule_dtype>(view->dtype); }
    bool present() const { return view != nullptr && view->data != nullptr; }
    template <typename T>
    T* data() const { return static_cast<T*>(view->data); }
};

/// Attribute lookup by name with defaults (docs/ops.md gives each op's attributes).
class Attributes {
public:
    Attributes(const capsule_attribute* attrs, std::size_t count) : attrs_(attrs), count_(count) {}

    const capsule_attribute* find(std::string_view name) const {
        for (std::size_t i = 0; i < count_; ++i)
            if (name == attrs_[i].name) return &attrs_[i];
        return nullptr;
    }
    bool has(std::string_view name) const { return find(name) != nullptr; }
    int64_t get_int(std::string_view name, int64_t fallback) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_INT || a->kind == CAPSULE_ATTR_BOOL) return a->int_value;
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "attribute '" + std::string(name) + "' is not an integer");
    }
    double get_float(std::string_view name, double fallback) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_FLOAT) return a->float_value;
        if (a->kind == CAPSULE_ATTR_INT) return static_cast<double>(a->int_value);
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "attribute '" + std::string(name) + "' is not a number");
    }
    bool get_bool(std::string_view name, bool fallback) const {
        return get_int(name, fallback ? 1 : 0) != 0;
    }
    std::string get_string(std::string_view name, std::string fallback) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_STRING) return a->string_value;
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "attribute '" + std::string(name) + "' is not a string");
    }
    /// get_string without a copy: a view of the attribute's storage (valid during the call).
    std::string_view get_string_view(std::string_view name, std::string_view fallback) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_STRING) return a->string_value;
        fail("attribute '" + std::string(name) + "' is not a string");
    }
    /// An int list; a single INT is read as a one-element list.
    std::vector<int64_t> get_ints(std::string_view name, std::vector<int64_t> fallback) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_INTS) return {a->ints, a->ints + a->count};
        if (a->kind == CAPSULE_ATTR_INT) return {a->int_value};
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "attribute '" + std::string(name) + "' is not an int list");
    }
    /// get_ints without a copy: a view of the attribute's storage (valid during the call); a single
    /// INT is a one-element view.
    std::span<const int64_t> get_ints_view(std::string_view name,
                                           std::span<const int64_t> fallback = {}) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_INTS) return {a->ints, a->count};
        if (a->kind == CAPSULE_ATTR_INT) return {&a->int_value, 1};
        fail("attribute '" + std::string(name) + "' is not an int list");
    }
    std::vector<double> get_floats(std::string_view name, std::vector<double> fallback) const {
        auto* a = find(name);
        if (!a) return fallback;
        if (a->kind == CAPSULE_ATTR_FLOATS) return {a->floats, a->floats + a->count};
        if (a->kind == CAPSULE_ATTR_INTS) return {a->ints, a->ints + a->count};
        throw KernelError(CAPSULE_ERROR_INVALID_ARGUMENT,
                          "attribute '" + std::string(name) + "' is not a float list");
    }

private:
    const capsule_attribute* attrs_;
    std::size_t count_;
};

/// A forward call seen from C++.
struct ForwardCall {
    const capsule_forward_args* args;
    Tensor input(std::size_t i) const { return check(args->inputs, args->num_inputs, i, "input"); }
    Tensor param(std::size_t i) const { return check(args->params, args->num_params, i, "parameter"); }
    Tensor output(std::size_t i = 0) const {
        return check(args->outputs, args->num_outputs, i, "output");
    }
    std::size_t num_inputs() const { return args->num_inputs; }
    std::size_t num_params() const { return args->num_params; }
    Attributes attrs() const { return {args->attrs, args->num_attrs}; }
    /// The node's prepared state (ABI 1.1), or nullptr when the kernel has none or the host
    /// predates it.
    template <typename State>
    const State* state() const {
        return CAPSULE_HAS_FIELD(args, capsule_forward_args, state)
                   ? static_cast<const State*>(args->state)
                   : nullptr;
    }

    static Tensor check(const capsule_tensor_view* views, std::size_t n, std::size_t i,
                        const char* what) {
        if (i >= n) [[unlikely]]
            fail(std::string("missing ") + what + " " + std::to_string(i));
        return Tensor{&views[i]};
    }
};

/// A backward call seen from C++. grad_input(i) / grad_param(i) may be absent (`!present()`).
struct BackwardCall {
    const capsule_backward_args* args;
    Tensor input(std::size_t i) const { return ForwardCall::check(args->inputs, args->num_inputs, i, "input"); }
    Tensor param(std::size_t i) const { return ForwardCall::check(args->params, args->num_params, i, "parameter"); }
    Tensor output(std::size_t i = 0) const { return ForwardCall::check(args->outputs, args->num_outputs, i, "output"); }
    Tensor grad_output(std::size_t i = 0) const {
        return ForwardCall::check(args->grad_outputs, args->num_outputs, i, "grad output");
    }
    Tensor grad_input(std::size_t i) const {
        return ForwardCall::check(args->grad_inputs, args->num_inputs, i, "grad input");
    }
    Tensor grad_param(std::size_t i) const {
        return ForwardCall::check(args->grad_params, args->num_params, i, "grad parameter");
    }
    std::size_t num_inputs() const { return args->num_inputs; }
    std::size_t num_params() const { return args->num_params; }
    Attributes attrs() const { return {args->attrs, args->num_attrs}; }
};

/// A prepare call seen from C++ (ABI 1.1): the node's shapes, dtypes, attributes and parameter
/// data, once per session.
struct PrepareCall {
    const capsule_prepare_args* args;
    Tensor input(std::size_t i) const { return ForwardCall::check(args->inputs, args->num_inputs, i, "input"); }
    Tensor param(std::size_t i) const { return ForwardCall::check(args->params, args->num_params, i, "parameter"); }
    Tensor output(std::size_t i = 0) const { return ForwardCall::check(args->outputs, args->num_outputs, i, "output"); }
    std::size_t num_inputs() const { return args->num_inputs; }
    std::size_t num_params() const { return args->num_params; }
    Attributes attrs() const { return {args->attrs, args->num_attrs}; }
    int threads() const { return args->num_threads > 0 ? args->num_threads : 1; }
    /// The profile's float32 arithmetic (capsule_fpmath_mode); STRICT from a host whose prepare
    /// arguments predate the field.
    int32_t fpmath() const {
        return args->struct_size >= offsetof(capsule_prepare_args, fpmath) + sizeof args->fpmath
                   ? args->fpmath
                   : CAPSULE_FPMATH_STRICT;
    }
};

/// Runs `body`, turning any exception into a status code and message.
template <typename Body>
int32_t guarded(capsule_status* status, Body&& body) noexcept {
    try {
        body();
        return CAPSULE_OK;
    } catch (const KernelError& e) {
        return set_status(status, e.code, "%s", e.message.c_str());
    } catch (const std::bad_alloc&) {
        return set_status(status, CAPSULE_ERROR_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception& e) {
        return set_status(status, CAPSULE_ERROR_INTERNAL, "%s", e.what());
    } catch (...) {
        return set_status(status, CAPSULE_ERROR_INTERNAL, "unknown exception in kernel");
    }
}

/// Adapts `void Fn(const ForwardCall&)` to capsule_forward_fn.
template <void (*Fn)(const ForwardCall&)>
int32_t forward_entry(const capsule_forward_args* args, capsule_status* status) noexcept {
    return guarded(status, [&] { Fn(ForwardCall{args}); });
}

/// Adapts `void Fn(const BackwardCall&)` to capsule_backward_fn.
template <void (*Fn)(const BackwardCall&)>
int32_t backward_entry(const capsule_backward_args* args, capsule_status* status) noexcept {
    return guarded(status, [&] { Fn(BackwardCall{args}); });
}

/// Adapts `std::unique_ptr<State> Fn(const PrepareCall&)` to capsule_prepare_fn; pair it with
/// `release_entry<State>`.
template <typename State, std::unique_ptr<State> (*Fn)(const PrepareCall&)>
int32_t prepare_entry(const capsule_prepare_args* args, void** state, capsule_status* status) noexcept {
    return guarded(status, [&] { *state = Fn(PrepareCall{args}).release(); });
}

/// Frees a state made by prepare_entry<State, ...>.
template <typename State>
void release_entry(void* state) noexcept {
    delete static_cast<State*>(state);
}

/// Calls `f(T{})` with T = float or double for a float dtype; other dtypes raise UNSUPPORTED.
template <typename F>
void dispatch_float(capsule_dtype dtype, F&& f) {
    switch (dtype) {
        case CAPSULE_DTYPE_FLOAT32: f(float{}); return;
        case CAPSULE_DTYPE_FLOAT64: f(double{}); return;
        default:
            throw KernelError(CAPSULE_ERROR_UNSUPPORTED,
                              "dtype " + std::to_string(static_cast<int>(dtype)) +
                                  " is not supported (float32 and float64 are)");
    }
}

/// A kernel table entry for capsule `name`.
constexpr capsule_kernel kernel(const char* name, capsule_forward_fn forward,
                                capsule_backward_fn backward = nullptr,
                                capsule_prepare_fn prepare = nullptr,
                                capsule_release_fn release = nullptr,
                                std::uint64_t dtypes = 0) {
    return capsule_kernel{sizeof(capsule_kernel), name, forward, backward, prepare, release, dtypes};
}

}  // namespace capsule::plugin
