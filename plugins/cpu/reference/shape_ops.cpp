// Reference kernels of the shape ops: flatten, reshape, permute and its fixed forms (transpose2d,
// swapAdjacentAtDepth, transpose3d_*), broadcastTo, concat_vectors, concat_leading_axis and
// slice_leading_axis_range. They only move elements, so they work for every dtype (by element
// size); broadcastTo's backward sums and needs a float dtype.
//
// Each forward recomputes the output shape from the attributes as shape inference does
// (docs/ops.md) and refuses an output of any other shape.
#include <cstring>
#include <string>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

/// Copies `n` elements of `src` to `dst` (both of dtype `dtype`).
void copy_elements(void* dst, const void* src, int64_t n, capsule_dtype dtype) {
    if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * element_size(dtype));
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.view->data); }

/// Forward of an op that keeps the elements in order and only changes the shape.
void same_order_forward(const ForwardCall& call, const char* op, const Dims& expected) {
    const Tensor x = call.input(0);
    const Tensor y = call.output(0);
    check_view(y, {op, ": output"}, x.dtype());
    check_shape(y, {op, ": output"}, expected);
    require(y.numel() == x.numel(), [&] {
        return std::string(op) + ": output has " + std::to_string(y.numel()) +
               " elements, the input " + std::to_string(x.numel());
    });
    copy_elements(y.view->data, x.view->data, x.numel(), x.dtype());
}

void same_order_backward(const BackwardCall& call, const char* op, const Dims& expected) {
    const Tensor x = call.input(0);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, x.dtype());
    check_shape(g, {op, ": grad output"}, expected);
    require(g.numel() == x.numel(),
            [&] { return std::string(op) + ": grad output has the wrong element count"; });
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    copy_elements(gx.view->data, g.view->data, x.numel(), x.dtype());
}

Tensor single_input(const Tensor& x, std::size_t num_inputs, const char* op) {
    require_arity(num_inputs, 1, op);
    check_view(x, {op, ": input"});
    return x;
}

// ---- flatten(start_dim = 1, end_dim = -1); a rank-0 input becomes [1] ----
Dims flatten_shape(const Tensor& x, const plugin::Attributes& attrs) {
    const int64_t start = normalize_axis(attrs.get_int("start_dim", 1), x.rank(), "start_dim", "flatten");
    const int64_t end = normalize_axis(attrs.get_int("end_dim", -1), x.rank(), "end_dim", "flatten");
    if (x.rank() == 0) return {1};
    require(start <= end, [&] {
        return "flatten: start_dim " + std::to_string(start) + " comes after end_dim " +
               std::to_string(end) + " for shape " + shape_string(x.shape());
    });
    Dims out;
    int64_t merged = 1;
    for (int i = 0; i < x.rank(); ++i) {
        if (i < start || i > end) out.push_back(x.dim(i));
        else merged *= x.dim(i);
        if (i == end) out.push_back(merged);
    }
    return out;
}

// ---- reshape(shape), one entry may be -1 ----
Dims reshape_shape(const Tensor& x, const plugin::Attributes& attrs) {
    require(attrs.has("shape"), "reshape: missing attribute 'shape' (list of integers)");
    Dims target(attrs.get_ints_view("shape"));
    const int64_t total = x.numel();
    int64_t known = 1;
    int infer_at = -1;
    for (std::size_t i = 0; i < target.size(); ++i) {
        if (target[i] == -1) {
            require(infer_at < 0, [&] {
                return "reshape: attribute 'shape' = " + shape_string(target) + " has more than one -1";
            });
            infer_at = int(i);
        } else {
            require(target[i] >= 0, [&] {
                return "reshape: attribute 'shape' = " + shape_string(target) +
                       " has a negative dimension other than -1";
            });
            require(!__builtin_mul_overflow(known, target[i], &known), "reshape: shape too large");
        }
    }
    if (infer_at >= 0) {
        require(known != 0 && total % known == 0, [&] {
            return "reshape: cannot reshape " + shape_string(x.shape()) + " to " + shape_string(target);
        });
        target[std::size_t(infer_at)] = total / known;
    } else {
        require(known == total, [&] {
            return "reshape: cannot reshape " + shape_string(x.shape()) + " (" +
                   std::to_string(total) + " elements) to " + shape_string(target);
        });
    }
    return target;
}

// ---- permutations ----

