// Reference kernels of the ops on bool tensors, all with NumPy broadcasting: where(condition, x,
// y) (torch.where / ONNX Where; x and y of any one dtype; the backward kernel needs a float dtype
// and sums each gradient over its broadcast dimensions), the comparisons (any dtype; float16 and
// bfloat16 compare their float values; bool results) and the logical ops (bool inputs and
// results).
#include <cmath>
#include <string>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

struct WhereShapes {
    Tensor cond, x, y;
    Dims out;
};

WhereShapes where_inputs(std::size_t num_inputs, const Tensor& cond, const Tensor& x,
                         const Tensor& y) {
    require_arity(num_inputs, 3, "where");
    check_view(cond, "where: condition (input 0)", CAPSULE_DTYPE_BOOL);
    check_view(x, "where: input 1");
    check_view(y, "where: input 2", x.dtype());
    const Dims cx = broadcast_shapes(cond.shape(), x.shape(), "where");
    return {cond, x, y, broadcast_shapes(cx, y.shape(), "where")};
}


/// out = f(a, b) with NumPy broadcasting and a bool output; a and b have one dtype (any, or bool
/// only when `bool_only`).
template <typename F>
void predicate_forward(const ForwardCall& call, const char* op, bool bool_only, F f) {
    require_arity(call.num_inputs(), 2, op);
    const Tensor a = call.input(0), b = call.input(1);
    if (bool_only) check_view(a, {op, ": input 0"}, CAPSULE_DTYPE_BOOL);
    else check_view(a, {op, ": input 0"});
    check_view(b, {op, ": input 1"}, a.dtype());
    const Dims shape = broadcast_shapes(a.shape(), b.shape(), op);
    const Tensor out = call.output(0);
    check_view(out, {op, ": output"}, CAPSULE_DTYPE_BOOL);
    check_shape(out, {op, ": output"}, shape);
    const Dims os = contiguous_strides(shape);
    const Dims as = broadcast_strides(a.shape(), shape);
    const Dims bs = broadcast_strides(b.shape(), shape);
    dispatch<kAllDtypes>(a.dtype(), [&]<typename T>(T) {
        const T* ap = a.data<const T>();
        const T* bp = b.data<const T>();
        bool* op_ = out.data<bool>();
        for_each_strided<3>(shape, {os.data(), as.data(), bs.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* s) {
                                for (int64_t i = 0; i < n; ++i)
                                    op_[off[0] + i * s[0]] =
                                        f(load(ap[off[1] + i * s[1]]), load(bp[off[2] + i * s[2]]));
                            });
    });
}
}  // namespace

// where: out = condition ? x : y elementwise. Gradients: x gets g where the condition holds,
// y where it does not (0 elsewhere), each summed over its broadcast dimensions.
void where_forward(const ForwardCall& call) {
    const auto w = where_inputs(call.num_inputs(), call.input(0),
                                call.input(call.num_inputs() > 1 ? 1 : 0),
                                call.input(call.num_inputs() > 2 ? 2 : 0));
    const Tensor out = call.output(0);
    check_view(out, "where: output", w.x.dtype());
    check_shape(out, "where: output", w.out);
    const Dims os = contiguous_strides(w.out);
    const Dims cs = broadcast_strides(w.cond.shape(), w.out);
    const Dims xs = broadcast_strides(w.x.shape(), w.out);
    const Dims ys = broadcast_strides(w.y.shape(), w.out);
    dispatch_bytes(w.x.dtype(), [&]<typename U>(U) {
        const bool* cp = w.cond.data<const bool>();
        const U* xp = w.x.data<const U>();
        const U* yp = w.y.data<const U>();
        U* op = out.data<U>();
        for_each_strided<4>(w.out, {os.data(), cs.data(), xs.data(), ys.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* s) {
                                for (int64_t i = 0; i < n; ++i)
                                    op[off[0] + i * s[0]] = cp[off[1] + i * s[1]]
                                                                ? xp[off[2] + i * s[2]]
                                                                : yp[off[3] + i * s[3]];
                            });
    });
}
void where_backward(const BackwardCall& call) {
    const auto w = where_inputs(call.num_inputs(), call.input(0),
                                call.input(call.num_inputs() > 1 ? 1 : 0),
                                call.input(call.num_inputs() > 2 ? 2 : 0));
    check_float(w.x, "where: input 1");
    const Tensor g = call.grad_output(0);
    check_view(g, "where: grad output", w.x.dtype());
    check_shape(g, "where: grad output", w.out);
    const Tensor gx = call.grad_input(1), gy = call.grad_input(2);
    if (gx.present()) check_like(gx, "where: grad input 1", w.x, "input 1");
    if (gy.present()) check_like(gy, "where: grad input 2", w.y, "input 2");
    if (!gx.present() && !gy.present()) return;
    // The condition broadcast to the output, then each gradient reduced to its operand's shape.
    const int64_t total = numel(w.out);
    SmallBuffer<bool> mask(static_cast<std::size_t>(total));
    {
        const Dims os = contiguous_strides(w.out);
        const Dims cs = broadcast_strides(w.cond.shape(), w.out);
        const bool* cp = w.cond.data<const bool>();
        for_each_strided<2>(w.out, {os.data(), cs.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* s) {
                                for (int64_t i = 0; i < n; ++i)
                                    mask[std::size_t(off[0] + i * s[0])] = cp[off[1] + i * s[1]];
                            });
    }
    dispatch_float(w.x.dtype(), [&]<typename T>(T) {
        const T* gp = g.data<const T>();
        if (gx.present())
            reduce_broadcast(w.out, broadcast_strides(w.x.shape(), w.out), gx.data<T>(),
                             w.x.numel(), [&](int64_t i) { return mask[std::size_t(i)] ? gp[i] : T(0); });
        if (gy.present())
            reduce_broadcast(w.out, broadcast_strides(w.y.shape(), w.out), gy.data<T>(),
                             w.y.numel(), [&](int64_t i) { return mask[std::size_t(i)] ? T(0) : gp[i]; });
    });
}

