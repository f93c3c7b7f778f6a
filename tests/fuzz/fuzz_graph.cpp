// libFuzzer target: the JSON IR reader (parse_graph), then for graphs it accepts: serialisation
// round trip, the well-formedness and shape check, parameter specs, and planning + lowering +
// gating under checked_cpu with a manifests-only host (the reference plugin's manifest; no
// library is loaded, no kernel runs).
#include <cstdio>

#include "capsule/ir.hpp"
#include "capsule/manifest.hpp"
#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

namespace {

void check_round_trip(const Graph& graph) {
    const auto text = graph_to_json(graph);
    const auto again = graph_to_json(parse_graph(text));
    if (again != text) {
        std::fprintf(stderr, "fuzz: graph_to_json does not round-trip:\n%s\n---\n%s\n", text.c_str(),
                     again.c_str());
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::reference_manifests_host();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        const auto graph = parse_graph(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
        check_round_trip(graph);
        check_graph(graph);
        std::vector<TensorType> parents;
        for (const auto& node : graph.nodes) {
            parents.clear();
            for (auto p : node.parents) {
                const auto& parent = graph.nodes[*graph.index_of(p)];
                parents.push_back({parent.shape, parent.dtype});
            }
            parameter_specs(node, parents);
        }
        find_builtin_profile("checked_cpu").accept_graph(fuzz::reference_manifests_host(), graph);
    });
    return 0;
}
