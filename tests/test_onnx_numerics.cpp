// ONNX import numerics: decompositions that must not overflow or underflow where the ONNX
// definition has a finite answer (ReduceLogSumExp with the maximum shifted out, ReduceL2 scaled
// by the largest magnitude, SoftmaxCrossEntropyLoss on large logits), and constant folding that
// gives the bits running the same node gives (Cast int64 → float32 in one rounding, float32
// arithmetic in float, int64 overflow refused). Models are built with the onnx protobuf API;
// expected values are worked out by hand or in double here, never by the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <numbers>

#include <sys/wait.h>
#include <unistd.h>

#include <onnx/onnx_pb.h>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"
#include "onnx_builders.hpp"

using namespace capsule;
using capsule::testing::built_host;
using namespace capsule::testing::onnx_builders;
namespace fs = std::filesystem;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ImportedModel import(const onnx::ModelProto& m) { return import_onnx_bytes(m.SerializeAsString(), "test.onnx"); }

std::vector<Tensor> run(const ImportedModel& model, const std::map<std::string, Tensor>& values) {
    const auto& profile = find_builtin_profile("checked_cpu");
    auto accepted = profile.accept_graph(built_host(), model.graph);
    EXPECT_TRUE(accepted.accepted.has_value());
    ParameterMap params = model.parameters;
    auto inputs = bind_onnx_inputs(model, values, params);
    auto session = Session::create(profile, *accepted.accepted, model.graph, built_host(), params);
    return session.run(inputs);
}

/// x (dtype elem, shape dims) → op(x) with `setup` adding attributes → y.
onnx::ModelProto unary_model(const std::string& op, int elem, const std::vector<std::int64_t>& in_dims,
                             const std::vector<std::int64_t>& out_dims,
                             const std::function<void(onnx::NodeProto*)>& setup, std::int64_t opset = 13) {
    auto m = new_model(opset);
    set_type(m.mutable_graph()->add_input(), "x", elem, in_dims);
    set_type(m.mutable_graph()->add_output(), "y", elem, out_dims);
    setup(add_node(m, op, {"x"}, {"y"}));
    return m;
}

/// |got - want| <= rtol |want| element by element, with inf and NaN matched exactly.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
            EXPECT_TRUE(std::isnan(got[i])) << "element " << i << ": " << got[i];
        } else if (std::isinf(want[i])) {
            EXPECT_EQ(got[i], want[i]) << "element " << i;
        } else {
            EXPECT_LE(std::fabs(got[i] - want[i]), rtol * std::fabs(want[i]))
                << "element " << i << ": got " << got[i] << ", want " << want[i];
        }
    }
}

}  // namespace

// ---- ReduceLogSumExp ----

TEST(OnnxNumerics, ReduceLogSumExpShiftsTheMaximumOut) {
    // log(e^100 + e^0) = 100 + log1p(e^-100) = 100 in float32; likewise 200. exp(200) is inf in
    // float32 (and exp(100) above 3.4e38), so log Σ exp without the shift gives [inf, inf].
    auto model = import(unary_model("ReduceLogSumExp", onnx::TensorProto::FLOAT, {2, 2}, {2}, [](auto* n) {
        add_ints_attr(n, "axes", {1});
        add_int_attr(n, "keepdims", 0);
    }));
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {2, 2}, {100, 0, 200, 0})}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{2}));
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{100, 200}));
}

TEST(OnnxNumerics, ReduceLogSumExpOfVeryNegativeRowsAndNonFiniteValues) {
    // Rows: [-1000, -1000] → -1000 + log 2 (e^-1000 underflows to 0, log 0 = -inf without the
    // shift); [-inf, -inf] → log 0 = -inf; [inf, 0] → inf; [nan, 0] → nan; [1, 2] →
    // 2 + log1p(e^-1) (the ordinary case). keepdims = 1 keeps the axis.
    auto model = import(unary_model("ReduceLogSumExp", onnx::TensorProto::FLOAT, {5, 2}, {5, 1}, [](auto* n) {
        add_ints_attr(n, "axes", {-1});
    }));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {5, 2},
                                                      {-1000, -1000, -kInf, -kInf, kInf, 0, nan, 0, 1, 2})}});
    EXPECT_EQ(out[0].shape(), (Shape{5, 1}));
    expect_close(out[0].to_doubles(),
                 {-1000 + std::numbers::ln2, -kInf, kInf, nan, 2 + std::log1p(std::exp(-1.0))}, 1e-7);
}

