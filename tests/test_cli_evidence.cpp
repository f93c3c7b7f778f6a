// `capsule verify`, the `verified` policy and plan lockfiles, run as a user runs the tool.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "capsule/op_catalog.hpp"
#include "capsule/tensor_io.hpp"
#include "cli_tool.hpp"

using namespace capsule;
namespace fs = std::filesystem;
using capsule_test::capsule_tool;
using capsule_test::capsule_tool_raw;
using capsule_test::contains;
using capsule_test::temp_dir;

// Under `verified`, test-suite evidence counts only after `capsule verify` recorded a pass for the
// exact library; before that the gate names the capsule and the command that would verify it.
TEST(CliEvidence, VerifiedProfileRejectsUntilVerifyRecordsEvidence) {
    const auto dir = temp_dir("verified");
    const std::string ev = " --evidence-dir " + (dir / "evidence").string();
    auto before = capsule_tool("plan --profile verified_cpu --ops relu,add" + ev);
    EXPECT_EQ(before.code, 4) << before.out;
    EXPECT_TRUE(contains(before.out, "unverified-evidence:")) << before.out;
    EXPECT_TRUE(contains(before.out, "why: reference.relu: libcapsule_reference.so: no evidence record of plugin "
                                     "reference in " + (dir / "evidence").string() +
                                     "; run: capsule verify --plugin reference")) << before.out;
    auto json_before = capsule_tool_raw(std::string(CAPSULE_TOOL) + " plan --json --profile verified_cpu --ops relu" + ev);
    auto doc = nlohmann::json::parse(json_before.out);
    EXPECT_EQ(doc["status"], "rejected");
    EXPECT_EQ(doc["failures"][0]["kind"], "unverified-evidence");
    EXPECT_EQ(doc["failures"][0]["reasons"].size(), 1u);

    auto verify = capsule_tool("verify --plugin reference" + ev);
    EXPECT_EQ(verify.code, 0) << verify.out;
    EXPECT_TRUE(contains(verify.out, "reference.relu")) << verify.out;
    EXPECT_TRUE(contains(verify.out, "passed; record reference@")) << verify.out;
    EXPECT_TRUE(contains(verify.out, "reference.sgd                        no cases")) << verify.out;

    auto after = capsule_tool("plan --profile verified_cpu --ops relu,add" + ev);
    EXPECT_EQ(after.code, 0) << after.out;
    EXPECT_TRUE(contains(after.out, "gate: accepted")) << after.out;
    // The listings show it per capsule; the optimizer steps, which no case covers, stay unverified.
    auto capsules = capsule_tool("capsules" + ev);
    EXPECT_TRUE(contains(capsules.out, "reference.relu op=relu")) << capsules.out;
    EXPECT_TRUE(contains(capsules.out, "evidence=verified")) << capsules.out;
    auto plugins = capsule_tool("plugins" + ev);
    // Every capsule but the two optimizer steps.
    const std::string counts = "evidence " + std::to_string(op_catalog().size() - 2) + " verified, 2 unverified, 0 failed";
    EXPECT_TRUE(contains(plugins.out, counts + " (record reference@")) << plugins.out;
    // Other policies keep their meaning: checked_cpu never reads records.
    EXPECT_EQ(capsule_tool("plan --profile checked_cpu --ops relu").code, 0);
    fs::remove_all(dir);
}

TEST(CliEvidence, VerifyRefusesAbsentDevicesAndUnknownPlugins) {
    const auto dir = temp_dir("verify-refusals");
    const std::string ev = " --evidence-dir " + dir.string();
    auto unknown = capsule_tool("verify --plugin nosuch" + ev);
    EXPECT_EQ(unknown.code, 2) << unknown.out;
    EXPECT_TRUE(contains(unknown.out, "no plugin named 'nosuch'")) << unknown.out;
    auto stub = capsule_tool("verify --plugin rocm" + ev);
    EXPECT_EQ(stub.code, 5) << stub.out;
    EXPECT_TRUE(contains(stub.out, "rocm: no library to verify")) << stub.out;
    auto cuda = capsule_tool("verify --plugin native_cuda" + ev);
    if (cuda.code == 5)  // no GPU here: the probe's message, and no record
        EXPECT_TRUE(contains(cuda.out, "skipped: its device is not usable here")) << cuda.out;
    fs::remove_all(dir);
}

namespace {
/// A private copy of the tool with only the reference plugin beside it, so a test may replace the
/// plugin's library without touching the build tree.
fs::path private_tool(const fs::path& dir) {
    fs::create_directories(dir / "bin" / "plugins");
    fs::copy_file(CAPSULE_TOOL, dir / "bin" / "capsule");
    for (const char* f : {"reference.capsule.json", "libcapsule_reference.so"})
        fs::copy_file(fs::path(CAPSULE_PLUGIN_DIR) / f, dir / "bin" / "plugins" / f);
    return dir / "bin" / "capsule";
}
}  // namespace

