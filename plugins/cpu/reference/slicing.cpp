// Reference kernels of the box-copy ops of ONNX import (docs/ops.md): concat (torch.cat / ONNX
// Concat along any axis), slice (ONNX Slice: starts, ends, axes, steps, with ONNX's clamping) and
// pad (ONNX Pad: constant, reflect or edge; negative pads crop). They move elements, so the
// forward kernels take every dtype; the backward kernels need a float dtype.
//
// Each kernel recomputes the output shape from the attributes as shape inference does and
// refuses an output of any other shape.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.view->data); }

// ---------------------------------------------------------------------------------------------
// concat(axis): every input has input 0's shape apart from `axis`.

struct ConcatLayout {
    int64_t axis = 0;
    int64_t outer = 1;  // product of the dimensions before `axis`
    int64_t after = 1;  // product of the dimensions after `axis`
    Dims out_shape;
};

template <typename Input>
ConcatLayout concat_layout(std::size_t num_inputs, Input&& input, const plugin::Attributes& attrs) {
    require(num_inputs >= 1, "concat expects at least 1 input, got 0");
    const Tensor first = input(0);
    check_view(first, "concat: input 0");
    require(first.rank() >= 1, [&] {
        return "concat: input 0 has shape " + shape_string(first.shape()) + "; expected rank >= 1";
    });
    require(attrs.has("axis"), "concat: missing attribute 'axis' (integer)");
    ConcatLayout l;
    l.axis = normalize_axis(attrs.get_int("axis", 0), first.rank(), "axis", "concat");
    l.out_shape = Dims(first.shape());
    for (int d = 0; d < first.rank(); ++d) {
        if (d < l.axis) l.outer *= first.dim(d);
        if (d > l.axis) l.after *= first.dim(d);
    }
    for (std::size_t i = 1; i < num_inputs; ++i) {
        const Tensor t = input(i);
        const Label what{"concat: input ", "", int64_t(i)};
        check_view(t, what, first.dtype());
        bool ok = t.rank() == first.rank();
        for (int d = 0; ok && d < t.rank(); ++d) ok = d == l.axis || t.dim(d) == first.dim(d);
        require(ok, [&] {
            return what.str() + " has shape " + shape_string(t.shape()) +
                   "; every input must have input 0's shape " + shape_string(first.shape()) +
                   " apart from axis " + std::to_string(l.axis);
        });
        l.out_shape[std::size_t(l.axis)] += t.dim(int(l.axis));
    }
    return l;
}

/// Copies between the concatenated tensor `whole` and its parts: for each part i, `part(i)`
/// returns its storage (nullptr to skip it) and its size along the axis. `to_whole` copies parts
/// into `whole` (forward), otherwise `whole` into the parts (backward).
template <typename Part>
void concat_copy(const ConcatLayout& l, std::size_t parts, char* whole, std::size_t es,
                 bool to_whole, Part&& part) {
    const int64_t whole_block = l.out_shape[std::size_t(l.axis)] * l.after;
    int64_t offset = 0;  // elements into each block of `whole`
    for (std::size_t i = 0; i < parts; ++i) {
        const auto [data, length] = part(i);
        const int64_t block = length * l.after;
        if (data != nullptr && block > 0)
            for (int64_t o = 0; o < l.outer; ++o) {
                char* w = whole + std::size_t(o * whole_block + offset) * es;
                char* p = data + std::size_t(o * block) * es;
                std::memcpy(to_whole ? w : p, to_whole ? p : w, std::size_t(block) * es);
            }
        offset += block;
    }
}

// ---------------------------------------------------------------------------------------------
// slice(starts, ends, axes, steps): ONNX Slice.

struct SlicePlan {
    Dims out_shape;
    Dims src_strides;  // input element strides of the output's dimensions (step included)
    int64_t src_offset = 0;
};

