// Reference kernel: fft_fno, the 1-D spectral convolution of the Fourier Neural Operator (Li et
// al., 2021, "Fourier Neural Operator for Parametric PDEs", SpectralConv1d):
//   x [B, Cin, L]; parameters weight_real, weight_imag [Cin, Cout, modes]; output [B, Cout, L].
//   X = rfft(x) over L                       X[b,i,k] = Σ_n x[b,i,n]·e^{-2πi·kn/L}
//   Y[b,o,k] = Σ_i X[b,i,k]·W[i,o,k]         for k < modes, W = weight_real + i·weight_imag
//   Y[b,o,k] = 0                             for modes <= k <= L/2
//   y = irfft(Y, n = L)                      y[n] = (1/L)·Σ_k c_k·Re(Y[k]·e^{2πi·kn/L})
// with torch.fft's default "backward" normalisation (no factor forward, 1/L inverse) and
// c_k = 1 for k = 0 and for k = L/2 when L is even (whose imaginary parts irfft ignores, as a C2R
// transform does), c_k = 2 otherwise. This matches
//   torch.fft.irfft(out_ft, n=L) with out_ft[:, :, :modes] = einsum("bix,iox->box",
//   torch.fft.rfft(x)[:, :, :modes], torch.complex(weight_real, weight_imag)).
// Computed as a direct DFT over the kept modes only (O(B·C·L·modes)), exact up to rounding; the
// twiddle factors come from one table of cos/sin(2π·m/L) indexed by (k·n) mod L, in double.
#include <cmath>
#include <numbers>

#include "linalg_common.hpp"

namespace capsule::reference {
namespace {

struct FnoGeom {
    int64_t b = 0, ci = 0, co = 0, L = 0, modes = 0;
};

template <typename Call>
FnoGeom fno_geometry(const Call& call) {
    const auto attrs = call.attrs();
    FnoGeom g;
    require_arity(call, 1, 2, "fft_fno");
    const Tensor x = call.input(0);
    check_view(x, "fft_fno input");
    require(x.rank() == 3,
            [&] { return "fft_fno: input must be [B, C, L], got " + shape_string(x.shape()); });
    g.b = x.dim(0);
    g.ci = x.dim(1);
    g.L = x.dim(2);
    g.modes = int_attr(attrs, "modes", 1, nullptr);
    g.co = int_attr(attrs, "out_channels", 1, nullptr);
    require(g.modes <= g.L / 2 + 1, [&] {
        return "fft_fno: modes " + std::to_string(g.modes) + " exceeds L/2 + 1 for length " +
               std::to_string(g.L);
    });
    check_tensor(call.param(0), x.dtype(), {g.ci, g.co, g.modes}, "fft_fno weight_real");
    check_tensor(call.param(1), x.dtype(), {g.ci, g.co, g.modes}, "fft_fno weight_imag");
    return g;
}

/// cos(2π m / L) and sin(2π m / L) for m in [0, L).
void twiddles(int64_t L, Scratch<double>& c, Scratch<double>& s) {
    c.reset(L);
    s.reset(L);
    for (int64_t m = 0; m < L; ++m) {
        const double a = 2.0 * std::numbers::pi * double(m) / double(L);
        c[m] = std::cos(a);
        s[m] = std::sin(a);
        // Exact values where they are known, so the DC and Nyquist modes stay purely real.
        if (2 * m == L) c[m] = -1.0, s[m] = 0.0;
        if (4 * m == L) c[m] = 0.0, s[m] = 1.0;
        if (4 * m == 3 * L) c[m] = 0.0, s[m] = -1.0;
    }
}

/// Forward DFT of the kept modes of every (batch, channel) row of x [rows, L]:
/// re/im [rows, modes].
template <typename T>
void dft_modes(const T* x, int64_t rows, int64_t L, int64_t modes, const Scratch<double>& c,
               const Scratch<double>& s, double* re, double* im) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * L;
        for (int64_t k = 0; k < modes; ++k) {
            double a = 0, b = 0;
            int64_t m = 0;  // (k·n) mod L
            for (int64_t n = 0; n < L; ++n) {
                a += double(xr[n]) * c[m];
                b -= double(xr[n]) * s[m];
                m += k;
                if (m >= L) m -= L;
            }
            re[r * modes + k] = a;
            im[r * modes + k] = b;
        }
    }
}

/// c_k / L: the irfft weight of mode k.
inline double mode_weight(int64_t k, int64_t L) {
    const bool single = k == 0 || (L % 2 == 0 && k == L / 2);
    return (single ? 1.0 : 2.0) / double(L);
}

template <typename T>
void fno_fwd(const ForwardCall& call, const FnoGeom& g) {
    const Tensor x = call.input(0), out = call.output(0);
    check_tensor(out, x.dtype(), {g.b, g.co, g.L}, "fft_fno output");
    const T* X = x.data<T>();
    const T* WR = call.param(0).data<T>();
    const T* WI = call.param(1).data<T>();
    T* Y = out.data<T>();
    if (g.b == 0 || g.co == 0 || g.L == 0) return;
    Scratch<double> c, s;
    twiddles(g.L, c, s);
    const int64_t M = g.modes;
    Scratch<double> xr(g.b * g.ci * M), xi(g.b * g.ci * M);
    dft_modes(X, g.b * g.ci, g.L, M, c, s, xr.data(), xi.data());
    Scratch<double> yr(M), yi(M);
    for (int64_t b = 0; b < g.b; ++b)
        for (int64_t o = 0; o < g.co; ++o) {
            for (int64_t k = 0; k < M; ++k) {
                double a = 0, bb = 0;
                for (int64_t i = 0; i < g.ci; ++i) {
                    const double pr = xr[(b * g.ci + i) * M + k], pi = xi[(b * g.ci + i) * M + k];
                    const double wr = double(WR[(i * g.co + o) * M + k]);
                    const double wi = double(WI[(i * g.co + o) * M + k]);
                    a += pr * wr - pi * wi;
                    bb += pr * wi + pi * wr;
                }
                const double w = mode_weight(k, g.L);
                yr[k] = a * w;
                yi[k] = bb * w;
            }
            T* y = Y + (b * g.co + o) * g.L;
            for (int64_t n = 0; n < g.L; ++n) {
                double v = 0;
                int64_t m = 0;  // (k·n) mod L
                for (int64_t k = 0; k < M; ++k) {
                    v += yr[k] * c[m] - yi[k] * s[m];
                    m += n;
                    if (m >= g.L) m -= g.L;
                }
                y[n] = T(v);
            }
        }
}

