// ONNX Conv with 3 spatial axes, which has no BackendOp, as the sum over the kernel's depth of 2-D
// convolutions: y[n, :, od] = Σ_kd conv2d(x[n, :, od·sD + kd·dD], W[:, :, kd]) (+ bias once), the
// depth slices of all output depths batched into one conv2d per kd through an [N·OD, C, H, W] view.
// Exact up to the order of the sums. docs/onnx.md states the conditions.
#include <algorithm>
#include <cstring>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

/// W[:, :, kd] of a weight [M, Cg, kD, kH, kW]: [M, Cg, kH, kW].
Tensor depth_slice(const Tensor& weight, std::int64_t kd) {
    const Shape& s = weight.shape();
    Tensor out = Tensor::zeros(weight.dtype(), {s[0], s[1], s[3], s[4]});
    const std::size_t plane = static_cast<std::size_t>(s[3] * s[4]) * dtype_size(weight.dtype());
    const auto* from = static_cast<const unsigned char*>(weight.data());
    auto* to = static_cast<unsigned char*>(out.data());
    for (std::int64_t mc = 0; mc < s[0] * s[1]; ++mc)
        std::memcpy(to + static_cast<std::size_t>(mc) * plane, from + static_cast<std::size_t>(mc * s[2] + kd) * plane, plane);
    return out;
}

}  // namespace

Id conv3d_by_depth_slices(ImportContext& c, Id x, const Window& w, std::int64_t groups,
                          const string& weight_name, const string& bias, const string& name) {
    const Shape in = c.node_type(x).shape;
    const Tensor& weight = c.constant(weight_name, "3-D Conv weight (a constant: its depth slices become conv2d weights)");
    const Shape& ws = weight.shape();
    if (in.size() != 5 || ws.size() != 5) unsupported("3-D Conv needs an input and a weight of rank 5");
    // Depth padding, and padding of height and width when it is asymmetric, as a zero `pad` first.
    const bool hw_symmetric = w.pad_begin[1] == w.pad_end[1] && w.pad_begin[2] == w.pad_end[2];
    vector<std::int64_t> pads(10, 0);
    pads[2] = w.pad_begin[0];
    pads[7] = w.pad_end[0];
    if (!hw_symmetric)
        for (std::size_t a = 1; a < 3; ++a) {
            pads[2 + a] = w.pad_begin[a];
            pads[7 + a] = w.pad_end[a];
        }
    const bool padded = std::any_of(pads.begin(), pads.end(), [](std::int64_t p) { return p != 0; });
    const Id source = padded ? c.add("pad", {x}, {{"pads", pads}, {"mode", string("constant")}, {"value", 0.0}}) : x;
    const Shape ps = c.node_type(source).shape;
    const std::int64_t extent = (ws[2] - 1) * w.dilation[0] + 1;
    if (ps[2] < extent) unsupported("padded depth " + std::to_string(ps[2]) + " is smaller than the dilated kernel " + std::to_string(extent));
    const std::int64_t depth_out = (ps[2] - extent) / w.stride[0] + 1;
    // [N, Dp, C, Hp, Wp]: depth slices are then [N, OD, C, Hp, Wp], viewed as [N·OD, C, Hp, Wp].
    const Id moved = c.add("permute", {source}, {{"dims", vector<std::int64_t>{0, 2, 1, 3, 4}}});
    const vector<std::int64_t> hw_padding = hw_symmetric ? vector<std::int64_t>{w.pad_begin[1], w.pad_begin[2]} : vector<std::int64_t>{0, 0};
    Id acc = -1;
    for (std::int64_t kd = 0; kd < ws[2]; ++kd) {
        const std::int64_t start = kd * w.dilation[0];
        const Id slice = slice_axis(c, moved, 1, start, start + (depth_out - 1) * w.stride[0] + 1, w.stride[0]);
        const Id planes = c.add("reshape", {slice}, {{"shape", Shape{in[0] * depth_out, in[1], ps[3], ps[4]}}});
        const bool with_bias = kd == 0 && !bias.empty();
        const Attributes attrs{{"out_channels", ws[0]}, {"kernel_size", vector<std::int64_t>{ws[3], ws[4]}},
                               {"stride", vector<std::int64_t>{w.stride[1], w.stride[2]}}, {"padding", hw_padding},
                               {"dilation", vector<std::int64_t>{w.dilation[1], w.dilation[2]}}, {"groups", groups},
                               {"bias", with_bias}};
        const Id conv = c.add("conv2d", {planes}, attrs);
        const string slice_name = c.fresh_value_name(name + "#weight_depth_" + std::to_string(kd));
        c.define_constant(slice_name, depth_slice(weight, kd));
        vector<string> params{slice_name};
        if (with_bias) params.push_back(bias);
        c.bind_parameters(conv, params);
        acc = acc < 0 ? conv : c.add("add", {acc, conv});
    }
    const Shape& ys = c.node_type(acc).shape;  // [N·OD, M, OH, OW]
    const Id split = c.add("reshape", {acc}, {{"shape", Shape{in[0], depth_out, ys[1], ys[2], ys[3]}}});
    return c.add("permute", {split}, {{"dims", vector<std::int64_t>{0, 2, 1, 3, 4}}}, name);
}

}  // namespace capsule::onnx_import