/// Normalised permutation from `dims` for a tensor of rank `rank`.
Dims checked_permutation(std::span<const int64_t> dims, int rank, const char* op) {
    require(dims.size() == std::size_t(rank), [&] {
        return std::string(op) + ": attribute 'dims' = " + shape_string(dims) + " has " +
               std::to_string(dims.size()) + " entries for rank " + std::to_string(rank);
    });
    Dims perm;
    InlineVec<bool> seen(std::size_t(rank), false);
    for (auto d : dims) {
        const int64_t n = normalize_axis(d, rank, "dims", op);
        require(!seen[std::size_t(n)], [&] {
            return std::string(op) + ": attribute 'dims' = " + shape_string(dims) + " repeats axis " +
                   std::to_string(n);
        });
        seen[std::size_t(n)] = true;
        perm.push_back(n);
    }
    return perm;
}

Dims permuted(std::span<const int64_t> shape, const Dims& perm) {
    Dims out;
    for (auto p : perm) out.push_back(shape[std::size_t(p)]);
    return out;
}

void permute_forward_with(const ForwardCall& call, const char* op, const Dims& perm) {
    const Tensor x = call.input(0);
    const Tensor y = call.output(0);
    check_view(y, {op, ": output"}, x.dtype());
    check_shape(y, {op, ": output"}, permuted(x.shape(), perm));
    if (x.numel() == 0) return;
    dispatch_bytes(x.dtype(), [&]<typename U>(U) {
        permute_copy(x.data<const U>(), x.shape(), perm, y.data<U>());
    });
}

/// The backward of a permutation is the inverse permutation of the gradient.
void permute_backward_with(const BackwardCall& call, const char* op, const Dims& perm) {
    const Tensor x = call.input(0);
    const Dims out_shape = permuted(x.shape(), perm);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, x.dtype());
    check_shape(g, {op, ": grad output"}, out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    if (x.numel() == 0) return;
    Dims inverse(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) inverse[std::size_t(perm[i])] = int64_t(i);
    dispatch_bytes(x.dtype(), [&]<typename U>(U) {
        permute_copy(g.data<const U>(), out_shape, inverse, gx.data<U>());
    });
}

Dims fixed_perm(const Tensor& x, int rank, Dims perm, const char* op) {
    require(x.rank() == rank, [&] {
        return std::string(op) + " expects an input of rank " + std::to_string(rank) +
               ", got shape " + shape_string(x.shape());
    });
    return perm;
}

Dims swap_perm(const Tensor& x, const plugin::Attributes& attrs) {
    require(attrs.has("depth"), "swapAdjacentAtDepth: missing attribute 'depth' (integer)");
    const int64_t depth = attrs.get_int("depth", 0);
    require(depth >= 0 && depth < int64_t(x.rank()) - 1, [&] {
        return "swapAdjacentAtDepth: attribute 'depth' = " + std::to_string(depth) +
               " out of range for rank " + std::to_string(x.rank()) +
               " (needs 0 <= depth <= rank - 2)";
    });
    Dims perm(std::size_t(x.rank()));
    for (int i = 0; i < x.rank(); ++i) perm[std::size_t(i)] = i;
    std::swap(perm[std::size_t(depth)], perm[std::size_t(depth) + 1]);
    return perm;
}

// ---- concat ----

/// Validates the parents of concat_vectors (`vectors`) or concat_leading_axis; returns the
/// output shape.
Dims concat_shape(std::size_t num_inputs, const auto& input, bool vectors, const char* op) {
    require(num_inputs >= 2, [&] {
        return std::string(op) + " expects at least 2 inputs, got " + std::to_string(num_inputs);
    });
    const Tensor first = input(0);
    check_view(first, {op, ": input 0"});
    require(first.rank() >= 1 && (!vectors || first.rank() == 1), [&] {
        return std::string(op) + ": input 0 has shape " + shape_string(first.shape()) +
               (vectors ? "; expected rank 1" : "; expected rank >= 1");
    });
    Dims out(first.shape().begin(), first.shape().end());
    for (std::size_t i = 1; i < num_inputs; ++i) {
        const Tensor t = input(i);
        const Label what{op, ": input ", int64_t(i)};
        check_view(t, what, first.dtype());
        require(t.rank() == first.rank() &&
                    std::equal(t.shape().begin() + 1, t.shape().end(), first.shape().begin() + 1),
                [&] {
                    return what.str() + " has shape " + shape_string(t.shape()) +
                           "; every input must have input 0's shape " + shape_string(first.shape()) +
                           " apart from the leading dimension";
                });
        out[0] += t.dim(0);
    }
    return out;
}

void concat_forward(const ForwardCall& call, bool vectors, const char* op) {
    const Dims shape = concat_shape(call.num_inputs(), [&](std::size_t i) { return call.input(i); },
                                    vectors, op);
    const Tensor y = call.output(0);
    check_view(y, {op, ": output"}, call.input(0).dtype());
    check_shape(y, {op, ": output"}, shape);
    const std::size_t es = element_size(y.dtype());
    char* dst = bytes_of(y);
    for (std::size_t i = 0; i < call.num_inputs(); ++i) {
        const Tensor t = call.input(i);
        copy_elements(dst, t.view->data, t.numel(), t.dtype());
        dst += static_cast<std::size_t>(t.numel()) * es;
    }
}

