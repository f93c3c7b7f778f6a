// The C API (capsule/capsule.h) as a C program uses it: this suite links libcapsule_c only. Each
// error path returns a status with the documented code and a message naming the cause; NULL
// handles and arguments never crash; every release function accepts NULL.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

#include "capsule/capsule.h"

namespace {

namespace fs = std::filesystem;

template <typename T, void (*Release)(T*)>
struct Releaser {
    void operator()(T* p) const { Release(p); }
};
using Host = std::unique_ptr<capsule_host_t, Releaser<capsule_host_t, capsule_host_release>>;
using Profile = std::unique_ptr<capsule_profile_t, Releaser<capsule_profile_t, capsule_profile_release>>;
using Model = std::unique_ptr<capsule_model_t, Releaser<capsule_model_t, capsule_model_release>>;
using Plan = std::unique_ptr<capsule_plan_t, Releaser<capsule_plan_t, capsule_plan_release>>;
using Session = std::unique_ptr<capsule_session_t, Releaser<capsule_session_t, capsule_session_release>>;
using Tensor = std::unique_ptr<capsule_tensor_t, Releaser<capsule_tensor_t, capsule_tensor_release>>;
using Status = std::unique_ptr<capsule_status_t, Releaser<capsule_status_t, capsule_status_release>>;

/// Success: the call returned NULL. Releases a status otherwise.
::testing::AssertionResult Ok(capsule_status_t* status) {
    Status owned(status);
    if (!status) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "status " << capsule_status_get_code(status) << ": "
                                         << capsule_status_get_message(status);
}

/// The call failed with `code` and a message containing `fragment`. Releases the status.
::testing::AssertionResult Fails(capsule_status_t* status, capsule_status_code_t code, std::string_view fragment) {
    Status owned(status);
    if (!status) return ::testing::AssertionFailure() << "succeeded; expected status " << code;
    const std::string message = capsule_status_get_message(status);
    if (capsule_status_get_code(status) != code)
        return ::testing::AssertionFailure() << "status " << capsule_status_get_code(status) << " (expected "
                                             << code << "): " << message;
    if (message.find(fragment) == std::string::npos)
        return ::testing::AssertionFailure() << "message '" << message << "' lacks '" << fragment << "'";
    return ::testing::AssertionSuccess();
}

const std::string kMlp = std::string(CAPSULE_C_EMBED_DIR) + "/mlp.onnx";

/// make_mlp_onnx.py's forward pass of mlp.onnx on the example input (double precision).
const std::vector<double> kMlpProbs{0.16397858875626783, 0.5723415124399709, 0.26367989880376125,
                                    0.380501721959762,   0.2811787822565305, 0.33831949578370746};
/// The example input of mlp.onnx: element i is ((i % 5) - 2) * 0.5.
std::vector<float> mlp_input() {
    std::vector<float> x(8);
    for (int i = 0; i < 8; ++i) x[i] = static_cast<float>((i % 5) - 2) * 0.5f;
    return x;
}

Host make_host() {
    const char* dirs[] = {CAPSULE_PLUGIN_DIR};
    capsule_host_t* host = nullptr;
    EXPECT_TRUE(Ok(capsule_host_create(dirs, 1, CAPSULE_HOST_ONLY_GIVEN_DIRS, &host)));
    return Host(host);
}

Profile make_profile(const char* name) {
    capsule_profile_t* profile = nullptr;
    EXPECT_TRUE(Ok(capsule_profile_create(name, &profile)));
    return Profile(profile);
}

Model load_model(const std::string& path) {
    capsule_model_t* model = nullptr;
    EXPECT_TRUE(Ok(capsule_model_load(path.c_str(), nullptr, 0, &model)));
    return Model(model);
}

Plan make_plan(const capsule_host_t* host, const capsule_profile_t* profile, const capsule_model_t* model) {
    capsule_plan_t* plan = nullptr;
    EXPECT_TRUE(Ok(capsule_plan_create(host, profile, model, &plan)));
    return Plan(plan);
}

Session make_session(const capsule_plan_t* plan) {
    capsule_session_t* session = nullptr;
    EXPECT_TRUE(Ok(capsule_session_create(plan, 1, &session)));
    return Session(session);
}

/// The handles a caller creates, in order, to run a model: host (the plugins built here),
/// profile and model, then the plan and session where a test asks for them.
struct Handles {
    Host host;
    Profile profile;
    Model model;
    Plan plan;
    Session session;
};

/// Host, profile `profile_name` and the model at `path`.
Handles loaded(const std::string& path, const char* profile_name = "checked_cpu") {
    return {make_host(), make_profile(profile_name), load_model(path), nullptr, nullptr};
}

/// loaded, and its plan.
Handles planned(const std::string& path, const char* profile_name = "checked_cpu") {
    auto h = loaded(path, profile_name);
    h.plan = make_plan(h.host.get(), h.profile.get(), h.model.get());
    return h;
}

/// planned, and a session of one thread on the plan.
Handles opened(const std::string& path, const char* profile_name = "checked_cpu") {
    auto h = planned(path, profile_name);
    h.session = make_session(h.plan.get());
    return h;
}

Tensor make_tensor(capsule_dtype dtype, std::vector<int64_t> shape, const void* data, size_t bytes) {
    capsule_tensor_t* t = nullptr;
    EXPECT_TRUE(Ok(capsule_tensor_create(dtype, shape.data(), shape.size(), data, bytes, &t)));
    return Tensor(t);
}

Tensor mlp_x() {
    const auto x = mlp_input();
    return make_tensor(CAPSULE_DTYPE_FLOAT32, {2, 4}, x.data(), x.size() * sizeof(float));
}

/// Success when capsule_tensor_get_info reports `dtype` and `shape` (and their element count).
::testing::AssertionResult has_info(const capsule_tensor_t* t, capsule_dtype dtype, const std::vector<int64_t>& shape) {
    capsule_dtype got_dtype = CAPSULE_DTYPE_BOOL;
    size_t rank = 0;
    const int64_t* dims = nullptr;
    int64_t count = 0;
    if (capsule_status_t* st = capsule_tensor_get_info(t, &got_dtype, &rank, &dims, &count)) {
        capsule_status_release(st);
        return ::testing::AssertionFailure() << "capsule_tensor_get_info failed";
    }
    int64_t want_count = 1;
    for (auto d : shape) want_count *= d;
    const std::vector<int64_t> got_shape(dims, dims + rank);
    if (got_dtype != dtype || got_shape != shape || count != want_count)
        return ::testing::AssertionFailure() << "dtype " << got_dtype << ", rank " << rank << ", count " << count;
    return ::testing::AssertionSuccess();
}

std::vector<float> floats(const capsule_tensor_t* t) {
    const void* data = nullptr;
    size_t bytes = 0;
    EXPECT_TRUE(Ok(capsule_tensor_get_data(t, &data, &bytes)));
    std::vector<float> v(bytes / sizeof(float));
    if (bytes) std::memcpy(v.data(), data, bytes);
    return v;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << "element " << i;
}

/// A JSON IR graph file in a fresh directory: x [2, 3] → relu → softmax (an unnamed output).
struct GraphFile {
    fs::path dir = fs::temp_directory_path() / ("capsule_c_api_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::path path = dir / "graph.json";
    GraphFile() {
        fs::create_directories(dir);
        std::ofstream(path) << R"({"format": "capsule-ir", "version": 1, "nodes": [
            {"id": 0, "op": "input", "name": "x", "shape": [2, 3], "dtype": "float32"},
            {"id": 1, "op": "relu", "parents": [0], "shape": [2, 3]},
            {"id": 2, "op": "softmax", "parents": [1], "attrs": {"axis": -1}, "shape": [2, 3]}],
          "outputs": [2]})";
    }
    ~GraphFile() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

