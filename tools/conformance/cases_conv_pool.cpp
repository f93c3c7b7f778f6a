// Conformance cases of the convolution / pooling family: conv, conv2d, conv_transpose,
// conv_transpose2d, max/avg/smooth-max pools (1-D, 2-D, padded), fft_fno and selective_scan.
//
// Expected values are literal numbers worked out by hand or are computed here from the inputs by
// the defining formulas in double (a direct convolution sum, the scatter definition of the
// transposed convolution, window loops for pools, a complex DFT with std::complex for fft_fno,
// the recurrence for selective_scan); never by a kernel. Semantics are PyTorch's (docs/ops.md).
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "conformance/case_builders.hpp"
#include "conformance/harness.hpp"

namespace capsule::conformance {
namespace {

using builders::count;
using builders::Ints;
using builders::kInf;
using builders::seen;
using builders::V;
constexpr auto& grad = builders::with_grad;

/// n distinct values (a shuffled ramp, step 1/8), so that max pools have no ties.
V distinct(std::int64_t n, std::uint64_t seed) {
    V out(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = double(i - n / 2) / 8.0;
    std::uint64_t s = seed * 2654435761u + 99u;
    for (std::size_t i = out.size(); i > 1; --i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(out[i - 1], out[(s >> 33) % i]);
    }
    return out;
}

/// A tensor of deterministic values in [-1, 1], multiples of 1/64 (exact in float32).
CaseTensor random(DType d, Shape s, std::uint64_t seed) {
    return builders::random(d, std::move(s), seed, 777u);
}

KernelCase make(std::string name, BackendOp op, std::vector<CaseTensor> inputs,
                std::vector<CaseTensor> params, CaseTensor expected, Attributes attrs = {}) {
    return builders::make(std::move(name), op, std::move(inputs), std::move(params),
                          std::move(expected), std::move(attrs), {1e-5, 1e-11});
}

// ---------------------------------------------------------------------------------------------
// Convolution references (2-D; a 1-D op is the 2-D one with height 1).

struct Conv {
    std::int64_t out_c = 1, kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
    std::int64_t oph = 0, opw = 0, groups = 1;
    bool bias = true;
};

/// Direct sum: y[n, o, i, j] = b[o] + Σ_{c, u, v} x[n, g·cig + c, i·sh − ph + u·dh,
/// j·sw − pw + v·dw] · w[o, c, u, v], g = o / (out_c / groups).
V direct_conv(const V& x, std::int64_t N, std::int64_t C, std::int64_t H, std::int64_t W,
              const V& w, const V* b, const Conv& p, std::int64_t& OH, std::int64_t& OW) {
    OH = (H + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
    OW = (W + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
    const std::int64_t cig = C / p.groups, cog = p.out_c / p.groups;
    V y(std::size_t(N * p.out_c * OH * OW));
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t o = 0; o < p.out_c; ++o)
            for (std::int64_t i = 0; i < OH; ++i)
                for (std::int64_t j = 0; j < OW; ++j) {
                    double s = b ? (*b)[std::size_t(o)] : 0.0;
                    const std::int64_t g = o / cog;
                    for (std::int64_t c = 0; c < cig; ++c)
                        for (std::int64_t u = 0; u < p.kh; ++u)
                            for (std::int64_t v = 0; v < p.kw; ++v) {
                                const std::int64_t yy = i * p.sh - p.ph + u * p.dh;
                                const std::int64_t xx = j * p.sw - p.pw + v * p.dw;
                                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                                s += x[std::size_t(((n * C + g * cig + c) * H + yy) * W + xx)] *
                                     w[std::size_t(((o * cig + c) * p.kh + u) * p.kw + v)];
                            }
                    y[std::size_t(((n * p.out_c + o) * OH + i) * OW + j)] = s;
                }
    return y;
}

/// Scatter definition of the transposed convolution: every x[n, ci, i, j] adds
/// x · w[ci, o, u, v] to y[n, g·cog + o, i·sh − ph + u·dh, j·sw − pw + v·dw].
V direct_conv_transpose(const V& x, std::int64_t N, std::int64_t C, std::int64_t H,
                        std::int64_t W, const V& w, const V* b, const Conv& p, std::int64_t& OH,
                        std::int64_t& OW) {
    OH = (H - 1) * p.sh - 2 * p.ph + p.dh * (p.kh - 1) + p.oph + 1;
    OW = (W - 1) * p.sw - 2 * p.pw + p.dw * (p.kw - 1) + p.opw + 1;
    const std::int64_t cig = C / p.groups, cog = p.out_c / p.groups;
    V y(std::size_t(N * p.out_c * OH * OW), 0.0);
    for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t o = 0; o < p.out_c; ++o)
            for (std::int64_t i = 0; i < OH * OW; ++i)
                y[std::size_t((n * p.out_c + o) * OH * OW + i)] = b ? (*b)[std::size_t(o)] : 0.0;
        for (std::int64_t ci = 0; ci < C; ++ci) {
            const std::int64_t g = ci / cig;
            for (std::int64_t i = 0; i < H; ++i)
                for (std::int64_t j = 0; j < W; ++j)
                    for (std::int64_t o = 0; o < cog; ++o)
                        for (std::int64_t u = 0; u < p.kh; ++u)
                            for (std::int64_t v = 0; v < p.kw; ++v) {
                                const std::int64_t yy = i * p.sh - p.ph + u * p.dh;
                                const std::int64_t xx = j * p.sw - p.pw + v * p.dw;
                                if (yy < 0 || yy >= OH || xx < 0 || xx >= OW) continue;
                                y[std::size_t(((n * p.out_c + g * cog + o) * OH + yy) * OW + xx)] +=
                                    x[std::size_t(((n * C + ci) * H + i) * W + j)] *
                                    w[std::size_t(((ci * cog + o) * p.kh + u) * p.kw + v)];
                            }
        }
    }
    return y;
}

/// Builds a conv case. `nd` = 1 (x [N, C, L]) or 2 (x [N, C, H, W]).
KernelCase conv_case(std::string name, BackendOp op, int nd, bool transposed, CaseTensor x,
                     Conv p, std::uint64_t seed) {
    const std::int64_t N = x.shape[0], C = x.shape[1];
    const std::int64_t H = nd == 2 ? x.shape[2] : 1, W = x.shape.back();
    Shape ws = transposed ? Shape{C, p.out_c / p.groups} : Shape{p.out_c, C / p.groups};
    if (nd == 2) ws.push_back(p.kh);
    ws.push_back(p.kw);
    std::vector<CaseTensor> params{random(x.dtype, ws, seed)};
    if (p.bias) params.push_back(random(x.dtype, {p.out_c}, seed + 1));
    const V xv = seen(x), wv = seen(params[0]);
    const V bv = p.bias ? seen(params[1]) : V{};
    std::int64_t OH = 0, OW = 0;
    const V y = transposed
                    ? direct_conv_transpose(xv, N, C, H, W, wv, p.bias ? &bv : nullptr, p, OH, OW)
                    : direct_conv(xv, N, C, H, W, wv, p.bias ? &bv : nullptr, p, OH, OW);
    Shape os{N, p.out_c};
    if (nd == 2) os.push_back(OH);
    os.push_back(OW);
    Attributes attrs{{"out_channels", p.out_c}};
    auto tuple = [&](const char* key, std::int64_t h, std::int64_t w, std::int64_t def) {
        if (nd == 1) {
            if (w != def) attrs[key] = w;
        } else if (h == w) {
            if (h != def) attrs[key] = h;
        } else {
            attrs[key] = Ints{h, w};
        }
    };
    if (nd == 1)
        attrs["kernel_size"] = p.kw;
    else if (p.kh == p.kw)
        attrs["kernel_size"] = p.kh;
    else
        attrs["kernel_size"] = Ints{p.kh, p.kw};
    tuple("stride", p.sh, p.sw, 1);
    tuple("padding", p.ph, p.pw, 0);
    tuple("dilation", p.dh, p.dw, 1);
    if (transposed) tuple("output_padding", p.oph, p.opw, 0);
    if (p.groups != 1) attrs["groups"] = p.groups;
    if (!p.bias) attrs["bias"] = false;
    return make(std::move(name), op, {x}, std::move(params), {x.dtype, os, y}, std::move(attrs));
}

void conv_cases(std::vector<KernelCase>& out) {
    const auto F = DType::float32, D = DType::float64;
    // ---- conv (1-D)
    // Hand: x = [1, 2, 3, 4], w = [2, 1], b = 0.5 -> [2+2, 4+3, 6+4] + 0.5.
    out.push_back(make("conv/hand", BackendOp::conv, {f32({1, 1, 4}, {1, 2, 3, 4})},
                       {f32({1, 1, 2}, {2, 1}), f32({1}, {0.5})}, f32({1, 1, 3}, {4.5, 7.5, 10.5}),
                       {{"out_channels", std::int64_t(1)}, {"kernel_size", std::int64_t(2)}}));
    {
        Conv p;
        p.out_c = 3, p.kw = 3, p.sw = 2, p.pw = 2, p.dw = 2;
        out.push_back(conv_case("conv/stride2_pad2_dilation2", BackendOp::conv, 1, false,
                                random(F, {2, 2, 7}, 201), p, 202));
    }
    {
        Conv p;
        p.out_c = 6, p.kw = 2, p.groups = 2, p.bias = false;
        out.push_back(conv_case("conv/groups_no_bias_f64", BackendOp::conv, 1, false,
                                random(D, {1, 4, 5}, 203), p, 204));
    }
    {
        Conv p;
        p.out_c = 2, p.kw = 2, p.sw = 2, p.pw = 1;
        out.push_back(grad(conv_case("conv/grad_stride2_pad1", BackendOp::conv, 1, false,
                                     random(F, {1, 2, 5}, 205), p, 206)));
    }
    // ---- conv2d
    // Hand: x = 1..9 (3×3), w = [[1, 0], [0, 1]] -> x[i][j] + x[i+1][j+1].
    out.push_back(make("conv2d/hand", BackendOp::conv2d,
                       {f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})}, {f32({1, 1, 2, 2}, {1, 0, 0, 1})},
                       f32({1, 1, 2, 2}, {6, 8, 12, 14}),
                       {{"out_channels", std::int64_t(1)}, {"kernel_size", std::int64_t(2)},
                        {"bias", false}}));
    {
        Conv p;
        p.out_c = 4, p.kh = p.kw = 3, p.sh = p.sw = 2, p.ph = p.pw = 1;
        out.push_back(conv_case("conv2d/stride2_pad1", BackendOp::conv2d, 2, false,
                                random(F, {2, 3, 5, 5}, 207), p, 208));
    }
    {
        Conv p;
        p.out_c = 4, p.kh = 2, p.kw = 3, p.sh = 1, p.sw = 2, p.ph = 1, p.pw = 0, p.dh = 2,
        p.dw = 1, p.groups = 2;
        out.push_back(conv_case("conv2d/asymmetric_dilation_groups", BackendOp::conv2d, 2, false,
                                random(F, {1, 4, 6, 5}, 209), p, 210));
    }
    {
        Conv p;
        p.out_c = 3, p.kh = p.kw = 2, p.groups = 3;
        out.push_back(conv_case("conv2d/depthwise_f64", BackendOp::conv2d, 2, false,
                                random(D, {2, 3, 3, 4}, 211), p, 212));
    }
    {
        Conv p;  // LeNet's first layer shape on a batch (several images per GEMM chunk)
        p.out_c = 6, p.kh = p.kw = 5, p.ph = p.pw = 2;
        auto c = conv_case("conv2d/lenet_conv1_batch", BackendOp::conv2d, 2, false,
                           random(F, {3, 1, 12, 12}, 213), p, 214);
        out.push_back(std::move(c));
    }
    {
        Conv p;  // big enough for several im2col chunks of several images each
        p.out_c = 3, p.kh = p.kw = 5, p.ph = p.pw = 2;
        auto c = conv_case("conv2d/multi_chunk_batch", BackendOp::conv2d, 2, false,
                           random(F, {5, 2, 32, 32}, 235), p, 236);
        c.atol = 2e-5;
        out.push_back(std::move(c));
    }
    {
        Conv p;
        p.out_c = 5, p.bias = true;
        out.push_back(conv_case("conv2d/pointwise_1x1", BackendOp::conv2d, 2, false,
                                random(F, {2, 3, 2, 3}, 215), p, 216));
    }
    {
        Conv p;
        p.out_c = 2, p.kh = p.kw = 2, p.sh = p.sw = 2, p.ph = p.pw = 1;
        out.push_back(grad(conv_case("conv2d/grad_stride2_pad1", BackendOp::conv2d, 2, false,
                                     random(F, {2, 1, 3, 3}, 217), p, 218)));
    }
    {
        Conv p;
        p.out_c = 2, p.kh = p.kw = 2, p.dh = p.dw = 2, p.groups = 2, p.bias = false;
        out.push_back(grad(conv_case("conv2d/grad_groups_dilation", BackendOp::conv2d, 2, false,
                                     random(D, {1, 2, 4, 4}, 219), p, 220)));
    }
    // ---- conv_transpose (1-D)
    // Hand: x = [1, 2], w = [1, 1], stride 2 -> [1, 1, 2, 2].
    out.push_back(make("conv_transpose/hand", BackendOp::conv_transpose, {f32({1, 1, 2}, {1, 2})},
                       {f32({1, 1, 2}, {1, 1})}, f32({1, 1, 4}, {1, 1, 2, 2}),
                       {{"out_channels", std::int64_t(1)}, {"kernel_size", std::int64_t(2)},
                        {"stride", std::int64_t(2)}, {"bias", false}}));
    {
        Conv p;
        p.out_c = 3, p.kw = 3, p.sw = 2, p.pw = 1, p.opw = 1;
        out.push_back(conv_case("conv_transpose/stride2_pad1_output_padding1",
                                BackendOp::conv_transpose, 1, true, random(F, {2, 2, 4}, 221), p,
                                222));
    }
    {
        Conv p;
        p.out_c = 4, p.kw = 2, p.dw = 3, p.groups = 2, p.bias = false;
        out.push_back(conv_case("conv_transpose/groups_dilation_f64", BackendOp::conv_transpose, 1,
                                true, random(D, {1, 2, 3}, 223), p, 224));
    }
    {
        Conv p;
        p.out_c = 2, p.kw = 3, p.sw = 2, p.pw = 1;
        out.push_back(grad(conv_case("conv_transpose/grad_stride2_pad1", BackendOp::conv_transpose,
                                     1, true, random(F, {1, 2, 3}, 225), p, 226)));
    }
    // ---- conv_transpose2d
    // Hand: x = [[1, 2], [3, 4]], w = ones(2×2), stride 1 -> [[1, 3, 2], [4, 10, 6], [3, 7, 4]].
    out.push_back(make("conv_transpose2d/hand", BackendOp::conv_transpose2d,
                       {f32({1, 1, 2, 2}, {1, 2, 3, 4})}, {f32({1, 1, 2, 2}, {1, 1, 1, 1})},
                       f32({1, 1, 3, 3}, {1, 3, 2, 4, 10, 6, 3, 7, 4}),
                       {{"out_channels", std::int64_t(1)}, {"kernel_size", std::int64_t(2)},
                        {"bias", false}}));
    {
        Conv p;
        p.out_c = 3, p.kh = p.kw = 3, p.sh = p.sw = 2, p.ph = p.pw = 1, p.oph = p.opw = 1;
        out.push_back(conv_case("conv_transpose2d/stride2_pad1_output_padding1",
                                BackendOp::conv_transpose2d, 2, true, random(F, {2, 2, 3, 3}, 227),
                                p, 228));
    }
    {
        Conv p;
        p.out_c = 2, p.kh = 2, p.kw = 2, p.sh = 1, p.sw = 2, p.dh = 2, p.dw = 1, p.groups = 2;
        out.push_back(conv_case("conv_transpose2d/groups_dilation_f64",
                                BackendOp::conv_transpose2d, 2, true, random(D, {1, 4, 3, 2}, 229),
                                p, 230));
    }
    {
        Conv p;  // several im2col chunks
        p.out_c = 4, p.kh = p.kw = 3, p.bias = false;
        out.push_back(conv_case("conv_transpose2d/multi_chunk_batch", BackendOp::conv_transpose2d,
                                2, true, random(F, {3, 2, 40, 40}, 237), p, 238));
    }
    {
        Conv p;  // output_padding allowed because it is smaller than the dilation
        p.out_c = 1, p.kh = p.kw = 2, p.dh = p.dw = 2, p.oph = p.opw = 1;
        out.push_back(conv_case("conv_transpose2d/output_padding_below_dilation",
                                BackendOp::conv_transpose2d, 2, true, random(F, {2, 1, 2, 2}, 231),
                                p, 232));
    }
    {
        Conv p;
        p.out_c = 2, p.kh = p.kw = 2, p.sh = p.sw = 2, p.ph = p.pw = 1, p.oph = p.opw = 1;
        out.push_back(grad(conv_case("conv_transpose2d/grad_stride2_outpad", BackendOp::conv_transpose2d,
                                     2, true, random(F, {1, 2, 2, 2}, 233), p, 234)));
    }
}