template <typename T>
void fno_bwd(const BackwardCall& call, const FnoGeom& g) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), {g.b, g.co, g.L}, "fft_fno grad output");
    T* gX = grad_target<T>(call.grad_input(0), x, "fft_fno grad input");
    T* gWR = grad_target<T>(call.grad_param(0), call.param(0), "fft_fno grad weight_real");
    T* gWI = grad_target<T>(call.grad_param(1), call.param(1), "fft_fno grad weight_imag");
    const T* X = x.data<T>();
    const T* WR = call.param(0).data<T>();
    const T* WI = call.param(1).data<T>();
    const T* G = gout.data<T>();
    const int64_t M = g.modes;
    if (g.L == 0 || g.b == 0) {
        if (gX) std::fill(gX, gX + g.b * g.ci * g.L, T(0));
        if (gWR) std::fill(gWR, gWR + g.ci * g.co * M, T(0));
        if (gWI) std::fill(gWI, gWI + g.ci * g.co * M, T(0));
        return;
    }
    Scratch<double> c, s;
    twiddles(g.L, c, s);
    // y[n] = Σ_k w_k·(Yr_k·cos − Yi_k·sin) ⇒ dYr_k = w_k·Σ_n dy·cos, dYi_k = −w_k·Σ_n dy·sin,
    // i.e. the (weighted) forward DFT of dy: dYr = w·Re(DFT dy), dYi = w·Im(DFT dy).
    Scratch<double> gr(g.b * g.co * M), gi(g.b * g.co * M);
    dft_modes(G, g.b * g.co, g.L, M, c, s, gr.data(), gi.data());
    for (int64_t r = 0; r < g.b * g.co; ++r)
        for (int64_t k = 0; k < M; ++k) {
            gr[r * M + k] *= mode_weight(k, g.L);
            gi[r * M + k] *= mode_weight(k, g.L);
        }
    Scratch<double> xr(g.b * g.ci * M), xi(g.b * g.ci * M);
    dft_modes(X, g.b * g.ci, g.L, M, c, s, xr.data(), xi.data());
    // Yr = Σ_i Xr·Wr − Xi·Wi, Yi = Σ_i Xr·Wi + Xi·Wr.
    if (gWR || gWI)
        for (int64_t i = 0; i < g.ci; ++i)
            for (int64_t o = 0; o < g.co; ++o)
                for (int64_t k = 0; k < M; ++k) {
                    double dwr = 0, dwi = 0;
                    for (int64_t b = 0; b < g.b; ++b) {
                        const double pr = xr[(b * g.ci + i) * M + k], pi = xi[(b * g.ci + i) * M + k];
                        const double qr = gr[(b * g.co + o) * M + k], qi = gi[(b * g.co + o) * M + k];
                        dwr += qr * pr + qi * pi;
                        dwi += -qr * pi + qi * pr;
                    }
                    if (gWR) gWR[(i * g.co + o) * M + k] = T(dwr);
                    if (gWI) gWI[(i * g.co + o) * M + k] = T(dwi);
                }
    if (!gX) return;
    // dXr = Σ_o dYr·Wr + dYi·Wi, dXi = Σ_o −dYr·Wi + dYi·Wr; Xr = Σ_n x·cos, Xi = −Σ_n x·sin
    // ⇒ dx[n] = Σ_k dXr_k·cos(2πkn/L) − dXi_k·sin(2πkn/L).
    Scratch<double> dr(M), di(M);
    for (int64_t b = 0; b < g.b; ++b)
        for (int64_t i = 0; i < g.ci; ++i) {
            for (int64_t k = 0; k < M; ++k) {
                double a = 0, bb = 0;
                for (int64_t o = 0; o < g.co; ++o) {
                    const double qr = gr[(b * g.co + o) * M + k], qi = gi[(b * g.co + o) * M + k];
                    const double wr = double(WR[(i * g.co + o) * M + k]);
                    const double wi = double(WI[(i * g.co + o) * M + k]);
                    a += qr * wr + qi * wi;
                    bb += -qr * wi + qi * wr;
                }
                dr[k] = a;
                di[k] = bb;
            }
            T* dx = gX + (b * g.ci + i) * g.L;
            for (int64_t n = 0; n < g.L; ++n) {
                double v = 0;
                int64_t m = 0;
                for (int64_t k = 0; k < M; ++k) {
                    v += dr[k] * c[m] - di[k] * s[m];
                    m += n;
                    if (m >= g.L) m -= g.L;
                }
                dx[n] = T(v);
            }
        }
}

}  // namespace

void fft_fno_forward(const ForwardCall& call) {
    const auto g = fno_geometry(call);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { fno_fwd<decltype(t)>(call, g); });
}

void fft_fno_backward(const BackwardCall& call) {
    const auto g = fno_geometry(call);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) { fno_bwd<decltype(t)>(call, g); });
}

}  // namespace capsule::reference