// `plan --lock` writes the accepted plan; `run --lock` runs only that plan, refusing (exit 4, with
// the locked and current values) a different profile or a plugin library replaced after locking.
TEST(CliEvidence, PlanLockRefusesDriftWithADiff) {
    const auto dir = temp_dir("lock");
    const auto tool = private_tool(dir).string();
    std::ofstream(dir / "g.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [3]},
        {"id": 2, "op": "abs", "parents": [1], "shape": [3]}], "outputs": [2]})";
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {3}, {1, -2, 3}));
    const std::string graph = (dir / "g.json").string(), lock = (dir / "plan.lock.json").string();
    const std::string run_args = " " + graph + " --input x=" + (dir / "x.npy").string() + " --output-dir " +
                                 (dir / "out").string() + " --lock " + lock + " 2>&1";

    auto plan = capsule_tool_raw(tool + " plan --profile checked_cpu " + graph + " --lock " + lock + " 2>&1");
    ASSERT_EQ(plan.code, 0) << plan.out;
    std::ifstream in(lock);
    auto doc = nlohmann::json::parse(in);
    EXPECT_EQ(doc["format"], "capsule-plan-lock");
    EXPECT_EQ(doc["profile"], "checked_cpu");
    ASSERT_EQ(doc["groups"].size(), 2u);
    EXPECT_EQ(doc["groups"][0]["capsule"], "reference.relu");
    EXPECT_EQ(doc["groups"][1]["node_ids"], nlohmann::json::array({2}));
    const std::string old_hash = doc["groups"][0]["library_sha256"];
    EXPECT_EQ(old_hash.size(), 64u);
    ASSERT_EQ(doc["model_files"].size(), 1u);  // a JSON IR graph without a parameters file
    EXPECT_EQ(doc["model_files"][0]["role"], "model");

    auto ok = capsule_tool_raw(tool + " run --profile checked_cpu" + run_args);
    EXPECT_EQ(ok.code, 0) << ok.out;
    EXPECT_EQ(read_npy(dir / "out" / "output_2.npy").to_doubles(), (std::vector<double>{1, 0, 3}));

    auto other_profile = capsule_tool_raw(tool + " run --profile checked_linux_x86_64_cpu" + run_args);
    EXPECT_EQ(other_profile.code, 4) << other_profile.out;
    EXPECT_TRUE(contains(other_profile.out, "plan differs from lockfile " + lock + ":")) << other_profile.out;
    EXPECT_TRUE(contains(other_profile.out, "profile: locked checked_cpu, now checked_linux_x86_64_cpu"))
        << other_profile.out;

    // The model changes (here only its bytes, not its plan): drift too.
    std::string original;
    {
        std::ifstream in(graph);
        original.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::ofstream(graph) << original << "\n";
    auto edited = capsule_tool_raw(tool + " run --profile checked_cpu" + run_args);
    EXPECT_EQ(edited.code, 4) << edited.out;
    EXPECT_TRUE(contains(edited.out, "model file sha256: locked ")) << edited.out;
    std::ofstream(graph) << original;

    // The library is replaced after locking (one byte appended: still a loadable library).
    std::ofstream(dir / "bin" / "plugins" / "libcapsule_reference.so", std::ios::app) << '\0';
    auto replaced = capsule_tool_raw(tool + " run --profile checked_cpu" + run_args);
    EXPECT_EQ(replaced.code, 4) << replaced.out;
    EXPECT_TRUE(contains(replaced.out, "group 0 (nodes 1): library sha256: locked " + old_hash + ", now "))
        << replaced.out;
    EXPECT_FALSE(contains(replaced.out, "wrote ")) << replaced.out;

    // A malformed lockfile is bad input naming the file.
    std::ofstream(lock) << R"({"format": "capsule-plan-lock", "version": 1})";
    auto malformed = capsule_tool_raw(tool + " run --profile checked_cpu" + run_args);
    EXPECT_EQ(malformed.code, 2) << malformed.out;
    EXPECT_TRUE(contains(malformed.out, lock + ": $: missing required key 'profile'")) << malformed.out;
    fs::remove_all(dir);
}

