// The gRPC side of the Open Inference Protocol v2: the GRPCInferenceService of
// grpc_service.proto on gRPC's synchronous server (Debian's libgrpc++-dev), over the same
// InferenceService as REST. Errors are gRPC statuses with the same messages as REST's error
// objects: INVALID_ARGUMENT (HTTP 400), NOT_FOUND (404), RESOURCE_EXHAUSTED (413: a message over
// --max-request-bytes, which gRPC itself refuses), UNAVAILABLE (503: not ready or busy), INTERNAL
// (500). gRPC's thread quota is set above the concurrency limit, so that calls beyond it get
// UNAVAILABLE from the limit rather than gRPC's own "thread pool exhausted". Inputs come as typed `contents` or as `raw_input_contents`; outputs always go back as
// `raw_output_contents` (what Triton's clients read).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "inference_service.hpp"

namespace capsule::serve {

struct GrpcOptions {
    std::string host = "0.0.0.0";
    int port = 8001;  // 0: any free port (start says which)
    int threads = 16;  // gRPC's server may use this many threads, and one per call in flight
    int max_concurrency = 64;  // the service's limit: each call in flight needs a thread
    std::size_t max_request_bytes = std::size_t(64) << 20;
};

class GrpcFrontend {
public:
    GrpcFrontend(InferenceService& service, GrpcOptions options);
    ~GrpcFrontend();
    /// Starts serving; returns the port. Raises Error(input) when it cannot bind.
    int start();
    /// Stops accepting and waits for the calls in flight (thread-safe).
    void stop();

private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace capsule::serve
