// Reference kernels of what training needs: cross_entropy (PyTorch F.cross_entropy over logits
// with integer class targets) and the optimizer steps sgd and adam (torch.optim.SGD and
// torch.optim.Adam update rules). Optimizer steps update in place: their outputs may be the very
// buffers passed as inputs, so each element is read before it is written and nothing else is.
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

// ---------------------------------------------------------------------------------------------
// cross_entropy(input [N, C], target int64 [N]; reduction, ignore_index)

enum class Reduction { mean, sum, none };

struct CrossEntropy {
    int64_t n = 0, classes = 0, ignore_index = -100;
    Reduction reduction = Reduction::mean;
};

CrossEntropy cross_entropy_setup(const Tensor& x, const Tensor& t, const plugin::Attributes& attrs) {
    check_float(x, "cross_entropy: input");
    check_view(t, "cross_entropy: target", CAPSULE_DTYPE_INT64);
    if (x.rank() != 2) fail("cross_entropy: input must be [N, C], got " + shape_string(x.shape()));
    if (t.rank() != 1 || t.shape()[0] != x.shape()[0])
        fail("cross_entropy: target must be [N] = [" + std::to_string(x.shape()[0]) + "], got " +
             shape_string(t.shape()));
    CrossEntropy ce;
    ce.n = x.shape()[0];
    ce.classes = x.shape()[1];
    ce.ignore_index = attrs.get_int("ignore_index", -100);
    const std::string_view r = attrs.get_string_view("reduction", "mean");
    if (r == "mean") ce.reduction = Reduction::mean;
    else if (r == "sum") ce.reduction = Reduction::sum;
    else if (r == "none") ce.reduction = Reduction::none;
    else fail("cross_entropy: attribute 'reduction' = '" + std::string(r) + "' must be one of mean, sum, none");
    const int64_t* tp = t.data<const int64_t>();
    for (int64_t i = 0; i < ce.n; ++i)
        if (tp[i] != ce.ignore_index && (tp[i] < 0 || tp[i] >= ce.classes))
            fail(CAPSULE_ERROR_INVALID_DATA, "cross_entropy: target[" + std::to_string(i) + "] = " + std::to_string(tp[i]) +
                 " is not a class index in [0, " + std::to_string(ce.classes) + ")");
    return ce;
}

/// Rows whose target is not ignore_index: the divisor of the mean (PyTorch: NaN when 0).
int64_t counted_rows(const CrossEntropy& ce, const int64_t* target) {
    int64_t count = 0;
    for (int64_t i = 0; i < ce.n; ++i) count += target[i] != ce.ignore_index;
    return count;
}

/// log(sum(exp(row))) as its two parts: the row maximum m and log(sum(exp(row - m))), so large
/// logits do not overflow and small ones do not underflow to log(0). Callers subtract m from a
/// logit before adding the log-sum: (m - x_t) + log_sum keeps digits that m + log_sum - x_t
/// loses when |m| is large. An infinite (or NaN) maximum gives log_sum 0.
struct LogSumExp {
    double max = 0, log_sum = 0;
};
template <typename T>
LogSumExp log_sum_exp(const T* row, int64_t classes) {
    double m = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) m = std::fmax(m, double(row[c]));
    if (!std::isfinite(m)) return {m, 0.0};
    double s = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(double(row[c]) - m);
    return {m, std::log(s)};
}

void check_loss_view(const Tensor& v, const char* what, const CrossEntropy& ce, capsule_dtype dtype) {
    check_view(v, what, dtype);
    if (ce.reduction == Reduction::none) {
        const int64_t want[] = {ce.n};
        check_shape(v, what, want);
    } else {
        check_shape(v, what, {});
    }
}

// ---------------------------------------------------------------------------------------------
// Optimizer steps: validation shared by sgd and adam.

