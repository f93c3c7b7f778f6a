// Plan lockfiles (DESIGN.md section 10, "Plans can be locked"): an accepted plan written down
// with everything that decided what code runs (profile, per lowered group the capsule, its
// plugin's name, version, library SHA-256 and ABI, the evidence record the `verified` policy
// read, and what ONNX import folded away), so that a later run can refuse any drift with a diff.
//
// `capsule plan --lock FILE` writes one; `capsule run --lock FILE` and SessionOptions::lock check
// one: the plan made now must equal the locked one, and every library the session opened must
// still hash to the locked SHA-256 (checked after opening, so a library swapped between planning
// and loading is caught too). A mismatch is Error(gate) (exit 4) listing each difference with its
// locked and current values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "capsule/ir.hpp"
#include "capsule/profile.hpp"
#include "capsule/registry.hpp"

namespace capsule {

/// One lowered group of a locked plan.
struct PlanLockGroup {
    std::vector<std::int64_t> node_ids;
    BackendOp op = BackendOp::add;
    std::string capsule;         // e.g. `onednn.conv2d`
    std::string plugin;          // the plugin declaring the capsule
    std::string plugin_version;  // its manifest's version
    std::string abi;             // its manifest's ABI version, e.g. `1.1`
    std::string library_sha256;  // "" for a plugin without a library (a stub: never runs)
    std::string evidence_record; // EvidenceRecord::id backing it, "" when none was consulted
    bool operator==(const PlanLockGroup&) const = default;
};

/// A file the plan was made from (the model, a JSON IR graph's parameters file), by content.
struct LockedFile {
    std::string path;    // as given when locking; informational
    std::string role;    // `model` or `parameters`
    std::string sha256;  // lowercase hex
    bool operator==(const LockedFile&) const = default;
};

struct PlanLock {
    std::string profile;           // profile name
    std::string acceptance_policy; // its name, or acceptance_policy_to_json's object as JSON text
    /// Every field of the profile (profile_to_json, compact JSON): a profile file reusing a name
    /// with other settings (e.g. fpmath) is drift too.
    std::string profile_settings;
    std::vector<PlanLockGroup> groups;
    /// What import folded away (ImportedModel::folded), in model order; empty for JSON IR.
    std::vector<std::string> folded;
    /// The files the graph came from, by SHA-256 (model_files); empty for a bare op sequence.
    /// Compared by role and hash: the same model at another path is no drift.
    std::vector<LockedFile> model_files;
};

/// The model file at `model_path` (an ONNX model holds its weights) and, for a JSON IR graph that
/// names one, its parameters file, each hashed now. Raises Error(input) when one cannot be read.
std::vector<LockedFile> model_files(const std::filesystem::path& model_path, const Graph& graph);

/// The lock of `plan` (the groups of an accepted plan) under `profile`: each capsule's plugin is
/// looked up in `host`, each library hashed once. Raises Error(input) when a library cannot be
/// read, Error(planning) when a capsule belongs to no plugin of `host`.
PlanLock make_plan_lock(const BackendProfile& profile, const GraphLoweringPlan& plan,
                        const PluginHost& host, std::vector<std::string> folded = {});

/// The lockfile document (keys in a fixed, readable order).
nlohmann::ordered_json plan_lock_to_json(const PlanLock& lock);
/// Parses a lockfile. Raises Error(input) `<source>: <json path>: <reason>`.
PlanLock parse_plan_lock(std::string_view json_text, const std::filesystem::path& source);
/// Reads a lockfile; raises Error(input) when unreadable or malformed.
PlanLock load_plan_lock(const std::filesystem::path& path);
/// Writes a lockfile (indented JSON). Raises Error(input) when it cannot be written.
void write_plan_lock(const PlanLock& lock, const std::filesystem::path& path);

/// Every difference between a locked plan and the current one, one readable line each
/// (`group 3 (nodes 4, 5): capsule: locked onednn.conv2d, now reference.conv2d`); empty when
/// they agree.
std::vector<std::string> plan_lock_diff(const PlanLock& locked, const PlanLock& current);
/// Raises Error(gate) `plan differs from lockfile <source>:` followed by the diff, when there is
/// one.
void require_plan_lock(const PlanLock& locked, const PlanLock& current, const std::string& source);

}  // namespace capsule
