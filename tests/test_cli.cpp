// The `capsule` tool as a user runs it: exit codes of DESIGN.md section 7 and the plan JSON.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capsule/session.hpp"
#include "capsule/tensor_io.hpp"
#include "cli_tool.hpp"

using namespace capsule;
namespace fs = std::filesystem;

using capsule_test::capsule_tool;
using capsule_test::capsule_tool_raw;
using capsule_test::contains;
using capsule_test::temp_dir;

namespace {
const std::string kSource = CAPSULE_SOURCE_DIR;
}  // namespace

namespace {
/// One entry of a CLI11 help section ("Positionals:", "Options:", "Subcommands:"): the section,
/// the entry's first word and whether a description follows it.
struct HelpEntry {
    std::string section;
    std::string name;
    bool described = false;
};

/// The entries of every section of a help text. A section runs from its "Name:" line to the next
/// blank line; an entry is a line indented by exactly two spaces, and its description follows the
/// name after two or more spaces, or on the next line, indented further, when the name is long.
std::vector<HelpEntry> help_entries(const std::string& help) {
    std::vector<std::string> lines;
    std::istringstream in(help);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::vector<HelpEntry> out;
    std::string section;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const auto& line = lines[i];
        if (line.find_first_not_of(' ') == std::string::npos) {
            section.clear();
        } else if (line[0] != ' ' && line.back() == ':') {
            section = line.substr(0, line.size() - 1);
        } else if (!section.empty() && line.rfind("  ", 0) == 0 && line[2] != ' ') {
            HelpEntry e{section, line.substr(2, line.find(' ', 2) - 2)};
            const auto text = line.substr(0, line.find_last_not_of(' ') + 1);
            const auto gap = text.find("  ", 2);
            const bool next_indented = i + 1 < lines.size() && lines[i + 1].rfind("    ", 0) == 0 &&
                                       lines[i + 1].find_first_not_of(' ') != std::string::npos;
            e.described = (gap != std::string::npos && gap < text.size()) || next_indented;
            out.push_back(e);
        }
    }
    return out;
}
}  // namespace

// `capsule --help` and `capsule <command> --help` describe every option, positional and command,
// and the top-level help lists the exit codes.
TEST(Cli, HelpDescribesEveryCommandOptionAndExitCode) {
    auto top = capsule_tool("--help");
    ASSERT_EQ(top.code, 0) << top.out;
    std::vector<std::string> commands;
    for (const auto& e : help_entries(top.out)) {
        EXPECT_TRUE(e.described) << "capsule --help: " << e.section << " entry '" << e.name << "' has no description\n"
                                 << top.out;
        if (e.section == "Subcommands") commands.push_back(e.name);
    }
    EXPECT_GE(commands.size(), 9u) << top.out;
    EXPECT_TRUE(contains(top.out, "Exit codes")) << top.out;
    for (int code = 0; code <= 5; ++code)
        EXPECT_TRUE(contains(top.out, "\n  " + std::to_string(code) + "  ")) << "exit code " << code << "\n" << top.out;
    for (const auto& command : commands) {
        auto r = capsule_tool(command + " --help");
        ASSERT_EQ(r.code, 0) << command << "\n" << r.out;
        const auto entries = help_entries(r.out);
        EXPECT_FALSE(entries.empty()) << command << "\n" << r.out;
        for (const auto& e : entries)
            EXPECT_TRUE(e.described) << "capsule " << command << " --help: " << e.section << " entry '" << e.name
                                     << "' has no description\n" << r.out;
    }
}

// The help parser itself: an entry without a description is found, a long name's description on
// the next line counts.
TEST(Cli, HelpEntriesFindAnUndescribedOption) {
    const std::string help = "usage\n\nOptions:\n  -h,--help                   Print this help\n"
                             "  --bare TEXT                 \n"
                             "  --a-very-long-option-name TEXT=default\n                              described\n\nfooter\n";
    auto entries = help_entries(help);
    ASSERT_EQ(entries.size(), 3u);
    EXPECT_TRUE(entries[0].described);
    EXPECT_EQ(entries[1].name, "--bare");
    EXPECT_FALSE(entries[1].described);
    EXPECT_TRUE(entries[2].described);
}

TEST(Cli, PlanOpsAcceptedPrintsReport) {
    auto r = capsule_tool("plan --profile checked_cpu --ops relu,relu,matmul");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "  relu: reference.relu provider=reference trust=checked vjp=torchlean-tape runtime=eager\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "gate: accepted")) << r.out;
}

