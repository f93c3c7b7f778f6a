// The capsule::onnx entry points the tool calls (capsule/onnx_import.hpp), forwarded to
// libcapsule_onnx_import.so, which is opened the first time a command reads an ONNX file. JSON IR
// models load here directly, so a command that reads no ONNX file never maps libonnx or protobuf.
#include <cctype>
#include <string>

#define BOOST_DLL_USE_STD_FS  // boost::dll::fs is std::filesystem: no Boost.Filesystem to link
#include <boost/dll/shared_library.hpp>
#include <dlfcn.h>

#include "../onnx_import_module/onnx_import_module.hpp"
#include "capsule/ir.hpp"
#include "capsule/library_file.hpp"
#include "context.hpp"

namespace capsule {

namespace {

namespace fs = std::filesystem;

bool is_onnx_file(const fs::path& path) {
    std::string extension = path.extension().string();
    for (auto& ch : extension) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return extension == ".onnx";
}

#if CAPSULE_TOOL_WITH_ONNX
/// The module beside the binary (build tree), else under the installed library directory.
fs::path module_path() {
    const fs::path dir = cli::executable_dir();
    const fs::path beside = dir / CAPSULE_ONNX_IMPORT_MODULE_FILE;
    const fs::path installed =
        (dir / CAPSULE_ONNX_IMPORT_MODULE_DIR_FROM_BIN / CAPSULE_ONNX_IMPORT_MODULE_FILE).lexically_normal();
    std::error_code ec;
    if (fs::exists(beside, ec)) return beside;
    if (fs::exists(installed, ec)) return installed;
    throw Error(ErrorCode::probe, "ONNX import module " CAPSULE_ONNX_IMPORT_MODULE_FILE " is neither in " +
                                      dir.string() + " nor in " + installed.parent_path().string() +
                                      ": the installation is incomplete");
}

const cli::OnnxImportModule& open_module() {
    const fs::path path = module_path();
    // Checked on disk like a plugin and held open, so that dlopen maps the file checked.
    auto file = LibraryFile::open(path, "ONNX import module");
    // RTLD_NODELETE: tensors and errors made by the module keep pointers into its code.
    const auto mode = boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now |
                      static_cast<boost::dll::load_mode::type>(RTLD_NODELETE);
    boost::dll::shared_library library;
    try {
        library.load(file.loader_path(), mode);
        file.keep_open();
    } catch (const std::exception& e) {
        throw Error(ErrorCode::probe, "cannot load the ONNX import module " + path.string() + ": " +
                                          file.with_real_path(e.what()));
    }
    if (!library.has(CAPSULE_ONNX_IMPORT_MODULE_ENTRY))
        throw Error(ErrorCode::probe, path.string() + " has no entry symbol " CAPSULE_ONNX_IMPORT_MODULE_ENTRY);
    const auto* table = library.get<const cli::OnnxImportModule*()>(CAPSULE_ONNX_IMPORT_MODULE_ENTRY)();
    if (table->struct_size != sizeof(cli::OnnxImportModule) || std::string(table->version) != CAPSULE_VERSION)
        throw Error(ErrorCode::probe, path.string() + " comes from another build (version " +
                                          table->version + ", the tool is " CAPSULE_VERSION ")");
    return *table;
}

/// The module's table, opened once per process (the only state this file keeps).
const cli::OnnxImportModule& onnx_module(const fs::path&) {
    static const cli::OnnxImportModule& table = open_module();
    return table;
}
#else
[[noreturn]] const cli::OnnxImportModule& onnx_module(const fs::path& path) {
    throw Error(ErrorCode::input, (path.empty() ? std::string() : path.string() + ": ") +
                                      "this build has no ONNX import (configured with "
                                      "CAPSULE_WITH_ONNX=OFF); use a JSON IR graph");
}
#endif

}  // namespace

void cli::require_onnx_import() { onnx_module({}); }

LoadedModel load_model(const fs::path& path, const OnnxImportOptions& options) {
    if (is_onnx_file(path)) return onnx_module(path).load_model(path, options);
    LoadedModel out;
    out.graph = load_graph(path);
    out.parameters = load_graph_parameters(out.graph);
    return out;
}

std::map<std::string, Tensor> bind_model_inputs(const LoadedModel& model,
                                                const std::map<std::string, Tensor>& values,
                                                ParameterMap& parameters) {
    // Only an imported ONNX model has inputs bound to parameters or left unused.
    if (model.parameter_inputs.empty() && model.unused_inputs.empty()) return values;
    return onnx_module("").bind_model_inputs(model, values, parameters);
}

OnnxImportResult try_import_onnx(const fs::path& path, const OnnxImportOptions& options) {
    return onnx_module(path).try_import_onnx(path, options);
}

std::vector<std::string> onnx_graph_inputs(const fs::path& path) {
    return onnx_module(path).onnx_graph_inputs(path);
}

std::variant<OnnxValue, OnnxUnsupported> try_read_onnx_value(const fs::path& file, const fs::path& model, bool output,
                                                             std::size_t index) {
    return onnx_module(model).try_read_onnx_value(file, model, output, index);
}

std::map<std::string, Tensor> bind_onnx_inputs(const ImportedModel& model,
                                               const std::map<std::string, Tensor>& values,
                                               ParameterMap& parameters) {
    return onnx_module("").bind_onnx_inputs(model, values, parameters);
}

}  // namespace capsule
