// `capsule verify`, the `verified` policy and plan lockfiles, run as a user runs the tool.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

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
    EXPECT_TRUE(contains(plugins.out, "evidence 118 verified, 2 unverified, 0 failed (record reference@")) << plugins.out;
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

    auto ok = capsule_tool_raw(tool + " run --profile checked_cpu" + run_args);
    EXPECT_EQ(ok.code, 0) << ok.out;
    EXPECT_EQ(read_npy(dir / "out" / "output_2.npy").to_doubles(), (std::vector<double>{1, 0, 3}));

    auto other_profile = capsule_tool_raw(tool + " run --profile checked_linux_x86_64_cpu" + run_args);
    EXPECT_EQ(other_profile.code, 4) << other_profile.out;
    EXPECT_TRUE(contains(other_profile.out, "plan differs from lockfile " + lock + ":")) << other_profile.out;
    EXPECT_TRUE(contains(other_profile.out, "profile: locked checked_cpu, now checked_linux_x86_64_cpu"))
        << other_profile.out;

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
