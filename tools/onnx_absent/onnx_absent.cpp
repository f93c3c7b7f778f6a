// The `capsule` tool's stand-in for capsule::onnx in a build without it (CAPSULE_WITH_ONNX=OFF):
// JSON IR models load as usual; every ONNX entry point refuses with a message that says why.
#include <cctype>
#include <string>

#include "capsule/ir.hpp"
#include "capsule/onnx_import.hpp"

namespace capsule {

namespace {
[[noreturn]] void refuse(const std::filesystem::path& path) {
    throw Error(ErrorCode::input, path.string() + ": this build has no ONNX import (configured with "
                                     "CAPSULE_WITH_ONNX=OFF); use a JSON IR graph");
}
}  // namespace

ImportedModel import_onnx(const std::filesystem::path& path, const OnnxImportOptions&) {
    refuse(path);
}

ImportedModel import_onnx_bytes(std::string_view, const std::filesystem::path& source,
                                const OnnxImportOptions&) {
    refuse(source);
}

OnnxImportResult try_import_onnx(const std::filesystem::path& path, const OnnxImportOptions&) {
    refuse(path);
}

OnnxImportResult try_import_onnx_bytes(std::string_view, const std::filesystem::path& source,
                                       const OnnxImportOptions&) {
    refuse(source);
}

std::vector<std::string> onnx_graph_inputs(const std::filesystem::path& path) { refuse(path); }

std::vector<std::string> onnx_non_tensor_values(const std::filesystem::path& path) { refuse(path); }

Tensor read_onnx_tensor(const std::filesystem::path& path) { refuse(path); }

std::variant<Tensor, OnnxUnsupported> try_read_onnx_tensor(const std::filesystem::path& path) { refuse(path); }

std::string read_onnx_tensor_name(const std::filesystem::path& path) { refuse(path); }

std::map<std::string, Tensor> bind_onnx_inputs(const ImportedModel&,
                                               const std::map<std::string, Tensor>& values,
                                               ParameterMap&) {
    return values;
}

LoadedModel load_model(const std::filesystem::path& path, const OnnxImportOptions&) {
    std::string extension = path.extension().string();
    for (auto& ch : extension) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (extension == ".onnx") refuse(path);
    LoadedModel out;
    out.graph = load_graph(path);
    out.parameters = load_graph_parameters(out.graph);
    return out;
}

std::map<std::string, Tensor> bind_model_inputs(const LoadedModel&,
                                                const std::map<std::string, Tensor>& values,
                                                ParameterMap&) {
    return values;
}

}  // namespace capsule
