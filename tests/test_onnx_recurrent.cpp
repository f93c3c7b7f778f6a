// ONNX RNN / GRU / LSTM imported by unrolling (core/src/onnx/recurrent.cpp), compared with a
// direct evaluation of the ONNX spec's equations in double: both directions, peepholes, initial
// states, clip, linear_before_reset, custom activations with alpha / beta, batch-first layout,
// weights as graph inputs, every output; and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "onnx_test_models.hpp"

using namespace capsule;
using namespace capsule_test::onnx_models;

namespace {

using Fn = std::function<double(double)>;
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Recurrent {
    std::string op = "LSTM";
    std::int64_t S = 3, B = 2, I = 3, H = 2, D = 1;
    bool reverse = false, batch_first = false, lbr = false;
    bool with_bias = true, with_h0 = false, with_c0 = false, with_p = false, weights_as_inputs = false;
    double clip = 0;  // 0: none (written as given otherwise, also when invalid)
    std::vector<std::int64_t> sequence_lens;  // as an int64 initializer when not empty
    std::vector<std::string> activations;  // empty: the defaults
    std::vector<float> alphas, betas;
    std::vector<Fn> fns;  // the same activations, for the reference: per direction f (, g (, h))

    std::int64_t G() const { return op == "RNN" ? 1 : op == "GRU" ? 3 : 4; }
    Shape x_shape() const { return batch_first ? Shape{B, S, I} : Shape{S, B, I}; }
    Shape state_shape() const { return batch_first ? Shape{B, D, H} : Shape{D, B, H}; }
    Shape y_shape() const { return batch_first ? Shape{B, S, D, H} : Shape{S, D, B, H}; }

    std::map<std::string, std::vector<double>> data() const {
        auto fill = [](std::size_t n, double scale, double phase) {
            std::vector<double> v(n);
            for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(phase + 0.73 * double(i)));
            return v;
        };
        return {{"X", fill(std::size_t(S * B * I), 1.5, 0.1)},
                {"W", fill(std::size_t(D * G() * H * I), 0.9, 0.7)},
                {"R", fill(std::size_t(D * G() * H * H), 0.8, 1.3)},
                {"B", fill(std::size_t(D * 2 * G() * H), 0.5, 2.1)},
                {"initial_h", fill(std::size_t(D * B * H), 0.6, 0.4)},
                {"initial_c", fill(std::size_t(D * B * H), 0.7, 0.9)},
                {"P", fill(std::size_t(D * 3 * H), 0.6, 1.7)}};
    }

    onnx::ModelProto proto(const std::vector<std::string>& outputs) const {
        auto m = model(14);
        auto* g = m.mutable_graph();
        const auto values = data();
        typed(g->add_input(), "X", x_shape());
        std::vector<std::string> inputs{"X"};
        auto tensor = [&](const std::string& name, const Shape& dims, bool as_input) {
            if (as_input) typed(g->add_input(), name, dims);
            else float_initializer(g, name, dims, values.at(name));
            inputs.push_back(name);
        };
        tensor("W", {D, G() * H, I}, weights_as_inputs);
        tensor("R", {D, G() * H, H}, weights_as_inputs);
        if (with_bias) tensor("B", {D, 2 * G() * H}, weights_as_inputs); else inputs.push_back("");
        if (!sequence_lens.empty()) int64_initializer(g, "sequence_lens", {static_cast<std::int64_t>(sequence_lens.size())}, sequence_lens);
        inputs.push_back(sequence_lens.empty() ? "" : "sequence_lens");
        if (with_h0) tensor("initial_h", state_shape(), true); else inputs.push_back("");
        if (op == "LSTM") {
            if (with_c0) tensor("initial_c", state_shape(), true); else inputs.push_back("");
            if (with_p) tensor("P", {D, 3 * H}, false);
        }
        for (const auto& o : outputs)
            if (!o.empty()) typed(g->add_output(), o, o == "Y" ? y_shape() : state_shape());
        auto* n = node(g, op, inputs, outputs);
        set_int(n, "hidden_size", H);
        set_string(n, "direction", D == 2 ? "bidirectional" : reverse ? "reverse" : "forward");
        if (batch_first) set_int(n, "layout", 1);
        if (lbr) set_int(n, "linear_before_reset", 1);
        if (clip != 0) set_float(n, "clip", static_cast<float>(clip));
        if (!activations.empty()) set_strings(n, "activations", activations);
        if (!alphas.empty()) set_floats(n, "activation_alpha", alphas);
        if (!betas.empty()) set_floats(n, "activation_beta", betas);
        return m;
    }

