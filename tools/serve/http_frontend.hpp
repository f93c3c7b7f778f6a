// The REST side of the Open Inference Protocol v2 on cpp-httplib: routes, the body size limit
// and the protocol's error objects. Requests are served by a fixed pool of worker threads; an
// infer request beyond the service's concurrency limit is refused at once (503) rather than
// queued without bound.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "inference_service.hpp"

namespace httplib {
class Server;
}

namespace capsule::serve {

struct HttpOptions {
    std::string host = "0.0.0.0";
    int port = 8000;                   // 0: any free port (HttpFrontend::bind says which)
    int threads = 16;                  // worker threads (each serves one connection at a time)
    std::size_t max_request_bytes = std::size_t(64) << 20;  // larger bodies get 413
};

class HttpFrontend {
public:
    HttpFrontend(InferenceService& service, HttpOptions options);
    ~HttpFrontend();
    /// Binds the listening socket; returns the port. Raises Error(input) when it cannot bind.
    int bind();
    /// Serves until stop(); returns after the requests in flight have been answered.
    void serve();
    /// Stops accepting (thread-safe, also from a signal-handling thread); serve() then drains.
    void stop();

private:
    void routes();
    InferenceService& service_;
    HttpOptions options_;
    std::unique_ptr<httplib::Server> server_;
};

}  // namespace capsule::serve