// ---------------------------------------------------------------------------------------------
// Pool references (2-D; 1-D pools are height 1).

enum class Pool { max, avg, smooth };

struct PoolP {
    std::int64_t kh = 1, kw = 1, sh = 0, sw = 0, ph = 0, pw = 0;  // stride 0: = kernel
    bool ceil_mode = false, count_include_pad = true;
    double temperature = 1.0;
};

std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, bool ceil) {
    // PyTorch: floor or ceil of (in + 2p − k)/s + 1, and with ceil_mode the last window must
    // start inside the input or the left padding.
    const std::int64_t num = in + 2 * p - k;
    std::int64_t o = (ceil ? (num + s - 1) / s : num / s) + 1;
    if (ceil && (o - 1) * s >= in + p) --o;
    return o;
}

V pool_ref(const V& x, std::int64_t planes, std::int64_t H, std::int64_t W, Pool kind, PoolP p,
           std::int64_t& OH, std::int64_t& OW) {
    const std::int64_t sh = p.sh ? p.sh : p.kh, sw = p.sw ? p.sw : p.kw;
    OH = pool_out(H, p.kh, sh, p.ph, p.ceil_mode);
    OW = pool_out(W, p.kw, sw, p.pw, p.ceil_mode);
    V y(std::size_t(planes * OH * OW));
    for (std::int64_t c = 0; c < planes; ++c)
        for (std::int64_t i = 0; i < OH; ++i)
            for (std::int64_t j = 0; j < OW; ++j) {
                // Window in padded coordinates, cut at the padded border (avg divisor), then at
                // the input.
                const std::int64_t y0 = i * sh - p.ph, x0 = j * sw - p.pw;
                const std::int64_t y1 = std::min(y0 + p.kh, H + p.ph), x1 = std::min(x0 + p.kw, W + p.pw);
                const std::int64_t padded_area = (y1 - y0) * (x1 - x0);
                double best = -kInf, sum = 0;
                std::int64_t n = 0;
                std::vector<double> win;
                for (std::int64_t yy = std::max<std::int64_t>(y0, 0); yy < std::min(y1, H); ++yy)
                    for (std::int64_t xx = std::max<std::int64_t>(x0, 0); xx < std::min(x1, W); ++xx) {
                        const double v = x[std::size_t((c * H + yy) * W + xx)];
                        best = std::max(best, v);
                        sum += v;
                        ++n;
                        win.push_back(v);
                    }
                double r = 0;
                switch (kind) {
                    case Pool::max: r = best; break;
                    case Pool::avg: r = sum / double(p.count_include_pad ? padded_area : n); break;
                    case Pool::smooth: {
                        double z = 0;
                        for (double v : win) z += std::exp(v / p.temperature);
                        r = p.temperature * std::log(z);  // values are small: no overflow
                        break;
                    }
                }
                y[std::size_t((c * OH + i) * OW + j)] = r;
            }
    return y;
}