    /// The ONNX spec's equations, step by step in double. Returns Y [S, D, B, H] (time-major),
    /// Y_h and Y_c [D, B, H].
    std::array<std::vector<double>, 3> reference() const {
        const auto v = data();
        auto at3 = [](const std::vector<double>& t, std::int64_t d1, std::int64_t d2, std::int64_t a, std::int64_t b, std::int64_t c) {
            return t[static_cast<std::size_t>((a * d1 + b) * d2 + c)];
        };
        auto x_at = [&](std::int64_t t, std::int64_t b, std::int64_t i) {
            return batch_first ? at3(v.at("X"), S, I, b, t, i) : at3(v.at("X"), B, I, t, b, i);
        };
        auto state_at = [&](const std::string& name, std::int64_t d, std::int64_t b, std::int64_t k) {
            return batch_first ? at3(v.at(name), D, H, b, d, k) : at3(v.at(name), B, H, d, b, k);
        };
        const auto cl = [&](double x) { return clip != 0 ? std::max(-clip, std::min(clip, x)) : x; };
        std::vector<double> Y(static_cast<std::size_t>(S * D * B * H)), Yh(static_cast<std::size_t>(D * B * H)), Yc(static_cast<std::size_t>(D * B * H));
        const std::size_t per = fns.size() / std::size_t(D);
        for (std::int64_t d = 0; d < D; ++d) {
            const Fn* f = &fns[std::size_t(d) * per];
            const bool back = reverse || d == 1;
            for (std::int64_t b = 0; b < B; ++b) {
                std::vector<double> h(static_cast<std::size_t>(H)), c(static_cast<std::size_t>(H));
                for (std::int64_t k = 0; k < H; ++k) {
                    h[k] = with_h0 ? state_at("initial_h", d, b, k) : 0;
                    c[k] = with_c0 ? state_at("initial_c", d, b, k) : 0;
                }
                for (std::int64_t step = 0; step < S; ++step) {
                    const std::int64_t t = back ? S - 1 - step : step;
                    // xw[g·H + k] = Σ_i x·W + Wb ; hr[g·H + k] = Σ_j h·R + Rb (per gate row)
                    auto xw = [&](std::int64_t row) {
                        double s = with_bias ? v.at("B")[std::size_t(d * 2 * G() * H + row)] : 0;
                        for (std::int64_t i = 0; i < I; ++i) s += x_at(t, b, i) * at3(v.at("W"), G() * H, I, d, row, i);
                        return s;
                    };
                    auto hr = [&](std::int64_t row, const std::vector<double>& hv) {
                        double s = with_bias ? v.at("B")[std::size_t(d * 2 * G() * H + G() * H + row)] : 0;
                        for (std::int64_t j = 0; j < H; ++j) s += hv[std::size_t(j)] * at3(v.at("R"), G() * H, H, d, row, j);
                        return s;
                    };
                    std::vector<double> nh(static_cast<std::size_t>(H)), nc(static_cast<std::size_t>(H));
                    for (std::int64_t k = 0; k < H; ++k) {
                        if (op == "RNN") {
                            nh[k] = f[0](cl(xw(k) + hr(k, h)));
                        } else if (op == "GRU") {
                            const double z = f[0](cl(xw(k) + hr(k, h)));
                            const double r = f[0](cl(xw(H + k) + hr(H + k, h)));
                            double cand;
                            if (lbr) {
                                cand = f[1](cl(xw(2 * H + k) + r * hr(2 * H + k, h)));
                            } else {
                                std::vector<double> rh(static_cast<std::size_t>(H));
                                for (std::int64_t j = 0; j < H; ++j)
                                    rh[j] = f[0](cl(xw(H + j) + hr(H + j, h))) * h[j];
                                cand = f[1](cl(xw(2 * H + k) + hr(2 * H + k, rh)));
                            }
                            nh[k] = (1 - z) * cand + z * h[k];
                        } else {
                            auto p = [&](int which) { return with_p ? v.at("P")[std::size_t(d * 3 * H + which * H + k)] : 0.0; };
                            const double i = f[0](cl(xw(k) + hr(k, h) + p(0) * c[k]));
                            const double fg = f[0](cl(xw(2 * H + k) + hr(2 * H + k, h) + p(2) * c[k]));
                            const double cand = f[1](cl(xw(3 * H + k) + hr(3 * H + k, h)));
                            nc[k] = fg * c[k] + i * cand;
                            const double o = f[0](cl(xw(H + k) + hr(H + k, h) + p(1) * nc[k]));
                            nh[k] = o * f[2](nc[k]);
                        }
                    }
                    h = nh;
                    if (op == "LSTM") c = nc;
                    for (std::int64_t k = 0; k < H; ++k) Y[std::size_t(((t * D + d) * B + b) * H + k)] = h[k];
                }
                for (std::int64_t k = 0; k < H; ++k) {
                    Yh[std::size_t((d * B + b) * H + k)] = h[k];
                    Yc[std::size_t((d * B + b) * H + k)] = c[k];
                }
            }
        }
        return {Y, Yh, Yc};
    }
};

