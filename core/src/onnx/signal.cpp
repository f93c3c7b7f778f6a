// ONNX's signal-processing ops (opset 17): HannWindow, HammingWindow, BlackmanWindow and
// MelWeightMatrix are functions of scalar inputs alone, computed at import once those inputs are
// constants; DFT and STFT are matmuls of the signal by constant cosine and sine matrices (the DFT
// as a matrix product, O(N²) per transform rather than an FFT's O(N log N); each matrix at most
// 2^22 elements), accumulated in float64 and cast back to the signal's dtype.
#include <cmath>
#include <numbers>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

constexpr std::int64_t kMaxTransformLength = 1 << 14;  // window sizes, DFT lengths
constexpr std::int64_t kMaxMatrixElements = std::int64_t(1) << 22;  // each matrix built at import

/// The `output_datatype` attribute (an ONNX element type; default float).
DType output_dtype(const onnx::NodeProto& n) {
    const int to = static_cast<int>(attr_int(n, "output_datatype", 1));
    const auto dtype = dtype_of_onnx(to);
    if (!dtype) unsupported("output_datatype " + onnx_type_name(to) + kSupportedOnnxDtypes);
    return *dtype;
}

/// Input k, an integer scalar read at import (scalar_int), named `what` of the node's op.
std::int64_t scalar_int_input(ImportContext& c, const onnx::NodeProto& n, int k, const string& what) {
    return scalar_int(c, n.input(k), n.op_type() + "'s " + what);
}

/// HannWindow, HammingWindow, BlackmanWindow (ONNX opset 17): a generalized cosine window
/// w[n] = a0 - a1 cos(2πn/N) + a2 cos(4πn/N), n in [0, size), N = size (periodic, the default) or
/// size - 1 (symmetric); coefficients Hann (0.5, 0.5, 0), Hamming (25/46, 21/46, 0), Blackman
/// (0.42, 0.5, 0.08), as the spec's function bodies.
Converter cosine_window(double a0, double a1, double a2) {
    return [a0, a1, a2](ImportContext& c, const onnx::NodeProto& n) {
        const std::int64_t size = scalar_int_input(c, n, 0, "size");
        if (size < 0 || size > kMaxTransformLength)
            unsupported("window size " + std::to_string(size) + " (0 to " + std::to_string(kMaxTransformLength) + ")");
        const bool periodic = attr_int(n, "periodic", 1) != 0;
        const double period = static_cast<double>(periodic ? size : size - 1);
        vector<double> w(static_cast<std::size_t>(size));
        for (std::int64_t k = 0; k < size; ++k) {
            const double angle = 2 * std::numbers::pi * static_cast<double>(k) / period;
            w[static_cast<std::size_t>(k)] = a0 - a1 * std::cos(angle) + a2 * std::cos(2 * angle);
        }
        c.define_constant(n.output(0), Tensor::from_values(output_dtype(n), {size}, w));
    };
}