// A C caller may pass any int where a capsule_dtype is expected; C++ code cannot even form such an
// enum value, so these call the functions through their C signature with an int.
const char* dtype_name_of_int(int dtype) {
    using Fn = const char* (*)(int);
    return reinterpret_cast<Fn>(&capsule_dtype_name)(dtype);
}
capsule_status_t* tensor_create_with_int_dtype(int dtype, const int64_t* shape, size_t rank, const void* data,
                                               size_t bytes, capsule_tensor_t** out) {
    using Fn = capsule_status_t* (*)(int, const int64_t*, size_t, const void*, size_t, capsule_tensor_t**);
    return reinterpret_cast<Fn>(&capsule_tensor_create)(dtype, shape, rank, data, bytes, out);
}

#ifdef CAPSULE_C_API_TEST_ONNX
#define REQUIRE_ONNX()
#else
#define REQUIRE_ONNX() GTEST_SKIP() << "libcapsule_c is built without ONNX support"
#endif

// ---- Status, versions, dtypes, release -----------------------------------------------------

TEST(CApi, NullStatusIsSuccessAndEveryReleaseAcceptsNull) {
    EXPECT_EQ(capsule_status_get_code(nullptr), CAPSULE_STATUS_OK);
    EXPECT_STREQ(capsule_status_get_message(nullptr), "");
    EXPECT_EQ(capsule_status_get_report_json(nullptr), nullptr);
    capsule_status_release(nullptr);
    capsule_host_release(nullptr);
    capsule_profile_release(nullptr);
    capsule_model_release(nullptr);
    capsule_plan_release(nullptr);
    capsule_session_release(nullptr);
    capsule_tensor_release(nullptr);
}

TEST(CApi, StatusCodesAreTheToolsExitCodes) {
    EXPECT_EQ(CAPSULE_STATUS_OTHER, 1);
    EXPECT_EQ(CAPSULE_STATUS_INPUT, 2);
    EXPECT_EQ(CAPSULE_STATUS_PLANNING, 3);
    EXPECT_EQ(CAPSULE_STATUS_GATE, 4);
    EXPECT_EQ(CAPSULE_STATUS_PROBE, 5);
}

TEST(CApi, Versions) {
    EXPECT_STREQ(capsule_version(), "0.1.0");
    uint32_t major = 0, minor = 99;
    capsule_c_api_version(&major, &minor);
    EXPECT_EQ(major, CAPSULE_C_API_MAJOR);
    EXPECT_EQ(minor, CAPSULE_C_API_MINOR);
    capsule_c_api_version(nullptr, nullptr);
}

TEST(CApi, DtypeNames) {
    EXPECT_STREQ(capsule_dtype_name(CAPSULE_DTYPE_FLOAT32), "float32");
    EXPECT_STREQ(capsule_dtype_name(CAPSULE_DTYPE_FLOAT64), "float64");
    EXPECT_STREQ(capsule_dtype_name(CAPSULE_DTYPE_INT64), "int64");
    EXPECT_STREQ(capsule_dtype_name(CAPSULE_DTYPE_BOOL), "bool");
    EXPECT_STREQ(capsule_dtype_name(CAPSULE_DTYPE_UINT8), "uint8");
    EXPECT_STREQ(capsule_dtype_name(CAPSULE_DTYPE_BFLOAT16), "bfloat16");
    EXPECT_EQ(dtype_name_of_int(13), nullptr);
    EXPECT_EQ(dtype_name_of_int(42), nullptr);
    EXPECT_EQ(dtype_name_of_int(-1), nullptr);
}

// ---- Host ----------------------------------------------------------------------------------