// Comparisons: torch.eq / lt / le / gt / ge (ONNX Equal, Less, LessOrEqual, Greater,
// GreaterOrEqual) of two tensors of one dtype (any; bool orders false < true), broadcast, bool
// output; IEEE rules for NaN (every comparison with NaN is false). No backward (op_needs_no_vjp).
void equal_forward(const ForwardCall& call) {
    predicate_forward(call, "equal", false, [](auto a, auto b) { return a == b; });
}
void less_forward(const ForwardCall& call) {
    predicate_forward(call, "less", false, [](auto a, auto b) { return a < b; });
}
void less_equal_forward(const ForwardCall& call) {
    predicate_forward(call, "less_equal", false, [](auto a, auto b) { return a <= b; });
}
void greater_forward(const ForwardCall& call) {
    predicate_forward(call, "greater", false, [](auto a, auto b) { return a > b; });
}
void greater_equal_forward(const ForwardCall& call) {
    predicate_forward(call, "greater_equal", false, [](auto a, auto b) { return a >= b; });
}

// Logical ops on bool tensors (ONNX Not, And, Or, Xor; torch.logical_*), broadcast.
void logical_and_forward(const ForwardCall& call) {
    predicate_forward(call, "logical_and", true, [](auto a, auto b) { return bool(a) && bool(b); });
}
void logical_or_forward(const ForwardCall& call) {
    predicate_forward(call, "logical_or", true, [](auto a, auto b) { return bool(a) || bool(b); });
}
void logical_xor_forward(const ForwardCall& call) {
    predicate_forward(call, "logical_xor", true, [](auto a, auto b) { return bool(a) != bool(b); });
}
// is_inf (ONNX IsInf): +inf when detect_positive, -inf when detect_negative.
void is_inf_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "is_inf");
    const Tensor x = call.input(0);
    check_float(x, "is_inf: input");
    const Tensor y = call.output(0);
    check_view(y, "is_inf: output", CAPSULE_DTYPE_BOOL);
    check_shape(y, "is_inf: output", x.shape());
    const bool negative = call.attrs().get_bool("detect_negative", true);
    const bool positive = call.attrs().get_bool("detect_positive", true);
    plugin::dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        bool* yp = y.data<bool>();
        const int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i)
            yp[i] = std::isinf(xp[i]) && (xp[i] > 0 ? positive : negative);
    });
}

void logical_not_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "logical_not");
    const Tensor x = call.input(0);
    check_view(x, "logical_not: input", CAPSULE_DTYPE_BOOL);
    const Tensor y = call.output(0);
    check_like(y, "logical_not: output", x, "the input");
    const bool* xp = x.data<const bool>();
    bool* yp = y.data<bool>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) yp[i] = !xp[i];
}

}  // namespace capsule::reference