KernelCase pool_case(std::string name, BackendOp op, int nd, Pool kind, bool padded, CaseTensor x,
                     PoolP p) {
    const std::int64_t N = x.shape[0], C = x.shape[1];
    const std::int64_t H = nd == 2 ? x.shape[2] : 1, W = x.shape.back();
    if (nd == 1) p.kh = 1, p.sh = 1, p.ph = 0;
    std::int64_t OH = 0, OW = 0;
    const V y = pool_ref(seen(x), N * C, H, W, kind, p, OH, OW);
    Shape os{N, C};
    if (nd == 2) os.push_back(OH);
    os.push_back(OW);
    Attributes attrs;
    auto tuple = [&](const char* key, std::int64_t h, std::int64_t w) {
        if (nd == 1)
            attrs[key] = w;
        else if (h == w)
            attrs[key] = h;
        else
            attrs[key] = Ints{h, w};
    };
    tuple("kernel_size", p.kh, p.kw);
    if (p.sw) tuple("stride", p.sh ? p.sh : p.kh, p.sw);
    if (padded) {
        if (p.ph || p.pw) tuple("padding", p.ph, p.pw);
        if (p.ceil_mode) attrs["ceil_mode"] = true;
        if (kind == Pool::avg && !p.count_include_pad) attrs["count_include_pad"] = false;
    }
    if (kind == Pool::smooth && p.temperature != 1.0) attrs["temperature"] = p.temperature;
    return make(std::move(name), op, {x}, {}, {x.dtype, os, y}, std::move(attrs));
}