TEST(CApi, HostListsThePluginsOfTheGivenDirectory) {
    auto host = make_host();
    size_t count = 0;
    ASSERT_TRUE(Ok(capsule_host_get_plugin_count(host.get(), &count)));
    bool reference = false;
    for (size_t i = 0; i < count; ++i) {
        const char* name = nullptr;
        const char* status = nullptr;
        ASSERT_TRUE(Ok(capsule_host_get_plugin(host.get(), i, &name, &status)));
        ASSERT_NE(name, nullptr);
        ASSERT_NE(status, nullptr);
        if (std::string(name) == "reference") {
            reference = true;
            EXPECT_STREQ(status, "available");  // discovery opens no library
        }
    }
    EXPECT_TRUE(reference);
    EXPECT_TRUE(Fails(capsule_host_get_plugin(host.get(), count, nullptr, nullptr), CAPSULE_STATUS_INPUT,
                      "out of range"));
}

TEST(CApi, HostWithDefaultSearchFindsThePluginsBesideTheLibrary) {
    // The library is built beside the programs, so bin/plugins is found from either.
    capsule_host_t* host = nullptr;
    ASSERT_TRUE(Ok(capsule_host_create(nullptr, 0, CAPSULE_HOST_DEFAULT, &host)));
    Host owned(host);
    size_t count = 0;
    ASSERT_TRUE(Ok(capsule_host_get_plugin_count(host, &count)));
    EXPECT_GT(count, 0u);
}

TEST(CApi, HostArgumentErrors) {
    capsule_host_t* host = reinterpret_cast<capsule_host_t*>(0x1);
    EXPECT_TRUE(Fails(capsule_host_create(nullptr, 0, 0, nullptr), CAPSULE_STATUS_INPUT, "out_host is NULL"));
    EXPECT_TRUE(Fails(capsule_host_create(nullptr, 1, 0, &host), CAPSULE_STATUS_INPUT, "plugin_dirs is NULL"));
    EXPECT_EQ(host, nullptr);  // cleared before failing
    const char* with_null[] = {CAPSULE_PLUGIN_DIR, nullptr};
    EXPECT_TRUE(Fails(capsule_host_create(with_null, 2, 0, &host), CAPSULE_STATUS_INPUT, "plugin_dirs[1] is NULL"));
    const char* missing[] = {"/nonexistent/capsule/plugins"};
    EXPECT_TRUE(Fails(capsule_host_create(missing, 1, 0, &host), CAPSULE_STATUS_INPUT,
                      "/nonexistent/capsule/plugins: no such file or directory"));
    EXPECT_TRUE(Fails(capsule_host_create(nullptr, 0, 0x80, &host), CAPSULE_STATUS_INPUT, "unknown flags 128"));
    size_t count = 0;
    EXPECT_TRUE(Fails(capsule_host_get_plugin_count(nullptr, &count), CAPSULE_STATUS_INPUT, "host is NULL"));
    auto real = make_host();
    EXPECT_TRUE(Fails(capsule_host_get_plugin_count(real.get(), nullptr), CAPSULE_STATUS_INPUT, "out_count is NULL"));
    EXPECT_TRUE(Fails(capsule_host_get_plugin(nullptr, 0, nullptr, nullptr), CAPSULE_STATUS_INPUT, "host is NULL"));
}

// ---- Profiles ------------------------------------------------------------------------------

TEST(CApi, ProfilesByNameFileAndJson) {
    auto profile = make_profile("onednn_cpu");
    const char* name = nullptr;
    ASSERT_TRUE(Ok(capsule_profile_get_name(profile.get(), &name)));
    EXPECT_STREQ(name, "onednn_cpu");

    capsule_profile_t* from_json = nullptr;
    ASSERT_TRUE(Ok(capsule_profile_from_json(
        R"({"name": "strict_cpu", "base": "checked_cpu", "acceptance_policy": "strict"})", &from_json)));
    Profile owned(from_json);
    ASSERT_TRUE(Ok(capsule_profile_get_name(from_json, &name)));
    EXPECT_STREQ(name, "strict_cpu");

    GraphFile dir;
    const auto file = dir.dir / "mine.json";
    std::ofstream(file) << R"({"name": "mine", "base": "checked_cpu", "lowering_mode": "singleton"})";
    for (auto* load : {&capsule_profile_load_file, &capsule_profile_create}) {
        capsule_profile_t* p = nullptr;
        ASSERT_TRUE(Ok(load(file.c_str(), &p)));
        Profile from_file(p);
        ASSERT_TRUE(Ok(capsule_profile_get_name(p, &name)));
        EXPECT_STREQ(name, "mine");
    }
}

TEST(CApi, ProfileErrors) {
    capsule_profile_t* profile = nullptr;
    EXPECT_TRUE(Fails(capsule_profile_create("no_such_profile", &profile), CAPSULE_STATUS_INPUT,
                      "unknown profile 'no_such_profile'; valid: checked_cpu"));
    EXPECT_EQ(profile, nullptr);
    EXPECT_TRUE(Fails(capsule_profile_create(nullptr, &profile), CAPSULE_STATUS_INPUT, "name is NULL"));
    EXPECT_TRUE(Fails(capsule_profile_create("checked_cpu", nullptr), CAPSULE_STATUS_INPUT, "out_profile is NULL"));
    EXPECT_TRUE(Fails(capsule_profile_load_file("/nonexistent/profile.json", &profile), CAPSULE_STATUS_INPUT,
                      "/nonexistent/profile.json"));
    EXPECT_TRUE(Fails(capsule_profile_from_json("{", &profile), CAPSULE_STATUS_INPUT, "profile JSON"));
    EXPECT_TRUE(Fails(capsule_profile_from_json(R"({"name": "x", "base": "checked_cpu", "colour": 1})", &profile),
                      CAPSULE_STATUS_INPUT, "colour"));
    EXPECT_TRUE(Fails(capsule_profile_from_json(nullptr, &profile), CAPSULE_STATUS_INPUT, "json is NULL"));
    const char* name = nullptr;
    EXPECT_TRUE(Fails(capsule_profile_get_name(nullptr, &name), CAPSULE_STATUS_INPUT, "profile is NULL"));
}

