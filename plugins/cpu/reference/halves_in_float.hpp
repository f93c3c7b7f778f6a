// float16 and bfloat16 operands for the kernels written for float32 (matmul, convolution,
// pooling, normalisation, reductions, softmax, attention, ...): each half operand is widened
// exactly into a contiguous float32 copy, the float32 kernel runs on the copies, and each half
// result is rounded once to nearest even. This is how PyTorch computes these ops on half tensors
// on CPU (accumulating in float32) and what ONNX Runtime's float16 CPU kernels do; results equal
// the float32 kernel on the widened operands, rounded (tests/test_reference_dtypes.cpp). Calls
// without a half operand go straight to the kernel.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "dtypes.hpp"

namespace capsule::reference {

namespace halves_detail {

inline bool is_half(const capsule_tensor_view& v) {
    return v.dtype == CAPSULE_DTYPE_FLOAT16 || v.dtype == CAPSULE_DTYPE_BFLOAT16;
}

inline bool any_half(const capsule_tensor_view* views, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (views && is_half(views[i])) return true;
    return false;
}

/// Calls f(element offset of `v`, row-major position) for every element of view `v` (strides in
/// elements).
template <typename F>
void for_each_element(const capsule_tensor_view& v, F&& f) {
    int64_t count = 1;
    for (int32_t d = 0; d < v.rank; ++d) count *= v.shape[d];
    if (count <= 0) return;
    std::vector<int64_t> index(static_cast<std::size_t>(v.rank), 0);
    int64_t offset = 0;
    for (int64_t k = 0; k < count; ++k) {
        f(offset, k);
        for (int32_t d = v.rank - 1; d >= 0; --d) {  // next index, carrying
            offset += v.strides[d];
            if (++index[d] < v.shape[d]) break;
            offset -= v.strides[d] * v.shape[d];
            index[d] = 0;
        }
    }
}

/// Float32 stand-ins for a call's half views, and the rounding of results back.
class WideViews {
public:
    /// `views` with each half view replaced by a contiguous float32 copy of its values (`copy`) or
    /// zeros; a view whose data is NULL (a gradient not asked for) stays as it is. `result`: the
    /// kernel writes it, and narrow_back rounds it into the original.
    const capsule_tensor_view* widen(const capsule_tensor_view* views, std::size_t n, bool copy, bool result) {
        if (!views || !any_half(views, n)) return views;
        auto& out = arrays_.emplace_back(views, views + n);
        for (std::size_t i = 0; i < n; ++i) {
            const capsule_tensor_view& v = views[i];
            if (!is_half(v)) continue;
            out[i].dtype = CAPSULE_DTYPE_FLOAT32;
            if (!v.data) continue;
            int64_t count = 1;
            for (int32_t d = 0; d < v.rank; ++d) count *= v.shape[d];
            auto& buffer = buffers_.emplace_back(static_cast<std::size_t>(std::max<int64_t>(count, 0)), 0.0f);
            auto& strides = strides_.emplace_back(static_cast<std::size_t>(v.rank), 1);
            for (int32_t d = v.rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * v.shape[d + 1];
            if (copy) {
                const auto* bits = static_cast<const uint16_t*>(v.data);
                const bool f16 = v.dtype == CAPSULE_DTYPE_FLOAT16;
                for_each_element(v, [&](int64_t at, int64_t k) {
                    buffer[k] = f16 ? float16_to_float(bits[at]) : bfloat16_to_float(bits[at]);
                });
            }
            out[i].strides = strides.data();
            out[i].data = buffer.data();
            if (result) results_.push_back({&v, &out[i]});
        }
        return out.data();
    }

    /// Rounds each float32 result into the half view it stands for (to nearest even).
    void narrow_back() const {
        for (const auto& [original, wide] : results_) {
            auto* bits = static_cast<uint16_t*>(original->data);
            const auto* values = static_cast<const float*>(wide->data);
            const bool f16 = original->dtype == CAPSULE_DTYPE_FLOAT16;
            for_each_element(*original, [&](int64_t at, int64_t k) {
                bits[at] = f16 ? float16_from_float(values[k]) : bfloat16_from_float(values[k]);
            });
        }
    }

private:
    struct Result {
        const capsule_tensor_view* original;
        const capsule_tensor_view* wide;
    };
    std::deque<std::vector<capsule_tensor_view>> arrays_;
    std::deque<std::vector<float>> buffers_;
    std::deque<std::vector<int64_t>> strides_;
    std::vector<Result> results_;
};

/// A copy of the host's argument struct: as many bytes as it says it has, the rest zero.
template <typename Args>
Args copy_args(const Args* args) {
    Args copy{};
    std::memcpy(&copy, args, std::min(sizeof copy, args->struct_size));
    return copy;
}

}  // namespace halves_detail

/// `Fn` (a float32 forward kernel) on float16 / bfloat16 operands: see the file comment.
template <void (*Fn)(const plugin::ForwardCall&)>
void halves_in_float(const plugin::ForwardCall& call) {
    using namespace halves_detail;
    const capsule_forward_args& a = *call.args;
    if (!any_half(a.inputs, a.num_inputs) && !any_half(a.params, a.num_params) && !any_half(a.outputs, a.num_outputs))
        return Fn(call);
    WideViews wide;
    capsule_forward_args w = copy_args(call.args);
    w.inputs = wide.widen(a.inputs, a.num_inputs, true, false);
    w.params = wide.widen(a.params, a.num_params, true, false);
    w.outputs = wide.widen(a.outputs, a.num_outputs, false, true);
    Fn(plugin::ForwardCall{&w});
    wide.narrow_back();
}

/// `Fn` (a float32 backward kernel) on float16 / bfloat16 operands: inputs, parameters, outputs
/// and output gradients widened, the gradients asked for rounded once.
template <void (*Fn)(const plugin::BackwardCall&)>
void halves_in_float_backward(const plugin::BackwardCall& call) {
    using namespace halves_detail;
    const capsule_backward_args& a = *call.args;
    if (!any_half(a.inputs, a.num_inputs) && !any_half(a.params, a.num_params) && !any_half(a.outputs, a.num_outputs))
        return Fn(call);
    WideViews wide;
    capsule_backward_args w = copy_args(call.args);
    w.inputs = wide.widen(a.inputs, a.num_inputs, true, false);
    w.params = wide.widen(a.params, a.num_params, true, false);
    w.outputs = wide.widen(a.outputs, a.num_outputs, true, false);
    w.grad_outputs = wide.widen(a.grad_outputs, a.num_outputs, true, false);
    w.grad_inputs = wide.widen(a.grad_inputs, a.num_inputs, false, true);
    w.grad_params = wide.widen(a.grad_params, a.num_params, false, true);
    Fn(plugin::BackwardCall{&w});
    wide.narrow_back();
}

}  // namespace capsule::reference
