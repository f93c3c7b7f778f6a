// The elementwise kernel templates of the reference plugin: unary ops y = f(x) and binary ops
// with NumPy broadcasting, forward and backward, plus the number attribute readers they use.
// Forward kernels take a dtype set (dtypes.hpp; by default kFloating: float32, float64, and
// float16 / bfloat16 computed in float with one rounding back, load / store); backward kernels
// take float32 and float64. Each
// elementwise family (elementwise.cpp, activation.cpp, ...) instantiates them with its formulas,
// so the validation and the broadcast loops exist once.
//
// Forward loops over same-shaped operands are split between the node's granted threads
// (parallel.hpp; the kernels are registered with kThreadGrant). Backward kernels overwrite
// grad_inputs; a binary op's gradient for a broadcast operand is summed
// over the broadcast dimensions (accumulated in double).
#pragma once

#include <cmath>
#include <string>

#include "elementwise_common.hpp"
#include "kernels.hpp"
#include "parallel.hpp"

namespace capsule::reference::ew {

using plugin::BackwardCall;
using plugin::dispatch_float;
using plugin::ForwardCall;

// ---------------------------------------------------------------------------------------------
// Unary

/// y = f(x) elementwise for x of a dtype in `Dtypes`; `f` is a generic callable evaluated in
/// the dtype's compute type (compute_t).
template <uint64_t Dtypes = kFloating, typename F>
void unary_forward(const ForwardCall& call, const char* op, F f) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_dtype_in(x, {op, ": input"}, Dtypes);
    const Tensor y = call.output(0);
    check_like(y, {op, ": output"}, x, "the input");
    const int64_t n = x.numel();
    dispatch<Dtypes>(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        parallel_ranges(granted_threads(call), n, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) yp[i] = store<T>(f(load(xp[i])));
        });
    });
}

/// grad_x = d(x, g) elementwise, where d returns g * f'(x).
template <typename D>
void unary_backward(const BackwardCall& call, const char* op, D d) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const Tensor g = call.grad_output(0);
    check_like(g, {op, ": grad output"}, x, "the input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    const int64_t n = x.numel();
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        for (int64_t i = 0; i < n; ++i) out[i] = d(xp[i], gp[i]);
    });
}

/// A float attribute that must be present and not NaN.
inline double required_number(const plugin::Attributes& attrs, const char* op, const char* name) {
    require(attrs.has(name),
            [&] { return std::string(op) + ": missing attribute '" + name + "' (number)"; });
    const double v = attrs.get_float(name, 0.0);
    require(!std::isnan(v),
            [&] { return std::string(op) + ": attribute '" + name + "' must not be NaN"; });
    return v;
}

inline double optional_number(const plugin::Attributes& attrs, const char* op, const char* name,
                       double fallback) {
    const double v = attrs.get_float(name, fallback);
    require(!std::isnan(v),
            [&] { return std::string(op) + ": attribute '" + name + "' must not be NaN"; });
    return v;
}

// ---------------------------------------------------------------------------------------------
// Binary with broadcasting

struct BinaryShapes {
    Tensor a, b;
    Dims out;
};

/// The operands of a binary op: both of one dtype, in `dtypes`, with NumPy-broadcastable shapes.
inline BinaryShapes binary_inputs(std::size_t num_inputs, const Tensor& a, const Tensor& b,
                                  const char* op, uint64_t dtypes = kFloatDtypes) {
    require_arity(num_inputs, 2, op);
    check_dtype_in(a, {op, ": input 0"}, dtypes);
    check_view(b, {op, ": input 1"}, a.dtype());
    return {a, b, broadcast_shapes(a.shape(), b.shape(), op)};
}

/// out = f(a, b) with NumPy broadcasting for operands of one dtype in `Dtypes`; `f` is
/// evaluated in the dtype's compute type (compute_t).
template <uint64_t Dtypes = kFloating, typename F>
void binary_forward(const ForwardCall& call, const char* op, F f) {
    const auto s = binary_inputs(call.num_inputs(), call.input(0),
                                 call.num_inputs() > 1 ? call.input(1) : call.input(0), op, Dtypes);
    const Tensor out = call.output(0);
    check_view(out, {op, ": output"}, s.a.dtype());
    check_shape(out, {op, ": output"}, s.out);
    dispatch<Dtypes>(s.a.dtype(), [&]<typename T>(T) {
        const T* ap = s.a.template data<const T>();
        const T* bp = s.b.template data<const T>();
        T* op_ = out.data<T>();
        auto fn = [&f](T a, T b) { return store<T>(f(load(a), load(b))); };
        if (std::ranges::equal(s.a.shape(), s.out) && std::ranges::equal(s.b.shape(), s.out)) {
            parallel_ranges(granted_threads(call), out.numel(), [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) op_[i] = fn(ap[i], bp[i]);
            });
            return;
        }
        const Dims os = contiguous_strides(s.out);
        const Dims as = broadcast_strides(s.a.shape(), s.out);
        const Dims bs = broadcast_strides(s.b.shape(), s.out);
        for_each_strided<3>(s.out, {os.data(), as.data(), bs.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* st) {
                                T* o = op_ + off[0];
                                const T* x = ap + off[1];
                                const T* y = bp + off[2];
                                const int64_t so = st[0], sa = st[1], sb = st[2];
                                if (so == 1 && sa == 1 && sb == 0) {
                                    const T yv = *y;
                                    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i], yv);
                                } else if (so == 1 && sa == 0 && sb == 1) {
                                    const T xv = *x;
                                    for (int64_t i = 0; i < n; ++i) o[i] = fn(xv, y[i]);
                                } else if (so == 1 && sa == 1 && sb == 1) {
                                    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i], y[i]);
                                } else {
                                    for (int64_t i = 0; i < n; ++i) o[i * so] = fn(x[i * sa], y[i * sb]);
                                }
                            });
    });
}

