// A model's config.json in the model repository (Triton's layout: DIR/<model>/config.json beside
// the version directories DIR/<model>/<version>/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "capsule/ir.hpp"

namespace capsule::serve {

/// Dynamic batching (Triton's `dynamic_batching`): requests of one model version that arrive
/// within `max_queue_delay_us` of the first waiting one run as one batch along dimension 0.
struct DynamicBatching {
    /// How long the first request of a batch waits for others, in microseconds.
    std::int64_t max_queue_delay_us = 100;
    /// Batch sizes to run as soon as they are reached (sorted, each in [1, max_batch_size]); the
    /// largest, or max_batch_size when empty, closes a batch at once.
    std::vector<std::int64_t> preferred_batch_sizes;
};

/// What config.json says.
///
///     {"profile": "onednn_cpu", "max_batch_size": 8,
///      "inputs": {"input": [3, 224, 224]},
///      "dynamic_batching": {"max_queue_delay_us": 500, "preferred_batch_sizes": [4, 8]},
///      "threads": 0}
///
/// `profile` (required): a built-in backend profile name or a profile .json file relative to the
/// model's directory. `max_batch_size` (default 0): 0 means requests give the model's full input
/// shapes; N > 0 means dimension 0 of every input and output is the batch, requests carry 1..N
/// rows, and `inputs` gives each input's shape without it. `inputs`: shapes for inputs the model
/// leaves dynamic (ONNX); JSON IR graphs have static shapes and need max_batch_size 0.
/// `dynamic_batching` (optional, needs max_batch_size > 0). `threads`: intra-op threads of each
/// session (0: every core).
struct ModelConfig {
    std::string profile;
    std::int64_t max_batch_size = 0;
    std::map<std::string, Shape> inputs;
    std::optional<DynamicBatching> dynamic_batching;
    int threads = 0;
};

/// Reads `path` (strict JSON: unknown keys, duplicate keys and wrong types are refused). Raises
/// Error(input) naming the file, the JSON path and the cause.
ModelConfig read_model_config(const std::filesystem::path& path);

}  // namespace capsule::serve