// ---- Models --------------------------------------------------------------------------------

TEST(CApi, OnnxModelDescribesItsInputsAndOutputs) {
    REQUIRE_ONNX();
    auto model = load_model(kMlp);
    size_t count = 0;
    ASSERT_TRUE(Ok(capsule_model_get_input_count(model.get(), &count)));
    ASSERT_EQ(count, 1u);
    const char* name = nullptr;
    capsule_dtype dtype = CAPSULE_DTYPE_BOOL;
    size_t rank = 0;
    const int64_t* shape = nullptr;
    ASSERT_TRUE(Ok(capsule_model_get_input(model.get(), 0, &name, &dtype, &rank, &shape)));
    EXPECT_STREQ(name, "x");
    EXPECT_EQ(dtype, CAPSULE_DTYPE_FLOAT32);
    ASSERT_EQ(rank, 2u);
    EXPECT_EQ(shape[0], 2);
    EXPECT_EQ(shape[1], 4);
    ASSERT_TRUE(Ok(capsule_model_get_output_count(model.get(), &count)));
    ASSERT_EQ(count, 1u);
    ASSERT_TRUE(Ok(capsule_model_get_output(model.get(), 0, &name, &dtype, &rank, &shape)));
    EXPECT_STREQ(name, "probs");
    ASSERT_EQ(rank, 2u);
    EXPECT_EQ(shape[1], 3);
    EXPECT_TRUE(Ok(capsule_model_get_input(model.get(), 0, nullptr, nullptr, nullptr, nullptr)));
    EXPECT_TRUE(Fails(capsule_model_get_input(model.get(), 1, &name, nullptr, nullptr, nullptr),
                      CAPSULE_STATUS_INPUT, "index 1 is out of range (the model has 1)"));
    EXPECT_TRUE(Fails(capsule_model_get_output(model.get(), 7, &name, nullptr, nullptr, nullptr),
                      CAPSULE_STATUS_INPUT, "index 7 is out of range"));
}

TEST(CApi, OnnxInputShapesMustAgreeWithTheModel) {
    REQUIRE_ONNX();
    const int64_t dims[] = {3, 4};
    capsule_input_shape_t shape{"x", 2, dims};
    capsule_model_t* model = nullptr;
    EXPECT_TRUE(Fails(capsule_model_load(kMlp.c_str(), &shape, 1, &model), CAPSULE_STATUS_INPUT, "x"));
    const int64_t same[] = {2, 4};
    shape.dims = same;
    ASSERT_TRUE(Ok(capsule_model_load(kMlp.c_str(), &shape, 1, &model)));
    capsule_model_release(model);
    capsule_input_shape_t nameless{nullptr, 0, nullptr};
    EXPECT_TRUE(Fails(capsule_model_load(kMlp.c_str(), &nameless, 1, &model), CAPSULE_STATUS_INPUT,
                      "input_shapes[0].name is NULL"));
}

TEST(CApi, JsonIrModelNamesAnUnnamedOutputByItsId) {
    GraphFile graph;
    auto model = load_model(graph.path.string());
    const char* name = nullptr;
    ASSERT_TRUE(Ok(capsule_model_get_input(model.get(), 0, &name, nullptr, nullptr, nullptr)));
    EXPECT_STREQ(name, "x");
    ASSERT_TRUE(Ok(capsule_model_get_output(model.get(), 0, &name, nullptr, nullptr, nullptr)));
    EXPECT_STREQ(name, "output_2");
}

TEST(CApi, ModelErrors) {
    capsule_model_t* model = nullptr;
    EXPECT_TRUE(Fails(capsule_model_load("/nonexistent/graph.json", nullptr, 0, &model), CAPSULE_STATUS_INPUT,
                      "/nonexistent/graph.json"));
    EXPECT_EQ(model, nullptr);
    EXPECT_TRUE(Fails(capsule_model_load(nullptr, nullptr, 0, &model), CAPSULE_STATUS_INPUT, "path is NULL"));
    EXPECT_TRUE(Fails(capsule_model_load("m.onnx", nullptr, 0, nullptr), CAPSULE_STATUS_INPUT, "out_model is NULL"));
    EXPECT_TRUE(Fails(capsule_model_load("m.onnx", nullptr, 2, &model), CAPSULE_STATUS_INPUT,
                      "input_shapes is NULL"));
    GraphFile graph;
    const int64_t dims[] = {2, 3};
    capsule_input_shape_t shape{"x", 2, dims};
    EXPECT_TRUE(Fails(capsule_model_load(graph.path.c_str(), &shape, 1, &model), CAPSULE_STATUS_INPUT,
                      "input shapes apply to ONNX models only"));
    std::ofstream(graph.dir / "bad.onnx") << "not a protobuf";
#ifdef CAPSULE_C_API_TEST_ONNX
    EXPECT_TRUE(Fails(capsule_model_load((graph.dir / "bad.onnx").c_str(), nullptr, 0, &model), CAPSULE_STATUS_INPUT,
                      "bad.onnx"));
#else
    EXPECT_TRUE(Fails(capsule_model_load((graph.dir / "bad.onnx").c_str(), nullptr, 0, &model), CAPSULE_STATUS_INPUT,
                      "built without ONNX support"));
#endif
    size_t count = 0;
    EXPECT_TRUE(Fails(capsule_model_get_input_count(nullptr, &count), CAPSULE_STATUS_INPUT, "model is NULL"));
    EXPECT_TRUE(Fails(capsule_model_get_output_count(nullptr, &count), CAPSULE_STATUS_INPUT, "model is NULL"));
    EXPECT_TRUE(Fails(capsule_model_get_input(nullptr, 0, nullptr, nullptr, nullptr, nullptr), CAPSULE_STATUS_INPUT,
                      "model is NULL"));
    EXPECT_TRUE(Fails(capsule_model_get_output(nullptr, 0, nullptr, nullptr, nullptr, nullptr),
                      CAPSULE_STATUS_INPUT, "model is NULL"));
}

