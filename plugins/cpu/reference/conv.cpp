// Reference kernels: conv / conv2d (F.conv1d / F.conv2d) and conv_transpose / conv_transpose2d
// (F.conv_transpose1d / 2d), with stride, padding, dilation, groups, output_padding and bias.
//
// Everything is computed as 2-D (a 1-D op is the 2-D op with height 1 and a 1-high kernel).
// Forward: a convolution with one input channel per group (depthwise) directly, plane by plane;
// otherwise im2col + GEMM, images small enough batched into one [Cin/g·kh·kw, images·OH·OW]
// column matrix, larger ones in blocks of output positions of about kColumnBudget im2col values
// (a 1x1 stride-1 unpadded convolution reads the image as its column matrix). The backward
// passes and the transposed convolution use im2col / col2im per chunk of images: the transposed
// one is the adjoint, GEMM with the weight transposed then col2im (scatter-add). Chunks bound the
// column buffer to about kColumnBudget elements (at least one image).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "linalg_common.hpp"
#include "parallel.hpp"

namespace capsule::reference {
namespace {

// Elements of the im2col buffer per chunk: big enough for wide GEMMs over several images, small
// enough to stay in L2 between im2col and the GEMM.
constexpr int64_t kColumnBudget = int64_t(1) << 17;

/// Geometry of one convolution in 2-D form. For a plain convolution the "image" side is the input
/// (ih × iw, in_c channels) and the "column" side the output (oh × ow). For a transposed one the
/// roles swap: the conv geometry maps the transposed op's output (the image, oh_t × ow_t) to its
/// input. We store both in the conv orientation: `img_*` is the side the kernel slides over,
/// `col_*` the side with one column per kernel position.
struct ConvGeom {
    int64_t n = 0;                          // batch
    int64_t in_c = 0, out_c = 0, groups = 1;  // channels of the op's input / output
    int64_t in_h = 1, in_w = 0, out_h = 1, out_w = 0;  // spatial sizes of the op's input / output
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
    bool bias = true, transposed = false;
    DimList weight_shape, out_shape;
};

const char* op_name(int nd, bool transposed) {
    if (transposed) return nd == 1 ? "conv_transpose" : "conv_transpose2d";
    return nd == 1 ? "conv" : "conv2d";
}

template <typename Call>
ConvGeom conv_geometry(const Call& call, int nd, bool transposed) {
    const char* op = op_name(nd, transposed);
    const auto attrs = call.attrs();
    ConvGeom g;
    g.transposed = transposed;
    g.bias = attrs.get_bool("bias", true);
    require_arity(call, 1, g.bias ? 2 : 1, op);
    const Tensor x = call.input(0);
    check_view(x, {op, " input"});
    require(x.rank() == nd + 2, [&] {
        return std::string(op) + ": input must have rank " + std::to_string(nd + 2) +
               ", got shape " + shape_string(x.shape());
    });
    const std::size_t n = std::size_t(nd);
    const DimList ones(n, 1), zeros(n, 0);
    g.out_c = int_attr(attrs, "out_channels", 1, nullptr);
    const auto kernel = tuple_attr(attrs, "kernel_size", n, 1, nullptr);
    const auto stride = tuple_attr(attrs, "stride", n, 1, &ones);
    const auto padding = tuple_attr(attrs, "padding", n, 0, &zeros);
    const auto dilation = tuple_attr(attrs, "dilation", n, 1, &ones);
    const auto out_pad =
        transposed ? tuple_attr(attrs, "output_padding", n, 0, &zeros) : zeros;
    const int64_t one = 1;
    g.groups = int_attr(attrs, "groups", 1, &one);
    g.n = x.dim(0);
    g.in_c = x.dim(1);
    require(g.in_c % g.groups == 0, [&] {
        return std::string(op) + ": input channels " + std::to_string(g.in_c) +
               " are not divisible by groups " + std::to_string(g.groups);
    });
    require(g.out_c % g.groups == 0, [&] {
        return std::string(op) + ": out_channels " + std::to_string(g.out_c) +
               " is not divisible by groups " + std::to_string(g.groups);
    });
    // Spatial dims in 2-D form (1-D: height 1).
    const int o = nd == 2 ? 0 : -1;  // index shift for the height entries
    g.in_h = nd == 2 ? x.dim(2) : 1;
    g.in_w = x.dim(nd + 1);
    if (nd == 2) {
        g.kh = kernel[0];
        g.sh = stride[0];
        g.ph = padding[0];
        g.dh = dilation[0];
    }
    g.kw = kernel[std::size_t(1 + o)];
    g.sw = stride[std::size_t(1 + o)];
    g.pw = padding[std::size_t(1 + o)];
    g.dw = dilation[std::size_t(1 + o)];
    auto out_size = [&](int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op_) {
        require(k <= (int64_t(1) << 40) && d <= (int64_t(1) << 20) && s <= (int64_t(1) << 40) &&
                    p <= (int64_t(1) << 40),
                [&] { return std::string(op) + ": attribute values are too large"; });
        const int64_t span = d * (k - 1) + 1;
        if (!transposed) {
            const int64_t padded = size + 2 * p;
            require(padded >= span, [&] {
                return std::string(op) + ": padded input size " + std::to_string(padded) +
                       " is smaller than the dilated kernel " + std::to_string(span);
            });
            return (padded - span) / s + 1;
        }
        require(op_ < s || op_ < d, [&] {
            return std::string(op) + ": output_padding must be smaller than stride or dilation";
        });
        const int64_t r = (size - 1) * s - 2 * p + span - 1 + op_ + 1;
        require(r >= 1, [&] {
            return std::string(op) + ": output size " + std::to_string(r) + " is too small";
        });
        return r;
    };
    g.out_w = out_size(g.in_w, g.kw, g.sw, g.pw, g.dw, out_pad[std::size_t(1 + o)]);
    g.out_h = nd == 2 ? out_size(g.in_h, g.kh, g.sh, g.ph, g.dh, out_pad[0]) : 1;
    g.out_shape = {g.n, g.out_c};
    if (nd == 2) g.out_shape.push_back(g.out_h);
    g.out_shape.push_back(g.out_w);
    g.weight_shape = transposed ? DimList{g.in_c, g.out_c / g.groups}
                                : DimList{g.out_c, g.in_c / g.groups};
    for (auto k : kernel) g.weight_shape.push_back(k);
    check_tensor(call.param(0), x.dtype(), g.weight_shape, {op, " weight"});
    if (g.bias) check_tensor(call.param(1), x.dtype(), {g.out_c}, {op, " bias"});
    checked_product(g.out_shape, {op, " output"});
    return g;
}

/// The sliding geometry in conv orientation: the kernel slides over an image of `c` channels and
/// size h × w, producing oh × ow positions.
struct Slide {
    int64_t c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t rows() const { return c * kh * kw; }
    int64_t cols() const { return oh * ow; }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/// Output columns [lo, hi) whose input index base + o·s lies in [0, size).
inline void valid_range(int64_t base, int64_t s, int64_t size, int64_t count, int64_t& lo,
                        int64_t& hi) {
    lo = base >= 0 ? 0 : ceil_div(-base, s);
    hi = base >= size ? 0 : ceil_div(size - base, s);
    lo = std::min(lo, count);
    hi = std::clamp(hi, lo, count);
}

/// col[(c·kh + i)·kw + j][q − q0] (row stride ldcol) = image[c][oy·sh − ph + i·dh][ox·sw − pw +
/// j·dw] for the output positions q = oy·ow + ox in [q0, q1), zero outside the image.
template <typename T>
[[gnu::always_inline]] inline void im2col_impl(const T* __restrict img, const Slide& s, int64_t q0, int64_t q1,
                                               T* __restrict col, int64_t ldcol) {
    if (q0 >= q1) return;
    const int64_t y_first = q0 / s.ow, y_last = (q1 - 1) / s.ow;
    for (int64_t c = 0; c < s.c; ++c)
        for (int64_t i = 0; i < s.kh; ++i)
            for (int64_t j = 0; j < s.kw; ++j) {
                T* __restrict row = col + ((c * s.kh + i) * s.kw + j) * ldcol;
                const int64_t xbase = j * s.dw - s.pw;
                int64_t lo, hi;
                valid_range(xbase, s.sw, s.w, s.ow, lo, hi);
                for (int64_t oy = y_first; oy <= y_last; ++oy) {
                    // This output row's positions within [q0, q1): ox in [xa, xb).
                    const int64_t xa = std::max<int64_t>(q0 - oy * s.ow, 0);
                    const int64_t xb = std::min<int64_t>(q1 - oy * s.ow, s.ow);
                    T* __restrict d = row + (oy * s.ow + xa - q0);  // d[ox - xa]
                    const int64_t y = oy * s.sh - s.ph + i * s.dh;
                    if (y < 0 || y >= s.h) {
                        std::fill(d, d + (xb - xa), T(0));
                        continue;
                    }
                    const T* __restrict src = img + (c * s.h + y) * s.w;
                    const int64_t a = std::clamp(lo, xa, xb), b = std::clamp(hi, a, xb);
                    std::fill(d, d + (a - xa), T(0));
                    // A stride known at compile time vectorises with permutes, not element loads
                    // (stride 2: ResNet's stem and downsampling convolutions).
                    if (s.sw == 1)
                        for (int64_t ox = a; ox < b; ++ox) d[ox - xa] = src[xbase + ox];
                    else if (s.sw == 2)
                        for (int64_t ox = a; ox < b; ++ox) d[ox - xa] = src[xbase + 2 * ox];
                    else
                        for (int64_t ox = a; ox < b; ++ox) d[ox - xa] = src[xbase + ox * s.sw];
                    std::fill(d + (b - xa), d + (xb - xa), T(0));
                }
            }
}

// CAPSULE_CLONES: compiled per ISA (linalg_common.hpp): the stride-2 gathers become AVX-512 permutes.
CAPSULE_CLONES CAPSULE_INLINE_COPIES void im2col(const float* img, const Slide& s, int64_t q0, int64_t q1, float* col,
                                                 int64_t ldcol) {
    im2col_impl(img, s, q0, q1, col, ldcol);
}
CAPSULE_CLONES CAPSULE_INLINE_COPIES void im2col(const double* img, const Slide& s, int64_t q0, int64_t q1, double* col,
                                                 int64_t ldcol) {
    im2col_impl(img, s, q0, q1, col, ldcol);
}

/// im2col of every output position (q0 = 0, q1 = oh·ow).
template <typename T>
void im2col(const T* __restrict img, const Slide& s, T* __restrict col, int64_t ldcol) {
    im2col(img, s, 0, s.cols(), col, ldcol);
}

/// The adjoint of im2col: image[...] += col[...] (the image must be initialised by the caller).
template <typename T>
CAPSULE_INLINE_COPIES void col2im(const T* __restrict col, int64_t ldcol, const Slide& s, T* __restrict img) {
    for (int64_t c = 0; c < s.c; ++c)
        for (int64_t i = 0; i < s.kh; ++i)
            for (int64_t j = 0; j < s.kw; ++j) {
                const T* __restrict row = col + ((c * s.kh + i) * s.kw + j) * ldcol;
                const int64_t xbase = j * s.dw - s.pw;
                int64_t lo, hi;
                valid_range(xbase, s.sw, s.w, s.ow, lo, hi);
                for (int64_t oy = 0; oy < s.oh; ++oy) {
                    const int64_t y = oy * s.sh - s.ph + i * s.dh;
                    if (y < 0 || y >= s.h) continue;
                    const T* __restrict d = row + oy * s.ow;
                    T* __restrict dst = img + (c * s.h + y) * s.w;
                    if (s.sw == 1)
                        for (int64_t ox = lo; ox < hi; ++ox) dst[xbase + ox] += d[ox];
                    else if (s.sw == 2)  // a constant stride vectorises (im2col_impl)
                        for (int64_t ox = lo; ox < hi; ++ox) dst[xbase + 2 * ox] += d[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ++ox) dst[xbase + ox * s.sw] += d[ox];
                }
            }
}

/// Copies channels [c0, c0 + cg) of images [n0, n0 + nc) of an [N, C, P] tensor into a
/// [cg, nc·P] matrix (gather), or such a matrix back into the tensor (scatter).
template <typename T>
void gather_channels(const T* src, int64_t C, int64_t P, int64_t n0, int64_t nc, int64_t c0,
                     int64_t cg, T* dst) {
    for (int64_t c = 0; c < cg; ++c)
        for (int64_t j = 0; j < nc; ++j)
            std::copy_n(src + ((n0 + j) * C + c0 + c) * P, P, dst + c * nc * P + j * P);
}
template <typename T>
void scatter_channels(const T* src, int64_t C, int64_t P, int64_t n0, int64_t nc, int64_t c0,
                      int64_t cg, T* dst) {
    for (int64_t c = 0; c < cg; ++c)
        for (int64_t j = 0; j < nc; ++j)
            std::copy_n(src + c * nc * P + j * P, P, dst + ((n0 + j) * C + c0 + c) * P);
}

/// Sliding geometry of group members: for a conv, the kernel slides over the input; for a
/// transposed conv, over the output.
Slide slide_of(const ConvGeom& g) {
    if (!g.transposed)
        return {g.in_c / g.groups, g.in_h, g.in_w, g.out_h, g.out_w, g.kh, g.kw,
                g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
    return {g.out_c / g.groups, g.out_h, g.out_w, g.in_h, g.in_w, g.kh, g.kw,
            g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
}

/// Images per chunk so that the column buffer stays near the budget.
int64_t chunk_images(const Slide& s, int64_t n) {
    int64_t per_image = 0;
    require(!__builtin_mul_overflow(s.rows(), s.cols(), &per_image),
            "convolution: column buffer size overflows");
    per_image = std::max<int64_t>(1, per_image);
    return std::clamp<int64_t>(kColumnBudget / per_image, 1, std::max<int64_t>(n, 1));
}

template <typename T>
void fill_bias(const T* bias, int64_t n, int64_t c, int64_t p, T* y) {
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch) {
            T* q = y + (b * c + ch) * p;
            const T v = bias ? bias[ch] : T(0);
            std::fill(q, q + p, v);
        }
}

template <typename T>
void bias_grad(const T* G, int64_t n, int64_t c, int64_t p, T* gb) {
    for (int64_t ch = 0; ch < c; ++ch) {
        double s = 0;
        for (int64_t b = 0; b < n; ++b) {
            const T* q = G + (b * c + ch) * p;
            for (int64_t i = 0; i < p; ++i) s += double(q[i]);
        }
        gb[ch] = T(s);
    }
}

// ---------------------------------------------------------------------------------------------
// Plain convolution: y[n, g·Cog + o, :] = W_g[o, :] · col_g(x[n]) (+ bias).

/// Threads for `tasks` independent pieces of a convolution of `flops` in all: at most the grant,
/// the task count, and one per `min_flops` (about 50 µs of work: handing a part to a worker
/// costs a few microseconds, waking a sleeping one far more).
int conv_parts(int granted, int64_t tasks, double flops, double min_flops) {
    const auto by_work = static_cast<int64_t>(flops / min_flops);
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({granted, tasks, by_work})));
}

/// Adds w[i, j] · 0 for every tap that falls on the zero padding, as the definition (and the
/// im2col path) does: 0 for a finite weight, so only called for a NaN or infinite one, which makes
/// those outputs NaN.
template <typename T>
void add_padding_taps(const T* w, int64_t i, int64_t j, const Slide& s, const int64_t* lo,
                      const int64_t* hi, T* y) {
    const T term = w[i * s.kw + j] * T(0);
    for (int64_t oy = 0; oy < s.oh; ++oy) {
        T* yr = y + oy * s.ow;
        const int64_t iy = oy * s.sh - s.ph + i * s.dh;
        const bool row_inside = iy >= 0 && iy < s.h;
        for (int64_t ox = 0; ox < s.ow; ++ox)
            if (!row_inside || ox < lo[j] || ox >= hi[j]) yr[ox] += term;
    }
}

/// One output plane of a depthwise convolution: y = bias + Σ_{i,j} w[i, j] · x shifted by the tap
/// (see depthwise_fwd), a row at a time so that the row stays in L1; taps on the padding add
/// nothing unless their weight is NaN or infinite (add_padding_taps). lo[j], hi[j]: the output
/// columns whose input column for kernel column j lies inside the image.
template <typename T>
[[gnu::always_inline]] inline void depthwise_plane_impl(const T* __restrict x, const T* __restrict w,
                                                        T bias, const Slide& s, const int64_t* lo,
                                                        const int64_t* hi, T* __restrict y) {
    for (int64_t oy = 0; oy < s.oh; ++oy) {
        T* __restrict yr = y + oy * s.ow;
        std::fill(yr, yr + s.ow, bias);
        for (int64_t i = 0; i < s.kh; ++i) {
            const int64_t iy = oy * s.sh - s.ph + i * s.dh;
            if (iy < 0 || iy >= s.h) continue;
            const T* __restrict xr = x + iy * s.w;
            for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t xbase = j * s.dw - s.pw;
                const T wv = w[i * s.kw + j];
                if (s.sw == 1)
                    for (int64_t ox = lo[j]; ox < hi[j]; ++ox) yr[ox] += wv * xr[xbase + ox];
                else
                    for (int64_t ox = lo[j]; ox < hi[j]; ++ox) yr[ox] += wv * xr[xbase + ox * s.sw];
            }
        }
    }
    for (int64_t i = 0; i < s.kh; ++i)
        for (int64_t j = 0; j < s.kw; ++j)
            if (!std::isfinite(w[i * s.kw + j])) add_padding_taps(w, i, j, s, lo, hi, y);
}

// CAPSULE_CLONES: compiled per ISA (linalg_common.hpp).
CAPSULE_CLONES void depthwise_plane(const float* x, const float* w, float bias, const Slide& s,
                                    const int64_t* lo, const int64_t* hi, float* y) {
    depthwise_plane_impl(x, w, bias, s, lo, hi, y);
}
CAPSULE_CLONES void depthwise_plane(const double* x, const double* w, double bias, const Slide& s,
                                    const int64_t* lo, const int64_t* hi, double* y) {
    depthwise_plane_impl(x, w, bias, s, lo, hi, y);
}

/// Copies one [h, w] plane into a zero-padded [h + 2·ph, w + 2·pw] one.
template <typename T>
CAPSULE_INLINE_COPIES void pad_plane(const T* __restrict x, const Slide& s, T* __restrict xp) {
    const int64_t wp = s.w + 2 * s.pw;
    for (int64_t y = 0; y < s.h + 2 * s.ph; ++y) {
        T* __restrict d = xp + y * wp;
        const int64_t iy = y - s.ph;
        if (iy < 0 || iy >= s.h) {
            for (int64_t j = 0; j < wp; ++j) d[j] = T(0);
            continue;
        }
        const T* __restrict r = x + iy * s.w;
        for (int64_t j = 0; j < s.pw; ++j) d[j] = T(0);
        for (int64_t j = 0; j < s.w; ++j) d[s.pw + j] = r[j];
        for (int64_t j = s.pw + s.w; j < wp; ++j) d[j] = T(0);
    }
}

/// One output plane of a depthwise convolution with a KH × KW kernel, column stride SW and no
/// dilation, from a zero-padded input plane `xp` (row length wp): y[oy][ox] = bias + Σ_{i,j}
/// w[i][j] · xp[oy·sh + i][ox·SW + j], taps in (i, j) order. The tap loops unroll, so each
/// output is accumulated in a register across its taps and the loop over ox vectorises (the
/// general depthwise_plane re-reads and re-writes the output row once per tap). Taps on the
/// padding multiply a zero, as in the definition (a NaN or infinite weight makes them NaN).
template <typename T, int KH, int KW, int SW>
[[gnu::always_inline]] inline void depthwise_padded_impl(const T* __restrict xp, int64_t wp,
                                                         const T* __restrict w, T bias,
                                                         int64_t oh, int64_t ow, int64_t sh,
                                                         T* __restrict y) {
    T wr[KH * KW];
#pragma GCC unroll 32
    for (int t = 0; t < KH * KW; ++t) wr[t] = w[t];
    for (int64_t oy = 0; oy < oh; ++oy) {
        const T* __restrict r = xp + oy * sh * wp;
        T* __restrict yr = y + oy * ow;
        for (int64_t ox = 0; ox < ow; ++ox) {
            T acc = bias;
#pragma GCC unroll 8
            for (int i = 0; i < KH; ++i)
#pragma GCC unroll 8
                for (int j = 0; j < KW; ++j) acc += wr[i * KW + j] * r[i * wp + ox * SW + j];
            yr[ox] = acc;
        }
    }
}

// CAPSULE_CLONES: compiled per ISA (linalg_common.hpp); the 3×3 and 5×5 kernels at stride 1
// and 2 of MobileNet- and EfficientNet-style networks.
#define CAPSULE_DEPTHWISE_PADDED(T, K, SW)                                                      \
    CAPSULE_CLONES void depthwise_padded_##K##_##SW(const T* xp, int64_t wp, const T* w, T bias, \
                                                    int64_t oh, int64_t ow, int64_t sh, T* y) { \
        depthwise_padded_impl<T, K, K, SW>(xp, wp, w, bias, oh, ow, sh, y);                     \
    }
