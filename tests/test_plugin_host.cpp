// The plugin host against deliberately broken fixture plugins (tests/fixtures/plugins), the
// README's example plugin, pinning, permissions, and sessions that must refuse to run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include "capsule/plugin.hpp"
#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = CAPSULE_FIXTURE_PLUGIN_DIR;

PluginHost host_for(const std::vector<fs::path>& dirs, const PluginHostOptions& options = {}) {
    PluginSearchPath search;
    search.entries = dirs;
    return PluginHost::discover(search, options);
}

const PluginRecord& only_record(const PluginHost& host) {
    EXPECT_EQ(host.plugins().size(), 1u);
    return host.plugins().at(0);
}

PluginHostOptions eager() {
    PluginHostOptions o;
    o.load = LoadPolicy::eager;
    return o;
}

/// Why a fixture is refused: at discovery (manifest-level checks) or when its library is opened.
std::string failure_of(const std::string& fixture) {
    auto host = host_for({kFixtures / fixture});
    const auto& r = only_record(host);
    if (r.status == PluginStatus::failed) return r.failure;
    EXPECT_EQ(r.status, PluginStatus::available) << fixture;
    auto outcome = host.library(r);
    EXPECT_FALSE(outcome.plugin) << fixture;
    // Eager loading reports the same reason in the record.
    auto eager_host = host_for({kFixtures / fixture}, eager());
    EXPECT_EQ(only_record(eager_host).failure, outcome.failure) << fixture;
    return outcome.failure;
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

/// A profile that admits the fixtures' `external` CPU capsules.
BackendProfile external_cpu_profile() {
    auto p = BackendProfile::checked_cpu();
    p.name = "external_cpu";
    p.config.backend = BackendPreference::only(Provider::external);
    p.target.features.push_back(BuildFeature::external_provider);
    return p;
}

Graph unary_graph(const std::string& op) {
    return parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [4]},
        {"id": 1, "op": ")" + op + R"(", "name": "y", "parents": [0], "shape": [4]}],
        "outputs": [1]})");
}

std::string shell_sha256(const fs::path& file) {
    std::string cmd = "sha256sum '" + file.string() + "'";
    FILE* pipe = popen(cmd.c_str(), "r");
    char buffer[128] = {};
    std::string out = pipe && fgets(buffer, sizeof buffer, pipe) ? buffer : "";
    if (pipe) pclose(pipe);
    return out.substr(0, 64);
}

struct TempCopy {
    fs::path dir;
    explicit TempCopy(const std::string& fixture) {
        dir = fs::temp_directory_path() / ("capsule-host-" + fixture + "-" +
                                           std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
        fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                 fs::perms::others_read | fs::perms::others_exec);
        for (const auto& e : fs::directory_iterator(kFixtures / fixture))
            fs::copy(e.path(), dir / e.path().filename());
    }
    ~TempCopy() { fs::remove_all(dir); }
};

}  // namespace

TEST(PluginHost, DiscoveryIsLazyAndLoadingHappensOnFirstUse) {
    auto host = host_for({kFixtures / "fixture_good"});
    const auto& r = only_record(host);
    ASSERT_EQ(r.status, PluginStatus::available) << r.failure;
    ASSERT_TRUE(r.library_path);
    EXPECT_TRUE(r.sha256.empty());  // not read at discovery without pinned hashes
    EXPECT_EQ(host.library_sha256(r), shell_sha256(*r.library_path));
    EXPECT_FALSE(r.probe);  // nothing was run
    EXPECT_EQ(host.registry("default").capsules.size(), 2u);
    auto outcome = host.library(r);
    ASSERT_TRUE(outcome.plugin) << outcome.failure;
    EXPECT_EQ(outcome.plugin->sha256, shell_sha256(*r.library_path));
    EXPECT_NE(outcome.plugin->kernel("fixture_good.relu"), nullptr);
    EXPECT_EQ(host.library(r).plugin, outcome.plugin);  // opened once
    EXPECT_TRUE(outcome.plugin->probe().usable);

    auto eager_host = host_for({kFixtures / "fixture_good"}, eager());
    const auto& e = only_record(eager_host);
    ASSERT_EQ(e.status, PluginStatus::loaded) << e.failure;
    ASSERT_TRUE(e.probe);
    EXPECT_TRUE(e.probe->usable);
}

TEST(PluginHost, NewerMinorAbiIsAccepted) {
    auto host = host_for({kFixtures / "fixture_newer_minor"});
    auto outcome = host.library(only_record(host));
    EXPECT_TRUE(outcome.plugin) << outcome.failure;
}

