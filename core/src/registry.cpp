#include "capsule/registry.hpp"

#include <fstream>
#include <cctype>

#include "plugin_loader.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <numeric>
#include <set>
#include <thread>

namespace capsule {

namespace fs = std::filesystem;

const std::array<std::pair<PluginStatus, std::string_view>, 4> Spellings<PluginStatus>::values{{
    {PluginStatus::available, "available"},
    {PluginStatus::loaded, "loaded"},
    {PluginStatus::stub, "stub"},
    {PluginStatus::failed, "failed"},
}};

std::string PluginRecord::status_text() const {
    if (status == PluginStatus::failed) return "failed: " + failure;
    return std::string(to_string(status));
}

PluginSearchPath PluginSearchPath::standard(const fs::path& exe_dir, const char* env_value,
                                            const std::vector<fs::path>& explicit_paths) {
    PluginSearchPath s;
    if (!exe_dir.empty()) {
        s.entries.push_back(exe_dir / "plugins");
        s.entries.push_back((exe_dir / CAPSULE_INSTALLED_PLUGIN_DIR_FROM_BIN).lexically_normal());
    }
    if (env_value) {
        std::string value(env_value);
        std::size_t start = 0;
        while (start <= value.size()) {
            auto end = value.find(':', start);
            if (end == std::string::npos) end = value.size();
            if (end > start) s.entries.emplace_back(value.substr(start, end - start));
            start = end + 1;
        }
    }
    s.entries.insert(s.entries.end(), explicit_paths.begin(), explicit_paths.end());
    return s;
}

namespace {
constexpr std::string_view kManifestSuffix = ".capsule.json";

bool is_manifest_name(const fs::path& p) {
    auto name = p.filename().string();
    return name.size() > kManifestSuffix.size() &&
           name.compare(name.size() - kManifestSuffix.size(), kManifestSuffix.size(),
                        kManifestSuffix) == 0;
}

std::vector<fs::path> manifests_in(const fs::path& entry) {
    std::error_code ec;
    if (fs::is_regular_file(entry, ec)) return {entry};
    std::vector<fs::path> found;
    if (!fs::is_directory(entry, ec)) return found;
    for (const auto& item : fs::directory_iterator(entry, ec))
        if (is_manifest_name(item.path())) found.push_back(item.path());
    std::sort(found.begin(), found.end());
    return found;
}

PluginRecord record_for(PluginManifest manifest) {
    PluginRecord r;
    r.manifest_path = manifest.source;
    r.name = manifest.name;
    // A manifest with a library is provisionally "available"; PluginHost::add checks it further.
    r.status = manifest.is_stub() ? PluginStatus::stub : PluginStatus::available;
    r.manifest = std::make_shared<const PluginManifest>(std::move(manifest));
    return r;
}

PluginRecord failed_record(const fs::path& path, std::string reason) {
    PluginRecord r;
    r.manifest_path = path;
    r.name = path.filename().string();
    if (r.name.ends_with(kManifestSuffix)) r.name.resize(r.name.size() - kManifestSuffix.size());
    r.failure = std::move(reason);
    return r;
}

/// A record read on a discovery thread, and its library when the manifest declares one.
struct Discovered {
    PluginRecord record;
    std::optional<detail::LibraryLookup> library;
};

/// Reads a manifest found on disk, after checking that it may be trusted (a refusal or a
/// malformed manifest gives a failed record), and locates its library (and hashes it, when
/// `options` ask for hashes): on the discovery threads, since hashing takes as long as reading.
Discovered discovered_record(const fs::path& path, const PluginHostOptions& options) {
    if (auto why = detail::untrusted_path_reason(path, "manifest"); !why.empty())
        return {failed_record(path, why), std::nullopt};
    Discovered d;
    try {
        d.record = record_for(load_manifest(path));
    } catch (const Error& e) {
        return {failed_record(path, e.what()), std::nullopt};
    }
    if (d.record.status == PluginStatus::available && options.load != LoadPolicy::manifests_only)
        d.library = detail::find_library(d.record.manifest, options.hash_libraries,
                                         options.trusted_sha256);
    return d;
}

/// The records of `paths`, in order. Manifests are parsed on up to hardware_concurrency()
/// threads: parsing is most of the time a command spends before its own work (0.76 MB of JSON
/// for the plugins in a build tree), and each manifest is independent of the others.
std::vector<Discovered> read_records(const std::vector<fs::path>& paths,
                                     const PluginHostOptions& options) {
    std::vector<Discovered> records(paths.size());
    std::vector<std::exception_ptr> errors(paths.size());  // rethrown in order, as if serial
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < paths.size();) {
            try {
                records[i] = discovered_record(paths[i], options);
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
    };
    const std::size_t workers =
        std::min<std::size_t>(paths.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < workers; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
    return records;
}

}  // namespace

std::set<std::string> read_trusted_hashes(const fs::path& path) {
    std::ifstream in(path);
    if (!in) throw Error(ErrorCode::input, path.string() + ": cannot read trusted hashes");
    std::set<std::string> hashes;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        auto comment = line.find('#');
        if (comment != std::string::npos) line.resize(comment);
        auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        // `<64 hex digits>` then whitespace and the file name (sha256sum's `*` marks binary mode).
        std::string h = line.substr(first, 64);
        bool ok = h.size() == 64 &&
                  std::all_of(h.begin(), h.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
        const auto rest = first + 64;
        ok = ok && (rest == line.size() || std::isspace(static_cast<unsigned char>(line[rest])));
        if (!ok)
            throw Error(ErrorCode::input, path.string() + ":" + std::to_string(n) +
                             ": expected '<64 hex digits>  <file name>' (sha256sum format)");
        for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        hashes.insert(h);
    }
    return hashes;
}

PluginHost PluginHost::discover(const PluginSearchPath& search, const PluginHostOptions& options) {
    std::set<fs::path> seen;
    std::vector<fs::path> paths;
    for (const auto& entry : search.entries) {
        for (const auto& path : manifests_in(entry)) {
            std::error_code ec;
            auto canonical = fs::weakly_canonical(path, ec);
            if (seen.insert(ec ? path : canonical).second) paths.push_back(path);  // same file once
        }
    }
    PluginHost host;
    host.options_ = options;
    host.evidence_ = std::make_shared<detail::EvidenceCache>();
    for (auto& d : read_records(paths, options))
        host.add(std::move(d.record), d.library ? &*d.library : nullptr);
    return host;
}

PluginHost PluginHost::from_manifests(std::vector<PluginManifest> manifests,
                                      const PluginHostOptions& options) {
    PluginHost host;
    host.options_ = options;
    host.evidence_ = std::make_shared<detail::EvidenceCache>();
    for (auto& m : manifests) host.add(record_for(std::move(m)));
    return host;
}

void PluginHost::add(PluginRecord record, detail::LibraryLookup* found) {
    // Checks that need the other plugins: ABI major, duplicate plugin name, duplicate capsule.
    auto fail = [&](std::string reason) {
        record.status = PluginStatus::failed;
        record.failure = std::move(reason);
    };
    if (record.status != PluginStatus::failed && record.manifest) {
        const auto& m = *record.manifest;
        if (m.abi.major != kHostAbiVersion.major)
            fail("ABI version mismatch: plugin declares " + to_string(m.abi) + ", host implements " +
                 to_string(kHostAbiVersion) + " (major versions must match)");
    }
    for (std::size_t i = 0; i < plugins_.size() && record.status != PluginStatus::failed; ++i) {
        if (plugins_[i].status == PluginStatus::failed) continue;
        if (plugins_[i].name == record.name)
            fail("duplicate plugin name '" + record.name + "' (already discovered from " +
                 plugins_[i].manifest_path.string() + ")");
    }
    if (record.status != PluginStatus::failed)
        for (const auto& k : record.manifest->capsules)
            if (auto* other = plugin_of(k.name)) {
                fail("duplicate capsule name '" + k.name + "' (already declared by plugin '" +
                     other->name + "')");
                break;
            }
    // Only a plugin that passed every manifest-level check keeps its library (a discovery thread
    // may have located and hashed it already; the result of a refused plugin is dropped).
    if (record.status == PluginStatus::available) {
        if (options_.load == LoadPolicy::manifests_only) {
            record.status = PluginStatus::stub;  // plannable, never executed
        } else {
            auto library = found ? std::move(*found)
                                 : detail::find_library(record.manifest, options_.hash_libraries,
                                                        options_.trusted_sha256);
            if (library.cell) {
                record.library_path = library.cell->path;
                record.sha256 = library.cell->sha256;
            }
            // With pinned hashes an unlisted library is refused here, where it is listed.
            if (!library.refusal.empty()) fail(library.refusal);
            else record.library_cell = std::move(library.cell);
        }
    }
    if (record.status == PluginStatus::available && options_.load == LoadPolicy::eager) {
        auto outcome = library(record);
        if (outcome.plugin) {
            record.status = PluginStatus::loaded;
            record.sha256 = outcome.plugin->sha256;
            record.probe = outcome.plugin->probe();
        } else {
            fail(outcome.failure);
        }
    }
    std::vector<CapsuleRef> refs;
    if (record.status != PluginStatus::failed)
        for (const auto& k : record.manifest->capsules) {
            refs.push_back(CapsuleRef(record.manifest, &k));  // shares the manifest's ownership
            plugin_index_of_capsule_.emplace(k.name, plugins_.size());
        }
    plugins_.push_back(std::move(record));
    capsules_.push_back(std::move(refs));
}

const PluginRecord* PluginHost::plugin_of(std::string_view capsule_name) const {
    auto it = plugin_index_of_capsule_.find(std::string(capsule_name));
    return it == plugin_index_of_capsule_.end() ? nullptr : &plugins_[it->second];
}

std::string PluginHost::library_sha256(const PluginRecord& record) const {
    if (!record.sha256.empty() || !record.library_path) return record.sha256;
    return detail::sha256_file(*record.library_path);
}

LoadOutcome PluginHost::library(const PluginRecord& record) const {
    if (record.status == PluginStatus::failed)
        return {nullptr, "plugin " + record.name + " was refused at discovery: " + record.failure};
    if (!record.library_cell)
        return {nullptr, "plugin " + record.name + " is a stub: " +
                             (record.manifest && record.manifest->is_stub()
                                  ? "its manifest declares no library"
                                  : "this host reads manifests only")};
    auto& cell = *record.library_cell;
    std::call_once(cell.once, [&] { cell.outcome = detail::open_library(cell); });
    return cell.outcome;
}

CapsuleRegistry PluginHost::registry(std::string_view mode) const {
    CapsuleRegistry r;
    r.mode = std::string(mode);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < plugins_.size(); ++i) {
        const auto& p = plugins_[i];
        const bool joins = !p.manifest || std::find(p.manifest->registry_modes.begin(),
                                                    p.manifest->registry_modes.end(),
                                                    mode) != p.manifest->registry_modes.end();
        if (!joins) continue;
        if (p.status != PluginStatus::failed) {
            order.push_back(i);
            continue;
        }
        FailedPlugin f{p.name, p.failure, std::nullopt, {}, {}};
        if (p.manifest) {
            f.device = p.manifest->device;
            f.providers = p.manifest->providers;
            for (const auto& k : p.manifest->capsules) f.ops.push_back(k.op);
        }
        r.failed_plugins.push_back(std::move(f));
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const auto pa = plugins_[a].manifest->priority, pb = plugins_[b].manifest->priority;
        return pa != pb ? pa > pb : plugins_[a].name < plugins_[b].name;
    });
    for (auto i : order)
        for (const auto& k : capsules_[i]) {
            r.capsules.push_back(k);
            r.plugin_of.push_back(plugins_[i].name);
        }
    return r;
}

}  // namespace capsule