// Each plugin's suite runs in a child process: a probe (or kernel) that crashes or hangs is that
// plugin's failure (exit 1), and the tool itself neither crashes nor hangs.
TEST(CliEvidence, VerifySurvivesPluginsThatCrashOrHang) {
    const auto dir = temp_dir("verify-crash");
    const std::string fixtures = CAPSULE_FIXTURE_PLUGIN_DIR;
    const std::string ev = " --evidence-dir " + dir.string();
    auto crash = capsule_tool("verify --plugin fixture_probe_crash --plugin-path " + fixtures + "/fixture_probe_crash" + ev);
    EXPECT_EQ(crash.code, 1) << crash.out;
    EXPECT_TRUE(contains(crash.out, "fixture_probe_crash: crashed (signal ")) << crash.out;
    EXPECT_TRUE(contains(crash.out, "while loading or probing")) << crash.out;
    auto hang = capsule_tool("verify --timeout 1 --plugin fixture_probe_hang --plugin-path " + fixtures +
                             "/fixture_probe_hang" + ev);
    EXPECT_EQ(hang.code, 1) << hang.out;
    EXPECT_TRUE(contains(hang.out, "fixture_probe_hang: timed out after 1 s while loading or probing")) << hang.out;
    auto json = capsule_tool_raw(std::string(CAPSULE_TOOL) + " verify --json --plugin fixture_probe_crash --plugin-path " +
                                 fixtures + "/fixture_probe_crash" + ev + " 2>/dev/null");
    auto doc = nlohmann::json::parse(json.out);
    ASSERT_EQ(doc.size(), 1u);
    EXPECT_EQ(doc[0]["exit_code"], 1);
    // Without --plugin, a device that is absent here is skipped, not an error; with it, exit 5.
    auto all = capsule_tool("verify" + ev);
    EXPECT_EQ(all.code, 0) << all.out;
    EXPECT_TRUE(contains(all.out, "passed; record reference@")) << all.out;
    fs::remove_all(dir);
}

TEST(CliEvidence, LockPinsProfileSettingsAndWritesNothingElseWhenItCannotBeWritten) {
    const auto dir = temp_dir("lock-settings");
    std::ofstream(dir / "g.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [3]}], "outputs": [1]})";
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {3}, {1, -2, 3}));
    const std::string graph = (dir / "g.json").string(), lock = (dir / "plan.lock.json").string();
    ASSERT_EQ(capsule_tool("plan --profile checked_cpu " + graph + " --lock " + lock).code, 0);
    // A profile file may not take a built-in's name (so it cannot pose as checked_cpu) ...
    std::ofstream(dir / "same_name.json") << R"({"name": "checked_cpu", "base": "checked_cpu",
        "config": {"vjp_mode": "none"}})";
    EXPECT_EQ(capsule_tool("run --profile " + (dir / "same_name.json").string() + " " + graph + " --input x=" +
                           (dir / "x.npy").string() + " --output-dir " + (dir / "out").string()).code,
              2);
    // ... but a profile file edited after its plan was locked keeps its name with other settings:
    // that is drift.
    const std::string mine = (dir / "mine.json").string(), mine_lock = (dir / "mine.lock.json").string();
    std::ofstream(mine) << R"({"name": "mine", "base": "checked_cpu"})";
    ASSERT_EQ(capsule_tool("plan --profile " + mine + " " + graph + " --lock " + mine_lock).code, 0);
    std::ofstream(mine) << R"({"name": "mine", "base": "checked_cpu", "config": {"vjp_mode": "none"}})";
    auto run = capsule_tool("run --profile " + mine + " " + graph + " --input x=" + (dir / "x.npy").string() +
                            " --output-dir " + (dir / "out").string() + " --lock " + mine_lock);
    EXPECT_EQ(run.code, 4) << run.out;
    EXPECT_TRUE(contains(run.out, "profile settings: locked {")) << run.out;
    EXPECT_FALSE(contains(run.out, "gate: accepted")) << run.out;  // refused before the plan is shown
    // --json with a lock path that cannot be written: one JSON document, the error.
    auto json = capsule_tool_raw(std::string(CAPSULE_TOOL) + " plan --json --profile checked_cpu " + graph +
                                 " --lock " + (dir / "no-such-dir" / "x.lock").string() + " 2>/dev/null");
    EXPECT_NE(json.code, 0);
    auto doc = nlohmann::json::parse(json.out);
    EXPECT_TRUE(doc.contains("error")) << json.out;
    fs::remove_all(dir);
}