/// Checks that inputs (param, grad, state...) and outputs (param, state...) all have the
/// parameter's float dtype and shape; `states` is the number of state buffers.
void check_optimizer_views(const ForwardCall& call, const char* op, std::size_t states) {
    require_arity(call.num_inputs(), 2 + states, op);
    if (call.args->num_outputs != 1 + states)
        fail(std::string(op) + " writes " + std::to_string(1 + states) + " outputs (parameter and " +
             std::to_string(states) + " state buffer(s)), got " + std::to_string(call.args->num_outputs));
    const Tensor p = call.input(0);
    check_float(p, Label(op, ": parameter"));
    for (std::size_t i = 1; i < 2 + states; ++i)
        check_like(call.input(i), Label(op, ": input ", int64_t(i)), p, "the parameter");
    for (std::size_t i = 0; i < 1 + states; ++i)
        check_like(call.output(i), Label(op, ": output ", int64_t(i)), p, "the parameter");
}

double finite_attr(const plugin::Attributes& attrs, const char* op, const char* name, double fallback,
                   double min) {
    const double v = attrs.get_float(name, fallback);
    if (!std::isfinite(v) || v < min) {
        char text[160];
        std::snprintf(text, sizeof text, "%s: attribute '%s' = %g must be a finite number >= %g", op,
                      name, v, min);
        fail(text);
    }
    return v;
}

int64_t step_attr(const plugin::Attributes& attrs, const char* op) {
    if (!attrs.has("step")) fail(std::string(op) + ": attribute 'step' (1-based step number) is missing");
    const int64_t step = attrs.get_int("step", 1);
    if (step < 1) fail(std::string(op) + ": attribute 'step' = " + std::to_string(step) + " must be >= 1");
    return step;
}

}  // namespace

// loss_i = logsumexp(x_i) - x_i[t_i] (0 for ignored rows); mean divides by the counted rows.
void cross_entropy_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "cross_entropy");
    const Tensor x = call.input(0), t = call.input(1);
    const CrossEntropy ce = cross_entropy_setup(x, t, call.attrs());
    const Tensor y = call.output(0);
    check_loss_view(y, "cross_entropy: output", ce, x.dtype());
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const int64_t* tp = t.data<const int64_t>();
        double total = 0;
        for (int64_t i = 0; i < ce.n; ++i) {
            const T* row = xp + i * ce.classes;
            double loss = 0.0;
            if (tp[i] != ce.ignore_index) {
                const LogSumExp lse = log_sum_exp(row, ce.classes);
                loss = (lse.max - double(row[tp[i]])) + lse.log_sum;
            }
            if (ce.reduction == Reduction::none) y.data<T>()[i] = T(loss);
            total += loss;
        }
        if (ce.reduction == Reduction::sum) *y.data<T>() = T(total);
        if (ce.reduction == Reduction::mean) *y.data<T>() = T(total / double(counted_rows(ce, tp)));
    });
}

// d loss_i / d x_i[c] = softmax(x_i)[c] - [c == t_i], times the upstream gradient of row i.
void cross_entropy_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 2, "cross_entropy");
    const Tensor x = call.input(0), t = call.input(1);
    const CrossEntropy ce = cross_entropy_setup(x, t, call.attrs());
    const Tensor g = call.grad_output(0);
    check_loss_view(g, "cross_entropy: grad output", ce, x.dtype());
    const Tensor gx = call.grad_input(0);
    if (call.grad_input(1).present()) fail("cross_entropy: the integer target has no gradient");
    if (!gx.present()) return;
    check_like(gx, "cross_entropy: grad input 0", x, "the input");
    dispatch_float(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        const T* gp = g.data<const T>();
        const int64_t* tp = t.data<const int64_t>();
        T* out = gx.data<T>();
        const double divisor = ce.reduction == Reduction::mean ? double(counted_rows(ce, tp)) : 1.0;
        for (int64_t i = 0; i < ce.n; ++i) {
            const T* row = xp + i * ce.classes;
            T* grow = out + i * ce.classes;
            if (tp[i] == ce.ignore_index) {
                for (int64_t c = 0; c < ce.classes; ++c) grow[c] = T(0);
                continue;
            }
            const double up = double(ce.reduction == Reduction::none ? gp[i] : gp[0]) / divisor;
            const LogSumExp lse = log_sum_exp(row, ce.classes);
            for (int64_t c = 0; c < ce.classes; ++c)
                grow[c] = T(up * (std::exp((double(row[c]) - lse.max) - lse.log_sum) -
                                  (c == tp[i] ? 1.0 : 0.0)));
        }
    });
}

