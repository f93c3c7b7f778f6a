#include "capsule/evidence.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>


#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "json_reader.hpp"
#include "plugin_loader.hpp"
#include "sha256.hpp"

namespace capsule {

using detail::JsonCursor;
using nlohmann::json;
namespace fs = std::filesystem;

std::string CapsuleEvidence::status() const {
    if (forward_cases == 0) return "no cases";
    return passed() ? "passed" : "failed";
}

namespace {
/// A non-finite error (a NaN or infinite output where a finite one was expected) has no JSON
/// number: it is written as null and read back as infinity.
json error_number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }


json capsules_json(const EvidenceRecord& r);
}  // namespace

std::string EvidenceRecord::id() const {
    // The results, not when or where they were taken: verifying the same library again with the
    // same outcome keeps the id (and the plan lockfiles that name it) valid.
    const std::string results = capsules_json(*this).dump() + "|" + version + "|" + abi + "|" + device;
    return plugin + "@" + library_sha256.substr(0, 12) + "#" + detail::sha256_hex(results).substr(0, 12);
}

const CapsuleEvidence* EvidenceRecord::find(std::string_view capsule) const {
    for (const auto& c : capsules)
        if (c.capsule == capsule) return &c;
    return nullptr;
}

bool EvidenceRecord::passed() const {
    for (const auto& c : capsules)
        if (c.status() == "failed") return false;
    return true;
}

const std::array<std::pair<VerificationStatus, std::string_view>, 3>
    Spellings<VerificationStatus>::values{{
        {VerificationStatus::verified, "verified"},
        {VerificationStatus::unverified, "unverified"},
        {VerificationStatus::failed, "failed"},
    }};

namespace {
json capsules_json(const EvidenceRecord& r) {
    json capsules = json::array();
    for (const auto& c : r.capsules) {
        json unsupported = json::array();
        for (const auto& [name, reason] : c.unsupported)
            unsupported.push_back({{"case", name}, {"reason", reason}});
        capsules.push_back({{"capsule", c.capsule},
                            {"op", to_string(c.op)},
                            {"status", c.status()},
                            {"forward_cases", c.forward_cases},
                            {"forward_passed", c.forward_passed},
                            {"gradient_cases", c.gradient_cases},
                            {"gradient_passed", c.gradient_passed},
                            {"max_abs_error", error_number(c.max_abs_error)},
                            {"max_error_ratio", error_number(c.max_error_ratio)},
                            {"rtol", c.rtol},
                            {"atol", c.atol},
                            {"unsupported", unsupported},
                            {"failures", c.failures}});
    }
    return capsules;
}
}  // namespace

json evidence_record_to_json(const EvidenceRecord& r) {
    const json capsules = capsules_json(r);
    return json{{"format", "capsule-evidence"},
                {"version", 1},
                {"plugin", r.plugin},
                {"plugin_version", r.version},
                {"abi", r.abi},
                {"library", r.library},
                {"library_sha256", r.library_sha256},
                {"device", r.device},
                {"driver", r.driver},
                {"date", r.date},
                {"host_version", r.host_version},
                {"status", r.passed() ? "passed" : "failed"},
                {"capsules", capsules}};
}

