// `capsule bench`: the node records, the JSON report, the Chrome trace and the refusals of bad
// arguments. Values (counts, names), never timings, are asserted.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_tool.hpp"

using capsule_test::capsule_tool;
using capsule_test::capsule_tool_raw;
using capsule_test::contains;
using capsule_test::temp_dir;
namespace fs = std::filesystem;

namespace {

/// x[2,8] → linear fc1 → relu act → add sum(act, act) → softmax probs: four kernel calls. No
/// parameters file: bench draws fc1's weight and bias.
fs::path small_graph(const fs::path& dir) {
    auto path = dir / "small.json";
    std::ofstream(path) << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [2, 8]},
        {"id": 1, "op": "linear", "name": "fc1", "parents": [0], "attrs": {"out_features": 4}, "shape": [2, 4]},
        {"id": 2, "op": "relu", "name": "act", "parents": [1], "shape": [2, 4]},
        {"id": 3, "op": "add", "name": "sum", "parents": [2, 2], "shape": [2, 4]},
        {"id": 4, "op": "softmax", "name": "probs", "parents": [3], "attrs": {"axis": -1}, "shape": [2, 4]}],
        "outputs": [4]})";
    return path;
}

const std::vector<std::string> kNodes{"fc1", "act", "sum", "probs"};
const std::vector<std::string> kCapsules{"reference.linear", "reference.relu", "reference.add", "reference.softmax"};

}  // namespace

TEST(CliBench, JsonHasOneRecordPerNodeWithCapsuleAndPlugin) {
    auto dir = temp_dir("bench-json");
    auto r = capsule_tool_raw(std::string(CAPSULE_TOOL) + " bench --profile checked_cpu --warmup 1 --iterations 3 --json " +
                              small_graph(dir).string() + " 2>/dev/null");
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["profile"], "checked_cpu");
    EXPECT_EQ(j["warmup"], 1);
    EXPECT_EQ(j["iterations"], 3);
    EXPECT_EQ(j["runs_ms"].size(), 3u);
    ASSERT_EQ(j["inputs"].size(), 1u);
    EXPECT_EQ(j["inputs"][0]["name"], "x");
    EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json::array({2, 8}));
    for (const char* key : {"load_ms", "plan_ms", "session_create_ms", "throughput_per_s"})
        EXPECT_TRUE(j[key].is_number()) << key;
    for (const char* key : {"min", "median", "p90", "p99", "max", "mean"})
        EXPECT_TRUE(j["latency_ms"][key].is_number()) << key;
    EXPECT_LE(j["latency_ms"]["min"].get<double>(), j["latency_ms"]["max"].get<double>());
    ASSERT_EQ(j["nodes"].size(), kNodes.size());
    double share = 0;
    for (std::size_t i = 0; i < kNodes.size(); ++i) {
        const auto& node = j["nodes"][i];
        EXPECT_EQ(node["node_id"], i + 1);
        EXPECT_EQ(node["name"], kNodes[i]);
        EXPECT_EQ(node["capsule"], kCapsules[i]);
        EXPECT_EQ(node["provider"], "reference");
        EXPECT_EQ(node["plugin"], "reference");
        share += node["share"].get<double>();
    }
    EXPECT_EQ(j["nodes"][1]["op"], "relu");
    EXPECT_GT(share, 0.0);
    EXPECT_LE(share, 1.0);
}

TEST(CliBench, TextReportNamesEveryNodeAndTheDrawnParameters) {
    auto dir = temp_dir("bench-text");
    auto r = capsule_tool("bench --iterations 2 --warmup 0 " + small_graph(dir).string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "2 parameter tensor(s) not supplied by the model were drawn at random")) << r.out;
    EXPECT_TRUE(contains(r.out, "session creation")) << r.out;
    EXPECT_TRUE(contains(r.out, "0 warm-up run(s), 2 timed run(s)")) << r.out;
    for (std::size_t i = 0; i < kNodes.size(); ++i) {
        EXPECT_TRUE(contains(r.out, kNodes[i])) << r.out;
        EXPECT_TRUE(contains(r.out, kCapsules[i])) << r.out;
    }
}

TEST(CliBench, TraceHasOneCompleteEventPerNodePerIteration) {
    auto dir = temp_dir("bench-trace");
    const auto trace = dir / "trace.json";
    auto r = capsule_tool("bench --iterations 3 --json --trace " + trace.string() + " " + small_graph(dir).string());
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream in(trace);
    auto j = nlohmann::json::parse(in);
    const auto& events = j["traceEvents"];
    ASSERT_EQ(events.size(), 3 * kNodes.size());
    for (std::size_t e = 0; e < events.size(); ++e) {
        const auto& event = events[e];
        EXPECT_EQ(event["ph"], "X");
        EXPECT_EQ(event["name"], kNodes[e % kNodes.size()]);
        EXPECT_EQ(event["args"]["capsule"], kCapsules[e % kNodes.size()]);
        EXPECT_EQ(event["args"]["plugin"], "reference");
        EXPECT_EQ(event["args"]["run"], e / kNodes.size());
        EXPECT_TRUE(event["ts"].is_number());
        EXPECT_GE(event["dur"].get<double>(), 0.0);
    }
    // Calls of one run follow each other.
    EXPECT_LE(events[0]["ts"].get<double>(), events[1]["ts"].get<double>());
}

