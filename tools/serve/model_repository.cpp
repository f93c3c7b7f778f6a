#include "model_repository.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "capsule/error.hpp"
#include "capsule/onnx_import.hpp"
#include "capsule/report.hpp"
#include "batch_rows.hpp"

namespace capsule::serve {

namespace fs = std::filesystem;

struct ModelVersion::Loaded {
    Session session;
    /// Output index -> the axis whose length depends on the data (Graph::output_lengths: a
    /// NonZero's or NonMaxSuppression's): its session shape is only an upper bound.
    std::map<std::size_t, std::size_t> variable_axes;
};

namespace {

BackendProfile resolve_profile(const std::string& name, const fs::path& model_dir) {
    if (name.size() > 5 && name.ends_with(".json")) return load_profile_file(model_dir / name);
    return find_builtin_profile(name);
}

/// The model file of a version directory: model.onnx, else model.json.
fs::path model_file(const fs::path& version_dir) {
    for (const char* name : {"model.onnx", "model.json"}) {
        std::error_code ec;  // a symlink loop is "not a file" here, not an exception
        if (fs::is_regular_file(version_dir / name, ec)) return version_dir / name;
    }
    throw Error(ErrorCode::input, version_dir.string() + ": holds neither model.onnx nor model.json");
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
        const bool batched = config_.max_batch_size > 0;
        if (batched && file_.extension() != ".onnx")
            throw Error(ErrorCode::input, "a JSON IR graph has static shapes: set max_batch_size to 0");
        std::set<std::int64_t> sizes{batched ? 1 : 0};
        if (batched) {
            // Powers of two up to max_batch_size, and the preferred sizes: a request is padded to
            // at most twice its rows.
            for (std::int64_t b = 2; b < config_.max_batch_size; b *= 2) sizes.insert(b);
            sizes.insert(config_.max_batch_size);
            if (config_.dynamic_batching)
                sizes.insert(config_.dynamic_batching->preferred_batch_sizes.begin(),
                             config_.dynamic_batching->preferred_batch_sizes.end());
        }
        for (auto rows : sizes) sessions_.emplace(rows, load(rows));
        const Session& first = sessions_.begin()->second->session;
        if (batched) check_batch_independent_shapes();
        // -1 marks a variable dimension (the v2 protocol's): the batch, and an output's axis of
        // data-dependent length (its session shape is only the bound).
        auto describe = [&](const std::vector<TensorSlot>& slots, std::vector<TensorMetadata>& out,
                            const std::map<std::size_t, std::size_t>& variable) {
            for (const auto& slot : slots) {
                TensorMetadata m{slot.name, slot.type.dtype, slot.type.shape};
                if (batched) m.shape[0] = -1;  // load() checked it is the batch
                if (auto it = variable.find(out.size()); it != variable.end() && it->second < m.shape.size())
                    m.shape[it->second] = -1;
                out.push_back(std::move(m));
            }
        };
        describe(first.inputs(), inputs_, {});
        describe(first.outputs(), outputs_, sessions_.begin()->second->variable_axes);
        plan_summary_ = describe_plan(profile_, first);
    } catch (const std::exception& e) {  // Error, and the standard library's (memory, files)
        reason_ = e.what();
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
        if (rows > 0) shape.push_back(rows);
        shape.insert(shape.end(), dims.begin(), dims.end());
        options.input_shapes.emplace(name, std::move(shape));
    }
    LoadedModel model;
    try {
        model = load_model(file_, options);
    } catch (const Error& e) {
        const std::string what = e.what();
        if (what.find("dynamic size") == std::string::npos) throw;
        throw Error(e.code(), what + " [capsule serve: give the input's shape in config.json \"inputs\"" +
                                  (rows > 0 ? std::string(", without the batch dimension") : "") + "]");
    }
    if (!model.parameter_inputs.empty())
        throw Error(ErrorCode::input, "graph input '" + model.parameter_inputs.begin()->first +
                                          "' supplies parameters (weights given as an input): such models "
                                          "cannot be served; make it an initializer");
    if (rows > 0 && !model.graph.output_lengths.empty())  // rows of requests could not be told apart
        throw Error(ErrorCode::input,
                    "with max_batch_size > 0, every output must have the batch as dimension 0, but an output's "
                    "length depends on the data (NonMaxSuppression, NonZero) (set max_batch_size to 0 for this model)");
    auto result = profile_.accept_graph(*host_, model.graph);
    if (!result.accepted)
        throw Error(ErrorCode::planning, "the gate rejected the plan under profile " + profile_.name + ":\n" +
                                             gate_report(profile_, result.gate, false));
    SessionOptions options_for_session;
    options_for_session.threads = config_.threads;
    std::map<std::size_t, std::size_t> variable_axes;
    for (const auto& length : model.graph.output_lengths)
        for (std::size_t o = 0; o < model.graph.outputs.size(); ++o)
            if (model.graph.outputs[o] == length.output) variable_axes[o] = static_cast<std::size_t>(length.axis);
    auto loaded = std::make_shared<const Loaded>(Loaded{
        Session::create(profile_, *result.accepted, model.graph, *host_, model.parameters, options_for_session),
        std::move(variable_axes)});
    const Session& session = loaded->session;
    if (rows > 0)  // the batcher and padding slice outputs by rows: dimension 0 must be the batch
        for (const auto* slots : {&session.inputs(), &session.outputs()})
            for (const auto& slot : *slots)
                if (slot.type.shape.empty() || slot.type.shape[0] != rows)
                    throw Error(ErrorCode::input,
                                "with max_batch_size > 0, dimension 0 of every input and output must be the batch, "
                                "but '" + slot.name + "' is " + to_string(slot.type.shape) + " at batch size " +
                                std::to_string(rows) + " (set max_batch_size to 0 for this model)");
    // One run on zeros: what would fail on every request (memory for the intermediates, a kernel
    // that cannot run here) fails now, and the version is not ready. Zeros a kernel refuses as
    // data (an integer division by an input, say) are bad input for that request only, not a
    // broken model: the version stays ready.
    std::map<std::string, Tensor> zeros;
    for (const auto& slot : session.inputs()) zeros.emplace(slot.name, Tensor::zeros(slot.type.dtype, slot.type.shape));
    try {
        session.run(zeros);
    } catch (const Error& e) {
        if (e.code() != ErrorCode::input) throw;
    }
    return loaded;
}

void ModelVersion::check_batch_independent_shapes() const {
    // Padding and batching slice outputs by rows: every dimension after the batch must be the
    // same at every batch size (MatMul(x, x^T) is [N, N], and would mix requests' rows).
    const auto& [rows1, first] = *sessions_.begin();
    for (const auto& [rows, loaded] : sessions_)
        for (int side = 0; side < 2; ++side) {
            const auto& a = side ? first->session.outputs() : first->session.inputs();
            const auto& b = side ? loaded->session.outputs() : loaded->session.inputs();
            for (std::size_t i = 0; i < a.size(); ++i)
                if (!std::equal(a[i].type.shape.begin() + 1, a[i].type.shape.end(), b[i].type.shape.begin() + 1,
                                b[i].type.shape.end()))
                    throw Error(ErrorCode::input,
                                "with max_batch_size > 0, only dimension 0 may depend on the batch, but '" + a[i].name +
                                    "' is " + to_string(a[i].type.shape) + " at batch size " + std::to_string(rows1) +
                                    " and " + to_string(b[i].type.shape) + " at " + std::to_string(rows) +
                                    " (set max_batch_size to 0 for this model)");
        }
}

std::vector<Tensor> ModelVersion::run(const std::map<std::string, Tensor>& inputs, std::int64_t rows) const {
    if (!ready()) throw Error(ErrorCode::other, "model " + model_ + " version " + version_ + " is not ready: " + reason_);
    if (config_.max_batch_size == 0) return sessions_.at(0)->session.run(inputs);
    const auto it = sessions_.lower_bound(rows);  // the smallest batch size that holds the rows
    if (it == sessions_.end())
        throw Error(ErrorCode::other, std::to_string(rows) + " rows exceed max_batch_size " +
                                          std::to_string(config_.max_batch_size));
    if (it->first == rows) return it->second->session.run(inputs);
    std::map<std::string, Tensor> padded;
    for (const auto& [name, t] : inputs) padded.emplace(name, concatenate_rows({&t}, it->first));
    auto outputs = it->second->session.run(padded);
    for (auto& t : outputs) t = slice_rows(t, 0, rows);
    return outputs;
}

ModelRepository ModelRepository::load(const fs::path& dir, std::shared_ptr<const PluginHost> host) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw Error(ErrorCode::input, dir.string() + ": the model repository is not a readable directory");
    ModelRepository repo;
    fs::directory_iterator entries(dir, ec);
    if (ec) throw Error(ErrorCode::input, dir.string() + ": cannot list the model repository: " + ec.message());
    for (; entries != fs::directory_iterator(); entries.increment(ec)) {
        const auto& entry = *entries;
        const auto name = entry.path().filename().string();
        std::error_code dir_ec;
        if (name.starts_with(".") || !entry.is_directory(dir_ec)) continue;  // hidden entries, files
        Model model;
        model.name = name;
        try {
            const auto config = read_model_config(entry.path() / "config.json");
            const auto profile = resolve_profile(config.profile, entry.path());
            for (const auto& v : fs::directory_iterator(entry.path())) {
                const auto number = version_number(v.path().filename().string());
                std::error_code v_ec;
                if (number < 0 || !v.is_directory(v_ec)) continue;
                std::shared_ptr<const ModelVersion> version;
                try {
                    version = std::make_shared<const ModelVersion>(model.name, std::to_string(number),
                                                                   model_file(v.path()), config, host, profile);
                } catch (const std::exception& e) {  // no model file: a version that is not ready
                    version = std::make_shared<const ModelVersion>(model.name, std::to_string(number), config,
                                                                   profile, e.what());
                }
                model.versions.emplace(number, std::move(version));
            }
            if (model.versions.empty())
                model.reason = entry.path().string() + ": no version directory (a positive integer, e.g. 1/)";
        } catch (const std::exception& e) {  // Error, or a directory that cannot be listed
            model.reason = e.what();
        }
        repo.models_.emplace(model.name, std::move(model));
    }
    if (ec) throw Error(ErrorCode::input, dir.string() + ": cannot list the model repository: " + ec.message());
    return repo;
}

std::int64_t ModelRepository::version_number(const std::string& name) {
    if (name.empty() || name.size() > 18 || name[0] == '0' ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return -1;
    return std::stoll(name);
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
