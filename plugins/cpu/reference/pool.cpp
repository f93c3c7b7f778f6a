// Reference kernels: max, average and smooth-max pooling over 1 or 2 spatial dimensions.
//   max_pool / max_pool2d / max_pool2d_pad      F.max_pool1d / F.max_pool2d (padding, ceil_mode)
//   avg_pool / avg_pool2d / avg_pool2d_pad      F.avg_pool1d / F.avg_pool2d (padding, ceil_mode,
//                                               count_include_pad)
//   smooth_max_pool / smooth_max_pool2d         temperature · log Σ exp(x / temperature) over the
//                                               window (computed stably around the window max)
// Inputs are [N, C, L] or [N, C, H, W]; the 1-D ops run as 2-D with height 1. The output size
// follows shape inference exactly (PyTorch's rule, including the ceil_mode clamp that the last
// window must start inside the input or the left padding).
// Max pooling routes the gradient to the first maximum of the window in row-major order (as
// PyTorch's CPU kernel; a NaN counts as the maximum, as there). Padding never wins a max.
#include <algorithm>
#include <cmath>
#include <limits>

#include "linalg_common.hpp"
#include "parallel.hpp"

namespace capsule::reference {
namespace {

enum class Kind { max, avg, smooth };

struct PoolGeom {
    int64_t n = 0, c = 0, h = 1, w = 0, oh = 1, ow = 0;
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
    bool count_include_pad = true;
    double temperature = 1.0;
    DimList out_shape;
    const char* op = "";
};

/// One window: clamped bounds [y0, y1) × [x0, x1) and the average divisor.
struct Window {
    int64_t y0, y1, x0, x1;
    int64_t divisor;
};

inline Window window(const PoolGeom& g, int64_t oy, int64_t ox) {
    Window win;
    int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    int64_t y1 = std::min(y0 + g.kh, g.h + g.ph), x1 = std::min(x0 + g.kw, g.w + g.pw);
    const int64_t padded_count = (y1 - y0) * (x1 - x0);
    win.y0 = std::max<int64_t>(y0, 0);
    win.x0 = std::max<int64_t>(x0, 0);
    win.y1 = std::min(y1, g.h);
    win.x1 = std::min(x1, g.w);
    win.divisor = g.count_include_pad ? padded_count : (win.y1 - win.y0) * (win.x1 - win.x0);
    return win;
}

inline bool empty(const Window& w) { return w.y0 >= w.y1 || w.x0 >= w.x1; }

template <typename Call>
PoolGeom pool_geometry(const Call& call, const char* op, int nd, Kind kind, bool padded) {
    const auto attrs = call.attrs();
    PoolGeom g;
    g.op = op;
    require_arity(call, 1, 0, op);
    const Tensor x = call.input(0);
    check_view(x, {op, " input"});
    require(x.rank() == nd + 2, [&] {
        return std::string(op) + ": input must have rank " + std::to_string(nd + 2) +
               ", got shape " + shape_string(x.shape());
    });
    const std::size_t n = std::size_t(nd);
    const auto kernel = tuple_attr(attrs, "kernel_size", n, 1, nullptr);
    const auto stride = tuple_attr(attrs, "stride", n, 1, &kernel);
    const DimList zeros(n, 0);
    const auto padding = padded ? tuple_attr(attrs, "padding", n, 0, &zeros) : zeros;
    const bool ceil_mode = padded && attrs.get_bool("ceil_mode", false);
    if (kind == Kind::avg && padded) g.count_include_pad = attrs.get_bool("count_include_pad", true);
    if (kind == Kind::smooth) {
        g.temperature = attrs.get_float("temperature", 1.0);
        require(g.temperature > 0 && std::isfinite(g.temperature),
                [&] {
                    return std::string(op) + ": attribute 'temperature' must be a finite number > 0";
                });
    }
    for (std::size_t i = 0; i < n; ++i) {
        require(kernel[i] <= (int64_t(1) << 40) && stride[i] <= (int64_t(1) << 40),
                [&] { return std::string(op) + ": attribute values are too large"; });
        require(padding[i] <= kernel[i] / 2,
                [&] {
                    return std::string(op) + ": padding must be at most half the kernel size";
                });
    }
    g.n = x.dim(0);
    g.c = x.dim(1);
    DimList outs;
    for (std::size_t i = 0; i < n; ++i) {
        const int64_t in = x.dim(int(2 + i));
        const int64_t size = in + 2 * padding[i];
        require(size >= kernel[i], [&] {
            return std::string(op) + ": input size " + std::to_string(size) +
                   " is smaller than the kernel " + std::to_string(kernel[i]);
        });
        const int64_t span = size - kernel[i];
        int64_t o = span / stride[i] + (ceil_mode && span % stride[i] != 0 ? 1 : 0) + 1;
        if (ceil_mode && (o - 1) * stride[i] >= in + padding[i]) --o;
        outs.push_back(o);
    }
    if (nd == 2) {
        g.h = x.dim(2);
        g.kh = kernel[0];
        g.sh = stride[0];
        g.ph = padding[0];
        g.oh = outs[0];
    }
    g.w = x.dim(nd + 1);
    g.kw = kernel[n - 1];
    g.sw = stride[n - 1];
    g.pw = padding[n - 1];
    g.ow = outs[n - 1];
    g.out_shape = {g.n, g.c};
    for (auto o : outs) g.out_shape.push_back(o);
    return g;
}

/// Index (within the plane) of the window's first maximum; -1 for an empty window.
template <typename T>
inline int64_t argmax(const T* plane, const PoolGeom& g, const Window& win) {
    if (empty(win)) return -1;
    int64_t best_i = win.y0 * g.w + win.x0;
    T best = -std::numeric_limits<T>::infinity();
    for (int64_t y = win.y0; y < win.y1; ++y)
        for (int64_t x = win.x0; x < win.x1; ++x) {
            const T v = plane[y * g.w + x];
            if (v > best || std::isnan(v)) {
                best = v;
                best_i = y * g.w + x;
            }
        }
    return best_i;
}

/// The value at argmax(plane, g, win) for the forward pass: the window's first maximum, its last
/// NaN when it holds one (torch.max_pool2d), -inf for an empty window. Written as selects
/// (maxss and a NaN carry) so that no comparison of the data branches.
template <typename T>
inline T window_max(const T* plane, const PoolGeom& g, const Window& win) {
    T best = -std::numeric_limits<T>::infinity(), nan = T(0);
    bool any_nan = false;
    for (int64_t y = win.y0; y < win.y1; ++y)
        for (int64_t x = win.x0; x < win.x1; ++x) {
            const T v = plane[y * g.w + x];
            best = v > best ? v : best;
            nan = v != v ? v : nan;
            any_nan |= v != v;
        }
    return any_nan ? nan : best;
}

/// Window maximum and Σ exp((x - max)/temperature), for smooth max.
template <typename T>
inline void smooth_stats(const T* plane, const PoolGeom& g, const Window& win, double& m,
                         double& s) {
    m = -std::numeric_limits<double>::infinity();
    for (int64_t y = win.y0; y < win.y1; ++y)
        for (int64_t x = win.x0; x < win.x1; ++x) {
            const double v = double(plane[y * g.w + x]);
            if (std::isnan(v)) {  // a NaN anywhere in the window makes the result NaN
                m = v;
                s = v;
                return;
            }
            m = std::max(m, v);
        }
    s = 0;
    if (!std::isfinite(m)) return;
    for (int64_t y = win.y0; y < win.y1; ++y)
        for (int64_t x = win.x0; x < win.x1; ++x)
            s += std::exp((double(plane[y * g.w + x]) - m) / g.temperature);
}

/// The max-pool combine, in window order: a NaN replaces what came before (so the window's last
/// NaN wins), a number replaces a smaller number (so among equals the first stays). Selects only,
/// so that loops of it vectorise.
template <typename T>
inline T max_combine(T acc, T v) {
    const T larger = v > acc ? v : acc;
    const T kept = acc != acc ? acc : larger;
    return v != v ? v : kept;
}

/// Whether the windows tile each row exactly (no padding, row length = ow·sw) and stay inside it
/// (not so in ceil mode, whose last window may run past the row's end): then tap j of entry t of
/// consecutive rows, even of consecutive planes, reads input[t·sw + j].
inline bool windows_tile_rows(const PoolGeom& g) {
    return g.pw == 0 && g.w == g.ow * g.sw && (g.ow - 1) * g.sw + g.kw <= g.w;
}

/// The horizontal step of separable max pooling for one plane whose windows do not tile its rows
/// (padding, ceil mode): h[y][ox] = the combine of input row y over window column range ox, in x
/// order (-inf where no tap is inside the row). Taps outer, rows inner: each tap's range of
/// output columns inside the row is computed once (divisions).
template <typename T>
[[gnu::always_inline]] inline void max_plane_rows(const T* __restrict plane, const PoolGeom& g,
                                                  T* __restrict hbuf) {
    std::fill(hbuf, hbuf + g.h * g.ow, -std::numeric_limits<T>::infinity());
    for (int64_t j = 0; j < g.kw; ++j) {
        // Output columns whose tap j reads inside the row: 0 <= ox·sw − pw + j < w.
        const int64_t base = j - g.pw;
        const int64_t lo = std::min(g.ow, base >= 0 ? 0 : (-base + g.sw - 1) / g.sw);
        const int64_t hi = std::min(g.ow, base >= g.w ? 0 : (g.w - base + g.sw - 1) / g.sw);
        for (int64_t y = 0; y < g.h; ++y) {
            const T* __restrict row = plane + y * g.w;
            T* __restrict h = hbuf + y * g.ow;
            // A stride known at compile time vectorises with permutes, not element gathers.
            if (g.sw == 1)
                for (int64_t ox = lo; ox < hi; ++ox) h[ox] = max_combine(h[ox], row[base + ox]);
            else if (g.sw == 2)
                for (int64_t ox = lo; ox < hi; ++ox) h[ox] = max_combine(h[ox], row[base + 2 * ox]);
            else
                for (int64_t ox = lo; ox < hi; ++ox) h[ox] = max_combine(h[ox], row[base + ox * g.sw]);
        }
    }
}

/// The values per vector step of max_planes_vertical: 64 bytes (one AVX-512 register).
template <typename T>
inline constexpr int64_t kPoolLanes = 64 / int64_t(sizeof(T));

/// The vertical step for the `planes` planes of a block: y[oy][ox] = the combine of h over the
/// window's rows, in y order (-inf for a window with no row inside the plane). A row is done in
/// whole vectors: the last one of a row of ow >= lanes values overlaps the one before it (the
/// same values again); a shorter row also writes past its end into the next output rows of the
/// block, which are computed after it and overwrite them. Short rows whose vector would reach
/// past the block's end are done value by value, so nothing is written outside the block.
/// `hbuf` holds lanes values of slack past the block's rows (a short row's vector reads past its
/// end).
template <typename T>
[[gnu::always_inline]] inline void max_planes_vertical(const T* __restrict hbuf, int64_t planes,
                                                       const PoolGeom& g, T* __restrict out) {
    constexpr int64_t W = kPoolLanes<T>;
    constexpr T lowest = -std::numeric_limits<T>::infinity();
    const int64_t rows = planes * g.oh;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t p = r / g.oh, oy = r % g.oh;
        const T* h = hbuf + p * g.h * g.ow;
        T* __restrict o = out + r * g.ow;
        const int64_t y0 = std::max<int64_t>(oy * g.sh - g.ph, 0);
        const int64_t y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
        if (y0 >= y1) {
            std::fill(o, o + g.ow, lowest);
            continue;
        }
        if (g.ow < W && r * g.ow + W > rows * g.ow) {
            std::copy_n(h + y0 * g.ow, g.ow, o);
            for (int64_t y = y0 + 1; y < y1; ++y)
                for (int64_t ox = 0; ox < g.ow; ++ox) o[ox] = max_combine(o[ox], h[y * g.ow + ox]);
            continue;
        }
        // Loops of a constant W values: the vectoriser makes each one vector operation.
        for (int64_t c = 0; c < g.ow; c += W) {
            const int64_t x = g.ow >= W ? std::min(c, g.ow - W) : 0;
            T acc[W];
            for (int64_t l = 0; l < W; ++l) acc[l] = h[y0 * g.ow + x + l];
            for (int64_t y = y0 + 1; y < y1; ++y)
                for (int64_t l = 0; l < W; ++l) acc[l] = max_combine(acc[l], h[y * g.ow + x + l]);
            for (int64_t l = 0; l < W; ++l) o[x + l] = acc[l];
        }
    }
}

/// `planes` consecutive planes of max pooling, separably: h[y][ox] = the combine of input row y
/// over window column range ox (in x order), then y[oy][ox] = the combine of h over the window's
/// rows (in y order). Combining row-major windows row by row keeps window_max's result exactly
/// (first maximum, last NaN in row-major order, -inf for an empty window) at kh + kw rather than
/// kh·kw operations per output. The first tap or row is copied instead of combined with -inf
/// (the same value: max_combine(-inf, v) is v). `hbuf` holds planes × g.h × g.ow values and
/// the slack max_planes_vertical reads.
template <typename T>
[[gnu::always_inline]] inline void max_planes_impl(const T* __restrict in, int64_t planes,
                                                   const PoolGeom& g, T* __restrict hbuf,
                                                   T* __restrict out) {
    if (windows_tile_rows(g)) {
        // One long loop per tap over every row of the planes instead of one short loop per row
        // (LeNet's 2x2 pools have rows of 14 and 5 outputs).
        const int64_t n = planes * g.h * g.ow;
        for (int64_t j = 0; j < g.kw; ++j) {
            if (j == 0 && g.sw == 2)
                for (int64_t t = 0; t < n; ++t) hbuf[t] = in[2 * t];
            else if (j == 0)
                for (int64_t t = 0; t < n; ++t) hbuf[t] = in[t * g.sw];
            else if (g.sw == 1)
                for (int64_t t = 0; t < n; ++t) hbuf[t] = max_combine(hbuf[t], in[t + j]);
            else if (g.sw == 2)
                for (int64_t t = 0; t < n; ++t) hbuf[t] = max_combine(hbuf[t], in[2 * t + j]);
            else
                for (int64_t t = 0; t < n; ++t) hbuf[t] = max_combine(hbuf[t], in[t * g.sw + j]);
        }
    } else {
        for (int64_t p = 0; p < planes; ++p) max_plane_rows(in + p * g.h * g.w, g, hbuf + p * g.h * g.ow);
    }
    max_planes_vertical(hbuf, planes, g, out);
}

// CAPSULE_CLONES: compiled per ISA (linalg_common.hpp).
CAPSULE_CLONES void max_planes(const float* in, int64_t planes, const PoolGeom& g, float* hbuf,
                               float* out) {
    max_planes_impl(in, planes, g, hbuf, out);
}
CAPSULE_CLONES void max_planes(const double* in, int64_t planes, const PoolGeom& g, double* hbuf,
                               double* out) {
    max_planes_impl(in, planes, g, hbuf, out);
}

template <typename T>
void pool_fwd(const ForwardCall& call, const PoolGeom& g, Kind kind) {
    const Tensor x = call.input(0), out = call.output(0);
    check_tensor(out, x.dtype(), g.out_shape, {g.op, " output"});
    const T* X = x.data<T>();
    T* Y = out.data<T>();
    const int64_t planes = g.n * g.c;
    // Planes are independent: with a thread grant, each thread takes a contiguous range of them
    // (every output is computed as on one thread). Below ~64 K window reads a thread's start costs
    // more than it saves.
    const double reads = double(planes) * double(g.oh) * double(g.ow) * double(g.kh) * double(g.kw);  // may exceed int64
    const int64_t by_work = reads >= 65536.0 * 64 ? 64 : static_cast<int64_t>(reads / 65536.0);
    const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({granted_threads(call), planes, by_work})));
    // Max pooling goes in blocks of planes whose row maxima (h × ow each) fill about 64 KB.
    // (std::clamp needs lo <= hi: an empty batch has no planes.)
    const int64_t block = kind == Kind::max
                              ? std::clamp<int64_t>(16384 / std::max<int64_t>(1, g.h * g.ow), 1, std::max<int64_t>(planes, 1))
                              : 1;
    run_parts(parts, [&](int part) {
    Scratch<T> hbuf(kind == Kind::max ? block * g.h * g.ow + kPoolLanes<T> : 0);
    const int64_t last = planes * (part + 1) / parts;
    for (int64_t p = planes * part / parts; p < last; ++p) {
        const T* plane = X + p * g.h * g.w;
        T* yp = Y + p * g.oh * g.ow;
        if (kind == Kind::max) {
            const int64_t count = std::min(block, last - p);
            max_planes(plane, count, g, hbuf.data(), yp);
            p += count - 1;
            continue;
        }
        for (int64_t oy = 0; oy < g.oh; ++oy)
            for (int64_t ox = 0; ox < g.ow; ++ox) {
                const Window win = window(g, oy, ox);
                T& dst = yp[oy * g.ow + ox];
                switch (kind) {
                    case Kind::max: dst = window_max(plane, g, win); break;
                    case Kind::avg: {
                        double s = 0;
                        for (int64_t y = win.y0; y < win.y1; ++y)
                            for (int64_t xx = win.x0; xx < win.x1; ++xx)
                                s += double(plane[y * g.w + xx]);
                        dst = win.divisor > 0 ? T(s / double(win.divisor)) : T(0);
                        break;
                    }
                    case Kind::smooth: {
                        double m, s;
                        smooth_stats(plane, g, win, m, s);
                        dst = std::isfinite(m) ? T(m + g.temperature * std::log(s)) : T(m);
                        break;
                    }
                }
            }
    }
    });
}

