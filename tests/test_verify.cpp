// `capsule verify` and evidence records (DESIGN.md section 10, "Evidence is earned"): the shared
// conformance suite run against a plugin library, the record bound to its SHA-256, and the
// `verified` policy reading it back.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "capsule/op_catalog.hpp"
#include "capsule/evidence.hpp"
#include "capsule/plugin_table.hpp"
#include "capsule/profile.hpp"
#include "capsule_fixtures.hpp"
#include "conformance/harness.hpp"
#include "conformance/verify.hpp"

using namespace capsule;
using namespace capsule::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = CAPSULE_FIXTURE_PLUGIN_DIR;

PluginHost host_over(const std::vector<fs::path>& dirs, std::vector<fs::path> evidence = {}) {
    PluginSearchPath search;
    search.entries = dirs;
    PluginHostOptions options;
    options.evidence_dirs = std::move(evidence);
    return PluginHost::discover(search, options);
}

const PluginRecord& record_named(const PluginHost& host, const std::string& name) {
    for (const auto& r : host.plugins())
        if (r.name == name) return r;
    throw std::runtime_error("no plugin " + name);
}

EvidenceRecord verify(const PluginHost& host, const std::string& name) {
    const auto& record = record_named(host, name);
    auto loaded = host.library(record);
    if (!loaded.plugin) throw std::runtime_error(loaded.failure);
    return conformance::verify_plugin(record, *loaded.plugin, "test machine");
}

/// A record of a made-up library (hash: 64 times `digit`), for reading and writing records.
EvidenceRecord demo_record(char digit) {
    EvidenceRecord r;
    r.plugin = "demo";
    r.version = "1.0";
    r.abi = "1.1";
    r.library = "/x/libdemo.so";
    r.library_sha256 = std::string(64, digit);
    r.device = "cpu";
    r.driver = "test";
    r.date = "2026-12-01T00:00:00Z";
    r.host_version = "0.1.0";
    return r;
}

/// `record` as a plugin that passed every case would leave it (to test what a passing record
/// admits, with a fixture plugin that does not pass).
EvidenceRecord as_if_passed(EvidenceRecord record) {
    for (auto& c : record.capsules) {
        c.forward_passed = c.forward_cases;
        c.gradient_passed = c.gradient_cases;
        c.failures.clear();
        c.max_error_ratio = 0;
    }
    return record;
}

struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& name)
        : path(fs::temp_directory_path() / ("capsule-verify-" + std::to_string(::getpid()) + "-" + name)) {
        fs::remove_all(path);
        fs::create_directories(path);
        ::chmod(path.c_str(), 0755);
    }
    ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(Verify, ReferencePluginPassesEveryCaseOfItsOps) {
    const auto host = host_over({CAPSULE_PLUGIN_DIR});
    const auto record = verify(host, "reference");
    EXPECT_EQ(record.plugin, "reference");
    EXPECT_EQ(record.library_sha256, host.library_sha256(record_named(host, "reference")));
    EXPECT_EQ(record.capsules.size(), op_catalog().size());
    EXPECT_TRUE(record.passed());
    int forward = 0, gradient = 0;
    for (const auto& c : record.capsules) {
        SCOPED_TRACE(c.capsule);
        forward += c.forward_cases;
        gradient += c.gradient_cases;
        if (is_optimizer_step(c.op)) {
            // No shared case covers the optimizer steps (tests/test_optimizer.cpp checks them):
            // they stay unverified rather than passing on no evidence.
            EXPECT_EQ(c.status(), "no cases");
            continue;
        }
        EXPECT_EQ(c.status(), "passed") << (c.failures.empty() ? "" : c.failures.front());
        EXPECT_LE(c.max_error_ratio, 1.0);
        EXPECT_TRUE(c.unsupported.empty());
    }
    // Every forward case of the shared suite (optimizer steps have none) runs once.
    std::size_t cases = 0, gradient_cases = 0;
    for (const auto& c : conformance::all_cases()) {
        ++cases;
        gradient_cases += c.check_gradient;
    }
    EXPECT_EQ(std::size_t(forward), cases);
    EXPECT_EQ(std::size_t(gradient), gradient_cases);
}

