// ONNX GridSample (opset 16; PyTorch's torch.nn.functional.grid_sample, whose kernels in
// aten/src/ATen/native/GridSampler.h the spec and its test data follow) over a 4-D input: the
// grid's sample positions are computed at run time, so each tap (1 nearest, 4 bilinear, 16
// bicubic) is a `gather_elements` of the input viewed as [N, C, H·W] at int64 indices computed by
// elementwise ops, weighted, and left out (`where`) where it falls outside the input.
#include <map>
#include <set>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

struct GridSampleSpec {
    string mode = "bilinear", padding = "zeros";
    bool align_corners = false;
    DType dtype = DType::float32;
    std::int64_t N = 0, C = 0, H = 0, W = 0, points = 0;  // points = H_out · W_out
};

/// The helpers every tap uses, bound to the node.
class Sampler {
public:
    Sampler(ImportContext& c, const onnx::NodeProto& n, const GridSampleSpec& s) : c_(c), n_(n), s_(s) {}

    /// The scalar constant v, one node per value (taps reuse 0, 1, W − 1, ...).
    Id k(double v) {
        auto [it, fresh] = constants_.try_emplace(v, -1);
        if (fresh) it->second = scalar_constant(c_, n_, "k", s_.dtype, v);
        return it->second;
    }
    Id op(const string& name, vector<Id> in, Attributes attrs = {}) { return c_.add(name, std::move(in), std::move(attrs)); }
    Id add(Id a, Id b) { return op("add", {a, b}); }
    Id sub(Id a, Id b) { return op("sub", {a, b}); }
    Id mul(Id a, Id b) { return op("mul", {a, b}); }

    /// grid_sampler_unnormalize: [-1, 1] to pixel coordinates along an axis of `size`.
    Id unnormalize(Id g, std::int64_t size) {
        const double n = static_cast<double>(size);
        if (s_.align_corners) return mul(add(g, k(1)), k((n - 1) / 2));  // (g + 1) / 2 · (size − 1)
        return op("div", {sub(mul(add(g, k(1)), k(n)), k(1)), k(2)});     // ((g + 1) · size − 1) / 2
    }
    /// reflect_coordinates over [twice_low / 2, twice_high / 2].
    Id reflect(Id x, double twice_low, double twice_high) {
        if (twice_low == twice_high) return mul(x, k(0));
        const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
        const Id in = op("abs", {sub(x, k(low))});
        const Id extra = op("mod", {in, k(span)}, {{"fmod", true}});
        const Id flips = op("floor", {op("div", {in, k(span)})});
        const Id even = op("equal", {op("mod", {flips, k(2)}, {{"fmod", true}}), k(0)});
        return op("where", {even, add(extra, k(low)), add(sub(k(span), extra), k(low))});
    }
    /// compute_coordinates: border clips into [0, size − 1]; reflection reflects, then clips.
    Id pad_coordinates(Id x, std::int64_t size) {
        const double n = static_cast<double>(size);
        if (s_.padding == "zeros") return x;
        if (s_.padding == "reflection") x = s_.align_corners ? reflect(x, 0, 2 * (n - 1)) : reflect(x, -1, 2 * n - 1);
        return op("clamp", {x}, {{"min", 0.0}, {"max", n - 1}});
    }
    /// The input's values at integral positions (x, y) [N, P], 0 where outside, times `weight` [N, P].
    Id tap(Id xflat, Id x, Id y, Id weight) {
        const Id inside = op("logical_and", {op("logical_and", {op("greater_equal", {x, k(0)}), op("less_equal", {x, k(double(s_.W - 1))})}),
                                             op("logical_and", {op("greater_equal", {y, k(0)}), op("less_equal", {y, k(double(s_.H - 1))})})});
        // Outside (or NaN) positions read pixel 0, never a cast of an out-of-range or NaN value.
        // y·W + x is exact in the input's dtype (read_spec bounds H·W), so the arithmetic stays
        // float and runs on any provider; only the final cast makes it an index.
        const Id zero = k(0);
        const Id flat = add(mul(op("where", {inside, y, zero}), k(double(s_.W))), op("where", {inside, x, zero}));
        const Id index = op("broadcastTo", {op("reshape", {op("cast", {flat}, {{"to", string("int64")}})}, {{"shape", Shape{s_.N, 1, s_.points}}})},
                            {{"shape", Shape{s_.N, s_.C, s_.points}}});
        const Id value = op("gather_elements", {xflat, index}, {{"axis", std::int64_t{2}}});
        const Shape per_point{s_.N, 1, s_.points};
        const Id weighted = mul(value, op("reshape", {weight}, {{"shape", per_point}}));
        return op("where", {op("reshape", {inside}, {{"shape", per_point}}), weighted, zero});
    }
    /// PyTorch's cubic convolution weights (A = −0.75) of the taps at floor − 1 .. floor + 2.
    vector<Id> cubic_weights(Id t) {
        const double A = -0.75;
        auto near = [&](Id x) {  // ((A + 2)·x − (A + 3))·x·x + 1
            return add(mul(mul(sub(mul(x, k(A + 2)), k(A + 3)), x), x), k(1));
        };
        auto far = [&](Id x) {  // ((A·x − 5A)·x + 8A)·x − 4A
            return sub(mul(add(mul(sub(mul(x, k(A)), k(5 * A)), x), k(8 * A)), x), k(4 * A));
        };
        const Id u = sub(k(1), t);
        return {far(add(t, k(1))), near(t), near(u), far(add(u, k(1)))};
    }

private:
    ImportContext& c_;
    const onnx::NodeProto& n_;
    const GridSampleSpec& s_;
    std::map<double, Id> constants_;
};