TEST(Cli, PlanJsonHasTheDocumentedShape) {
    auto r = capsule_tool("plan --profile checked_cpu --json " + kSource + "/examples/mlp.json");
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["profile"], "checked_cpu");
    EXPECT_EQ(j["status"], "accepted");
    EXPECT_TRUE(j["error"].is_null());
    ASSERT_EQ(j["groups"].size(), 4u);
    EXPECT_EQ(j["groups"][0]["node_ids"], nlohmann::json::array({1}));
    EXPECT_EQ(j["groups"][0]["capsule"], "reference.linear");
    EXPECT_EQ(j["groups"][0]["grouping"], "singleton");
    EXPECT_EQ(j["groups"][3]["op"], "softmax");
    EXPECT_EQ(j["failures"], nlohmann::json::array());
}

TEST(Cli, CoalescedGroupsInJson) {
    auto r = capsule_tool("plan --json --ops relu,relu,add");
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["groups"].size(), 2u);
    EXPECT_EQ(j["groups"][0]["node_ids"], nlohmann::json::array({0, 1}));
    EXPECT_EQ(j["groups"][0]["grouping"], "same-capsule-run");
}

TEST(Cli, PlanningFailureExits3) {
    auto r = capsule_tool("plan --profile future_metal --ops matmul");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(contains(r.out, "no admissible backend capsule for op matmul on device metal")) << r.out;
    auto j = capsule_tool("plan --profile future_metal --ops matmul --json");
    EXPECT_EQ(j.code, 3);
    auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["status"], "planning_failed");
    EXPECT_TRUE(contains(doc["error"].get<std::string>(), "reference.matmul (provider reference, device cpu): wrong device"));
}

// Every failure class exits with its ErrorCode's value, and stderr names the class before the
// message.
TEST(Cli, ExitCodeIsTheErrorCodeAndStderrNamesTheClass) {
    auto dir = temp_dir("exit-codes");
    std::ofstream(dir / "strict.json") << R"({"name": "strict_cpu", "base": "checked_cpu", "acceptance_policy": "strict"})";
    std::ofstream(dir / "inference.json") << R"({"name": "inference_cpu", "base": "checked_cpu", "config": {"vjp_mode": "none"}})";
    std::ofstream(dir / "id.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]}], "outputs": [0]})";
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {3}, {1, 2, 3}));
    struct Case {
        std::string args;
        ErrorCode code;
        std::string says;
    };
    const std::vector<Case> cases{
        {"plan --profile no_such_profile --ops relu", ErrorCode::input, "capsule: bad input: unknown profile 'no_such_profile'"},
        {"plan --profile future_metal --ops matmul", ErrorCode::planning,
         "capsule: planning failed: no admissible backend capsule for op matmul"},
        {"--profile-file " + (dir / "strict.json").string() + " plan --profile strict_cpu --ops relu", ErrorCode::gate,
         "gate: rejected"},
        {"run --profile future_rocm " + (dir / "id.json").string() + " --input x=" + (dir / "x.npy").string() +
             " --output-dir " + (dir / "out").string(),
         ErrorCode::probe, "capsule: cannot run here: no usable plugin serves device rocm"},
        {"train --profile " + (dir / "inference.json").string() + " --epochs 1 --train-limit 64 --output " +
             (dir / "m.json").string(),
         ErrorCode::other, "capsule: error: profile inference_cpu has VJP mode none (inference only): backward is refused"},
    };
    for (const auto& c : cases) {
        auto r = capsule_tool(c.args);
        EXPECT_EQ(r.code, static_cast<int>(c.code)) << c.args << "\n" << r.out;
        EXPECT_TRUE(contains(r.out, c.says)) << c.args << "\n" << r.out;
    }
    fs::remove_all(dir);
}

TEST(Cli, GateRejectionExits4WithFailuresInJson) {
    auto dir = temp_dir("strict");
    std::ofstream(dir / "strict.json") << R"({"name": "strict_cpu", "base": "checked_cpu", "acceptance_policy": "strict"})";
    auto r = capsule_tool("--profile-file " + (dir / "strict.json").string() + " plan --profile strict_cpu --ops relu --json");
    EXPECT_EQ(r.code, 4) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["status"], "rejected");
    ASSERT_EQ(j["failures"].size(), 2u);
    EXPECT_EQ(j["failures"][0]["kind"], "runtime-guard-evidence");
    EXPECT_EQ(j["failures"][0]["obligations"][0]["obligation"], "shape");
    EXPECT_EQ(j["failures"][0]["obligations"][0]["disposition"], "guarded");
    EXPECT_EQ(j["failures"][1]["kind"], "test-evidence");
    fs::remove_all(dir);
}

