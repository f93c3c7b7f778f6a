// Backend profiles (DESIGN.md section 2): one named object bundling target, execution config,
// registry mode, lowering mode and acceptance policy, and the pipeline operations under it.
//
// Built-in profiles are defined here and mirrored as JSON in profiles/ (a test keeps the two
// equal). Deployments load their own with profile_from_json / load_profile_file.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "capsule/acceptance.hpp"

namespace capsule {

struct BackendProfile {
    std::string name;
    ExecutionConfig config;
    Target target;
    std::string registry_mode = "default";
    LoweringMode lowering_mode = LoweringMode::coalesced;
    AcceptancePolicy acceptance_policy = AcceptancePolicy::checked_runtime();

    /// Planner capabilities declared by the target; execution probes separately.
    Availability availability() const { return target.availability(); }
    /// The capsule registry of this profile's registry mode.
    CapsuleRegistry registry(const RegistrySource& source) const;
    /// Plans a bare op sequence. Raises Error(planning).
    ExecutionPlan plan_ops(const RegistrySource& source, std::span<const BackendOp> ops) const;
    /// Plans, lowers and gates a bare op sequence. Raises Error(planning).
    AcceptedPlanResult gate_ops(const RegistrySource& source, std::span<const BackendOp> ops) const;
    /// Checks and plans a graph's runtime nodes. Raises Error(input) (malformed graph) or
    /// Error(planning).
    GraphExecutionPlan plan_graph(const RegistrySource& source, const Graph& graph) const;
    /// Lowers under this profile's lowering mode.
    GraphLoweringPlan lower(const GraphExecutionPlan& plan) const;
    /// Plans, lowers and gates a graph. Raises Error(input) or Error(planning).
    AcceptedPlanResult accept_graph(const RegistrySource& source, const Graph& graph) const;

    bool operator==(const BackendProfile&) const = default;

    // Named profiles.
    static BackendProfile checked_cpu();
    static BackendProfile checked_cpu_target(OperatingSystem os,
                                             Architecture arch = Architecture::unknown);
    static BackendProfile checked_cuda();
    static BackendProfile libtorch_forward_cuda();
    static BackendProfile libtorch_autograd_cuda();
    static BackendProfile libtorch_forward_cpu();
    static BackendProfile libtorch_autograd_cpu();
    static BackendProfile onednn_cpu();
    static BackendProfile onednn_cpu_bf16();
    /// checked_cpu under the `verified` acceptance policy.
    static BackendProfile verified_cpu();
    /// A named target whose capsules are not implemented yet (default acceptance strict).
    static BackendProfile future(std::string name, Device device, Target target,
                                 BackendPreference backend = BackendPreference::automatic(),
                                 TrustPolicy trust = TrustPolicy::checked,
                                 VJPMode vjp = VJPMode::torchlean_tape,
                                 AcceptancePolicy acceptance = AcceptancePolicy::strict());
};

/// Every built-in profile, in the order of DESIGN.md's table.
const std::vector<BackendProfile>& builtin_profiles();
/// The built-in profile with this name; raises Error(input) listing every name.
const BackendProfile& find_builtin_profile(std::string_view name);

/// Reads a profile document (DESIGN.md section 7). `base` names a built-in profile whose fields
/// are overridden; without it every field is required. Unknown keys and bad spellings raise
/// Error(input) `<source>: <json path>: <reason>`.
BackendProfile profile_from_json(std::string_view json_text, const std::filesystem::path& source);
BackendProfile load_profile_file(const std::filesystem::path& path);
/// The full JSON form of a profile (no base), as in profiles/*.json.
nlohmann::json profile_to_json(const BackendProfile& profile);
/// JSON of an acceptance policy: its name when named, else the object of five booleans.
nlohmann::json acceptance_policy_to_json(const AcceptancePolicy& policy);

}  // namespace capsule