/// Runs the model under `profile_name` with the inputs it declares, outputs in `outputs` order.
std::vector<Tensor> run(const Recurrent& r, const std::vector<std::string>& outputs, const std::string& profile_name = "checked_cpu") {
    const auto values = r.data();
    std::map<std::string, Tensor> given{{"X", Tensor::from_values(DType::float32, r.x_shape(), values.at("X"))}};
    const std::int64_t G = r.G();
    if (r.weights_as_inputs) {
        given.emplace("W", Tensor::from_values(DType::float32, {r.D, G * r.H, r.I}, values.at("W")));
        given.emplace("R", Tensor::from_values(DType::float32, {r.D, G * r.H, r.H}, values.at("R")));
        if (r.with_bias) given.emplace("B", Tensor::from_values(DType::float32, {r.D, 2 * G * r.H}, values.at("B")));
    }
    if (r.with_h0) given.emplace("initial_h", Tensor::from_values(DType::float32, r.state_shape(), values.at("initial_h")));
    if (r.with_c0) given.emplace("initial_c", Tensor::from_values(DType::float32, r.state_shape(), values.at("initial_c")));
    return capsule_test::onnx_models::run(r.proto(outputs), given, profile_name);
}

/// Y in the test's time-major order [S, D, B, H], whatever the layout.
std::vector<double> time_major(const Recurrent& r, const Tensor& y) {
    if (!r.batch_first) return y.to_doubles();
    const auto v = y.to_doubles();
    std::vector<double> out(v.size());
    for (std::int64_t b = 0; b < r.B; ++b)
        for (std::int64_t t = 0; t < r.S; ++t)
            for (std::int64_t d = 0; d < r.D; ++d)
                for (std::int64_t k = 0; k < r.H; ++k)
                    out[std::size_t(((t * r.D + d) * r.B + b) * r.H + k)] = v[std::size_t(((b * r.S + t) * r.D + d) * r.H + k)];
    return out;
}
std::vector<double> state_major(const Recurrent& r, const Tensor& s) {
    if (!r.batch_first) return s.to_doubles();
    const auto v = s.to_doubles();
    std::vector<double> out(v.size());
    for (std::int64_t b = 0; b < r.B; ++b)
        for (std::int64_t d = 0; d < r.D; ++d)
            for (std::int64_t k = 0; k < r.H; ++k) out[std::size_t((d * r.B + b) * r.H + k)] = v[std::size_t((b * r.D + d) * r.H + k)];
    return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& expected) {
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-5 * (1 + std::abs(expected[i]))) << i;
}

const Fn kTanh = [](double x) { return std::tanh(x); };
const Fn kSigmoid = sigmoid;

}  // namespace

TEST(OnnxRecurrent, BidirectionalLstmWithPeepholesStatesAndClipMatchesTheSpec) {
    Recurrent r;
    r.D = 2;
    r.with_h0 = r.with_c0 = r.with_p = true;
    r.clip = 0.3;  // the cell state exceeds it: h(Ct) must not be clipped (ONNX Runtime)
    r.fns = {kSigmoid, kTanh, kTanh, kSigmoid, kTanh, kTanh};
    const auto got = run(r, {"Y", "Y_h", "Y_c"});
    ASSERT_EQ(got.size(), 3u);
    const auto expected = r.reference();
    EXPECT_EQ(got[0].shape(), r.y_shape());
    expect_near(got[0].to_doubles(), expected[0]);
    expect_near(got[1].to_doubles(), expected[1]);
    expect_near(got[2].to_doubles(), expected[2]);
}