TEST(Cli, BadInputExits2) {
    EXPECT_EQ(capsule_tool("plan --ops relu,notanop").code, 2);
    EXPECT_EQ(capsule_tool("plan --profile no_such_profile --ops relu").code, 2);
    EXPECT_EQ(capsule_tool("plan /nonexistent/graph.json").code, 2);
    EXPECT_EQ(capsule_tool("plan").code, 2);
    EXPECT_EQ(capsule_tool("frobnicate").code, 2);
    auto dir = temp_dir("badgraph");
    std::ofstream(dir / "g.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [{"id": 0, "op": "input", "shape": [2]}, {"id": 1, "op": "relu", "parents": [5], "shape": [2]}], "outputs": [1]})";
    auto r = capsule_tool("plan " + (dir / "g.json").string());
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "node 1 (relu)")) << r.out;
    fs::remove_all(dir);
}

TEST(Cli, ProfileFilesCannotRedefineProfilesAndPluginPathsMustExist) {
    auto dir = temp_dir("dupe");
    std::ofstream(dir / "p.json") << R"({"name": "checked_cpu", "base": "checked_cpu", "lowering_mode": "singleton"})";
    auto r = capsule_tool("--profile-file " + (dir / "p.json").string() + " profiles");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "duplicate profile name 'checked_cpu'")) << r.out;
    // The same file through --profile: refused too, not reported as the built-in checked_cpu.
    auto direct = capsule_tool("plan --profile " + (dir / "p.json").string() + " --ops relu");
    EXPECT_EQ(direct.code, 2) << direct.out;
    EXPECT_TRUE(contains(direct.out, "is named 'checked_cpu', the name of another profile")) << direct.out;
    auto missing = capsule_tool("--plugin-path /nonexistent/plugins plugins");
    EXPECT_EQ(missing.code, 2) << missing.out;
    EXPECT_TRUE(contains(missing.out, "/nonexistent/plugins: no such file or directory")) << missing.out;
    fs::remove_all(dir);
}

TEST(Cli, ListingsInTextAndJson) {
    // Without nvcc the CUDA plugin's library is not built: its manifest is then a failed plugin,
    // and `capsule plugins` says so with exit code 1.
    const bool cuda_built = fs::exists(fs::path(CAPSULE_PLUGIN_DIR) / "libcapsule_native_cuda.so");
    for (const std::string flags : {"", " --hashes", " --probe"}) {
        const bool probe = flags == " --probe";
        auto plugins = capsule_tool("plugins --json" + flags);
        ASSERT_EQ(plugins.code, cuda_built ? 0 : 1) << plugins.out;
        auto j = nlohmann::json::parse(plugins.out);
        bool reference_seen = false, metal_stub = false;
        for (const auto& p : j) {
            if (p["name"] == "reference") {
                reference_seen = true;
                EXPECT_EQ(p["status"], probe ? "loaded" : "available") << plugins.out;
                // Libraries are read (hashed) only when asked for: --hashes, or --probe.
                if (flags.empty()) {
                    EXPECT_TRUE(p["sha256"].is_null()) << plugins.out;
                } else {
                    EXPECT_EQ(p["sha256"], capsule_tool_raw("sha256sum '" + p["library_path"].get<std::string>() + "'").out.substr(0, 64));
                }
                if (probe) EXPECT_EQ(p["probe"]["usable"], true);
                else EXPECT_TRUE(p["probe"].is_null());
            }
            if (p["name"] == "metal") metal_stub = p["status"] == "stub";
        }
        EXPECT_TRUE(reference_seen) << plugins.out;
        EXPECT_TRUE(metal_stub) << plugins.out;
    }
    auto text = capsule_tool("plugins");
    EXPECT_TRUE(contains(text.out, "metal 0.1.0 abi=1.0 device=metal library=none capsules=0 status=stub")) << text.out;

    auto caps = capsule_tool("capsules --profile libtorch_forward_cuda --json");
    ASSERT_EQ(caps.code, 0);
    bool saw_sdpa = false;
    for (const auto& c : nlohmann::json::parse(caps.out)) saw_sdpa |= c["name"] == "libtorch.sdpa_forward";
    EXPECT_TRUE(saw_sdpa);
    EXPECT_TRUE(contains(capsule_tool("capsules").out,
                         "reference.relu op=relu provider=reference device=cpu trust=checked vjp=torchlean-tape runtime=eager shape=guarded,layout=guarded,value=tested,vjp=tested"));

    auto profiles = capsule_tool("profiles --json");
    ASSERT_EQ(profiles.code, 0);
    EXPECT_EQ(nlohmann::json::parse(profiles.out).size(), builtin_profiles().size());
}

