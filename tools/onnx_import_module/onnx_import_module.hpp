// The table of capsule::onnx entry points that libcapsule_onnx_import.so (a module of the
// `capsule` tool) hands to the tool. The tool opens the module only when a command reads an ONNX
// file, so that every other command starts without mapping libonnx and protobuf, which cost about
// 8 ms per process start (dynamic relocation of two large libraries).
//
// Tool and module come from one build: the table is refused unless its size and the version it
// was built with equal the tool's.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "capsule/onnx_import.hpp"

namespace capsule::cli {

/// Entry points of capsule/onnx_import.hpp, with the same contracts (see there).
struct OnnxImportModule {
    std::size_t struct_size;  // sizeof(OnnxImportModule) in the module's build
    const char* version;      // CAPSULE_VERSION of the module's build
    LoadedModel (*load_model)(const std::filesystem::path&, const OnnxImportOptions&);
    std::map<std::string, Tensor> (*bind_model_inputs)(const LoadedModel&,
                                                       const std::map<std::string, Tensor>&,
                                                       ParameterMap&);
    OnnxImportResult (*try_import_onnx)(const std::filesystem::path&, const OnnxImportOptions&);
    std::vector<std::string> (*onnx_graph_inputs)(const std::filesystem::path&);
    std::variant<OnnxValue, OnnxUnsupported> (*try_read_onnx_value)(const std::filesystem::path&,
                                                                    const std::filesystem::path&, bool, std::size_t);
    std::map<std::string, Tensor> (*bind_onnx_inputs)(const ImportedModel&,
                                                      const std::map<std::string, Tensor>&,
                                                      ParameterMap&);
};

}  // namespace capsule::cli

/// The module's only exported symbol: returns its table (never null).
#define CAPSULE_ONNX_IMPORT_MODULE_ENTRY "capsule_onnx_import_module"
/// File name of the module: beside the `capsule` binary in a build tree, in
/// `<libdir>/capsule/` in an installed tree.
#define CAPSULE_ONNX_IMPORT_MODULE_FILE "libcapsule_onnx_import.so"
