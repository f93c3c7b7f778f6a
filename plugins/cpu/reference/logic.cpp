// Reference kernels of the ops on bool tensors: where(condition, x, y) (torch.where / ONNX
// Where), with NumPy broadcasting of all three inputs. x and y may have any dtype (the same);
// the backward kernel needs a float dtype and sums each gradient over its broadcast dimensions.
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

}  // namespace capsule::reference