TEST(PluginHost, EveryFailureModeIsReportedWithItsReason) {
    EXPECT_EQ(failure_of("fixture_abi_major"),
              "ABI version mismatch: library implements 2.0, host implements 1.1 (major versions must match)");
    EXPECT_EQ(failure_of("fixture_manifest_abi2"),
              "ABI version mismatch: plugin declares 2.0, host implements 1.1 (major versions must match)");
    EXPECT_TRUE(contains(failure_of("fixture_no_entry"), "has no entry symbol capsule_plugin_entry"));
    EXPECT_EQ(failure_of("fixture_undeclared"),
              "library implements capsule 'fixture_undeclared.gelu' that the manifest does not declare");
    EXPECT_EQ(failure_of("fixture_missing_kernel"),
              "manifest marks capsule 'fixture_missing_kernel.abs' eager but the library has no kernel for it");
    EXPECT_EQ(failure_of("fixture_init_error"),
              "init failed: fixture init failed: license server unreachable (code 5)");
    EXPECT_EQ(failure_of("fixture_refuse_host"), "plugin refused host ABI 1.1 (entry returned null)");
    EXPECT_EQ(failure_of("fixture_name_mismatch"),
              "library names itself 'someone_else', manifest says 'fixture_name_mismatch'");
    EXPECT_TRUE(contains(failure_of("fixture_short_table"), "ABI 1.0 needs at least"));
    EXPECT_EQ(failure_of("fixture_zero_entry_size"),
              "plugin table states kernel_entry_size 0, less than ABI 1.0's 32 bytes (set it to "
              "sizeof(capsule_kernel))");
    // The loader's own message survives: which dependency could not be found, and nothing else
    // (no errno text appended by the exception type).
    auto dep = failure_of("fixture_missing_dependency");
    EXPECT_TRUE(contains(dep, "cannot load")) << dep;
    EXPECT_TRUE(contains(dep, "libfixture_dep.so: cannot open shared object file: No such file or directory")) << dep;
    EXPECT_FALSE(contains(dep, "Bad file descriptor")) << dep;
    EXPECT_FALSE(contains(dep, "boost::dll")) << dep;
    auto bad = failure_of("bad_json");
    EXPECT_TRUE(contains(bad, "malformed JSON")) << bad;
}

// Arrays of versioned structs carry their element size: a 1.0 plugin (table without
// kernel_entry_size, 1.0 entries) and a plugin of a later minor whose kernel entries grew both load
// and run.
TEST(PluginHost, KernelEntriesAreReadWithTheTablesEntrySize) {
    for (const std::string fixture : {"fixture_abi_1_0", "fixture_wide_entries"}) {
        auto host = host_for({kFixtures / fixture});
        auto outcome = host.library(only_record(host));
        ASSERT_TRUE(outcome.plugin) << fixture << ": " << outcome.failure;
        ASSERT_EQ(outcome.plugin->kernels.size(), 2u) << fixture;
        EXPECT_EQ(std::string(outcome.plugin->kernels[1].capsule_name), fixture + ".abs");
        auto profile = external_cpu_profile();
        auto graph = unary_graph("relu");
        auto accepted = profile.accept_graph(host, graph);
        ASSERT_TRUE(accepted.accepted) << fixture;
        auto session = Session::create(profile, *accepted.accepted, graph, host, {});
        auto out = session.run({{"x", Tensor::from_values(DType::float32, {4}, {-1, 2, -3, 0.5})}});
        EXPECT_EQ(out.at(0).to_doubles(), (std::vector<double>{0, 2, 0, 0.5})) << fixture;
        auto abs_graph = unary_graph("abs");
        auto abs_plan = profile.accept_graph(host, abs_graph);
        auto abs_session = Session::create(profile, *abs_plan.accepted, abs_graph, host, {});
        EXPECT_EQ(error_of([&] { abs_session.run({{"x", Tensor::zeros(DType::float32, {4})}}); }),
                  "node 1 (abs) failed in capsule " + fixture + ".abs of plugin " + fixture +
                      ": fixture kernel failure: injected (code 1)");
    }
}

// ABI 1.1 prepared kernels: prepare runs once per node at session creation with shapes, no data,
// and the thread count; every forward call of the node receives the state.
TEST(Session, PreparedKernelsReceiveTheirState) {
    auto host = host_for({kFixtures / "fixture_prepared"});
    auto profile = external_cpu_profile();
    auto graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [4]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [4]},
        {"id": 2, "op": "relu", "parents": [1], "shape": [4]}], "outputs": [2]})");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    SessionOptions options;
    options.threads = 3;
    auto session = Session::create(profile, *accepted.accepted, graph, host, {}, options);
    for (int run = 0; run < 3; ++run) {
        auto out = session.run({{"x", Tensor::from_values(DType::float32, {4}, {-1, 2, -3, 0.25})}});
        EXPECT_EQ(out.at(0).to_doubles(), (std::vector<double>{0, 2, 0, 0.25}));
    }
}

// ABI 1.1 compiled groups: the host hands a run of consecutive nodes of one plugin to its
// compile function once, with each value's role, and runs the executable in their place.
namespace {

Graph relu_chain(bool expose_middle) {
    return parse_graph(std::string(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [4]},
        {"id": 1, "op": "relu", "parents": [0], "shape": [4]},
        {"id": 2, "op": "relu", "parents": [1], "shape": [4]},
        {"id": 3, "op": "relu", "parents": [2], "shape": [4]}], "outputs": [3)") +
                       (expose_middle ? ", 1" : "") + "]}");
}

Session group_session(const PluginHost& host, const Graph& graph, const BackendProfile& profile,
                      bool compile_groups = true) {
    auto accepted = profile.accept_graph(host, graph);
    if (!accepted.accepted) throw std::runtime_error("relu chain rejected");
    SessionOptions options;
    options.compile_groups = compile_groups;
    return Session::create(profile, *accepted.accepted, graph, host, {}, options);
}

