// Reference kernels of softmax, log_softmax, sum, reduce_sum, reduce_mean and mse_loss (float32
// and float64). Softmax subtracts the maximum along the axis before exponentiating, so large
// inputs do not overflow; sums accumulate in double.
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax along `axis` (default -1; a rank-0 tensor is one element along axis 0).

struct AxisLayout {
    int64_t outer = 1, len = 1, inner = 1;
};

AxisLayout axis_layout(const Tensor& x, const plugin::Attributes& attrs, const char* op) {
    const int64_t axis = normalize_axis(attrs.get_int("axis", -1), x.rank(), "axis", op);
    AxisLayout l;
    if (x.rank() == 0) return l;
    for (int i = 0; i < x.rank(); ++i) {
        if (i < axis) l.outer *= x.dim(i);
        else if (i == axis) l.len = x.dim(i);
        else l.inner *= x.dim(i);
    }
    return l;
}

/// Forward of softmax (log = false) or log_softmax (log = true).
void softmax_family_forward(const ForwardCall& call, const char* op, bool log) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const Tensor y = call.output(0);
    check_like(y, {op, ": output"}, x, "the input");
    const AxisLayout l = axis_layout(x, call.attrs(), op);
    if (x.numel() == 0) return;
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        const T neg_inf = -std::numeric_limits<T>::infinity();
        if (l.inner == 1) {
            for (int64_t o = 0; o < l.outer; ++o) {
                const T* xr = xp + o * l.len;
                T* yr = yp + o * l.len;
                T m = neg_inf;
                for (int64_t k = 0; k < l.len; ++k) m = xr[k] > m ? xr[k] : m;
                double sum = 0;
                if (log) {
                    // (x - max) - log(sum), in this order as PyTorch: x - (max + log(sum)) would
                    // round the shift at the magnitude of max.
                    for (int64_t k = 0; k < l.len; ++k) sum += double(std::exp(xr[k] - m));
                    const T log_sum = T(std::log(sum));
                    for (int64_t k = 0; k < l.len; ++k) yr[k] = (xr[k] - m) - log_sum;
                } else {
                    for (int64_t k = 0; k < l.len; ++k) {
                        const T e = std::exp(xr[k] - m);
                        yr[k] = e;
                        sum += double(e);
                    }
                    const T inv = T(1.0 / sum);
                    for (int64_t k = 0; k < l.len; ++k) yr[k] *= inv;
                }
            }
            return;
        }
        // Strided axis: process one outer block at a time, the inner positions side by side.
        SmallBuffer<T> m(static_cast<std::size_t>(l.inner));
        SmallBuffer<double> sum(static_cast<std::size_t>(l.inner));
        for (int64_t o = 0; o < l.outer; ++o) {
            const T* xb = xp + o * l.len * l.inner;
            T* yb = yp + o * l.len * l.inner;
            std::fill(m.begin(), m.end(), neg_inf);
            std::fill(sum.begin(), sum.end(), 0.0);
            for (int64_t k = 0; k < l.len; ++k)
                for (int64_t j = 0; j < l.inner; ++j) {
                    const T v = xb[k * l.inner + j];
                    m[j] = v > m[j] ? v : m[j];
                }
            for (int64_t k = 0; k < l.len; ++k)
                for (int64_t j = 0; j < l.inner; ++j) {
                    const T e = std::exp(xb[k * l.inner + j] - m[j]);
                    if (!log) yb[k * l.inner + j] = e;
                    sum[j] += double(e);
                }
            if (log) {
                for (int64_t j = 0; j < l.inner; ++j) sum[j] = std::log(sum[j]);
                for (int64_t k = 0; k < l.len; ++k)
                    for (int64_t j = 0; j < l.inner; ++j)
                        yb[k * l.inner + j] = (xb[k * l.inner + j] - m[j]) - T(sum[j]);
            } else {
                for (int64_t j = 0; j < l.inner; ++j) sum[j] = 1.0 / sum[j];
                for (int64_t k = 0; k < l.len; ++k)
                    for (int64_t j = 0; j < l.inner; ++j) yb[k * l.inner + j] *= T(sum[j]);
            }
        }
    });
}

