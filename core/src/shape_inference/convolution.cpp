// Sliding windows over 1 or 2 spatial dimensions: convolutions (with their weight and bias
// parameters) and pooling. Output sizes follow PyTorch's formulas.
#include "context.hpp"

#include <string>
#include <vector>

namespace capsule::shape_inference {

namespace {

/// A tuple attribute as it was most likely written: `3` for one dimension, `[3, 3]` for more.
string dims_to_string(const std::vector<int64_t>& v) {
    return v.size() == 1 ? str(v[0]) : to_string(v);
}

}  // namespace

TensorType convolution(Context& c, size_t nd, bool transposed) {
    c.arity(1);
    if (transposed)
        c.attributes({"out_channels", "kernel_size", "stride", "padding", "output_padding",
                      "dilation", "groups", "bias"});
    else
        c.attributes(
            {"out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias"});
    const auto dtype = c.floats({0});
    const int64_t out_channels = c.int_min("out_channels", 1, std::nullopt);
    const auto kernel = c.tuple("kernel_size", nd, 1, std::nullopt);
    const auto stride = c.tuple("stride", nd, 1, std::vector<int64_t>(nd, 1));
    const auto padding = c.tuple("padding", nd, 0, std::vector<int64_t>(nd, 0));
    const auto dilation = c.tuple("dilation", nd, 1, std::vector<int64_t>(nd, 1));
    const auto output_padding = transposed
                                    ? c.tuple("output_padding", nd, 0, std::vector<int64_t>(nd, 0))
                                    : std::vector<int64_t>(nd, 0);
    const int64_t groups = c.int_min("groups", 1, 1);
    const bool bias = c.bool_or("bias", true);
    c.rank_is(0, nd + 2);
    const auto& in = c.shape(0);
    const int64_t in_channels = in[1];
    if (in_channels % groups != 0)
        fail("input channels " + str(in_channels) + " are not divisible by groups " + str(groups));
    if (out_channels % groups != 0)
        fail("attribute 'out_channels' = " + str(out_channels) + " is not divisible by groups " +
             str(groups));
    Shape out{in[0], out_channels};
    static const char* const kAxis[2][2] = {{"length", ""}, {"height", "width"}};
    for (size_t i = 0; i < nd; ++i) {
        const int64_t size = in[2 + i];
        const int64_t span = add(mul(dilation[i], kernel[i] - 1), 1);  // dilated kernel
        int64_t o;
        if (!transposed) {
            const int64_t padded = add(size, mul(2, padding[i]));
            if (padded < span)
                fail(string("padded input ") + kAxis[nd - 1][i] + " " + str(padded) +
                     " is smaller than the dilated kernel " + str(span));
            o = (padded - span) / stride[i] + 1;
        } else {
            if (output_padding[i] >= stride[i] && output_padding[i] >= dilation[i])
                fail("attribute 'output_padding' = " + dims_to_string(output_padding) +
                     " must be smaller than the stride or the dilation");
            o = add(add(sub(mul(size - 1, stride[i]), mul(2, padding[i])), span - 1),
                    output_padding[i] + 1);
            if (o < 1)
                fail(string("output ") + kAxis[nd - 1][i] + " " + str(o) + " is too small (input " +
                     kAxis[nd - 1][i] + " " + str(size) + ")");
        }
        out.push_back(o);
    }
    Shape weight = transposed ? Shape{in_channels, out_channels / groups}
                              : Shape{out_channels, in_channels / groups};
    for (auto k : kernel) weight.push_back(k);
    c.param("weight", weight, dtype);
    if (bias) c.param("bias", {out_channels}, dtype);
    return {out, dtype};
}

TensorType pooling(Context& c, size_t nd, PoolKind kind, bool padded) {
    c.arity(1);
    if (kind == PoolKind::smooth_max)
        c.attributes({"kernel_size", "stride", "temperature"});
    else if (!padded)
        c.attributes({"kernel_size", "stride"});
    else if (kind == PoolKind::avg)
        c.attributes({"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"});
    else
        c.attributes({"kernel_size", "stride", "padding", "ceil_mode"});
    const auto dtype = c.floats({0});
    const auto kernel = c.tuple("kernel_size", nd, 1, std::nullopt);
    const auto stride = c.tuple("stride", nd, 1, kernel);
    std::vector<int64_t> padding(nd, 0);
    bool ceil_mode = false;
    if (padded) {
        padding = c.tuple("padding", nd, 0, std::vector<int64_t>(nd, 0));
        ceil_mode = c.bool_or("ceil_mode", false);
        if (kind == PoolKind::avg) c.bool_or("count_include_pad", true);
        for (size_t i = 0; i < nd; ++i)
            if (padding[i] > kernel[i] / 2)
                fail("attribute 'padding' = " + dims_to_string(padding) +
                     " must be at most half the kernel size " + dims_to_string(kernel));
    }
    if (kind == PoolKind::smooth_max) c.positive("temperature", 1.0);
    c.rank_is(0, nd + 2);
    const auto& in = c.shape(0);
    Shape out{in[0], in[1]};
    static const char* const kAxis[2][2] = {{"length", ""}, {"height", "width"}};
    for (size_t i = 0; i < nd; ++i) {
        const int64_t size = add(in[2 + i], mul(2, padding[i]));
        if (size < kernel[i])
            fail(string(padded ? "padded input " : "input ") + kAxis[nd - 1][i] + " " + str(size) +
                 " is smaller than the kernel " + str(kernel[i]));
        const int64_t span = size - kernel[i];
        int64_t o = span / stride[i] + (ceil_mode && span % stride[i] != 0 ? 1 : 0) + 1;
        // PyTorch: the last window must start inside the input or the left padding.
        if (ceil_mode && mul(o - 1, stride[i]) >= in[2 + i] + padding[i]) --o;
        out.push_back(o);
    }
    return {out, dtype};
}

}  // namespace capsule::shape_inference
