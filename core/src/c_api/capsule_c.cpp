// The C API (capsule/capsule.h) over the C++ runtime. Every entry point runs its body inside
// `guarded`, which turns any exception into a status object (status_from_exception is the one
// place that maps error codes to status codes); argument checks throw Error(input) like the rest
// of the runtime, so they take the same path.
#include "capsule/capsule.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "capsule/report.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor.hpp"
#include "capsule/tensor_io.hpp"
#ifdef CAPSULE_C_WITH_ONNX
#include "capsule/onnx_import.hpp"
#endif

namespace fs = std::filesystem;

static_assert(CAPSULE_C_API_MAJOR == CAPSULE_C_SOVERSION, "the library's SOVERSION is the C API's major version");

struct capsule_status_t {
    capsule_status_code_t code = CAPSULE_STATUS_OTHER;
    std::string message;
    std::optional<std::string> report_json;
    bool preallocated = false;  // the out-of-memory status: never freed
};

namespace {

/// Values of a model's graph inputs and outputs as the C API describes them.
struct ValueInfo {
    std::string name;
    capsule::DType dtype = capsule::DType::float32;
    capsule::Shape shape;
};

/// A loaded model: graph, parameters and what ONNX import adds.
struct ModelData {
    capsule::Graph graph;
    capsule::ParameterMap parameters;
    std::map<std::string, std::vector<std::string>> parameter_inputs;
    std::vector<std::string> unused_inputs;
    std::vector<ValueInfo> inputs;
    std::vector<ValueInfo> outputs;
};

/// What an accepted plan holds, shared with the sessions made from it.
struct PlanData {
    std::shared_ptr<const capsule::PluginHost> host;
    capsule::BackendProfile profile;
    std::shared_ptr<const ModelData> model;
    capsule::AcceptedPlan accepted;
    std::string report_json;
    std::string report_text;
};

/// An error that already knows its status code (and, for planning and gate outcomes, its
/// report).
class StatusError : public std::runtime_error {
public:
    StatusError(capsule_status_code_t status_code, const std::string& message,
                std::optional<std::string> report_json = std::nullopt)
        : std::runtime_error(message), code(status_code), report(std::move(report_json)) {}
    capsule_status_code_t code;
    std::optional<std::string> report;
};

capsule_status_t out_of_memory_status{CAPSULE_STATUS_OTHER, "out of memory", std::nullopt, true};

capsule_status_t* make_status(capsule_status_code_t code, const char* message,
                              const std::optional<std::string>& report = std::nullopt) noexcept {
    try {
        auto* status = new capsule_status_t;
        status->code = code;
        status->message = message;
        while (!status->message.empty() && status->message.back() == '\n') status->message.pop_back();
        status->report_json = report;
        return status;
    } catch (...) {
        return &out_of_memory_status;
    }
}

/// The status for the exception in flight: the one mapping from the runtime's error codes to
/// status codes (both are the `capsule` tool's exit codes).
capsule_status_t* status_from_exception() noexcept {
    try {
        throw;
    } catch (const StatusError& e) {
        return make_status(e.code, e.what(), e.report);
    } catch (const capsule::Error& e) {
        static_assert(int(capsule::ErrorCode::input) == CAPSULE_STATUS_INPUT &&
                          int(capsule::ErrorCode::planning) == CAPSULE_STATUS_PLANNING &&
                          int(capsule::ErrorCode::gate) == CAPSULE_STATUS_GATE &&
                          int(capsule::ErrorCode::probe) == CAPSULE_STATUS_PROBE &&
                          int(capsule::ErrorCode::other) == CAPSULE_STATUS_OTHER,
                      "status codes are the error codes (the CLI's exit codes)");
        return make_status(static_cast<capsule_status_code_t>(e.code()), e.what());
    } catch (const std::bad_alloc&) {
        return &out_of_memory_status;
    } catch (const std::exception& e) {
        return make_status(CAPSULE_STATUS_OTHER, e.what());
    } catch (...) {
        return make_status(CAPSULE_STATUS_OTHER, "unknown error");
    }
}

/// Runs `body`; NULL when it returns, the status of what it threw otherwise.
template <typename Body>
capsule_status_t* guarded(Body&& body) noexcept {
    try {
        body();
        return nullptr;
    } catch (...) {
        return status_from_exception();
    }
}

[[noreturn]] void invalid(const char* function, const std::string& what) {
    throw capsule::Error(capsule::ErrorCode::input, std::string(function) + ": " + what);
}

template <typename T>
void require(const T* pointer, const char* function, const char* name) {
    if (pointer == nullptr) invalid(function, std::string(name) + " is NULL");
}

/// Checks `out` and clears `*out`, so that a failure leaves nothing to release.
template <typename T>
void clear_out(T** out, const char* function, const char* name) {
    require(out, function, name);
    *out = nullptr;
}

/// The value a C caller passed as a capsule_dtype. C lets any int through; C++ may not even load
/// an enum object whose value is outside its enumerators, so the bits are copied instead.
int raw_dtype(const capsule_dtype& dtype) {
    std::underlying_type_t<capsule_dtype> raw;
    std::memcpy(&raw, &dtype, sizeof raw);
    return static_cast<int>(raw);
}

capsule::DType dtype_from_c(const capsule_dtype& dtype, const char* function) {
    const int value = raw_dtype(dtype);
    if (value < 0 || static_cast<size_t>(value) >= capsule::Spellings<capsule::DType>::values.size())
        invalid(function, "dtype " + std::to_string(value) + " is not a capsule_dtype");
    return static_cast<capsule::DType>(value);
}

capsule_dtype dtype_to_c(capsule::DType dtype) { return static_cast<capsule_dtype>(dtype); }

std::string dump(const nlohmann::ordered_json& json) {
    return json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

/// The directory of the file this library was loaded from; empty when it cannot be told.
fs::path library_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&capsule_version), &info) == 0 || info.dli_fname == nullptr) return {};
    std::error_code ec;
    auto path = fs::weakly_canonical(fs::path(info.dli_fname), ec);
    return ec ? fs::path{} : path.parent_path();
}