void concat_backward(const BackwardCall& call, bool vectors, const char* op) {
    const Dims shape = concat_shape(call.num_inputs(), [&](std::size_t i) { return call.input(i); },
                                    vectors, op);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, call.input(0).dtype());
    check_shape(g, {op, ": grad output"}, shape);
    const std::size_t es = element_size(g.dtype());
    const char* src = bytes_of(g);
    for (std::size_t i = 0; i < call.num_inputs(); ++i) {
        const Tensor t = call.input(i);
        const Tensor gt = call.grad_input(i);
        if (gt.present()) {
            check_like(gt, {op, ": grad input ", int64_t(i)}, t, {"input ", "", int64_t(i)});
            copy_elements(gt.view->data, src, t.numel(), t.dtype());
        }
        src += static_cast<std::size_t>(t.numel()) * es;
    }
}

// ---- slice_leading_axis_range(start = 0, end = n): x[start:end], Python clamping ----

struct SliceRange {
    int64_t start, length, row;  // row: elements per leading index
};

SliceRange slice_range(const Tensor& x, const plugin::Attributes& attrs) {
    require(x.rank() >= 1, [&] {
        return "slice_leading_axis_range expects an input of rank >= 1, got shape " +
               shape_string(x.shape());
    });
    const int64_t n = x.dim(0);
    auto clamp_index = [n](int64_t v) {
        if (v < 0) v += n;
        return std::clamp<int64_t>(v, 0, n);
    };
    const int64_t start = clamp_index(attrs.get_int("start", 0));
    const int64_t end = clamp_index(attrs.get_int("end", n));
    int64_t row = 1;
    for (int i = 1; i < x.rank(); ++i) row *= x.dim(i);
    return {start, std::max<int64_t>(0, end - start), row};
}

}  // namespace

void flatten_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "flatten");
    same_order_forward(call, "flatten", flatten_shape(x, call.attrs()));
}
void flatten_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "flatten");
    same_order_backward(call, "flatten", flatten_shape(x, call.attrs()));
}

void reshape_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "reshape");
    same_order_forward(call, "reshape", reshape_shape(x, call.attrs()));
}
void reshape_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "reshape");
    same_order_backward(call, "reshape", reshape_shape(x, call.attrs()));
}

// permute(dims): out.shape[i] = in.shape[dims[i]] (torch.permute); negative dims count from the end.
void permute_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "permute");
    require(call.attrs().has("dims"), "permute: missing attribute 'dims' (list of integers)");
    permute_forward_with(call, "permute",
                         checked_permutation(call.attrs().get_ints_view("dims"), x.rank(), "permute"));
}
void permute_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "permute");
    require(call.attrs().has("dims"), "permute: missing attribute 'dims' (list of integers)");
    permute_backward_with(call, "permute",
                          checked_permutation(call.attrs().get_ints_view("dims"), x.rank(), "permute"));
}

void transpose2d_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose2d");
    permute_forward_with(call, "transpose2d", fixed_perm(x, 2, {1, 0}, "transpose2d"));
}
void transpose2d_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose2d");
    permute_backward_with(call, "transpose2d", fixed_perm(x, 2, {1, 0}, "transpose2d"));
}

// swapAdjacentAtDepth(depth): torch.transpose(x, depth, depth + 1).
void swapAdjacentAtDepth_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "swapAdjacentAtDepth");
    permute_forward_with(call, "swapAdjacentAtDepth", swap_perm(x, call.attrs()));
}
void swapAdjacentAtDepth_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "swapAdjacentAtDepth");
    permute_backward_with(call, "swapAdjacentAtDepth", swap_perm(x, call.attrs()));
}

// [A, B, C] -> [B, C, A]
void transpose3d_first_to_last_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose3d_first_to_last");
    permute_forward_with(call, "transpose3d_first_to_last",
                         fixed_perm(x, 3, {1, 2, 0}, "transpose3d_first_to_last"));
}
void transpose3d_first_to_last_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose3d_first_to_last");
    permute_backward_with(call, "transpose3d_first_to_last",
                          fixed_perm(x, 3, {1, 2, 0}, "transpose3d_first_to_last"));
}