CaseTensor distinct_tensor(DType d, Shape s, std::uint64_t seed) {
    const auto n = count(s);
    return {d, std::move(s), distinct(n, seed)};
}

void pool_cases(std::vector<KernelCase>& out) {
    const auto F = DType::float32, D = DType::float64;
    auto P = [](std::int64_t kh, std::int64_t kw, std::int64_t sh = 0, std::int64_t sw = 0,
                std::int64_t ph = 0, std::int64_t pw = 0) {
        PoolP p;
        p.kh = kh, p.kw = kw, p.sh = sh, p.sw = sw, p.ph = ph, p.pw = pw;
        return p;
    };
    // ---- max_pool
    out.push_back(make("max_pool/hand", BackendOp::max_pool, {f32({1, 1, 6}, {1, 5, 2, 4, 3, 0})}, {},
                       f32({1, 1, 3}, {5, 4, 3}), {{"kernel_size", std::int64_t(2)}}));
    out.push_back(pool_case("max_pool/k3_stride2_f64", BackendOp::max_pool, 1, Pool::max, false,
                            distinct_tensor(D, {2, 2, 7}, 301), P(1, 3, 1, 2)));
    out.push_back(grad(pool_case("max_pool/grad_overlapping", BackendOp::max_pool, 1, Pool::max,
                                 false, distinct_tensor(F, {1, 2, 7}, 302), P(1, 3, 1, 2))));
    // ---- max_pool2d
    out.push_back(make("max_pool2d/hand", BackendOp::max_pool2d,
                       {f32({1, 1, 4, 4}, {1, 2, 5, 3, 4, 0, 1, 1, 7, 8, 2, 9, 6, 6, 3, 0})}, {},
                       f32({1, 1, 2, 2}, {4, 5, 8, 9}), {{"kernel_size", std::int64_t(2)}}));
    out.push_back(pool_case("max_pool2d/rect_kernel_stride", BackendOp::max_pool2d, 2, Pool::max,
                            false, distinct_tensor(F, {2, 2, 5, 6}, 303), P(2, 3, 1, 2)));
    out.push_back(grad(pool_case("max_pool2d/grad", BackendOp::max_pool2d, 2, Pool::max, false,
                                 distinct_tensor(D, {1, 2, 4, 4}, 304), P(2, 2))));
    // First maximum wins on ties (the gradient goes to the first max in row-major order); a
    // forward check of a tie, and the values it selects.
    out.push_back(make("max_pool2d/ties_forward", BackendOp::max_pool2d,
                       {f32({1, 1, 2, 2}, {3, 3, 3, 3})}, {}, f32({1, 1, 1, 1}, {3}),
                       {{"kernel_size", std::int64_t(2)}}));
    // ---- max_pool2d_pad
    {
        // Negative values: the padding must never win.
        CaseTensor x = distinct_tensor(F, {1, 2, 4, 5}, 305);
        for (auto& v : x.values) v = -std::fabs(v) - 1.0;
        out.push_back(pool_case("max_pool2d_pad/pad1_negative_values", BackendOp::max_pool2d_pad, 2,
                                Pool::max, true, x, P(3, 3, 2, 2, 1, 1)));
    }
    {
        PoolP p = P(2, 3, 2, 2, 1, 1);
        p.ceil_mode = true;
        out.push_back(pool_case("max_pool2d_pad/ceil_mode", BackendOp::max_pool2d_pad, 2,
                                Pool::max, true, distinct_tensor(D, {1, 1, 5, 6}, 306), p));
    }
    out.push_back(pool_case("max_pool2d_pad/no_padding_default_stride",
                            BackendOp::max_pool2d_pad, 2, Pool::max, true,
                            distinct_tensor(F, {2, 1, 4, 4}, 307), P(2, 2)));
    out.push_back(grad(pool_case("max_pool2d_pad/grad_pad1", BackendOp::max_pool2d_pad, 2,
                                 Pool::max, true, distinct_tensor(F, {1, 2, 3, 4}, 308),
                                 P(2, 2, 2, 2, 1, 1))));
    // ---- avg_pool
    out.push_back(make("avg_pool/hand", BackendOp::avg_pool, {f32({1, 1, 5}, {1, 2, 3, 4, 5})}, {},
                       f32({1, 1, 2}, {1.5, 3.5}), {{"kernel_size", std::int64_t(2)}}));
    out.push_back(pool_case("avg_pool/k3_stride1_f64", BackendOp::avg_pool, 1, Pool::avg, false,
                            random(D, {2, 3, 6}, 309), P(1, 3, 1, 1)));
    out.push_back(grad(pool_case("avg_pool/grad", BackendOp::avg_pool, 1, Pool::avg, false,
                                 random(F, {2, 2, 5}, 310), P(1, 2, 1, 1))));
    // ---- avg_pool2d
    out.push_back(make("avg_pool2d/hand", BackendOp::avg_pool2d,
                       {f32({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})}, {}, f32({1, 1, 1, 2}, {3.5, 5.5}),
                       {{"kernel_size", std::int64_t(2)}}));
    out.push_back(pool_case("avg_pool2d/rect_stride", BackendOp::avg_pool2d, 2, Pool::avg, false,
                            random(F, {1, 2, 5, 5}, 311), P(3, 2, 2, 1)));
    out.push_back(grad(pool_case("avg_pool2d/grad_overlapping", BackendOp::avg_pool2d, 2,
                                 Pool::avg, false, random(D, {1, 2, 4, 4}, 312), P(2, 2, 1, 1))));
    // ---- avg_pool2d_pad
    // Hand: x = [[1, 2], [3, 4]], kernel 2, stride 2, padding 1 -> windows of one value each.
    // count_include_pad: value / 4; without: the value itself.
    out.push_back(make("avg_pool2d_pad/hand_count_include_pad", BackendOp::avg_pool2d_pad,
                       {f32({1, 1, 2, 2}, {1, 2, 3, 4})}, {}, f32({1, 1, 2, 2}, {0.25, 0.5, 0.75, 1}),
                       {{"kernel_size", std::int64_t(2)}, {"padding", std::int64_t(1)}}));
    out.push_back(make("avg_pool2d_pad/hand_exclude_pad", BackendOp::avg_pool2d_pad,
                       {f32({1, 1, 2, 2}, {1, 2, 3, 4})}, {}, f32({1, 1, 2, 2}, {1, 2, 3, 4}),
                       {{"kernel_size", std::int64_t(2)}, {"padding", std::int64_t(1)},
                        {"count_include_pad", false}}));
    out.push_back(pool_case("avg_pool2d_pad/include_pad", BackendOp::avg_pool2d_pad, 2, Pool::avg,
                            true, random(F, {2, 1, 5, 4}, 313), P(3, 3, 2, 2, 1, 1)));
    {
        PoolP p = P(3, 3, 2, 2, 1, 1);
        p.count_include_pad = false;
        out.push_back(pool_case("avg_pool2d_pad/exclude_pad_f64", BackendOp::avg_pool2d_pad, 2,
                                Pool::avg, true, random(D, {1, 2, 5, 4}, 314), p));
    }
    {
        // ceil_mode: the last window hangs over the padded border; its divisor is cut at the
        // padded border (count_include_pad) or at the input (exclude).
        PoolP p = P(2, 3, 2, 2, 1, 1);
        p.ceil_mode = true;
        out.push_back(pool_case("avg_pool2d_pad/ceil_mode_include_pad", BackendOp::avg_pool2d_pad,
                                2, Pool::avg, true, random(F, {1, 1, 4, 6}, 315), p));
        p.count_include_pad = false;
        out.push_back(pool_case("avg_pool2d_pad/ceil_mode_exclude_pad", BackendOp::avg_pool2d_pad,
                                2, Pool::avg, true, random(F, {1, 1, 4, 6}, 316), p));
    }
    out.push_back(grad(pool_case("avg_pool2d_pad/grad_include_pad", BackendOp::avg_pool2d_pad, 2,
                                 Pool::avg, true, random(F, {1, 2, 3, 3}, 317), P(2, 2, 1, 1, 1, 1))));
    {
        PoolP p = P(3, 2, 2, 1, 1, 1);
        p.count_include_pad = false;
        p.ceil_mode = true;
        out.push_back(grad(pool_case("avg_pool2d_pad/grad_exclude_pad_ceil", BackendOp::avg_pool2d_pad,
                                     2, Pool::avg, true, random(D, {1, 1, 4, 4}, 318), p)));
    }
    // ---- smooth_max_pool (T·log Σ exp(x/T))
    // Hand: window [0, 0] with T = 1 -> log 2.
    out.push_back(make("smooth_max_pool/hand", BackendOp::smooth_max_pool, {f64({1, 1, 2}, {0, 0})},
                       {}, f64({1, 1, 1}, {std::log(2.0)}), {{"kernel_size", std::int64_t(2)}}));
    {
        PoolP p = P(1, 3, 1, 2);
        p.temperature = 0.25;
        out.push_back(pool_case("smooth_max_pool/temperature_stride", BackendOp::smooth_max_pool, 1,
                                Pool::smooth, false, random(F, {2, 2, 7}, 319), p));
        out.push_back(grad(pool_case("smooth_max_pool/grad", BackendOp::smooth_max_pool, 1,
                                     Pool::smooth, false, random(D, {1, 2, 6}, 320), p)));
    }
    {
        // Large values: the stable form must not overflow (exp(800) is inf in double).
        CaseTensor x = f64({1, 1, 2}, {800, 800});
        out.push_back(make("smooth_max_pool/large_values_stable", BackendOp::smooth_max_pool, {x},
                           {}, f64({1, 1, 1}, {800 + std::log(2.0)}),
                           {{"kernel_size", std::int64_t(2)}}));
    }
    // ---- smooth_max_pool2d
    out.push_back(pool_case("smooth_max_pool2d/default_temperature", BackendOp::smooth_max_pool2d,
                            2, Pool::smooth, false, random(F, {1, 2, 4, 4}, 321), P(2, 2)));
    {
        PoolP p = P(2, 3, 1, 2);
        p.temperature = 2.0;
        out.push_back(pool_case("smooth_max_pool2d/rect_overlap_f64", BackendOp::smooth_max_pool2d,
                                2, Pool::smooth, false, random(D, {2, 1, 4, 5}, 322), p));
        out.push_back(grad(pool_case("smooth_max_pool2d/grad", BackendOp::smooth_max_pool2d, 2,
                                     Pool::smooth, false, random(F, {1, 2, 3, 5}, 323), p)));
    }
}

