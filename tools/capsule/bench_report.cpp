// The reports of `capsule bench`: latency statistics, the text table, the JSON object and the
// Chrome trace, all pure functions of a BenchRecord.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "bench.hpp"

namespace capsule::cli {

namespace {

using Ms = std::chrono::duration<double, std::milli>;
using Us = std::chrono::duration<double, std::micro>;

double percentile(const std::vector<double>& sorted, double p) {
    const double at = p * double(sorted.size() - 1);
    const auto lo = static_cast<std::size_t>(at);
    const auto hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - double(lo));
}

std::vector<double> run_ms(const BenchRecord& record) {
    std::vector<double> ms;
    for (const auto& run : record.runs) ms.push_back(Ms(run.total).count());
    return ms;
}

double total_run_ms(const BenchRecord& record) {
    double ms = 0;
    for (const auto& run : record.runs) ms += Ms(run.total).count();
    return ms;
}

/// Per kernel call: total milliseconds over the timed runs.
std::vector<double> step_totals_ms(const BenchRecord& record) {
    std::vector<double> totals(record.steps.size(), 0.0);
    for (const auto& run : record.runs)
        for (std::size_t i = 0; i < run.steps.size() && i < totals.size(); ++i)
            totals[i] += Ms(run.steps[i].duration).count();
    return totals;
}

std::string fixed(double v, int digits = 3) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
    return buffer;
}

std::string inputs_text(const std::vector<TensorSlot>& inputs) {
    std::string out;
    for (const auto& in : inputs)
        out += (out.empty() ? "" : ", ") + in.name + " " + std::string(to_string(in.type.dtype)) +
               to_string(in.type.shape);
    return out.empty() ? "none" : out;
}

}  // namespace

LatencySummary summarize(std::vector<double> ms) {
    if (ms.empty()) throw std::invalid_argument("summarize: no samples");
    std::sort(ms.begin(), ms.end());
    LatencySummary s;
    s.min = ms.front();
    s.max = ms.back();
    s.median = percentile(ms, 0.5);
    s.p90 = percentile(ms, 0.9);
    s.p99 = percentile(ms, 0.99);
    s.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / double(ms.size());
    return s;
}

std::string bench_text(const BenchRecord& record) {
    const auto latency = summarize(run_ms(record));
    const auto totals = step_totals_ms(record);
    const double all_runs_ms = total_run_ms(record);
    const double runs = double(record.runs.size());
    std::ostringstream out;
    out << "model " << record.model << ", profile " << record.profile << ", threads " << record.threads
        << "\ninputs: " << inputs_text(record.inputs) << "\n"
        << "load " << fixed(record.load_ms) << " ms, plan " << fixed(record.plan_ms)
        << " ms, session creation " << fixed(record.session_ms) << " ms\n"
        << record.warmup << " warm-up run(s), " << record.runs.size() << " timed run(s), ms per run: min "
        << fixed(latency.min) << "  median " << fixed(latency.median) << "  p90 " << fixed(latency.p90)
        << "  p99 " << fixed(latency.p99) << "  max " << fixed(latency.max) << "  mean "
        << fixed(latency.mean) << "  (" << fixed(1000.0 / latency.mean, 1) << " runs/s)\n\n";
    // A compiled group's row names its first and last node and says what the plugin fused.
    std::vector<std::string> names, capsules;
    for (std::size_t i = 0; i < record.steps.size(); ++i) {
        const auto& step = record.steps[i];
        names.push_back(record.node_names[i]);
        capsules.push_back(step.capsule);
        if (step.group_nodes.empty()) continue;
        const auto& joined = record.node_names[i];
        names.back() = joined.substr(0, joined.find('+')) + " .. " + joined.substr(joined.rfind('+') + 1) +
                       " (" + std::to_string(step.group_nodes.size()) + " nodes)";
        capsules.back() = "compiled group: " + (step.fused.empty() ? "nothing fused" : step.fused);
    }
    // Column widths from the contents.
    std::size_t wn = 4, wo = 2, wc = 7, wp = 6;
    for (std::size_t i = 0; i < record.steps.size(); ++i) {
        wn = std::max(wn, names[i].size());
        wo = std::max(wo, to_string(record.steps[i].op).size());
        wc = std::max(wc, capsules[i].size());
        wp = std::max(wp, record.steps[i].plugin.size());
    }
    auto pad = [](const std::string& s, std::size_t w) { return s + std::string(w - std::min(w, s.size()), ' '); };
    out << pad("node", wn) << "  " << pad("op", wo) << "  " << pad("capsule", wc) << "  " << pad("plugin", wp)
        << "  total ms   mean ms   share\n";
    double kernels_ms = 0;
    for (std::size_t i = 0; i < record.steps.size(); ++i) {
        const auto& step = record.steps[i];
        kernels_ms += totals[i];
        char numbers[96];
        std::snprintf(numbers, sizeof numbers, "%9.3f %9.4f %6.1f%%", totals[i], totals[i] / runs,
                      all_runs_ms > 0 ? 100.0 * totals[i] / all_runs_ms : 0.0);
        out << pad(names[i], wn) << "  " << pad(std::string(to_string(step.op)), wo) << "  "
            << pad(capsules[i], wc) << "  " << pad(step.plugin, wp) << " " << numbers << "\n";
    }
    out << "kernels " << fixed(kernels_ms) << " ms of " << fixed(all_runs_ms) << " ms over the timed runs ("
        << fixed(all_runs_ms > 0 ? 100.0 * kernels_ms / all_runs_ms : 0.0, 1)
        << "%; the rest: binding inputs, arena, copying outputs, dispatch)\n";
    return out.str();
}