CAPSULE_DEPTHWISE_PADDED(float, 3, 1)
CAPSULE_DEPTHWISE_PADDED(float, 3, 2)
CAPSULE_DEPTHWISE_PADDED(float, 5, 1)
CAPSULE_DEPTHWISE_PADDED(float, 5, 2)
CAPSULE_DEPTHWISE_PADDED(double, 3, 1)
CAPSULE_DEPTHWISE_PADDED(double, 3, 2)
CAPSULE_DEPTHWISE_PADDED(double, 5, 1)
CAPSULE_DEPTHWISE_PADDED(double, 5, 2)
#undef CAPSULE_DEPTHWISE_PADDED

/// The unrolled depthwise kernel for this geometry, or nullptr (then depthwise_plane).
template <typename T>
using DepthwisePadded = void (*)(const T*, int64_t, const T*, T, int64_t, int64_t, int64_t, T*);
template <typename T>
DepthwisePadded<T> depthwise_padded_kernel(const Slide& s) {
    if (s.kh != s.kw || s.dh != 1 || s.dw != 1 || (s.sw != 1 && s.sw != 2)) return nullptr;
    if (s.kh == 3)
        return s.sw == 1 ? DepthwisePadded<T>(depthwise_padded_3_1) : DepthwisePadded<T>(depthwise_padded_3_2);
    if (s.kh == 5)
        return s.sw == 1 ? DepthwisePadded<T>(depthwise_padded_5_1) : DepthwisePadded<T>(depthwise_padded_5_2);
    return nullptr;
}