SlicePlan slice_plan(const Tensor& x, const plugin::Attributes& attrs) {
    const int rank = x.rank();
    require(rank >= 1, [&] {
        return "slice: input has shape " + shape_string(x.shape()) + "; expected rank >= 1";
    });
    require(attrs.has("starts"), "slice: missing attribute 'starts' (list of integers)");
    require(attrs.has("ends"), "slice: missing attribute 'ends' (list of integers)");
    const auto starts = attrs.get_ints_view("starts");
    const auto ends = attrs.get_ints_view("ends");
    const std::size_t k = starts.size();
    require(ends.size() == k, "slice: attributes 'starts' and 'ends' have different lengths");
    const auto axes = attrs.get_ints_view("axes");
    const bool has_axes = attrs.has("axes");
    require(has_axes ? axes.size() == k : k <= std::size_t(rank),
            "slice: attribute 'axes' (or, without it, the rank) does not match 'starts'");
    const auto steps = attrs.get_ints_view("steps");
    const bool has_steps = attrs.has("steps");
    require(!has_steps || steps.size() == k,
            "slice: attribute 'steps' does not have one entry per entry of 'starts'");
    const Dims strides = contiguous_strides(x.shape());
    SlicePlan p{Dims(x.shape()), strides, 0};
    InlineVec<bool> seen(std::size_t(rank), false);
    for (std::size_t i = 0; i < k; ++i) {
        const auto a = std::size_t(has_axes ? normalize_axis(axes[i], rank, "axes", "slice")
                                            : int64_t(i));
        require(!seen[a], [&] { return "slice: attribute 'axes' repeats axis " + std::to_string(a); });
        seen[a] = true;
        const int64_t step = has_steps ? steps[i] : 1;
        require(step != 0, "slice: attribute 'steps' has a 0 step");
        const int64_t dim = x.dim(int(a));
        int64_t start = starts[i], end = ends[i];
        if (start < 0) start += dim;  // no overflow: start >= INT64_MIN, dim >= 0
        if (end < 0) end += dim;
        int64_t diff = 0;
        if (step > 0) {
            start = std::clamp<int64_t>(start, 0, dim);
            diff = std::clamp<int64_t>(end, 0, dim) - start;
        } else if (dim > 0) {
            start = std::clamp<int64_t>(start, 0, dim - 1);
            diff = start - std::clamp<int64_t>(end, -1, dim - 1);
        }
        const uint64_t magnitude = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
        const int64_t length = diff > 0 ? int64_t((uint64_t(diff) - 1) / magnitude) + 1 : 0;
        p.out_shape[a] = length;
        if (length > 0) p.src_offset += start * strides[a];
        // With two or more elements |step| < dim, so the product cannot overflow.
        p.src_strides[a] = length > 1 ? strides[a] * step : 0;
    }
    return p;
}

// ---------------------------------------------------------------------------------------------
// pad(pads, mode, value): ONNX Pad.

/// The fill of an integer input: the attribute (exact when it is an integer one) must be an
/// integer in the dtype's range; returned as int64 bits (static_cast<T> recovers the value).
int64_t integer_fill(capsule_dtype dtype, const capsule_attribute* attr, double value) {
    int64_t bits = 0;
    dispatch<kIntegerDtypes>(dtype, [&]<typename T>(T) {
        using L = std::numeric_limits<T>;
        bool ok;
        if (attr != nullptr && attr->kind == CAPSULE_ATTR_INT) {
            bits = attr->int_value;
            if constexpr (std::is_signed_v<T>) ok = bits >= int64_t(L::min()) && bits <= int64_t(L::max());
            else ok = bits >= 0 && uint64_t(bits) <= uint64_t(L::max());
        } else {
            const double top = std::ldexp(1.0, L::digits);  // the first integer above T's range
            ok = value == std::trunc(value) && value >= (std::is_signed_v<T> ? -top : 0.0) && value < top;
            if (ok) bits = static_cast<int64_t>(static_cast<T>(value));
        }
        require(ok, [&] {
            return std::string("pad: attribute 'value' is not an integer in the range of ") +
                   dtype_name(dtype) + " (the input's dtype)";
        });
    });
    return bits;
}

enum class PadMode { constant, reflect, edge };

struct PadPlan {
    Dims out_shape;
    PadMode mode = PadMode::constant;
    double value = 0;
    int64_t int_value = 0;  // an integer input's fill, exact (an integer attribute is not read as
                            // double); a uint64 fill above 2^63 as its two's complement bits
    std::vector<int64_t> source;  // per output dimension, the input index of each position or -1
    Dims source_begin;            // where each dimension's entries start in `source`
};

/// The constant fill converted to T as cast would convert it (cast.cpp).
template <typename T>
T pad_fill(const PadPlan& p) {
    if constexpr (is_half_v<T>) return half_from<T>(p.value);
    else if constexpr (std::is_same_v<T, bool>) return p.value != 0;
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(p.int_value);
    else return static_cast<T>(p.value);
}

