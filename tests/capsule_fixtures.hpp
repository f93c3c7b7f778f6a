// Small builders for capsules and hosts used across the planning tests.
#pragma once

#include <string>
#include <vector>

#include "capsule/profile.hpp"
#include "capsule/registry.hpp"
#include "capsule/session.hpp"

namespace capsule::testing {

/// An aligned capsule: every claim names `op`, the vjp claim carries `vjp`; all four descriptors
/// use `evidence`.
inline KernelCapsule make_capsule(std::string name, BackendOp op, Provider provider = Provider::reference,
                                  Device device = Device::cpu,
                                  TrustLevel trust = TrustLevel::checked,
                                  VJPMode vjp = VJPMode::torchlean_tape,
                                  Evidence evidence = Evidence::runtime_guard) {
    KernelCapsule k;
    k.name = std::move(name);
    k.op = op;
    k.provider = provider;
    k.device = device;
    k.spec = "spec." + std::string(to_string(op));
    k.trust = trust;
    k.vjp_mode = vjp;
    k.runtime = RuntimeSupport::planner_only;
    k.shape = {{ClaimKind::shape_safety, op, {}, {}, {}}, "shape", evidence, {}};
    k.layout = {{ClaimKind::layout_compatibility, op, Layout::canonical_tensor, {}, {}},
                "layout", evidence, {}};
    k.value = {{ClaimKind::value_refinement, op, {}, k.spec, {}}, "value", evidence, {}};
    k.vjp = {{ClaimKind::vjp_refinement, op, {}, k.spec, vjp}, "vjp", evidence, {}};
    return k;
}

/// A one-plugin manifest holding `capsules` (device/providers taken from them).
inline PluginManifest make_manifest(std::string name, std::vector<KernelCapsule> capsules,
                                    std::int64_t priority = 0,
                                    std::vector<std::string> modes = {"default"}) {
    PluginManifest m;
    m.name = std::move(name);
    m.version = "1.0";
    m.device = capsules.empty() ? Device::cpu : capsules.front().device;
    for (const auto& k : capsules)
        if (std::find(m.providers.begin(), m.providers.end(), k.provider) == m.providers.end())
            m.providers.push_back(k.provider);
    m.registry_modes = std::move(modes);
    m.priority = priority;
    m.capsules = std::move(capsules);
    return m;
}

/// The plugin manifests shipped in the source tree (plugins/*/...capsule.json), manifests only:
/// planning is a pure function of manifests, whatever was built.
inline PluginHost shipped_host() {
    PluginSearchPath search;
    for (auto dir : {"cpu", "cuda", "libtorch", "stubs"})
        search.entries.push_back(std::filesystem::path(CAPSULE_SOURCE_DIR) / "plugins" / dir);
    PluginHostOptions manifests_only;
    manifests_only.load = LoadPolicy::manifests_only;
    return PluginHost::discover(search, manifests_only);
}

/// The host over the plugins this build produced (reference plugin loaded), discovered once.
inline const PluginHost& built_host() {
    static const PluginHost host = [] {
        PluginSearchPath search;
        search.entries.push_back(CAPSULE_PLUGIN_DIR);
        return PluginHost::discover(search);
    }();
    return host;
}

/// A session of `graph` under the built-in profile `profile` on built_host(); throws when the
/// profile's gate rejects the graph.
inline Session session_under(const std::string& profile, const Graph& graph, const ParameterMap& params,
                             const SessionOptions& options = {}) {
    const auto& p = find_builtin_profile(profile);
    auto accepted = p.accept_graph(built_host(), graph);
    if (!accepted.accepted) throw std::runtime_error(profile + " rejected the graph");
    return Session::create(p, *accepted.accepted, graph, built_host(), params, options);
}

/// Deterministic values in [-scale, scale] from a 64-bit LCG (no test depends on the exact values).
inline std::vector<double> pseudo_random(std::size_t n, std::uint64_t seed, double scale) {
    std::vector<double> v(n);
    for (auto& x : v) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x = (double(seed >> 11) / double(1ull << 53) * 2 - 1) * scale;
    }
    return v;
}

/// Every parameter of `graph` (parameter_specs of each node), filled with pseudo_random values in
/// [-scale, scale], one seed per tensor counting up from `seed`.
inline ParameterMap random_parameters(const Graph& graph, std::uint64_t seed, double scale) {
    ParameterMap params;
    for (const auto& node : graph.nodes) {
        std::vector<TensorType> parents;
        for (auto p : node.parents) {
            const auto& parent = graph.nodes[*graph.index_of(p)];
            parents.push_back({parent.shape, parent.dtype});
        }
        for (const auto& spec : parameter_specs(node, parents))
            params[spec.key] = Tensor::from_values(spec.type.dtype, spec.type.shape,
                                                   pseudo_random(std::size_t(element_count(spec.type.shape)), seed++, scale));
    }
    return params;
}

inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace capsule::testing
