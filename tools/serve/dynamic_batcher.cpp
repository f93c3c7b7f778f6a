#include "dynamic_batcher.hpp"

#include <cstring>

namespace capsule::serve {

namespace {

/// `parts` (each [rows_i, ...] of one dtype) concatenated along dimension 0, then zero rows up to
/// `rows` in all.
Tensor concatenate(const std::vector<const Tensor*>& parts, std::int64_t rows) {
    Shape shape = parts.front()->shape();
    shape[0] = rows;
    Tensor out = Tensor::zeros(parts.front()->dtype(), shape);
    auto* at = static_cast<char*>(out.data());
    for (const auto* p : parts) {
        std::memcpy(at, p->data(), p->nbytes());
        at += p->nbytes();
    }
    return out;
}

/// Rows [first, first + rows) of `t` ([R, ...]).
Tensor slice_rows(const Tensor& t, std::int64_t first, std::int64_t rows) {
    Shape shape = t.shape();
    const std::size_t row_bytes = shape[0] > 0 ? t.nbytes() / static_cast<std::size_t>(shape[0]) : 0;
    shape[0] = rows;
    Tensor out = Tensor::zeros(t.dtype(), shape);
    std::memcpy(out.data(), static_cast<const char*>(t.data()) + row_bytes * first, row_bytes * rows);
    return out;
}

}  // namespace

DynamicBatcher::DynamicBatcher(std::shared_ptr<const ModelVersion> model) : model_(std::move(model)) {
    const auto& config = model_->config();
    max_rows_ = config.max_batch_size;
    const auto& preferred = config.dynamic_batching->preferred_batch_sizes;
    preferred_ = preferred;
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
        while (!stopping_ && queued_rows() < target_rows_ &&
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
    try {
        std::int64_t rows = 0;
        for (const auto& p : batch) rows += p.rows;
        // Sessions have static shapes: the batch runs at the smallest preferred size that holds
        // it (else max_batch_size), with zero rows after the requests' (see the header).
        std::int64_t run_rows = max_rows_;
        for (auto size : preferred_)
            if (size >= rows) {
                run_rows = size;
                break;
            }
        std::vector<Tensor> outputs;
        if (batch.size() == 1 && run_rows == rows) {
            outputs = model_->run(batch.front().inputs, rows);
        } else {
            std::map<std::string, Tensor> inputs;
            for (const auto& [name, _] : batch.front().inputs) {
                std::vector<const Tensor*> parts;
                for (const auto& p : batch) parts.push_back(&p.inputs.at(name));
                inputs.emplace(name, concatenate(parts, run_rows));
            }
            outputs = model_->run(inputs, run_rows);
        }
        const auto compute = std::chrono::steady_clock::now() - start;
        std::vector<Result> results(batch.size());
        std::int64_t first = 0;
        for (std::size_t i = 0; i < batch.size(); ++i) {
            Result& r = results[i];
            r.queue = start - batch[i].enqueued;
            r.compute = compute;
            r.batch_rows = run_rows;
            if (batch.size() == 1 && run_rows == rows) r.outputs = std::move(outputs);
            else for (const auto& t : outputs) r.outputs.push_back(slice_rows(t, first, batch[i].rows));
            first += batch[i].rows;
        }
        for (std::size_t i = 0; i < batch.size(); ++i) batch[i].done.set_value(std::move(results[i]));
    } catch (...) {  // before any promise was kept
        for (auto& p : batch) p.done.set_exception(std::current_exception());
    }
}

}  // namespace capsule::serve