// torch.optim.SGD, one step for one parameter (PyTorch's documented algorithm):
//   g = grad + weight_decay * p
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g   (momentum != 0)
//   g = g + momentum * buf when nesterov, else buf                        (momentum != 0)
//   p = p - lr * g
void sgd_forward(const ForwardCall& call) {
    check_optimizer_views(call, "sgd", 1);
    const auto attrs = call.attrs();
    const double lr = finite_attr(attrs, "sgd", "lr", 0, 0);
    if (!attrs.has("lr")) fail("sgd: attribute 'lr' (learning rate) is missing");
    const double momentum = finite_attr(attrs, "sgd", "momentum", 0, 0);
    const double dampening = finite_attr(attrs, "sgd", "dampening", 0, -INFINITY);
    const double decay = finite_attr(attrs, "sgd", "weight_decay", 0, 0);
    const bool nesterov = attrs.get_bool("nesterov", false);
    const bool first = step_attr(attrs, "sgd") == 1;
    if (nesterov && (momentum <= 0 || dampening != 0))
        fail("sgd: nesterov momentum requires momentum > 0 and dampening = 0 (as torch.optim.SGD)");
    const Tensor p = call.input(0);
    dispatch_float(p.dtype(), [&]<typename T>(T) {
        const T* pi = p.data<const T>();
        const T* gi = call.input(1).data<const T>();
        const T* bi = call.input(2).data<const T>();
        T* po = call.output(0).data<T>();
        T* bo = call.output(1).data<T>();
        const int64_t n = p.numel();
        for (int64_t i = 0; i < n; ++i) {
            T g = gi[i] + T(decay) * pi[i];
            T buf = bi[i];
            if (momentum != 0) {
                buf = first ? g : T(momentum) * buf + T(1 - dampening) * g;
                g = nesterov ? g + T(momentum) * buf : buf;
            }
            bo[i] = buf;
            po[i] = pi[i] - T(lr) * g;
        }
    });
}

// torch.optim.Adam (amsgrad = false), one step t for one parameter:
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
void adam_forward(const ForwardCall& call) {
    check_optimizer_views(call, "adam", 2);
    const auto attrs = call.attrs();
    const double lr = finite_attr(attrs, "adam", "lr", 1e-3, 0);
    const auto betas = attrs.get_floats("betas", {0.9, 0.999});
    if (betas.size() != 2 || !(betas[0] >= 0 && betas[0] < 1) || !(betas[1] >= 0 && betas[1] < 1))
        fail("adam: attribute 'betas' must be two numbers in [0, 1)");
    const double eps = finite_attr(attrs, "adam", "eps", 1e-8, 0);
    const double decay = finite_attr(attrs, "adam", "weight_decay", 0, 0);
    const auto step = double(step_attr(attrs, "adam"));
    const double step_size = lr / (1 - std::pow(betas[0], step));
    const double correction2_sqrt = std::sqrt(1 - std::pow(betas[1], step));
    const Tensor p = call.input(0);
    dispatch_float(p.dtype(), [&]<typename T>(T) {
        const T* pi = p.data<const T>();
        const T* gi = call.input(1).data<const T>();
        const T* mi = call.input(2).data<const T>();
        const T* vi = call.input(3).data<const T>();
        T* po = call.output(0).data<T>();
        T* mo = call.output(1).data<T>();
        T* vo = call.output(2).data<T>();
        const T b1 = T(betas[0]), b2 = T(betas[1]);
        const int64_t n = p.numel();
        for (int64_t i = 0; i < n; ++i) {
            const T g = gi[i] + T(decay) * pi[i];
            const T m = b1 * mi[i] + (1 - b1) * g;
            const T v = b2 * vi[i] + (1 - b2) * g * g;
            mo[i] = m;
            vo[i] = v;
            po[i] = pi[i] - T(step_size) * m / (std::sqrt(v) / T(correction2_sqrt) + T(eps));
        }
    });
}

}  // namespace capsule::reference
