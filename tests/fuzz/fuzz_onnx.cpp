// libFuzzer target: ONNX import from bytes (protobuf parsing, libonnx's checker and shape
// inference, constant folding, converters, check_graph), then planning + lowering + gating of the
// imported graph under checked_cpu with a manifests-only host.
#include "capsule/manifest.hpp"
#include "capsule/onnx_import.hpp"
#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::reference_manifests_host();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        const auto model =
            import_onnx_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.onnx");
        find_builtin_profile("checked_cpu").accept_graph(fuzz::reference_manifests_host(), model.graph);
    });
    return 0;
}