#ifdef CAPSULE_HAVE_ONEDNN
TEST(Verify, OnednnDeclaresWhatItDoesNotSupportAndPassesTheRest) {
    const auto host = host_over({CAPSULE_PLUGIN_DIR});
    const auto record = verify(host, "onednn");
    EXPECT_TRUE(record.passed());
    const auto* bn = record.find("onednn.batch_norm");
    ASSERT_NE(bn, nullptr);
    EXPECT_GT(bn->forward_passed, 0);
    // Its float64 cases are declared unsupported; batch statistics (training = true) are
    // computed, so those cases run and pass.
    bool training_listed = false, float64_listed = false;
    for (const auto& [name, reason] : bn->unsupported) {
        training_listed |= name.find("training") != std::string::npos && reason.find("float32 only") == std::string::npos;
        float64_listed |= reason.find("float32 only") != std::string::npos;
    }
    EXPECT_FALSE(training_listed);
    EXPECT_TRUE(float64_listed);
    // Every capsule has a backward kernel, checked on the gradient cases in float32.
    for (const auto& c : record.capsules) {
        EXPECT_GT(c.gradient_cases, 0) << c.capsule;
        EXPECT_EQ(c.gradient_passed, c.gradient_cases) << c.capsule;
    }
}
#endif

// The suite must be able to fail: the fixture's relu is float32 only and its abs always fails.
TEST(Verify, AWrongOrIncompleteKernelFails) {
    const auto host = host_over({kFixtures / "fixture_good"});
    const auto record = verify(host, "fixture_good");
    EXPECT_FALSE(record.passed());
    const auto* relu = record.find("fixture_good.relu");
    const auto* abs = record.find("fixture_good.abs");
    ASSERT_TRUE(relu && abs);
    EXPECT_EQ(relu->status(), "failed");
    EXPECT_GT(relu->forward_passed, 0);  // the float32 cases
    EXPECT_LT(relu->forward_passed, relu->forward_cases);
    ASSERT_FALSE(relu->failures.empty());
    std::string failures;
    for (const auto& f : relu->failures) failures += f + "\n";
    // Its relu drops NaN (max(0, NaN) is 0) and refuses float64.
    EXPECT_NE(failures.find("relu/edge_values: output[3] = 0, expected nan"), std::string::npos) << failures;
    EXPECT_EQ(abs->status(), "failed");
    // Only its error cases pass (a refusal is what they ask for); no value case does.
    int error_cases = 0;
    for (const auto& c : conformance::all_cases()) error_cases += c.op == BackendOp::abs && !c.expected_error.empty();
    EXPECT_EQ(abs->forward_passed, error_cases);
}

TEST(Verify, UnsupportedDeclarationsMatchCasesByEveryField) {
    ConformanceDeclaration d;
    d.unsupported.push_back({"", BackendOp::batch_norm, "", "training=true", false, "inference only"});
    d.unsupported.push_back({"", std::nullopt, "float64", "", false, "float32 only"});
    d.unsupported.push_back({"", std::nullopt, "", "", true, "host checks shapes"});
    conformance::KernelCase c;
    c.name = "batch_norm/x";
    c.op = BackendOp::batch_norm;
    c.inputs = {conformance::f32({2}, {1, 2})};
    EXPECT_EQ(conformance::unsupported_reason(d, c), "");
    c.attrs["training"] = true;
    EXPECT_EQ(conformance::unsupported_reason(d, c), "inference only");
    c.attrs["training"] = false;
    EXPECT_EQ(conformance::unsupported_reason(d, c), "");
    c.op = BackendOp::relu;
    c.attrs["training"] = true;
    EXPECT_EQ(conformance::unsupported_reason(d, c), "");  // the op must match too
    c.inputs = {conformance::f64({2}, {1, 2})};
    EXPECT_EQ(conformance::unsupported_reason(d, c), "float32 only");
    c.inputs = {conformance::f32({2}, {1, 2})};
    c.expected_error = "rank";
    EXPECT_EQ(conformance::unsupported_reason(d, c), "host checks shapes");
}

