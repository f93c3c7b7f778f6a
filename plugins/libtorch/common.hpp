// Shared pieces of the LibTorch plugin (plugins/libtorch): host buffers wrapped as ATen tensors
// without a copy, the op signature every capsule implements, and the kernel adapters that turn
// one op function into a forward kernel and a backward kernel (torch's autograd, one
// torch::autograd::grad call per backward).
//
// Nothing of LibTorch crosses the C ABI: every c10::Error (LibTorch's exception) is caught in the
// adapters and reported as a capsule_status naming the capsule and LibTorch's own message.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "capsule/plugin.hpp"

namespace capsule::libtorch {

using plugin::Attributes;

/// What an op function sees of one node: its parents and parameters as ATen tensors (views of
/// the host's buffers, or leaves that require grad inside a backward call) and its attributes.
struct OpArgs {
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> params;
    Attributes attrs;
    const char* capsule;  // for messages
    /// The output's shape as shape inference gave it (for ops whose degenerate cases, e.g. a
    /// convolution over 0 input channels, ATen refuses or shapes differently).
    std::vector<int64_t> out_shape;
};

/// An op: computes the node's output from OpArgs with differentiable ATen ops only, never
/// writing into its arguments (the backward adapter differentiates it with torch's autograd).
/// Raises KernelError (via plugin::fail) for input the op refuses, or c10::Error.
using OpFn = at::Tensor (*)(const OpArgs&);

/// The ATen dtype of a capsule dtype (float32, float64, int64, bool); raises UNSUPPORTED for
/// any other value.
at::ScalarType scalar_type(int32_t capsule_dtype);

/// A tensor over the host's buffer of `view` (no copy; shape and strides in elements as given).
at::Tensor wrap(const capsule_tensor_view& view);

/// The per-node state made by prepare: the intra-op thread count the host granted
/// (ExecutionConfig threads, capsule_prepare_args::num_threads).
struct NodeState {
    int threads = 1;
};

/// Sets the calling thread's OpenMP thread count (LibTorch's intra-op backend in Debian's build)
/// for one call and restores it afterwards; OpenMP keeps the setting per thread, so concurrent
/// calls do not interfere.
class ThreadScope {
public:
    explicit ThreadScope(const void* state);
    ~ThreadScope();
    ThreadScope(const ThreadScope&) = delete;
    ThreadScope& operator=(const ThreadScope&) = delete;

private:
    int previous_ = 0;
};

/// Runs `fn` on the call's tensors and copies its result into the host's output buffer (an
/// output with no elements is left as it is: ATen refuses some empty shapes, e.g. a pool over 0
/// channels, that have nothing to compute). Raises
/// INTERNAL when the result's shape or dtype differs from what shape inference gave the output
/// (never a silent reshape or conversion).
void run_forward(OpFn fn, const char* capsule, const capsule_forward_args& args);

/// Raises INTERNAL when `result`'s shape or dtype differs from `view`'s (what shape inference
/// gave): never a silent reshape or conversion.
void check_result(const char* capsule, const char* what, const at::Tensor& result, const capsule_tensor_view& view);

/// check_result, then copies `result` into the host buffer of `view` (nothing for no elements).
void write_result(const char* capsule, const char* what, const at::Tensor& result, const capsule_tensor_view& view);

/// The vector-Jacobian product of `fn`: recomputes the node with the float inputs and parameters
/// whose gradient the host asks for as autograd leaves, then one torch::autograd::grad call with
/// the host's output gradient; writes each gradient (zeros where the output does not depend on
/// that tensor).
void run_backward(OpFn fn, const char* capsule, const capsule_backward_args& args);

/// Turns LibTorch's and the plugin's exceptions into a status naming `capsule`.
int32_t guarded(const char* capsule, capsule_status* status, const std::function<void()>& body) noexcept;

int32_t prepare_node(const capsule_prepare_args* args, void** state, capsule_status* status) noexcept;
void release_node(void* state) noexcept;

/// The kernel entry points of op `Fn` named `Name` (a string literal "libtorch.<op>").
template <OpFn Fn, const char* Name>
int32_t forward_kernel(const capsule_forward_args* args, capsule_status* status) noexcept {
    return guarded(Name, status, [&] { run_forward(Fn, Name, *args); });
}
template <OpFn Fn, const char* Name>
int32_t backward_kernel(const capsule_backward_args* args, capsule_status* status) noexcept {
    return guarded(Name, status, [&] { run_backward(Fn, Name, *args); });
}

/// `x`, widened to float64 when it is float32 and one of `values` (attribute values the op
/// combines with it) lies outside float32's range: ATen refuses to convert such a scalar to the
/// tensor's dtype. The caller converts its result back to x's dtype (overflow gives ±inf).
at::Tensor fitting(const at::Tensor& x, std::initializer_list<double> values);

// Attribute helpers shared by the op files.

/// An `int|pair` (or `int|[int]`) attribute as a list of `n` entries: one integer is used for
/// every spatial dimension.
std::vector<int64_t> spatial(const Attributes& attrs, const char* name, std::size_t n, int64_t fallback);

/// The axis attribute `name` normalised for `rank` (negative counts from the end); raises for
/// an axis out of range.
int64_t axis_of(const Attributes& attrs, const char* name, int64_t rank, int64_t fallback);

}  // namespace capsule::libtorch
