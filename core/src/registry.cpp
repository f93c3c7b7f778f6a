#include "capsule/registry.hpp"

#include <fstream>
#include <cctype>

#include "plugin_loader.hpp"

#include <algorithm>
#include <numeric>
#include <set>

namespace capsule {

namespace fs = std::filesystem;

const std::array<std::pair<PluginStatus, std::string_view>, 3> Spellings<PluginStatus>::values{{
    {PluginStatus::loaded, "loaded"}, {PluginStatus::stub, "stub"}, {PluginStatus::failed, "failed"},
}};

std::string PluginRecord::status_text() const {
    if (status == PluginStatus::failed) return "failed: " + failure;
    return std::string(to_string(status));
}

PluginSearchPath PluginSearchPath::standard(const fs::path& exe_dir, const char* env_value,
                                            const std::vector<fs::path>& explicit_paths) {
    PluginSearchPath s;
    s.entries.push_back(exe_dir / "plugins");
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
    // A manifest with a library is provisionally "loaded"; PluginHost::add loads and checks it.
    r.status = manifest.is_stub() ? PluginStatus::stub : PluginStatus::loaded;
    r.manifest = std::move(manifest);
    return r;
}
}  // namespace

std::set<std::string> read_trusted_hashes(const fs::path& path) {
    std::ifstream in(path);
    if (!in) throw InputError(path.string() + ": cannot read trusted hashes");
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
            throw InputError(path.string() + ":" + std::to_string(n) +
                             ": expected '<64 hex digits>  <file name>' (sha256sum format)");
        for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        hashes.insert(h);
    }
    return hashes;
}

PluginHost PluginHost::discover(const PluginSearchPath& search, const PluginHostOptions& options) {
    PluginHost host;
    std::set<fs::path> seen;
    for (const auto& entry : search.entries) {
        for (const auto& path : manifests_in(entry)) {
            std::error_code ec;
            auto canonical = fs::weakly_canonical(path, ec);
            if (!seen.insert(ec ? path : canonical).second) continue;  // same file twice
            try {
                host.add(record_for(load_manifest(path)), options);
            } catch (const Error& e) {
                PluginRecord r;
                r.manifest_path = path;
                r.name = path.filename().string();
                r.name.resize(r.name.size() - kManifestSuffix.size());
                r.failure = e.what();
                host.add(std::move(r), options);
            }
        }
    }
    return host;
}

PluginHost PluginHost::from_manifests(std::vector<PluginManifest> manifests,
                                      const PluginHostOptions& options) {
    PluginHost host;
    for (auto& m : manifests) host.add(record_for(std::move(m)), options);
    return host;
}

void PluginHost::add(PluginRecord record, const PluginHostOptions& options) {
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
            fail("duplicate plugin name '" + record.name + "' (already loaded from " +
                 plugins_[i].manifest_path.string() + ")");
        for (const auto& other : capsules_[i])
            for (const auto& k : record.manifest->capsules)
                if (record.status != PluginStatus::failed && k.name == other->name)
                    fail("duplicate capsule name '" + k.name + "' (already declared by plugin '" +
                         plugins_[i].name + "')");
    }
    // Only a plugin that passed every manifest-level check gets its code loaded.
    if (record.status == PluginStatus::loaded) {
        if (options.load_libraries)
            detail::load_plugin_library(record, options);
        else
            record.status = PluginStatus::stub;  // manifests only: plannable, never executed
    }
    std::vector<CapsuleRef> refs;
    if (record.status != PluginStatus::failed)
        for (const auto& k : record.manifest->capsules)
            refs.push_back(std::make_shared<const KernelCapsule>(k));
    plugins_.push_back(std::move(record));
    capsules_.push_back(std::move(refs));
}

const PluginRecord* PluginHost::plugin_of(std::string_view capsule_name) const {
    for (std::size_t i = 0; i < plugins_.size(); ++i)
        for (const auto& k : capsules_[i])
            if (k->name == capsule_name) return &plugins_[i];
    return nullptr;
}

CapsuleRegistry PluginHost::registry(std::string_view mode) const {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < plugins_.size(); ++i) {
        const auto& p = plugins_[i];
        if (p.status == PluginStatus::failed) continue;
        const auto& modes = p.manifest->registry_modes;
        if (std::find(modes.begin(), modes.end(), mode) != modes.end()) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const auto pa = plugins_[a].manifest->priority, pb = plugins_[b].manifest->priority;
        return pa != pb ? pa > pb : plugins_[a].name < plugins_[b].name;
    });
    CapsuleRegistry r;
    r.mode = std::string(mode);
    for (auto i : order)
        for (const auto& k : capsules_[i]) {
            r.capsules.push_back(k);
            r.plugin_of.push_back(plugins_[i].name);
        }
    return r;
}

}  // namespace capsule