TEST(OnnxNumerics, ReduceLogSumExpOverEveryAxisInFloat64) {
    // Σ over all of [[1000, 999], [998, 0]]: 1000 + log(1 + e^-1 + e^-2 + e^-1000), in double.
    auto model = import(unary_model("ReduceLogSumExp", onnx::TensorProto::DOUBLE, {2, 2}, {}, [](auto* n) {
        add_int_attr(n, "keepdims", 0);
    }));
    auto out = run(model, {{"x", Tensor::from_values(DType::float64, {2, 2}, {1000, 999, 998, 0})}});
    EXPECT_EQ(out[0].shape(), (Shape{}));
    expect_close(out[0].to_doubles(), {1000 + std::log1p(std::exp(-1.0) + std::exp(-2.0))}, 1e-15);
}

TEST(OnnxNumerics, CapsuleRunGivesTheShiftedReduceLogSumExp) {
    // The case as a user meets it: `capsule run` on a model file, output read back from .npy.
    const auto dir = fs::temp_directory_path() / ("capsule-numerics-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto m = unary_model("ReduceLogSumExp", onnx::TensorProto::FLOAT, {2, 2}, {2}, [](auto* n) {
        add_ints_attr(n, "axes", {1});
        add_int_attr(n, "keepdims", 0);
    });
    {
        std::ofstream f(dir / "lse.onnx", std::ios::binary);
        ASSERT_TRUE(m.SerializeToOstream(&f));
    }
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {2, 2}, {100, 0, 200, 0}));
    const std::string cmd = std::string(CAPSULE_TOOL) + " run --profile checked_cpu " + (dir / "lse.onnx").string() +
                            " --input x=" + (dir / "x.npy").string() + " --output-dir " + (dir / "out").string() +
                            " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string text;
    char buffer[4096];
    while (std::size_t k = fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, k);
    const int status = pclose(pipe);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir / "out")) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u) << text;
    EXPECT_EQ(read_npy(files[0]).to_doubles(), (std::vector<double>{100, 200})) << text;
    fs::remove_all(dir);
}

// ---- ReduceL2 ----

TEST(OnnxNumerics, ReduceL2NeitherOverflowsNorUnderflows) {
    // Rows: 3-4-5 triangles scaled by 1e20 (x² = 9e40 overflows float32) and 1e-30 (x² = 9e-60
    // underflows to 0); zeros → 0; [inf, 1] → inf; [nan, 1] → nan; [1, 2] → √5.
    auto model = import(unary_model("ReduceL2", onnx::TensorProto::FLOAT, {6, 2}, {6}, [](auto* n) {
        add_ints_attr(n, "axes", {1});
        add_int_attr(n, "keepdims", 0);
    }));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto out = run(model, {{"x", Tensor::from_values(DType::float32, {6, 2},
                                                      {3e20, -4e20, 3e-30, 4e-30, 0, 0, kInf, 1, nan, 1, 1, 2})}});
    expect_close(out[0].to_doubles(), {5e20, 5e-30, 0, kInf, nan, std::sqrt(5.0)}, 5e-7);
}

// ---- SoftmaxCrossEntropyLoss / LogSoftmax ----

TEST(OnnxNumerics, SoftmaxCrossEntropyWithLogitsOf1000) {
    // loss_i = logsumexp(x_i) - x_i[t_i]; logits [1000, 0, -1000]: logsumexp = 1000, so the
    // losses for targets 0 and 1 are 0 and 1000; mean 500. exp(1000) overflows every float.
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
    set_type(m.mutable_graph()->add_input(), "t", onnx::TensorProto::INT64, {2});
    set_type(m.mutable_graph()->add_output(), "loss", onnx::TensorProto::FLOAT, {});
    set_type(m.mutable_graph()->add_output(), "log_prob", onnx::TensorProto::FLOAT, {2, 3});
    add_node(m, "SoftmaxCrossEntropyLoss", {"x", "t"}, {"loss", "log_prob"});
    auto out = run(import(m), {{"x", Tensor::from_values(DType::float32, {2, 3}, {1000, 0, -1000, 1000, 0, -1000})},
                               {"t", Tensor::from_values(DType::int64, {2}, {0, 1})}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{500}));
    EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{0, -1000, -2000, 0, -1000, -2000}));
}

// ---- constant folding gives the bits running gives ----

