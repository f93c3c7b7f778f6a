// The REST side of the Open Inference Protocol v2 on cpp-httplib: routes, limits and the
// protocol's error objects. Requests are served by a fixed pool of worker threads; a request
// beyond the concurrency limit is refused at once (503) rather than queued without bound.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "dynamic_batcher.hpp"
#include "metrics.hpp"
#include "model_repository.hpp"

namespace httplib {
class Server;
}

namespace capsule::serve {

struct HttpOptions {
    std::string host = "0.0.0.0";
    int port = 8000;                   // 0: any free port (HttpFrontend::bind says which)
    int threads = 16;                  // worker threads (each serves one connection at a time)
    int max_concurrency = 64;          // infer requests in flight at once; more get 503
    std::size_t max_request_bytes = std::size_t(64) << 20;  // larger bodies get 413
};

class HttpFrontend {
public:
    HttpFrontend(std::shared_ptr<const ModelRepository> repository, Metrics& metrics, HttpOptions options);
    ~HttpFrontend();
    /// Binds the listening socket; returns the port. Raises Error(input) when it cannot bind.
    int bind();
    /// Serves until stop(); returns after the requests in flight have been answered.
    void serve();
    /// Stops accepting (thread-safe, also from a signal-handling thread); serve() then drains.
    void stop();

private:
    void routes();
    std::shared_ptr<const ModelRepository> repository_;
    Metrics& metrics_;
    HttpOptions options_;
    std::unique_ptr<httplib::Server> server_;
    std::map<const ModelVersion*, std::unique_ptr<DynamicBatcher>> batchers_;
    std::atomic<int> in_flight_{0};
    std::atomic<bool> stopping_{false};
};

}  // namespace capsule::serve