namespace {

double non_negative(const JsonCursor& c) {
    const double v = c.number();
    if (v < 0) c.fail("must not be negative");
    return v;
}

/// An error statistic: a non-negative number, or null for an infinite or NaN error.
double error_statistic(const JsonCursor& c) {
    return c.is_null() ? INFINITY : non_negative(c);
}

int count(const JsonCursor& c) {
    const auto n = c.integer();
    if (n < 0 || n > 1'000'000) c.fail("expected a case count between 0 and 1000000");
    return static_cast<int>(n);
}

CapsuleEvidence read_capsule_evidence(const JsonCursor& c) {
    c.object({"capsule", "op", "status", "forward_cases", "forward_passed", "gradient_cases",
              "gradient_passed", "max_abs_error", "max_error_ratio", "rtol", "atol", "unsupported",
              "failures"});
    CapsuleEvidence e;
    e.capsule = c.at("capsule").nonempty_string();
    e.op = c.at("op").spelling<BackendOp>();
    e.forward_cases = count(c.at("forward_cases"));
    e.forward_passed = count(c.at("forward_passed"));
    e.gradient_cases = count(c.at("gradient_cases"));
    e.gradient_passed = count(c.at("gradient_passed"));
    if (e.forward_passed > e.forward_cases || e.gradient_passed > e.gradient_cases)
        c.fail("more cases passed than ran");
    e.max_abs_error = error_statistic(c.at("max_abs_error"));
    e.max_error_ratio = error_statistic(c.at("max_error_ratio"));
    e.rtol = non_negative(c.at("rtol"));
    e.atol = non_negative(c.at("atol"));
    if (e.rtol > 1 || e.atol > 1) c.fail("tolerances above 1 (rtol " + std::to_string(e.rtol) + ", atol " +
                                         std::to_string(e.atol) + ") verify nothing");
    c.at("unsupported").each([&](const JsonCursor& u, std::size_t) {
        u.object({"case", "reason"});
        // One statement each: the case's error is reported before the reason's, on every compiler
        // (function arguments are evaluated in an unspecified order).
        auto case_name = u.at("case").nonempty_string();
        auto reason = u.at("reason").nonempty_string();
        e.unsupported.emplace_back(std::move(case_name), std::move(reason));
    });
    c.at("failures").each([&](const JsonCursor& f, std::size_t) { e.failures.push_back(f.string()); });
    // The status is derived; a record whose status disagrees with its counts was edited.
    if (c.at("status").string() != e.status())
        c.at("status").fail("says '" + c.at("status").string() + "' but the counts give '" +
                            e.status() + "'");
    if (e.passed() && !e.failures.empty()) c.at("failures").fail("lists failures of a capsule that passed");
    if (e.passed() && e.max_error_ratio > 1)
        c.at("max_error_ratio").fail("an error above the tolerance cannot pass");
    return e;
}

bool is_sha256_hex(std::string_view s) {
    if (s.size() != 64) return false;
    for (char ch : s)
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
    return true;
}

}  // namespace

EvidenceRecord parse_evidence_record(std::string_view json_text, const fs::path& source) {
    const std::string src = source.empty() ? "evidence record" : source.string();
    const detail::JsonDocument doc(json_text, src);
    const JsonCursor root = doc.root();
    root.object({"format", "version", "plugin", "plugin_version", "abi", "library",
                 "library_sha256", "device", "driver", "date", "host_version", "status",
                 "capsules"});
    if (root.at("format").string() != "capsule-evidence")
        root.at("format").fail("expected \"capsule-evidence\"");
    if (root.at("version").integer() != 1) root.at("version").fail("unsupported version (this host reads 1)");
    EvidenceRecord r;
    r.plugin = root.at("plugin").nonempty_string();
    r.version = root.at("plugin_version").nonempty_string();
    r.abi = root.at("abi").nonempty_string();
    r.library = root.at("library").nonempty_string();
    r.library_sha256 = root.at("library_sha256").string();
    if (!is_sha256_hex(r.library_sha256))
        root.at("library_sha256").fail("expected 64 lowercase hexadecimal digits");
    r.device = root.at("device").nonempty_string();
    r.driver = root.at("driver").string();
    r.date = root.at("date").nonempty_string();
    r.host_version = root.at("host_version").nonempty_string();
    std::set<std::string> seen;
    root.at("capsules").each([&](const JsonCursor& c, std::size_t) {
        r.capsules.push_back(read_capsule_evidence(c));
        if (!seen.insert(r.capsules.back().capsule).second)
            c.at("capsule").fail("capsule " + r.capsules.back().capsule + " is listed twice");
    });
    if (root.at("status").string() != (r.passed() ? "passed" : "failed"))
        root.at("status").fail("disagrees with the capsules' results");
    return r;
}

std::string evidence_file_name(std::string_view plugin, std::string_view library_sha256) {
    return std::string(plugin) + "-" + std::string(library_sha256) + ".evidence.json";
}

fs::path user_evidence_dir() {
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
        return fs::path(xdg) / "capsule" / "evidence";
    if (const char* home = std::getenv("HOME"); home && *home == '/')
        return fs::path(home) / ".cache" / "capsule" / "evidence";
    return {};
}

std::vector<fs::path> default_evidence_dirs(const fs::path& manifest_path) {
    std::vector<fs::path> dirs{manifest_path.parent_path() / "evidence"};
    if (auto user = user_evidence_dir(); !user.empty()) dirs.push_back(user);
    return dirs;
}

namespace {
/// Creates `dir` and its missing parents as 0755, whatever the umask: a record in a directory
/// others can write would be refused when read (and could be forged).
void create_private_directories(const fs::path& dir) {
    std::vector<fs::path> missing;
    std::error_code ec;
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
        missing.push_back(p);
        if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST)
            throw Error(ErrorCode::other, "cannot create evidence directory " + it->string() + ": " + std::strerror(errno));
        ::chmod(it->c_str(), 0755);
    }
}
}  // namespace

