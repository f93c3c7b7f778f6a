#include "conformance/verify.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "capsule/op_catalog.hpp"
#include "conformance/harness.hpp"

#ifndef CAPSULE_VERSION
#define CAPSULE_VERSION "unknown"
#endif

namespace capsule::conformance {

namespace {

bool has_float_tensor_of(const KernelCase& c, std::string_view dtype) {
    for (const auto* list : {&c.inputs, &c.params})
        for (const auto& t : *list)
            if (to_string(t.dtype) == dtype) return true;
    return false;
}

/// `NAME=VALUE` against a bool, integer or string attribute of the case.
bool attribute_matches(const KernelCase& c, const std::string& spec) {
    const auto eq = spec.find('=');
    const auto it = c.attrs.find(spec.substr(0, eq));
    if (it == c.attrs.end()) return false;
    const std::string want = spec.substr(eq + 1);
    if (const bool* b = std::get_if<bool>(&it->second)) return want == (*b ? "true" : "false");
    if (const std::int64_t* i = std::get_if<std::int64_t>(&it->second)) return want == std::to_string(*i);
    if (const std::string* s = std::get_if<std::string>(&it->second)) return want == *s;
    return false;
}

/// The first tolerance floor of the declaration that applies to `op`, if any.
const ConformanceDeclaration::Tolerance* tolerance_floor(const ConformanceDeclaration& d, BackendOp op) {
    for (const auto& t : d.tolerances)
        if (t.ops.empty() || std::find(t.ops.begin(), t.ops.end(), op) != t.ops.end()) return &t;
    return nullptr;
}

std::string utc_now() {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&now, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

constexpr std::size_t kFailuresKept = 5;

void record_outcome(const KernelCase& c, const CaseOutcome& o, bool gradient, CapsuleEvidence& e) {
    (gradient ? e.gradient_cases : e.forward_cases) += 1;
    if (o.failure.empty()) {
        (gradient ? e.gradient_passed : e.forward_passed) += 1;
    } else if (e.failures.size() < kFailuresKept) {
        e.failures.push_back(c.name + (gradient ? " (gradient): " : ": ") + o.failure);
    }
    if (o.compared) {
        e.max_abs_error = std::max(e.max_abs_error, o.max_abs_error);
        e.max_error_ratio = std::max(e.max_error_ratio, o.max_error_ratio);
    }
}

}  // namespace

namespace {

/// `c` with every float tensor (inputs, parameters, expected output) typed float32.
KernelCase as_float32(KernelCase c) {
    auto narrow = [](CaseTensor& t) {
        if (t.dtype == DType::float64) t.dtype = DType::float32;
    };
    for (auto& t : c.inputs) narrow(t);
    for (auto& t : c.params) narrow(t);
    narrow(c.expected);
    return c;
}

}  // namespace

std::string unsupported_reason(const ConformanceDeclaration& declaration, const KernelCase& c) {
    for (const auto& u : declaration.unsupported) {
        if (!u.case_name.empty() && u.case_name != c.name) continue;
        if (u.op && *u.op != c.op) continue;
        if (!u.dtype.empty() && !has_float_tensor_of(c, u.dtype)) continue;
        if (!u.attribute.empty() && !attribute_matches(c, u.attribute)) continue;
        if (u.error_cases && c.expected_error.empty()) continue;
        return u.reason;
    }
    return "";
}

EvidenceRecord verify_plugin(const PluginRecord& record, const LoadedPlugin& plugin,
                             const std::string& driver, const VerifyProgress& progress) {
    const PluginManifest& m = *record.manifest;
    EvidenceRecord out;
    out.plugin = m.name;
    out.version = m.version;
    out.abi = to_string(m.abi);
    out.library = record.library_path ? record.library_path->string() : "";
    out.library_sha256 = plugin.sha256;
    out.device = to_string(m.device);
    out.driver = driver;
    out.date = utc_now();
    out.host_version = CAPSULE_VERSION;

    const std::vector<KernelCase> cases = all_cases();
    std::vector<const KernelCapsule*> with_kernels;
    for (const auto& k : m.capsules)
        if (k.runtime == RuntimeSupport::eager || k.runtime == RuntimeSupport::test_only)
            with_kernels.push_back(&k);
    for (std::size_t i = 0; i < with_kernels.size(); ++i) {
        const KernelCapsule& capsule = *with_kernels[i];
        if (progress) progress(capsule.name, i, with_kernels.size());
        CapsuleEvidence e;
        e.capsule = capsule.name;
        e.op = capsule.op;
        const capsule_kernel* kernel = plugin.kernel(capsule.name);
        if (!kernel) {
            e.forward_cases = 1;
            e.failures.push_back("the library has no kernel for " + capsule.name);
            out.capsules.push_back(std::move(e));
            continue;
        }
        const auto* floor = tolerance_floor(m.conformance, capsule.op);
        for (const auto& original : cases) {
            if (original.op != capsule.op) continue;
            if (auto why = unsupported_reason(m.conformance, original); !why.empty()) {
                e.unsupported.emplace_back(original.name, why);
                // A float32-only kernel's gradient check runs the case in float32 (check_gradient),
                // so a case skipped only for its float64 tensors still checks the backward.
                if (original.check_gradient && kernel->backward && gradient_in_float32(*kernel) &&
                    unsupported_reason(m.conformance, as_float32(original)).empty())
                    record_outcome(original, check_gradient(*kernel, original), true, e);
                continue;
            }
            KernelCase c = original;
            if (floor) {
                c.rtol = std::max(c.rtol, floor->rtol);
                c.atol = std::max(c.atol, floor->atol);
            }
            e.rtol = std::max(e.rtol, c.rtol);
            e.atol = std::max(e.atol, c.atol);
            // An error case asks for a refusal; its expected text is the reference kernel's wording.
            record_outcome(c, check_forward(*kernel, c, /*exact_messages=*/false), false, e);
            if (c.check_gradient && kernel->backward)
                record_outcome(c, check_gradient(*kernel, c), true, e);
        }
        // A VJP claim is evidence about the backward kernel: it needs one, and a gradient case.
        if (capsule.vjp_mode != VJPMode::none && op_info(capsule.op).differentiable() && e.gradient_cases == 0) {
            e.gradient_cases = 1;
            e.failures.push_back(kernel->backward
                                     ? "no gradient case ran, so its VJP claim (" +
                                           std::string(to_string(capsule.vjp_mode)) + ") is not verified"
                                     : "it claims VJP mode " + std::string(to_string(capsule.vjp_mode)) +
                                           " but the library's kernel has no backward");
        }
        out.capsules.push_back(std::move(e));
    }
    return out;
}

std::string describe_cpu() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line) && (model.empty() || flags.empty())) {
        auto value = [&] { auto p = line.find(':'); return p == std::string::npos ? "" : line.substr(p + 2); };
        if (model.empty() && line.rfind("model name", 0) == 0) model = value();
        if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + value() + " ";
    }
    std::string out = model.empty() ? "unknown CPU" : model;
    std::string ext;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "asimd", "sve"})
        if (flags.find(std::string(" ") + f + " ") != std::string::npos) ext += (ext.empty() ? "" : " ") + std::string(f);
    if (!ext.empty()) out += " (" + ext + ")";
    return out + ", " + std::to_string(std::thread::hardware_concurrency()) + " logical cores";
}

}  // namespace capsule::conformance
