// Error types raised by the core. Each stage raises its own type so an embedding program (and the
// `capsule` tool's exit codes, DESIGN.md section 7) can tell bad input from a refused plan.
#pragma once

#include <stdexcept>
#include <string>

namespace capsule {

/// Base of every error the core raises. `what()` names the cause in one or more lines.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A spelling that is not in a closed vocabulary (device, provider, op, ...). The message lists
/// every valid spelling.
class VocabularyError : public Error {
public:
    using Error::Error;
};

/// A malformed input file or document: manifest, profile, graph, tensor file. The message gives the
/// file (when known), the JSON path and the reason.
class InputError : public Error {
public:
    using Error::Error;
};

/// Planning found no admissible capsule for an op; the message lists every refused candidate.
class PlanningError : public Error {
public:
    using Error::Error;
};

}  // namespace capsule
