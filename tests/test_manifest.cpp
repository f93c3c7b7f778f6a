// Manifest validation and plugin discovery failures, each with file, JSON path and reason.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "capsule_fixtures.hpp"

using namespace capsule;
using namespace capsule::testing;
using nlohmann::json;

namespace {
json valid_manifest() {
    auto m = make_manifest("demo", {make_capsule("demo.relu", BackendOp::relu)});
    return manifest_to_json(m);
}

std::string manifest_error(const json& doc) {
    return error_of([&] { parse_manifest(doc.dump(), "demo.capsule.json"); });
}

struct TempDir {
    std::filesystem::path path;
    TempDir() {
        path = std::filesystem::temp_directory_path() /
               ("capsule-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name) << text;
    }
};
}  // namespace

TEST(Manifest, RoundTripsThroughJson) {
    auto doc = valid_manifest();
    auto m = parse_manifest(doc.dump(), "demo.capsule.json");
    EXPECT_EQ(m.name, "demo");
    ASSERT_EQ(m.capsules.size(), 1u);
    EXPECT_EQ(m.capsules[0], make_capsule("demo.relu", BackendOp::relu));
    EXPECT_EQ(manifest_to_json(m), doc);
}

TEST(Manifest, ConformanceDeclarationRoundTrips) {
    auto doc = valid_manifest();
    doc["conformance"] = {
        {"tolerances", {{{"ops", {"relu", "add"}}, {"rtol", 1e-6}, {"atol", 1e-7}}, {{"rtol", 1e-5}, {"atol", 1e-5}}}},
        {"unsupported", {{{"dtype", "float64"}, {"reason", "float32 only"}},
                         {{"op", "batch_norm"}, {"attribute", "training=true"}, {"reason", "inference only"}},
                         {{"case", "add/broadcast_row"}, {"reason", "no broadcasting"}},
                         {{"error_cases", true}, {"reason", "messages are the reference's"}}}}};
    auto m = parse_manifest(doc.dump(), "demo.capsule.json");
    ASSERT_EQ(m.conformance.tolerances.size(), 2u);
    EXPECT_EQ(m.conformance.tolerances[0].ops, (std::vector<BackendOp>{BackendOp::relu, BackendOp::add}));
    EXPECT_EQ(m.conformance.tolerances[1].ops, std::vector<BackendOp>{});
    EXPECT_DOUBLE_EQ(m.conformance.tolerances[0].atol, 1e-7);
    ASSERT_EQ(m.conformance.unsupported.size(), 4u);
    EXPECT_EQ(m.conformance.unsupported[1].op, BackendOp::batch_norm);
    EXPECT_EQ(m.conformance.unsupported[1].attribute, "training=true");
    EXPECT_TRUE(m.conformance.unsupported[3].error_cases);
    EXPECT_EQ(manifest_to_json(m), doc);
}

TEST(Manifest, CapsuleDtypesDefaultToAbi10AndRoundTrip) {
    auto doc = valid_manifest();
    EXPECT_FALSE(doc["capsules"][0].contains("dtypes"));  // the default is not written
    EXPECT_EQ(parse_manifest(doc.dump(), "demo.capsule.json").capsules[0].dtypes, kDTypes1_0);
    doc["capsules"][0]["dtypes"] = {"float32", "int32", "uint8", "bfloat16"};
    auto m = parse_manifest(doc.dump(), "demo.capsule.json");
    // Bits are capsule_dtype values: float32 0, int32 4, uint8 6, bfloat16 12.
    EXPECT_EQ(m.capsules[0].dtypes, (1u << 0) | (1u << 4) | (1u << 6) | (1u << 12));
    EXPECT_EQ(manifest_to_json(m)["capsules"][0]["dtypes"], json({"float32", "int32", "uint8", "bfloat16"}));
    for (auto [dtypes, expected] : std::initializer_list<std::pair<json, const char*>>{
             {json::array({"int32", "int32"}), "$.capsules[0].dtypes[1]: dtype 'int32' is listed twice"},
             {json::array({"int31"}), "$.capsules[0].dtypes[0]: unknown dtype 'int31'"},
             {json::array(), "$.capsules[0].dtypes: capsule 'demo.relu' lists no dtypes"},
             {json("int32"), "$.capsules[0].dtypes: expected an array"}}) {
        doc["capsules"][0]["dtypes"] = dtypes;
        EXPECT_NE(manifest_error(doc).find(expected), std::string::npos) << manifest_error(doc);
    }
}

TEST(Manifest, MalformedManifestsNameFilePathAndReason) {
    struct Case { std::function<void(json&)> edit; const char* expected; };
    const Case cases[] = {
        {[](json& j) { j["extra"] = 1; }, "demo.capsule.json: $: unknown key 'extra'"},
        {[](json& j) { j.erase("device"); }, "demo.capsule.json: $: missing required key 'device'"},
        {[](json& j) { j["device"] = "gpu"; }, "demo.capsule.json: $.device: unknown device 'gpu'"},
        {[](json& j) { j["capsules"][0]["op"] = "relu6"; },
         "demo.capsule.json: $.capsules[0].op: unknown op 'relu6'"},
        {[](json& j) { j["capsules"][0]["trust"] = "high"; },
         "demo.capsule.json: $.capsules[0].trust: unknown trust level 'high'"},
        {[](json& j) { j["capsules"][0]["device"] = "cuda"; },
         "demo.capsule.json: $.capsules[0].device: capsule device cuda differs from the plugin's device cpu"},
        {[](json& j) { j["capsules"][0]["provider"] = "onednn"; },
         "demo.capsule.json: $.capsules[0].provider: provider onednn is not in the plugin's providers"},
        {[](json& j) { j["capsules"].push_back(j["capsules"][0]); },
         "demo.capsule.json: $.capsules[1].name: duplicate capsule name 'demo.relu'"},
        {[](json& j) { j["capsules"][0]["contracts"]["value"]["evidence"] = "vibes"; },
         "demo.capsule.json: $.capsules[0].contracts.value.evidence: unknown evidence 'vibes'"},
        {[](json& j) { j["capsules"][0]["contracts"]["layout"]["claim"].erase("layout"); },
         "demo.capsule.json: $.capsules[0].contracts.layout.claim: layout-compatibility claim needs 'layout'"},
        {[](json& j) { j["capsules"][0]["contracts"].erase("vjp"); },
         "demo.capsule.json: $.capsules[0].contracts: missing required key 'vjp'"},
        {[](json& j) { j["capsules"][0]["runtime"] = "eager"; },
         "demo.capsule.json: $.capsules[0].runtime: capsule 'demo.relu' is eager but the plugin has no library"},
        {[](json& j) { j["abi_version"]["major"] = -1; },
         "demo.capsule.json: $.abi_version: ABI version numbers must be between 0 and 65535"},
        {[](json& j) { j["library"] = "../evil.so"; },
         "demo.capsule.json: $.library: library must be a file name beside the manifest"},
        {[](json& j) { j["registry_modes"] = {"Default"}; },
         "demo.capsule.json: $.registry_modes[0]: invalid registry mode 'Default'"},
        {[](json& j) { j["priority"] = "high"; },
         "demo.capsule.json: $.priority: expected an integer, got string"},
        // Every field's type and emptiness.
        {[](json& j) { j["version"] = ""; }, "demo.capsule.json: $.version: must not be empty"},
        {[](json& j) { j["version"] = "  "; }, "demo.capsule.json: $.version: must not be empty"},
        {[](json& j) { j["version"] = 1; }, "demo.capsule.json: $.version: expected a string, got number"},
        {[](json& j) { j["description"] = 42; },
         "demo.capsule.json: $.description: expected a string, got number"},
        {[](json& j) { j["description"] = json::array(); },
         "demo.capsule.json: $.description: expected a string, got array"},
        {[](json& j) { j["name"] = "my plugin"; },
         "demo.capsule.json: $.name: plugin name 'my plugin' may hold only printable ASCII"},
        {[](json& j) { j["library"] = ".."; },
         "demo.capsule.json: $.library: library must be a file name beside the manifest"},
        {[](json& j) { j["library"] = ""; },
         "demo.capsule.json: $.library: library must be a file name beside the manifest"},
        {[](json& j) { j["providers"].push_back(j["providers"][0]); },
         "demo.capsule.json: $.providers[1]: provider reference is listed twice"},
        {[](json& j) { j["registry_modes"] = {"default", "default"}; },
         "demo.capsule.json: $.registry_modes[1]: registry mode 'default' is listed twice"},
        {[](json& j) { j["registry_modes"] = json::array(); },
         "demo.capsule.json: $.registry_modes: a plugin must join at least one registry mode"},
        {[](json& j) { j["priority"] = 18446744073709551615ull; },
         "demo.capsule.json: $.priority: integer 18446744073709551615 is out of range"},
        {[](json& j) { j["capsules"][0]["name"] = "demo/relu"; },
         "demo.capsule.json: $.capsules[0].name: capsule name 'demo/relu' may hold only printable ASCII"},
        {[](json& j) { j["capsules"][0]["spec"] = ""; },
         "demo.capsule.json: $.capsules[0].spec: must not be empty"},
        {[](json& j) { j["capsules"][0]["notes"] = false; },
         "demo.capsule.json: $.capsules[0].notes: expected a string, got boolean"},
        {[](json& j) { j["capsules"][0]["contracts"]["value"]["summary"] = 3; },
         "demo.capsule.json: $.capsules[0].contracts.value.summary: expected a string, got number"},
        {[](json& j) { j["capsules"][0]["contracts"]["value"]["claim"]["spec"] = ""; },
         "demo.capsule.json: $.capsules[0].contracts.value.claim.spec: must not be empty"},
        {[](json& j) { j["capsules"][0]["contracts"]["value"]["provenance"] = {{"source_file", ""}}; },
         "demo.capsule.json: $.capsules[0].contracts.value.provenance.source_file: must not be empty"},
        // Evidence is earned by running a kernel: a capsule without one cannot claim test or fuzz
        // evidence (a forged manifest claiming it is refused).
        {[](json& j) { j["capsules"][0]["contracts"]["value"]["evidence"] = "test-suite"; },
         "demo.capsule.json: $.capsules[0].contracts.value.evidence: capsule 'demo.relu' has no kernel "
         "(the plugin has no library) and cannot claim test-suite evidence: evidence is earned by running a kernel"},
        {[](json& j) {
             j["library"] = "libdemo.so";
             j["capsules"][0]["runtime"] = "planner-only";
             j["capsules"][0]["contracts"]["vjp"]["evidence"] = "fuzz-oracle";
         },
         "demo.capsule.json: $.capsules[0].contracts.vjp.evidence: capsule 'demo.relu' has no kernel "
         "(its runtime is planner-only) and cannot claim fuzz-oracle evidence"},
        {[](json& j) {
             j["library"] = "libdemo.so";
             j["capsules"][0]["runtime"] = "not-wired";
             j["capsules"][0]["contracts"]["shape"]["evidence"] = "test-suite";
         },
         "demo.capsule.json: $.capsules[0].contracts.shape.evidence: capsule 'demo.relu' has no kernel "
         "(its runtime is not-wired) and cannot claim test-suite evidence"},
        // The conformance declaration (`capsule verify`).
        {[](json& j) { j["conformance"] = {{"unsupported", {{{"reason", "no"}}}}}; },
         "demo.capsule.json: $.conformance.unsupported[0]: an unsupported entry must match something"},
        {[](json& j) { j["conformance"] = {{"unsupported", {{{"dtype", "int64"}, {"reason", "no"}}}}}; },
         "demo.capsule.json: $.conformance.unsupported[0].dtype: expected float32 or float64"},
        {[](json& j) { j["conformance"] = {{"unsupported", {{{"op", "relu"}, {"reason", ""}}}}}; },
         "demo.capsule.json: $.conformance.unsupported[0].reason: must not be empty"},
        {[](json& j) { j["conformance"] = {{"unsupported", {{{"attribute", "training"}, {"reason", "x"}}}}}; },
         "demo.capsule.json: $.conformance.unsupported[0].attribute: expected NAME=VALUE"},
        {[](json& j) { j["conformance"] = {{"tolerances", {{{"rtol", -1}, {"atol", 0}}}}}; },
         "demo.capsule.json: $.conformance.tolerances[0]: rtol and atol must be between 0 and 1"},
        {[](json& j) { j["conformance"] = {{"tolerances", {{{"rtol", "1e-5"}, {"atol", 0}}}}}; },
         "demo.capsule.json: $.conformance.tolerances[0].rtol: expected a number, got string"},
        {[](json& j) { j["conformance"] = {{"tolerances", {{{"ops", {"relu6"}}, {"rtol", 0}, {"atol", 0}}}}}; },
         "demo.capsule.json: $.conformance.tolerances[0].ops[0]: unknown op 'relu6'"},
        {[](json& j) { j["conformance"] = {{"skip", true}}; },
         "demo.capsule.json: $.conformance: unknown key 'skip'"},
    };
    for (const auto& c : cases) {
        auto doc = valid_manifest();
        c.edit(doc);
        auto msg = manifest_error(doc);
        EXPECT_EQ(msg.rfind(c.expected, 0), 0u) << msg;
    }
    auto bad_json = error_of([] { parse_manifest("{\"name\": ", "demo.capsule.json"); });
    EXPECT_EQ(bad_json.rfind("demo.capsule.json: malformed JSON", 0), 0u) << bad_json;
}

TEST(Discovery, FailedPluginsAreReportedAndTheOthersStillLoad) {
    TempDir dir;
    auto good = valid_manifest();
    dir.write("good.capsule.json", good.dump());
    dir.write("broken.capsule.json", "{ not json");
    auto future_abi = valid_manifest();
    future_abi["name"] = "future";
    future_abi["capsules"][0]["name"] = "future.relu";
    future_abi["abi_version"] = {{"major", 2}, {"minor", 0}};
    dir.write("future.capsule.json", future_abi.dump());
    auto newer_minor = valid_manifest();
    newer_minor["name"] = "newer";
    newer_minor["capsules"][0]["name"] = "newer.relu";
    newer_minor["abi_version"] = {{"major", 1}, {"minor", 7}};
    dir.write("newer.capsule.json", newer_minor.dump());
    auto dup_capsule = valid_manifest();
    dup_capsule["name"] = "zz_dup";
    dir.write("zz_dup.capsule.json", dup_capsule.dump());
    dir.write("zz_same_name.capsule.json", good.dump());
    dir.write("ignored.json", "{}");

    PluginSearchPath search;
    search.entries = {dir.path, dir.path / "good.capsule.json", "/nonexistent/dir"};
    auto host = PluginHost::discover(search);
    std::map<std::string, const PluginRecord*> by_file;
    for (const auto& r : host.plugins()) by_file[r.manifest_path.filename().string()] = &r;
    ASSERT_EQ(host.plugins().size(), 6u) << "same file listed twice is read once";
    EXPECT_EQ(by_file["good.capsule.json"]->status, PluginStatus::stub);
    EXPECT_EQ(by_file["newer.capsule.json"]->status, PluginStatus::stub);
    EXPECT_EQ(by_file["broken.capsule.json"]->name, "broken");
    EXPECT_NE(by_file["broken.capsule.json"]->status_text().find("failed: "), std::string::npos);
    EXPECT_NE(by_file["broken.capsule.json"]->failure.find("malformed JSON"), std::string::npos);
    EXPECT_EQ(by_file["future.capsule.json"]->failure,
              "ABI version mismatch: plugin declares 2.0, host implements 1.1 (major versions must match)");
    EXPECT_EQ(by_file["zz_dup.capsule.json"]->failure,
              "duplicate capsule name 'demo.relu' (already declared by plugin 'demo')");
    EXPECT_NE(by_file["zz_same_name.capsule.json"]->failure.find("duplicate plugin name 'demo'"),
              std::string::npos);
    auto reg = host.registry("default");
    ASSERT_EQ(reg.capsules.size(), 2u);  // good + newer; failed plugins contribute nothing
}

TEST(Discovery, StandardSearchPathOrder) {
    auto s = PluginSearchPath::standard("/opt/capsule/bin", "/a::/b", {"/c"});
    // Beside the binary (build tree), then the installed plugin directory (`lib/capsule/plugins`
    // under the prefix, or the library directory the build was configured with).
    ASSERT_EQ(s.entries.size(), 5u);
    EXPECT_EQ(s.entries[0], "/opt/capsule/bin/plugins");
    EXPECT_TRUE(s.entries[1].string().starts_with("/opt/capsule/lib")) << s.entries[1];
    EXPECT_TRUE(s.entries[1].string().ends_with("/capsule/plugins")) << s.entries[1];
    EXPECT_EQ((std::vector<std::filesystem::path>(s.entries.begin() + 2, s.entries.end())),
              (std::vector<std::filesystem::path>{"/a", "/b", "/c"}));
    EXPECT_EQ(PluginSearchPath::standard("/x", nullptr, {}).entries.size(), 2u);
    EXPECT_EQ(PluginSearchPath::standard({}, "/a", {}).entries,
              (std::vector<std::filesystem::path>{"/a"}));
}