/// Backward from the forward output y: softmax gx = y * (g - sum(g * y)); log_softmax
/// gx = g - exp(y) * sum(g), sums along the axis.
void softmax_family_backward(const BackwardCall& call, const char* op, bool log) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const Tensor y = call.output(0);
    require(y.present() || x.numel() == 0,
            [&] { return std::string(op) + ": backward needs the forward output"; });
    check_like(y, {op, ": output"}, x, "the input");
    const Tensor g = call.grad_output(0);
    check_like(g, {op, ": grad output"}, x, "the input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    const AxisLayout l = axis_layout(x, call.attrs(), op);
    if (x.numel() == 0) return;
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* yp = y.data<const T>();
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        SmallBuffer<double> dot(static_cast<std::size_t>(l.inner));
        for (int64_t o = 0; o < l.outer; ++o) {
            const int64_t base = o * l.len * l.inner;
            const T* yb = yp + base;
            const T* gb = gp + base;
            T* ob = out + base;
            std::fill(dot.begin(), dot.end(), 0.0);
            for (int64_t k = 0; k < l.len; ++k)
                for (int64_t j = 0; j < l.inner; ++j) {
                    const int64_t i = k * l.inner + j;
                    dot[j] += log ? double(gb[i]) : double(gb[i]) * double(yb[i]);
                }
            for (int64_t k = 0; k < l.len; ++k)
                for (int64_t j = 0; j < l.inner; ++j) {
                    const int64_t i = k * l.inner + j;
                    ob[i] = log ? gb[i] - std::exp(yb[i]) * T(dot[j]) : yb[i] * (gb[i] - T(dot[j]));
                }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// reduce_sum / reduce_mean over `axes` (default: every axis), `keepdims` (default false).

struct ReducePlan {
    Dims out_shape;      // inferred output shape
    Dims out_strides;    // output strides aligned to the input rank, 0 on reduced axes
    int64_t count = 1;   // elements reduced into each output element
};

ReducePlan reduce_plan(const Tensor& x, const plugin::Attributes& attrs, const char* op) {
    const int rank = x.rank();
    InlineVec<bool> reduced(static_cast<std::size_t>(std::max(rank, 1)), false);
    if (attrs.has("axes")) {
        const auto axes = attrs.get_ints_view("axes");
        require(!axes.empty(), [&] {
            return std::string(op) + ": attribute 'axes' is empty; omit it to reduce over every axis";
        });
        for (auto a : axes) {
            const auto n = static_cast<std::size_t>(normalize_axis(a, rank, "axes", op));
            require(!reduced[n], [&] {
                return std::string(op) + ": attribute 'axes' repeats axis " + std::to_string(n);
            });
            reduced[n] = true;
        }
    } else {
        std::fill(reduced.begin(), reduced.end(), true);
    }
    const bool keep = attrs.get_bool("keepdims", false);
    ReducePlan p;
    Dims kept_shape;  // output shape with reduced axes as 1, in input rank
    for (int i = 0; i < rank; ++i) {
        const bool r = reduced[static_cast<std::size_t>(i)];
        if (r) p.count *= x.dim(i);
        if (!r) p.out_shape.push_back(x.dim(i));
        else if (keep) p.out_shape.push_back(1);
        kept_shape.push_back(r ? 1 : x.dim(i));
    }
    p.out_strides = contiguous_strides(kept_shape);
    for (int i = 0; i < rank; ++i)
        if (reduced[static_cast<std::size_t>(i)]) p.out_strides[static_cast<std::size_t>(i)] = 0;
    return p;
}

void reduce_forward(const ForwardCall& call, const char* op, bool mean) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const ReducePlan p = reduce_plan(x, call.attrs(), op);
    const Tensor y = call.output(0);
    check_view(y, {op, ": output"}, x.dtype());
    check_shape(y, {op, ": output"}, p.out_shape);
    // mean of zero elements is NaN (0 / 0), as torch.mean
    const double scale = mean ? 1.0 / double(p.count) : 1.0;
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        const int64_t n = y.numel();
        if (mean && p.count == 0) {
            for (int64_t i = 0; i < n; ++i) yp[i] = std::numeric_limits<T>::quiet_NaN();
            return;
        }
        reduce_broadcast(x.shape(), p.out_strides, yp, n, [xp](int64_t i) { return xp[i]; }, scale);
    });
}

void reduce_backward(const BackwardCall& call, const char* op, bool mean) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    const ReducePlan p = reduce_plan(x, call.attrs(), op);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, x.dtype());
    check_shape(g, {op, ": grad output"}, p.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, x, "the input");
    const double scale = mean ? 1.0 / double(p.count) : 1.0;
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        const Dims xs = contiguous_strides(x.shape());
        const T s = T(scale);
        for_each_strided<2>(x.shape(), {xs.data(), p.out_strides.data()},
                            [&](const int64_t* off, int64_t n, const int64_t* st) {
                                T* o = out + off[0];
                                const T* gg = gp + off[1];
                                const int64_t so = st[0], sg = st[1];
                                if (sg == 0) {
                                    const T v = mean ? *gg * s : *gg;
                                    for (int64_t i = 0; i < n; ++i) o[i * so] = v;
                                } else {
                                    for (int64_t i = 0; i < n; ++i)
                                        o[i * so] = mean ? gg[i * sg] * s : gg[i * sg];
                                }
                            });
    });
}