TEST(OnnxRecurrent, ReverseGruWithLinearBeforeResetMatchesTheSpec) {
    Recurrent r;
    r.op = "GRU";
    r.reverse = true;
    r.lbr = true;
    r.with_h0 = true;
    r.S = 4;
    r.fns = {kSigmoid, kTanh};
    const auto got = run(r, {"Y", "Y_h"});
    ASSERT_EQ(got.size(), 2u);
    const auto expected = r.reference();
    expect_near(got[0].to_doubles(), expected[0]);
    expect_near(got[1].to_doubles(), expected[1]);
}

TEST(OnnxRecurrent, GruWithCustomActivationsAndWeightsAsInputsMatchesTheSpec) {
    // HardSigmoid takes alpha 0.3 and beta 0.4; Softsign takes none.
    Recurrent r;
    r.op = "GRU";
    r.weights_as_inputs = true;
    r.activations = {"HardSigmoid", "Softsign"};
    r.alphas = {0.3f};
    r.betas = {0.4f};
    r.fns = {[](double x) { return std::max(0.0, std::min(1.0, 0.3f * x + 0.4f)); }, [](double x) { return x / (1 + std::abs(x)); }};
    const auto got = run(r, {"", "Y_h"});
    ASSERT_EQ(got.size(), 1u);
    expect_near(got[0].to_doubles(), r.reference()[1]);
}

TEST(OnnxRecurrent, BatchFirstBidirectionalRnnWithReluMatchesTheSpec) {
    Recurrent r;
    r.op = "RNN";
    r.D = 2;
    r.batch_first = true;
    r.with_h0 = true;
    r.B = 3;
    r.activations = {"Relu", "LeakyRelu"};
    r.alphas = {0.2f};
    r.fns = {[](double x) { return std::max(0.0, x); }, [](double x) { return x >= 0 ? x : 0.2f * x; }};
    const auto got = run(r, {"Y", "Y_h"});
    ASSERT_EQ(got.size(), 2u);
    const auto expected = r.reference();
    EXPECT_EQ(got[0].shape(), r.y_shape());
    expect_near(time_major(r, got[0]), expected[0]);
    expect_near(state_major(r, got[1]), expected[1]);
}

TEST(OnnxRecurrent, SequenceLengthsOfTheFullLengthAreAccepted) {
    Recurrent r;
    r.op = "RNN";
    r.sequence_lens = {3, 3};
    r.fns = {kTanh};
    expect_near(run(r, {"Y"}).at(0).to_doubles(), r.reference()[0]);
}

// The per-step outputs are one concat of S inputs, which the oneDNN plugin's compiled groups
// once limited to 8 (the gate accepted the plan, then the session failed).
TEST(OnnxRecurrent, NineStepBidirectionalRnnRunsUnderOnednn) {
    Recurrent r;
    r.op = "RNN";
    r.D = 2;
    r.S = 9;
    r.fns = {kTanh, kTanh};
    const auto got = run(r, {"Y", "Y_h"}, "onednn_cpu");
    ASSERT_EQ(got.size(), 2u);
    expect_near(got[0].to_doubles(), r.reference()[0]);
}

TEST(OnnxRecurrent, RefusalsNameTheirCause) {
    auto refused = [](const Recurrent& r, const std::string& reason) { expect_refused(r.proto({"Y"}), reason); };
    Recurrent unknown;
    unknown.activations = {"Sigmoid", "Gelu", "Tanh"};
    refused(unknown, "activation 'Gelu'");
    Recurrent count;
    count.activations = {"Sigmoid", "Tanh"};
    refused(count, "activations lists 2 functions, expected 3");
    Recurrent long_sequence;
    long_sequence.S = 5000;
    long_sequence.I = 1;
    long_sequence.B = 1;
    refused(long_sequence, "more than 4096 time steps to unroll");
    Recurrent short_lens;
    short_lens.sequence_lens = {3, 2};
    refused(short_lens, "sequence_lens other than the full length 3 (got 2)");
    Recurrent lens_count;
    lens_count.sequence_lens = {3, 3, 3};
    refused(lens_count, "sequence_lens has 3 entries for a batch of 2");
    Recurrent clip;
    clip.clip = -1;
    refused(clip, "clip must be positive");
}
