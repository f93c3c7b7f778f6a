#include "capsule/capsule.hpp"

namespace capsule {

using std::pair;
using std::string;
using std::string_view;

const std::array<pair<Layout, string_view>, 3> Spellings<Layout>::values{{
    {Layout::canonical_tensor, "canonical-tensor"}, {Layout::flat_row_major, "flat-row-major"},
    {Layout::libtorch_cuda_view, "libtorch-cuda-view"},
}};
const std::array<pair<ClaimKind, string_view>, 4> Spellings<ClaimKind>::values{{
    {ClaimKind::shape_safety, "shape-safety"},
    {ClaimKind::layout_compatibility, "layout-compatibility"},
    {ClaimKind::value_refinement, "value-refinement"},
    {ClaimKind::vjp_refinement, "vjp-refinement"},
}};
const std::array<pair<Evidence, string_view>, 7> Spellings<Evidence>::values{{
    {Evidence::theorem, "theorem"}, {Evidence::checker, "checker"},
    {Evidence::runtime_guard, "runtime-guard"}, {Evidence::test_suite, "test-suite"},
    {Evidence::fuzz_oracle, "fuzz-oracle"}, {Evidence::trusted_boundary, "trusted-boundary"},
    {Evidence::not_provided, "not-provided"},
}};
const std::array<pair<Disposition, string_view>, 7> Spellings<Disposition>::values{{
    {Disposition::proved, "proved"}, {Disposition::checked, "checked"},
    {Disposition::guarded, "guarded"}, {Disposition::tested, "tested"},
    {Disposition::fuzzed, "fuzzed"}, {Disposition::trusted, "trusted"},
    {Disposition::missing, "missing"},
}};
const std::array<pair<Obligation, string_view>, 4> Spellings<Obligation>::values{{
    {Obligation::shape, "shape"}, {Obligation::layout, "layout"}, {Obligation::value, "value"},
    {Obligation::vjp, "vjp"},
}};

Disposition disposition_of(Evidence evidence) {
    switch (evidence) {
        case Evidence::theorem: return Disposition::proved;
        case Evidence::checker: return Disposition::checked;
        case Evidence::runtime_guard: return Disposition::guarded;
        case Evidence::test_suite: return Disposition::tested;
        case Evidence::fuzz_oracle: return Disposition::fuzzed;
        case Evidence::trusted_boundary: return Disposition::trusted;
        case Evidence::not_provided: return Disposition::missing;
    }
    return Disposition::missing;
}

ClaimKind claim_kind_for(Obligation obligation) {
    switch (obligation) {
        case Obligation::shape: return ClaimKind::shape_safety;
        case Obligation::layout: return ClaimKind::layout_compatibility;
        case Obligation::value: return ClaimKind::value_refinement;
        case Obligation::vjp: return ClaimKind::vjp_refinement;
    }
    return ClaimKind::shape_safety;
}

string to_string(const ContractClaim& claim) {
    string out = string(to_string(claim.kind)) + "(" + string(to_string(claim.op));
    if (claim.layout) out += ", " + string(to_string(*claim.layout));
    if (claim.spec) out += ", " + *claim.spec;
    if (claim.vjp_mode) out += ", " + string(to_string(*claim.vjp_mode));
    return out + ")";
}

const ContractDescriptor& KernelCapsule::contract(Obligation o) const {
    switch (o) {
        case Obligation::shape: return shape;
        case Obligation::layout: return layout;
        case Obligation::value: return value;
        case Obligation::vjp: return vjp;
    }
    return shape;
}

std::optional<string> misalignment(const KernelCapsule& capsule, Obligation field) {
    const ContractClaim& claim = capsule.contract(field).claim;
    const string where = string(to_string(field)) + " claim " + to_string(claim);
    if (claim.kind != claim_kind_for(field))
        return where + " is not a " + string(to_string(claim_kind_for(field))) + " claim";
    if (claim.op != capsule.op)
        return where + " names op " + string(to_string(claim.op)) + ", capsule op is " +
               string(to_string(capsule.op));
    if (field == Obligation::vjp && claim.vjp_mode != capsule.vjp_mode)
        return where + " does not carry the capsule's VJP mode " +
               string(to_string(capsule.vjp_mode));
    return std::nullopt;
}

bool aligned(const KernelCapsule& capsule) {
    for (auto o : all_values<Obligation>())
        if (misalignment(capsule, o)) return false;
    return true;
}

bool vjp_compatible(VJPMode config_mode, const KernelCapsule& capsule) {
    if (config_mode == VJPMode::none || op_needs_no_vjp(capsule.op)) return true;
    switch (config_mode) {
        case VJPMode::torchlean_tape:
            return capsule.vjp_mode == VJPMode::torchlean_tape ||
                   capsule.vjp_mode == VJPMode::backend_vjp;
        case VJPMode::backend_vjp: return capsule.vjp_mode == VJPMode::backend_vjp;
        case VJPMode::external_autograd: return capsule.vjp_mode == VJPMode::external_autograd;
        case VJPMode::none: return true;
    }
    return false;
}

std::vector<string> admissibility_refusals(const ExecutionConfig& config,
                                           const KernelCapsule& capsule) {
    std::vector<string> reasons;
    if (!capsule.supports_forward) reasons.push_back("forward unsupported");
    for (auto o : all_values<Obligation>())
        if (auto why = misalignment(capsule, o)) reasons.push_back("misaligned contracts: " + *why);
    if (!trust_policy_admits(config.trust_policy, capsule.trust))
        reasons.push_back("trust policy " + string(to_string(config.trust_policy)) +
                          " refuses trust level " + string(to_string(capsule.trust)));
    if (!config.backend.admits(capsule.provider))
        reasons.push_back("only: preference " + to_string(config.backend) + " refuses provider " +
                          string(to_string(capsule.provider)));
    if (capsule.device != config.device)
        reasons.push_back("wrong device (capsule " + string(to_string(capsule.device)) +
                          ", config " + string(to_string(config.device)) + ")");
    if (!vjp_compatible(config.vjp_mode, capsule))
        reasons.push_back("VJP mode " + string(to_string(capsule.vjp_mode)) +
                          " is not compatible with config VJP mode " +
                          string(to_string(config.vjp_mode)));
    return reasons;
}

}  // namespace capsule
