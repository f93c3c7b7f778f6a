// libcapsule_onnx_import.so: capsule::onnx behind one exported C symbol, opened by the `capsule`
// tool on first use (onnx_import_module.hpp says why).
#include "onnx_import_module.hpp"

namespace {

// Overloads (defaulted options) make the casts pick the one signature the table holds.
const capsule::cli::OnnxImportModule kModule{
    sizeof(capsule::cli::OnnxImportModule),
    CAPSULE_VERSION,
    &capsule::load_model,
    &capsule::bind_model_inputs,
    static_cast<capsule::OnnxImportResult (*)(const std::filesystem::path&,
                                              const capsule::OnnxImportOptions&)>(&capsule::try_import_onnx),
    &capsule::onnx_graph_inputs,
    &capsule::try_read_onnx_value,
    &capsule::bind_onnx_inputs,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const capsule::cli::OnnxImportModule*
capsule_onnx_import_module() {
    return &kModule;
}