// Listing and planning read manifests only: a plugin whose probe crashes or hangs cannot take
// them down; `plugins --probe` runs each library in a child process and reports what happened.
TEST(Cli, LazyLoadingKeepsListingAndPlanningAwayFromPluginCode) {
    const std::string crash = std::string(CAPSULE_FIXTURE_PLUGIN_DIR) + "/fixture_probe_crash";
    const std::string hang = std::string(CAPSULE_FIXTURE_PLUGIN_DIR) + "/fixture_probe_hang";
    const std::string paths = " --plugin-path " + crash + " --plugin-path " + hang;
    for (const std::string command : {"profiles", "plan --profile checked_cpu --ops relu", "capsules", "plugins"}) {
        auto r = capsule_tool(command + paths);  // global options after the subcommand
        EXPECT_NE(r.code, 139) << command << "\n" << r.out;
        EXPECT_TRUE(r.code == 0 || (command == "plugins" && r.code == 1)) << command << "\n" << r.out;
    }
    auto listed = capsule_tool("plugins" + paths);
    EXPECT_TRUE(contains(listed.out, "fixture_probe_crash 1.0.0 abi=1.1 device=cpu library=libfixture_probe_crash.so capsules=2 status=available")) << listed.out;
    // 5 s: under AddressSanitizer on a busy machine, reporting the crash alone took over 1 s.
    auto probed = capsule_tool("plugins --probe --probe-timeout 5" + paths);
    EXPECT_EQ(probed.code, 1) << probed.out;
    EXPECT_TRUE(contains(probed.out, "fixture_probe_crash 1.0.0 abi=1.1 device=cpu library=libfixture_probe_crash.so "
                                     "capsules=2 status=failed: crashed (signal ")) << probed.out;
    EXPECT_TRUE(contains(probed.out, "status=failed: timed out after 5 s while loading or probing")) << probed.out;
    EXPECT_TRUE(contains(probed.out, "reference 0.1.0 abi=1.1 device=cpu library=libcapsule_reference.so capsules=")) << probed.out;
    EXPECT_TRUE(contains(capsule_tool("plugins --help").out, "exits 1 when any plugin failed"));
}

TEST(Cli, VersionAndGlobalOptionsOnEitherSideOfTheSubcommand) {
    auto version = capsule_tool("--version");
    EXPECT_EQ(version.code, 0);
    EXPECT_TRUE(contains(version.out, "capsule 0.1.0, plugin ABI 1.1")) << version.out;
    const std::string profile_file = " --profile-file " + kSource + "/examples/plugin/example_cpu.json";
    for (const std::string& cmd : {"--threads 1" + profile_file + " plan --profile example_cpu --ops relu",
                                  "plan --profile example_cpu --ops relu --threads 1" + profile_file}) {
        auto r = capsule_tool(cmd);
        EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
        EXPECT_TRUE(contains(r.out, "profile example_cpu:")) << r.out;
    }
    EXPECT_EQ(capsule_tool("plan --ops relu --threads -1").code, 2);
}

// Logs go to stderr, so --json output parses even when the tool warns.
TEST(Cli, JsonOutputParsesWhenTheToolWarns) {
    const std::string tool = "CAPSULE_PLUGIN_PATH=/nonexistent " + std::string(CAPSULE_TOOL) +
                             " plan --json --profile checked_cpu --ops relu";
    auto stdout_only = capsule_tool_raw(tool + " 2>/dev/null");
    EXPECT_EQ(stdout_only.code, 0);
    EXPECT_EQ(nlohmann::json::parse(stdout_only.out)["status"], "accepted") << stdout_only.out;
    auto stderr_only = capsule_tool_raw(tool + " 2>&1 >/dev/null");
    EXPECT_TRUE(contains(stderr_only.out, "CAPSULE_PLUGIN_PATH entry /nonexistent does not exist"))
        << stderr_only.out;
}

// A plugin refused at discovery is named when planning needs what it declares; a library that
// fails when a session opens it is named with the loader's reason (exit 5).
TEST(Cli, FailedPluginsAreNamedWhenPlanningOrRunningNeedsThem) {
    auto dir = temp_dir("failed-plugins");
    std::ofstream(dir / "ext.json") << R"({"name": "ext_only", "base": "checked_linux_x86_64_cpu",
        "config": {"backend": "only:external"}, "target": {"features": ["external-provider"]}})";
    const std::string fixtures = CAPSULE_FIXTURE_PLUGIN_DIR;
    auto plan = capsule_tool("plan --profile " + (dir / "ext.json").string() + " --ops relu --plugin-path " +
                             fixtures + "/fixture_manifest_abi2");
    EXPECT_EQ(plan.code, 3) << plan.out;
    EXPECT_TRUE(contains(plan.out, "plugin fixture_manifest_abi2 failed to load (it declares op relu): "
                                   "ABI version mismatch: plugin declares 2.0, host implements 1.1")) << plan.out;

    std::ofstream(dir / "g.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [3]}], "outputs": [1]})";
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {3}, {1, -2, 3}));
    auto run = capsule_tool("run --profile " + (dir / "ext.json").string() + " " + (dir / "g.json").string() +
                            " --input x=" + (dir / "x.npy").string() + " --output-dir " + (dir / "out").string() +
                            " --plugin-path " + fixtures + "/fixture_missing_dependency");
    EXPECT_EQ(run.code, 5) << run.out;
    EXPECT_TRUE(contains(run.out, "plugin fixture_missing_dependency failed to load: cannot load ")) << run.out;
    EXPECT_TRUE(contains(run.out, "libfixture_dep.so: cannot open shared object file")) << run.out;
    fs::remove_all(dir);
}