/// Depthwise-style convolution (one input channel per group, any channel multiplier) computed
/// directly: y[n, o] = bias[o] + Σ_{i,j} w[o, 0, i, j] · x[n, o / cog, oy·sh − ph + i·dh, ox·sw −
/// pw + j·dw], taps summed in (i, j) order. im2col + GEMM would be one 1-row GEMM per channel.
/// Planes (n, o) are dealt out between the granted threads.
template <typename T>
void depthwise_fwd(const ForwardCall& call, const ConvGeom& g, const Slide& s, const T* X,
                   const T* Wt, const T* bias, T* Y) {
    const int64_t cog = g.out_c / g.groups, in_p = g.in_h * g.in_w, P = s.cols();
    const int64_t planes = g.n * g.out_c, taps = s.kh * s.kw;
    // Depthwise runs at a few GFLOP/s (short rows), so little work fills 50 µs.
    const int parts = conv_parts(granted_threads(call), planes, 2.0 * double(planes) * double(P) * double(taps), 2e5);
    const Epilogue& epilogue = epilogue_of(call);
    const auto padded_kernel = depthwise_padded_kernel<T>(s);
    if (padded_kernel) {
        // Each input plane is copied once into a zero-padded one (pad_plane), then every output
        // plane of its channel multiplier reads it without bounds checks.
        const int64_t wp = s.w + 2 * s.pw, hp = s.h + 2 * s.ph;
        run_parts(parts, [&](int part) {
            Scratch<T> xp(hp * wp);
            int64_t padded_plane = -1;
            for (int64_t plane = planes * part / parts; plane < planes * (part + 1) / parts; ++plane) {
                const int64_t img = plane / g.out_c, o = plane % g.out_c;
                const int64_t in_plane = img * g.in_c + o / cog;
                if (in_plane != padded_plane) pad_plane(X + in_plane * in_p, s, xp.data());
                padded_plane = in_plane;
                padded_kernel(xp.data(), wp, Wt + o * taps, bias ? bias[o] : T(0), s.oh, s.ow, s.sh,
                              Y + plane * P);
                apply_epilogue(epilogue, o, Y + plane * P, P);
            }
        });
        return;
    }
    // Each kernel column's range of valid output columns, computed once (divisions).
    std::vector<int64_t> lo(static_cast<std::size_t>(s.kw)), hi(lo.size());
    for (int64_t j = 0; j < s.kw; ++j)
        valid_range(j * s.dw - s.pw, s.sw, s.w, s.ow, lo[std::size_t(j)], hi[std::size_t(j)]);
    run_parts(parts, [&](int part) {
        for (int64_t plane = planes * part / parts; plane < planes * (part + 1) / parts; ++plane) {
            const int64_t img = plane / g.out_c, o = plane % g.out_c;
            depthwise_plane(X + (img * g.in_c + o / cog) * in_p, Wt + o * taps,
                            bias ? bias[o] : T(0), s, lo.data(), hi.data(), Y + plane * P);
            apply_epilogue(epilogue, o, Y + plane * P, P);
        }
    });
}