// ---- Plans ---------------------------------------------------------------------------------

TEST(CApi, AcceptedPlanHasItsReport) {
    REQUIRE_ONNX();
    auto h = planned(kMlp);
    ASSERT_NE(h.plan, nullptr);
    const char* json = nullptr;
    ASSERT_TRUE(Ok(capsule_plan_get_report_json(h.plan.get(), &json)));
    const std::string report(json);
    EXPECT_NE(report.find(R"("profile": "checked_cpu")"), std::string::npos) << report;
    EXPECT_NE(report.find(R"("status": "accepted")"), std::string::npos) << report;
    EXPECT_NE(report.find(R"("capsule": "reference.linear")"), std::string::npos) << report;
    EXPECT_NE(report.find(R"("capsule": "reference.softmax")"), std::string::npos) << report;
    const char* text = nullptr;
    ASSERT_TRUE(Ok(capsule_plan_get_report_text(h.plan.get(), &text)));
    EXPECT_NE(std::string(text).find("gate: accepted"), std::string::npos) << text;
}

TEST(CApi, GateRejectionIsGateWithTheReport) {
    GraphFile graph;
    auto host = make_host();
    auto model = load_model(graph.path.string());
    capsule_profile_t* strict = nullptr;
    ASSERT_TRUE(Ok(capsule_profile_from_json(
        R"({"name": "strict_cpu", "base": "checked_cpu", "acceptance_policy": "strict"})", &strict)));
    Profile owned(strict);
    capsule_plan_t* plan = reinterpret_cast<capsule_plan_t*>(0x1);
    capsule_status_t* status = capsule_plan_create(host.get(), strict, model.get(), &plan);
    Status held(status);
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(plan, nullptr);
    EXPECT_EQ(capsule_status_get_code(status), CAPSULE_STATUS_GATE);
    const std::string message = capsule_status_get_message(status);
    EXPECT_NE(message.find("the gate rejected the plan under profile 'strict_cpu'"), std::string::npos) << message;
    EXPECT_NE(message.find("gate: rejected"), std::string::npos) << message;
    ASSERT_NE(capsule_status_get_report_json(status), nullptr);
    const std::string report = capsule_status_get_report_json(status);
    EXPECT_NE(report.find(R"("status": "rejected")"), std::string::npos) << report;
    EXPECT_NE(report.find(R"("failures": [)"), std::string::npos) << report;
    EXPECT_NE(report.find(R"("kind": ")"), std::string::npos) << report;
}

TEST(CApi, PlanningFailureIsPlanningWithTheReport) {
    GraphFile graph;
    // The metal target is named by an empty stub manifest: no capsule serves it.
    auto h = loaded(graph.path.string(), "future_metal");
    capsule_plan_t* plan = nullptr;
    capsule_status_t* status = capsule_plan_create(h.host.get(), h.profile.get(), h.model.get(), &plan);
    Status held(status);
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(plan, nullptr);
    EXPECT_EQ(capsule_status_get_code(status), CAPSULE_STATUS_PLANNING) << capsule_status_get_message(status);
    EXPECT_NE(std::string(capsule_status_get_message(status)).find("relu"), std::string::npos)
        << capsule_status_get_message(status);
    ASSERT_NE(capsule_status_get_report_json(status), nullptr);
    const std::string report = capsule_status_get_report_json(status);
    EXPECT_NE(report.find(R"("status": "planning_failed")"), std::string::npos) << report;
    EXPECT_NE(report.find(R"("profile": "future_metal")"), std::string::npos) << report;
}

TEST(CApi, PlanArgumentErrors) {
    GraphFile graph;
    auto h = loaded(graph.path.string());
    capsule_plan_t* plan = nullptr;
    EXPECT_TRUE(Fails(capsule_plan_create(nullptr, h.profile.get(), h.model.get(), &plan), CAPSULE_STATUS_INPUT,
                      "host is NULL"));
    EXPECT_TRUE(Fails(capsule_plan_create(h.host.get(), nullptr, h.model.get(), &plan), CAPSULE_STATUS_INPUT,
                      "profile is NULL"));
    EXPECT_TRUE(Fails(capsule_plan_create(h.host.get(), h.profile.get(), nullptr, &plan), CAPSULE_STATUS_INPUT,
                      "model is NULL"));
    EXPECT_TRUE(Fails(capsule_plan_create(h.host.get(), h.profile.get(), h.model.get(), nullptr), CAPSULE_STATUS_INPUT,
                      "out_plan is NULL"));
    const char* text = nullptr;
    EXPECT_TRUE(Fails(capsule_plan_get_report_json(nullptr, &text), CAPSULE_STATUS_INPUT, "plan is NULL"));
    EXPECT_TRUE(Fails(capsule_plan_get_report_text(nullptr, &text), CAPSULE_STATUS_INPUT, "plan is NULL"));
    auto real = make_plan(h.host.get(), h.profile.get(), h.model.get());
    EXPECT_TRUE(Fails(capsule_plan_get_report_json(real.get(), nullptr), CAPSULE_STATUS_INPUT, "out_json is NULL"));
}

// ---- Sessions ------------------------------------------------------------------------------

TEST(CApi, RunsTheOnnxModel) {
    REQUIRE_ONNX();
    auto h = opened(kMlp);
    ASSERT_NE(h.session, nullptr);
    size_t count = 0;
    ASSERT_TRUE(Ok(capsule_session_get_output_count(h.session.get(), &count)));
    ASSERT_EQ(count, 1u);

    auto x = mlp_x();
    const char* names[] = {"x"};
    const capsule_tensor_t* inputs[] = {x.get()};
    capsule_tensor_t* outputs[1] = {nullptr};
    ASSERT_TRUE(Ok(capsule_session_run(h.session.get(), names, inputs, 1, nullptr, outputs, 1)));
    Tensor probs(outputs[0]);
    EXPECT_TRUE(has_info(probs.get(), CAPSULE_DTYPE_FLOAT32, {2, 3}));
    expect_near(floats(probs.get()), kMlpProbs);

    // By name, and again on the same session.
    const char* wanted[] = {"probs"};
    ASSERT_TRUE(Ok(capsule_session_run(h.session.get(), names, inputs, 1, wanted, outputs, 1)));
    Tensor again(outputs[0]);
    expect_near(floats(again.get()), kMlpProbs);
}

TEST(CApi, RunsAJsonIrGraph) {
    GraphFile graph;
    auto h = opened(graph.path.string());
    const float x[] = {-1, 0, 1, 2, 2, 2};
    auto input = make_tensor(CAPSULE_DTYPE_FLOAT32, {2, 3}, x, sizeof x);
    const char* names[] = {"x"};
    const capsule_tensor_t* inputs[] = {input.get()};
    const char* wanted[] = {"output_2"};
    capsule_tensor_t* outputs[1] = {nullptr};
    ASSERT_TRUE(Ok(capsule_session_run(h.session.get(), names, inputs, 1, wanted, outputs, 1)));
    Tensor out(outputs[0]);
    // relu → [0, 0, 1], [2, 2, 2]; softmax of a row: e^v / Σ e^v.
    const double e = std::exp(1.0);
    expect_near(floats(out.get()), {1 / (2 + e), 1 / (2 + e), e / (2 + e), 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST(CApi, HandlesMayBeReleasedBeforeTheSessionRuns) {
    REQUIRE_ONNX();
    auto h = planned(kMlp);
    h.host.reset();
    h.profile.reset();
    h.model.reset();
    auto session = make_session(h.plan.get());
    h.plan.reset();
    auto x = mlp_x();
    const char* names[] = {"x"};
    const capsule_tensor_t* inputs[] = {x.get()};
    capsule_tensor_t* outputs[1] = {nullptr};
    ASSERT_TRUE(Ok(capsule_session_run(session.get(), names, inputs, 1, nullptr, outputs, 1)));
    Tensor probs(outputs[0]);
    expect_near(floats(probs.get()), kMlpProbs);
}

TEST(CApi, RunsFromManyThreadsAtOnce) {
    REQUIRE_ONNX();
    auto h = opened(kMlp);
    auto x = mlp_x();
    std::vector<int> failures(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            const char* names[] = {"x"};
            const capsule_tensor_t* inputs[] = {x.get()};
            for (int i = 0; i < 20; ++i) {
                capsule_tensor_t* out = nullptr;
                capsule_status_t* status = capsule_session_run(h.session.get(), names, inputs, 1, nullptr, &out, 1);
                if (status) {
                    ++failures[t];
                    capsule_status_release(status);
                    continue;
                }
                const void* data = nullptr;
                capsule_status_release(capsule_tensor_get_data(out, &data, nullptr));
                const auto* v = static_cast<const float*>(data);
                for (size_t k = 0; k < kMlpProbs.size(); ++k)
                    if (std::abs(v[k] - kMlpProbs[k]) > 2e-6) ++failures[t];
                capsule_tensor_release(out);
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST(CApi, RunErrors) {
    GraphFile graph;
    auto h = opened(graph.path.string());
    const float values[6] = {};
    auto x = make_tensor(CAPSULE_DTYPE_FLOAT32, {2, 3}, values, sizeof values);
    auto wrong_shape = make_tensor(CAPSULE_DTYPE_FLOAT32, {3, 2}, values, sizeof values);
    auto wrong_dtype = make_tensor(CAPSULE_DTYPE_INT64, {2, 3}, nullptr, 0);
    const char* x_name[] = {"x"};
    const char* y_name[] = {"y"};
    const char* twice[] = {"x", "x"};
    const capsule_tensor_t* one[] = {x.get()};
    const capsule_tensor_t* two[] = {x.get(), x.get()};
    const capsule_tensor_t* shape_one[] = {wrong_shape.get()};
    const capsule_tensor_t* dtype_one[] = {wrong_dtype.get()};
    const capsule_tensor_t* null_one[] = {nullptr};
    capsule_tensor_t* outputs[2] = {reinterpret_cast<capsule_tensor_t*>(0x1), reinterpret_cast<capsule_tensor_t*>(0x1)};

    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), y_name, one, 1, nullptr, outputs, 1), CAPSULE_STATUS_INPUT,
                      "missing input 'x'"));
    EXPECT_EQ(outputs[0], nullptr);  // cleared before failing
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), twice, two, 2, nullptr, outputs, 1), CAPSULE_STATUS_INPUT,
                      "input 'x' is given twice"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), nullptr, nullptr, 0, nullptr, outputs, 1),
                      CAPSULE_STATUS_INPUT, "missing input 'x'"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, shape_one, 1, nullptr, outputs, 1),
                      CAPSULE_STATUS_INPUT, "input 'x' is float32[3, 2], the graph declares float32[2, 3]"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, dtype_one, 1, nullptr, outputs, 1),
                      CAPSULE_STATUS_INPUT, "input 'x' is int64[2, 3]"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, null_one, 1, nullptr, outputs, 1),
                      CAPSULE_STATUS_INPUT, "inputs[0] ('x') is NULL"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), nullptr, one, 1, nullptr, outputs, 1), CAPSULE_STATUS_INPUT,
                      "input_names is NULL"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, one, 1, nullptr, outputs, 2), CAPSULE_STATUS_INPUT,
                      "output_count is 2, the model has 1 outputs"));
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, one, 1, nullptr, nullptr, 1), CAPSULE_STATUS_INPUT,
                      "outputs is NULL"));
    const char* unknown[] = {"logits"};
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, one, 1, unknown, outputs, 1), CAPSULE_STATUS_INPUT,
                      "unknown output 'logits'; the model's outputs: output_2"));
    const char* repeated[] = {"output_2", "output_2"};
    EXPECT_TRUE(Fails(capsule_session_run(h.session.get(), x_name, one, 1, repeated, outputs, 2), CAPSULE_STATUS_INPUT,
                      "output 'output_2' is asked for twice"));
    EXPECT_TRUE(Fails(capsule_session_run(nullptr, x_name, one, 1, nullptr, outputs, 1), CAPSULE_STATUS_INPUT,
                      "session is NULL"));
    EXPECT_EQ(outputs[0], nullptr);
    EXPECT_EQ(outputs[1], nullptr);

    // Asking for no output runs the model and returns nothing.
    EXPECT_TRUE(Ok(capsule_session_run(h.session.get(), x_name, one, 1, repeated, nullptr, 0)));
}