template <typename T>
void pool_bwd(const BackwardCall& call, const PoolGeom& g, Kind kind) {
    const Tensor x = call.input(0);
    const Tensor gout = call.grad_output(0);
    check_tensor(gout, x.dtype(), g.out_shape, {g.op, " grad output"});
    T* gX = grad_target<T>(call.grad_input(0), x, {g.op, " grad input"});
    if (!gX) return;
    const T* X = x.data<T>();
    const T* G = gout.data<T>();
    const int64_t planes = g.n * g.c;
    std::fill(gX, gX + planes * g.h * g.w, T(0));
    for (int64_t p = 0; p < planes; ++p) {
        const T* plane = X + p * g.h * g.w;
        T* gp = gX + p * g.h * g.w;
        const T* gy = G + p * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy)
            for (int64_t ox = 0; ox < g.ow; ++ox) {
                const Window win = window(g, oy, ox);
                const T dy = gy[oy * g.ow + ox];
                switch (kind) {
                    case Kind::max: {
                        const int64_t i = argmax(plane, g, win);
                        if (i >= 0) gp[i] += dy;
                        break;
                    }
                    case Kind::avg: {
                        if (win.divisor <= 0) break;
                        const T v = T(double(dy) / double(win.divisor));
                        for (int64_t y = win.y0; y < win.y1; ++y)
                            for (int64_t xx = win.x0; xx < win.x1; ++xx) gp[y * g.w + xx] += v;
                        break;
                    }
                    case Kind::smooth: {
                        // d/dx_i [T log Σ exp(x/T)] = softmax(x/T)_i
                        double m, s;
                        smooth_stats(plane, g, win, m, s);
                        if (!std::isfinite(m) || !(s > 0)) break;
                        for (int64_t y = win.y0; y < win.y1; ++y)
                            for (int64_t xx = win.x0; xx < win.x1; ++xx) {
                                const double e =
                                    std::exp((double(plane[y * g.w + xx]) - m) / g.temperature);
                                gp[y * g.w + xx] += T(double(dy) * e / s);
                            }
                        break;
                    }
                }
            }
    }
}