/// Blocks of output channels per column task: one when the column tasks alone give every thread
/// work and `split` (split_channels) is off; else up to one per thread, each at least 64 channels.
int64_t row_parts_for(int64_t col_tasks, int granted, int64_t cog, bool split) {
    return col_tasks >= granted && !split ? 1 : std::max<int64_t>(1, std::min<int64_t>(granted, cog / 64));
}

/// Whether the threads of a convolution with fewer images × groups than threads should split its
/// output channels rather than its columns: when a group has more output channels than output
/// columns, its weights (cog × K) outweigh its column matrix (K × cols), and split by columns every
/// thread would stream all of them (ResNet-18's stride-2 convolution to 7×7 at batch 1 ran 1.3x
/// faster on two threads than on one split by columns, 1.8x split by channels).
bool split_channels(int64_t images_groups, int granted, int64_t cog, int64_t cols) {
    return images_groups < granted && cog >= 128 && cog > cols;
}

/// Task t of a convolution dealt out as (block of output channels, image, group, block of
/// columns), the last varying fastest (threads take consecutive tasks, so with several blocks of
/// channels each thread keeps to one): its image, group, column block and output channels
/// [r0, r1) of the group (blocks of channels start at multiples of 8, the GEMM's row strips).
struct ConvTask {
    int64_t img, gr, blk, r0, r1;
};
ConvTask conv_task(int64_t t, int64_t row_parts, int64_t n, int64_t blocks, int64_t groups, int64_t cog) {
    const int64_t blk = t % blocks, gr = t / blocks % groups, img = t / blocks / groups % n;
    const int64_t rp = t / blocks / groups / n;
    const int64_t r0 = cog * rp / row_parts / 8 * 8;
    const int64_t r1 = rp + 1 == row_parts ? cog : cog * (rp + 1) / row_parts / 8 * 8;
    return {img, gr, blk, r0, r1};
}

