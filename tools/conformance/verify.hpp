// `capsule verify`: runs the shared conformance suite against one plugin library and makes its
// evidence record (DESIGN.md section 10, "Evidence is earned"; capsule/evidence.hpp).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "capsule/evidence.hpp"
#include "capsule/registry.hpp"

namespace capsule::conformance {

/// Which cases a plugin does not run (the manifest's `conformance.unsupported`): the reason of the
/// first entry matching `c`, or "" when the plugin runs it.
struct KernelCase;
std::string unsupported_reason(const ConformanceDeclaration& declaration, const KernelCase& c);

/// Called before each capsule's cases run: the capsule, its index and the number of capsules.
using VerifyProgress = std::function<void(std::string_view capsule, std::size_t index, std::size_t count)>;

/// Runs, for every capsule of `record`'s manifest that has a kernel (runtime eager or test-only),
/// every case of its op: forward cases (with the manifest's tolerance floors; an error case passes
/// when the kernel refuses its inputs, whatever its message), and gradient cases
/// when the kernel has a backward. Declared-unsupported cases are listed with their reasons, not
/// run. A capsule claiming a VJP (mode other than none, on a differentiable op) fails when its
/// kernel has no backward or no gradient case ran. `plugin` is the opened library (PluginHost::library); `driver` says what ran it (see
/// describe_cpu). The record's date is now (UTC) and its hash is `plugin.sha256`.
EvidenceRecord verify_plugin(const PluginRecord& record, const LoadedPlugin& plugin,
                             const std::string& driver, const VerifyProgress& progress = {});

/// This machine's CPU as an evidence record's driver: `/proc/cpuinfo`'s model name, the vector
/// extensions kernels dispatch on (avx2, avx512f, avx512_bf16, amx_bf16, ...) and the core count.
std::string describe_cpu();

}  // namespace capsule::conformance
