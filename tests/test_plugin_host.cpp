// The plugin host against deliberately broken fixture plugins (tests/fixtures/plugins), the
// README's example plugin, pinning, permissions, and sessions that must refuse to run.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <unistd.h>

#include "capsule/session.hpp"
#include "capsule_fixtures.hpp"

using namespace capsule;
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

std::string failure_of(const std::string& fixture) {
    auto host = host_for({kFixtures / fixture});
    const auto& r = only_record(host);
    EXPECT_EQ(r.status, PluginStatus::failed) << fixture;
    return r.failure;
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

TEST(PluginHost, GoodFixtureLoadsWithHashAndProbe) {
    auto host = host_for({kFixtures / "fixture_good"});
    const auto& r = only_record(host);
    ASSERT_EQ(r.status, PluginStatus::loaded) << r.failure;
    ASSERT_TRUE(r.library_path);
    EXPECT_EQ(r.sha256, shell_sha256(*r.library_path));
    ASSERT_TRUE(r.probe);
    EXPECT_TRUE(r.probe->usable);
    EXPECT_NE(r.loaded->kernel("fixture_good.relu"), nullptr);
    EXPECT_EQ(host.registry("default").capsules.size(), 2u);
}

TEST(PluginHost, NewerMinorAbiIsAccepted) {
    auto host = host_for({kFixtures / "fixture_newer_minor"});
    EXPECT_EQ(only_record(host).status, PluginStatus::loaded) << only_record(host).failure;
}

TEST(PluginHost, EveryFailureModeIsReportedWithItsReason) {
    EXPECT_EQ(failure_of("fixture_abi_major"),
              "ABI version mismatch: library implements 2.0, host implements 1.0 (major versions must match)");
    EXPECT_EQ(failure_of("fixture_manifest_abi2"),
              "ABI version mismatch: plugin declares 2.0, host implements 1.0 (major versions must match)");
    EXPECT_TRUE(contains(failure_of("fixture_no_entry"), "has no entry symbol capsule_plugin_entry"));
    EXPECT_EQ(failure_of("fixture_undeclared"),
              "library implements capsule 'fixture_undeclared.gelu' that the manifest does not declare");
    EXPECT_EQ(failure_of("fixture_missing_kernel"),
              "manifest marks capsule 'fixture_missing_kernel.abs' eager but the library has no kernel for it");
    EXPECT_EQ(failure_of("fixture_init_error"),
              "init failed (code 5): fixture init failed: license server unreachable");
    EXPECT_EQ(failure_of("fixture_refuse_host"), "plugin refused host ABI 1.0 (entry returned null)");
    EXPECT_EQ(failure_of("fixture_name_mismatch"),
              "library names itself 'someone_else', manifest says 'fixture_name_mismatch'");
    EXPECT_TRUE(contains(failure_of("fixture_short_table"), "ABI 1.0 needs at least"));
    // The loader's own message survives: which dependency could not be found.
    auto dep = failure_of("fixture_missing_dependency");
    EXPECT_TRUE(contains(dep, "libfixture_dep.so")) << dep;
    EXPECT_TRUE(contains(dep, "cannot load")) << dep;
    auto bad = failure_of("bad_json");
    EXPECT_TRUE(contains(bad, "malformed JSON")) << bad;
}

TEST(PluginHost, FailuresDoNotStopOtherPlugins) {
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(kFixtures))
        if (e.is_directory() && e.path().filename() != "_hidden_deps") dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    auto host = host_for(dirs);
    int loaded = 0, failed = 0;
    for (const auto& r : host.plugins()) (r.status == PluginStatus::loaded ? loaded : failed)++;
    EXPECT_EQ(loaded, 3);  // good, newer_minor, probe_fail
    EXPECT_EQ(failed, 11);  // the other ten fixtures and bad_json
}