namespace {

/// Values of `x` cast to `to` twice: Cast of a Constant (folded at import) and Cast of a graph
/// input (the cast kernel at run time).
std::pair<Tensor, Tensor> folded_and_run_cast(const Tensor& x, int to) {
    auto folded = new_model(13);
    set_type(folded.mutable_graph()->add_output(), "y", to, x.shape());
    add_constant(folded, "c", x);
    add_int_attr(add_node(folded, "Cast", {"c"}, {"y"}), "to", to);
    auto folded_model = import(folded);
    EXPECT_TRUE(std::none_of(folded_model.graph.nodes.begin(), folded_model.graph.nodes.end(),
                             [](const Node& n) { return n.kind == NodeKind::op && n.op == BackendOp::cast; }))
        << "the Cast of a constant should have been folded";
    auto ran = new_model(13);
    const int from = x.dtype() == DType::int64 ? onnx::TensorProto::INT64
                     : x.dtype() == DType::float64 ? onnx::TensorProto::DOUBLE
                                                   : onnx::TensorProto::FLOAT;
    set_type(ran.mutable_graph()->add_input(), "x", from, x.shape());
    set_type(ran.mutable_graph()->add_output(), "y", to, x.shape());
    add_int_attr(add_node(ran, "Cast", {"x"}, {"y"}), "to", to);
    return {run(folded_model, {}).at(0), run(import(ran), {{"x", x}}).at(0)};
}

std::vector<std::uint32_t> float_bits(const Tensor& t) {
    std::vector<std::uint32_t> out;
    for (float v : t.values<float>()) out.push_back(std::bit_cast<std::uint32_t>(v));
    return out;
}

Tensor int64_tensor(const std::vector<std::int64_t>& v) {
    Tensor t = Tensor::zeros(DType::int64, {static_cast<std::int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.values<std::int64_t>().begin());
    return t;
}

}  // namespace

TEST(OnnxNumerics, FoldedInt64ToFloat32CastHasTheKernelsBits) {
    // Round to nearest, once: 2^60 + 2^36 + 1 lies just above the midpoint 2^60 + 2^36 between
    // the float32 neighbours 2^60 and 2^60 + 2^37, so it rounds up; through double it first
    // rounds to 2^60 + 2^36 (the tie), which then rounds to even, 2^60. 2^53 + 1 (float32 2^53
    // either way), negatives mirror, and the int64 extremes round to ∓2^63.
    const std::int64_t p60 = std::int64_t(1) << 60, p36 = std::int64_t(1) << 36, p53 = std::int64_t(1) << 53;
    const auto x = int64_tensor({p60 + p36 + 1, -(p60 + p36 + 1), p53 + 1, -(p53 + 1), p60 + p36, 3,
                                 std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()});
    const auto [folded, ran] = folded_and_run_cast(x, onnx::TensorProto::FLOAT);
    EXPECT_EQ(float_bits(folded), float_bits(ran));
    const double f60 = std::ldexp(1.0, 60), f37 = std::ldexp(1.0, 37), f53 = std::ldexp(1.0, 53), f63 = std::ldexp(1.0, 63);
    EXPECT_EQ(folded.to_doubles(), (std::vector<double>{f60 + f37, -(f60 + f37), f53, -f53, f60, 3, f63, -f63}));
}

TEST(OnnxNumerics, FoldedFloat64ToFloat32CastRoundsTiesAsTheKernel) {
    // 1 + 2^-24 is the midpoint of 1 and 1 + 2^-23: ties go to even (1). 1 + 3·2^-24 is the
    // midpoint of 1 + 2^-23 and 1 + 2^-22: even is 1 + 2^-22. 1 + 2^-24 + 2^-52 is above the
    // midpoint: 1 + 2^-23. 1e39 overflows to inf; -0.0 stays -0.
    const double u = std::ldexp(1.0, -24);
    const auto x = Tensor::from_values(DType::float64, {5}, {1 + u, 1 + 3 * u, 1 + u + std::ldexp(1.0, -52), 1e39, -0.0});
    const auto [folded, ran] = folded_and_run_cast(x, onnx::TensorProto::FLOAT);
    EXPECT_EQ(float_bits(folded), float_bits(ran));
    EXPECT_EQ(folded.to_doubles(), (std::vector<double>{1, 1 + 4 * u, 1 + 2 * u, kInf, 0}));
    EXPECT_TRUE(std::signbit(folded.values<float>()[4]));
}

TEST(OnnxNumerics, FoldedFloatToInt64CastTruncatesAndRefusesWhatTheKernelRefuses) {
    const auto x = Tensor::from_values(DType::float64, {4}, {-2.75, 2.75, 9007199254740993.0, -9.2233720368547758e18});
    const auto [folded, ran] = folded_and_run_cast(x, onnx::TensorProto::INT64);
    EXPECT_EQ(folded.to_doubles(), ran.to_doubles());
    EXPECT_EQ(folded.values<std::int64_t>()[0], -2);
    EXPECT_EQ(folded.values<std::int64_t>()[3], std::numeric_limits<std::int64_t>::min());
    // 2^63 has no int64 value: the kernel refuses it, and so does folding (not undefined behaviour).
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::INT64, {1});
    add_constant(m, "c", Tensor::from_values(DType::float64, {1}, {9.2233720368547758e18}));
    add_int_attr(add_node(m, "Cast", {"c"}, {"y"}), "to", onnx::TensorProto::INT64);
    try {
        import(m);
        FAIL() << "expected the Cast to be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find("has no int64 value"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("Cast"), std::string::npos) << e.what();
    }
}