template <const char* Op, int ND, Kind K, bool Padded>
void forward_impl(const ForwardCall& call) {
    const auto g = pool_geometry(call, Op, ND, K, Padded);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { pool_fwd<decltype(t)>(call, g, K); });
}

template <const char* Op, int ND, Kind K, bool Padded>
void backward_impl(const BackwardCall& call) {
    const auto g = pool_geometry(call, Op, ND, K, Padded);
    plugin::dispatch_float(call.input(0).dtype(),
                           [&](auto t) { pool_bwd<decltype(t)>(call, g, K); });
}

constexpr char kMaxPool[] = "max_pool";
constexpr char kMaxPool2d[] = "max_pool2d";
constexpr char kMaxPool2dPad[] = "max_pool2d_pad";
constexpr char kSmoothMaxPool[] = "smooth_max_pool";
constexpr char kSmoothMaxPool2d[] = "smooth_max_pool2d";
constexpr char kAvgPool[] = "avg_pool";
constexpr char kAvgPool2d[] = "avg_pool2d";
constexpr char kAvgPool2dPad[] = "avg_pool2d_pad";

}  // namespace

void max_pool_forward(const ForwardCall& c) { forward_impl<kMaxPool, 1, Kind::max, false>(c); }
void max_pool_backward(const BackwardCall& c) { backward_impl<kMaxPool, 1, Kind::max, false>(c); }
void max_pool2d_forward(const ForwardCall& c) { forward_impl<kMaxPool2d, 2, Kind::max, false>(c); }
void max_pool2d_backward(const BackwardCall& c) {
    backward_impl<kMaxPool2d, 2, Kind::max, false>(c);
}
void max_pool2d_pad_forward(const ForwardCall& c) {
    forward_impl<kMaxPool2dPad, 2, Kind::max, true>(c);
}
void max_pool2d_pad_backward(const BackwardCall& c) {
    backward_impl<kMaxPool2dPad, 2, Kind::max, true>(c);
}
void smooth_max_pool_forward(const ForwardCall& c) {
    forward_impl<kSmoothMaxPool, 1, Kind::smooth, false>(c);
}
void smooth_max_pool_backward(const BackwardCall& c) {
    backward_impl<kSmoothMaxPool, 1, Kind::smooth, false>(c);
}
void smooth_max_pool2d_forward(const ForwardCall& c) {
    forward_impl<kSmoothMaxPool2d, 2, Kind::smooth, false>(c);
}
void smooth_max_pool2d_backward(const BackwardCall& c) {
    backward_impl<kSmoothMaxPool2d, 2, Kind::smooth, false>(c);
}
void avg_pool_forward(const ForwardCall& c) { forward_impl<kAvgPool, 1, Kind::avg, false>(c); }
void avg_pool_backward(const BackwardCall& c) { backward_impl<kAvgPool, 1, Kind::avg, false>(c); }
void avg_pool2d_forward(const ForwardCall& c) { forward_impl<kAvgPool2d, 2, Kind::avg, false>(c); }
void avg_pool2d_backward(const BackwardCall& c) {
    backward_impl<kAvgPool2d, 2, Kind::avg, false>(c);
}
void avg_pool2d_pad_forward(const ForwardCall& c) {
    forward_impl<kAvgPool2dPad, 2, Kind::avg, true>(c);
}
void avg_pool2d_pad_backward(const BackwardCall& c) {
    backward_impl<kAvgPool2dPad, 2, Kind::avg, true>(c);
}

}  // namespace capsule::reference