TEST(PluginHost, DuplicatePluginNameIsRefused) {
    TempCopy copy("fixture_good");
    auto host = host_for({kFixtures / "fixture_good", copy.dir});
    ASSERT_EQ(host.plugins().size(), 2u);
    EXPECT_EQ(host.plugins()[0].status, PluginStatus::loaded);
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
        EXPECT_TRUE(contains(r.failure, "directory " + copy.dir.string() + " is world-writable")) << r.failure;
    }
}

TEST(PluginHost, PinnedHashes) {
    auto lib = kFixtures / "fixture_good" / "libfixture_good.so";
    const auto hash = shell_sha256(lib);
    PluginHostOptions pinned;
    pinned.trusted_sha256 = std::set<std::string>{hash};
    EXPECT_EQ(only_record(host_for({kFixtures / "fixture_good"}, pinned)).status, PluginStatus::loaded);
    PluginHostOptions other;
    other.trusted_sha256 = std::set<std::string>{std::string(64, 'a')};
    auto r = only_record(host_for({kFixtures / "fixture_good"}, other));
    EXPECT_TRUE(contains(r.failure, "not among the pinned trusted hashes")) << r.failure;
    PluginHostOptions none_pinned;
    none_pinned.trusted_sha256 = std::set<std::string>{};  // an empty pin file refuses everything
    EXPECT_EQ(only_record(host_for({kFixtures / "fixture_good"}, none_pinned)).status, PluginStatus::failed);

    auto file = fs::temp_directory_path() / ("capsule-pins-" + std::to_string(::getpid()));
    std::ofstream(file) << "# pins\n" << hash << "  libfixture_good.so\n";
    EXPECT_EQ(read_trusted_hashes(file), std::set<std::string>{hash});
    std::ofstream(file) << "not-a-hash file\n";
    auto msg = error_of([&] { read_trusted_hashes(file); });
    EXPECT_TRUE(contains(msg, ":1: expected '<64 hex digits>")) << msg;
    std::ofstream(file) << hash << "  " << std::string(100000, 'x') << "\n";  // long names are fine
    EXPECT_EQ(read_trusted_hashes(file), std::set<std::string>{hash});
    std::ofstream(file) << hash << "0  file\n";  // 65 digits
    EXPECT_THROW(read_trusted_hashes(file), InputError);
    fs::remove(file);
}

TEST(Session, FailingProbeRefusesToRunWithTheReason) {
    auto host = host_for({kFixtures / "fixture_probe_fail"});
    const auto& r = only_record(host);
    ASSERT_EQ(r.status, PluginStatus::loaded);
    ASSERT_TRUE(r.probe);
    EXPECT_FALSE(r.probe->usable);
    EXPECT_EQ(r.probe->reason, "fixture accelerator not present (slot 0 empty)");
    auto profile = external_cpu_profile();
    auto graph = unary_graph("relu");
    auto accepted = profile.accept_graph(host, graph);
    ASSERT_TRUE(accepted.accepted);
    auto msg = error_of([&] { Session::create(profile, *accepted.accepted, graph, host, {}); });
    EXPECT_EQ(msg, "plugin fixture_probe_fail cannot run on this machine: fixture accelerator not "
                   "present (slot 0 empty)");
    EXPECT_THROW(Session::create(profile, *accepted.accepted, graph, host, {}), ProbeError);
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
    EXPECT_EQ(msg, "node 1 (abs) failed in capsule fixture_good.abs (code 1): fixture kernel failure: injected");
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
        {"id": 0, "op": "input", "name": "x", "shape": [1, 1, 4, 4]},
        {"id": 1, "op": "max_pool2d", "parents": [0], "attrs": {"kernel_size": 2}, "shape": [1, 1, 2, 2]}],
        "outputs": [1]})");
    auto pool = cuda.accept_graph(shipped, pool_graph);
    ASSERT_TRUE(pool.accepted);
    EXPECT_EQ(error_of([&] { Session::create(cuda, *pool.accepted, pool_graph, shipped, {}); }),
              "capsule native_cuda.max_pool2d is planner-only: it can be planned and audited, but no kernel is wired to run it");
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
    ASSERT_EQ(only_record(host).status, PluginStatus::loaded) << only_record(host).failure;
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