// ---------------------------------------------------------------------------------------------
// fft_fno: irfft(rfft(x)[:modes] · W, n = L) with torch.fft's default normalisation, computed
// with std::complex DFTs and the Hermitian extension of the half spectrum.

V fno_ref(const V& x, std::int64_t B, std::int64_t Ci, std::int64_t L, const V& wr, const V& wi,
          std::int64_t Co, std::int64_t modes) {
    using C = std::complex<double>;
    const double two_pi = 2 * std::numbers::pi;
    V y(std::size_t(B * Co * L), 0.0);
    const std::int64_t half = L / 2 + 1;
    for (std::int64_t b = 0; b < B; ++b) {
        // rfft of every input channel.
        std::vector<std::vector<C>> X(static_cast<std::size_t>(Ci), std::vector<C>(static_cast<std::size_t>(half)));
        for (std::int64_t i = 0; i < Ci; ++i)
            for (std::int64_t k = 0; k < half; ++k) {
                C s = 0;
                for (std::int64_t n = 0; n < L; ++n)
                    s += x[std::size_t((b * Ci + i) * L + n)] * std::polar(1.0, -two_pi * double(k * n) / double(L));
                X[std::size_t(i)][std::size_t(k)] = s;
            }
        for (std::int64_t o = 0; o < Co; ++o) {
            std::vector<C> Y(std::size_t(half), C(0));
            for (std::int64_t k = 0; k < modes; ++k)
                for (std::int64_t i = 0; i < Ci; ++i)
                    Y[std::size_t(k)] += X[std::size_t(i)][std::size_t(k)] *
                                         C(wr[std::size_t((i * Co + o) * modes + k)],
                                           wi[std::size_t((i * Co + o) * modes + k)]);
            // irfft: full Hermitian spectrum, inverse DFT / L, real part.
            for (std::int64_t n = 0; n < L; ++n) {
                C s = 0;
                for (std::int64_t k = 0; k < L; ++k) {
                    const C Yk = k < half ? Y[std::size_t(k)] : std::conj(Y[std::size_t(L - k)]);
                    s += Yk * std::polar(1.0, two_pi * double(k * n) / double(L));
                }
                y[std::size_t((b * Co + o) * L + n)] = s.real() / double(L);
            }
        }
    }
    return y;
}

