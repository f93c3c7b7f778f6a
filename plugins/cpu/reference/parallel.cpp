#include "parallel.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace capsule::reference {

std::unique_ptr<ThreadGrant> prepare_thread_grant(const plugin::PrepareCall& call) {
    return std::make_unique<ThreadGrant>(ThreadGrant{call.threads()});
}

int granted_threads(const plugin::ForwardCall& call) {
    const auto* grant = call.state<ThreadGrant>();
    return grant && grant->threads > 0 ? grant->threads : 1;
}

const Epilogue& epilogue_of(const plugin::ForwardCall& call) {
    static constexpr Epilogue kNone{};
    const auto* grant = call.state<ThreadGrant>();
    return grant ? grant->epilogue : kNone;
}

namespace {

/// One run_parts call: its parts are claimed one at a time, by the caller and by idle workers.
/// Every field is read and written under WorkerPool::mutex_ only, and the caller returns only
/// when all parts have finished, so no worker touches a job after its caller has gone.
struct Job {
    const std::function<void(int)>* body;
    int parts;
    int next = 0;      // the next unclaimed part
    std::atomic<int> finished{0};  // parts whose body has returned (also read unlocked)
    std::vector<std::exception_ptr> errors;
    std::condition_variable done;
};

/// The plugin's worker threads, shared by every kernel call of every session in the process
/// (like oneDNN's OpenMP pool): started on first demand, as many as the largest grant asked
/// for less one, asleep when idle, joined when the plugin is unloaded. It keeps no data between
/// calls. Starting threads per call instead cost tens of microseconds per kernel, which made
/// two threads slower than one on models of small layers.
class WorkerPool {
public:
    static WorkerPool& instance() {
        static WorkerPool pool;
        return pool;
    }

    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    ~WorkerPool() {
        // A forked child's copy: its threads, and maybe the lock's holder, were the parent's.
        // Touch neither the mutex nor the condition variable; just let the handles go.
        if (::getpid() != owner_) {
            for (auto& w : workers_) w.detach();
            return;
        }
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
            stopping_flag_.store(true);
        }
        wake_.notify_all();
        for (auto& w : workers_) w.join();
    }

    void run(int parts, const std::function<void(int)>& body) {
        // A forked child inherits this object but not its threads: the caller does every part.
        if (::getpid() != owner_) {
            run_serially(parts, body);
            return;
        }
        Job job{&body, parts};
        job.errors.resize(static_cast<std::size_t>(parts));
        std::unique_lock lock(mutex_);
        try {
            grow(parts - 1);
        } catch (const std::system_error&) {
            if (workers_.empty()) throw;  // no thread at all; with some, they share the parts
        }
        queue_.push_back(&job);
        queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
        if (sleeping_ > 0) wake_.notify_all();
        while (job.next < job.parts) work_on(job, lock);
        // The other parts are running: spin a little before sleeping (see serve()).
        lock.unlock();
        spin_until([&] { return job.finished.load(std::memory_order_acquire) == job.parts; });
        lock.lock();
        job.done.wait(lock, [&] { return job.finished.load() == job.parts; });
        lock.unlock();
        for (const auto& e : job.errors)
            if (e) std::rethrow_exception(e);
    }

private:
    WorkerPool() : owner_(::getpid()) {}

    static void run_serially(int parts, const std::function<void(int)>& body) {
        for (int part = 0; part < parts; ++part) body(part);
    }

    /// Starts workers until there are `wanted` (the lock is held).
    void grow(int wanted) {
        while (static_cast<int>(workers_.size()) < wanted) workers_.emplace_back([this] { serve(); });
    }

    /// Claims the next part of `job` and runs it with the lock released (the lock is held on
    /// entry and on return). The job leaves the queue when its last part is claimed.
    void work_on(Job& job, std::unique_lock<std::mutex>& lock) {
        const int part = job.next++;
        if (job.next == job.parts) {
            std::erase(queue_, &job);
            queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
        }
        lock.unlock();
        std::exception_ptr error;
        try {
            (*job.body)(part);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        job.errors[static_cast<std::size_t>(part)] = error;
        if (job.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == job.parts) job.done.notify_one();
    }

    /// A worker: takes parts of queued jobs; when there are none, spins for a while before it
    /// sleeps, since waking a sleeping thread (on a virtual machine, a halted vCPU) costs up to
    /// hundreds of microseconds and a model's next layer usually comes sooner.
    void serve() {
        std::unique_lock lock(mutex_);
        for (;;) {
            if (queue_.empty() && !stopping_) {
                lock.unlock();
                spin_until([&] {
                    return queued_.load(std::memory_order_acquire) > 0 ||
                           stopping_flag_.load(std::memory_order_relaxed);
                });
                lock.lock();
            }
            if (queue_.empty() && !stopping_) {
                ++sleeping_;
                wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
                --sleeping_;
            }
            if (stopping_) return;
            if (!queue_.empty()) work_on(*queue_.front(), lock);
        }
    }

    /// Polls `ready` for up to 200 µs.
    template <typename Ready>
    static void spin_until(Ready ready) {
        constexpr auto kSpin = std::chrono::microseconds(200);
        const auto until = std::chrono::steady_clock::now() + kSpin;
        while (!ready()) {
            for (int i = 0; i < 64; ++i) pause();
            if (std::chrono::steady_clock::now() >= until) return;
        }
    }

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    const pid_t owner_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job*> queue_;          // jobs with unclaimed parts, oldest first
    std::atomic<int> queued_{0};      // queue_.size(), for spinning workers to watch unlocked
    std::atomic<bool> stopping_flag_{false};
    std::vector<std::thread> workers_;
    int sleeping_ = 0;                // workers waiting on wake_
    bool stopping_ = false;
};

}  // namespace

void run_parts(int parts, const std::function<void(int)>& body) {
    if (parts <= 1) {
        body(0);
        return;
    }
    WorkerPool::instance().run(parts, body);
}

}  // namespace capsule::reference
