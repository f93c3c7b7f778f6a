// The plugin libraries of this build, opened directly (dlopen through the conformance harness's
// open_plugin_library) for tests that call kernels without a session: the oneDNN and LibTorch
// plugin tests compare their kernels with the reference plugin's.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "conformance/harness.hpp"

namespace capsule::testing {

/// The table of `file` in the build's plugin directory, or nullptr after recording a test
/// failure that names the file and dlopen's error.
inline const capsule_plugin* open_built_plugin(const char* file) {
    std::string error;
    auto* p = conformance::open_plugin_library(std::string(CAPSULE_PLUGIN_DIR) + "/" + file, error);
    if (!p) ADD_FAILURE() << "cannot open " << file << ": " << error;
    return p;
}

/// The reference plugin's table (opened once); raises std::runtime_error when it cannot be opened.
inline const capsule_plugin& reference_plugin() {
    static const capsule_plugin* p = open_built_plugin("libcapsule_reference.so");
    if (!p) throw std::runtime_error("reference plugin unavailable");
    return *p;
}

}  // namespace capsule::testing
