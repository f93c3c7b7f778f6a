// `capsule plugins`, `capsule capsules`, `capsule profiles`: listings, text or --json.
#include <chrono>
#include <map>
#include <iostream>

#include <nlohmann/json.hpp>

#include "context.hpp"

namespace capsule::cli {

using nlohmann::json;
using std::string;

namespace {

json plugin_json(const PluginRecord& r) {
    json j{{"name", r.name},
           {"manifest", r.manifest_path.string()},
           {"status", to_string(r.status)},
           {"failure", r.status == PluginStatus::failed ? json(r.failure) : json(nullptr)}};
    if (r.manifest) {
        const auto& m = *r.manifest;
        j["version"] = m.version;
        j["abi_version"] = to_string(m.abi);
        j["library"] = m.library ? json(*m.library) : json(nullptr);
        j["device"] = to_string(m.device);
        j["registry_modes"] = m.registry_modes;
        j["priority"] = m.priority;
        j["capsules"] = m.capsules.size();
    }
    j["library_path"] = r.library_path ? json(r.library_path->string()) : json(nullptr);
    j["sha256"] = r.sha256.empty() ? json(nullptr) : json(r.sha256);
    j["probe"] = r.probe ? json{{"usable", r.probe->usable},
                                {"reason", r.probe->usable ? json(nullptr) : json(r.probe->reason)}}
                         : json(nullptr);
    return j;
}

json verification_json(const CapsuleVerification& v) {
    return json{{"status", to_string(v.status)},
                {"detail", v.detail.empty() ? json(nullptr) : json(v.detail)},
                {"record", v.record_id.empty() ? json(nullptr) : json(v.record_id)}};
}

/// Per-capsule verification of a plugin's capsules (empty for a failed plugin).
std::vector<std::pair<string, CapsuleVerification>> verifications(const PluginHost& host,
                                                                 const PluginRecord& r) {
    std::vector<std::pair<string, CapsuleVerification>> out;
    if (r.status == PluginStatus::failed || !r.manifest) return out;
    for (const auto& k : r.manifest->capsules) out.emplace_back(k.name, host.verification(k));
    return out;
}

string dispositions(const KernelCapsule& k) {
    string out;
    for (auto o : all_values<Obligation>())
        out += (out.empty() ? "" : ",") + string(to_string(o)) + "=" +
               string(to_string(disposition_of(k.contract(o).evidence)));
    return out;
}

}  // namespace

Command add_plugins_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand(
        "plugins",
        "list every discovered plugin and its status (available, loaded, stub, failed); exits 1 "
        "when any plugin failed");
    struct Args { bool json = false; bool hashes = false; bool probe = false; double timeout = 10.0; };
    auto args = std::make_shared<Args>();
    sub->add_flag("--json", args->json, "print JSON");
    sub->add_flag("--hashes", args->hashes,
                  "also read each library file and show its SHA-256 (implied by --probe); without "
                  "it the listing reads manifests only");
    sub->add_flag("--probe", args->probe,
                  "open, check, initialise and probe each library in a child process; a crash or "
                  "hang becomes that plugin's status");
    sub->add_option("--probe-timeout", args->timeout, "seconds each --probe child may take")
        ->check(CLI::Range(0.1, 3600.0))
        ->capture_default_str();
    return [&options, args]() {
        Context ctx(options);
        // Hashing reads every library (3.5 MB here): it triples this command's time, so it is
        // asked for; it runs on the discovery threads, beside the manifests.
        if (args->hashes || args->probe) ctx.hash_libraries();
        std::vector<PluginRecord> records = ctx.host().plugins();
        if (args->probe)
            for (auto& r : records)
                r = ctx.host().probe_isolated(
                    r, std::chrono::milliseconds(static_cast<long long>(args->timeout * 1000)));
        bool any_failed = false;
        for (const auto& r : records) any_failed = any_failed || r.status == PluginStatus::failed;
        std::vector<std::vector<std::pair<string, CapsuleVerification>>> verified;
        for (const auto& r : records) verified.push_back(verifications(ctx.host(), r));
        if (args->json) {
            json out = json::array();
            for (std::size_t i = 0; i < records.size(); ++i) {
                json j = plugin_json(records[i]);
                json per_capsule = json::object();
                for (const auto& [name, v] : verified[i]) per_capsule[name] = to_string(v.status);
                j["verification"] = per_capsule;
                out.push_back(std::move(j));
            }
            std::cout << out.dump(2) << "\n";
            return int(any_failed ? kOther : kOk);
        }
        for (std::size_t i = 0; i < records.size(); ++i) {
            const auto& r = records[i];
            std::cout << r.name;
            if (r.manifest)
                std::cout << " " << r.manifest->version << " abi=" << to_string(r.manifest->abi)
                          << " device=" << to_string(r.manifest->device) << " library="
                          << r.manifest->library.value_or("none")
                          << " capsules=" << r.manifest->capsules.size();
            std::cout << " status=" << r.status_text() << "\n    manifest "
                      << r.manifest_path.string() << "\n";
            if (r.library_path) std::cout << "    library " << r.library_path->string() << "\n";
            if (!r.sha256.empty()) std::cout << "    sha256 " << r.sha256 << "\n";
            if (r.probe)
                std::cout << "    probe " << (r.probe->usable ? "usable" : "unusable: " + r.probe->reason)
                          << "\n";
            if (r.library_path && !verified[i].empty()) {
                std::map<VerificationStatus, int> counts;
                string record, why;
                for (const auto& [name, v] : verified[i]) {
                    ++counts[v.status];
                    if (record.empty()) record = v.record_id;
                    if (why.empty()) why = v.detail;
                }
                std::cout << "    evidence " << counts[VerificationStatus::verified] << " verified, "
                          << counts[VerificationStatus::unverified] << " unverified, "
                          << counts[VerificationStatus::failed] << " failed"
                          << (record.empty() ? " (" + why + ")" : " (record " + record + ")") << "\n";
            }
        }
        if (records.empty()) std::cout << "no plugins found\n";
        if (!args->probe && !records.empty())
            std::cout << "(libraries are opened only when needed; --probe opens and probes each in a "
                         "child process)\n";
        return int(any_failed ? kOther : kOk);
    };
}