/// One image's convolution in blocks of output positions: per (image, group, block of columns
/// [, block of output channels]) task, im2col of just those columns (L2-sized, hot for the GEMM)
/// and a single-threaded GEMM writing straight into y; tasks are dealt out between the granted
/// threads. A 1×1 stride-1 unpadded convolution needs no im2col (the image is its column
/// matrix). Every output is summed in the same order whatever the blocking or thread count.
template <typename T>
void blocked_fwd(const ForwardCall& call, const ConvGeom& g, const Slide& s, const T* X,
                 const T* Wt, const T* bias, T* Y) {
    const int64_t cog = g.out_c / g.groups, K = s.rows(), P = s.cols();
    const int64_t in_p = g.in_h * g.in_w;
    const bool pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 &&
                           s.pw == 0 && s.h * s.w == P;
    // Block width: the im2col block (K × width) and the output block the GEMM writes and adds
    // its later k slices to (cog × width) both about L2-sized.
    const int64_t budget_width = std::max<int64_t>(
        64, std::min(kColumnBudget / std::max<int64_t>(K, 1), (kColumnBudget / 2) / std::max<int64_t>(cog, 1)));
    const int granted = granted_threads(call);
    int64_t blocks = (P + budget_width - 1) / budget_width;
    // Few tasks: a multiple of the threads, so that none waits for another's extra block
    // (ResNet's 7×7 stride-2 stem at batch 1: 15 blocks on 2 threads became 16), unless the
    // threads split the output channels instead.
    const bool split = split_channels(g.n * g.groups, granted, cog, P);
    if (g.n * g.groups * blocks < 8 * int64_t(granted) && !split)
        blocks = (blocks + granted - 1) / granted * granted;
    const int64_t width = std::min(P, ((P + blocks - 1) / blocks + 15) / 16 * 16);
    const Epilogue& epilogue = epilogue_of(call);
    const int64_t row_parts = row_parts_for(g.n * g.groups * blocks, granted, cog, split);
    const int64_t tasks = g.n * g.groups * blocks * row_parts;
    const double flops = 2.0 * double(g.n) * double(g.out_c) * double(P) * double(K);
    const int parts = conv_parts(granted, tasks, flops, 2e6);
    run_parts(parts, [&](int part) {
        Scratch<T> col(pointwise ? 0 : K * width);
        for (int64_t t = tasks * part / parts; t < tasks * (part + 1) / parts; ++t) {
            const auto [img, gr, blk, r0, r1] = conv_task(t, row_parts, g.n, blocks, g.groups, cog);
            const int64_t q0 = blk * width, q1 = std::min(P, q0 + width), cols = q1 - q0;
            if (cols <= 0 || r0 >= r1) continue;
            const T* ximg = X + (img * g.in_c + gr * s.c) * in_p;
            const T* b = ximg + q0;
            int64_t ldb = P;
            if (!pointwise) {
                im2col(ximg, s, q0, q1, col.data(), cols);
                b = col.data();
                ldb = cols;
            }
            T* y = Y + (img * g.out_c + gr * cog + r0) * P + q0;
            gemm_conv<T>(r1 - r0, cols, K, Wt + (gr * cog + r0) * K, K, b, ldb, nullptr,
                         bias ? bias + gr * cog + r0 : nullptr, y, P);
            for (int64_t o = r0; o < r1; ++o) apply_epilogue(epilogue, gr * cog + o, y + (o - r0) * P, cols);
        }
    });
}

/// Whether a convolution runs as implicit_fwd: stride 1 (so that each im2col row is a shifted
/// run of the padded image), not 1×1 unpadded (which reads the image directly), and the columns
/// computed for nothing (wp − ow of every wp per output row) cost less than the im2col they save.
/// implicit_fwd spends cog·(wp − ow) multiply-adds on extra columns for every ow values of
/// im2col, and an im2col value (written, then read back by the GEMM's packing) costs about as
/// much as 160 of them: measured on ResNet-18, whose 14×14 (36 per value) and 7×7 (146 per
/// value: 63 virtual columns take the same four 16-wide vectors as 49) stages ran 2% to 5%
/// faster implicitly (2026-12-02, Zen 5 guest, 1 and 2 threads, batch 1 and 8).
/// The padded copy of the input is bounded (2^28 values) like the column buffers.
bool implicit_conv(const ConvGeom& g, const Slide& s) {
    if (s.sh != 1 || s.sw != 1) return false;
    if (s.kh == 1 && s.kw == 1 && s.ph == 0 && s.pw == 0) return false;
    const int64_t cog = g.out_c / g.groups, wp = s.w + 2 * s.pw;
    const double padded = double(g.n) * double(g.in_c) * double(s.h + 2 * s.ph) * double(wp);
    return double(cog) * double(wp - s.ow) <= 160.0 * double(s.ow) && padded <= double(1 << 28);
}

