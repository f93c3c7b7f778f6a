// Row operations on batched tensors (dimension 0 is the batch), shared by the model versions
// (padding a request to a session's batch size) and the dynamic batcher (joining requests).
#pragma once

#include <cstdint>
#include <vector>

#include "capsule/tensor.hpp"

namespace capsule::serve {

/// `parts` (each [rows_i, ...], one dtype, equal other dimensions) joined along dimension 0,
/// followed by zero rows up to `rows` in all. Raises Error(other) when the parts do not fit.
Tensor concatenate_rows(const std::vector<const Tensor*>& parts, std::int64_t rows);

/// Rows [first, first + rows) of `t` ([R, ...]). Raises Error(other) when they are not all
/// inside `t` (never reads past it).
Tensor slice_rows(const Tensor& t, std::int64_t first, std::int64_t rows);

}  // namespace capsule::serve