KernelCase fno_case(std::string name, CaseTensor x, std::int64_t co, std::int64_t modes,
                    std::uint64_t seed) {
    const std::int64_t B = x.shape[0], Ci = x.shape[1], L = x.shape[2];
    CaseTensor wr = random(x.dtype, {Ci, co, modes}, seed), wi = random(x.dtype, {Ci, co, modes}, seed + 1);
    const V y = fno_ref(seen(x), B, Ci, L, seen(wr), seen(wi), co, modes);
    return make(std::move(name), BackendOp::fft_fno, {x}, {wr, wi}, {x.dtype, {B, co, L}, y},
                {{"modes", modes}, {"out_channels", co}});
}

void fno_cases(std::vector<KernelCase>& out) {
    const auto F = DType::float32, D = DType::float64;
    // Hand: L = 4, one channel, x = [1, 0, 0, 0] -> X = [1, 1, 1]; keep modes 0..1 with W = 1:
    // Y = [1, 1, 0] -> y[n] = (1 + 2·cos(πn/2))/4 = [0.75, 0.25, -0.25, 0.25].
    out.push_back(make("fft_fno/hand_impulse", BackendOp::fft_fno, {f64({1, 1, 4}, {1, 0, 0, 0})},
                       {f64({1, 1, 2}, {1, 1}), f64({1, 1, 2}, {0, 0})},
                       f64({1, 1, 4}, {0.75, 0.25, -0.25, 0.25}),
                       {{"modes", std::int64_t(2)}, {"out_channels", std::int64_t(1)}}));
    out.push_back(fno_case("fft_fno/even_length_with_nyquist_f64", random(D, {2, 2, 8}, 401), 3, 5, 402));
    out.push_back(fno_case("fft_fno/odd_length_f64", random(D, {1, 3, 7}, 403), 2, 4, 404));
    out.push_back(fno_case("fft_fno/few_modes_f32", random(F, {2, 2, 16}, 405), 2, 3, 406));
    out.push_back(fno_case("fft_fno/single_mode_length1", random(D, {2, 1, 1}, 407), 2, 1, 408));
    out.push_back(grad(fno_case("fft_fno/grad_even_nyquist", random(D, {1, 2, 6}, 409), 2, 4, 410)));
    out.push_back(grad(fno_case("fft_fno/grad_odd", random(F, {2, 1, 5}, 411), 1, 3, 412)));
}

