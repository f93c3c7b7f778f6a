// `capsule bench`: what one benchmark run measured, the pseudo-random values it feeds the model,
// and the reports made from it (text table, JSON object, Chrome trace).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"

namespace capsule::cli {

/// Everything `capsule bench` measured. Times of `runs` come from Session::run with RunTimings.
struct BenchRecord {
    std::string model;      // the model path as given
    std::string profile;
    int threads = 0;        // intra-op threads the kernels were given (resolved: never 0)
    int warmup = 0;         // untimed runs before `runs`
    std::vector<TensorSlot> inputs;
    double load_ms = 0;     // reading (and for ONNX importing) the model
    double plan_ms = 0;     // plan + lower + gate
    double session_ms = 0;  // Session::create: probing plugins, uploading parameters, prepare
    std::vector<SessionStep> steps;
    std::vector<std::string> node_names;  // one per step: the node's name, or `node <id>`
    std::vector<RunTimings> runs;         // the timed runs, in order
};

/// Latency statistics over a set of runs, in milliseconds. Percentiles interpolate linearly
/// between the sorted samples (NumPy's default); `median` is the 50th percentile.
struct LatencySummary {
    double min = 0, median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};
/// Raises std::invalid_argument for an empty `ms`.
LatencySummary summarize(std::vector<double> ms);

/// Deterministic pseudo-random host values for every runtime input of `model` (float: uniform in
/// [-1, 1); integers: 1, an index of any axis longer than 1 and never a zero divisor; bool:
/// uniform), and for its ONNX inputs that supply parameters. When the
/// model is JSON IR without a parameters file, its parameters are drawn the same way (weights
/// uniform in ±1/sqrt(fan-in), batch-norm running variances 1) and added to `parameters`.
/// Returns the values by input name, ready for bind_model_inputs. `drawn_parameters` counts the
/// parameter tensors drawn. The same model always gets the same values.
std::map<std::string, Tensor> bench_values(const LoadedModel& model, ParameterMap& parameters,
                                           std::size_t& drawn_parameters);

/// The report for people: times (ms), latency statistics and one row per kernel call (node, op,
/// capsule, plugin, total ms over the timed runs, mean ms per run, share of the run time).
std::string bench_text(const BenchRecord& record);
/// The same as one JSON object (`capsule bench --json`).
nlohmann::ordered_json bench_json(const BenchRecord& record);
/// Chrome trace-event JSON (chrome://tracing, Perfetto): `{"traceEvents": [...]}` with one
/// complete ("X") event per kernel call of each timed run; `ts` and `dur` in microseconds from
/// the first timed run's start; `args` name the node id, op, capsule, provider, plugin and run.
nlohmann::ordered_json bench_trace(const BenchRecord& record);

}  // namespace capsule::cli
