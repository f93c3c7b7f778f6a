#include "dynamic_batcher.hpp"

#include <algorithm>

#include "batch_rows.hpp"

namespace capsule::serve {

DynamicBatcher::DynamicBatcher(std::shared_ptr<const ModelVersion> model) : model_(std::move(model)) {
    const auto& config = model_->config();
    max_rows_ = config.max_batch_size;
    const auto& preferred = config.dynamic_batching->preferred_batch_sizes;
    preferred_ = preferred;  // sorted by read_model_config
    target_rows_ = preferred.empty() ? max_rows_ : preferred.back();
    delay_ = std::chrono::microseconds(config.dynamic_batching->max_queue_delay_us);
    worker_ = std::thread([this] { work(); });
}

DynamicBatcher::~DynamicBatcher() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    arrived_.notify_all();
    worker_.join();
}

void DynamicBatcher::flush() {
    {
        std::lock_guard lock(mutex_);
        flushing_ = true;
    }
    arrived_.notify_all();
}

DynamicBatcher::Result DynamicBatcher::infer(std::map<std::string, Tensor> inputs, std::int64_t rows) {
    std::future<Result> result;
    {
        std::lock_guard lock(mutex_);
        auto& p = queue_.emplace_back();
        p.inputs = std::move(inputs);
        p.rows = rows;
        p.enqueued = std::chrono::steady_clock::now();
        result = p.done.get_future();
    }
    arrived_.notify_all();
    return result.get();
}

void DynamicBatcher::work() {
    std::unique_lock lock(mutex_);
    for (;;) {
        arrived_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        // Wait until the queued rows reach the target or the first request's delay runs out.
        const auto deadline = queue_.front().enqueued + delay_;
        auto queued_rows = [&] {
            std::int64_t n = 0;
            for (const auto& p : queue_) n += p.rows;
            return n;
        };
        // As Triton's batcher: a batch of a preferred size (or of max_batch_size) runs at once.
        auto ready_to_run = [&] {
            const auto rows = queued_rows();
            return rows >= target_rows_ ||
                   std::binary_search(preferred_.begin(), preferred_.end(), rows);
        };
        while (!stopping_ && !flushing_ && !ready_to_run() &&
               arrived_.wait_until(lock, deadline) != std::cv_status::timeout) {
        }
        std::vector<Pending> batch;
        std::int64_t rows = 0;
        while (!queue_.empty() && rows + queue_.front().rows <= max_rows_) {
            rows += queue_.front().rows;
            batch.push_back(std::move(queue_.front()));
            queue_.pop_front();
        }
        lock.unlock();
        run_batch(batch);
        lock.lock();
    }
}

void DynamicBatcher::run_batch(std::vector<Pending>& batch) {
    const auto start = std::chrono::steady_clock::now();
    std::int64_t rows = 0;
    for (const auto& p : batch) rows += p.rows;
    std::vector<Result> results(batch.size());
    try {
        std::vector<Tensor> outputs;
        if (batch.size() == 1) {
            outputs = model_->run(batch.front().inputs, rows);
        } else {
            std::map<std::string, Tensor> inputs;
            for (const auto& [name, _] : batch.front().inputs) {
                std::vector<const Tensor*> parts;
                for (const auto& p : batch) parts.push_back(&p.inputs.at(name));
                inputs.emplace(name, concatenate_rows(parts, rows));
            }
            outputs = model_->run(inputs, rows);
        }
        const auto compute = std::chrono::steady_clock::now() - start;
        std::int64_t first = 0;
        for (std::size_t i = 0; i < batch.size(); ++i) {
            Result& r = results[i];
            r.queue = start - batch[i].enqueued;
            r.compute = compute;
            r.batch_rows = rows;
            if (batch.size() == 1) r.outputs = std::move(outputs);
            else for (const auto& t : outputs) r.outputs.push_back(slice_rows(t, first, batch[i].rows));
            first += batch[i].rows;
        }
    } catch (...) {
        if (batch.size() == 1) {
            batch.front().done.set_exception(std::current_exception());
            return;
        }
        // One request's data may have failed the batch: each runs again alone and gets its own
        // result or error.
        for (auto& p : batch) {
            std::vector<Pending> alone;
            alone.push_back(std::move(p));
            run_batch(alone);
        }
        return;
    }
    for (std::size_t i = 0; i < batch.size(); ++i) batch[i].done.set_value(std::move(results[i]));
}

}  // namespace capsule::serve
