// Reference kernels of tile (torch.tile / ONNX Tile with one repeat per axis) and triu / tril
// (torch.triu / torch.tril, ONNX Trilu) on the last two axes. Forward kernels take every dtype;
// backward kernels need a float dtype: tile sums the gradient over the copies, triu / tril mask it
// like the values.
#include <algorithm>
#include <string>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

/// tile as a broadcast: the output viewed as [r0, n0, r1, n1, ...] reads the input with strides
/// [0, s0, 0, s1, ...].
struct TilePlan {
    Dims out_shape, expanded, in_strides;
};

TilePlan tile_plan(const Tensor& x, const plugin::Attributes& attrs) {
    require(attrs.has("repeats"), "tile: missing attribute 'repeats' (list of integers)");
    const auto repeats = attrs.get_ints_view("repeats");
    require(repeats.size() == std::size_t(x.rank()), [&] {
        return "tile: attribute 'repeats' has " + std::to_string(repeats.size()) +
               " entries for rank " + std::to_string(x.rank());
    });
    TilePlan p;
    const Dims strides = contiguous_strides(x.shape());
    for (int d = 0; d < x.rank(); ++d) {
        const int64_t r = repeats[std::size_t(d)];
        require(r >= 0, [&] {
            return "tile: attribute 'repeats' = " + shape_string(repeats) + " has a negative entry";
        });
        int64_t n = 0;
        require(!__builtin_mul_overflow(x.dim(d), r, &n), "tile: output too large");
        p.out_shape.push_back(n);
        p.expanded.push_back(r);
        p.expanded.push_back(x.dim(d));
        p.in_strides.push_back(0);
        p.in_strides.push_back(strides[std::size_t(d)]);
    }
    return p;
}

/// triu (upper) keeps the elements with column - row >= k, tril those with column - row <= k.
struct TriPlan {
    int64_t batch = 1, rows = 0, cols = 0, k = 0;
    bool upper = true;
    bool keep(int64_t i, int64_t j) const { return upper ? j - i >= k : j - i <= k; }
};

TriPlan tri_plan(const Tensor& x, const plugin::Attributes& attrs, bool upper, const char* op) {
    require(x.rank() >= 2, [&] {
        return std::string(op) + ": input has shape " + shape_string(x.shape()) +
               "; expected rank >= 2";
    });
    TriPlan p;
    for (int d = 0; d + 2 < x.rank(); ++d) p.batch *= x.dim(d);
    p.rows = x.dim(-2);
    p.cols = x.dim(-1);
    p.k = attrs.get_int("k", 0);
    p.upper = upper;
    return p;
}

/// dst = src where kept, 0 elsewhere (elements of type T).
template <typename T>
void masked_copy(const TriPlan& p, const T* src, T* dst) {
    for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t i = 0; i < p.rows; ++i)
            for (int64_t j = 0; j < p.cols; ++j) {
                const int64_t e = (b * p.rows + i) * p.cols + j;
                dst[e] = p.keep(i, j) ? src[e] : T(0);
            }
}

void tri_forward(const ForwardCall& call, bool upper, const char* op) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_view(x, {op, ": input"});
    const TriPlan p = tri_plan(x, call.attrs(), upper, op);
    const Tensor y = call.output(0);
    check_like(y, {op, ": output"}, x, "the input");
    // By element size: a zero of every dtype is all zero bits.
    dispatch_bytes(x.dtype(), [&]<typename U>(U) { masked_copy(p, x.data<const U>(), y.data<U>()); });
}

void tri_backward(const BackwardCall& call, bool upper, const char* op) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const TriPlan p = tri_plan(x, call.attrs(), upper, op);
    const Tensor g = call.grad_output(0);
    check_like(g, {op, ": grad output"}, x, "the input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) { masked_copy(p, g.data<const T>(), gx.data<T>()); });
}

}  // namespace

void tile_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "tile");
    const Tensor x = call.input(0);
    check_view(x, "tile: input");
    const TilePlan p = tile_plan(x, call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "tile: output", x.dtype());
    check_shape(y, "tile: output", p.out_shape);
    copy_strided(x.dtype(), p.expanded, y.view->data, contiguous_strides(p.expanded), x.view->data,
                 p.in_strides);
}
void tile_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "tile");
    const Tensor x = call.input(0);
    check_float(x, "tile: input");
    const TilePlan p = tile_plan(x, call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "tile: grad output", x.dtype());
    check_shape(g, "tile: grad output", p.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "tile: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* gp = g.data<const T>();
        reduce_broadcast(p.expanded, p.in_strides, gx.data<T>(), x.numel(),
                         [gp](int64_t i) { return gp[i]; });
    });
}

// triu / tril(k = 0): keep the elements on and above (below) the k-th diagonal of the last two
// axes, zero the others (torch.triu / torch.tril; ONNX Trilu with upper = 1 / 0).
void triu_forward(const ForwardCall& call) { tri_forward(call, true, "triu"); }
void triu_backward(const BackwardCall& call) { tri_backward(call, true, "triu"); }
void tril_forward(const ForwardCall& call) { tri_forward(call, false, "tril"); }
void tril_backward(const BackwardCall& call) { tri_backward(call, false, "tril"); }

}  // namespace capsule::reference