const Tensor kChainInput = Tensor::from_values(DType::float32, {4}, {-1, 2, -3, 0.25});

}  // namespace

TEST(CompiledGroups, TheHostPassesValueRolesAndRunsTheExecutable) {
    auto host = host_for({kFixtures / "fixture_groups"});
    const auto profile = external_cpu_profile();
    auto session = group_session(host, relu_chain(false), profile);
    auto groups = session.compiled_groups();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].plugin, "fixture_groups");
    EXPECT_EQ(groups[0].node_ids, (std::vector<std::int64_t>{1, 2, 3}));
    EXPECT_EQ(groups[0].fused, "relu chain of 3 nodes; roles input,internal,internal,output");
    EXPECT_EQ(session.run({{"x", kChainInput}}).at(0).to_doubles(), (std::vector<double>{0, 2, 0, 0.25}));

    // A middle value that is also a graph output must leave the group.
    auto exposed = group_session(host, relu_chain(true), profile);
    ASSERT_EQ(exposed.compiled_groups().size(), 1u);
    EXPECT_EQ(exposed.compiled_groups()[0].fused, "relu chain of 3 nodes; roles input,output,internal,output");
    auto out = exposed.run({{"x", kChainInput}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{0, 2, 0, 0.25}));
}

TEST(CompiledGroups, SingletonLoweringAndTheSessionOptionKeepNodeByNodeCalls) {
    auto host = host_for({kFixtures / "fixture_groups"});
    auto singleton = external_cpu_profile();
    singleton.lowering_mode = LoweringMode::singleton;
    EXPECT_TRUE(group_session(host, relu_chain(false), singleton).compiled_groups().empty());
    auto off = group_session(host, relu_chain(false), external_cpu_profile(), false);
    EXPECT_TRUE(off.compiled_groups().empty());
    EXPECT_EQ(off.run({{"x", kChainInput}}).at(0).to_doubles(), (std::vector<double>{0, 2, 0, 0.25}));
}

TEST(CompiledGroups, AFailingExecutableNamesTheGroupAndThePlugin) {
    auto host = host_for({kFixtures / "fixture_groups_run_fails"});
    auto session = group_session(host, relu_chain(false), external_cpu_profile());
    EXPECT_EQ(error_of([&] { session.run({{"x", kChainInput}}); }),
              "compiled group of nodes 1..3 (relu, relu, relu) failed in plugin fixture_groups_run_fails: "
              "fixture group lost its device queue (code 3)");
}

TEST(CompiledGroups, AMalformedExtensionRefusesThePlugin) {
    EXPECT_EQ(failure_of("fixture_groups_malformed"),
              "compiled-groups extension lacks its function(s): run (compile, run and release are all "
              "required)");
}

TEST(ExternalAutograd, AMalformedOrLoneGroupAutogradExtensionRefusesThePlugin) {
    EXPECT_EQ(failure_of("fixture_autograd_malformed"),
              "group-autograd extension lacks its function(s): backward (record, backward and "
              "release_record are all required)");
    EXPECT_EQ(failure_of("fixture_autograd_alone"),
              "plugin table lists the group-autograd extension without the compiled-groups extension "
              "(external autograd runs compiled groups)");
}

TEST(PluginHost, ProbingInAChildProcessSurvivesCrashesAndHangs) {
    auto host = host_for({kFixtures / "fixture_probe_crash", kFixtures / "fixture_probe_hang",
                          kFixtures / "fixture_good", kFixtures / "fixture_probe_fail",
                          kFixtures / "fixture_init_error"});
    ASSERT_EQ(host.plugins().size(), 5u);
    for (const auto& r : host.plugins()) EXPECT_EQ(r.status, PluginStatus::available) << r.name;
    const std::chrono::milliseconds timeout(1500);
    auto crash = host.probe_isolated(host.plugins()[0], timeout);
    EXPECT_EQ(crash.status, PluginStatus::failed);
    EXPECT_TRUE(contains(crash.failure, "crashed (signal ")) << crash.failure;
    auto hang = host.probe_isolated(host.plugins()[1], timeout);
    EXPECT_EQ(hang.status, PluginStatus::failed);
    EXPECT_EQ(hang.failure, "timed out after 1.5 s while loading or probing");
    auto good = host.probe_isolated(host.plugins()[2], timeout);
    EXPECT_EQ(good.status, PluginStatus::loaded) << good.failure;
    ASSERT_TRUE(good.probe);
    EXPECT_TRUE(good.probe->usable);
    auto unusable = host.probe_isolated(host.plugins()[3], timeout);
    EXPECT_EQ(unusable.status, PluginStatus::loaded);
    ASSERT_TRUE(unusable.probe);
    EXPECT_EQ(unusable.probe->reason, "fixture accelerator not present (slot 0 empty) (code 3)");
    auto init = host.probe_isolated(host.plugins()[4], timeout);
    EXPECT_EQ(init.failure, "init failed: fixture init failed: license server unreachable (code 5)");
    // Nothing was loaded into this process.
    EXPECT_EQ(host.plugins()[2].status, PluginStatus::available);
}