TEST(CApi, SessionArgumentErrors) {
    GraphFile graph;
    auto h = planned(graph.path.string());
    capsule_session_t* session = nullptr;
    EXPECT_TRUE(Fails(capsule_session_create(nullptr, 0, &session), CAPSULE_STATUS_INPUT, "plan is NULL"));
    EXPECT_TRUE(Fails(capsule_session_create(h.plan.get(), -1, &session), CAPSULE_STATUS_INPUT, "threads is -1"));
    // Thread pools create their threads up front: a count beyond any machine is refused, not tried.
    EXPECT_TRUE(Fails(capsule_session_create(h.plan.get(), 100000, &session), CAPSULE_STATUS_INPUT,
                      "session threads must be 0 (every core) to 4096, got 100000"));
    EXPECT_TRUE(Fails(capsule_session_create(h.plan.get(), 0, nullptr), CAPSULE_STATUS_INPUT, "out_session is NULL"));
    size_t count = 0;
    EXPECT_TRUE(Fails(capsule_session_get_output_count(nullptr, &count), CAPSULE_STATUS_INPUT, "session is NULL"));
}

TEST(CApi, MissingDeviceIsProbe) {
    GraphFile graph;
    auto h = planned(graph.path.string(), "checked_cuda");
    ASSERT_NE(h.plan, nullptr);
    capsule_session_t* session = nullptr;
    capsule_status_t* status = capsule_session_create(h.plan.get(), 0, &session);
    if (!status) {
        capsule_session_release(session);
        GTEST_SKIP() << "a CUDA device is usable here";
    }
    Status held(status);
    EXPECT_EQ(session, nullptr);
    EXPECT_EQ(capsule_status_get_code(status), CAPSULE_STATUS_PROBE) << capsule_status_get_message(status);
    EXPECT_NE(std::string(capsule_status_get_message(status)).find("cuda"), std::string::npos)
        << capsule_status_get_message(status);
}