fs::path executable_dir() {
    std::error_code ec;
    auto exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path{} : exe.parent_path();
}

std::vector<ValueInfo> graph_inputs(const capsule::Graph& graph) {
    std::vector<ValueInfo> inputs;
    for (const auto& node : graph.nodes)
        if (node.kind == capsule::NodeKind::input)
            inputs.push_back({node.parameter_prefix(), node.dtype, node.shape});
    return inputs;
}

std::vector<ValueInfo> graph_outputs(const capsule::Graph& graph) {
    std::vector<ValueInfo> outputs;
    const auto names = capsule::output_names(graph);
    const auto position = capsule::node_positions(graph);
    for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
        const auto& node = graph.nodes[position.at(graph.outputs[i])];
        outputs.push_back({names[i], node.dtype, node.shape});
    }
    return outputs;
}

capsule_status_t* value_info(const std::vector<ValueInfo>& values, size_t index, const char* function,
                             const char** out_name, capsule_dtype* out_dtype, size_t* out_rank,
                             const int64_t** out_shape) {
    return guarded([&] {
        if (index >= values.size())
            invalid(function, "index " + std::to_string(index) + " is out of range (the model has " +
                                  std::to_string(values.size()) + ")");
        const auto& v = values[index];
        if (out_name) *out_name = v.name.c_str();
        if (out_dtype) *out_dtype = dtype_to_c(v.dtype);
        if (out_rank) *out_rank = v.shape.size();
        if (out_shape) *out_shape = v.shape.data();
    });
}

}  // namespace

struct capsule_host_t {
    std::shared_ptr<const capsule::PluginHost> host;
    std::vector<std::string> names;
    std::vector<std::string> statuses;
};

struct capsule_profile_t {
    capsule::BackendProfile profile;
};

struct capsule_model_t {
    std::shared_ptr<const ModelData> model;
};

struct capsule_plan_t {
    std::shared_ptr<const PlanData> plan;
};

struct capsule_session_t {
    std::shared_ptr<const PlanData> plan;
    capsule::Session session;
};

struct capsule_tensor_t {
    capsule::Tensor tensor;
};