// ---------------------------------------------------------------------------------------------
// selective_scan: the recurrence of Mamba's selective_scan_ref (no D, z, delta_bias).

V scan_ref(const V& u, const V& delta, const V& A, const V& Bm, const V& Cm, std::int64_t B,
           std::int64_t D, std::int64_t L, std::int64_t N, bool softplus) {
    V y(std::size_t(B * D * L));
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t d = 0; d < D; ++d) {
            V h(std::size_t(N), 0.0);
            for (std::int64_t t = 0; t < L; ++t) {
                double dt = delta[std::size_t((b * D + d) * L + t)];
                if (softplus) dt = dt > 20 ? dt : std::log(1 + std::exp(dt));
                double acc = 0;
                for (std::int64_t n = 0; n < N; ++n) {
                    const double dA = std::exp(dt * A[std::size_t(d * N + n)]);
                    const double dBu = dt * Bm[std::size_t((b * N + n) * L + t)] * u[std::size_t((b * D + d) * L + t)];
                    h[std::size_t(n)] = dA * h[std::size_t(n)] + dBu;
                    acc += h[std::size_t(n)] * Cm[std::size_t((b * N + n) * L + t)];
                }
                y[std::size_t((b * D + d) * L + t)] = acc;
            }
        }
    return y;
}

KernelCase scan_case(std::string name, DType dt, std::int64_t B, std::int64_t D, std::int64_t L,
                     std::int64_t N, bool softplus, std::uint64_t seed) {
    CaseTensor u = random(dt, {B, D, L}, seed);
    CaseTensor delta = random(dt, {B, D, L}, seed + 1);
    for (auto& v : delta.values) v = softplus ? v : 0.55 + 0.45 * v;  // dt in [0.1, 1]
    CaseTensor A = random(dt, {D, N}, seed + 2);
    for (auto& v : A.values) v = -0.55 + 0.45 * v;  // A in [-1, -0.1]
    CaseTensor Bm = random(dt, {B, N, L}, seed + 3), Cm = random(dt, {B, N, L}, seed + 4);
    const V y = scan_ref(seen(u), seen(delta), seen(A), seen(Bm), seen(Cm), B, D, L, N, softplus);
    Attributes attrs;
    if (softplus) attrs["delta_softplus"] = true;
    return make(std::move(name), BackendOp::selective_scan, {u, delta, A, Bm, Cm}, {},
                {dt, {B, D, L}, y}, std::move(attrs));
}

void scan_cases(std::vector<KernelCase>& out) {
    const auto F = DType::float32, D = DType::float64;
    // Hand: B = D = N = 1, L = 2, u = [1, 1], delta = [1, 1], A = [[0]], B = [[1, 1]],
    // C = [[1, 2]]: h_0 = 1, h_1 = 1·1 + 1 = 2 -> y = [1, 4].
    out.push_back(make("selective_scan/hand", BackendOp::selective_scan,
                       {f32({1, 1, 2}, {1, 1}), f32({1, 1, 2}, {1, 1}), f32({1, 1}, {0}),
                        f32({1, 1, 2}, {1, 1}), f32({1, 1, 2}, {1, 2})},
                       {}, f32({1, 1, 2}, {1, 4})));
    out.push_back(scan_case("selective_scan/f32", F, 2, 3, 5, 4, false, 501));
    out.push_back(scan_case("selective_scan/softplus_f64", D, 2, 2, 6, 3, true, 502));
    out.push_back(scan_case("selective_scan/length1_state1", D, 1, 2, 1, 1, false, 503));
    out.push_back(grad(scan_case("selective_scan/grad", D, 1, 2, 3, 2, false, 504)));
    out.push_back(grad(scan_case("selective_scan/grad_softplus", F, 1, 2, 3, 2, true, 505)));
}

