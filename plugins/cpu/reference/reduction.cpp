// Reference kernels of softmax, log_softmax, sum, reduce_sum, reduce_mean, reduce_max,
// reduce_min, reduce_prod, argmax, argmin, cumsum and mse_loss (float32 and float64; argmax and
// argmin also every integer dtype, float16 and bfloat16; cumsum also every integer dtype).
// Softmax subtracts the maximum along the axis before exponentiating, so large inputs do not
// overflow; sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

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
// reduce_max / reduce_min / reduce_prod over `axes` (as reduce_sum), argmax / argmin along `axis`.

/// Calls fn(input offset, output offset) for every input element, in row-major input order.
template <typename Fn>
void for_each_reduced(const Tensor& x, const ReducePlan& p, Fn&& fn) {
    const Dims xs = contiguous_strides(x.shape());
    for_each_strided<2>(x.shape(), {xs.data(), p.out_strides.data()},
                        [&](const int64_t* off, int64_t n, const int64_t* s) {
                            for (int64_t i = 0; i < n; ++i) fn(off[0] + i * s[0], off[1] + i * s[1]);
                        });
}

/// max (or min) of every reduction group, NaN-propagating; -inf (+inf) for an empty group.
template <typename T>
void extremum_of_groups(const Tensor& x, const ReducePlan& p, bool max, T* out, int64_t n_out) {
    const T start = max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    std::fill(out, out + n_out, start);
    const T* xp = x.data<const T>();
    for_each_reduced(x, p, [&](int64_t i, int64_t o) {
        const T v = xp[i];
        T& acc = out[o];
        if (std::isnan(acc)) return;
        if (std::isnan(v) || (max ? v > acc : v < acc)) acc = v;
    });
}

struct ReduceCall {
    Tensor x;
    ReducePlan plan;
};

template <typename Call>
ReduceCall reduce_inputs(const Call& call, const char* op) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_float(x, {op, ": input"});
    return {x, reduce_plan(x, call.attrs(), op)};
}

void extremum_forward(const ForwardCall& call, const char* op, bool max) {
    const auto r = reduce_inputs(call, op);
    const Tensor y = call.output(0);
    check_view(y, {op, ": output"}, r.x.dtype());
    check_shape(y, {op, ": output"}, r.plan.out_shape);
    dispatch_float(r.x.dtype(), [&]<typename T>(T) {
        extremum_of_groups(r.x, r.plan, max, y.data<T>(), y.numel());
    });
}

/// The gradient goes to the elements equal to their group's max (min), split evenly among ties,
/// as torch.amax / torch.amin.
void extremum_backward(const BackwardCall& call, const char* op, bool max) {
    const auto r = reduce_inputs(call, op);
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, r.x.dtype());
    check_shape(g, {op, ": grad output"}, r.plan.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input"}, r.x, "the input");
    dispatch_float(r.x.dtype(), [&]<typename T>(T) {
        const int64_t n_out = g.numel();
        SmallBuffer<T> best(static_cast<std::size_t>(n_out));
        SmallBuffer<int64_t> ties(static_cast<std::size_t>(n_out), 0);
        extremum_of_groups(r.x, r.plan, max, best.data(), n_out);
        const T* xp = r.x.data<const T>();
        for_each_reduced(r.x, r.plan, [&](int64_t i, int64_t o) { ties[std::size_t(o)] += xp[i] == best[std::size_t(o)]; });
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        for_each_reduced(r.x, r.plan, [&](int64_t i, int64_t o) {
            const auto k = std::size_t(o);
            out[i] = xp[i] == best[k] ? gp[o] / T(ties[k]) : T(0);
        });
    });
}

/// Product of every reduction group (1 for an empty group), accumulated in double.
template <typename T>
void product_of_groups(const Tensor& x, const ReducePlan& p, T* out, int64_t n_out) {
    SmallBuffer<double> acc(static_cast<std::size_t>(n_out), 1.0);
    const T* xp = x.data<const T>();
    for_each_reduced(x, p, [&](int64_t i, int64_t o) { acc[std::size_t(o)] *= double(xp[i]); });
    for (int64_t o = 0; o < n_out; ++o) out[o] = T(acc[std::size_t(o)]);
}

// ---- argmax / argmin(axis = 0, keepdims = true, select_last_index = false) ----

struct ArgPlan {
    int64_t outer = 1, len = 1, inner = 1;
    Dims out_shape;
    bool last = false;
};

ArgPlan arg_plan(const ForwardCall& call, const char* op) {
    require_arity(call.num_inputs(), 1, op);
    const Tensor x = call.input(0);
    check_view(x, {op, ": input"});
    require(x.dtype() != CAPSULE_DTYPE_BOOL, [&] {
        return std::string(op) + ": input has dtype bool; expected a number dtype";
    });
    const auto attrs = call.attrs();
    const int64_t axis = normalize_axis(attrs.get_int("axis", 0), x.rank(), "axis", op);
    const bool keep = attrs.get_bool("keepdims", true);
    ArgPlan p;
    p.last = attrs.get_bool("select_last_index", false);
    for (int d = 0; d < x.rank(); ++d) {
        if (d < axis) p.outer *= x.dim(d);
        else if (d == axis) p.len = x.dim(d);
        else p.inner *= x.dim(d);
        if (d != axis) p.out_shape.push_back(x.dim(d));
        else if (keep) p.out_shape.push_back(1);
    }
    require(p.len > 0, [&] {
        return std::string(op) + ": axis " + std::to_string(axis) + " has size 0 (input shape " +
               shape_string(x.shape()) + "); there is no element to pick";
    });
    return p;
}

