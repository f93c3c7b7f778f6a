// Reference kernel: scaled_dot_product_attention (F.scaled_dot_product_attention, no dropout).
//   inputs: query [..., L, E], key [..., S, E], value [..., S, Ev], optional mask broadcastable to
//   [..., L, S] (bool: true = attend; float of the query's dtype: added to the scores).
//   attributes: is_causal (default false; keeps key j <= query i, the top-left aligned
//   lower-triangular mask of PyTorch), scale (default 1/sqrt(E)).
//   out = softmax(q·kᵀ·scale + mask) · v
// Fully masked rows (every score -inf) give a zero output row and zero gradients, as PyTorch's
// math backend does since 2.5 (its "safe softmax"); earlier versions returned NaN there.
// Deviation: for E = 0 the default scale is 1 (PyTorch would divide by zero).
#include <cmath>
#include <limits>

#include "linalg_common.hpp"

namespace capsule::reference {
namespace {

struct AttnGeom {
    int64_t batch = 1, L = 0, S = 0, E = 0, Ev = 0;
    double scale = 1.0;
    bool causal = false;
    bool has_mask = false, bool_mask = false;
    DimList batch_shape;
    DimList mask_stride;  // per score dim (batch dims, L, S); 0 where broadcast
    DimList out_shape;
};

template <typename Call>
AttnGeom attention_geometry(const Call& call) {
    const char* op = "scaled_dot_product_attention";
    const auto attrs = call.attrs();
    AttnGeom g;
    require(call.num_inputs() == 3 || call.num_inputs() == 4, [&] {
        return std::string(op) + " expects 3 or 4 inputs, got " +
               std::to_string(call.num_inputs());
    });
    require(call.num_params() == 0, "scaled_dot_product_attention takes no parameters");
    const Tensor q = call.input(0), k = call.input(1), v = call.input(2);
    check_view(q, "attention query");
    check_tensor(k, q.dtype(), "attention key");
    check_tensor(v, q.dtype(), "attention value");
    const int r = q.rank();
    require(r >= 2 && k.rank() == r && v.rank() == r,
            "scaled_dot_product_attention: query, key and value must have the same rank >= 2");
    for (int i = 0; i < r - 2; ++i)
        require(k.dim(i) == q.dim(i) && v.dim(i) == q.dim(i),
                "scaled_dot_product_attention: query, key and value must have the same batch "
                "dimensions");
    g.L = q.dim(-2);
    g.E = q.dim(-1);
    g.S = k.dim(-2);
    g.Ev = v.dim(-1);
    require(k.dim(-1) == g.E, "scaled_dot_product_attention: query and key embeddings differ");
    require(v.dim(-2) == g.S, "scaled_dot_product_attention: key and value lengths differ");
    g.batch_shape.assign(q.shape().begin(), q.shape().end() - 2);
    g.batch = checked_product(g.batch_shape, op);
    g.out_shape = g.batch_shape;
    g.out_shape.push_back(g.L);
    g.out_shape.push_back(g.Ev);
    g.causal = attrs.get_bool("is_causal", false);
    if (attrs.has("scale")) {
        g.scale = attrs.get_float("scale", 1.0);
        require(std::isfinite(g.scale),
                "scaled_dot_product_attention: attribute 'scale' must be finite");
    } else {
        g.scale = g.E > 0 ? 1.0 / std::sqrt(double(g.E)) : 1.0;
    }
    if (call.num_inputs() == 4) {
        require(!g.causal,
                "scaled_dot_product_attention: is_causal cannot be combined with a mask");
        const Tensor m = call.input(3);
        check_view(m, "attention mask");
        g.has_mask = true;
        g.bool_mask = m.dtype() == CAPSULE_DTYPE_BOOL;
        require(g.bool_mask || m.dtype() == q.dtype(), [&] {
            return std::string(op) + ": mask must be bool or " + dtype_name(q.dtype());
        });
        const int rm = m.rank();
        require(rm <= r, [&] {
            return std::string(op) + ": mask " + shape_string(m.shape()) +
                   " does not broadcast to the scores";
        });
        DimList scores = g.batch_shape;
        scores.push_back(g.L);
        scores.push_back(g.S);
        g.mask_stride.assign(std::size_t(r), 0);
        int64_t stride = 1;
        for (int d = r - 1; d >= 0; --d) {
            const int md = d - (r - rm);
            if (md < 0) continue;
            const int64_t size = m.dim(md);
            require(size == scores[std::size_t(d)] || size == 1, [&] {
                return std::string(op) + ": mask " + shape_string(m.shape()) +
                       " does not broadcast to the scores " + shape_string(scores);
            });
            g.mask_stride[std::size_t(d)] = size == 1 ? 0 : stride;
            stride *= size;
        }
    }
    return g;
}

/// Offset of batch `b`'s [L, S] block in the mask.
int64_t mask_base(const AttnGeom& g, int64_t b) {
    int64_t off = 0;
    for (std::size_t d = g.batch_shape.size(); d-- > 0;) {
        const int64_t i = b % g.batch_shape[d];
        b /= g.batch_shape[d];
        off += i * g.mask_stride[d];
    }
    return off;
}

/// Scores of one batch → probabilities in place: P = softmax(scale·q·kᵀ + mask) row-wise.
template <typename T>
void probabilities(const AttnGeom& g, const T* q, const T* k, const Tensor* mask, int64_t b,
                   T* P) {
    gemm<T>(false, true, g.L, g.S, g.E, q, g.E, k, g.E, P, g.S, false);
    const T ninf = -std::numeric_limits<T>::infinity();
    const std::size_t r = g.batch_shape.size();
    const int64_t base = g.has_mask ? mask_base(g, b) : 0;
    const int64_t msl = g.has_mask ? g.mask_stride[r] : 0;
    const int64_t mss = g.has_mask ? g.mask_stride[r + 1] : 0;
    for (int64_t i = 0; i < g.L; ++i) {
        T* row = P + i * g.S;
        for (int64_t j = 0; j < g.S; ++j) {
            T s = T(double(row[j]) * g.scale);
            if (g.causal && j > i) s = ninf;
            if (g.has_mask) {
                const int64_t at = base + i * msl + j * mss;
                if (g.bool_mask) {
                    if (!mask->data<const uint8_t>()[at]) s = ninf;
                } else {
                    s += mask->data<const T>()[at];
                }
            }
            row[j] = s;
        }
        T m = ninf;
        for (int64_t j = 0; j < g.S; ++j) m = std::max(m, row[j]);
        if (m == ninf || std::isnan(m)) {
            // Fully masked row (or NaN): zero probabilities (safe softmax); NaN propagates.
            const T fill = std::isnan(m) ? std::numeric_limits<T>::quiet_NaN() : T(0);
            std::fill(row, row + g.S, fill);
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < g.S; ++j) {
            const T e = std::exp(row[j] - m);
            row[j] = e;
            sum += double(e);
        }
        const T inv = T(1.0 / sum);
        for (int64_t j = 0; j < g.S; ++j) row[j] *= inv;
    }
}

template <typename T>
void attention_fwd(const ForwardCall& call, const AttnGeom& g) {
    const Tensor q = call.input(0), k = call.input(1), v = call.input(2), out = call.output(0);
    check_tensor(out, q.dtype(), g.out_shape, "attention output");
    const Tensor mask = g.has_mask ? call.input(3) : Tensor{nullptr};
    const T* Q = q.data<T>();
    const T* K = k.data<T>();
    const T* V = v.data<T>();
    T* O = out.data<T>();
    Scratch<T> P(g.L * g.S);
    for (int64_t b = 0; b < g.batch; ++b) {
        probabilities<T>(g, Q + b * g.L * g.E, K + b * g.S * g.E, &mask, b, P.data());
        gemm<T>(false, false, g.L, g.Ev, g.S, P.data(), g.S, V + b * g.S * g.Ev, g.Ev,
                O + b * g.L * g.Ev, g.Ev, false);
    }
}

template <typename T>
void attention_bwd(const BackwardCall& call, const AttnGeom& g) {
    const Tensor q = call.input(0), k = call.input(1), v = call.input(2);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, q.dtype(), g.out_shape, "attention grad output");
    const Tensor mask = g.has_mask ? call.input(3) : Tensor{nullptr};
    T* gQ = grad_target<T>(call.grad_input(0), q, "attention grad query");
    T* gK = grad_target<T>(call.grad_input(1), k, "attention grad key");
    T* gV = grad_target<T>(call.grad_input(2), v, "attention grad value");
    T* gM = nullptr;  // only a float mask has a gradient
    if (g.has_mask && !g.bool_mask) {
        gM = grad_target<T>(call.grad_input(3), mask, "attention grad mask");
        if (gM) std::fill(gM, gM + mask.numel(), T(0));
    }
    const T* Q = q.data<T>();
    const T* K = k.data<T>();
    const T* V = v.data<T>();
    const T* G = gout.data<T>();
    Scratch<T> P(g.L * g.S), dP(g.L * g.S);
    const std::size_t r = g.batch_shape.size();
    for (int64_t b = 0; b < g.batch; ++b) {
        const T* qb = Q + b * g.L * g.E;
        const T* kb = K + b * g.S * g.E;
        const T* vb = V + b * g.S * g.Ev;
        const T* gb = G + b * g.L * g.Ev;
        probabilities<T>(g, qb, kb, &mask, b, P.data());
        if (gV) gemm<T>(true, false, g.S, g.Ev, g.L, P.data(), g.S, gb, g.Ev, gV + b * g.S * g.Ev,
                        g.Ev, false);
        if (!gQ && !gK && !gM) continue;
        // dP = dO · vᵀ; dS = P ⊙ (dP − rowsum(P ⊙ dP)) (gradient of the pre-softmax scores).
        gemm<T>(false, true, g.L, g.S, g.Ev, gb, g.Ev, vb, g.Ev, dP.data(), g.S, false);
        for (int64_t i = 0; i < g.L; ++i) {
            const T* p = P.data() + i * g.S;
            T* d = dP.data() + i * g.S;
            double dot = 0;
            for (int64_t j = 0; j < g.S; ++j) dot += double(p[j]) * double(d[j]);
            for (int64_t j = 0; j < g.S; ++j) d[j] = T(double(p[j]) * (double(d[j]) - dot));
        }
        if (gM) {
            const int64_t base = mask_base(g, b);
            for (int64_t i = 0; i < g.L; ++i)
                for (int64_t j = 0; j < g.S; ++j)
                    gM[base + i * g.mask_stride[r] + j * g.mask_stride[r + 1]] +=
                        dP[i * g.S + j];
        }
        // scores = scale · q·kᵀ: dq = scale · dS·k, dk = scale · dSᵀ·q.
        const T sc = T(g.scale);
        for (int64_t i = 0; i < g.L * g.S; ++i) dP[i] *= sc;
        if (gQ)
            gemm<T>(false, false, g.L, g.E, g.S, dP.data(), g.S, kb, g.E, gQ + b * g.L * g.E, g.E,
                    false);
        if (gK)
            gemm<T>(true, false, g.S, g.E, g.L, dP.data(), g.S, qb, g.E, gK + b * g.S * g.E, g.E,
                    false);
    }
}

}  // namespace

void scaled_dot_product_attention_forward(const ForwardCall& call) {
    const auto g = attention_geometry(call);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { attention_fwd<decltype(t)>(call, g); });
}

void scaled_dot_product_attention_backward(const BackwardCall& call) {
    const auto g = attention_geometry(call);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { attention_bwd<decltype(t)>(call, g); });
}

}  // namespace capsule::reference