TEST(CApi, MissingParametersAreInput) {
    // A linear node without its parameters file: the session cannot bind fc.weight.
    GraphFile graph;
    std::ofstream(graph.path) << R"({"format": "capsule-ir", "version": 1, "nodes": [
        {"id": 0, "op": "input", "name": "x", "shape": [1, 2]},
        {"id": 1, "op": "linear", "name": "fc", "parents": [0], "attrs": {"out_features": 2}, "shape": [1, 2]}],
      "outputs": [1]})";
    auto h = planned(graph.path.string());
    capsule_session_t* session = nullptr;
    EXPECT_TRUE(Fails(capsule_session_create(h.plan.get(), 0, &session), CAPSULE_STATUS_INPUT, "fc.weight"));
    EXPECT_EQ(session, nullptr);
}

// ---- Tensors -------------------------------------------------------------------------------

TEST(CApi, TensorsCopyTheirDataAndDescribeThemselves) {
    const int64_t values[] = {1, 2, 3, 4, 5, 6};
    auto t = make_tensor(CAPSULE_DTYPE_INT64, {3, 2}, values, sizeof values);
    EXPECT_TRUE(has_info(t.get(), CAPSULE_DTYPE_INT64, {3, 2}));
    size_t rank = 0;
    int64_t count = 0;
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_TRUE(Ok(capsule_tensor_get_data(t.get(), &data, &bytes)));
    ASSERT_EQ(bytes, sizeof values);
    EXPECT_NE(data, static_cast<const void*>(values));
    EXPECT_EQ(std::memcmp(data, values, bytes), 0);
    void* writable = nullptr;
    ASSERT_TRUE(Ok(capsule_tensor_get_mutable_data(t.get(), &writable, nullptr)));
    static_cast<int64_t*>(writable)[5] = 60;
    EXPECT_EQ(static_cast<const int64_t*>(data)[5], 60);

    auto zeros = make_tensor(CAPSULE_DTYPE_FLOAT64, {4}, nullptr, 0);
    ASSERT_TRUE(Ok(capsule_tensor_get_data(zeros.get(), &data, &bytes)));
    ASSERT_EQ(bytes, 4 * sizeof(double));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<const double*>(data)[i], 0.0);

    const double pi = 3.25;
    capsule_tensor_t* scalar = nullptr;
    ASSERT_TRUE(Ok(capsule_tensor_create(CAPSULE_DTYPE_FLOAT64, nullptr, 0, &pi, sizeof pi, &scalar)));
    Tensor owned(scalar);
    ASSERT_TRUE(Ok(capsule_tensor_get_info(scalar, nullptr, &rank, nullptr, &count)));
    EXPECT_EQ(rank, 0u);
    EXPECT_EQ(count, 1);

    const unsigned char flags[] = {0, 1, 1};
    auto b = make_tensor(CAPSULE_DTYPE_BOOL, {3}, flags, sizeof flags);
    auto empty = make_tensor(CAPSULE_DTYPE_FLOAT32, {0, 5}, nullptr, 0);
    ASSERT_TRUE(Ok(capsule_tensor_get_info(empty.get(), nullptr, nullptr, nullptr, &count)));
    EXPECT_EQ(count, 0);
}