TEST(PluginHost, FailuresDoNotStopOtherPlugins) {
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(kFixtures)) {
        const auto name = e.path().filename().string();
        // Eager loading runs probes in this process: leave out the fixtures whose probe crashes,
        // hangs or throws (ProbingInAChildProcessSurvivesCrashesAndHangs covers them).
        if (e.is_directory() && name != "_hidden_deps" && !name.starts_with("fixture_probe_"))
            dirs.push_back(e.path());
    }
    dirs.push_back(kFixtures / "fixture_probe_fail");
    std::sort(dirs.begin(), dirs.end());
    auto host = host_for(dirs, eager());
    int loaded = 0, failed = 0;
    for (const auto& r : host.plugins()) (r.status == PluginStatus::loaded ? loaded : failed)++;
    // good, newer_minor, probe_fail, abi_1_0, wide_entries, raw_kernels, prepared, groups,
    // groups_run_fails
    EXPECT_EQ(loaded, 9);
    EXPECT_EQ(failed, 15);  // the other fourteen fixtures and bad_json
}

TEST(PluginHost, ProbeThatThrowsIsReportedNotPropagated) {
    auto host = host_for({kFixtures / "fixture_probe_throws"});
    auto outcome = host.library(only_record(host));
    ASSERT_TRUE(outcome.plugin) << outcome.failure;
    auto probe = outcome.plugin->probe();
    EXPECT_FALSE(probe.usable);
    EXPECT_EQ(probe.reason, "probe threw a C++ exception across the C ABI: fixture probe threw through the C ABI");
}

TEST(PluginHost, DuplicatePluginNameIsRefused) {
    TempCopy copy("fixture_good");
    auto host = host_for({kFixtures / "fixture_good", copy.dir});
    ASSERT_EQ(host.plugins().size(), 2u);
    EXPECT_EQ(host.plugins()[0].status, PluginStatus::available);
    EXPECT_TRUE(contains(host.plugins()[1].failure, "duplicate plugin name 'fixture_good'"));
}

TEST(PluginHost, WorldWritableFilesAndDirectoriesAreRefused) {
    {
        TempCopy copy("fixture_good");
        fs::permissions(copy.dir / "libfixture_good.so", fs::perms::others_write, fs::perm_options::add);
        auto r = only_record(host_for({copy.dir}));
        EXPECT_TRUE(contains(r.failure, "libfixture_good.so is world-writable")) << r.failure;
    }
    {
        TempCopy copy("fixture_good");
        fs::permissions(copy.dir, fs::perms::others_write, fs::perm_options::add);
        auto r = only_record(host_for({copy.dir}));
        EXPECT_TRUE(contains(r.failure, "directory " + copy.dir.string() + " (above manifest")) << r.failure;
        EXPECT_TRUE(contains(r.failure, "is world-writable")) << r.failure;
    }
    {
        TempCopy copy("fixture_good");
        fs::permissions(copy.dir / "libfixture_good.so", fs::perms::group_write, fs::perm_options::add);
        auto r = only_record(host_for({copy.dir}));
        EXPECT_TRUE(contains(r.failure, "libfixture_good.so is group-writable")) << r.failure;
    }
}