GridSampleSpec read_spec(ImportContext& c, const onnx::NodeProto& n) {
    GridSampleSpec s;
    s.mode = attr_string(n, "mode", "bilinear");
    s.padding = attr_string(n, "padding_mode", "zeros");
    s.align_corners = attr_int(n, "align_corners", 0) != 0;
    if (!std::set<string>{"bilinear", "nearest", "bicubic"}.count(s.mode)) unsupported("mode '" + s.mode + "'");
    if (!std::set<string>{"zeros", "border", "reflection"}.count(s.padding)) unsupported("padding_mode '" + s.padding + "'");
    const auto& x = c.type(n.input(0));
    const auto& grid = c.type(n.input(1));
    s.dtype = x.dtype;
    if (s.dtype != DType::float32 && s.dtype != DType::float64) unsupported("X must be float32 or float64");
    if (grid.dtype != s.dtype) unsupported("grid must have X's dtype");
    if (x.shape.size() != 4) unsupported("X must be 4-D [N, C, H, W], got shape " + to_string(x.shape));
    if (grid.shape.size() != 4 || grid.shape[0] != x.shape[0] || grid.shape[3] != 2)
        unsupported("grid must be [N, H_out, W_out, 2] with X's N, got shape " + to_string(grid.shape));
    s.N = x.shape[0];
    s.C = x.shape[1];
    s.H = x.shape[2];
    s.W = x.shape[3];
    s.points = grid.shape[1] * grid.shape[2];
    if (s.N < 1 || s.C < 1 || s.H < 1 || s.W < 1 || s.points < 1) unsupported("empty input or grid");
    // Pixel indices are computed in the input's dtype: exact below 2^24 (float32) or 2^53 (float64).
    const double exact = s.dtype == DType::float32 ? 16777216.0 : 9007199254740992.0;
    if (static_cast<double>(s.H) * static_cast<double>(s.W) > exact)
        unsupported("an input plane of " + std::to_string(s.H) + " × " + std::to_string(s.W) + " pixels is beyond the exact integers of " +
                    string(to_string(s.dtype)));
    return s;
}

}  // namespace

void convert_grid_sample(ImportContext& c, const onnx::NodeProto& n) {
    const GridSampleSpec s = read_spec(c, n);
    Sampler g(c, n, s);
    const Id grid = c.runtime(n.input(1));
    auto coordinate = [&](std::int64_t which) {  // grid[..., which] as [N, P]
        return g.op("reshape", {slice_axis(c, grid, 3, which, which + 1)}, {{"shape", Shape{s.N, s.points}}});
    };
    Id ix = g.unnormalize(coordinate(0), s.W), iy = g.unnormalize(coordinate(1), s.H);
    const Id xflat = g.op("reshape", {c.runtime(n.input(0))}, {{"shape", Shape{s.N, s.C, s.H * s.W}}});
    Id acc = -1;
    auto accumulate = [&](Id term) { acc = acc < 0 ? term : g.add(acc, term); };
    if (s.mode == "bicubic") {
        // Each tap's coordinates are padded on their own (get_value_bounded).
        const Id x0 = g.op("floor", {ix}), y0 = g.op("floor", {iy});
        const auto wx = g.cubic_weights(g.sub(ix, x0)), wy = g.cubic_weights(g.sub(iy, y0));
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                const Id x = g.pad_coordinates(g.add(x0, g.k(j - 1)), s.W), y = g.pad_coordinates(g.add(y0, g.k(i - 1)), s.H);
                accumulate(g.tap(xflat, g.op("floor", {x}), g.op("floor", {y}), g.mul(wx[j], wy[i])));
            }
    } else {
        ix = g.pad_coordinates(ix, s.W);
        iy = g.pad_coordinates(iy, s.H);
        if (s.mode == "nearest") {
            accumulate(g.tap(xflat, round_half_to_even(c, n, ix), round_half_to_even(c, n, iy), filled(c, n, s.dtype, 1, {s.N, s.points})));
        } else {
            const Id x0 = g.op("floor", {ix}), y0 = g.op("floor", {iy});
            const Id x1 = g.add(x0, g.k(1)), y1 = g.add(y0, g.k(1));
            const Id east = g.sub(ix, x0), west = g.sub(x1, ix), south = g.sub(iy, y0), north = g.sub(y1, iy);
            accumulate(g.tap(xflat, x0, y0, g.mul(west, north)));
            accumulate(g.tap(xflat, x1, y0, g.mul(east, north)));
            accumulate(g.tap(xflat, x0, y1, g.mul(west, south)));
            accumulate(g.tap(xflat, x1, y1, g.mul(east, south)));
        }
    }
    const Shape& gs = c.node_type(grid).shape;
    c.define_node(n.output(0), c.add("reshape", {acc}, {{"shape", Shape{s.N, s.C, gs[1], gs[2]}}}, n.output(0)));
}

}  // namespace capsule::onnx_import