TEST(Evidence, RecordsRoundTripAndForgedOnesAreRefused) {
    TempDir dir("records");
    EvidenceRecord r = demo_record('a');
    CapsuleEvidence c;
    c.capsule = "demo.relu";
    c.op = BackendOp::relu;
    c.forward_cases = c.forward_passed = 3;
    c.max_abs_error = 1e-7;
    c.max_error_ratio = 0.1;
    c.rtol = 1e-5;
    c.atol = 1e-6;
    c.unsupported = {{"relu/f64", "float32 only"}};
    r.capsules.push_back(c);
    const fs::path file = write_evidence_record(r, dir.path);
    EXPECT_EQ(file.filename(), "demo-" + std::string(64, 'a') + ".evidence.json");
    std::string problem;
    auto back = find_evidence_record({dir.path}, "demo", r.library_sha256, problem);
    ASSERT_TRUE(back) << problem;
    EXPECT_EQ(evidence_record_to_json(*back), evidence_record_to_json(r));
    // The id names the library and the results, not the date: verifying again with the same
    // outcome keeps it; another outcome changes it.
    EXPECT_EQ(back->id().rfind("demo@aaaaaaaaaaaa#", 0), 0u) << back->id();
    EXPECT_EQ(back->id().size(), std::string("demo@aaaaaaaaaaaa#").size() + 12);
    auto later = r;
    later.date = "2027-01-01T00:00:00Z";
    later.driver = "another machine";
    EXPECT_EQ(later.id(), r.id());
    later.capsules[0].max_abs_error = 2e-7;
    EXPECT_NE(later.id(), r.id());
    // An infinite error (a NaN or inf output) survives the JSON round trip, as null.
    auto infinite = r;
    infinite.capsules[0].forward_passed = 2;
    infinite.capsules[0].failures = {"relu/x: output[0] = nan, expected 1"};
    infinite.capsules[0].max_abs_error = INFINITY;
    infinite.capsules[0].max_error_ratio = INFINITY;
    auto parsed = parse_evidence_record(evidence_record_to_json(infinite).dump(), "inf.json");
    EXPECT_TRUE(std::isinf(parsed.capsules[0].max_abs_error));
    EXPECT_EQ(parsed.capsules[0].status(), "failed");

    // Another library's hash: no record.
    EXPECT_FALSE(find_evidence_record({dir.path}, "demo", std::string(64, 'b'), problem));
    EXPECT_NE(problem.find("no evidence record"), std::string::npos) << problem;

    // A record edited to claim a pass its counts do not give is refused.
    auto doc = evidence_record_to_json(r);
    doc["capsules"][0]["forward_passed"] = 2;
    std::ofstream(file) << doc.dump();
    EXPECT_FALSE(find_evidence_record({dir.path}, "demo", r.library_sha256, problem));
    EXPECT_NE(problem.find("$.capsules[0].status: says 'passed' but the counts give 'failed'"), std::string::npos)
        << problem;
    // A duplicate key (the last would win) is refused by the strict reader.
    std::string text = evidence_record_to_json(r).dump();
    text.insert(1, "\"status\": \"failed\", ");
    std::ofstream(file) << text;
    EXPECT_FALSE(find_evidence_record({dir.path}, "demo", r.library_sha256, problem));
    EXPECT_NE(problem.find("duplicate key"), std::string::npos) << problem;

    // An unsupported entry with an empty case and an empty reason names the case, on any compiler.
    doc = evidence_record_to_json(r);
    doc["capsules"][0]["unsupported"] = nlohmann::json::array({{{"case", " "}, {"reason", ""}}});
    EXPECT_NE(error_of([&] { parse_evidence_record(doc.dump(), "e.json"); })
                  .find("e.json: $.capsules[0].unsupported[0].case: must not be empty"),
              std::string::npos);

    // A record under a name that is not its own plugin's and library's is refused.
    write_evidence_record(r, dir.path);
    fs::rename(file, dir.path / evidence_file_name("demo", std::string(64, 'c')));
    EXPECT_FALSE(find_evidence_record({dir.path}, "demo", std::string(64, 'c'), problem));
    EXPECT_NE(problem.find("not of its file name's plugin and library"), std::string::npos) << problem;

    // A record in a directory other users can write is no evidence (it could be forged).
    write_evidence_record(r, dir.path);
    ::chmod(dir.path.c_str(), 0777);
    EXPECT_FALSE(find_evidence_record({dir.path}, "demo", r.library_sha256, problem));
    EXPECT_NE(problem.find("writable"), std::string::npos) << problem;
    ::chmod(dir.path.c_str(), 0755);
}