// A graph that needs no kernel, under a profile whose device is unusable here: exit 5, never a
// crash.
TEST(Cli, GraphWithoutKernelsUnderUnusableDeviceExits5) {
    auto dir = temp_dir("identity");
    std::ofstream(dir / "id.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]}], "outputs": [0]})";
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {3}, {1, 2, 3}));
    auto rocm = capsule_tool("run --profile future_rocm " + (dir / "id.json").string() + " --input x=" +
                             (dir / "x.npy").string() + " --output-dir " + (dir / "out").string());
    EXPECT_EQ(rocm.code, 5) << rocm.out;
    EXPECT_TRUE(contains(rocm.out, "no usable plugin serves device rocm")) << rocm.out;
    auto cuda = capsule_tool("run --profile checked_cuda " + (dir / "id.json").string() + " --input x=" +
                             (dir / "x.npy").string() + " --output-dir " + (dir / "out").string());
    EXPECT_TRUE(cuda.code == 5 || cuda.code == 0) << cuda.out;  // 0 only where a GPU works
    EXPECT_TRUE(cuda.code == 0 || contains(cuda.out, "native_cuda")) << cuda.out;
    fs::remove_all(dir);
}

TEST(Cli, RunWritesOutputsAndProbeFailureExits5) {
    auto dir = temp_dir("run");
    auto graph = R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [2, 3]},
        {"id": 1, "op": "relu", "name": "r", "parents": [0], "shape": [2, 3]},
        {"id": 2, "op": "softmax", "name": "probs", "parents": [1], "attrs": {"axis": 1}, "shape": [2, 3]}],
        "outputs": [2]})";
    std::ofstream(dir / "g.json") << graph;
    write_npy(dir / "x.npy", Tensor::from_values(DType::float32, {2, 3}, {1, -1, 0, 0, 0, 0}));
    auto r = capsule_tool("run --profile checked_cpu " + (dir / "g.json").string() + " --input x=" +
                          (dir / "x.npy").string() + " --output-dir " + (dir / "out").string());
    ASSERT_EQ(r.code, 0) << r.out;
    auto probs = read_npy(dir / "out" / "probs.npy").to_doubles();
    const double e = std::exp(1.0);
    const std::vector<double> want{e / (e + 2), 1 / (e + 2), 1 / (e + 2), 1.0 / 3, 1.0 / 3, 1.0 / 3};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(probs[i], want[i], 1e-6);
    // Which code ran: the reference library and its SHA-256, as sha256sum computes it.
    const auto library = (fs::path(CAPSULE_PLUGIN_DIR) / "libcapsule_reference.so").string();
    auto hash = capsule_tool_raw("sha256sum '" + library + "'").out.substr(0, 64);
    EXPECT_TRUE(contains(r.out, "plugin reference 0.1.0: " + fs::canonical(library).string() + " sha256 " + hash))
        << r.out;

    // checked_cuda on a machine without a usable GPU: the CUDA plugin loads, its probe says why
    // it cannot run, and the tool exits 5. (Without nvcc the plugin is not built: planning fails.)
    auto cuda = capsule_tool("run --profile checked_cuda " + (dir / "g.json").string() + " --input x=" +
                             (dir / "x.npy").string() + " --output-dir " + (dir / "out").string());
    if (!fs::exists(fs::path(CAPSULE_PLUGIN_DIR) / "libcapsule_native_cuda.so")) {
        EXPECT_EQ(cuda.code, 3) << cuda.out;
    } else if (cuda.code != 0) {
        EXPECT_EQ(cuda.code, 5) << cuda.out;
        EXPECT_TRUE(contains(cuda.out, "cannot run here: plugin native_cuda cannot run on this machine")) << cuda.out;
    } else {
        auto gpu = read_npy(dir / "out" / "probs.npy").to_doubles();  // a GPU is present: same numbers
        for (int i = 0; i < 6; ++i) EXPECT_NEAR(gpu[i], want[i], 1e-6);
    }

    // By id as well as by name.
    auto by_id = capsule_tool("run " + (dir / "g.json").string() + " --input 0=" + (dir / "x.npy").string() +
                              " --output-dir " + (dir / "out").string());
    EXPECT_EQ(by_id.code, 0) << by_id.out;

    // Output names from an untrusted graph never leave --output-dir; clashing names are refused.
    std::ofstream(dir / "escape.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [2, 3]},
        {"id": 1, "op": "relu", "name": "../../escaped", "parents": [0], "shape": [2, 3]},
        {"id": 2, "op": "abs", "parents": [1], "shape": [2, 3]},
        {"id": 3, "op": "abs", "name": "output_2", "parents": [1], "shape": [2, 3]}],
        "outputs": [1, 2]})";
    auto escape = capsule_tool("run " + (dir / "escape.json").string() + " --input x=" + (dir / "x.npy").string() +
                               " --output-dir " + (dir / "o2").string());
    EXPECT_EQ(escape.code, 0) << escape.out;
    EXPECT_TRUE(fs::exists(dir / "o2" / ".._.._escaped.npy")) << escape.out;
    EXPECT_FALSE(fs::exists(dir.parent_path() / "escaped.npy"));
    // An unnamed output is output_<id>, suffixed when a node already has that name.
    std::ofstream(dir / "generated.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [2, 3]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [2, 3]},
        {"id": 2, "op": "neg", "name": "output_1", "parents": [0], "shape": [2, 3]}],
        "outputs": [1, 2]})";
    auto generated = capsule_tool("run " + (dir / "generated.json").string() + " --input x=" +
                                  (dir / "x.npy").string() + " --output-dir " + (dir / "o3").string());
    ASSERT_EQ(generated.code, 0) << generated.out;
    EXPECT_EQ(read_npy(dir / "o3" / "output_1_1.npy").to_doubles(), (std::vector<double>{1, 0, 0, 0, 0, 0}));
    EXPECT_EQ(read_npy(dir / "o3" / "output_1.npy").to_doubles(), (std::vector<double>{-1, 1, -0.0, -0.0, -0.0, -0.0}));
    // Names that map to one file name are refused before anything is written.
    std::ofstream(dir / "clash.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [2, 3]},
        {"id": 1, "op": "relu", "name": "a/b", "parents": [0], "shape": [2, 3]},
        {"id": 2, "op": "abs", "name": "a_b", "parents": [0], "shape": [2, 3]}],
        "outputs": [1, 2]})";
    auto clash = capsule_tool("run " + (dir / "clash.json").string() + " --input x=" + (dir / "x.npy").string() +
                              " --output-dir " + (dir / "o4").string());
    EXPECT_EQ(clash.code, 2) << clash.out;
    EXPECT_TRUE(contains(clash.out, "would both be written to a_b.npy")) << clash.out;
    EXPECT_FALSE(fs::exists(dir / "o4" / "a_b.npy"));

    auto missing = capsule_tool("run " + (dir / "g.json").string() + " --output-dir " + (dir / "out").string());
    EXPECT_EQ(missing.code, 2) << missing.out;
    EXPECT_TRUE(contains(missing.out, "missing input 'x'")) << missing.out;
    fs::remove_all(dir);
}