/// A stride-1 convolution as a GEMM without im2col (implicit GEMM). The output is computed on
/// the padded width wp = w + 2·pw (virtual column t = oy·wp + ox; columns ox >= ow are computed
/// and dropped), so row (c, i, j) of the im2col matrix is the zero-padded image read from
/// c·hp·wp + i·dh·wp + j·dw onwards, and the GEMM's packing gathers B from there
/// (gemm_conv). Tasks are (image, group, block of virtual columns [, block of output channels]);
/// each computes bias + GEMM (then the fused epilogue) into a buffer and copies the real columns
/// out: the same operations in the same order as the im2col path, so the same bits.
template <typename T>
void implicit_fwd(const ForwardCall& call, const ConvGeom& g, const Slide& s, const T* X,
                  const T* Wt, const T* bias, T* Y) {
    const int64_t cog = g.out_c / g.groups, K = s.rows(), P = s.cols();
    const int64_t hp = s.h + 2 * s.ph, wp = s.w + 2 * s.pw, plane = hp * wp, L = s.oh * wp;
    const int64_t planes = g.n * g.in_c, in_p = s.h * s.w;
    const Epilogue& epilogue = epilogue_of(call);
    // The last real output reads up to (kw − 1)·dw past its row's start plus wp − 1; dropped
    // columns read on into the next plane, and past the last plane into this zeroed slack.
    const int64_t slack = (s.kw - 1) * s.dw + wp;
    const int granted = granted_threads(call);
    Scratch<T> xp(planes * plane + slack);
    std::fill(xp.data() + planes * plane, xp.data() + planes * plane + slack, T(0));
    // A copy of about 5e4 values already takes longer than handing half of it to a worker.
    const int pad_parts = conv_parts(granted, planes, double(planes * plane), 5e4);
    run_parts(pad_parts, [&](int part) {
        for (int64_t p = planes * part / pad_parts; p < planes * (part + 1) / pad_parts; ++p)
            pad_plane(X + p * in_p, s, xp.data() + p * plane);
    });
    std::vector<int64_t> rows(static_cast<std::size_t>(K));
    for (int64_t c = 0; c < s.c; ++c)
        for (int64_t i = 0; i < s.kh; ++i)
            for (int64_t j = 0; j < s.kw; ++j)
                rows[std::size_t((c * s.kh + i) * s.kw + j)] = c * plane + i * s.dh * wp + j * s.dw;
    // Blocks of virtual columns: the buffer (cog × width) about L2-sized, and at
    // least as many tasks as threads when the columns allow.
    const int64_t per_image = g.groups * std::max<int64_t>(1, (L + 63) / 64);
    const bool split = split_channels(g.n * g.groups, granted, cog, s.oh * s.ow);
    const int64_t want = split ? 1 : std::max<int64_t>(1, (granted + g.n * g.groups - 1) / (g.n * g.groups));
    int64_t blocks = std::max<int64_t>((cog * L + (int64_t(1) << 16) - 1) >> 16, want);
    blocks = std::min(blocks, std::max<int64_t>(1, per_image / g.groups));
    const int64_t width = std::min(L, ((L + blocks - 1) / blocks + 15) / 16 * 16);
    blocks = (L + width - 1) / width;
    const int64_t row_parts = row_parts_for(g.n * g.groups * blocks, granted, cog, split);
    const int64_t tasks = g.n * g.groups * blocks * row_parts;
    const double flops = 2.0 * double(g.n) * double(g.out_c) * double(L) * double(K);
    const int parts = conv_parts(granted, tasks, flops, 2e6);
    run_parts(parts, [&](int part) {
        Scratch<T> buf(cog * width);
        for (int64_t t = tasks * part / parts; t < tasks * (part + 1) / parts; ++t) {
            const auto [img, gr, blk, r0, r1] = conv_task(t, row_parts, g.n, blocks, g.groups, cog);
            const int64_t q0 = blk * width, q1 = std::min(L, q0 + width), cols = q1 - q0;
            if (cols <= 0 || r0 >= r1) continue;
            const T* b = xp.data() + (img * g.in_c + gr * s.c) * plane + q0;
            gemm_conv<T>(r1 - r0, cols, K, Wt + (gr * cog + r0) * K, K, b, 0, rows.data(),
                         bias ? bias + gr * cog + r0 : nullptr, buf.data(), cols);
            // The epilogue over whole buffer rows (the dropped columns too: harmless), not over
            // each output row's few values as they are copied out (LeNet's rows are 28 long).
            if (epilogue.active())
                for (int64_t o = r0; o < r1; ++o) apply_epilogue(epilogue, gr * cog + o, buf.data() + (o - r0) * cols, cols);
            // Real columns: output row oy holds virtual columns [oy·wp, oy·wp + ow).
            for (int64_t oy = q0 / wp; oy * wp < q1; ++oy) {
                const int64_t a = std::max(q0, oy * wp), e = std::min(q1, oy * wp + s.ow);
                if (a >= e) continue;
                for (int64_t o = r0; o < r1; ++o) {
                    T* dst = Y + (img * g.out_c + gr * cog + o) * P + oy * s.ow + (a - oy * wp);
                    std::copy(buf.data() + (o - r0) * cols + (a - q0),
                              buf.data() + (o - r0) * cols + (e - q0), dst);
                }
            }
        }
    });
}

/// Images per chunk of a convolution with small output planes (fewer than kWidePlane positions)
/// when it has several images: enough for a GEMM of at least kWideColumns columns, whatever the
/// column budget, up to kWideBudget im2col values. One image's plane alone leaves the GEMM's last
/// 48-column strip mostly empty (ResNet-18's 7×7 stage: 49 columns, or 63 computed implicitly,
/// in 64 lanes); eight side by side fill them (392 columns: 1.2x faster at batch 8). From 14×14
/// (196 columns) on, the strips are full enough that the im2col costs what it saves; 1 when
/// that does not apply.
constexpr int64_t kWidePlane = 64, kWideColumns = 384, kWideBudget = int64_t(1) << 22;
int64_t wide_chunk(const Slide& s, int64_t n) {
    const int64_t P = s.cols(), K = s.rows();
    if (n < 2 || P >= kWidePlane || P == 0 || K == 0) return 1;
    const int64_t want = std::min<int64_t>(n, (kWideColumns + P - 1) / P);
    return std::max<int64_t>(1, std::min<int64_t>(want, kWideBudget / std::max<int64_t>(K * P, 1)));
}