Command add_capsules_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("capsules", "list the capsules of a profile's registry");
    struct Args { string profile = "checked_cpu"; bool json = false; };
    auto args = std::make_shared<Args>();
    sub->add_option("--profile", args->profile, "profile whose registry mode to list")
        ->capture_default_str();
    sub->add_flag("--json", args->json, "print JSON");
    return [&options, args]() {
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        const auto registry = profile.registry(ctx.host());
        if (args->json) {
            json out = json::array();
            for (std::size_t i = 0; i < registry.capsules.size(); ++i) {
                json c = capsule_to_json(*registry.capsules[i]);
                c["plugin"] = registry.plugin_of[i];
                c["verification"] = verification_json(ctx.host().verification(*registry.capsules[i]));
                out.push_back(c);
            }
            std::cout << out.dump(2) << "\n";
            return int(kOk);
        }
        std::cout << "registry mode " << registry.mode << " (profile " << profile.name << "): "
                  << registry.capsules.size() << " capsule(s)\n";
        for (const auto& k : registry.capsules)
            std::cout << "  " << k->name << " op=" << to_string(k->op)
                      << " provider=" << to_string(k->provider)
                      << " device=" << to_string(k->device) << " trust=" << to_string(k->trust)
                      << " vjp=" << to_string(k->vjp_mode)
                      << " runtime=" << to_string(k->runtime) << " " << dispositions(*k)
                      << " evidence=" << to_string(ctx.host().verification(*k).status) << "\n";
        return int(kOk);
    };
}

Command add_profiles_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("profiles", "list every profile and its fields");
    auto as_json = std::make_shared<bool>(false);
    sub->add_flag("--json", *as_json, "print JSON");
    return [&options, as_json]() {
        Context ctx(options);
        json out = json::array();
        for (const auto& p : ctx.profiles()) out.push_back(profile_to_json(p));
        if (*as_json) {
            std::cout << out.dump(2) << "\n";
            return int(kOk);
        }
        for (const auto& p : ctx.profiles()) {
            std::cout << p.name << "\n"
                      << "  config: device=" << to_string(p.config.device)
                      << " backend=" << to_string(p.config.backend)
                      << " trust=" << to_string(p.config.trust_policy)
                      << " vjp=" << to_string(p.config.vjp_mode)
                      << " fpmath=" << to_string(p.config.fpmath) << "\n"
                      << "  target: " << profile_to_json(p)["target"].dump() << "\n"
                      << "  registry=" << p.registry_mode
                      << " lowering=" << to_string(p.lowering_mode)
                      << " acceptance=" << acceptance_policy_to_json(p.acceptance_policy).dump()
                      << "\n";
        }
        return int(kOk);
    };
}

}  // namespace capsule::cli
