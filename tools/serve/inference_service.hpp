// What the REST and gRPC frontends share: finding a model version, admission (the concurrency
// limit), running a validated request (directly or through the version's dynamic batcher), the
// metrics, and readiness during shutdown. Transport-free.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dynamic_batcher.hpp"
#include "metrics.hpp"
#include "model_repository.hpp"
#include "v2_protocol.hpp"

namespace capsule::serve {

class InferenceService {
public:
    /// Starts a dynamic batcher for every ready version configured with dynamic_batching.
    InferenceService(std::shared_ptr<const ModelRepository> repository, int max_concurrency);

    const ModelRepository& repository() const { return *repository_; }
    Metrics& metrics() { return metrics_; }

    /// The model version `version` of `model` ("" for the latest ready one). Raises
    /// ProtocolError(404) for an unknown model (naming the models there are) or version, and
    /// ProtocolError(503) with the reason for a model whose config.json is unusable.
    std::shared_ptr<const ModelVersion> find(const std::string& model, const std::string& version) const;
    /// Whether `model` `version` ("" for the latest) is ready, as the ready endpoints say it.
    struct Readiness {
        std::string model, version;  // version: "" when the model has none
        bool ready = false;
        std::string reason;  // why not ready
    };
    /// Readiness, also of a model that is not ready as a whole (config.json unusable, no version):
    /// not ready with its reason. Raises ProtocolError(404) for an unknown model or version.
    Readiness readiness(const std::string& model, const std::string& version) const;
    /// The version numbers of `model`, as strings.
    std::vector<std::string> versions(const std::string& model) const;

    /// One infer request in flight for as long as it lives.
    class Admission {
    public:
        explicit Admission(std::atomic<int>& n) : n_(n) {}
        Admission(const Admission&) = delete;
        ~Admission() { --n_; }

    private:
        std::atomic<int>& n_;
    };
    /// Admits an infer request; raises ProtocolError(503) when max_concurrency are in flight.
    std::unique_ptr<Admission> admit();
    /// Infer requests admitted and not yet answered.
    int in_flight() const { return in_flight_; }

    /// Raises ProtocolError(503) naming the reason when `model` is not ready.
    static void require_ready(const ModelVersion& model);

    struct Outcome {
        std::vector<Tensor> outputs;  // in model.outputs() order
        std::chrono::nanoseconds queue{0}, compute{0};
    };
    /// Runs `request` (already validated against `model`; its inputs are consumed). Raises
    /// ProtocolError(503) when the version is not ready, Error when the runtime fails.
    Outcome run(const ModelVersion& model, InferRequest& request, std::chrono::steady_clock::time_point arrived);

    /// Readiness: false once stopping (SIGTERM), so that load balancers stop sending.
    bool ready() const { return !stopping_; }
    /// Marks the service not ready, and makes the dynamic batchers run what they hold at once
    /// rather than wait out their delays (thread-safe).
    void stop();

private:
    std::shared_ptr<const ModelRepository> repository_;
    Metrics metrics_;
    int max_concurrency_;
    std::map<const ModelVersion*, std::unique_ptr<DynamicBatcher>> batchers_;
    std::atomic<int> in_flight_{0};
    std::atomic<bool> stopping_{false};
};

}  // namespace capsule::serve
