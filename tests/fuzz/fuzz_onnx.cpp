// libFuzzer target: ONNX import from bytes (protobuf parsing, libonnx's checker and shape
// inference, constant folding, converters, check_graph), then planning + lowering + gating of the
// imported graph under checked_cpu with a manifests-only host.
#include "capsule/manifest.hpp"
#include "capsule/onnx_import.hpp"
#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

namespace {

const PluginHost& manifests_only_host() {
    static const PluginHost host = [] {
        PluginHostOptions options;
        options.load_libraries = false;
        return PluginHost::from_manifests(
            {load_manifest(std::filesystem::path(CAPSULE_SOURCE_DIR) / "plugins/cpu/reference.capsule.json")},
            options);
    }();
    return host;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    manifests_only_host();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        const auto model =
            import_onnx_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.onnx");
        find_builtin_profile("checked_cpu").accept_graph(manifests_only_host(), model.graph);
    });
    return 0;
}
