// ONNX GridSample (core/src/onnx/grid_sample.cpp) for every mode × padding_mode × align_corners,
// on grids reaching past [-1, 1], against a per-pixel port of PyTorch's grid_sampler_2d
// (aten/src/ATen/native/GridSampler.h, which the ONNX spec follows) evaluated in double.
#include <gtest/gtest.h>

#include <cmath>

#include "onnx_test_models.hpp"

using namespace capsule;
using namespace capsule_test::onnx_models;

namespace {

struct Sampling {
    std::string mode, padding;
    bool align = false;
};

double unnormalize(double g, std::int64_t size, bool align) {
    return align ? (g + 1) / 2 * double(size - 1) : ((g + 1) * double(size) - 1) / 2;
}
double reflect(double x, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0;
    const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
    x = std::fabs(x - low);
    const double extra = std::fmod(x, span);
    const int flips = static_cast<int>(std::floor(x / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
}
double padded(double x, std::int64_t size, const Sampling& s) {
    if (s.padding == "zeros") return x;
    if (s.padding == "reflection") x = s.align ? reflect(x, 0, 2 * double(size - 1)) : reflect(x, -1, 2 * double(size) - 1);
    return std::min(double(size - 1), std::max(x, 0.0));
}
double cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
double cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/// One output value of channel plane `img` [H, W] at grid point (gx, gy).
double sample(const std::vector<double>& img, std::int64_t H, std::int64_t W, double gx, double gy, const Sampling& s) {
    auto at = [&](std::int64_t x, std::int64_t y) {
        return x >= 0 && x < W && y >= 0 && y < H ? img[std::size_t(y * W + x)] : 0.0;
    };
    double ix = unnormalize(gx, W, s.align), iy = unnormalize(gy, H, s.align);
    if (s.mode == "bicubic") {
        const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0, A = -0.75;
        const double cx[4] = {cubic2(tx + 1, A), cubic1(tx, A), cubic1(1 - tx, A), cubic2(2 - tx, A)};
        const double cy[4] = {cubic2(ty + 1, A), cubic1(ty, A), cubic1(1 - ty, A), cubic2(2 - ty, A)};
        double out = 0;
        for (int i = 0; i < 4; ++i) {
            double row = 0;
            for (int j = 0; j < 4; ++j) {
                const auto x = static_cast<std::int64_t>(padded(x0 - 1 + j, W, s)), y = static_cast<std::int64_t>(padded(y0 - 1 + i, H, s));
                row += cx[j] * at(x, y);
            }
            out += cy[i] * row;
        }
        return out;
    }
    ix = padded(ix, W, s);
    iy = padded(iy, H, s);
    if (s.mode == "nearest") return at(static_cast<std::int64_t>(std::nearbyint(ix)), static_cast<std::int64_t>(std::nearbyint(iy)));
    const auto x0 = static_cast<std::int64_t>(std::floor(ix)), y0 = static_cast<std::int64_t>(std::floor(iy));
    const double e = ix - double(x0), w = double(x0 + 1) - ix, so = iy - double(y0), no = double(y0 + 1) - iy;
    return at(x0, y0) * w * no + at(x0 + 1, y0) * e * no + at(x0, y0 + 1) * w * so + at(x0 + 1, y0 + 1) * e * so;
}

}  // namespace

TEST(OnnxGridSample, EveryModeAndPaddingMatchesPyTorchsDefinition) {
    const std::int64_t N = 2, C = 2, H = 3, W = 4, HO = 3, WO = 5;
    std::vector<double> x, grid;
    for (std::int64_t i = 0; i < N * C * H * W; ++i) x.push_back(static_cast<float>(std::sin(0.9 * double(i)) * 3));
    // Points from −1.4 to 1.4: inside, on the border and outside, with exact corners included.
    for (std::int64_t i = 0; i < N * HO * WO * 2; ++i) grid.push_back(static_cast<float>(1.4 * std::sin(1.31 * double(i) + 0.2)));
    grid[0] = -1;
    grid[1] = -1;
    grid[2] = 1;
    grid[3] = 1;
    for (const std::string mode : {"bilinear", "nearest", "bicubic"})
        for (const std::string padding : {"zeros", "border", "reflection"})
            for (bool align : {false, true}) {
                const Sampling s{mode, padding, align};
                SCOPED_TRACE(mode + " " + padding + (align ? " align_corners" : ""));
                auto m = model(16, 8);
                auto* g = m.mutable_graph();
                typed(g->add_input(), "x", {N, C, H, W});
                typed(g->add_input(), "grid", {N, HO, WO, 2});
                typed(g->add_output(), "y", {N, C, HO, WO});
                auto* n = node(g, "GridSample", {"x", "grid"}, {"y"});
                set_string(n, "mode", mode);
                set_string(n, "padding_mode", padding);
                set_int(n, "align_corners", align);
                const auto got = run(m, {{"x", Tensor::from_values(DType::float32, {N, C, H, W}, x)},
                                         {"grid", Tensor::from_values(DType::float32, {N, HO, WO, 2}, grid)}})
                                     .at(0)
                                     .to_doubles();
                ASSERT_EQ(got.size(), std::size_t(N * C * HO * WO));
                for (std::int64_t b = 0; b < N; ++b)
                    for (std::int64_t ch = 0; ch < C; ++ch) {
                        const std::vector<double> img(x.begin() + (b * C + ch) * H * W, x.begin() + (b * C + ch + 1) * H * W);
                        for (std::int64_t p = 0; p < HO * WO; ++p) {
                            const double gx = grid[std::size_t((b * HO * WO + p) * 2)], gy = grid[std::size_t((b * HO * WO + p) * 2 + 1)];
                            const double expected = sample(img, H, W, gx, gy, s);
                            EXPECT_NEAR(got[std::size_t((b * C + ch) * HO * WO + p)], expected, 1e-4 * (1 + std::abs(expected)))
                                << "n " << b << " c " << ch << " point " << p;
                        }
                    }
            }
}