/// Index of the largest (`max`) or smallest element along the axis; NaN counts as the extreme
/// (torch.argmax/argmin, numpy); ties go to the first index, or the last with select_last_index.
void arg_extremum_forward(const ForwardCall& call, const char* op, bool max) {
    const ArgPlan p = arg_plan(call, op);
    const Tensor x = call.input(0);
    const Tensor y = call.output(0);
    check_view(y, {op, ": output"}, CAPSULE_DTYPE_INT64);
    check_shape(y, {op, ": output"}, p.out_shape);
    dispatch<kFloatDtypes | kIntegerDtypes | kHalfDtypes>(x.dtype(), [&]<typename T>(T) {
        using C = compute_t<T>;
        const T* xp = x.data<const T>();
        int64_t* out = y.data<int64_t>();
        auto is_nan = [](C v) {
            if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
            else return false;
        };
        for (int64_t o = 0; o < p.outer; ++o)
            for (int64_t j = 0; j < p.inner; ++j) {
                const T* row = xp + o * p.len * p.inner + j;
                int64_t best = 0;
                for (int64_t k = 1; k < p.len; ++k) {
                    const C v = load(row[k * p.inner]), b = load(row[best * p.inner]);
                    const bool wins = p.last ? is_nan(v) || (!is_nan(b) && (max ? v >= b : v <= b))
                                             : !is_nan(b) && (is_nan(v) || (max ? v > b : v < b));
                    if (wins) best = k;
                }
                out[o * p.inner + j] = best;
            }
    });
}

// ---- cumsum(axis, exclusive = false, reverse = false): ONNX CumSum ----

struct ScanPlan {
    int64_t outer = 1, len = 1, inner = 1;
    bool exclusive = false, reverse = false;
};

ScanPlan scan_plan(const Tensor& x, const plugin::Attributes& attrs) {
    require(attrs.has("axis"), "cumsum: missing attribute 'axis' (integer)");
    const int64_t axis = normalize_axis(attrs.get_int("axis", 0), x.rank(), "axis", "cumsum");
    ScanPlan p;
    p.exclusive = attrs.get_bool("exclusive", false);
    p.reverse = attrs.get_bool("reverse", false);
    for (int d = 0; d < x.rank(); ++d) {
        if (d < axis) p.outer *= x.dim(d);
        else if (d == axis) p.len = x.dim(d);
        else p.inner *= x.dim(d);
    }
    return p;
}

/// Running sums along the axis, accumulated in Acc; `reverse` runs from the back, `exclusive`
/// leaves the current element out.
template <typename Acc, typename T>
void running_sums(const ScanPlan& p, const T* src, T* dst, bool reverse) {
    for (int64_t o = 0; o < p.outer; ++o)
        for (int64_t j = 0; j < p.inner; ++j) {
            Acc acc = 0;
            for (int64_t k = 0; k < p.len; ++k) {
                const int64_t e = (o * p.len + (reverse ? p.len - 1 - k : k)) * p.inner + j;
                const Acc v = static_cast<Acc>(src[e]);
                if (p.exclusive) dst[e] = static_cast<T>(acc);
                acc += v;
                if (!p.exclusive) dst[e] = static_cast<T>(acc);
            }
        }
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

// hardmax(axis = -1): ONNX Hardmax (opset 13). For each line along `axis`, 1 at the first largest
// element (NaN counts as the largest, the first NaN wins, as argmax), 0 elsewhere; a rank-0 x is
// one line of one element. Piecewise constant: the backward kernel writes a zero gradient.
void hardmax_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "hardmax");
    const Tensor x = call.input(0);
    check_float(x, "hardmax: input");
    const Tensor y = call.output(0);
    check_like(y, "hardmax: output", x, "the input");
    const AxisLayout l = axis_layout(x, call.attrs(), "hardmax");
    if (x.numel() == 0) return;
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        T* yp = y.data<T>();
        std::fill(yp, yp + x.numel(), T(0));
        for (int64_t o = 0; o < l.outer; ++o)
            for (int64_t j = 0; j < l.inner; ++j) {
                const int64_t base = o * l.len * l.inner + j;
                int64_t best = 0;
                for (int64_t k = 1; k < l.len; ++k) {
                    const T v = xp[base + k * l.inner], b = xp[base + best * l.inner];
                    if (!std::isnan(b) && (std::isnan(v) || v > b)) best = k;
                }
                yp[base + best * l.inner] = T(1);
            }
    });
}
void hardmax_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "hardmax");
    const Tensor x = call.input(0);
    check_float(x, "hardmax: input");
    check_like(call.grad_output(0), "hardmax: grad output", x, "the input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "hardmax: grad input 0", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) { std::fill(gx.data<T>(), gx.data<T>() + x.numel(), T(0)); });
}

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

