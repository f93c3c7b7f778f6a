// The REST side of the Open Inference Protocol v2 on cpp-httplib: routes, the body size limit
// and the protocol's error objects. Requests are served by a fixed pool of worker threads, which
// a connection gets only once its request's head has arrived (gated_server.hpp); an
// infer request beyond the service's concurrency limit is refused at once (503) rather than
// queued without bound.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "inference_service.hpp"

namespace capsule::serve {

class GatedServer;

struct HttpOptions {
    std::string host = "0.0.0.0";
    int port = 8000;                   // 0: any free port (HttpFrontend::bind says which)
    int threads = 16;                  // worker threads (each serves one request at a time)
    std::size_t max_request_bytes = std::size_t(64) << 20;  // larger bodies get 413
    double header_timeout_s = 10;      // a request's head must arrive within this after its first byte
    double min_body_rate = 1 << 20;    // bytes/s a body must average after header_timeout_s of grace
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
    std::unique_ptr<GatedServer> server_;
};

}  // namespace capsule::serve