extern "C" {

// ---- Status ----------------------------------------------------------------------------------

capsule_status_code_t capsule_status_get_code(const capsule_status_t* status) {
    return status ? status->code : CAPSULE_STATUS_OK;
}

const char* capsule_status_get_message(const capsule_status_t* status) {
    return status ? status->message.c_str() : "";
}

const char* capsule_status_get_report_json(const capsule_status_t* status) {
    return status && status->report_json ? status->report_json->c_str() : nullptr;
}

void capsule_status_release(capsule_status_t* status) {
    if (status && !status->preallocated) delete status;
}

// ---- Versions and dtypes ---------------------------------------------------------------------

const char* capsule_version(void) { return CAPSULE_VERSION; }

void capsule_c_api_version(uint32_t* major, uint32_t* minor) {
    if (major) *major = CAPSULE_C_API_MAJOR;
    if (minor) *minor = CAPSULE_C_API_MINOR;
}

const char* capsule_dtype_name(capsule_dtype dtype) {
    const int value = raw_dtype(dtype);
    const auto& spellings = capsule::Spellings<capsule::DType>::values;
    if (value < 0 || static_cast<size_t>(value) >= spellings.size()) return nullptr;
    return spellings[static_cast<size_t>(value)].second.data();  // string literals: NUL-terminated
}

// ---- Plugin host -----------------------------------------------------------------------------

capsule_status_t* capsule_host_create(const char* const* plugin_dirs, size_t dir_count, uint32_t flags,
                                      capsule_host_t** out_host) {
    return guarded([&] {
        constexpr const char* fn = "capsule_host_create";
        clear_out(out_host, fn, "out_host");
        if (dir_count > 0) require(plugin_dirs, fn, "plugin_dirs");
        if (flags & ~uint32_t{CAPSULE_HOST_ONLY_GIVEN_DIRS})
            invalid(fn, "unknown flags " + std::to_string(flags & ~uint32_t{CAPSULE_HOST_ONLY_GIVEN_DIRS}));
        std::vector<fs::path> given;
        for (size_t i = 0; i < dir_count; ++i) {
            if (plugin_dirs[i] == nullptr) invalid(fn, "plugin_dirs[" + std::to_string(i) + "] is NULL");
            std::error_code ec;
            if (!fs::exists(plugin_dirs[i], ec))
                invalid(fn, std::string("plugin directory ") + plugin_dirs[i] + ": no such file or directory");
            given.emplace_back(plugin_dirs[i]);
        }
        capsule::PluginSearchPath search;
        if (flags & CAPSULE_HOST_ONLY_GIVEN_DIRS) {
            search.entries = given;
        } else {
            // Beside the program, beside this library (the build tree's bin/plugins, or the
            // installed plugin directory relative to the installed library directory), then
            // CAPSULE_PLUGIN_PATH and the given entries. A manifest found twice is read once
            // (PluginHost::discover).
            search.entries = capsule::PluginSearchPath::standard(executable_dir(), nullptr, {}).entries;
            if (const auto dir = library_dir(); !dir.empty()) {
                for (auto entry : {dir / "plugins", (dir / CAPSULE_C_INSTALLED_PLUGIN_DIR_FROM_LIB).lexically_normal()})
                    if (std::find(search.entries.begin(), search.entries.end(), entry) == search.entries.end())
                        search.entries.push_back(std::move(entry));
            }
            for (auto& entry : capsule::PluginSearchPath::standard({}, std::getenv("CAPSULE_PLUGIN_PATH"), given).entries)
                search.entries.push_back(std::move(entry));
        }
        auto host = std::make_unique<capsule_host_t>();
        host->host = std::make_shared<const capsule::PluginHost>(capsule::PluginHost::discover(search));
        for (const auto& record : host->host->plugins()) {
            host->names.push_back(record.name);
            host->statuses.push_back(record.status_text());
        }
        *out_host = host.release();
    });
}

capsule_status_t* capsule_host_get_plugin_count(const capsule_host_t* host, size_t* out_count) {
    return guarded([&] {
        require(host, "capsule_host_get_plugin_count", "host");
        require(out_count, "capsule_host_get_plugin_count", "out_count");
        *out_count = host->names.size();
    });
}

capsule_status_t* capsule_host_get_plugin(const capsule_host_t* host, size_t index, const char** out_name,
                                          const char** out_status) {
    return guarded([&] {
        constexpr const char* fn = "capsule_host_get_plugin";
        require(host, fn, "host");
        if (index >= host->names.size())
            invalid(fn, "index " + std::to_string(index) + " is out of range (the host has " +
                            std::to_string(host->names.size()) + " plugins)");
        if (out_name) *out_name = host->names[index].c_str();
        if (out_status) *out_status = host->statuses[index].c_str();
    });
}

void capsule_host_release(capsule_host_t* host) { delete host; }

// ---- Profiles --------------------------------------------------------------------------------

capsule_status_t* capsule_profile_create(const char* name, capsule_profile_t** out_profile) {
    return guarded([&] {
        clear_out(out_profile, "capsule_profile_create", "out_profile");
        require(name, "capsule_profile_create", "name");
        const std::string spelled(name);
        auto profile = std::make_unique<capsule_profile_t>();
        if (spelled.size() > 5 && spelled.ends_with(".json")) {
            profile->profile = capsule::load_profile_file(spelled);
        } else {
            try {
                profile->profile = capsule::find_builtin_profile(spelled);
            } catch (const capsule::Error& e) {
                if (e.code() != capsule::ErrorCode::input) throw;
                throw capsule::Error(capsule::ErrorCode::input, std::string(e.what()) + " (or a profile .json file)");
            }
        }
        *out_profile = profile.release();
    });
}

capsule_status_t* capsule_profile_load_file(const char* path, capsule_profile_t** out_profile) {
    return guarded([&] {
        clear_out(out_profile, "capsule_profile_load_file", "out_profile");
        require(path, "capsule_profile_load_file", "path");
        auto profile = std::make_unique<capsule_profile_t>();
        profile->profile = capsule::load_profile_file(path);
        *out_profile = profile.release();
    });
}

capsule_status_t* capsule_profile_from_json(const char* json, capsule_profile_t** out_profile) {
    return guarded([&] {
        clear_out(out_profile, "capsule_profile_from_json", "out_profile");
        require(json, "capsule_profile_from_json", "json");
        auto profile = std::make_unique<capsule_profile_t>();
        profile->profile = capsule::profile_from_json(json, "profile JSON");
        *out_profile = profile.release();
    });
}

capsule_status_t* capsule_profile_get_name(const capsule_profile_t* profile, const char** out_name) {
    return guarded([&] {
        require(profile, "capsule_profile_get_name", "profile");
        require(out_name, "capsule_profile_get_name", "out_name");
        *out_name = profile->profile.name.c_str();
    });
}

void capsule_profile_release(capsule_profile_t* profile) { delete profile; }

// ---- Models ----------------------------------------------------------------------------------

capsule_status_t* capsule_model_load(const char* path, const capsule_input_shape_t* input_shapes,
                                     size_t shape_count, capsule_model_t** out_model) {
    return guarded([&] {
        constexpr const char* fn = "capsule_model_load";
        clear_out(out_model, fn, "out_model");
        require(path, fn, "path");
        if (shape_count > 0) require(input_shapes, fn, "input_shapes");
        std::map<std::string, capsule::Shape> shapes;
        for (size_t i = 0; i < shape_count; ++i) {
            const auto& s = input_shapes[i];
            const std::string at = "input_shapes[" + std::to_string(i) + "]";
            if (s.name == nullptr) invalid(fn, at + ".name is NULL");
            if (s.rank > 0 && s.dims == nullptr) invalid(fn, at + ".dims is NULL");
            if (!shapes.emplace(s.name, capsule::Shape(s.dims, s.dims + s.rank)).second)
                invalid(fn, std::string("input '") + s.name + "' has two shapes");
        }
        const fs::path file(path);
        auto model = std::make_shared<ModelData>();
        if (file.extension() == ".onnx") {
#ifdef CAPSULE_C_WITH_ONNX
            capsule::OnnxImportOptions options;
            options.input_shapes = std::move(shapes);
            auto loaded = capsule::load_model(file, options);
            model->graph = std::move(loaded.graph);
            model->parameters = std::move(loaded.parameters);
            model->parameter_inputs = std::move(loaded.parameter_inputs);
            model->unused_inputs = std::move(loaded.unused_inputs);
#else
            invalid(fn, file.string() + ": this library was built without ONNX support (CAPSULE_WITH_ONNX=OFF)");
#endif
        } else {
            if (!shapes.empty())
                invalid(fn, file.string() + ": input shapes apply to ONNX models only; a JSON IR graph "
                                            "declares static shapes");
            model->graph = capsule::load_graph(file);
            model->parameters = capsule::load_graph_parameters(model->graph);
        }
        model->inputs = graph_inputs(model->graph);
        model->outputs = graph_outputs(model->graph);
        auto handle = std::make_unique<capsule_model_t>();
        handle->model = std::move(model);
        *out_model = handle.release();
    });
}

capsule_status_t* capsule_model_get_input_count(const capsule_model_t* model, size_t* out_count) {
    return guarded([&] {
        require(model, "capsule_model_get_input_count", "model");
        require(out_count, "capsule_model_get_input_count", "out_count");
        *out_count = model->model->inputs.size();
    });
}

capsule_status_t* capsule_model_get_input(const capsule_model_t* model, size_t index, const char** out_name,
                                          capsule_dtype* out_dtype, size_t* out_rank, const int64_t** out_shape) {
    if (model == nullptr) return guarded([] { invalid("capsule_model_get_input", "model is NULL"); });
    return value_info(model->model->inputs, index, "capsule_model_get_input", out_name, out_dtype, out_rank,
                      out_shape);
}

capsule_status_t* capsule_model_get_output_count(const capsule_model_t* model, size_t* out_count) {
    return guarded([&] {
        require(model, "capsule_model_get_output_count", "model");
        require(out_count, "capsule_model_get_output_count", "out_count");
        *out_count = model->model->outputs.size();
    });
}

capsule_status_t* capsule_model_get_output(const capsule_model_t* model, size_t index, const char** out_name,
                                           capsule_dtype* out_dtype, size_t* out_rank, const int64_t** out_shape) {
    if (model == nullptr) return guarded([] { invalid("capsule_model_get_output", "model is NULL"); });
    return value_info(model->model->outputs, index, "capsule_model_get_output", out_name, out_dtype, out_rank,
                      out_shape);
}

void capsule_model_release(capsule_model_t* model) { delete model; }

// ---- Plans -----------------------------------------------------------------------------------

capsule_status_t* capsule_plan_create(const capsule_host_t* host, const capsule_profile_t* profile,
                                      const capsule_model_t* model, capsule_plan_t** out_plan) {
    return guarded([&] {
        constexpr const char* fn = "capsule_plan_create";
        clear_out(out_plan, fn, "out_plan");
        require(host, fn, "host");
        require(profile, fn, "profile");
        require(model, fn, "model");
        const auto& p = profile->profile;
        capsule::AcceptedPlanResult result;
        try {
            result = p.accept_graph(*host->host, model->model->graph);
        } catch (const capsule::Error& e) {
            if (e.code() != capsule::ErrorCode::planning) throw;
            throw StatusError(CAPSULE_STATUS_PLANNING, e.what(), dump(capsule::planning_failed_json(p, e.what())));
        }
        auto text = capsule::gate_report(p, result.gate, false);
        auto json = dump(capsule::plan_json(p, result.gate));
        if (!result.accepted)
            throw StatusError(CAPSULE_STATUS_GATE, "the gate rejected the plan under profile '" + p.name + "'\n" + text,
                              std::move(json));
        auto plan = std::make_unique<capsule_plan_t>();
        plan->plan = std::make_shared<const PlanData>(PlanData{host->host, p, model->model, std::move(*result.accepted),
                                                               std::move(json), std::move(text)});
        *out_plan = plan.release();
    });
}

capsule_status_t* capsule_plan_get_report_json(const capsule_plan_t* plan, const char** out_json) {
    return guarded([&] {
        require(plan, "capsule_plan_get_report_json", "plan");
        require(out_json, "capsule_plan_get_report_json", "out_json");
        *out_json = plan->plan->report_json.c_str();
    });
}

capsule_status_t* capsule_plan_get_report_text(const capsule_plan_t* plan, const char** out_text) {
    return guarded([&] {
        require(plan, "capsule_plan_get_report_text", "plan");
        require(out_text, "capsule_plan_get_report_text", "out_text");
        *out_text = plan->plan->report_text.c_str();
    });
}

void capsule_plan_release(capsule_plan_t* plan) { delete plan; }

// ---- Sessions --------------------------------------------------------------------------------

capsule_status_t* capsule_session_create(const capsule_plan_t* plan, int32_t threads,
                                         capsule_session_t** out_session) {
    return guarded([&] {
        constexpr const char* fn = "capsule_session_create";
        clear_out(out_session, fn, "out_session");
        require(plan, fn, "plan");
        if (threads < 0) invalid(fn, "threads is " + std::to_string(threads) + "; give 0 (every core) or more");
        const auto& data = plan->plan;
        const auto& model = *data->model;
        if (!model.parameter_inputs.empty()) {
            std::string names;
            for (const auto& [name, keys] : model.parameter_inputs) names += (names.empty() ? "" : ", ") + name;
            invalid(fn, "the model takes parameters as graph inputs (" + names +
                            "); the C API needs them as initializers");
        }
        capsule::SessionOptions options;
        options.threads = threads;
        auto session = capsule::Session::create(data->profile, data->accepted, model.graph, *data->host,
                                                model.parameters, options);
        *out_session = new capsule_session_t{data, std::move(session)};
    });
}

capsule_status_t* capsule_session_get_output_count(const capsule_session_t* session, size_t* out_count) {
    return guarded([&] {
        require(session, "capsule_session_get_output_count", "session");
        require(out_count, "capsule_session_get_output_count", "out_count");
        *out_count = session->session.outputs().size();
    });
}

capsule_status_t* capsule_session_run(const capsule_session_t* session, const char* const* input_names,
                                      const capsule_tensor_t* const* inputs, size_t input_count,
                                      const char* const* output_names, capsule_tensor_t** outputs,
                                      size_t output_count) {
    if (outputs)
        for (size_t i = 0; i < output_count; ++i) outputs[i] = nullptr;
    return guarded([&] {
        constexpr const char* fn = "capsule_session_run";
        require(session, fn, "session");
        if (input_count > 0) {
            require(input_names, fn, "input_names");
            require(inputs, fn, "inputs");
        }
        if (output_count > 0) require(outputs, fn, "outputs");
        const auto& model = *session->plan->model;
        std::map<std::string, capsule::Tensor> given;
        for (size_t i = 0; i < input_count; ++i) {
            const auto at = "[" + std::to_string(i) + "]";
            if (input_names[i] == nullptr) invalid(fn, "input_names" + at + " is NULL");
            if (inputs[i] == nullptr) invalid(fn, "inputs" + at + " ('" + input_names[i] + "') is NULL");
            if (!given.emplace(input_names[i], inputs[i]->tensor).second)
                invalid(fn, std::string("input '") + input_names[i] + "' is given twice");
        }
        for (const auto& name : model.unused_inputs) given.erase(name);

        const auto& declared = model.outputs;
        std::vector<size_t> wanted;
        if (output_names == nullptr) {
            if (output_count != declared.size())
                invalid(fn, "output_count is " + std::to_string(output_count) + ", the model has " +
                                std::to_string(declared.size()) + " outputs");
            for (size_t i = 0; i < declared.size(); ++i) wanted.push_back(i);
        } else {
            std::set<std::string> seen;
            for (size_t i = 0; i < output_count; ++i) {
                if (output_names[i] == nullptr) invalid(fn, "output_names[" + std::to_string(i) + "] is NULL");
                const std::string name(output_names[i]);
                if (!seen.insert(name).second) invalid(fn, "output '" + name + "' is asked for twice");
                auto it = std::find_if(declared.begin(), declared.end(), [&](const ValueInfo& v) { return v.name == name; });
                if (it == declared.end()) {
                    std::string names;
                    for (const auto& v : declared) names += (names.empty() ? "" : ", ") + v.name;
                    invalid(fn, "unknown output '" + name + "'; the model's outputs: " + names);
                }
                wanted.push_back(static_cast<size_t>(it - declared.begin()));
            }
        }

        auto results = session->session.run(given);
        std::vector<std::unique_ptr<capsule_tensor_t>> made;
        for (auto index : wanted) made.push_back(std::make_unique<capsule_tensor_t>(capsule_tensor_t{results.at(index)}));
        for (size_t i = 0; i < made.size(); ++i) outputs[i] = made[i].release();
    });
}

void capsule_session_release(capsule_session_t* session) { delete session; }

// ---- Tensors ---------------------------------------------------------------------------------

capsule_status_t* capsule_tensor_create(capsule_dtype dtype, const int64_t* shape, size_t rank, const void* data,
                                        size_t byte_size, capsule_tensor_t** out_tensor) {
    return guarded([&] {
        constexpr const char* fn = "capsule_tensor_create";
        clear_out(out_tensor, fn, "out_tensor");
        const auto type = dtype_from_c(dtype, fn);
        if (rank > 0) require(shape, fn, "shape");
        // A rank beyond any tensor's is a caller's mistake (e.g. a byte count passed as the rank),
        // and would make `shape + rank` run past the array or wrap.
        constexpr size_t kMaxRank = 64;
        if (rank > kMaxRank)
            invalid(fn, "rank is " + std::to_string(rank) + "; at most " + std::to_string(kMaxRank) + " is accepted");
        capsule::Shape dims(shape, shape + rank);
        // Sizes are compared before anything is allocated: a forged shape with a few bytes of data
        // is the caller's mistake, not an allocation failure.
        const auto nbytes = capsule::byte_size(dims, type);  // Error(input) for a bad shape
        if (data == nullptr && byte_size != 0)
            invalid(fn, "data is NULL but byte_size is " + std::to_string(byte_size) +
                            " (give 0 for a zero-filled tensor)");
        if (data != nullptr && byte_size != nbytes)
            invalid(fn, "byte_size is " + std::to_string(byte_size) + ", a " + std::string(capsule::to_string(type)) +
                            capsule::to_string(dims) + " tensor has " + std::to_string(nbytes) + " bytes");
        auto tensor = capsule::Tensor::zeros(type, dims);
        if (data != nullptr) {
            if (type == capsule::DType::boolean) {
                const auto* bytes = static_cast<const unsigned char*>(data);
                for (size_t i = 0; i < byte_size; ++i)
                    if (bytes[i] > 1)
                        invalid(fn, "bool element " + std::to_string(i) + " is " + std::to_string(bytes[i]) +
                                        "; bool elements are 0 or 1");
            }
            if (byte_size > 0) std::memcpy(tensor.data(), data, byte_size);
        }
        *out_tensor = new capsule_tensor_t{std::move(tensor)};
    });
}

capsule_status_t* capsule_tensor_get_info(const capsule_tensor_t* tensor, capsule_dtype* out_dtype,
                                          size_t* out_rank, const int64_t** out_shape, int64_t* out_element_count) {
    return guarded([&] {
        require(tensor, "capsule_tensor_get_info", "tensor");
        const auto& t = tensor->tensor;
        if (out_dtype) *out_dtype = dtype_to_c(t.dtype());
        if (out_rank) *out_rank = t.shape().size();
        if (out_shape) *out_shape = t.shape().data();
        if (out_element_count) *out_element_count = t.numel();
    });
}

capsule_status_t* capsule_tensor_get_data(const capsule_tensor_t* tensor, const void** out_data,
                                          size_t* out_byte_size) {
    return guarded([&] {
        require(tensor, "capsule_tensor_get_data", "tensor");
        if (out_data) *out_data = tensor->tensor.data();
        if (out_byte_size) *out_byte_size = tensor->tensor.nbytes();
    });
}

capsule_status_t* capsule_tensor_get_mutable_data(capsule_tensor_t* tensor, void** out_data, size_t* out_byte_size) {
    return guarded([&] {
        require(tensor, "capsule_tensor_get_mutable_data", "tensor");
        if (out_data) *out_data = tensor->tensor.data();
        if (out_byte_size) *out_byte_size = tensor->tensor.nbytes();
    });
}

capsule_status_t* capsule_tensor_read_npy(const char* path, capsule_tensor_t** out_tensor) {
    return guarded([&] {
        clear_out(out_tensor, "capsule_tensor_read_npy", "out_tensor");
        require(path, "capsule_tensor_read_npy", "path");
        *out_tensor = new capsule_tensor_t{capsule::read_npy(path)};
    });
}

capsule_status_t* capsule_tensor_write_npy(const capsule_tensor_t* tensor, const char* path) {
    return guarded([&] {
        require(tensor, "capsule_tensor_write_npy", "tensor");
        require(path, "capsule_tensor_write_npy", "path");
        capsule::write_npy(path, tensor->tensor);
    });
}

void capsule_tensor_release(capsule_tensor_t* tensor) { delete tensor; }

}  // extern "C"