// [A, B, C] -> [C, A, B]
void transpose3d_last_to_first_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose3d_last_to_first");
    permute_forward_with(call, "transpose3d_last_to_first",
                         fixed_perm(x, 3, {2, 0, 1}, "transpose3d_last_to_first"));
}
void transpose3d_last_to_first_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose3d_last_to_first");
    permute_backward_with(call, "transpose3d_last_to_first",
                          fixed_perm(x, 3, {2, 0, 1}, "transpose3d_last_to_first"));
}

// [A, B, C] -> [A, C, B]
void transpose3d_last_two_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose3d_last_two");
    permute_forward_with(call, "transpose3d_last_two",
                         fixed_perm(x, 3, {0, 2, 1}, "transpose3d_last_two"));
}
void transpose3d_last_two_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "transpose3d_last_two");
    permute_backward_with(call, "transpose3d_last_two",
                          fixed_perm(x, 3, {0, 2, 1}, "transpose3d_last_two"));
}

// broadcastTo(shape): torch.broadcast_to; backward sums over the broadcast dimensions.
void broadcastTo_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "broadcastTo");
    require(call.attrs().has("shape"), "broadcastTo: missing attribute 'shape' (list of integers)");
    const Dims target(call.attrs().get_ints_view("shape"));
    const Tensor y = call.output(0);
    check_view(y, "broadcastTo: output", x.dtype());
    check_shape(y, "broadcastTo: output", target);
    const Dims in_strides = broadcast_strides(x.shape(), target);
    const Dims out_strides = contiguous_strides(target);
    dispatch_bytes(x.dtype(), [&]<typename U>(U) {
        const U* src = x.data<const U>();
        U* dst = y.data<U>();
        for_each_strided<2>(target, {out_strides.data(), in_strides.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* s) {
                                U* d = dst + off[0];
                                const U* sp = src + off[1];
                                const int64_t ds = s[0], ss = s[1];
                                if (ss == 0) {
                                    const U v = *sp;
                                    for (int64_t i = 0; i < n; ++i) d[i * ds] = v;
                                } else {
                                    for (int64_t i = 0; i < n; ++i) d[i * ds] = sp[i * ss];
                                }
                            });
    });
}
void broadcastTo_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "broadcastTo");
    require(call.attrs().has("shape"), "broadcastTo: missing attribute 'shape' (list of integers)");
    const Dims target(call.attrs().get_ints_view("shape"));
    const Tensor g = call.grad_output(0);
    check_view(g, "broadcastTo: grad output", x.dtype());
    check_shape(g, "broadcastTo: grad output", target);
    const Dims in_strides = broadcast_strides(x.shape(), target);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "broadcastTo: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* gp = g.data<const T>();
        reduce_broadcast(target, in_strides, gx.data<T>(), x.numel(), [gp](int64_t i) { return gp[i]; });
    });
}

void concat_vectors_forward(const ForwardCall& call) { concat_forward(call, true, "concat_vectors"); }
void concat_vectors_backward(const BackwardCall& call) { concat_backward(call, true, "concat_vectors"); }
void concat_leading_axis_forward(const ForwardCall& call) {
    concat_forward(call, false, "concat_leading_axis");
}
void concat_leading_axis_backward(const BackwardCall& call) {
    concat_backward(call, false, "concat_leading_axis");
}

void slice_leading_axis_range_forward(const ForwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "slice_leading_axis_range");
    const SliceRange r = slice_range(x, call.attrs());
    Dims shape(x.shape().begin(), x.shape().end());
    shape[0] = r.length;
    const Tensor y = call.output(0);
    check_view(y, "slice_leading_axis_range: output", x.dtype());
    check_shape(y, "slice_leading_axis_range: output", shape);
    const std::size_t es = element_size(x.dtype());
    copy_elements(y.view->data, bytes_of(x) + static_cast<std::size_t>(r.start * r.row) * es,
                  r.length * r.row, x.dtype());
}
void slice_leading_axis_range_backward(const BackwardCall& call) {
    const Tensor x = single_input(call.input(0), call.num_inputs(), "slice_leading_axis_range");
    const SliceRange r = slice_range(x, call.attrs());
    Dims shape(x.shape().begin(), x.shape().end());
    shape[0] = r.length;
    const Tensor g = call.grad_output(0);
    check_view(g, "slice_leading_axis_range: grad output", x.dtype());
    check_shape(g, "slice_leading_axis_range: grad output", shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "slice_leading_axis_range: grad input", x, "the input");
    const std::size_t es = element_size(x.dtype());
    if (x.numel() > 0) std::memset(gx.view->data, 0, static_cast<std::size_t>(x.numel()) * es);
    copy_elements(bytes_of(gx) + static_cast<std::size_t>(r.start * r.row) * es, g.view->data,
                  r.length * r.row, x.dtype());
}

}  // namespace capsule::reference