TEST(CApi, TensorErrors) {
    const float values[4] = {};
    const int64_t shape[] = {2, 2};
    capsule_tensor_t* t = reinterpret_cast<capsule_tensor_t*>(0x1);
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, shape, 2, values, 12, &t), CAPSULE_STATUS_INPUT,
                      "byte_size is 12, a float32[2, 2] tensor has 16 bytes"));
    EXPECT_EQ(t, nullptr);
    // A forged shape is compared with byte_size before anything is allocated (not 1 TiB, then OTHER).
    const int64_t forged[] = {int64_t{1} << 40};
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_UINT8, forged, 1, values, 3, &t), CAPSULE_STATUS_INPUT,
                      "byte_size is 3, a uint8[1099511627776] tensor has 1099511627776 bytes"));
    EXPECT_TRUE(Fails(tensor_create_with_int_dtype(13, shape, 2, values, 16, &t),
                      CAPSULE_STATUS_INPUT, "dtype 13 is not a capsule_dtype"));
    EXPECT_TRUE(Fails(tensor_create_with_int_dtype(-1, shape, 2, values, 16, &t),
                      CAPSULE_STATUS_INPUT, "dtype -1 is not a capsule_dtype"));
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, nullptr, 2, values, 16, &t), CAPSULE_STATUS_INPUT,
                      "shape is NULL"));
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, shape, SIZE_MAX, values, 16, &t),
                      CAPSULE_STATUS_INPUT, "rank is 18446744073709551615; at most 64 is accepted"));
    const int64_t negative[] = {2, -2};
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, negative, 2, values, 16, &t),
                      CAPSULE_STATUS_INPUT, "[2, -2]"));
    const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40};
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, huge, 2, nullptr, 0, &t), CAPSULE_STATUS_INPUT,
                      "[1099511627776, 1099511627776]"));
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, shape, 2, nullptr, 16, &t), CAPSULE_STATUS_INPUT,
                      "data is NULL but byte_size is 16"));
    const unsigned char not_bool[] = {0, 2};
    const int64_t two[] = {2};
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_BOOL, two, 1, not_bool, 2, &t), CAPSULE_STATUS_INPUT,
                      "bool element 1 is 2"));
    EXPECT_TRUE(Fails(capsule_tensor_create(CAPSULE_DTYPE_FLOAT32, shape, 2, values, 16, nullptr),
                      CAPSULE_STATUS_INPUT, "out_tensor is NULL"));
    EXPECT_TRUE(Fails(capsule_tensor_get_info(nullptr, nullptr, nullptr, nullptr, nullptr), CAPSULE_STATUS_INPUT,
                      "tensor is NULL"));
    EXPECT_TRUE(Fails(capsule_tensor_get_data(nullptr, nullptr, nullptr), CAPSULE_STATUS_INPUT, "tensor is NULL"));
    EXPECT_TRUE(Fails(capsule_tensor_get_mutable_data(nullptr, nullptr, nullptr), CAPSULE_STATUS_INPUT,
                      "tensor is NULL"));
}

TEST(CApi, NpyFilesRoundTrip) {
    GraphFile dir;
    const auto path = (dir.dir / "t.npy").string();
    const float values[] = {1.5f, -2.0f, 0.25f};
    auto t = make_tensor(CAPSULE_DTYPE_FLOAT32, {3}, values, sizeof values);
    ASSERT_TRUE(Ok(capsule_tensor_write_npy(t.get(), path.c_str())));
    capsule_tensor_t* read = nullptr;
    ASSERT_TRUE(Ok(capsule_tensor_read_npy(path.c_str(), &read)));
    Tensor owned(read);
    EXPECT_EQ(floats(read), std::vector<float>(values, values + 3));
    EXPECT_TRUE(Fails(capsule_tensor_read_npy((dir.dir / "missing.npy").c_str(), &read), CAPSULE_STATUS_INPUT,
                      "missing.npy"));
    EXPECT_EQ(read, nullptr);
    EXPECT_TRUE(Fails(capsule_tensor_write_npy(t.get(), (dir.dir / "no/such/dir/t.npy").c_str()),
                      CAPSULE_STATUS_OTHER, "t.npy"));
    EXPECT_TRUE(Fails(capsule_tensor_write_npy(nullptr, path.c_str()), CAPSULE_STATUS_INPUT, "tensor is NULL"));
    EXPECT_TRUE(Fails(capsule_tensor_read_npy(nullptr, &read), CAPSULE_STATUS_INPUT, "path is NULL"));
}

}  // namespace