/// MelWeightMatrix (ONNX opset 17): the [dft_length / 2 + 1, num_mel_bins] matrix of triangular
/// filters whose edges are num_mel_bins + 2 points equally spaced on the mel scale
/// (2595 log10(1 + f / 700)) between lower_edge_hertz and upper_edge_hertz, each mapped to the
/// spectrogram bin floor((dft_length + 1) f / sample_rate); as ONNX's reference and ONNX Runtime.
void convert_mel_weight_matrix(ImportContext& c, const onnx::NodeProto& n) {
    const std::int64_t bins = scalar_int_input(c, n, 0, "num_mel_bins");
    const std::int64_t dft_length = scalar_int_input(c, n, 1, "dft_length");
    const std::int64_t sample_rate = scalar_int_input(c, n, 2, "sample_rate");
    auto hertz = [&](int k, const string& what) {
        const Tensor& t = c.constant(n.input(k), "MelWeightMatrix's " + what);
        if (t.numel() != 1) unsupported(what + " must be a scalar");
        return t.at(0);
    };
    const double lower = hertz(3, "lower_edge_hertz"), upper = hertz(4, "upper_edge_hertz");
    if (!(lower >= 0 && lower < upper && std::isfinite(upper)))
        unsupported("MelWeightMatrix needs 0 <= lower_edge_hertz < upper_edge_hertz, both finite (got " +
                    std::to_string(lower) + ", " + std::to_string(upper) + ")");
    if (bins <= 0 || bins > kMaxTransformLength || dft_length <= 0 || dft_length > kMaxTransformLength || sample_rate <= 0)
        unsupported("MelWeightMatrix needs 0 < num_mel_bins, dft_length <= " + std::to_string(kMaxTransformLength) +
                    " and sample_rate > 0");
    const std::int64_t spectrogram_bins = dft_length / 2 + 1;
    if (spectrogram_bins * bins > kMaxMatrixElements) unsupported("MelWeightMatrix of over 2^22 elements");
    auto mel = [](double f) { return 2595 * std::log10(1 + f / 700); };
    const double low_mel = mel(lower), step = (mel(upper) - low_mel) / static_cast<double>(bins + 2);
    vector<std::int64_t> edge(static_cast<std::size_t>(bins + 2));
    for (std::int64_t k = 0; k < bins + 2; ++k) {
        const double f = 700 * (std::pow(10.0, (static_cast<double>(k) * step + low_mel) / 2595) - 1);
        const double bin = std::floor(static_cast<double>(dft_length + 1) * f / static_cast<double>(sample_rate));
        // Checked in double: a bin outside the spectrogram has no int64 to be cast to safely.
        if (!(bin >= 0 && bin < static_cast<double>(spectrogram_bins)))
            unsupported("a filter edge falls on spectrogram bin " + std::to_string(bin) + ", outside [0, " +
                        std::to_string(spectrogram_bins) + ") (upper_edge_hertz beyond sample_rate / 2?)");
        edge[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(bin);
    }
    vector<double> out(static_cast<std::size_t>(spectrogram_bins * bins), 0.0);
    auto put = [&](std::int64_t row, std::int64_t col, double v) {
        if (row < 0 || row >= spectrogram_bins)
            unsupported("a filter edge falls on spectrogram bin " + std::to_string(row) + ", outside [0, " +
                        std::to_string(spectrogram_bins) + ") (upper_edge_hertz beyond sample_rate / 2?)");
        out[static_cast<std::size_t>(row * bins + col)] = v;
    };
    for (std::int64_t i = 0; i < bins; ++i) {
        const std::int64_t left = edge[i], centre = edge[i + 1], right = edge[i + 2];
        if (centre == left) put(centre, i, 1);
        else
            for (std::int64_t j = left; j <= centre; ++j) put(j, i, double(j - left) / double(centre - left));
        for (std::int64_t j = centre; j < right; ++j) put(j, i, double(right - j) / double(right - centre));
    }
    c.define_constant(n.output(0), Tensor::from_values(output_dtype(n), {spectrogram_bins, bins}, out));
}

/// The [rows, cols] matrix cos (or sin) of 2π·r·k / length, float64.
Tensor twiddles(std::int64_t rows, std::int64_t cols, std::int64_t length, bool sine) {
    vector<double> v(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < cols; ++k) {
            // r·k mod length keeps the angle in [0, 2π), where cos and sin are most accurate.
            const double angle = 2 * std::numbers::pi * static_cast<double>((r * k) % length) / static_cast<double>(length);
            v[static_cast<std::size_t>(r * cols + k)] = sine ? std::sin(angle) : std::cos(angle);
        }
    return Tensor::from_values(DType::float64, {rows, cols}, v);
}

/// The DFT of `x` [..., N, ..., 1 or 2] (real, or complex as [re, im] in the last axis) along
/// `axis`, of length `length` (the signal truncated or zero-padded to it), keeping `out_bins`
/// frequencies: X[k] = Σ_n x[n] e^(∓2πi·kn/length), divided by `length` when `inverse` (numpy.fft's
/// fft / ifft). Returns [..., out_bins, ..., 2] in x's dtype; the last node is named `name`.
Id dft(ImportContext& c, const onnx::NodeProto& n, Id x, std::int64_t axis, std::int64_t length, std::int64_t out_bins,
       bool inverse, const string& name) {
    const Shape in = shape_of(c, x);
    const DType dtype = c.node_type(x).dtype;
    const auto rank = static_cast<std::int64_t>(in.size());
    if (rank < 2 || (in.back() != 1 && in.back() != 2)) unsupported("the signal's last axis must be 1 (real) or 2 (complex)");
    if (axis < 0 || axis >= rank - 1) unsupported("axis " + std::to_string(axis) + " is not a signal axis");
    if (length <= 0 || length > kMaxTransformLength || out_bins > kMaxTransformLength)
        unsupported("DFT length " + std::to_string(length) + " (1 to " + std::to_string(kMaxTransformLength) + ")");
    const bool complex = in.back() == 2;
    // Signal axis last, the re/im axis dropped: [..., N].
    vector<std::int64_t> perm;
    for (std::int64_t d = 0; d < rank - 1; ++d) if (d != axis) perm.push_back(d);
    perm.push_back(axis);
    auto part = [&](std::int64_t k) {
        Id p = c.add("slice", {x}, {{"starts", vector<std::int64_t>{k}}, {"ends", vector<std::int64_t>{k + 1}},
                                    {"axes", vector<std::int64_t>{rank - 1}}});
        Shape squeezed(in.begin(), in.end() - 1);
        p = c.add("reshape", {p}, {{"shape", squeezed}});
        p = c.add("permute", {p}, {{"dims", perm}});
        const std::int64_t used = std::min(in[axis], length);  // zero padding adds nothing to the sums
        if (used < in[axis]) p = slice_axis(c, p, rank - 2, 0, used);
        return c.add("cast", {p}, {{"to", string("float64")}});
    };
    const std::int64_t used = std::min(in[axis], length);
    if (used * out_bins > kMaxMatrixElements)
        unsupported("a DFT of " + std::to_string(used) + " samples to " + std::to_string(out_bins) +
                    " frequencies needs cosine and sine matrices of over 2^22 elements");
    const Id cosines = constant_input(c, n, "cos", twiddles(used, out_bins, length, false));
    const Id sines = constant_input(c, n, "sin", twiddles(used, out_bins, length, true));
    const Id re_in = part(0);
    // Forward: re = a·C + b·S, im = b·C - a·S; inverse: re = a·C - b·S, im = b·C + a·S.
    Id re = c.add("matmul", {re_in, cosines});
    Id im = c.add("neg", {c.add("matmul", {re_in, sines})});
    if (inverse) im = c.add("neg", {im});
    if (complex) {
        const Id im_in = part(1);
        const Id b_sin = c.add("matmul", {im_in, sines});
        re = c.add(inverse ? "sub" : "add", {re, b_sin});
        im = c.add("add", {im, c.add("matmul", {im_in, cosines})});
    }
    if (inverse) {
        const Id scale = scalar_constant(c, n, "inverse_length", DType::float64, 1.0 / static_cast<double>(length));
        re = c.add("mul", {re, scale});
        im = c.add("mul", {im, scale});
    }
    // Back to [..., out_bins, ..., 1] each, then [re, im] in the last axis.
    vector<std::int64_t> inverse_perm(perm.size());
    for (std::size_t k = 0; k < perm.size(); ++k) inverse_perm[static_cast<std::size_t>(perm[k])] = static_cast<std::int64_t>(k);
    Shape out = in;
    out[static_cast<std::size_t>(axis)] = out_bins;
    out.back() = 1;
    auto back = [&](Id v) {
        v = c.add("permute", {v}, {{"dims", inverse_perm}});
        v = c.add("reshape", {v}, {{"shape", out}});
        return c.add("cast", {v}, {{"to", string(to_string(dtype))}});
    };
    return c.add("concat", {back(re), back(im)}, {{"axis", rank - 1}}, name);
}

/// ONNX DFT (opset 17): axis (default 1), inverse, onesided (real input only: the first
/// length / 2 + 1 frequencies), and the optional dft_length input (a constant).
void convert_dft(ImportContext& c, const onnx::NodeProto& n) {
    const Id x = c.runtime(n.input(0));
    const Shape& in = shape_of(c, x);
    const auto rank = static_cast<std::int64_t>(in.size());
    std::int64_t axis = attr_int(n, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank - 1) unsupported("axis " + std::to_string(attr_int(n, "axis", 1)) + " for a rank-" +
                                                  std::to_string(rank) + " signal");
    const std::int64_t length = input_name(n, 1).empty() ? in[axis] : scalar_int_input(c, n, 1, "dft_length");
    const bool inverse = attr_int(n, "inverse", 0) != 0, onesided = attr_int(n, "onesided", 0) != 0;
    if (onesided && (inverse || in.back() != 1)) unsupported("onesided DFT of a complex signal or an inverse DFT");
    c.define_node(n.output(0), dft(c, n, x, axis, length, onesided ? length / 2 + 1 : length, inverse, n.output(0)));
}

/// ONNX STFT (opset 17): signal [batch, length, 1 or 2], frame_step (a constant), window [W]
/// (optional, applied to each frame), frame_length (optional constant; else W), onesided
/// (default 1, real signals). Frames start every frame_step samples: a constant-index gather
/// [batch, frames, frame_length, 1 or 2], then the DFT of each frame.
void convert_stft(ImportContext& c, const onnx::NodeProto& n) {
    const Id signal = c.runtime(n.input(0));
    const Shape in = shape_of(c, signal);
    if (in.size() != 3) unsupported("the signal must be [batch, length, 1 or 2]");
    const std::int64_t step = scalar_int_input(c, n, 1, "frame_step");
    const string window = input_name(n, 2);
    std::int64_t frame = input_name(n, 3).empty() ? -1 : scalar_int_input(c, n, 3, "frame_length");
    if (!window.empty()) {
        const Shape& w = c.type(window).shape;
        if (w.size() != 1 || (frame >= 0 && w[0] != frame)) unsupported("the window must be 1-D of frame_length");
        frame = w[0];
    }
    if (frame <= 0 || step <= 0 || frame > in[1] || frame > kMaxTransformLength)
        unsupported("STFT needs frame_length (or a window) in [1, min(signal length, " + std::to_string(kMaxTransformLength) +
                    ")] and frame_step > 0");
    const std::int64_t frames = (in[1] - frame) / step + 1;
    if (frames > (std::int64_t(1) << 26) / frame) unsupported("STFT of over 2^26 framed samples");
    vector<double> index(static_cast<std::size_t>(frames * frame));
    for (std::int64_t f = 0; f < frames; ++f)
        for (std::int64_t j = 0; j < frame; ++j) index[static_cast<std::size_t>(f * frame + j)] = static_cast<double>(f * step + j);
    Id framed = c.add("gather", {signal, constant_input(c, n, "frames", Tensor::from_values(DType::int64, {frames, frame}, index))},
                      {{"axis", std::int64_t{1}}});
    if (!window.empty())
        framed = c.add("mul", {framed, c.add("reshape", {c.runtime(window)}, {{"shape", Shape{1, 1, frame, 1}}})});
    const bool onesided = attr_int(n, "onesided", 1) != 0;
    if (onesided && in[2] != 1) unsupported("onesided STFT of a complex signal");
    c.define_node(n.output(0), dft(c, n, framed, 2, frame, onesided ? frame / 2 + 1 : frame, false, n.output(0)));
}

}  // namespace

void add_signal_converters(std::map<string, Converter>& table) {
    table["HannWindow"] = cosine_window(0.5, 0.5, 0);
    table["HammingWindow"] = cosine_window(25.0 / 46, 21.0 / 46, 0);
    table["BlackmanWindow"] = cosine_window(0.42, 0.5, 0.08);
    table["MelWeightMatrix"] = convert_mel_weight_matrix;
    table["DFT"] = convert_dft;
    table["STFT"] = convert_stft;
}

}  // namespace capsule::onnx_import
