// How long OpenMP's idle threads spin in the tools' processes (capsule, capsule-serve).
#pragma once

#include <cstdlib>

namespace capsule::tools {

/// libgomp (the OpenMP runtime of Debian's oneDNN and LibTorch) lets a thread that finished its
/// part of a parallel region spin GOMP_SPINCOUNT times before it sleeps: 300,000 by default,
/// about 3 ms by libgomp's own estimate of 100,000 per ms. Between two oneDNN primitives the
/// calling thread runs the executor and reference kernels, so where other processes share the
/// cores, the spinning threads take the time it needs. 20,000 (about 200 µs, as long as the
/// reference plugin's workers spin) keeps the threads awake between a model's layers and lets
/// them sleep otherwise. Measured 2026-12-03 on 2 cores (Zen 5 guest): LeNet-5 training under
/// onednn_cpu (`--train-limit 10000`) beside two busy processes, 7 runs each: 300,000 median
/// 5.2 s (2.4 to 12.4), 20,000 median 2.6 s (2.2 to 4.0), passive 1.5 s; on the quiet machine
/// 20,000 ran as fast as 300,000 (ResNet-18, squeezenet1_1, the MLP and LeNet-5 in `capsule
/// bench`), where OMP_WAIT_POLICY=passive was 1.1x to 1.5x slower.
///
/// Sets GOMP_SPINCOUNT=20000 unless GOMP_SPINCOUNT or OMP_WAIT_POLICY is set (the user's choice
/// wins). libgomp reads its environment once, when the first plugin that needs it is opened, so
/// call this first in main, before any thread starts (setenv is not thread-safe). Embedders of
/// the runtime make the same choice in their own environment (README, "Measured figures").
inline void bound_openmp_spinning() {
    if (std::getenv("GOMP_SPINCOUNT") == nullptr && std::getenv("OMP_WAIT_POLICY") == nullptr)
        ::setenv("GOMP_SPINCOUNT", "20000", 0);
}

}  // namespace capsule::tools