// The manifest generator earns nothing for a capsule without a kernel.
TEST(CliEvidence, ManifestGeneratorRefusesUnearnedEvidence) {
    const auto dir = temp_dir("manifest-gen");
    const std::string library = std::string(CAPSULE_FIXTURE_PLUGIN_DIR) + "/fixture_good/libfixture_good.so";
    auto declaration = nlohmann::json::parse(R"({
      "manifest": {"name": "fixture_good", "version": "1.0.0", "abi_version": {"major": 1, "minor": 1},
                   "library": "libfixture_good.so", "device": "cpu", "providers": ["external"],
                   "registry_modes": ["default"]},
      "capsules": {"provider": "external", "trust": "checked", "vjp": "torchlean-tape",
                   "provenance": {"source_file": "tests/fixtures/plugins"},
                   "evidence": {"shape": "runtime-guard", "layout": "runtime-guard", "value": "test-suite",
                                "vjp": "test-suite", "no_backward": "runtime-guard"},
                   "summaries": {"shape": "s", "layout": "l", "value": "values match {spec}", "vjp": "v",
                                 "no_backward": "forward-only", "planner_only": "no kernel yet"},
                   "notes": "fixture", "planner_only": ["gelu"]}})");
    auto generate = [&](const nlohmann::json& d) {
        std::ofstream(dir / "declaration.json") << d.dump();
        return capsule_tool_raw(std::string(CAPSULE_MANIFEST_GEN) + " " + (dir / "declaration.json").string() + " " +
                                library + " " + (dir / "out.capsule.json").string() + " 2>&1");
    };
    auto ok = generate(declaration);
    ASSERT_EQ(ok.code, 0) << ok.out;
    std::ifstream in(dir / "out.capsule.json");
    auto manifest = nlohmann::json::parse(in);
    ASSERT_EQ(manifest["capsules"].size(), 3u);  // relu and abs from the table, gelu planner-only
    EXPECT_EQ(manifest["capsules"][0]["name"], "fixture_good.relu");
    EXPECT_EQ(manifest["capsules"][0]["spec"], "torch.relu");                          // from the catalog
    EXPECT_EQ(manifest["capsules"][0]["vjp"], "none");                                 // no backward entry
    EXPECT_EQ(manifest["capsules"][0]["contracts"]["vjp"]["evidence"], "runtime-guard");
    EXPECT_EQ(manifest["capsules"][2]["runtime"], "planner-only");
    EXPECT_EQ(manifest["capsules"][2]["contracts"]["value"]["evidence"], "not-provided");

    auto forged = declaration;
    forged["capsules"]["evidence"]["shape"] = "test-suite";  // would reach the planner-only gelu
    auto refused = generate(forged);
    EXPECT_EQ(refused.code, 2) << refused.out;
    EXPECT_TRUE(contains(refused.out, "capsule fixture_good.gelu has no kernel in the library, so its shape "
                                      "evidence cannot be test-suite")) << refused.out;
    auto lying = declaration;
    lying["capsules"]["planner_only"] = {"relu"};
    auto refused_runtime = generate(lying);
    EXPECT_EQ(refused_runtime.code, 2) << refused_runtime.out;
    EXPECT_TRUE(contains(refused_runtime.out, "relu is implemented by the library")) << refused_runtime.out;

    // Every other way a declaration can disagree with the library or the host is refused too.
    struct Case { std::function<void(nlohmann::json&)> edit; std::string expected; };
    const std::vector<Case> cases{
        {[](auto& d) { d["manifest"]["version"] = "9.9"; },
         "does not match " + (dir / "declaration.json").string() + ": library version '1.0.0' differs"},
        {[](auto& d) { d["capsules"]["overrides"] = {{"gelu", {{"name", "reference.gelu"}}}}; },
         "capsule name reference.gelu (override of gelu) is not fixture_good.<name>"},
        {[](auto& d) { d["capsules"]["planner_only"] = nullptr; },
         "$.capsules.planner_only: expected a list of ops or \"every other op\""},
        {[](auto& d) { d["capsules"]["trust"] = 3; }, (dir / "declaration.json").string() + ": "},
    };
    for (const auto& c : cases) {
        auto d = declaration;
        c.edit(d);
        auto r = generate(d);
        EXPECT_EQ(r.code, 2) << r.out;
        EXPECT_TRUE(contains(r.out, c.expected)) << r.out;
    }
    // A {spec} inside an override's spec is replaced once, not forever.
    auto spec = declaration;
    spec["capsules"]["overrides"] = {{"relu", {{"spec", "torch.relu {spec}"}}}};
    auto replaced = generate(spec);
    EXPECT_EQ(replaced.code, 0) << replaced.out;
    // A duplicate key is refused by the strict reader (the last one would silently win).
    std::ofstream(dir / "declaration.json") << R"({"manifest": {}, "manifest": {}, "capsules": {}})";
    auto duplicate = capsule_tool_raw(std::string(CAPSULE_MANIFEST_GEN) + " " + (dir / "declaration.json").string() +
                                      " " + library + " " + (dir / "out.capsule.json").string() + " 2>&1");
    EXPECT_EQ(duplicate.code, 2) << duplicate.out;
    EXPECT_TRUE(contains(duplicate.out, "duplicate key 'manifest'")) << duplicate.out;
    fs::remove_all(dir);
}