/// grad_a = reduce(da(a, b, g)), grad_b = reduce(db(a, b, g)), each summed over the dimensions
/// along which its operand was broadcast.
template <typename DA, typename DB>
void binary_backward(const BackwardCall& call, const char* op, DA da, DB db) {
    const auto s = binary_inputs(call.num_inputs(), call.input(0),
                                 call.num_inputs() > 1 ? call.input(1) : call.input(0), op);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, s.a.dtype());
    check_shape(g, {op, ": grad output"}, s.out);
    const Tensor ga = call.grad_input(0), gb = call.grad_input(1);
    const bool want_a = ga.present(), want_b = gb.present();
    if (want_a) check_like(ga, {op, ": grad input 0"}, s.a, "input 0");
    if (want_b) check_like(gb, {op, ": grad input 1"}, s.b, "input 1");
    if (!want_a && !want_b) return;
    dispatch_float(s.a.dtype(), [&]<typename T>(T) {
        const T* ap = s.a.template data<const T>();
        const T* bp = s.b.template data<const T>();
        const T* gp = g.data<const T>();
        if (std::ranges::equal(s.a.shape(), s.out) && std::ranges::equal(s.b.shape(), s.out)) {
            const int64_t n = g.numel();
            if (want_a) {
                T* o = ga.data<T>();
                for (int64_t i = 0; i < n; ++i) o[i] = da(ap[i], bp[i], gp[i]);
            }
            if (want_b) {
                T* o = gb.data<T>();
                for (int64_t i = 0; i < n; ++i) o[i] = db(ap[i], bp[i], gp[i]);
            }
            return;
        }
        const Dims gs = contiguous_strides(s.out);
        const Dims as = broadcast_strides(s.a.shape(), s.out);
        const Dims bs = broadcast_strides(s.b.shape(), s.out);
        const int64_t out_n = numel(s.out);
        // One pass per wanted operand. An operand with as many elements as the output gets each
        // element exactly once and is written directly; a broadcast one is accumulated in double.
        auto pass = [&](auto fn, int which, const Tensor& grad, int64_t operand_n) {
            T* dst = grad.data<T>();
            if (operand_n == out_n) {
                for_each_strided<3>(s.out, {gs.data(), as.data(), bs.data()},
                                    [&](const int64_t* off, int64_t n, const int64_t* st) {
                                        const T* x = ap + off[1];
                                        const T* y = bp + off[2];
                                        const T* gg = gp + off[0];
                                        T* d = dst + off[which];
                                        const int64_t sg = st[0], sa = st[1], sb = st[2], sd = st[which];
                                        for (int64_t i = 0; i < n; ++i)
                                            d[i * sd] = fn(x[i * sa], y[i * sb], gg[i * sg]);
                                    });
                return;
            }
            SmallBuffer<double> acc(static_cast<std::size_t>(operand_n), 0.0);
            for_each_strided<3>(s.out, {gs.data(), as.data(), bs.data()},
                                [&](const int64_t* off, int64_t n, const int64_t* st) {
                                    const T* x = ap + off[1];
                                    const T* y = bp + off[2];
                                    const T* gg = gp + off[0];
                                    double* d = acc.data() + off[which];
                                    const int64_t sg = st[0], sa = st[1], sb = st[2], sd = st[which];
                                    if (sd == 0) {
                                        double sum = 0;
                                        for (int64_t i = 0; i < n; ++i)
                                            sum += double(fn(x[i * sa], y[i * sb], gg[i * sg]));
                                        *d += sum;
                                    } else {
                                        for (int64_t i = 0; i < n; ++i)
                                            d[i * sd] += double(fn(x[i * sa], y[i * sb], gg[i * sg]));
                                    }
                                });
            for (int64_t i = 0; i < operand_n; ++i) dst[i] = static_cast<T>(acc[static_cast<std::size_t>(i)]);
        };
        if (want_a) pass(da, 1, ga, s.a.numel());
        if (want_b) pass(db, 2, gb, s.b.numel());
    });
}

template <typename T>
T sign_of(T x) {  // torch.sign: 0 at 0 (and at NaN)
    return static_cast<T>((T(0) < x) - (x < T(0)));
}

template <typename T>
T sigmoid_of(T x) {  // stable on both tails
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
}

}  // namespace capsule::reference::ew
