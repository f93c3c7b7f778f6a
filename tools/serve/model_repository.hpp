// The model repository (Triton's layout) and the served model versions. Uses only the runtime's
// public API: capsule/onnx_import.hpp (load_model), capsule/profile.hpp, capsule/registry.hpp and
// capsule/session.hpp, as any server embedding the runtime would.
//
//     DIR/<model>/config.json                  (model_config.hpp)
//     DIR/<model>/<version>/model.onnx         or model.json (JSON IR, with its parameters file)
//
// A version directory's name is a positive integer. Every version is planned and gated when the
// repository loads; one whose plan is rejected (or whose files are malformed) is kept as not ready
// with the reason, and the others are served.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "capsule/session.hpp"
#include "capsule/tensor.hpp"
#include "model_config.hpp"

namespace capsule::serve {

/// An input or output as the protocol's metadata shows it: with max_batch_size > 0, dimension 0
/// is -1 (the batch) and the rest are the model's.
struct TensorMetadata {
    std::string name;
    DType dtype = DType::float32;
    std::vector<std::int64_t> shape;
};

/// One version of a model: its sessions or why it is not ready. With max_batch_size N > 0 there
/// is one session per batch size in {1, 2, 4, ..., N} and the preferred batch sizes, all made
/// (and run once on zeros) when the version loads; a request of R rows runs in the smallest of
/// them that holds it, padded with zero rows (at most twice the work), so that clients cannot
/// make the server build sessions. max_batch_size > 0 declares, as in Triton, that rows do not
/// affect each other; a model whose dimensions after the first change with the batch is refused.
/// A Session is thread-safe: every request shares them.
class ModelVersion {
public:
    ModelVersion(std::string model, std::string version, std::filesystem::path file, ModelConfig config,
                 std::shared_ptr<const PluginHost> host, BackendProfile profile);
    /// A version that is not ready for `reason` (e.g. its directory holds no model file).
    ModelVersion(std::string model, std::string version, ModelConfig config, BackendProfile profile,
                 std::string reason);

    const std::string& model() const { return model_; }
    const std::string& version() const { return version_; }
    const ModelConfig& config() const { return config_; }
    bool ready() const { return reason_.empty(); }
    /// Why the version is not ready (load, plan or gate failure), "" when ready.
    const std::string& reason() const { return reason_; }
    const std::vector<TensorMetadata>& inputs() const { return inputs_; }
    const std::vector<TensorMetadata>& outputs() const { return outputs_; }
    /// The profile and, per node group, the capsule and plugin that run it (for metadata).
    const std::string& plan_summary() const { return plan_summary_; }

    /// Runs `inputs` (keyed by input name, each [rows, ...] with max_batch_size > 0, else the
    /// model's full shape) and returns the outputs in metadata order, each [rows, ...] when
    /// batched. The caller has checked names, dtypes and shapes against inputs(). Raises
    /// Error(other) when the version is not ready, else what Session::run raises.
    std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, std::int64_t rows) const;

private:
    struct Loaded;
    /// Imports, plans, gates and makes the session for batch size `rows` (0: the model's own
    /// shapes), checks that dimension 0 of every input and output is `rows` when batched, and runs
    /// it once on zeros.
    std::shared_ptr<const Loaded> load(std::int64_t rows) const;
    /// Raises unless every dimension after the batch is the same in every session.
    void check_batch_independent_shapes() const;

    std::string model_, version_;
    std::filesystem::path file_;
    ModelConfig config_;
    std::shared_ptr<const PluginHost> host_;
    BackendProfile profile_;
    std::string reason_;
    std::vector<TensorMetadata> inputs_, outputs_;
    std::string plan_summary_;
    std::map<std::int64_t, std::shared_ptr<const Loaded>> sessions_;  // by batch size; fixed after load
};

/// All models of a repository, by name, each with its versions by version string.
class ModelRepository {
public:
    /// Scans `dir` and loads every model version (errors of one model become its versions' not
    /// ready reasons, or a model-level reason when its config is unusable). Raises Error(input)
    /// only when `dir` is not a readable directory.
    static ModelRepository load(const std::filesystem::path& dir, std::shared_ptr<const PluginHost> host);

    struct Model {
        std::string name;
        std::string reason;  // config.json unusable or no version directory: the model is not ready
        std::map<std::int64_t, std::shared_ptr<const ModelVersion>> versions;  // by version number
    };
    const std::map<std::string, Model>& models() const { return models_; }
    /// The number a version directory's name stands for (a positive decimal without leading
    /// zeros), or -1 for a name no version may have.
    static std::int64_t version_number(const std::string& name);
    /// The model version `version` ("" for the latest ready one, else the latest), or nullptr.
    std::shared_ptr<const ModelVersion> find(const std::string& model, const std::string& version) const;

private:
    std::map<std::string, Model> models_;
};

}  // namespace capsule::serve
