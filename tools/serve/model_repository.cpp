#include "model_repository.hpp"

#include <algorithm>
#include <map>

#include "capsule/error.hpp"
#include "capsule/onnx_import.hpp"
#include "capsule/report.hpp"

namespace capsule::serve {

namespace fs = std::filesystem;

struct ModelVersion::Loaded {
    Session session;
};

namespace {

BackendProfile resolve_profile(const std::string& name, const fs::path& model_dir) {
    if (name.size() > 5 && name.ends_with(".json")) return load_profile_file(model_dir / name);
    return find_builtin_profile(name);
}

/// The model file of a version directory: model.onnx, else model.json.
fs::path model_file(const fs::path& version_dir) {
    for (const char* name : {"model.onnx", "model.json"})
        if (fs::is_regular_file(version_dir / name)) return version_dir / name;
    throw Error(ErrorCode::input, version_dir.string() + ": holds neither model.onnx nor model.json");
}

/// A positive decimal version number, or -1.
std::int64_t version_number(const std::string& name) {
    if (name.empty() || name.size() > 18 || name[0] == '0' ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return -1;
    return std::stoll(name);
}

std::string describe_plan(const BackendProfile& profile, const Session& session) {
    std::map<std::string, int> calls;
    for (const auto& step : session.steps()) ++calls[step.plugin];
    std::string out = "profile " + profile.name + "; backend calls per run:";
    for (const auto& [plugin, n] : calls) out += " " + plugin + " x" + std::to_string(n);
    return out;
}

}  // namespace

ModelVersion::ModelVersion(std::string model, std::string version, fs::path file, ModelConfig config,
                           std::shared_ptr<const PluginHost> host, BackendProfile profile)
    : model_(std::move(model)), version_(std::move(version)), file_(std::move(file)),
      config_(std::move(config)), host_(std::move(host)), profile_(std::move(profile)) {
    try {
        if (config_.max_batch_size > 0 && file_.extension() != ".onnx")
            throw Error(ErrorCode::input, "a JSON IR graph has static shapes: set max_batch_size to 0");
        // Batch size 1 proves the version loads, plans and gates; the preferred batch sizes and
        // the largest are made now too, so that traffic of those sizes never waits for them.
        const auto first = session_for(config_.max_batch_size > 0 ? 1 : 0);
        const bool batched = config_.max_batch_size > 0;
        auto describe = [&](const std::vector<TensorSlot>& slots, std::vector<TensorMetadata>& out) {
            for (const auto& s : slots) {
                TensorMetadata m{s.name, s.type.dtype, s.type.shape};
                if (batched) {
                    if (m.shape.empty() || m.shape[0] != 1)
                        throw Error(ErrorCode::input, "with max_batch_size > 0, dimension 0 of '" + s.name +
                                                          "' must be the batch, but it is " + to_string(s.type.shape) +
                                                          " at batch size 1");
                    m.shape[0] = -1;
                }
                out.push_back(std::move(m));
            }
        };
        describe(first->session.inputs(), inputs_);
        describe(first->session.outputs(), outputs_);
        plan_summary_ = describe_plan(profile_, first->session);
        if (batched) {
            std::vector<std::int64_t> sizes{config_.max_batch_size};
            if (config_.dynamic_batching) for (auto b : config_.dynamic_batching->preferred_batch_sizes) sizes.push_back(b);
            for (auto b : sizes) session_for(b);
        }
    } catch (const Error& e) {
        reason_ = e.what();
        std::lock_guard lock(mutex_);
        sessions_.clear();
    }
}

ModelVersion::ModelVersion(std::string model, std::string version, ModelConfig config, BackendProfile profile,
                           std::string reason)
    : model_(std::move(model)), version_(std::move(version)), config_(std::move(config)),
      profile_(std::move(profile)), reason_(std::move(reason)) {}

std::shared_ptr<const ModelVersion::Loaded> ModelVersion::load(std::int64_t rows) const {
    OnnxImportOptions options;
    for (const auto& [name, dims] : config_.inputs) {
        Shape shape;
        if (config_.max_batch_size > 0) shape.push_back(rows);
        shape.insert(shape.end(), dims.begin(), dims.end());
        options.input_shapes.emplace(name, std::move(shape));
    }
    auto model = load_model(file_, options);
    if (!model.parameter_inputs.empty())
        throw Error(ErrorCode::input, "graph input '" + model.parameter_inputs.begin()->first +
                                          "' supplies parameters (weights given as an input): such models "
                                          "cannot be served; make it an initializer");
    auto result = profile_.accept_graph(*host_, model.graph);
    if (!result.accepted)
        throw Error(ErrorCode::planning, "the gate rejected the plan under profile " + profile_.name + ":\n" +
                                             gate_report(profile_, result.gate, false));
    SessionOptions options_for_session;
    options_for_session.threads = config_.threads;
    auto session = Session::create(profile_, *result.accepted, model.graph, *host_, model.parameters,
                                   options_for_session);
    return std::make_shared<const Loaded>(Loaded{std::move(session)});
}

std::shared_ptr<const ModelVersion::Loaded> ModelVersion::session_for(std::int64_t rows) const {
    {
        std::lock_guard lock(mutex_);
        if (auto it = sessions_.find(rows); it != sessions_.end()) return it->second;
    }
    // Made outside the lock (seconds for a large model); two requests of a new size may both make
    // one, and the first stored wins.
    auto loaded = load(rows);
    std::lock_guard lock(mutex_);
    return sessions_.emplace(rows, std::move(loaded)).first->second;
}

std::vector<Tensor> ModelVersion::run(const std::map<std::string, Tensor>& inputs, std::int64_t rows) const {
    if (!ready()) throw Error(ErrorCode::other, "model " + model_ + " version " + version_ + " is not ready: " + reason_);
    return session_for(config_.max_batch_size > 0 ? rows : 0)->session.run(inputs);
}

ModelRepository ModelRepository::load(const fs::path& dir, std::shared_ptr<const PluginHost> host) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw Error(ErrorCode::input, dir.string() + ": the model repository is not a readable directory");
    ModelRepository repo;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (!entry.is_directory()) continue;
        Model model;
        model.name = entry.path().filename().string();
        try {
            const auto config = read_model_config(entry.path() / "config.json");
            const auto profile = resolve_profile(config.profile, entry.path());
            for (const auto& v : fs::directory_iterator(entry.path())) {
                const auto number = version_number(v.path().filename().string());
                if (!v.is_directory() || number < 0) continue;
                std::shared_ptr<const ModelVersion> version;
                try {
                    version = std::make_shared<const ModelVersion>(model.name, std::to_string(number),
                                                                   model_file(v.path()), config, host, profile);
                } catch (const Error& e) {  // no model file: a version that is not ready
                    version = std::make_shared<const ModelVersion>(model.name, std::to_string(number), config,
                                                                   profile, e.what());
                }
                model.versions.emplace(number, std::move(version));
            }
            if (model.versions.empty())
                model.reason = entry.path().string() + ": no version directory (a positive integer, e.g. 1/)";
        } catch (const Error& e) {
            model.reason = e.what();
        }
        repo.models_.emplace(model.name, std::move(model));
    }
    if (ec) throw Error(ErrorCode::input, dir.string() + ": cannot list the model repository: " + ec.message());
    return repo;
}

std::shared_ptr<const ModelVersion> ModelRepository::find(const std::string& model, const std::string& version) const {
    const auto it = models_.find(model);
    if (it == models_.end() || it->second.versions.empty()) return nullptr;
    const auto& versions = it->second.versions;
    if (version.empty()) {
        for (auto v = versions.rbegin(); v != versions.rend(); ++v)
            if (v->second->ready()) return v->second;
        return versions.rbegin()->second;
    }
    const auto number = version_number(version);
    const auto v = versions.find(number);
    return v == versions.end() ? nullptr : v->second;
}

}  // namespace capsule::serve
