// The one error type the core raises. Its code says which stage refused and is, numerically, the
// exit code of the `capsule` tool (DESIGN.md section 7), so an embedding program and the tool tell
// bad input from a refused plan the same way.
#pragma once

#include <stdexcept>
#include <string>

namespace capsule {

/// Why an operation failed. The numeric value of each code is the `capsule` tool's exit code for
/// that failure (0 is success and has no code).
enum class ErrorCode : int {
    /// Anything else: a kernel or plugin call failed while running, memory or a device ran out, a
    /// file could not be written, backward was refused (the profile's VJP mode, a capsule without
    /// a backward kernel, a tape from another session), training diverged.
    other = 1,
    /// Bad input: a malformed file or document (manifest, profile, graph, ONNX model, tensor file)
    /// with its file, JSON path and reason; a spelling outside a closed vocabulary (device,
    /// provider, op, profile name, ...) with every valid spelling; a bad argument (a shape with a
    /// negative dimension, a tensor of the wrong dtype, an unknown input name); input data whose
    /// values a kernel refuses while running (an index out of range: CAPSULE_ERROR_INVALID_DATA).
    input = 2,
    /// Planning found no admissible capsule for an op; the message lists every refused candidate.
    planning = 3,
    /// The acceptance gate rejected the plan; the message lists the failed obligations.
    gate = 4,
    /// The host or a plugin cannot run the plan here: device missing, driver unusable, OS or
    /// architecture mismatch, stub or failed plugin, capsule without a kernel.
    probe = 5,
};

/// The code's name: "other", "input", "planning", "gate" or "probe".
inline const char* to_string(ErrorCode code) noexcept {
    switch (code) {
    case ErrorCode::other: return "other";
    case ErrorCode::input: return "input";
    case ErrorCode::planning: return "planning";
    case ErrorCode::gate: return "gate";
    case ErrorCode::probe: return "probe";
    }
    return "other";
}

/// Every error the core raises. `what()` names the cause in one or more lines; `code()` the kind of
/// failure (and the `capsule` tool's exit code).
class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

}  // namespace capsule