TEST(CliBench, OnnxModelWithInputShape) {
    // --input-shape agrees with the model's input; another batch is refused by the importer.
    const fs::path model = fs::path(CAPSULE_SOURCE_DIR) / "tests/data/models/squeezenet1_1/model.onnx";
    auto r = capsule_tool_raw(std::string(CAPSULE_TOOL) + " bench --iterations 1 --warmup 0 --json --input-shape input=2x3x224x224 " +
                              model.string() + " 2>/dev/null");
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json::array({2, 3, 224, 224}));
    // checked_cpu runs the whole model as one reference compiled group: every convolution's
    // relu is applied as the convolution writes its output (26 of squeezenet1_1's 65 nodes).
    ASSERT_EQ(j["nodes"].size(), 1u);
    EXPECT_EQ(j["nodes"][0]["group_nodes"].size(), 65u);
    EXPECT_EQ(j["nodes"][0]["fused"].get<std::string>().rfind("conv+relu x26 (applied", 0), 0u) << j["nodes"][0]["fused"];
    // --node-by-node: no compiled groups, one row per node.
    auto plain = capsule_tool_raw(std::string(CAPSULE_TOOL) +
                                  " bench --node-by-node --iterations 1 --warmup 0 --json --input-shape input=2x3x224x224 " +
                                  model.string() + " 2>/dev/null");
    ASSERT_EQ(plain.code, 0) << plain.out;
    auto p = nlohmann::json::parse(plain.out);
    ASSERT_EQ(p["nodes"].size(), 65u);
    EXPECT_EQ(p["nodes"][0]["capsule"], "reference.conv2d");
    EXPECT_FALSE(p["nodes"][0].contains("group_nodes"));
    auto wrong = capsule_tool("bench --iterations 1 --input-shape input=1x3x224x224 " + model.string());
    EXPECT_EQ(wrong.code, 2) << wrong.out;
}

TEST(CliBench, BadArgumentsExit2WithTheCause) {
    auto dir = temp_dir("bench-bad");
    const auto graph = small_graph(dir).string();
    auto zero = capsule_tool("bench --iterations 0 " + graph);
    EXPECT_EQ(zero.code, 2) << zero.out;
    EXPECT_TRUE(contains(zero.out, "--iterations")) << zero.out;
    auto negative = capsule_tool("bench --warmup -1 " + graph);
    EXPECT_EQ(negative.code, 2) << negative.out;
    EXPECT_TRUE(contains(negative.out, "--warmup")) << negative.out;
    auto missing = capsule_tool("bench " + (dir / "nonexistent.json").string());
    EXPECT_EQ(missing.code, 2) << missing.out;
    EXPECT_TRUE(contains(missing.out, "nonexistent.json")) << missing.out;
    auto no_model = capsule_tool("bench --iterations 2");
    EXPECT_EQ(no_model.code, 2) << no_model.out;
    EXPECT_TRUE(contains(no_model.out, "model")) << no_model.out;
    auto unknown_input = capsule_tool("bench --input-shape y=2x8 " + graph);
    EXPECT_EQ(unknown_input.code, 2) << unknown_input.out;
    EXPECT_TRUE(contains(unknown_input.out, "no runtime input of that name (inputs: x)")) << unknown_input.out;
    auto bad_shape = capsule_tool("bench --input-shape x=2xeight " + graph);
    EXPECT_EQ(bad_shape.code, 2) << bad_shape.out;
    EXPECT_TRUE(contains(bad_shape.out, "dimensions must be integers")) << bad_shape.out;
    for (const char* empty : {"x=2x8x", "x=2,,8"}) {
        auto r = capsule_tool(std::string("bench --input-shape ") + empty + " " + graph);
        EXPECT_EQ(r.code, 2) << empty << ": " << r.out;
        EXPECT_TRUE(contains(r.out, "an empty dimension")) << r.out;
    }
    auto trace = capsule_tool("bench --trace " + (dir / "no/such/dir/t.json").string() + " " + graph);
    EXPECT_EQ(trace.code, 2) << trace.out;
    EXPECT_TRUE(contains(trace.out, "cannot open the file for writing")) << trace.out;
    auto empty_trace = capsule_tool("bench --trace '' " + graph);
    EXPECT_EQ(empty_trace.code, 2) << empty_trace.out;
    EXPECT_TRUE(contains(empty_trace.out, "--trace: needs a file name")) << empty_trace.out;
    auto model_as_trace = capsule_tool("bench --trace " + graph + " " + graph);
    EXPECT_EQ(model_as_trace.code, 2) << model_as_trace.out;
    EXPECT_TRUE(contains(model_as_trace.out, "is the model file")) << model_as_trace.out;
    EXPECT_TRUE(fs::exists(graph)) << "the model must be left alone";
}