PadPlan pad_plan(const Tensor& x, const plugin::Attributes& attrs) {
    const auto rank = std::size_t(x.rank());
    require(attrs.has("pads"), "pad: missing attribute 'pads' (list of integers)");
    const auto pads = attrs.get_ints_view("pads");
    require(pads.size() == 2 * rank, [&] {
        return "pad: attribute 'pads' has " + std::to_string(pads.size()) + " entries; rank " +
               std::to_string(rank) + " needs " + std::to_string(2 * rank);
    });
    PadPlan p;
    const std::string_view mode = attrs.get_string_view("mode", "constant");
    if (mode == "reflect") p.mode = PadMode::reflect;
    else if (mode == "edge") p.mode = PadMode::edge;
    else if (mode != "constant")
        fail("pad: attribute 'mode' = '" + std::string(mode) +
             "' must be one of constant, reflect, edge");
    require(p.mode == PadMode::constant || !attrs.has("value"),
            "pad: attribute 'value' is only valid with mode 'constant'");
    p.value = attrs.get_float("value", 0.0);
    require(!std::isnan(p.value), "pad: attribute 'value' must not be NaN");
    if (in_set(kIntegerDtypes, x.dtype())) p.int_value = integer_fill(x.dtype(), attrs.find("value"), p.value);
    require(x.dtype() != CAPSULE_DTYPE_BOOL || p.value == 0 || p.value == 1,
            "pad: attribute 'value' must be 0 or 1 for a bool input");
    for (std::size_t d = 0; d < rank; ++d) {
        const int64_t n = x.dim(int(d)), begin = pads[d], end = pads[d + rank];
        int64_t out = 0;
        require(!__builtin_add_overflow(n, begin, &out) && !__builtin_add_overflow(out, end, &out) &&
                    out >= 0,
                [&] {
                    return "pad: attribute 'pads' crops axis " + std::to_string(d) + " (size " +
                           std::to_string(n) + ") below 0";
                });
        const int64_t grow = std::max(begin, end);
        require(p.mode != PadMode::reflect || grow <= 0 || grow < n, [&] {
            return "pad: mode 'reflect' needs pads smaller than the padded axis: axis " +
                   std::to_string(d) + " has size " + std::to_string(n);
        });
        require(p.mode != PadMode::edge || grow <= 0 || n > 0, [&] {
            return "pad: mode 'edge' cannot pad axis " + std::to_string(d) + " of size 0";
        });
        p.out_shape.push_back(out);
    }
    return p;
}

/// Fills `p.source` (call only for a non-empty output: then each dimension is at most the
/// output's element count).
void pad_sources(PadPlan& p, const Tensor& x, std::span<const int64_t> pads) {
    const auto rank = p.out_shape.size();
    for (std::size_t d = 0; d < rank; ++d) {
        const int64_t n = x.dim(int(d)), begin = pads[d];
        p.source_begin.push_back(int64_t(p.source.size()));
        for (int64_t o = 0; o < p.out_shape[d]; ++o) {
            int64_t i = o - begin;
            if (i < 0 || i >= n) {
                if (p.mode == PadMode::constant) i = -1;
                else if (p.mode == PadMode::edge) i = i < 0 ? 0 : n - 1;
                else i = i < 0 ? -i : 2 * (n - 1) - i;
            }
            p.source.push_back(i);
        }
    }
}

/// Calls `fn(o, s)` for every output element o in order, with s the input element it reads, or
/// -1 for the constant.
template <typename Fn>
void for_each_padded(const PadPlan& p, std::span<const int64_t> in_shape, Fn&& fn) {
    const std::size_t rank = p.out_shape.size();
    const int64_t total = numel(p.out_shape);
    const Dims in_strides = contiguous_strides(in_shape);
    Dims counter(rank, 0);
    for (int64_t o = 0; o < total; ++o) {
        int64_t s = 0;
        for (std::size_t d = 0; d < rank && s >= 0; ++d) {
            const int64_t i = p.source[std::size_t(p.source_begin[d] + counter[d])];
            s = i < 0 ? -1 : s + i * in_strides[d];
        }
        fn(o, s);
        for (std::size_t d = rank; d-- > 0;) {
            if (++counter[d] < p.out_shape[d]) break;
            counter[d] = 0;
        }
    }
}

}  // namespace

