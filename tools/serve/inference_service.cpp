#include "inference_service.hpp"

namespace capsule::serve {

InferenceService::InferenceService(std::shared_ptr<const ModelRepository> repository, int max_concurrency)
    : repository_(std::move(repository)), max_concurrency_(max_concurrency) {
    for (const auto& [_, model] : repository_->models())
        for (const auto& [__, version] : model.versions)
            if (version->ready() && version->config().dynamic_batching)
                batchers_.emplace(version.get(), std::make_unique<DynamicBatcher>(version));
}

std::shared_ptr<const ModelVersion> InferenceService::find(const std::string& model, const std::string& version) const {
    if (auto found = repository_->find(model, version)) return found;
    const auto& models = repository_->models();
    if (!models.count(model)) {
        std::string names;
        std::size_t listed = 0;
        for (const auto& [name, m] : models)
            if (!m.versions.empty() && listed++ < 20) names += (names.empty() ? "" : ", ") + quoted_text(name);
        if (listed > 20) names += ", ... (" + std::to_string(listed) + " models)";
        throw ProtocolError(404, "unknown model " + quoted_text(model) + "; the repository holds " +
                                     (names.empty() ? std::string("no model with a version") : names));
    }
    const auto& m = models.at(model);
    if (m.versions.empty()) throw ProtocolError(503, "model " + quoted_text(model) + " is not ready: " + m.reason);
    throw ProtocolError(404, "model " + quoted_text(model) + " has no version " + quoted_text(version));
}

InferenceService::Readiness InferenceService::readiness(const std::string& model, const std::string& version) const {
    if (auto m = repository_->models().find(model); m != repository_->models().end() && m->second.versions.empty()) {
        // A version string no version directory could have ("0", "01", "x") is unknown here as
        // for any model: 404, not ready=false.
        if (!version.empty() && ModelRepository::version_number(version) < 0)
            throw ProtocolError(404, "model " + quoted_text(model) + " has no version " + quoted_text(version) +
                                         " (versions are positive integers without leading zeros)");
        return {model, version, false, m->second.reason};
    }
    const auto found = find(model, version);
    return {found->model(), found->version(), found->ready(), found->reason()};
}

std::vector<std::string> InferenceService::versions(const std::string& model) const {
    std::vector<std::string> out;
    if (auto it = repository_->models().find(model); it != repository_->models().end())
        for (const auto& [n, _] : it->second.versions) out.push_back(std::to_string(n));
    return out;
}

std::unique_ptr<InferenceService::Admission> InferenceService::admit() {
    auto admission = std::make_unique<Admission>(in_flight_);
    if (++in_flight_ > max_concurrency_)
        throw ProtocolError(503, "server busy: more than " + std::to_string(max_concurrency_) +
                                     " infer requests in flight (capsule serve --max-concurrency); retry");
    return admission;
}

void InferenceService::require_ready(const ModelVersion& model) {
    if (!model.ready())
        throw ProtocolError(503, "model " + quoted_text(model.model()) + " version " + model.version() +
                                     " is not ready: " + model.reason());
}

void InferenceService::stop() {
    stopping_ = true;
    for (auto& [_, batcher] : batchers_) batcher->flush();
}

InferenceService::Outcome InferenceService::run(const ModelVersion& model, InferRequest& request,
                                                std::chrono::steady_clock::time_point arrived) {
    require_ready(model);
    Outcome outcome;
    if (auto b = batchers_.find(&model); b != batchers_.end()) {
        auto result = b->second->infer(std::move(request.inputs), request.rows);
        outcome.outputs = std::move(result.outputs);
        outcome.queue = result.queue;
        outcome.compute = result.compute;
        return outcome;
    }
    const auto start = std::chrono::steady_clock::now();
    outcome.queue = start - arrived;
    outcome.outputs = model.run(request.inputs, request.rows);
    outcome.compute = std::chrono::steady_clock::now() - start;
    return outcome;
}

}  // namespace capsule::serve