// Trust on disk follows the resolved file and every ancestor directory; stubs are checked too.
TEST(PluginHost, TrustOnDiskCoversLinksAncestorsOwnersAndStubs) {
    const fs::path open_dir = fs::temp_directory_path() / ("capsule-open-" + std::to_string(::getpid()));
    fs::remove_all(open_dir);
    fs::create_directories(open_dir);
    fs::permissions(open_dir, fs::perms::all);  // world-writable, no sticky bit
    struct Cleanup { fs::path d; ~Cleanup() { fs::remove_all(d); } } cleanup{open_dir};
    {   // A library symlinked to a file in a world-writable directory.
        TempCopy copy("fixture_good");
        fs::rename(copy.dir / "libfixture_good.so", open_dir / "libfixture_good.so");
        fs::create_symlink(open_dir / "libfixture_good.so", copy.dir / "libfixture_good.so");
        auto r = only_record(host_for({copy.dir}));
        EXPECT_EQ(r.status, PluginStatus::failed);
        EXPECT_TRUE(contains(r.failure, "outside its manifest's directory")) << r.failure;
        fs::remove(open_dir / "libfixture_good.so");
    }
    {   // A library renamed by a link inside its own directory is fine.
        TempCopy copy("fixture_good");
        fs::rename(copy.dir / "libfixture_good.so", copy.dir / "libfixture_good.so.1");
        fs::create_symlink("libfixture_good.so.1", copy.dir / "libfixture_good.so");
        auto host = host_for({copy.dir});
        EXPECT_TRUE(host.library(only_record(host)).plugin) << only_record(host).failure;
    }
    {   // A manifest symlinked into a world-writable directory.
        TempCopy copy("fixture_good");
        fs::rename(copy.dir / "fixture_good.capsule.json", open_dir / "fixture_good.capsule.json");
        fs::create_symlink(open_dir / "fixture_good.capsule.json", copy.dir / "fixture_good.capsule.json");
        auto r = only_record(host_for({copy.dir}));
        EXPECT_TRUE(contains(r.failure, "directory " + open_dir.string())) << r.failure;
        EXPECT_TRUE(contains(r.failure, "world-writable")) << r.failure;
        fs::remove(open_dir / "fixture_good.capsule.json");
    }
    {   // A 0755 plugin directory inside a world-writable parent.
        const fs::path inner = open_dir / "plugins";
        fs::create_directories(inner);
        fs::permissions(inner, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                   fs::perms::others_read | fs::perms::others_exec);
        for (const auto& e : fs::directory_iterator(kFixtures / "fixture_good"))
            fs::copy(e.path(), inner / e.path().filename());
        auto r = only_record(host_for({inner}));
        EXPECT_TRUE(contains(r.failure, "directory " + open_dir.string() + " (above manifest")) << r.failure;
        fs::remove_all(inner);
    }
    {   // A stub manifest in a world-writable directory claiming provider reference at priority
        // 1000 does not take over planning.
        std::ofstream(open_dir / "hijack.capsule.json") << R"({"name": "hijack", "version": "1", "abi_version": {"major": 1, "minor": 0},
            "library": null, "device": "cpu", "providers": ["reference"], "registry_modes": ["default"],
            "priority": 1000, "capsules": [{"name": "hijack.relu", "op": "relu", "provider": "reference",
            "device": "cpu", "spec": "torch.relu", "trust": "verified", "vjp": "torchlean-tape", "runtime": "planner-only",
            "contracts": {"shape": {"claim": {"kind": "shape-safety", "op": "relu"}, "evidence": "theorem"},
              "layout": {"claim": {"kind": "layout-compatibility", "op": "relu", "layout": "canonical-tensor"}, "evidence": "theorem"},
              "value": {"claim": {"kind": "value-refinement", "op": "relu", "spec": "torch.relu"}, "evidence": "theorem"},
              "vjp": {"claim": {"kind": "vjp-refinement", "op": "relu", "spec": "torch.relu", "vjp_mode": "torchlean-tape"}, "evidence": "theorem"}}}]})";
        auto host = host_for({CAPSULE_PLUGIN_DIR, open_dir});
        const auto& hijack = host.plugins().back();
        EXPECT_EQ(hijack.name, "hijack");
        EXPECT_EQ(hijack.status, PluginStatus::failed);
        EXPECT_TRUE(contains(hijack.failure, "world-writable")) << hijack.failure;
        auto plan = BackendProfile::checked_cpu().plan_ops(host, std::vector<BackendOp>{BackendOp::relu});
        EXPECT_EQ(plan.nodes.at(0).capsule->name, "reference.relu");
        fs::remove(open_dir / "hijack.capsule.json");
    }
    {   // A library owned by another (non-root) user.
        TempCopy copy("fixture_good");
        if (::geteuid() == 0) {
            ASSERT_EQ(::chown((copy.dir / "libfixture_good.so").c_str(), 4242, 4242), 0);
            auto r = only_record(host_for({copy.dir}));
            EXPECT_TRUE(contains(r.failure, "is owned by uid 4242, neither root nor the current user")) << r.failure;
        } else {
            GTEST_LOG_(INFO) << "not root: cannot give a file to another user; ownership check untested here";
        }
    }
}

// A library is checked before it is mapped: a truncated file (its segments would fault with
// SIGBUS when touched) and a file that is not ELF are refused with the reason.
TEST(PluginHost, TruncatedOrNonElfLibrariesAreRefusedBeforeMapping) {
    TempCopy copy("fixture_good");
    const auto lib = copy.dir / "libfixture_good.so";
    auto host = host_for({copy.dir});
    const auto& record = only_record(host);
    ASSERT_EQ(record.status, PluginStatus::available) << record.failure;
    fs::resize_file(lib, 4096);  // the ELF and program headers stay, the segments are cut
    auto outcome = host.library(record);
    EXPECT_FALSE(outcome.plugin);
    EXPECT_TRUE(contains(outcome.failure, "library " + fs::canonical(lib).string() + " is truncated")) << outcome.failure;

    TempCopy other("fixture_good");
    std::ofstream(other.dir / "libfixture_good.so", std::ios::trunc) << "#!/bin/sh\n";
    auto text_host = host_for({other.dir});
    auto text = text_host.library(only_record(text_host));
    EXPECT_TRUE(contains(text.failure, "is not an ELF file")) << text.failure;
}