// concat: torch.cat(xs, dim=axis) / ONNX Concat; backward hands each input its part.
void concat_forward(const ForwardCall& call) {
    const auto l = concat_layout(call.num_inputs(), [&](std::size_t i) { return call.input(i); },
                                 call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "concat: output", call.input(0).dtype());
    check_shape(y, "concat: output", l.out_shape);
    concat_copy(l, call.num_inputs(), bytes_of(y), element_size(y.dtype()), true,
                [&](std::size_t i) {
                    const Tensor t = call.input(i);
                    return std::pair{bytes_of(t), t.dim(int(l.axis))};
                });
}
void concat_backward(const BackwardCall& call) {
    const auto l = concat_layout(call.num_inputs(), [&](std::size_t i) { return call.input(i); },
                                 call.attrs());
    const Tensor g = call.grad_output(0);
    check_float(g, "concat: grad output");
    check_view(g, "concat: grad output", call.input(0).dtype());
    check_shape(g, "concat: grad output", l.out_shape);
    for (std::size_t i = 0; i < call.num_inputs(); ++i)
        if (call.grad_input(i).present())
            check_like(call.grad_input(i), {"concat: grad input ", "", int64_t(i)}, call.input(i),
                       {"input ", "", int64_t(i)});
    concat_copy(l, call.num_inputs(), bytes_of(g), element_size(g.dtype()), false,
                [&](std::size_t i) {
                    const Tensor gt = call.grad_input(i);
                    return std::pair{gt.present() ? bytes_of(gt) : nullptr,
                                     call.input(i).dim(int(l.axis))};
                });
}

// slice: ONNX Slice. Negative starts/ends count from the end; then, for step > 0, starts and ends
// are clamped to [0, dim], for step < 0 to [0, dim - 1] and [-1, dim - 1]; INT64_MAX / INT64_MIN
// ends mean "to the end". The backward kernel writes g into the sliced positions, 0 elsewhere.
void slice_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "slice");
    const Tensor x = call.input(0);
    check_view(x, "slice: input");
    const SlicePlan p = slice_plan(x, call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "slice: output", x.dtype());
    check_shape(y, "slice: output", p.out_shape);
    if (y.numel() == 0) return;
    copy_strided(x.dtype(), p.out_shape, y.view->data, contiguous_strides(p.out_shape),
                 bytes_of(x) + p.src_offset * int64_t(element_size(x.dtype())), p.src_strides);
}
void slice_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "slice");
    const Tensor x = call.input(0);
    check_float(x, "slice: input");
    const SlicePlan p = slice_plan(x, call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "slice: grad output", x.dtype());
    check_shape(g, "slice: grad output", p.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "slice: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        T* out = gx.data<T>();
        std::fill(out, out + x.numel(), T(0));
        if (g.numel() == 0) return;
        copy_strided(x.dtype(), p.out_shape, out + p.src_offset, p.src_strides, g.view->data,
                     contiguous_strides(p.out_shape));
    });
}

// pad: ONNX Pad with pads [x1_begin, x2_begin, ..., x1_end, x2_end, ...]. `constant` fills with
// `value` (converted to the dtype), `reflect` mirrors without repeating the edge (numpy
// 'reflect'), `edge` repeats the edge; negative pads crop. The backward kernel sums the gradient
// of every output element into the input element it was read from.
void pad_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "pad");
    const Tensor x = call.input(0);
    check_view(x, "pad: input");
    PadPlan p = pad_plan(x, call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "pad: output", x.dtype());
    check_shape(y, "pad: output", p.out_shape);
    if (y.numel() == 0) return;
    pad_sources(p, x, call.attrs().get_ints_view("pads"));
    dispatch<kAllDtypes>(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        const T fill = pad_fill<T>(p);
        for_each_padded(p, x.shape(), [&](int64_t o, int64_t s) { yp[o] = s < 0 ? fill : xp[s]; });
    });
}
void pad_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "pad");
    const Tensor x = call.input(0);
    check_float(x, "pad: input");
    PadPlan p = pad_plan(x, call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "pad: grad output", x.dtype());
    check_shape(g, "pad: grad output", p.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "pad: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        T* out = gx.data<T>();
        std::fill(out, out + x.numel(), T(0));
        if (g.numel() == 0) return;
        pad_sources(p, x, call.attrs().get_ints_view("pads"));
        const T* gp = g.data<const T>();
        for_each_padded(p, x.shape(), [&](int64_t o, int64_t s) {
            if (s >= 0) out[s] += gp[o];
        });
    });
}

}  // namespace capsule::reference