template <typename T>
void conv_fwd(const ForwardCall& call, const ConvGeom& g, const char* op) {
    const Tensor x = call.input(0), out = call.output(0);
    check_tensor(out, x.dtype(), g.out_shape, {op, " output"});
    const Slide s = slide_of(g);
    const int64_t cog = g.out_c / g.groups, K = s.rows(), P = s.cols();
    const int64_t in_p = g.in_h * g.in_w;
    const T* X = x.data<T>();
    const T* Wt = call.param(0).data<T>();
    T* Y = out.data<T>();
    if (g.n == 0 || g.out_c == 0 || P == 0) return;
    const T* bias = g.bias ? call.param(1).data<T>() : nullptr;
    if (s.c == 1 && g.groups > 1) return depthwise_fwd(call, g, s, X, Wt, bias, Y);
    const int64_t wide = wide_chunk(s, g.n);
    if (wide == 1 && implicit_conv(g, s)) return implicit_fwd(call, g, s, X, Wt, bias, Y);
    const int64_t chunk = std::max(wide, chunk_images(s, g.n));
    // Small images are batched into one wide GEMM below; larger ones go block by block.
    if (chunk == 1) return blocked_fwd(call, g, s, X, Wt, bias, Y);
    const int granted = granted_threads(call);
    Scratch<T> col(K * chunk * P), ybuf(chunk > 1 ? cog * chunk * P : 0);
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
        const int64_t nc = std::min(chunk, g.n - n0), ld = nc * P;
        for (int64_t gr = 0; gr < g.groups; ++gr) {
            const int parts = conv_parts(granted, nc, double(K * ld), 5e4);
            run_parts(parts, [&](int part) {
                for (int64_t j = nc * part / parts; j < nc * (part + 1) / parts; ++j)
                    im2col(X + ((n0 + j) * g.in_c + gr * s.c) * in_p, s, col.data() + j * P, ld);
            });
            const T* w = Wt + gr * cog * K;
            // The GEMM accumulates onto rows pre-filled with the bias (or zero).
            T* dst = nc == 1 ? Y + (n0 * g.out_c + gr * cog) * P : ybuf.data();
            for (int64_t o = 0; o < cog; ++o)
                std::fill(dst + o * ld, dst + (o + 1) * ld, bias ? bias[gr * cog + o] : T(0));
            if (wide > 1) {
                // Threads take column ranges of whole 48-column strips, each packing only its own
                // columns (split by rows, as gemm would split these, each packed them all).
                const int64_t strips = (ld + 47) / 48;
                const int col_parts = conv_parts(granted, strips, 2.0 * double(cog) * double(ld) * double(K), 2e6);
                run_parts(col_parts, [&](int part) {
                    const int64_t c0 = std::min(ld, strips * part / col_parts * 48);
                    const int64_t c1 = std::min(ld, strips * (part + 1) / col_parts * 48);
                    gemm<T>(false, false, cog, c1 - c0, K, w, K, col.data() + c0, ld, dst + c0, ld, true, 1);
                });
            } else {
                gemm<T>(false, false, cog, ld, K, w, K, col.data(), ld, dst, ld, true, granted);
            }
            // The epilogue, and the copy of each image's part of a row into y, channel by channel.
            const Epilogue& epilogue = epilogue_of(call);
            const int out_parts = conv_parts(granted, cog, double(cog * ld), 5e4);
            run_parts(out_parts, [&](int part) {
                const int64_t o0 = cog * part / out_parts, o1 = cog * (part + 1) / out_parts;
                for (int64_t o = o0; o < o1; ++o) apply_epilogue(epilogue, gr * cog + o, dst + o * ld, ld);
                if (nc > 1) scatter_channels(dst + o0 * ld, g.out_c, P, n0, nc, gr * cog + o0, o1 - o0, Y);
            });
        }
    }
}

template <typename T>
void conv_bwd(const BackwardCall& call, const ConvGeom& g, const char* op) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), g.out_shape, {op, " grad output"});
    T* gX = grad_target<T>(call.grad_input(0), x, {op, " grad input"});
    T* gW = grad_target<T>(call.grad_param(0), call.param(0), {op, " grad weight"});
    T* gB = g.bias ? grad_target<T>(call.grad_param(1), call.param(1), {op, " grad bias"}) : nullptr;
    const Slide s = slide_of(g);
    const int64_t cog = g.out_c / g.groups, K = s.rows(), P = s.cols();
    const int64_t in_p = g.in_h * g.in_w;
    const T* X = x.data<T>();
    const T* Wt = call.param(0).data<T>();
    const T* G = gout.data<T>();
    if (gX) std::fill(gX, gX + g.n * g.in_c * in_p, T(0));
    if (gW) std::fill(gW, gW + g.out_c * K, T(0));
    if (gB) bias_grad(G, g.n, g.out_c, P, gB);
    if ((!gX && !gW) || g.n == 0 || P == 0) return;
    const int64_t chunk = chunk_images(s, g.n);
    Scratch<T> col(K * chunk * P), gbuf(chunk > 1 ? cog * chunk * P : 0);
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
        const int64_t nc = std::min(chunk, g.n - n0), ld = nc * P;
        for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* gy;
            if (nc == 1) {
                gy = G + (n0 * g.out_c + gr * cog) * P;
            } else {
                gather_channels(G, g.out_c, P, n0, nc, gr * cog, cog, gbuf.data());
                gy = gbuf.data();
            }
            if (gW) {
                for (int64_t j = 0; j < nc; ++j)
                    im2col(X + ((n0 + j) * g.in_c + gr * s.c) * in_p, s, col.data() + j * P, ld);
                // dW_g [cog × K] += dY_g [cog × ld] · colᵀ
                gemm<T>(false, true, cog, K, ld, gy, ld, col.data(), ld, gW + gr * cog * K, K,
                        true);
            }
            if (gX) {
                // dcol [K × ld] = W_gᵀ · dY_g, then scatter-add into dx.
                gemm<T>(true, false, K, ld, cog, Wt + gr * cog * K, K, gy, ld, col.data(), ld,
                        false);
                for (int64_t j = 0; j < nc; ++j)
                    col2im(col.data() + j * P, ld, s, gX + ((n0 + j) * g.in_c + gr * s.c) * in_p);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Transposed convolution: y[n, g·Cog :, :] = col2im(W_gᵀ · x_g[n]) (+ bias), the adjoint of the
// plain convolution that maps y's geometry to x's.

template <typename T>
void conv_t_fwd(const ForwardCall& call, const ConvGeom& g, const char* op) {
    const Tensor x = call.input(0), out = call.output(0);
    check_tensor(out, x.dtype(), g.out_shape, {op, " output"});
    const Slide s = slide_of(g);  // slides over the output (s.c = Cout/g), s.cols() = H·W of x
    const int64_t cig = g.in_c / g.groups, K = s.rows(), P = s.cols();
    const int64_t out_p = g.out_h * g.out_w;
    const T* X = x.data<T>();
    const T* Wt = call.param(0).data<T>();
    T* Y = out.data<T>();
    fill_bias(g.bias ? call.param(1).data<T>() : nullptr, g.n, g.out_c, out_p, Y);
    if (g.n == 0 || cig == 0 || P == 0 || K == 0) return;
    const int64_t chunk = chunk_images(s, g.n);
    Scratch<T> col(K * chunk * P), xbuf(chunk > 1 ? cig * chunk * P : 0);
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
        const int64_t nc = std::min(chunk, g.n - n0), ld = nc * P;
        for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* xg;
            if (nc == 1) {
                xg = X + (n0 * g.in_c + gr * cig) * P;
            } else {
                gather_channels(X, g.in_c, P, n0, nc, gr * cig, cig, xbuf.data());
                xg = xbuf.data();
            }
            // col [K × ld] = W_gᵀ · x_g, W_g = weight rows [gr·cig, (gr+1)·cig) of [Cin, K].
            gemm<T>(true, false, K, ld, cig, Wt + gr * cig * K, K, xg, ld, col.data(), ld, false,
                    granted_threads(call));
            for (int64_t j = 0; j < nc; ++j)
                col2im(col.data() + j * P, ld, s, Y + ((n0 + j) * g.out_c + gr * s.c) * out_p);
        }
    }
}