// ---------------------------------------------------------------------------------------------
// mse_loss(input, target, reduction = "mean" | "sum" | "none")

enum class Reduction { mean, sum, none };

Reduction mse_reduction(const plugin::Attributes& attrs) {
    const std::string_view r = attrs.get_string_view("reduction", "mean");
    if (r == "mean") return Reduction::mean;
    if (r == "sum") return Reduction::sum;
    if (r == "none") return Reduction::none;
    fail("mse_loss: attribute 'reduction' = '" + std::string(r) +
         "' must be one of mean, sum, none");
}

}  // namespace

void softmax_forward(const ForwardCall& call) { softmax_family_forward(call, "softmax", false); }
void softmax_backward(const BackwardCall& call) { softmax_family_backward(call, "softmax", false); }
void log_softmax_forward(const ForwardCall& call) { softmax_family_forward(call, "log_softmax", true); }
void log_softmax_backward(const BackwardCall& call) { softmax_family_backward(call, "log_softmax", true); }

// sum: the sum of every element, a rank-0 output (0 for an empty input).
void sum_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "sum");
    const Tensor x = call.input(0);
    check_float(x, "sum: input");
    const Tensor y = call.output(0);
    check_view(y, "sum: output", x.dtype());
    check_shape(y, "sum: output", {});
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const int64_t n = x.numel();
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += double(xp[i]);
        *y.data<T>() = T(s);
    });
}
void sum_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "sum");
    const Tensor x = call.input(0);
    check_float(x, "sum: input");
    const Tensor g = call.grad_output(0);
    check_view(g, "sum: grad output", x.dtype());
    check_shape(g, "sum: grad output", {});
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "sum: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T v = *g.data<const T>();
        T* out = gx.data<T>();
        const int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i) out[i] = v;
    });
}

void reduce_sum_forward(const ForwardCall& call) { reduce_forward(call, "reduce_sum", false); }
void reduce_sum_backward(const BackwardCall& call) { reduce_backward(call, "reduce_sum", false); }
void reduce_mean_forward(const ForwardCall& call) { reduce_forward(call, "reduce_mean", true); }
void reduce_mean_backward(const BackwardCall& call) { reduce_backward(call, "reduce_mean", true); }

// mse_loss: (input - target)^2, then mean (NaN for zero elements, as PyTorch), sum, or none.
void mse_loss_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "mse_loss");
    const Tensor x = call.input(0), t = call.input(1);
    check_float(x, "mse_loss: input");
    check_like(t, "mse_loss: target", x, "the input");
    const Reduction r = mse_reduction(call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "mse_loss: output", x.dtype());
    if (r == Reduction::none) check_shape(y, "mse_loss: output", x.shape());
    else check_shape(y, "mse_loss: output", {});
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const T* tp = t.data<const T>();
        const int64_t n = x.numel();
        if (r == Reduction::none) {
            T* o = y.data<T>();
            for (int64_t i = 0; i < n; ++i) {
                const T d = xp[i] - tp[i];
                o[i] = d * d;
            }
            return;
        }
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double d = double(xp[i] - tp[i]);
            s += d * d;
        }
        *y.data<T>() = T(r == Reduction::mean ? s / double(n) : s);
    });
}
void mse_loss_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 2, "mse_loss");
    const Tensor x = call.input(0), t = call.input(1);
    check_float(x, "mse_loss: input");
    check_like(t, "mse_loss: target", x, "the input");
    const Reduction r = mse_reduction(call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "mse_loss: grad output", x.dtype());
    if (r == Reduction::none) check_shape(g, "mse_loss: grad output", x.shape());
    else check_shape(g, "mse_loss: grad output", {});
    const Tensor gx = call.grad_input(0), gt = call.grad_input(1);
    const bool want_x = gx.present(), want_t = gt.present();
    if (want_x) check_like(gx, "mse_loss: grad input 0", x, "the input");
    if (want_t) check_like(gt, "mse_loss: grad input 1", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const T* tp = t.data<const T>();
        const T* gp = g.data<const T>();
        T* ox = want_x ? gx.data<T>() : nullptr;
        T* ot = want_t ? gt.data<T>() : nullptr;
        const int64_t n = x.numel();
        const T factor = r == Reduction::none ? T(2)
                         : r == Reduction::sum ? T(2) * gp[0]
                                               : T(2.0 * double(gp[0]) / double(n));
        for (int64_t i = 0; i < n; ++i) {
            const T d = xp[i] - tp[i];
            const T v = r == Reduction::none ? factor * d * gp[i] : factor * d;
            if (ox) ox[i] = v;
            if (ot) ot[i] = -v;
        }
    });
}

}  // namespace capsule::reference
