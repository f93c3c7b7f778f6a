// Prometheus metrics of the server (text exposition format 0.0.4, served at GET /metrics): per
// model version, requests, failures by HTTP status, and histograms of queue and compute latency.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace capsule::serve {

class Metrics {
public:
    /// A finished infer request of `model` `version`: its HTTP status (200 or an error), the time
    /// it waited (for the dynamic batcher or a worker) and the time its session ran.
    void record(const std::string& model, const std::string& version, int status,
                std::chrono::nanoseconds queue, std::chrono::nanoseconds compute);
    /// An infer request refused before a model version was known (unknown model or version):
    /// counted, as every failure is, in capsule_inference_requests_total too, both under
    /// model="" and version="".
    void record_unrouted(int status);
    /// Any other HTTP error: an unknown endpoint, a malformed request, a body over the limit.
    void record_http_error(int status);
    /// Every metric in Prometheus' text format.
    std::string exposition() const;

private:
    /// Upper bounds of the latency buckets, microseconds (+Inf is implicit).
    static constexpr std::array<double, 14> kBucketsUs{50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000,
                                                       50000, 100000, 250000, 500000, 1000000};
    struct Histogram {
        std::array<std::uint64_t, kBucketsUs.size()> buckets{};
        std::uint64_t count = 0;
        double sum_us = 0;
        void observe(double us);
    };
    struct PerModel {
        std::uint64_t requests = 0;
        std::map<int, std::uint64_t> failures;  // by HTTP status
        Histogram queue, compute;
    };
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, std::string>, PerModel> models_;
    std::map<int, std::uint64_t> unrouted_, http_errors_;
};

}  // namespace capsule::serve
