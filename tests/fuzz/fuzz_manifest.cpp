// libFuzzer target: plugin manifests (parse_manifest), the JSON round trip of an accepted
// manifest, and a manifests-only host built from it (validation, registries; no library loads).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "capsule/manifest.hpp"
#include "capsule/registry.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        auto manifest = parse_manifest(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.capsule.json");
        const auto text = manifest_to_json(manifest).dump();
        const auto again = manifest_to_json(parse_manifest(text, "round-trip.capsule.json")).dump();
        if (again != text) {
            std::fprintf(stderr, "fuzz: manifest_to_json does not round-trip:\n%s\n---\n%s\n", text.c_str(),
                         again.c_str());
            std::abort();
        }
        PluginHostOptions options;
        options.load = LoadPolicy::manifests_only;
        const auto host = PluginHost::from_manifests({std::move(manifest)}, options);
        for (const auto& record : host.plugins())
            for (const auto& mode : record.manifest ? record.manifest->registry_modes : std::vector<std::string>{})
                host.registry(mode);
    });
    return 0;
}