// `capsule train` on the first 512 Fashion-MNIST images: plan report, plain progress lines (not
// a terminal), per-epoch figures, and a saved model that `capsule eval`, `capsule plan` and
// `capsule run` accept.
TEST(Cli, TrainSavesAModelThatEvalPlanAndRunAccept) {
    const auto dir = temp_dir("train");
    const auto model = (dir / "model.json").string();
    auto r = capsule_tool("train --model mlp --epochs 2 --batch-size 64 --train-limit 512 --seed 1 --output " + model);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "  cross_entropy: reference.cross_entropy provider=reference")) << r.out;
    EXPECT_TRUE(contains(r.out, "  sgd: reference.sgd provider=reference")) << r.out;
    EXPECT_TRUE(contains(r.out, "epoch 1/2: 100% (8/8 batches) running loss")) << r.out;
    EXPECT_TRUE(contains(r.out, "epoch 2/2: train loss ")) << r.out;
    EXPECT_FALSE(contains(r.out, "\r")) << "no carriage returns when stdout is not a terminal";
    auto at = r.out.rfind("test accuracy: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string accuracy = r.out.substr(at + 15, r.out.find('%', at) - at - 15);
    EXPECT_GT(std::stod(accuracy), 30.0) << "512 images, 2 epochs: far above chance (10%)";
    ASSERT_TRUE(fs::exists(dir / "model.safetensors"));

    auto e = capsule_tool("eval " + model);
    EXPECT_EQ(e.code, 0) << e.out;
    EXPECT_TRUE(contains(e.out, "test accuracy: " + accuracy + "% (")) << e.out << "\nvs " << accuracy;

    auto p = capsule_tool("plan --profile checked_cpu " + model);
    EXPECT_EQ(p.code, 0) << p.out;
    auto images = Tensor::zeros(DType::float32, {64, 1, 28, 28});
    write_npy(dir / "images.npy", images);
    auto run = capsule_tool("run --quiet " + model + " --input image=" + (dir / "images.npy").string() +
                            " --output-dir " + dir.string());
    EXPECT_EQ(run.code, 0) << run.out;
    EXPECT_EQ(read_npy(dir / "fc3.npy").shape(), (Shape{64, 10}));
    fs::remove_all(dir);
}