fs::path prepare_evidence_dir(const fs::path& dir) {
    if (dir.empty()) throw Error(ErrorCode::input, "the evidence directory must not be empty");
    // Nothing is created where others could replace it: the nearest existing directory is judged
    // as an ancestor of the records (a sticky /tmp is fine, a world-writable plain directory not).
    fs::path existing = fs::absolute(dir);
    std::error_code ec;
    while (!existing.empty() && !fs::exists(existing, ec) && existing != existing.parent_path())
        existing = existing.parent_path();
    if (existing != fs::absolute(dir))
        if (auto why = detail::untrusted_path_reason(existing, "evidence directory", 2); !why.empty())
            throw Error(ErrorCode::other, "refusing to create evidence directory " + dir.string() + ": " + why);
    create_private_directories(dir);
    // Judged as the records in it will be: the directory holds them, its parent is an ancestor
    // (where a sticky, world-writable /tmp is fine).
    if (auto why = detail::untrusted_path_reason(dir, "evidence directory", 1); !why.empty())
        throw Error(ErrorCode::other, "refusing to write evidence records into " + dir.string() + ": " + why);
    if (::access(dir.c_str(), W_OK) != 0)
        throw Error(ErrorCode::other, "cannot write evidence records into " + dir.string() + ": " + std::strerror(errno));
    return dir;
}

fs::path write_evidence_record(const EvidenceRecord& record, const fs::path& dir) {
    prepare_evidence_dir(dir);
    const fs::path target = dir / evidence_file_name(record.plugin, record.library_sha256);
    const fs::path temp = dir / ("." + target.filename().string() + "." + std::to_string(::getpid()));
    const std::string text = evidence_record_to_json(record).dump(2) + "\n";
    // Never through a planted link, never over an existing file; readable by all, writable by us.
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        throw Error(ErrorCode::other, "cannot write evidence record " + target.string() + " (temporary file " +
                                          temp.filename().string() + "): " + std::strerror(errno));
    ::fchmod(fd, 0644);
    bool ok = true;
    for (std::size_t done = 0; ok && done < text.size();) {
        const auto n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) done += static_cast<std::size_t>(n);
    }
    const int saved = errno;
    ok = ::close(fd) == 0 && ok;
    if (!ok || ::rename(temp.c_str(), target.c_str()) != 0) {
        const std::string why = std::strerror(ok ? errno : saved);
        ::unlink(temp.c_str());
        throw Error(ErrorCode::other, "cannot write evidence record " + target.string() + ": " + why);
    }
    return target;
}

std::optional<EvidenceRecord> find_evidence_record(const std::vector<fs::path>& dirs,
                                                   std::string_view plugin,
                                                   std::string_view library_sha256,
                                                   std::string& problem) {
    const std::string name = evidence_file_name(plugin, library_sha256);
    std::vector<std::string> looked;
    for (const auto& dir : dirs) {
        const fs::path file = dir / name;
        std::error_code ec;
        if (!fs::is_regular_file(file, ec)) {
            looked.push_back(dir.string());
            continue;
        }
        // A record another user could have written is no evidence (trust on disk).
        if (auto why = detail::untrusted_path_reason(file, "evidence record"); !why.empty()) {
            problem = why;
            return std::nullopt;
        }
        try {
            auto record = parse_evidence_record(detail::read_text_file(file, "evidence record"), file);
            if (record.plugin != plugin || record.library_sha256 != library_sha256) {
                problem = file.string() + " is a record of " + record.plugin + " sha256 " +
                          record.library_sha256 + ", not of its file name's plugin and library";
                return std::nullopt;
            }
            return record;
        } catch (const Error& e) {
            problem = e.what();
            return std::nullopt;
        }
    }
    std::string where;
    for (const auto& d : looked) where += (where.empty() ? "" : ", ") + d;
    problem = "no evidence record for its library (sha256 " + std::string(library_sha256) +
              ") in " + (where.empty() ? std::string("any evidence directory") : where);
    return std::nullopt;
}

}  // namespace capsule