template <typename T>
void conv_t_bwd(const BackwardCall& call, const ConvGeom& g, const char* op) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), g.out_shape, {op, " grad output"});
    T* gX = grad_target<T>(call.grad_input(0), x, {op, " grad input"});
    T* gW = grad_target<T>(call.grad_param(0), call.param(0), {op, " grad weight"});
    T* gB = g.bias ? grad_target<T>(call.grad_param(1), call.param(1), {op, " grad bias"}) : nullptr;
    const Slide s = slide_of(g);
    const int64_t cig = g.in_c / g.groups, K = s.rows(), P = s.cols();
    const int64_t out_p = g.out_h * g.out_w;
    const T* X = x.data<T>();
    const T* Wt = call.param(0).data<T>();
    const T* G = gout.data<T>();
    if (gW) std::fill(gW, gW + g.in_c * K, T(0));
    if (gB) bias_grad(G, g.n, g.out_c, out_p, gB);
    if (gX && (K == 0 || cig == 0)) std::fill(gX, gX + g.n * g.in_c * P, T(0));
    if ((!gX && !gW) || g.n == 0 || P == 0 || K == 0 || cig == 0) return;
    const int64_t chunk = chunk_images(s, g.n);
    Scratch<T> col(K * chunk * P), buf(chunk > 1 ? cig * chunk * P : 0);
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
        const int64_t nc = std::min(chunk, g.n - n0), ld = nc * P;
        for (int64_t gr = 0; gr < g.groups; ++gr) {
            // The plain convolution of dy: col = im2col(dy_g) [K × ld].
            for (int64_t j = 0; j < nc; ++j)
                im2col(G + ((n0 + j) * g.out_c + gr * s.c) * out_p, s, col.data() + j * P, ld);
            const T* wg = Wt + gr * cig * K;
            if (gX) {
                // dx_g [cig × ld] = W_g · col
                if (nc == 1) {
                    gemm<T>(false, false, cig, ld, K, wg, K, col.data(), ld,
                            gX + (n0 * g.in_c + gr * cig) * P, P, false);
                } else {
                    gemm<T>(false, false, cig, ld, K, wg, K, col.data(), ld, buf.data(), ld, false);
                    scatter_channels(buf.data(), g.in_c, P, n0, nc, gr * cig, cig, gX);
                }
            }
            if (gW) {
                // dW_g [cig × K] += x_g [cig × ld] · colᵀ
                const T* xg;
                if (nc == 1) {
                    xg = X + (n0 * g.in_c + gr * cig) * P;
                } else {
                    gather_channels(X, g.in_c, P, n0, nc, gr * cig, cig, buf.data());
                    xg = buf.data();
                }
                gemm<T>(false, true, cig, K, ld, xg, ld, col.data(), ld, gW + gr * cig * K, K,
                        true);
            }
        }
    }
}

template <int ND, bool Transposed>
void forward_impl(const ForwardCall& call) {
    const auto g = conv_geometry(call, ND, Transposed);
    const char* op = op_name(ND, Transposed);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) {
        using T = decltype(t);
        if constexpr (Transposed)
            conv_t_fwd<T>(call, g, op);
        else
            conv_fwd<T>(call, g, op);
    });
}

template <int ND, bool Transposed>
void backward_impl(const BackwardCall& call) {
    const auto g = conv_geometry(call, ND, Transposed);
    const char* op = op_name(ND, Transposed);
    plugin::dispatch_float(call.input(0).dtype(), [&](auto t) {
        using T = decltype(t);
        if constexpr (Transposed)
            conv_t_bwd<T>(call, g, op);
        else
            conv_bwd<T>(call, g, op);
    });
}

}  // namespace

void conv_forward(const ForwardCall& call) { forward_impl<1, false>(call); }
void conv_backward(const BackwardCall& call) { backward_impl<1, false>(call); }
void conv2d_forward(const ForwardCall& call) { forward_impl<2, false>(call); }
void conv2d_backward(const BackwardCall& call) { backward_impl<2, false>(call); }
void conv_transpose_forward(const ForwardCall& call) { forward_impl<1, true>(call); }
void conv_transpose_backward(const BackwardCall& call) { backward_impl<1, true>(call); }
void conv_transpose2d_forward(const ForwardCall& call) { forward_impl<2, true>(call); }
void conv_transpose2d_backward(const BackwardCall& call) { backward_impl<2, true>(call); }

}  // namespace capsule::reference