// reduce_max / reduce_min: torch.amax / torch.amin over `axes` (NaN propagates); an empty group
// gives -inf / +inf (ONNX ReduceMax / ReduceMin; PyTorch refuses it). The gradient is split
// evenly among the elements equal to the result (torch.amax's rule for ties).
void reduce_max_forward(const ForwardCall& call) { extremum_forward(call, "reduce_max", true); }
void reduce_max_backward(const BackwardCall& call) { extremum_backward(call, "reduce_max", true); }
void reduce_min_forward(const ForwardCall& call) { extremum_forward(call, "reduce_min", false); }
void reduce_min_backward(const BackwardCall& call) { extremum_backward(call, "reduce_min", false); }

// reduce_prod: torch.prod over `axes` (1 for an empty group). Gradient per group (torch's
// prod_backward): without zeros g * prod / x; with exactly one zero, g * (product of the others)
// at the zero and 0 elsewhere; with two or more zeros, 0.
void reduce_prod_forward(const ForwardCall& call) {
    const auto r = reduce_inputs(call, "reduce_prod");
    const Tensor y = call.output(0);
    check_view(y, "reduce_prod: output", r.x.dtype());
    check_shape(y, "reduce_prod: output", r.plan.out_shape);
    dispatch_float(r.x.dtype(), [&]<typename T>(T) {
        product_of_groups(r.x, r.plan, y.data<T>(), y.numel());
    });
}
void reduce_prod_backward(const BackwardCall& call) {
    const auto r = reduce_inputs(call, "reduce_prod");
    const Tensor g = call.grad_output(0);
    check_view(g, "reduce_prod: grad output", r.x.dtype());
    check_shape(g, "reduce_prod: grad output", r.plan.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "reduce_prod: grad input", r.x, "the input");
    dispatch_float(r.x.dtype(), [&]<typename T>(T) {
        const auto n_out = static_cast<std::size_t>(g.numel());
        SmallBuffer<double> others(n_out, 1.0);  // product of the nonzero elements
        SmallBuffer<int64_t> zeros(n_out, 0);
        const T* xp = r.x.data<const T>();
        for_each_reduced(r.x, r.plan, [&](int64_t i, int64_t o) {
            if (xp[i] == T(0)) ++zeros[std::size_t(o)];
            else others[std::size_t(o)] *= double(xp[i]);
        });
        const T* gp = g.data<const T>();
        T* out = gx.data<T>();
        for_each_reduced(r.x, r.plan, [&](int64_t i, int64_t o) {
            const auto k = std::size_t(o);
            const double v = zeros[k] == 0   ? others[k] / double(xp[i])
                             : zeros[k] == 1 ? (xp[i] == T(0) ? others[k] : 0.0)
                                             : 0.0;
            out[i] = gp[o] * T(v);
        });
    });
}

// argmax / argmin: int64 indices along `axis` (ONNX ArgMax / ArgMin; torch.argmax with
// keepdim); no backward (op_needs_no_vjp).
void argmax_forward(const ForwardCall& call) { arg_extremum_forward(call, "argmax", true); }
void argmin_forward(const ForwardCall& call) { arg_extremum_forward(call, "argmin", false); }


// cumsum: ONNX CumSum / torch.cumsum along `axis`; floats accumulate in double, integers wrap
// around on overflow (as torch; summed modulo 2^64, then reduced modulo 2^bits). The gradient is the cumsum of g run the other way with the same
// `exclusive`.
void cumsum_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "cumsum");
    const Tensor x = call.input(0);
    check_view(x, "cumsum: input");
    require(x.dtype() != CAPSULE_DTYPE_BOOL,
            "cumsum: input has dtype bool; expected float32, float64 or an integer dtype");
    const ScanPlan p = scan_plan(x, call.attrs());
    const Tensor y = call.output(0);
    check_like(y, "cumsum: output", x, "the input");
    if (in_set(kIntegerDtypes, x.dtype())) {
        dispatch<kIntegerDtypes>(x.dtype(), [&]<typename T>(T) {
            running_sums<uint64_t>(p, x.data<const T>(), y.data<T>(), p.reverse);
        });
        return;
    }
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        running_sums<double>(p, x.data<const T>(), y.data<T>(), p.reverse);
    });
}
void cumsum_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "cumsum");
    const Tensor x = call.input(0);
    check_float(x, "cumsum: input");
    const ScanPlan p = scan_plan(x, call.attrs());
    const Tensor g = call.grad_output(0);
    check_like(g, "cumsum: grad output", x, "the input");
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "cumsum: grad input", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        running_sums<double>(p, g.data<const T>(), gx.data<T>(), !p.reverse);
    });
}

}  // namespace capsule::reference