/// Inputs, parameters and attributes the kernels must refuse, with (part of) their message.
void error_cases(std::vector<KernelCase>& out) {
    using I = std::int64_t;
    constexpr auto F = DType::float32;
    // conv: parameters are not seen by shape inference, only by the kernel
    out.push_back(error_case("conv2d/error_weight_shape", BackendOp::conv2d,
                             {random(F, {1, 1, 4, 4}, 951)},
                             "conv2d weight has shape [2, 1, 2, 2], expected [2, 1, 3, 3]", {},
                             {{"out_channels", I(2)}, {"kernel_size", I(3)}},
                             {random(F, {2, 1, 2, 2}, 952), random(F, {2}, 953)}));
    out.push_back(error_case("conv2d/error_bias_shape", BackendOp::conv2d,
                             {random(F, {1, 1, 3, 3}, 954)},
                             "conv2d bias has shape [1], expected [2]", {},
                             {{"out_channels", I(2)}, {"kernel_size", I(2)}},
                             {random(F, {2, 1, 2, 2}, 955), random(F, {1}, 956)}));
    out.push_back(error_case("conv2d/error_groups", BackendOp::conv2d,
                             {random(F, {1, 3, 3, 3}, 957)},
                             "conv2d: input channels 3 are not divisible by groups 2",
                             f32({1, 2, 2, 2}, {}),
                             {{"out_channels", I(2)}, {"kernel_size", I(2)}, {"groups", I(2)},
                              {"bias", false}},
                             {random(F, {2, 1, 2, 2}, 958)}));
    out.push_back(error_case("conv2d/error_input_rank", BackendOp::conv2d,
                             {random(F, {1, 4, 4}, 959)},
                             "conv2d: input must have rank 4, got shape [1, 4, 4]",
                             f32({1, 1, 3, 3}, {}),
                             {{"out_channels", I(1)}, {"kernel_size", I(2)}, {"bias", false}},
                             {random(F, {1, 1, 2, 2}, 960)}));
    out.push_back(error_case("conv/error_kernel_larger_than_input", BackendOp::conv,
                             {random(F, {1, 1, 2}, 961)},
                             "conv: padded input size 2 is smaller than the dilated kernel 3",
                             f32({1, 1, 1}, {}),
                             {{"out_channels", I(1)}, {"kernel_size", I(3)}, {"bias", false}},
                             {random(F, {1, 1, 3}, 962)}));
    out.push_back(error_case("conv/error_weight_dtype", BackendOp::conv,
                             {random(F, {1, 1, 4}, 963)},
                             "conv weight has dtype float64, expected float32", {},
                             {{"out_channels", I(1)}, {"kernel_size", I(2)}, {"bias", false}},
                             {random(DType::float64, {1, 1, 2}, 964)}));
    out.push_back(error_case("conv_transpose/error_output_padding", BackendOp::conv_transpose,
                             {random(F, {1, 1, 3}, 965)},
                             "conv_transpose: output_padding must be smaller than stride or "
                             "dilation",
                             f32({1, 1, 6}, {}),
                             {{"out_channels", I(1)}, {"kernel_size", I(2)},
                              {"output_padding", I(2)}, {"bias", false}},
                             {random(F, {1, 1, 2}, 966)}));
    out.push_back(error_case("conv2d/error_missing_kernel_size", BackendOp::conv2d,
                             {random(F, {1, 1, 3, 3}, 967)}, "missing attribute 'kernel_size'",
                             f32({1, 1, 2, 2}, {}), {{"out_channels", I(1)}, {"bias", false}},
                             {random(F, {1, 1, 2, 2}, 968)}));
    // pools
    out.push_back(error_case("max_pool2d_pad/error_padding_too_large", BackendOp::max_pool2d_pad,
                             {random(F, {1, 1, 4, 4}, 969)},
                             "max_pool2d_pad: padding must be at most half the kernel size",
                             f32({1, 1, 4, 4}, {}), {{"kernel_size", I(2)}, {"padding", I(2)}}));
    out.push_back(error_case("avg_pool/error_kernel_larger_than_input", BackendOp::avg_pool,
                             {random(F, {1, 1, 2}, 970)},
                             "avg_pool: input size 2 is smaller than the kernel 3",
                             f32({1, 1, 1}, {}), {{"kernel_size", I(3)}}));
    out.push_back(error_case("smooth_max_pool/error_temperature_zero", BackendOp::smooth_max_pool,
                             {random(F, {1, 1, 4}, 971)},
                             "smooth_max_pool: attribute 'temperature' must be a finite number > 0",
                             f32({1, 1, 2}, {}), {{"kernel_size", I(2)}, {"temperature", 0.0}}));
    out.push_back(error_case("max_pool2d/error_stride_zero", BackendOp::max_pool2d,
                             {random(F, {1, 1, 4, 4}, 972)},
                             "attribute 'stride' = 0 must be >= 1", f32({1, 1, 2, 2}, {}),
                             {{"kernel_size", I(2)}, {"stride", I(0)}}));
    // fft_fno / selective_scan
    out.push_back(error_case("fft_fno/error_too_many_modes", BackendOp::fft_fno,
                             {random(F, {1, 1, 4}, 973)},
                             "fft_fno: modes 4 exceeds L/2 + 1 for length 4", f32({1, 1, 4}, {}),
                             {{"modes", I(4)}, {"out_channels", I(1)}},
                             {random(F, {1, 1, 4}, 974), random(F, {1, 1, 4}, 975)}));
    out.push_back(error_case("fft_fno/error_weight_shape", BackendOp::fft_fno,
                             {random(F, {1, 2, 4}, 976)},
                             "fft_fno weight_imag has shape [1, 1, 2], expected [2, 1, 2]", {},
                             {{"modes", I(2)}, {"out_channels", I(1)}},
                             {random(F, {2, 1, 2}, 977), random(F, {1, 1, 2}, 978)}));
    out.push_back(error_case("selective_scan/error_A_rank", BackendOp::selective_scan,
                             {random(F, {1, 2, 3}, 979), random(F, {1, 2, 3}, 980),
                              random(F, {2}, 981), random(F, {1, 2, 3}, 982),
                              random(F, {1, 2, 3}, 983)},
                             "selective_scan: A must be [D, N], got [2]", f32({1, 2, 3}, {})));
    out.push_back(error_case("selective_scan/error_delta_shape", BackendOp::selective_scan,
                             {random(F, {1, 2, 3}, 984), random(F, {1, 2, 4}, 985),
                              random(F, {2, 2}, 986), random(F, {1, 2, 3}, 987),
                              random(F, {1, 2, 3}, 988)},
                             "selective_scan delta has shape [1, 2, 4], expected [1, 2, 3]",
                             f32({1, 2, 3}, {})));
}

}  // namespace

std::vector<KernelCase> conv_pool_cases() {
    std::vector<KernelCase> out;
    conv_cases(out);
    pool_cases(out);
    fno_cases(out);
    scan_cases(out);
    error_cases(out);
    return out;
}

}  // namespace capsule::conformance