TEST(Cli, TrainRefusesAnInferenceOnlyProfileAndMissingData) {
    const auto dir = temp_dir("train-refusals");
    const auto profile = dir / "inference.json";
    std::ofstream(profile) << R"({"name": "inference_cpu", "base": "checked_cpu", "config": {"vjp_mode": "none"}})";
    auto r = capsule_tool("train --profile " + profile.string() + " --epochs 1 --train-limit 64 --output " +
                          (dir / "m.json").string());
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "capsule: error: profile inference_cpu has VJP mode none (inference only): backward is refused")) << r.out;
    auto m = capsule_tool("train --data " + dir.string() + " --epochs 1");
    EXPECT_EQ(m.code, 2) << m.out;
    EXPECT_TRUE(contains(m.out, "train-images-idx3-ubyte.gz: no such file")) << m.out;
    fs::remove_all(dir);
}

// The ONNX conformance driver must be able to fail: a case whose expected output was altered is
// "failed" (exit 1), and an expected-passing case that does not pass is a regression.
TEST(Cli, OnnxTestClassifiesPassedFailedAndRegressions) {
    const fs::path relu = "/usr/share/libonnx-testdata/data/node/test_relu";
    ASSERT_TRUE(fs::exists(relu / "model.onnx")) << "tools/setup.sh installs libonnx-testdata";
    auto ok = capsule_tool("onnx-test " + relu.string());
    EXPECT_EQ(ok.code, 0) << ok.out;
    EXPECT_TRUE(contains(ok.out, "1 cases: 1 passed, 0 failed, 0 unsupported")) << ok.out;

    const auto dir = temp_dir("onnx-test");
    const auto broken = dir / "test_relu";
    fs::copy(relu, broken, fs::copy_options::recursive);
    const auto out_pb = broken / "test_data_set_0" / "output_0.pb";
    fs::permissions(out_pb, fs::perms::owner_write, fs::perm_options::add);
    {
        std::fstream f(out_pb, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-1, std::ios::end);
        char last = 0;
        f.get(last);
        f.seekp(-1, std::ios::end);
        f.put(char(last ^ 0x40));  // the last float's exponent byte: a different value
    }
    auto bad = capsule_tool("onnx-test --json-report " + (dir / "report.json").string() + " " + broken.string());
    EXPECT_EQ(bad.code, 1) << bad.out;
    EXPECT_TRUE(contains(bad.out, "1 cases: 0 passed, 1 failed, 0 unsupported")) << bad.out;
    EXPECT_TRUE(contains(bad.out, "wrong values") || contains(bad.out, "output 0")) << bad.out;
    std::ifstream report(dir / "report.json");
    ASSERT_TRUE(report);
    EXPECT_NO_THROW(nlohmann::json::parse(report));

    EXPECT_TRUE(contains(bad.out, "(1 of 60 elements outside rtol 0.001 atol 1e-07)")) << bad.out;
    // Case ids are <category>/<case>: here the temporary directory's name stands for the category.
    std::ofstream(dir / "expected.txt") << dir.filename().string() << "/test_relu\n";
    auto regression = capsule_tool("onnx-test --expect " + (dir / "expected.txt").string() + " " + broken.string());
    EXPECT_EQ(regression.code, 1) << regression.out;
    EXPECT_TRUE(contains(regression.out, "1 regression(s)")) << regression.out;
    fs::remove_all(dir);
}

