#include "context.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace capsule::cli {

namespace fs = std::filesystem;

fs::path executable_dir() {
    std::error_code ec;
    auto exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : exe.parent_path();
}

namespace {
PluginHostOptions host_options(const GlobalOptions& options) {
    PluginHostOptions o;
    if (!options.trusted_hashes.empty()) o.trusted_sha256 = read_trusted_hashes(options.trusted_hashes);
    o.evidence_dirs = options.evidence_dirs;
    return o;
}
}  // namespace

Context::Context(const GlobalOptions& options) : options_(options) {
    for (const auto& path : options.plugin_paths) {
        std::error_code ec;
        if (!fs::exists(path, ec))
            throw Error(ErrorCode::input, "--plugin-path " + path.string() + ": no such file or directory");
    }
    for (const auto& file : options.profile_files) profiles_.push_back(load_profile_file(file));
    for (const auto& p : builtin_profiles()) profiles_.push_back(p);
    // A profile file must not silently redefine a built-in or another file's profile.
    for (std::size_t i = 0; i < profiles_.size(); ++i)
        for (std::size_t j = i + 1; j < profiles_.size(); ++j)
            if (profiles_[i].name == profiles_[j].name)
                throw Error(ErrorCode::input, "duplicate profile name '" + profiles_[i].name +
                                 "' (from --profile-file); choose another name");
}

const PluginHost& Context::host() const {
    if (host_) return *host_;
    if (const char* env = std::getenv("CAPSULE_PLUGIN_PATH")) {
        for (const auto& entry : PluginSearchPath::standard({}, env, {}).entries) {
            std::error_code ec;
            if (entry != fs::path("plugins") && !fs::exists(entry, ec))
                spdlog::warn("CAPSULE_PLUGIN_PATH entry {} does not exist", entry.string());
        }
    }
    auto options = host_options(options_);
    options.hash_libraries = hash_libraries_;
    host_.emplace(PluginHost::discover(
        PluginSearchPath::standard(executable_dir(), std::getenv("CAPSULE_PLUGIN_PATH"), options_.plugin_paths),
        options));
    return *host_;
}

BackendProfile Context::profile(const std::string& name) const {
    for (const auto& p : profiles_)
        if (p.name == name) return warn_if_preference_unusable(p);
    if (name.size() > 5 && name.ends_with(".json")) {
        // As with --profile-file: a file must not take a built-in's or another file's name, or
        // every report would name a profile that is not the one that ran.
        BackendProfile loaded = load_profile_file(name);
        for (const auto& p : profiles_)
            if (p.name == loaded.name)
                throw Error(ErrorCode::input, "profile file " + name + " is named '" + loaded.name +
                                                  "', the name of another profile; choose another name");
        return warn_if_preference_unusable(std::move(loaded));
    }
    std::string names;
    for (const auto& p : profiles_) names += (names.empty() ? "" : ", ") + p.name;
    throw Error(ErrorCode::input, "unknown profile '" + name + "'; valid: " + names +
                          " (or a profile .json file)");
}

namespace {
Tensor retagged(const Tensor& t, DType dtype) {
    Tensor out = Tensor::zeros(dtype, t.shape());
    std::memcpy(out.data(), t.data(), t.nbytes());
    return out;
}
}  // namespace

Tensor bfloat16_from_bits(const Tensor& t, DType declared) {
    return t.dtype() == DType::uint16 && declared == DType::bfloat16 ? retagged(t, DType::bfloat16) : t;
}

Tensor bfloat16_as_bits(const Tensor& t) {
    return t.dtype() == DType::bfloat16 ? retagged(t, DType::uint16) : t;
}

const BackendProfile& Context::warn_if_preference_unusable(const BackendProfile& profile) const {
    const auto& backend = profile.config.backend;
    if (backend.kind != BackendPreference::Kind::prefer) return profile;
    for (const auto& failed : host().registry(profile.registry_mode).failed_plugins)
        if (std::find(failed.providers.begin(), failed.providers.end(), backend.provider) != failed.providers.end())
            spdlog::warn("profile {} prefers provider {}, but plugin {} failed to load ({}); its ops run on "
                         "other providers",
                         profile.name, to_string(backend.provider), failed.name, failed.reason);
    return profile;
}

}  // namespace capsule::cli