TEST(OnnxNumerics, FoldedFloat32ArithmeticMatchesTheKernels) {
    // (a + b) * c - a / c in float32, folded (all constants) and run (graph inputs): the same bits.
    // Values chosen so that float and double results differ: 16777216 + 1 rounds in float.
    const auto a = Tensor::from_values(DType::float32, {3}, {16777216, 0.1, 3e38});
    const auto b = Tensor::from_values(DType::float32, {3}, {1, 0.2, 3e38});
    const auto c = Tensor::from_values(DType::float32, {3}, {3, 7, 2});
    auto build = [](onnx::ModelProto& m) {
        add_node(m, "Add", {"a", "b"}, {"s"});
        add_node(m, "Mul", {"s", "c"}, {"p"});
        add_node(m, "Div", {"a", "c"}, {"q"});
        add_node(m, "Sub", {"p", "q"}, {"y"});
        set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {3});
    };
    auto folded = new_model(13);
    add_constant(folded, "a", a);
    add_constant(folded, "b", b);
    add_constant(folded, "c", c);
    build(folded);
    auto ran = new_model(13);
    for (auto name : {"a", "b", "c"}) set_type(ran.mutable_graph()->add_input(), name, onnx::TensorProto::FLOAT, {3});
    build(ran);
    auto f = run(import(folded), {}).at(0);
    auto r = run(import(ran), {{"a", a}, {"b", b}, {"c", c}}).at(0);
    EXPECT_EQ(float_bits(f), float_bits(r));
    // Hand: (2^24 + 1 → 2^24) · 3 - 2^24/3, evaluated in float.
    const float want0 = (16777216.0f + 1.0f) * 3.0f - 16777216.0f / 3.0f;
    EXPECT_EQ(f.values<float>()[0], want0);
    EXPECT_EQ(f.values<float>()[2], std::numeric_limits<float>::infinity());
}

TEST(OnnxNumerics, FoldedInt64OverflowIsRefused) {
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::INT64, {1});
    add_constant(m, "a", int64_tensor({std::numeric_limits<std::int64_t>::max()}));
    add_constant(m, "b", int64_tensor({1}));
    add_node(m, "Add", {"a", "b"}, {"y"});
    try {
        import(m);
        FAIL() << "expected an overflow error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find("int64 overflow in a constant: 9223372036854775807 + 1"), std::string::npos)
            << e.what();
    }
}

TEST(OnnxNumerics, FoldedFloat32RangeIsComputedInFloat) {
    // ONNX Range in float32: n = ceil((1 - 0) / 0.1f) = ceil(9.99999985) = 10 and
    // output[k] = 0 + k · 0.1f, each product rounded to float.
    auto m = new_model(13);
    set_type(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {10});
    add_constant(m, "start", Tensor::from_values(DType::float32, {}, {0}));
    add_constant(m, "limit", Tensor::from_values(DType::float32, {}, {1}));
    add_constant(m, "delta", Tensor::from_values(DType::float32, {}, {0.1}));
    add_node(m, "Range", {"start", "limit", "delta"}, {"y"});
    auto y = run(import(m), {}).at(0);
    ASSERT_EQ(y.shape(), (Shape{10}));
    for (int k = 0; k < 10; ++k) EXPECT_EQ(y.values<float>()[k], 0.0f + float(k) * 0.1f) << k;
}
