#include "context.hpp"

#include <cstdlib>

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
    return o;
}
}  // namespace

Context::Context(const GlobalOptions& options)
    : host_(PluginHost::discover(PluginSearchPath::standard(executable_dir(),
                                                            std::getenv("CAPSULE_PLUGIN_PATH"),
                                                            options.plugin_paths),
                                 host_options(options))) {
    for (const auto& file : options.profile_files) profiles_.push_back(load_profile_file(file));
    for (const auto& p : builtin_profiles()) profiles_.push_back(p);
}

BackendProfile Context::profile(const std::string& name) const {
    for (const auto& p : profiles_)
        if (p.name == name) return p;
    if (name.size() > 5 && name.ends_with(".json")) return load_profile_file(name);
    std::string names;
    for (const auto& p : profiles_) names += (names.empty() ? "" : ", ") + p.name;
    throw VocabularyError("unknown profile '" + name + "'; valid: " + names +
                          " (or a profile .json file)");
}

}  // namespace capsule::cli
