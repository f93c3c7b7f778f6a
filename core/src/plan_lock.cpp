#include "capsule/plan_lock.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "json_reader.hpp"
#include "plugin_loader.hpp"

namespace capsule {

using detail::JsonCursor;
using nlohmann::json;

PlanLock make_plan_lock(const BackendProfile& profile, const GraphLoweringPlan& plan,
                        const PluginHost& host, std::vector<std::string> folded) {
    PlanLock lock;
    lock.profile = profile.name;
    const json policy = acceptance_policy_to_json(profile.acceptance_policy);
    lock.acceptance_policy = policy.is_string() ? policy.get<std::string>() : policy.dump();
    lock.profile_settings = profile_to_json(profile).dump();
    lock.folded = std::move(folded);
    std::map<std::string, std::string> hashes;  // plugin → library hash, each hashed once
    for (const auto& g : plan.groups) {
        const PluginRecord* record = host.plugin_of(g.capsule->name);
        if (!record || !record->manifest)
            throw Error(ErrorCode::planning, "capsule " + g.capsule->name + " belongs to no discovered plugin");
        auto [it, fresh] = hashes.try_emplace(record->name);
        if (fresh) it->second = host.library_sha256(*record);
        PlanLockGroup entry{g.node_ids, g.op, g.capsule->name, record->name, record->manifest->version,
                            to_string(record->manifest->abi), it->second, ""};
        if (profile.acceptance_policy.require_verified_tests)
            entry.evidence_record = host.verification(*g.capsule).record_id;
        lock.groups.push_back(std::move(entry));
    }
    return lock;
}

std::vector<LockedFile> model_files(const std::filesystem::path& model_path, const Graph& graph) {
    std::vector<LockedFile> out{{model_path.string(), "model", detail::sha256_file(model_path)}};
    if (graph.parameters) {
        std::filesystem::path parameters(*graph.parameters);
        if (parameters.is_relative()) parameters = model_path.parent_path() / parameters;
        out.push_back({parameters.string(), "parameters", detail::sha256_file(parameters)});
    }
    return out;
}

nlohmann::ordered_json plan_lock_to_json(const PlanLock& lock) {
    using ordered = nlohmann::ordered_json;
    ordered groups = ordered::array();
    for (const auto& g : lock.groups)
        groups.push_back({{"node_ids", g.node_ids},
                          {"op", to_string(g.op)},
                          {"capsule", g.capsule},
                          {"plugin", g.plugin},
                          {"plugin_version", g.plugin_version},
                          {"abi", g.abi},
                          {"library_sha256", g.library_sha256.empty() ? ordered(nullptr) : ordered(g.library_sha256)},
                          {"evidence_record", g.evidence_record.empty() ? ordered(nullptr) : ordered(g.evidence_record)}});
    ordered files = ordered::array();
    for (const auto& f : lock.model_files)
        files.push_back({{"path", f.path}, {"role", f.role}, {"sha256", f.sha256}});
    return ordered{{"format", "capsule-plan-lock"},
                {"version", 1},
                {"profile", lock.profile},
                {"acceptance_policy", lock.acceptance_policy},
                {"profile_settings", ordered::parse(lock.profile_settings)},
                {"groups", groups},
                {"folded", lock.folded},
                {"model_files", files}};
}

namespace {
std::string optional_string(const JsonCursor& c) { return c.is_null() ? "" : c.nonempty_string(); }
}  // namespace

PlanLock parse_plan_lock(std::string_view text, const std::filesystem::path& source) {
    const std::string src = source.empty() ? "plan lock" : source.string();
    const detail::JsonDocument doc(text, src);
    const JsonCursor root = doc.root();
    root.object({"format", "version", "profile", "acceptance_policy", "profile_settings", "groups", "folded",
                 "model_files"});
    if (root.at("format").string() != "capsule-plan-lock") root.at("format").fail("expected \"capsule-plan-lock\"");
    if (root.at("version").integer() != 1) root.at("version").fail("unsupported version (this host reads 1)");
    PlanLock lock;
    lock.profile = root.at("profile").nonempty_string();
    lock.acceptance_policy = root.at("acceptance_policy").nonempty_string();
    if (!root.at("profile_settings").is_object()) root.at("profile_settings").fail("expected an object");
    lock.profile_settings = root.at("profile_settings").dump();
    root.at("groups").each([&](const JsonCursor& g, std::size_t) {
        g.object({"node_ids", "op", "capsule", "plugin", "plugin_version", "abi", "library_sha256",
                  "evidence_record"});
        PlanLockGroup entry;
        auto ids = g.at("node_ids");
        ids.each([&](const JsonCursor& id, std::size_t) { entry.node_ids.push_back(id.integer()); });
        if (entry.node_ids.empty()) ids.fail("a group has at least one node");
        entry.op = g.at("op").spelling<BackendOp>();
        entry.capsule = g.at("capsule").nonempty_string();
        entry.plugin = g.at("plugin").nonempty_string();
        entry.plugin_version = g.at("plugin_version").nonempty_string();
        entry.abi = g.at("abi").nonempty_string();
        entry.library_sha256 = optional_string(g.at("library_sha256"));
        entry.evidence_record = optional_string(g.at("evidence_record"));
        lock.groups.push_back(std::move(entry));
    });
    root.at("folded").each([&](const JsonCursor& f, std::size_t) { lock.folded.push_back(f.string()); });
    root.at("model_files").each([&](const JsonCursor& f, std::size_t) {
        f.object({"path", "role", "sha256"});
        LockedFile file{f.at("path").string(), f.at("role").nonempty_string(), f.at("sha256").string()};
        if (file.role != "model" && file.role != "parameters") f.at("role").fail("expected model or parameters");
        if (file.sha256.size() != 64 || file.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
            f.at("sha256").fail("expected 64 lowercase hexadecimal digits");
        lock.model_files.push_back(std::move(file));
    });
    return lock;
}

PlanLock load_plan_lock(const std::filesystem::path& path) {
    return parse_plan_lock(detail::read_text_file(path, "plan lock"), path);
}

void write_plan_lock(const PlanLock& lock, const std::filesystem::path& path) {
    // Through a temporary file and a rename: a failed write never leaves half a lockfile.
    const std::filesystem::path temp = path.string() + ".tmp";
    {
        std::ofstream out(temp, std::ios::trunc);
        out << plan_lock_to_json(lock).dump(2) << "\n";
        out.flush();
        if (!out) {
            const std::string why = std::strerror(errno);
            std::error_code ec;
            std::filesystem::remove(temp, ec);
            throw Error(ErrorCode::input, "cannot write plan lock " + path.string() + ": " + why);
        }
    }
    std::error_code ec;
    std::filesystem::rename(temp, path, ec);
    if (ec) {
        std::filesystem::remove(temp, ec);
        throw Error(ErrorCode::input, "cannot write plan lock " + path.string() + ": " + ec.message());
    }
}

namespace {
std::string ids_text(const std::vector<std::int64_t>& ids) {
    std::string out;
    for (auto id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
    return out;
}
std::string shown(const std::string& v) { return v.empty() ? "(none)" : v; }
}  // namespace

std::vector<std::string> plan_lock_diff(const PlanLock& locked, const PlanLock& current) {
    std::vector<std::string> out;
    auto field = [&](const std::string& where, const std::string& name, const std::string& a,
                     const std::string& b) {
        if (a != b) out.push_back(where + name + ": locked " + shown(a) + ", now " + shown(b));
    };
    field("", "profile", locked.profile, current.profile);
    field("", "acceptance policy", locked.acceptance_policy, current.acceptance_policy);
    field("", "profile settings", locked.profile_settings, current.profile_settings);
    if (locked.groups.size() != current.groups.size())
        out.push_back("groups: locked " + std::to_string(locked.groups.size()) + ", now " +
                      std::to_string(current.groups.size()));
    const std::size_t n = std::min(locked.groups.size(), current.groups.size());
    for (std::size_t i = 0; i < n; ++i) {
        const auto& a = locked.groups[i];
        const auto& b = current.groups[i];
        const std::string where = "group " + std::to_string(i) + " (nodes " + ids_text(a.node_ids) + "): ";
        field(where, "nodes", ids_text(a.node_ids), ids_text(b.node_ids));
        field(where, "op", std::string(to_string(a.op)), std::string(to_string(b.op)));
        field(where, "capsule", a.capsule, b.capsule);
        field(where, "plugin", a.plugin, b.plugin);
        field(where, "plugin version", a.plugin_version, b.plugin_version);
        field(where, "ABI", a.abi, b.abi);
        field(where, "library sha256", a.library_sha256, b.library_sha256);
        field(where, "evidence record", a.evidence_record, b.evidence_record);
    }
    auto file_of = [](const PlanLock& lock, const std::string& role) -> std::string {
        for (const auto& f : lock.model_files)
            if (f.role == role) return f.sha256;
        return "";
    };
    for (const char* role : {"model", "parameters"})
        field("", std::string(role) + " file sha256", file_of(locked, role), file_of(current, role));
    if (locked.folded != current.folded) {
        for (const auto& f : locked.folded)
            if (std::find(current.folded.begin(), current.folded.end(), f) == current.folded.end())
                out.push_back("folded at import when locked, not now: " + f);
        for (const auto& f : current.folded)
            if (std::find(locked.folded.begin(), locked.folded.end(), f) == locked.folded.end())
                out.push_back("folded at import now, not when locked: " + f);
        if (out.empty() || out.back().rfind("folded", 0) != 0) out.push_back("folded: same nodes in another order");
    }
    return out;
}

void require_plan_lock(const PlanLock& locked, const PlanLock& current, const std::string& source) {
    const auto diff = plan_lock_diff(locked, current);
    if (diff.empty()) return;
    std::string message = "plan differs from lockfile " + source + ":";
    for (const auto& line : diff) message += "\n  " + line;
    throw Error(ErrorCode::gate, message);
}

}  // namespace capsule