TEST(PluginHost, PinnedHashes) {
    auto lib = kFixtures / "fixture_good" / "libfixture_good.so";
    const auto hash = shell_sha256(lib);
    PluginHostOptions pinned;
    pinned.trusted_sha256 = std::set<std::string>{hash};
    EXPECT_EQ(only_record(host_for({kFixtures / "fixture_good"}, pinned)).status, PluginStatus::available);
    PluginHostOptions other;
    other.trusted_sha256 = std::set<std::string>{std::string(64, 'a')};
    auto r = only_record(host_for({kFixtures / "fixture_good"}, other));
    EXPECT_TRUE(contains(r.failure, "not among the pinned trusted hashes")) << r.failure;
    PluginHostOptions none_pinned;
    none_pinned.trusted_sha256 = std::set<std::string>{};  // an empty pin file refuses everything
    EXPECT_EQ(only_record(host_for({kFixtures / "fixture_good"}, none_pinned)).status, PluginStatus::failed);

    // A pinned library that changes between discovery and opening is refused when opened.
    TempCopy copy("fixture_good");
    PluginHostOptions pinned_copy;
    pinned_copy.trusted_sha256 = std::set<std::string>{hash};
    auto host = host_for({copy.dir}, pinned_copy);
    const auto& record = only_record(host);
    ASSERT_EQ(record.status, PluginStatus::available) << record.failure;
    EXPECT_EQ(record.sha256, hash);
    std::ofstream(copy.dir / "libfixture_good.so", std::ios::app) << '\0';
    auto outcome = host.library(record);
    EXPECT_FALSE(outcome.plugin);
    EXPECT_TRUE(contains(outcome.failure, "changed since discovery: SHA-256 was " + hash)) << outcome.failure;

    auto file = fs::temp_directory_path() / ("capsule-pins-" + std::to_string(::getpid()));
    std::ofstream(file) << "# pins\n" << hash << "  libfixture_good.so\n";
    EXPECT_EQ(read_trusted_hashes(file), std::set<std::string>{hash});
    std::ofstream(file) << "not-a-hash file\n";
    auto msg = error_of([&] { read_trusted_hashes(file); });
    EXPECT_TRUE(contains(msg, ":1: expected '<64 hex digits>")) << msg;
    std::ofstream(file) << hash << "  " << std::string(100000, 'x') << "\n";  // long names are fine
    EXPECT_EQ(read_trusted_hashes(file), std::set<std::string>{hash});
    std::ofstream(file) << hash << "0  file\n";  // 65 digits
    EXPECT_TRUE(raises(ErrorCode::input, [&] { read_trusted_hashes(file); }));
    fs::remove(file);
}

TEST(Session, FailingProbeRefusesToRunWithTheReason) {
    auto host = host_for({kFixtures / "fixture_probe_fail"});
    const auto& r = only_record(host);
    ASSERT_EQ(r.status, PluginStatus::available);
    auto probe = host.library(r).plugin->probe();
    EXPECT_FALSE(probe.usable);
    EXPECT_EQ(probe.reason, "fixture accelerator not present (slot 0 empty) (code 3)");
    auto profile = external_cpu_profile();
    auto graph = unary_graph("relu");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    auto msg = error_of([&] { Session::create(profile, *accepted.accepted, graph, host, {}); });
    EXPECT_EQ(msg, "plugin fixture_probe_fail cannot run on this machine: fixture accelerator not "
                   "present (slot 0 empty) (code 3)");
    EXPECT_TRUE(raises(ErrorCode::probe, [&] { Session::create(profile, *accepted.accepted, graph, host, {}); }));
}

TEST(Session, KernelErrorNamesNodeCapsuleAndMessage) {
    auto host = host_for({kFixtures / "fixture_good"});
    auto profile = external_cpu_profile();
    auto graph = unary_graph("abs");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    auto session = Session::create(profile, *accepted.accepted, graph, host, {});
    auto x = Tensor::from_values(DType::float32, {4}, {1, -2, 3, -4});
    auto msg = error_of([&] { session.run({{"x", x}}); });
    EXPECT_EQ(msg, "node 1 (abs) failed in capsule fixture_good.abs of plugin fixture_good: fixture "
                   "kernel failure: injected (code 1)");
    // Code 1 (CAPSULE_ERROR_INVALID_ARGUMENT) from a run is not the caller's data (plugins use
    // it when host and plugin disagree): Error(other). Only CAPSULE_ERROR_INVALID_DATA is input.
    EXPECT_TRUE(raises(ErrorCode::other, [&] { session.run({{"x", x}}); }));
}

// A reference kernel that refuses an input's values (an index out of range) while running reports
// bad input, naming the node, capsule and index; the same session runs good data afterwards.
TEST(Session, DataAKernelRefusesIsBadInput) {
    auto graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [4], "dtype": "float32"},
        {"id": 1, "op": "input", "name": "i", "shape": [2], "dtype": "int64"},
        {"id": 2, "op": "gather_vec_nat", "parents": [0, 1], "shape": [2]}], "outputs": [2]})");
    auto session = capsule::testing::session_under("checked_cpu", graph, {});
    const auto x = Tensor::from_values(DType::float32, {4}, {10, 20, 30, 40});
    std::string message;
    try {
        session.run({{"x", x}, {"i", Tensor::from_values(DType::int64, {2}, {1, 7})}});
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
        message = e.what();
    }
    EXPECT_NE(message.find("node 2 (gather_vec_nat) failed in capsule reference.gather_vec_nat"), std::string::npos)
        << message;
    EXPECT_NE(message.find("7"), std::string::npos) << message;
    EXPECT_EQ(session.run({{"x", x}, {"i", Tensor::from_values(DType::int64, {2}, {3, 0})}})[0].to_doubles(),
              (std::vector<double>{40, 10}));
}

