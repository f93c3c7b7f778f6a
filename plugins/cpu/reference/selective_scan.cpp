// Reference kernel: selective_scan, the selective state-space scan of Mamba (Gu & Dao, 2023,
// "Mamba: Linear-Time Sequence Modeling with Selective State Spaces"), as its reference
// implementation selective_scan_ref without the optional D skip, z gate and delta_bias:
//   inputs u [B, D, L], delta [B, D, L], A [D, N], B [B, N, L], C [B, N, L]; output y [B, D, L].
//   dt = softplus(delta) when attribute delta_softplus (default false; softplus as F.softplus:
//        log(1 + e^x), and x itself above 20), else delta.
//   h_0 = 0;  h_t[n] = exp(dt_t·A[d, n])·h_{t-1}[n] + dt_t·B[b, n, t]·u_t
//   y_t = Σ_n C[b, n, t]·h_t[n]
// Computed in double for either dtype. The backward pass keeps the L × N states of one (b, d)
// sequence and runs the scan in reverse.
#include <cmath>

#include "linalg_common.hpp"

namespace capsule::reference {
namespace {

struct ScanGeom {
    int64_t b = 0, d = 0, L = 0, n = 0;
    bool softplus = false;
};

template <typename Call>
ScanGeom scan_geometry(const Call& call) {
    const auto attrs = call.attrs();
    ScanGeom g;
    require_arity(call, 5, 0, "selective_scan");
    const Tensor u = call.input(0);
    check_view(u, "selective_scan u");
    require(u.rank() == 3,
            [&] { return "selective_scan: u must be [B, D, L], got " + shape_string(u.shape()); });
    g.b = u.dim(0);
    g.d = u.dim(1);
    g.L = u.dim(2);
    const Tensor A = call.input(2);
    check_tensor(A, u.dtype(), "selective_scan A");
    require(A.rank() == 2,
            [&] { return "selective_scan: A must be [D, N], got " + shape_string(A.shape()); });
    g.n = A.dim(1);
    check_tensor(call.input(1), u.dtype(), {g.b, g.d, g.L}, "selective_scan delta");
    check_tensor(A, u.dtype(), {g.d, g.n}, "selective_scan A");
    check_tensor(call.input(3), u.dtype(), {g.b, g.n, g.L}, "selective_scan B");
    check_tensor(call.input(4), u.dtype(), {g.b, g.n, g.L}, "selective_scan C");
    g.softplus = attrs.get_bool("delta_softplus", false);
    return g;
}

inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
inline double softplus_grad(double x) { return x > 20.0 ? 1.0 : 1.0 / (1.0 + std::exp(-x)); }

template <typename T>
void scan_fwd(const ForwardCall& call, const ScanGeom& g) {
    const Tensor out = call.output(0);
    check_tensor(out, call.input(0).dtype(), {g.b, g.d, g.L}, "selective_scan output");
    const T* U = call.input(0).data<T>();
    const T* Dl = call.input(1).data<T>();
    const T* A = call.input(2).data<T>();
    const T* Bm = call.input(3).data<T>();
    const T* Cm = call.input(4).data<T>();
    T* Y = out.data<T>();
    Scratch<double> h(g.n);
    for (int64_t b = 0; b < g.b; ++b)
        for (int64_t d = 0; d < g.d; ++d) {
            std::fill(h.data(), h.data() + g.n, 0.0);
            const int64_t row = (b * g.d + d) * g.L;
            for (int64_t t = 0; t < g.L; ++t) {
                const double raw = double(Dl[row + t]);
                const double dt = g.softplus ? softplus(raw) : raw;
                const double ut = double(U[row + t]);
                double y = 0;
                for (int64_t k = 0; k < g.n; ++k) {
                    const int64_t bt = (b * g.n + k) * g.L + t;
                    h[k] = std::exp(dt * double(A[d * g.n + k])) * h[k] + dt * double(Bm[bt]) * ut;
                    y += double(Cm[bt]) * h[k];
                }
                Y[row + t] = T(y);
            }
        }
}

template <typename T>
void scan_bwd(const BackwardCall& call, const ScanGeom& g) {
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, call.input(0).dtype(), {g.b, g.d, g.L}, "selective_scan grad output");
    T* gU = grad_target<T>(call.grad_input(0), call.input(0), "selective_scan grad u");
    T* gD = grad_target<T>(call.grad_input(1), call.input(1), "selective_scan grad delta");
    T* gA = grad_target<T>(call.grad_input(2), call.input(2), "selective_scan grad A");
    T* gB = grad_target<T>(call.grad_input(3), call.input(3), "selective_scan grad B");
    T* gC = grad_target<T>(call.grad_input(4), call.input(4), "selective_scan grad C");
    const T* U = call.input(0).data<T>();
    const T* Dl = call.input(1).data<T>();
    const T* A = call.input(2).data<T>();
    const T* Bm = call.input(3).data<T>();
    const T* Cm = call.input(4).data<T>();
    const T* G = gout.data<T>();
    // Parameter-like sums over d (B, C) and b (A) in double.
    Scratch<double> accA(g.d * g.n, true), accB(g.b * g.n * g.L, true), accC(g.b * g.n * g.L, true);
    Scratch<double> hs((g.L + 1) * g.n), gh(g.n);
    for (int64_t b = 0; b < g.b; ++b)
        for (int64_t d = 0; d < g.d; ++d) {
            const int64_t row = (b * g.d + d) * g.L;
            const T* Ad = A + d * g.n;
            // Forward states: hs[(t + 1)·N + k] = h_t[k], hs[k] = h_{-1} = 0.
            std::fill(hs.data(), hs.data() + g.n, 0.0);
            for (int64_t t = 0; t < g.L; ++t) {
                const double raw = double(Dl[row + t]);
                const double dt = g.softplus ? softplus(raw) : raw;
                const double ut = double(U[row + t]);
                for (int64_t k = 0; k < g.n; ++k) {
                    const int64_t bt = (b * g.n + k) * g.L + t;
                    hs[(t + 1) * g.n + k] =
                        std::exp(dt * double(Ad[k])) * hs[t * g.n + k] + dt * double(Bm[bt]) * ut;
                }
            }
            // Reverse: gh = ∂loss/∂h_t (from y_t and from h_{t+1}).
            std::fill(gh.data(), gh.data() + g.n, 0.0);
            for (int64_t t = g.L - 1; t >= 0; --t) {
                const double raw = double(Dl[row + t]);
                const double dt = g.softplus ? softplus(raw) : raw;
                const double ut = double(U[row + t]);
                const double gy = double(G[row + t]);
                double ddt = 0, du = 0;
                for (int64_t k = 0; k < g.n; ++k) {
                    const int64_t bt = (b * g.n + k) * g.L + t;
                    const double h = hs[(t + 1) * g.n + k], hp = hs[t * g.n + k];
                    const double a = double(Ad[k]);
                    const double bv = double(Bm[bt]);
                    accC[bt] += gy * h;
                    const double gk = gh[k] + gy * double(Cm[bt]);
                    const double decay = std::exp(dt * a);
                    ddt += gk * (decay * a * hp + bv * ut);
                    accA[d * g.n + k] += gk * decay * dt * hp;
                    accB[bt] += gk * dt * ut;
                    du += gk * dt * bv;
                    gh[k] = gk * decay;
                }
                if (gU) gU[row + t] = T(du);
                if (gD) gD[row + t] = T(g.softplus ? ddt * softplus_grad(raw) : ddt);
            }
        }
    if (gA)
        for (int64_t i = 0; i < g.d * g.n; ++i) gA[i] = T(accA[i]);
    if (gB)
        for (int64_t i = 0; i < g.b * g.n * g.L; ++i) gB[i] = T(accB[i]);
    if (gC)
        for (int64_t i = 0; i < g.b * g.n * g.L; ++i) gC[i] = T(accC[i]);
}

}  // namespace

void selective_scan_forward(const ForwardCall& call) {
    const auto g = scan_geometry(call);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { scan_fwd<decltype(t)>(call, g); });
}

void selective_scan_backward(const BackwardCall& call) {
    const auto g = scan_geometry(call);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { scan_bwd<decltype(t)>(call, g); });
}

}  // namespace capsule::reference
