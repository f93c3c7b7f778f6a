#include "metrics.hpp"

#include <cstdio>
#include <sstream>

namespace capsule::serve {

namespace {
/// A label value as the text format wants it: backslash, double quote and newline escaped, and
/// other control bytes and bytes from 0x80 (names need not be UTF-8) as \\xNN.
std::string escaped(const std::string& value) {
    std::string out;
    for (char c : value) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
        } else if (u < 0x20 || u >= 0x80) {  // model names need not be UTF-8: keep the text valid
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\\\x%02x", u);
            out += hex;
        } else {
            out += c;
        }
    }
    return out;
}
}  // namespace

void Metrics::Histogram::observe(double us) {
    for (std::size_t i = 0; i < kBucketsUs.size(); ++i)
        if (us <= kBucketsUs[i]) ++buckets[i];
    ++count;
    sum_us += us;
}

void Metrics::record(const std::string& model, const std::string& version, int status,
                     std::chrono::nanoseconds queue, std::chrono::nanoseconds compute) {
    std::lock_guard lock(mutex_);
    auto& m = models_[{model, version}];
    ++m.requests;
    if (status != 200) {
        ++m.failures[status];
        return;
    }
    m.queue.observe(double(queue.count()) / 1e3);
    m.compute.observe(double(compute.count()) / 1e3);
}

void Metrics::record_unrouted(int status) {
    std::lock_guard lock(mutex_);
    ++unrouted_[status];
}

void Metrics::record_http_error(int status) {
    std::lock_guard lock(mutex_);
    ++http_errors_[status];
}

std::string Metrics::exposition() const {
    std::lock_guard lock(mutex_);
    std::ostringstream out;
    out.precision(17);  // sums of microseconds over days need every digit
    auto labels = [](const std::pair<std::string, std::string>& key) {
        return "model=\"" + escaped(key.first) + "\",version=\"" + escaped(key.second) + "\"";
    };
    out << "# HELP capsule_inference_requests_total Infer requests per model version, successful or not.\n"
           "# TYPE capsule_inference_requests_total counter\n";
    for (const auto& [key, m] : models_) out << "capsule_inference_requests_total{" << labels(key) << "} " << m.requests << "\n";
    // Requests that named no model version: as many as their failures, so every failure series
    // has its requests series.
    std::uint64_t unrouted = 0;
    for (const auto& [status, n] : unrouted_) unrouted += n;
    if (unrouted > 0) out << "capsule_inference_requests_total{model=\"\",version=\"\"} " << unrouted << "\n";
    out << "# HELP capsule_inference_failures_total Infer requests that failed, by HTTP status.\n"
           "# TYPE capsule_inference_failures_total counter\n";
    for (const auto& [key, m] : models_)
        for (const auto& [status, n] : m.failures)
            out << "capsule_inference_failures_total{" << labels(key) << ",status=\"" << status << "\"} " << n << "\n";
    for (const auto& [status, n] : unrouted_)
        out << "capsule_inference_failures_total{model=\"\",version=\"\",status=\"" << status << "\"} " << n << "\n";
    out << "# HELP capsule_http_errors_total HTTP requests refused outside inference (unknown endpoint, "
           "malformed request, body too large), by status.\n"
           "# TYPE capsule_http_errors_total counter\n";
    for (const auto& [status, n] : http_errors_)
        out << "capsule_http_errors_total{status=\"" << status << "\"} " << n << "\n";
    const std::pair<const char*, Histogram PerModel::*> histograms[] = {
        {"capsule_inference_queue_duration_us", &PerModel::queue},
        {"capsule_inference_compute_duration_us", &PerModel::compute}};
    for (const auto& [name, member] : histograms) {
        out << "# HELP " << name << (member == &PerModel::queue
                                         ? " Time a successful request waited before its batch ran, microseconds.\n"
                                         : " Time the session ran a successful request's batch, microseconds.\n")
            << "# TYPE " << name << " histogram\n";
        for (const auto& [key, m] : models_) {
            const Histogram& h = m.*member;
            for (std::size_t i = 0; i < kBucketsUs.size(); ++i)
                out << name << "_bucket{" << labels(key) << ",le=\"" << kBucketsUs[i] << "\"} " << h.buckets[i] << "\n";
            out << name << "_bucket{" << labels(key) << ",le=\"+Inf\"} " << h.count << "\n"
                << name << "_sum{" << labels(key) << "} " << h.sum_us << "\n"
                << name << "_count{" << labels(key) << "} " << h.count << "\n";
        }
    }
    return out.str();
}

}  // namespace capsule::serve