// The other values the reference kernels refuse while running are bad input too: an int64 mod by
// zero, a float without an int64 value in a cast, an index of gather_elements out of range, a
// probability outside [0, 1]; the message names the element.
TEST(Session, EveryDataRefusalOfTheReferenceKernelsIsBadInput) {
    struct Case {
        const char* graph;
        std::map<std::string, Tensor> inputs;
        const char* names;
    };
    const Case cases[] = {
        {R"({"format": "capsule-ir", "version": 1, "nodes": [
            {"id": 0, "op": "input", "name": "a", "shape": [3], "dtype": "int64"},
            {"id": 1, "op": "input", "name": "b", "shape": [3], "dtype": "int64"},
            {"id": 2, "op": "mod", "parents": [0, 1], "shape": [3], "dtype": "int64"}], "outputs": [2]})",
         {{"a", Tensor::from_values(DType::int64, {3}, {5, 6, 7})}, {"b", Tensor::from_values(DType::int64, {3}, {2, 0, 3})}},
         "division by zero"},
        {R"({"format": "capsule-ir", "version": 1, "nodes": [
            {"id": 0, "op": "input", "name": "a", "shape": [3], "dtype": "float32"},
            {"id": 1, "op": "cast", "parents": [0], "attrs": {"to": "int64"}, "shape": [3], "dtype": "int64"}], "outputs": [1]})",
         {{"a", Tensor::from_values(DType::float32, {3}, {1.5, NAN, 2})}}, "element 1"},
        {R"({"format": "capsule-ir", "version": 1, "nodes": [
            {"id": 0, "op": "input", "name": "x", "shape": [2, 3], "dtype": "float32"},
            {"id": 1, "op": "input", "name": "i", "shape": [2, 1], "dtype": "int64"},
            {"id": 2, "op": "gather_elements", "parents": [0, 1], "attrs": {"axis": 1}, "shape": [2, 1]}], "outputs": [2]})",
         {{"x", Tensor::zeros(DType::float32, {2, 3})}, {"i", Tensor::from_values(DType::int64, {2, 1}, {0, 5})}},
         "index 5"},
        {R"({"format": "capsule-ir", "version": 1, "nodes": [
            {"id": 0, "op": "input", "name": "p", "shape": [2], "dtype": "float32"},
            {"id": 1, "op": "bernoulli_mask", "parents": [0], "shape": [2]}], "outputs": [1]})",
         {{"p", Tensor::from_values(DType::float32, {2}, {0.5, 1.5})}}, "outside [0, 1]"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.names);
        auto session = capsule::testing::session_under("checked_cpu", parse_graph(c.graph), {});
        try {
            session.run(c.inputs);
            ADD_FAILURE() << "the run succeeded";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
            EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("(code 6)"), std::string::npos) << e.what();
        }
    }
}

// Kernels that break the ABI's rules still give errors that name the node, capsule and plugin.
TEST(Session, ExceptionsAcrossTheAbiAndEmptyStatusesAreNamed) {
    auto host = host_for({kFixtures / "fixture_raw_kernels"});
    auto profile = external_cpu_profile();
    auto x = Tensor::from_values(DType::float32, {4}, {1, -2, 3, -4});
    auto run_error = [&](const std::string& op) {
        auto graph = unary_graph(op);
        auto accepted = profile.accept_graph(host, graph);
        EXPECT_TRUE(accepted.accepted);
        auto session = Session::create(profile, *accepted.accepted, graph, host, {});
        try {
            session.run({{"x", x}});
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::other) << e.what();
            return std::string(e.what());
        }
        return std::string("no Error");
    };
    EXPECT_EQ(run_error("abs"),
              "node 1 (abs) failed in capsule fixture_raw_kernels.abs of plugin fixture_raw_kernels: threw "
              "a C++ exception across the C ABI: fixture exception thrown through the C ABI");
    EXPECT_EQ(run_error("sigmoid"),
              "node 1 (sigmoid) failed in capsule fixture_raw_kernels.sigmoid of plugin "
              "fixture_raw_kernels: returned code 3 without a message");
}

// A graph that runs no kernel under a non-CPU profile is refused like any other graph whose device
// is unusable here, never a crash: its inputs and outputs still live in the device's memory.
TEST(Session, GraphWithoutKernelsUnderAnUnusableDeviceIsRefused) {
    auto graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [3]}], "outputs": [0]})");
    const auto& host = built_host();
    auto rocm = find_builtin_profile("future_rocm");
    auto accepted = rocm.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    auto msg = error_of([&] { Session::create(rocm, *accepted.accepted, graph, host, {}); });
    EXPECT_TRUE(contains(msg, "no usable plugin serves device rocm in registry mode 'default'")) << msg;
    EXPECT_TRUE(contains(msg, "plugin rocm is stub")) << msg;
    EXPECT_TRUE(raises(ErrorCode::probe, [&] { Session::create(rocm, *accepted.accepted, graph, host, {}); }));
    auto cuda = BackendProfile::checked_cuda();
    auto cuda_plan = cuda.accept_graph(host, graph);
    ASSERT_TRUE(cuda_plan.accepted);
    try {
        auto session = Session::create(cuda, *cuda_plan.accepted, graph, host, {});
        // A machine with a usable CUDA device runs the identity graph through device memory.
        auto x = Tensor::from_values(DType::float32, {3}, {1, 2, 3});
        EXPECT_EQ(session.run({{"x", x}}).at(0).to_doubles(), (std::vector<double>{1, 2, 3}));
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::probe) << e.what();
        EXPECT_TRUE(contains(e.what(), "native_cuda")) << e.what();
    }
}