// The whole loop through the PluginHost: unverified, verified after a record is written, failed
// for a plugin that failed, and unverified again for a library that changed.
TEST(Evidence, VerifiedPolicyReadsTheRecordOfTheExactLibrary) {
    TempDir evidence("policy");
    TempDir plugins("plugins");
    for (const auto& f : fs::directory_iterator(kFixtures / "fixture_good"))
        fs::copy_file(f.path(), plugins.path / f.path().filename());
    auto profile = BackendProfile::verified_cpu();
    profile.config.backend = BackendPreference::only(Provider::external);  // the fixture's provider
    profile.target = Target::linux_cpu();
    profile.target.features.push_back(BuildFeature::external_provider);
    const BackendOp ops[] = {BackendOp::relu};
    {
        auto host = host_over({plugins.path}, {evidence.path});
        auto before = profile.gate_ops(host, ops);
        ASSERT_FALSE(before.gate.accepted());
        ASSERT_EQ(before.gate.failures.size(), 1u);
        EXPECT_EQ(before.gate.failures[0].kind, GateFailureKind::unverified_evidence);
        ASSERT_EQ(before.gate.failures[0].reasons.size(), 1u);
        EXPECT_NE(before.gate.failures[0].reasons[0].find("run: capsule verify --plugin fixture_good"),
                  std::string::npos)
            << before.gate.failures[0].reasons[0];
        // The fixture's relu fails its float64 cases: the record says failed.
        write_evidence_record(verify(host, "fixture_good"), evidence.path);
    }
    {
        auto host = host_over({plugins.path}, {evidence.path});
        auto v = host.verification(*host.registry("default").capsules.at(0));
        EXPECT_EQ(v.status, VerificationStatus::failed);
        EXPECT_NE(v.detail.find("first failure"), std::string::npos) << v.detail;
        EXPECT_FALSE(profile.gate_ops(host, ops).gate.accepted());
        // A passing record for this library (as a plugin that passed would leave) is accepted.
        write_evidence_record(as_if_passed(verify(host, "fixture_good")), evidence.path);
    }
    {
        auto host = host_over({plugins.path}, {evidence.path});
        auto accepted = profile.gate_ops(host, ops);
        EXPECT_TRUE(accepted.gate.accepted());
    }
    // The library changes (here: one byte appended): the record no longer applies.
    std::ofstream(plugins.path / "libfixture_good.so", std::ios::app) << '\0';
    {
        auto host = host_over({plugins.path}, {evidence.path});
        auto after = profile.gate_ops(host, ops);
        ASSERT_FALSE(after.gate.accepted());
        EXPECT_EQ(after.gate.failures.at(0).kind, GateFailureKind::unverified_evidence);
        EXPECT_NE(after.gate.failures[0].reasons.at(0).find("no evidence record for its library"), std::string::npos)
            << after.gate.failures[0].reasons[0];
    }
}

// A record binds a capsule name to the op its kernel was verified as: a manifest that maps the
// name to another op (same library) is not what was verified.
TEST(Evidence, ARecordDoesNotCoverACapsuleWhoseOpChanged) {
    TempDir evidence("op-swap");
    TempDir plugins("op-swap-plugins");
    for (const auto& f : fs::directory_iterator(kFixtures / "fixture_good"))
        fs::copy_file(f.path(), plugins.path / f.path().filename());
    {
        auto host = host_over({plugins.path}, {evidence.path});
        write_evidence_record(as_if_passed(verify(host, "fixture_good")), evidence.path);
        EXPECT_EQ(host.verification(host.plugin_of("fixture_good.relu")->manifest->capsules.at(0)).status,
                  VerificationStatus::verified);
    }
    // Swap the ops of the two capsules in the manifest; the library is unchanged.
    const fs::path manifest = plugins.path / "fixture_good.capsule.json";
    std::ifstream in(manifest);
    auto doc = nlohmann::json::parse(in);
    in.close();
    for (auto& c : doc["capsules"]) {
        const std::string op = c["op"] == "relu" ? "abs" : "relu";
        c["op"] = op;
        for (auto& [key, contract] : c["contracts"].items()) contract["claim"]["op"] = op;
    }
    std::ofstream(manifest) << doc.dump();
    auto host = host_over({plugins.path}, {evidence.path});
    const auto& swapped = *host.plugin_of("fixture_good.relu");
    const auto v = host.verification(swapped.manifest->capsules.at(0));
    EXPECT_EQ(v.status, VerificationStatus::unverified);
    EXPECT_NE(v.detail.find("verified fixture_good.relu as op relu, the manifest now declares op abs"), std::string::npos)
        << v.detail;
}

