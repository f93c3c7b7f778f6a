// Dynamic batching for one model version (Triton's dynamic batcher): requests that arrive while
// others wait are concatenated along dimension 0 and run as one batch (ModelVersion::run pads it
// to a session's batch size), and each request gets its rows of every output back. Assumes, as
// Triton does for max_batch_size > 0, that rows of a batch do not affect each other. When a
// batch fails, each of its requests runs again alone, so that one request's bad data (an index
// out of range) fails that request only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capsule/tensor.hpp"
#include "model_repository.hpp"

namespace capsule::serve {

class DynamicBatcher {
public:
    /// `model` must have max_batch_size > 0 and a dynamic_batching configuration.
    explicit DynamicBatcher(std::shared_ptr<const ModelVersion> model);
    /// Runs what is queued, then stops the worker.
    ~DynamicBatcher();
    DynamicBatcher(const DynamicBatcher&) = delete;
    DynamicBatcher& operator=(const DynamicBatcher&) = delete;

    struct Result {
        std::vector<Tensor> outputs;     // this request's rows, in model.outputs() order
        std::chrono::nanoseconds queue;  // from enqueue to the start of its batch
        std::chrono::nanoseconds compute;  // the batch's session run
        std::int64_t batch_rows = 0;     // rows of the batch it ran in
    };
    /// From now on, runs what is queued without waiting for the delay (shutdown).
    void flush();
    /// Queues `inputs` (`rows` rows each) and waits for its batch. Raises what the session's run
    /// raises (every request of a failed batch gets the error).
    Result infer(std::map<std::string, Tensor> inputs, std::int64_t rows);

private:
    struct Pending {
        std::map<std::string, Tensor> inputs;
        std::int64_t rows = 0;
        std::chrono::steady_clock::time_point enqueued;
        std::promise<Result> done;
    };
    void work();
    void run_batch(std::vector<Pending>& batch);

    std::shared_ptr<const ModelVersion> model_;
    std::int64_t max_rows_ = 0;     // max_batch_size
    std::int64_t target_rows_ = 0;  // a batch of this many rows runs at once
    std::vector<std::int64_t> preferred_;  // and so does one of exactly a preferred size
    std::chrono::microseconds delay_{0};
    std::mutex mutex_;
    std::condition_variable arrived_;
    std::deque<Pending> queue_;
    bool stopping_ = false;
    bool flushing_ = false;
    std::thread worker_;
};

}  // namespace capsule::serve