namespace capsule {

std::vector<fs::path> PluginHost::evidence_dirs(const PluginRecord& record) const {
    return options_.evidence_dirs.empty() ? default_evidence_dirs(record.manifest_path)
                                          : options_.evidence_dirs;
}

namespace {
/// Whether any directory holds a record file of `plugin` (of any library): when none does there is
/// nothing to hash the library for.
bool any_record_of(const std::vector<fs::path>& dirs, const std::string& plugin) {
    const std::string prefix = plugin + "-", suffix = ".evidence.json";
    for (const auto& dir : dirs) {
        std::error_code ec;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
            const std::string name = it->path().filename().string();
            if (name.size() == prefix.size() + 64 + suffix.size() && name.starts_with(prefix) &&
                name.ends_with(suffix))
                return true;
        }
    }
    return false;
}
}  // namespace

CapsuleVerification PluginHost::verification(const KernelCapsule& capsule) const {
    using S = VerificationStatus;
    const PluginRecord* record = plugin_of(capsule.name);
    if (!record) return {S::unverified, "no discovered plugin declares it", ""};
    if (!record->library_path)
        return {S::unverified, "plugin " + record->name + " has no library here (" +
                                   record->status_text() + "): there is nothing to verify", ""};
    const std::string command = "; run: capsule verify --plugin " + record->name;
    // Entries are made once per plugin and never change afterwards (std::map keeps their
    // addresses), so the lock covers the lookup and the first fill only; a capsule's check then
    // reads its plugin's entry in place: no copy of the record and no rehash per capsule.
    const detail::EvidenceCache::Entry* entry_ptr = nullptr;
    {
        std::lock_guard lock(evidence_->mutex);
        auto [it, fresh] = evidence_->by_plugin.try_emplace(record->name);
        if (fresh) {
            const auto dirs = evidence_dirs(*record);
            try {
                if (!any_record_of(dirs, record->name)) {
                    std::string where;
                    for (const auto& d : dirs) where += (where.empty() ? "" : ", ") + d.string();
                    it->second.problem = "no evidence record of plugin " + record->name + " in " + where;
                } else {
                    it->second.sha256 = library_sha256(*record);
                    it->second.record = find_evidence_record(dirs, record->name, it->second.sha256,
                                                             it->second.problem);
                    if (it->second.record) it->second.record_id = it->second.record->id();
                }
            } catch (const Error& e) {
                it->second.problem = e.what();
            }
        }
        entry_ptr = &it->second;
    }
    const detail::EvidenceCache::Entry& entry = *entry_ptr;
    const std::string library = record->library_path->filename().string();
    if (!entry.record) return {S::unverified, library + ": " + entry.problem + command, ""};
    const std::string& id = entry.record_id;
    const PluginManifest& manifest = *record->manifest;
    if (entry.record->version != manifest.version || entry.record->abi != to_string(manifest.abi) ||
        entry.record->device != to_string(manifest.device))
        return {S::unverified, "evidence record " + id + " was taken for version " + entry.record->version + " (ABI " +
                                   entry.record->abi + ", device " + entry.record->device + "), the manifest now says " +
                                   manifest.version + " (ABI " + to_string(manifest.abi) + ", device " +
                                   std::string(to_string(manifest.device)) + ")" + command,
                id};
    const CapsuleEvidence* result = entry.record->find(capsule.name);
    if (!result) return {S::unverified, "evidence record " + id + " has no results for it" + command, id};
    // The record binds the kernel that ran under this name to an op; a manifest that now maps the
    // name to another op is not what was verified.
    if (result->op != capsule.op)
        return {S::unverified, "evidence record " + id + " verified " + capsule.name + " as op " +
                                   std::string(to_string(result->op)) + ", the manifest now declares op " +
                                   std::string(to_string(capsule.op)) + command,
                id};
    if (result->forward_cases == 0)
        return {S::unverified, "evidence record " + id + ": no conformance case covers " + capsule.name, id};
    if (!result->passed()) {
        std::string why = "evidence record " + id + " says failed: " +
                          std::to_string(result->forward_passed) + " of " +
                          std::to_string(result->forward_cases) + " forward and " +
                          std::to_string(result->gradient_passed) + " of " +
                          std::to_string(result->gradient_cases) + " gradient cases passed";
        if (!result->failures.empty()) why += " (first failure: " + result->failures.front() + ")";
        return {S::failed, why, id};
    }
    return {S::verified, "", id};
}

std::optional<std::string> PluginHost::unverified_evidence(const KernelCapsule& capsule) const {
    auto v = verification(capsule);
    if (v.status == VerificationStatus::verified) return std::nullopt;
    return v.detail;
}

}  // namespace capsule