TEST(Session, StubAndPlannerOnlyCapsulesAreRefused) {
    auto shipped = shipped_host();  // source-tree manifests: reference declares a library there
    auto cuda = BackendProfile::checked_cuda();
    auto graph = unary_graph("relu");
    auto accepted = cuda.accept_graph(shipped, graph);
    ASSERT_TRUE(accepted.accepted);
    auto msg = error_of([&] { Session::create(cuda, *accepted.accepted, graph, shipped, {}); });
    EXPECT_EQ(msg, "capsule native_cuda.relu belongs to plugin native_cuda, which is stub");
    auto pool_graph = parse_graph(R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [1, 1, 8]},
        {"id": 1, "op": "max_pool", "parents": [0], "attrs": {"kernel_size": 2}, "shape": [1, 1, 4]}],
        "outputs": [1]})");
    // A planner-only capsule has no kernel, so it claims no test evidence: checked-runtime rejects
    // it as missing evidence.
    auto rejected = cuda.accept_graph(shipped, pool_graph);
    ASSERT_FALSE(rejected.accepted);
    ASSERT_EQ(rejected.gate.failures.size(), 1u);
    EXPECT_EQ(rejected.gate.failures[0].kind, GateFailureKind::missing_evidence);
    EXPECT_EQ(rejected.gate.failures[0].obligations.size(), 2u);  // value and vjp
    // A policy that asks for no evidence accepts it; the session still refuses to run it.
    auto lenient = cuda;
    lenient.acceptance_policy = AcceptancePolicy{false, true, true, true, true, false};
    auto pool = lenient.accept_graph(shipped, pool_graph);
    ASSERT_TRUE(pool.accepted);
    EXPECT_EQ(error_of([&] { Session::create(lenient, *pool.accepted, pool_graph, shipped, {}); }),
              "capsule native_cuda.max_pool is planner-only: it can be planned and audited, but no kernel is wired to run it");
}

TEST(Session, HostMustMatchTheProfileTarget) {
    auto host = host_for({kFixtures / "fixture_good"});
    auto profile = external_cpu_profile();
    profile.target.os = OperatingSystem::macos;
    profile.target.arch = Architecture::aarch64;
    auto graph = unary_graph("relu");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    auto msg = error_of([&] { Session::create(profile, *accepted.accepted, graph, host, {}); });
    EXPECT_EQ(msg, "profile external_cpu targets macos/aarch64, but this host is linux/x86_64");
}

TEST(ExamplePlugin, LoadsPlansAndRuns) {
    auto host = host_for({CAPSULE_EXAMPLE_PLUGIN_DIR});
    ASSERT_EQ(only_record(host).status, PluginStatus::available) << only_record(host).failure;
    auto profile = load_profile_file(fs::path(CAPSULE_SOURCE_DIR) / "examples/plugin/example_cpu.json");
    auto graph = unary_graph("relu");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    EXPECT_EQ(accepted.accepted->plan().groups.at(0).capsule->name, "example.relu");
    auto session = Session::create(profile, *accepted.accepted, graph, host, {});
    auto out = session.run({{"x", Tensor::from_values(DType::float32, {4}, {-1.5, 0, 2.25, -0.0})}});
    EXPECT_EQ(out.at(0).to_doubles(), (std::vector<double>{0, 0, 2.25, 0}));
}

// fixture_good.relu claims VJP mode torchlean-tape but ships no backward kernel: inference runs,
// backward is refused before anything runs, naming the node and the capsule.
TEST(Session, CapsuleWithoutBackwardKernelRefusesBackward) {
    auto host = host_for({kFixtures / "fixture_good"});
    auto profile = external_cpu_profile();
    auto graph = unary_graph("relu");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    auto session = Session::create(profile, *accepted.accepted, graph, host, {});
    const auto x = Tensor::from_values(DType::float32, {4}, {-1, 2, -3, 4});
    EXPECT_EQ(session.run({{"x", x}})[0].to_doubles(), (std::vector<double>{0, 2, 0, 4}));
    const std::string why = "node 1 (relu) runs capsule fixture_good.relu, which has no backward kernel";
    EXPECT_EQ(session.backward_refusal(), why);
    EXPECT_EQ(error_of([&] { session.run_recording({{"x", x}}); }), why);
}

// fpmath was appended to capsule_prepare_args in ABI 1.1: a plugin reads it only when the host's
// struct_size covers it, and reads STRICT from a host that predates it.
TEST(PluginHelpers, PrepareCallReadsFpmathOnlyWhenTheHostPassedIt) {
    capsule_prepare_args args{};
    args.struct_size = sizeof args;
    args.fpmath = CAPSULE_FPMATH_BF16;
    EXPECT_EQ(capsule::plugin::PrepareCall{&args}.fpmath(), CAPSULE_FPMATH_BF16);
    args.struct_size = offsetof(capsule_prepare_args, fpmath);  // an older host's arguments
    EXPECT_EQ(capsule::plugin::PrepareCall{&args}.fpmath(), CAPSULE_FPMATH_STRICT);
}