TEST(Cli, OversizedShapesAndRepeatedKeysExit2WithTheCauseNamed) {
    const auto dir = temp_dir("oversized");
    // rand_uniform of 2^62 float32 elements: 2^64 bytes, which must not wrap to a 0-byte buffer.
    std::ofstream(dir / "big.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [)"
                                       R"({"id": 0, "op": "rand_uniform", "attrs": {"shape": [4611686018427387904]}, "shape": [4611686018427387904]}],)"
                                       R"( "outputs": [0]})";
    auto r = capsule_tool("run --output-dir " + (dir / "out").string() + " " + (dir / "big.json").string());
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, (dir / "big.json").string() + ": node 0 (rand_uniform): declared shape "
                                "[4611686018427387904] (4611686018427387904 elements of 4 bytes) takes more "
                                "than 2^63-1 bytes")) << r.out;
    EXPECT_FALSE(fs::exists(dir / "out"));
    // A graph that repeats a key.
    std::ofstream(dir / "dup.json") << R"({"format": "capsule-ir", "version": 1, "nodes": [)"
                                       R"({"id": 0, "op": "input", "name": "x", "shape": [2], "shape": [3]}], "outputs": [0]})";
    r = capsule_tool("plan " + (dir / "dup.json").string());
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, (dir / "dup.json").string() + ": $.nodes[0].shape: duplicate key 'shape'")) << r.out;
    // A profile file with a number out of range.
    std::ofstream(dir / "p.json") << R"({"name": "huge", "base": "checked_cpu", "lowering_mode": 1e400})";
    r = capsule_tool("--profile-file " + (dir / "p.json").string() + " plan --profile huge --ops relu");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, (dir / "p.json").string() + ": $.lowering_mode: number overflow: '1e400'")) << r.out;
    fs::remove_all(dir);
}

// --json output always parses: a failure is an error object on stdout as well as a line on stderr.
TEST(Cli, JsonFailuresAreErrorObjectsOnStdout) {
    const auto dir = temp_dir("json-errors");
    std::ofstream(dir / "garbage.onnx") << "not a model";
    for (const std::string& args : {"plan " + (dir / "garbage.onnx").string() + " --json",
                                    std::string("plan --profile no_such_profile --ops relu --json"),
                                    std::string("capsules --json --no-such-option")}) {
        auto r = capsule_tool_raw(std::string(CAPSULE_TOOL) + " " + args + " 2>/dev/null");
        EXPECT_EQ(r.code, 2) << args;
        const auto doc = nlohmann::json::parse(r.out, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << args << ": " << r.out;
        EXPECT_EQ(doc["error"]["exit_code"], 2) << r.out;
        EXPECT_FALSE(doc["error"]["message"].get<std::string>().empty()) << r.out;
    }
    fs::remove_all(dir);
}

// `prefer:onednn` may fall back to other providers, but never silently: a refused oneDNN plugin is
// named on stderr while the plan still succeeds on reference capsules.
TEST(Cli, PreferredProviderThatFailedToLoadIsNamed) {
    const fs::path plugins(CAPSULE_PLUGIN_DIR);
    if (!fs::exists(plugins / "libcapsule_onednn.so")) GTEST_SKIP() << "no oneDNN plugin in this build";
    const auto dir = temp_dir("prefer");
    const auto pins = dir / "pins.sha256";  // the reference library only
    std::ofstream(pins) << capsule_tool_raw("sha256sum '" + (plugins / "libcapsule_reference.so").string() + "'").out;
    auto r = capsule_tool("plan --profile onednn_cpu --ops relu --trusted-hashes " + pins.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "relu: reference.relu")) << r.out;
    EXPECT_TRUE(contains(r.out, "profile onednn_cpu prefers provider onednn, but plugin onednn failed to load (library "))
        << r.out;
    EXPECT_TRUE(contains(r.out, "not among the pinned trusted hashes); its ops run on other providers")) << r.out;
    auto fine = capsule_tool("plan --profile onednn_cpu --ops relu");
    EXPECT_FALSE(contains(fine.out, "failed to load")) << fine.out;
    fs::remove_all(dir);
}

// What ONNX import computed on the host instead of a capsule is listed in the plan, text and JSON.
TEST(Cli, PlanListsWhatImportFoldedAway) {
    const std::string model = std::string(CAPSULE_SOURCE_DIR) + "/tests/data/models/mobilenet_v2/model.onnx";
    auto text = capsule_tool("plan --profile checked_cpu " + model);
    EXPECT_EQ(text.code, 0) << text.out;
    EXPECT_TRUE(contains(text.out, "folded at import (computed on the host, not by a capsule): ")) << text.out;
    EXPECT_TRUE(contains(text.out, "  Identity 'Identity_0' -> onnx::Conv_686 float32[960]")) << text.out;
    auto json = capsule_tool_raw(std::string(CAPSULE_TOOL) + " plan --json --profile checked_cpu " + model);
    auto doc = nlohmann::json::parse(json.out);
    ASSERT_TRUE(doc["folded"].is_array());
    EXPECT_EQ(doc["folded"][0], "Identity 'Identity_0' -> onnx::Conv_686 float32[960]");
}
