// Inputs on which the fuzzers (tests/fuzz) found faults, kept in the seed corpus as
// tests/fuzz/corpus/<target>/regression-*: each must now be refused with a capsule::Error (or
// accepted), never crash, trip a sanitizer or throw another exception type. The asan preset runs
// these under AddressSanitizer + UBSan, as the fuzzers do.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <typeinfo>

#include <nlohmann/json.hpp>

#include "capsule/fashion_mnist.hpp"
#include "capsule/manifest.hpp"
#include "capsule/onnx_import.hpp"
#include "capsule/profile.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> regressions(const std::string& target) {
    std::vector<fs::path> out;
    const auto dir = fs::path(CAPSULE_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / target;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().filename().string().rfind("regression-", 0) == 0) out.push_back(entry.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// Runs `parse` on every regression input of `target`; only capsule::Error may escape.
template <typename F>
void expect_errors_only(const std::string& target, F parse) {
    for (const auto& path : regressions(target)) {
        SCOPED_TRACE(path.filename().string());
        try {
            parse(path);
        } catch (const Error& e) {
            EXPECT_STRNE(e.what(), "");
        } catch (const std::exception& e) {
            ADD_FAILURE() << typeid(e).name() << ": " << e.what();
        }
    }
}

const PluginHost& host() {
    static const PluginHost h = capsule::testing::shipped_host();
    return h;
}

}  // namespace

TEST(FuzzRegressions, Graphs) {
    expect_errors_only("graph", [](const fs::path& path) {
        auto graph = parse_graph(read_bytes(path), path);
        parse_graph(graph_to_json(graph));
        check_graph(graph);
        find_builtin_profile("checked_cpu").accept_graph(host(), graph);
    });
}

TEST(FuzzRegressions, OnnxModels) {
    expect_errors_only("onnx", [](const fs::path& path) {
        auto model = import_onnx_bytes(read_bytes(path), path);
        find_builtin_profile("checked_cpu").accept_graph(host(), model.graph);
    });
}

TEST(FuzzRegressions, TensorFiles) {
    expect_errors_only("npy", [](const fs::path& path) { read_npy(path); });
    expect_errors_only("safetensors", [](const fs::path& path) { read_safetensors(path); });
    expect_errors_only("idx", [](const fs::path& path) { read_idx(path); });
}

TEST(FuzzRegressions, ManifestsAndProfiles) {
    expect_errors_only("manifest", [](const fs::path& path) {
        auto manifest = parse_manifest(read_bytes(path), path);
        parse_manifest(manifest_to_json(manifest).dump(), path);
    });
    expect_errors_only("profile", [](const fs::path& path) {
        auto profile = profile_from_json(read_bytes(path), path);
        EXPECT_EQ(profile_from_json(profile_to_json(profile).dump(), path), profile);
    });
}

// A Reshape whose constant target shape multiplies past 2^63 (signed overflow in the importer).
TEST(FuzzRegressions, OnnxReshapeTargetShapeOverflowIsRefused) {
    const auto path =
        fs::path(CAPSULE_SOURCE_DIR) / "tests/fuzz/corpus/onnx/regression-reshape-shape-overflow.onnx";
    auto msg = capsule::testing::error_of([&] { import_onnx(path); });
    EXPECT_NE(msg.find("Reshape"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2^63-1"), std::string::npos) << msg;
}

// libonnx's shape inference dereferences null on these models. A ConvTranspose whose graph output
// reuses an input's name reaches it (it runs in a child process: the model is refused, the host
// lives); a LayerNormalization with axis -3 on a rank-2 input that declares the Mean and
// InvStdDev outputs is refused before libonnx sees it, by the attribute guard.
TEST(FuzzRegressions, LibonnxCrashesRefuseTheModel) {
    const fs::path dir = fs::path(CAPSULE_SOURCE_DIR) / "tests/fuzz/corpus/onnx";
    auto crash = capsule::testing::error_of([&] { import_onnx(dir / "regression-convtranspose-libonnx-segv.onnx"); });
    EXPECT_NE(crash.find("libonnx's shape inference crashed (signal 11"), std::string::npos) << crash;
    EXPECT_NE(crash.find("regression-convtranspose-libonnx-segv.onnx"), std::string::npos) << crash;
    auto guarded = capsule::testing::error_of([&] { import_onnx(dir / "regression-layernorm-axis-out-of-range.onnx"); });
    EXPECT_NE(guarded.find("ONNX op LayerNormalization"), std::string::npos) << guarded;
    EXPECT_NE(guarded.find("attribute 'axis' = -3 is out of range for input 0 of rank 2 (valid: [-2, 1])"),
              std::string::npos) << guarded;
}

// Concat of two rank-0 constants: the axis was normalised as if a scalar had one axis and the
// folder wrote to shape[0] of an empty shape. A scalar has no axis to name.
TEST(FuzzRegressions, AxisOfAScalarIsRefused) {
    const auto path = fs::path(CAPSULE_SOURCE_DIR) / "tests/fuzz/corpus/onnx/regression-concat-of-scalars.onnx";
    auto msg = capsule::testing::error_of([&] { import_onnx(path); });
    EXPECT_NE(msg.find("ONNX op Concat"), std::string::npos) << msg;
    EXPECT_NE(msg.find("attribute 'axis' = 0 is out of range for input 0 of rank 0 (it has no axes)"),
              std::string::npos) << msg;
}

// SoftmaxCrossEntropyLoss with a rank-0 target: the converter inserted into its empty shape at
// position 1 (past the end). The target must be the input's shape without C.
TEST(FuzzRegressions, CrossEntropyTargetOfTheWrongShapeIsRefused) {
    const auto path =
        fs::path(CAPSULE_SOURCE_DIR) / "tests/fuzz/corpus/onnx/regression-cross-entropy-scalar-target.onnx";
    auto msg = capsule::testing::error_of([&] { import_onnx(path); });
    EXPECT_NE(msg.find("SoftmaxCrossEntropyLoss"), std::string::npos) << msg;
    EXPECT_NE(msg.find("target has shape [], the input [3, 5] needs [3]"), std::string::npos) << msg;
}
