// capsule-serve-load: a closed-loop load generator for capsule serve's REST API (a benchmark,
// not a test: README.md "Serving" quotes its figures). Each of --clients threads keeps one
// connection and sends --requests infer requests of one FP32 input with --shape (batch first),
// JSON or binary, with deterministic pseudo-random data (--distinct different bodies); every
// response must be HTTP 200 and byte-identical to the first response to the same body (a model's
// output for a row does not depend on which batch it ran in only up to rounding: give
// --tolerate-batching to compare outputs within 1e-5 relative instead, for dynamically batched
// models). Prints requests/s, latency p50/p90/p99 (ms) and the count of errors and wrong
// responses; exits 1 when there is any.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

/// A request body; with `binary`, the JSON header's length goes in `json_length`.
std::string body_for(const std::string& input, const std::vector<std::int64_t>& shape, unsigned seed, bool binary,
                     std::size_t& json_length) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1, 1);
    std::vector<float> data(static_cast<std::size_t>(n));
    for (auto& v : data) v = uniform(rng);
    if (!binary)
        return json{{"inputs", {{{"name", input}, {"shape", shape}, {"datatype", "FP32"}, {"data", data}}}}}.dump();
    std::string body = json{{"inputs", {{{"name", input}, {"shape", shape}, {"datatype", "FP32"},
                                         {"parameters", {{"binary_data_size", data.size() * sizeof(float)}}}}}}}.dump();
    json_length = body.size();
    body.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
    return body;
}

/// The outputs' values of a JSON response.
std::vector<double> values_of(const std::string& body) {
    std::vector<double> out;
    const auto doc = json::parse(body, nullptr, false);
    if (doc.is_discarded() || !doc.contains("outputs")) return out;
    for (const auto& o : doc["outputs"])
        for (const auto& v : o["data"]) out.push_back(v.get<double>());
    return out;
}

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size() || a.empty()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::fabs(a[i] - b[i]) > 1e-6 + 1e-5 * std::fabs(b[i])) return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"capsule-serve-load: closed-loop load on capsule serve's infer endpoint"};
    std::string host = "127.0.0.1", model, input = "input";
    int port = 8000, clients = 8, requests = 2000, distinct = 8;
    std::vector<std::int64_t> shape;
    bool tolerate_batching = false, binary = false;
    app.add_option("--host", host)->capture_default_str();
    app.add_option("--port", port)->required();
    app.add_option("--model", model)->required();
    app.add_option("--input", input, "input name")->capture_default_str();
    app.add_option("--shape", shape, "input shape, batch first (e.g. --shape 1 784)")->required();
    app.add_option("--clients", clients)->capture_default_str()->check(CLI::Range(1, 1024));
    app.add_option("--requests", requests, "per client")->capture_default_str()->check(CLI::Range(1, 10000000));
    app.add_option("--distinct", distinct, "different request bodies")->capture_default_str()->check(CLI::Range(1, 1024));
    app.add_flag("--binary", binary, "send the input as binary tensor data (outputs stay JSON)");
    app.add_flag("--tolerate-batching", tolerate_batching, "compare outputs within 1e-5 relative, not bytes");
    CLI11_PARSE(app, argc, argv);

    const std::string path = "/v2/models/" + model + "/infer";
    std::vector<std::string> bodies, expected;
    std::vector<httplib::Headers> headers;
    httplib::Client first(host, port);
    first.set_tcp_nodelay(true);
    for (int i = 0; i < distinct; ++i) {
        std::size_t json_length = 0;
        bodies.push_back(body_for(input, shape, unsigned(i + 1), binary, json_length));
        headers.emplace_back();
        if (binary) headers.back().emplace("Inference-Header-Content-Length", std::to_string(json_length));
        auto r = first.Post(path, headers.back(), bodies.back(), "application/json");
        if (!r || r->status != 200) {
            std::fprintf(stderr, "capsule-serve-load: the first request failed: %s\n",
                         r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
            return 1;
        }
        expected.push_back(r->body);
    }
    std::vector<std::vector<double>> expected_values;
    for (const auto& e : expected) expected_values.push_back(values_of(e));

    std::vector<double> latencies;
    std::atomic<long> errors{0};
    std::mutex mutex;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
        threads.emplace_back([&, c] {
            httplib::Client client(host, port);
            client.set_tcp_nodelay(true);
            client.set_keep_alive(true);
            std::vector<double> mine;
            mine.reserve(std::size_t(requests));
            for (int i = 0; i < requests; ++i) {
                const std::size_t j = std::size_t(c + i) % bodies.size();
                const auto t0 = std::chrono::steady_clock::now();
                auto r = client.Post(path, headers[j], bodies[j], "application/json");
                mine.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
                const bool ok = r && r->status == 200 &&
                                (tolerate_batching ? same_values(values_of(r->body), expected_values[j]) : r->body == expected[j]);
                if (!ok) ++errors;
            }
            std::lock_guard lock(mutex);
            latencies.insert(latencies.end(), mine.begin(), mine.end());
        });
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::sort(latencies.begin(), latencies.end());
    auto pct = [&](double p) { return latencies[std::min(latencies.size() - 1, std::size_t(p * latencies.size()))]; };
    std::printf("%s: %d clients x %d requests: %.0f requests/s, latency ms p50 %.3f p90 %.3f p99 %.3f, "
                "%ld errors or wrong responses\n",
                model.c_str(), clients, requests, double(latencies.size()) / seconds, pct(0.5), pct(0.9), pct(0.99),
                errors.load());
    return errors == 0 ? 0 : 1;
}