// Records are written so that they can be read back and cannot be redirected: directories 0755
// whatever the umask, a new file (never through a planted link), and never into a directory other
// users can write.
TEST(Evidence, RecordsAreWrittenSafely) {
    TempDir root("write");
    EvidenceRecord r = demo_record('d');
    const mode_t old = ::umask(002);
    const fs::path nested = root.path / "a" / "b";
    const fs::path file = write_evidence_record(r, nested);
    ::umask(old);
    EXPECT_EQ(fs::status(nested).permissions() & fs::perms::all, fs::perms(0755));
    EXPECT_EQ(fs::status(root.path / "a").permissions() & fs::perms::all, fs::perms(0755));
    EXPECT_EQ(fs::status(file).permissions() & fs::perms::all, fs::perms(0644));
    std::string problem;
    EXPECT_TRUE(find_evidence_record({nested}, "demo", r.library_sha256, problem)) << problem;

    // A link planted where the temporary file goes is not followed: the write fails and the
    // victim keeps its content.
    const fs::path victim = root.path / "victim.txt";
    std::ofstream(victim) << "precious";
    fs::create_symlink(victim, nested / ("." + file.filename().string() + "." + std::to_string(::getpid())));
    EXPECT_THROW(write_evidence_record(r, nested), Error);
    std::ifstream v(victim);
    std::string content((std::istreambuf_iterator<char>(v)), {});
    EXPECT_EQ(content, "precious");

    // A world-writable directory is refused before anything is written.
    const fs::path open_dir = root.path / "open";
    fs::create_directories(open_dir);
    ::chmod(open_dir.c_str(), 0777);
    try {
        write_evidence_record(r, open_dir);
        ADD_FAILURE() << "wrote into a world-writable directory";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("refusing to write evidence records into " + open_dir.string()),
                  std::string::npos)
            << e.what();
    }
    EXPECT_TRUE(fs::is_empty(open_dir));
}

// The host reads a plugin's kernel array only after bounding it: a lying count or entry size, or an
// array outside mapped memory, is a refusal, never a fault (read_kernel_entries serves both the
// plugin loader and the manifest generator).
TEST(PluginTable, LyingKernelArraysAreRefusedBeforeTheyAreRead) {
    static const capsule_kernel kernels[2] = {
        {sizeof(capsule_kernel), "demo.relu", nullptr, nullptr, nullptr, nullptr},
        {sizeof(capsule_kernel), "demo.abs", nullptr, nullptr, nullptr, nullptr}};
    capsule_plugin table{};
    table.struct_size = sizeof table;
    table.abi_major = CAPSULE_ABI_MAJOR;
    table.abi_minor = CAPSULE_ABI_MINOR;
    table.kernels = kernels;
    table.num_kernels = 2;
    table.kernel_entry_size = sizeof(capsule_kernel);
    std::string why;
    auto entries = read_kernel_entries(&table, 8, why);
    ASSERT_EQ(why, "");
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_STREQ(entries[1].capsule_name, "demo.abs");

    table.num_kernels = std::size_t(1) << 40;
    EXPECT_TRUE(read_kernel_entries(&table, 8, why).empty());
    EXPECT_NE(why.find("lists 1099511627776 kernels, more than the 8 it can implement"), std::string::npos) << why;

    table.num_kernels = 2;
    table.kernel_entry_size = std::size_t(1) << 40;
    EXPECT_TRUE(read_kernel_entries(&table, 8, why).empty());
    EXPECT_NE(why.find("kernel_entry_size 1099511627776, more than the 4096 bytes"), std::string::npos) << why;

    table.kernel_entry_size = 4096;  // plausible, but the second entry lies past the array
    table.kernels = reinterpret_cast<const capsule_kernel*>(std::uintptr_t{0x1000});
    EXPECT_TRUE(read_kernel_entries(&table, 8, why).empty());
    EXPECT_NE(why.find("is not mapped memory"), std::string::npos) << why;

    table.kernel_entry_size = 8;  // below ABI 1.0's entry
    table.kernels = kernels;
    EXPECT_TRUE(read_kernel_entries(&table, 8, why).empty());
    EXPECT_NE(why.find("less than ABI 1.0's"), std::string::npos) << why;
}