nlohmann::ordered_json bench_json(const BenchRecord& record) {
    const auto latency = summarize(run_ms(record));
    const auto totals = step_totals_ms(record);
    const double all_runs_ms = total_run_ms(record);
    nlohmann::ordered_json j;
    j["model"] = record.model;
    j["profile"] = record.profile;
    j["threads"] = record.threads;
    j["inputs"] = nlohmann::ordered_json::array();
    for (const auto& in : record.inputs)
        j["inputs"].push_back({{"name", in.name}, {"dtype", to_string(in.type.dtype)}, {"shape", in.type.shape}});
    j["warmup"] = record.warmup;
    j["iterations"] = record.runs.size();
    j["load_ms"] = record.load_ms;
    j["plan_ms"] = record.plan_ms;
    j["session_create_ms"] = record.session_ms;
    j["latency_ms"] = {{"min", latency.min}, {"median", latency.median}, {"p90", latency.p90},
                       {"p99", latency.p99}, {"max", latency.max}, {"mean", latency.mean}};
    j["throughput_per_s"] = 1000.0 / latency.mean;
    j["runs_ms"] = run_ms(record);
    j["nodes"] = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < record.steps.size(); ++i) {
        const auto& step = record.steps[i];
        j["nodes"].push_back({{"node_id", step.node_id},
                              {"name", record.node_names[i]},
                              {"op", to_string(step.op)},
                              {"capsule", step.capsule},
                              {"provider", to_string(step.provider)},
                              {"plugin", step.plugin},
                              {"total_ms", totals[i]},
                              {"mean_ms", totals[i] / double(record.runs.size())},
                              {"share", all_runs_ms > 0 ? totals[i] / all_runs_ms : 0.0}});
        if (!step.group_nodes.empty()) {
            j["nodes"].back()["group_nodes"] = step.group_nodes;
            j["nodes"].back()["fused"] = step.fused;
        }
    }
    return j;
}

nlohmann::ordered_json bench_trace(const BenchRecord& record) {
    nlohmann::ordered_json events = nlohmann::ordered_json::array();
    if (!record.runs.empty()) {
        const auto origin = record.runs.front().start;
        for (std::size_t r = 0; r < record.runs.size(); ++r) {
            const auto& run = record.runs[r];
            const double run_us = Us(run.start - origin).count();
            for (std::size_t i = 0; i < run.steps.size() && i < record.steps.size(); ++i) {
                const auto& step = record.steps[i];
                events.push_back({{"name", record.node_names[i]},
                                  {"cat", to_string(step.op)},
                                  {"ph", "X"},
                                  {"ts", run_us + Us(run.steps[i].begin).count()},
                                  {"dur", Us(run.steps[i].duration).count()},
                                  {"pid", 1},
                                  {"tid", 1},
                                  {"args", {{"node_id", step.node_id},
                                            {"op", to_string(step.op)},
                                            {"capsule", step.capsule},
                                            {"provider", to_string(step.provider)},
                                            {"plugin", step.plugin},
                                            {"run", r}}}});
                if (!step.group_nodes.empty()) events.back()["args"]["fused"] = step.fused;
            }
        }
    }
    nlohmann::ordered_json trace;
    trace["traceEvents"] = std::move(events);
    trace["displayTimeUnit"] = "ms";
    trace["otherData"] = {{"model", record.model}, {"profile", record.profile}, {"threads", record.threads}};
    return trace;
}

}  // namespace capsule::cli
