#include "plugin_loader.hpp"

#include <dlfcn.h>

#define BOOST_DLL_USE_STD_FS
#include <boost/dll/shared_library.hpp>
#include <openssl/evp.h>

#include <array>
#include <cstring>
#include <fstream>
#include <map>

namespace capsule {

namespace fs = std::filesystem;
using std::string;

const capsule_kernel* LoadedPlugin::kernel(std::string_view capsule_name) const {
    for (std::size_t i = 0; i < table->num_kernels; ++i)
        if (capsule_name == table->kernels[i].capsule_name) return &table->kernels[i];
    return nullptr;
}

LoadedPlugin::~LoadedPlugin() {
    if (initialized && table && table->shutdown) table->shutdown();
}

ProbeResult LoadedPlugin::probe() const {
    if (!table->probe) return {true, ""};
    capsule_status status{sizeof(capsule_status), 0, {}};
    if (table->probe(&status) == CAPSULE_OK) return {true, ""};
    status.message[sizeof status.message - 1] = '\0';
    string reason = status.message;
    if (reason.empty()) reason = "probe failed with code " + std::to_string(status.code);
    return {false, reason};
}

namespace detail {

string world_writable_reason(const fs::path& path) {
    std::error_code ec;
    auto st = fs::status(path, ec);
    if (ec) return "cannot stat " + path.string() + ": " + ec.message();
    if ((st.permissions() & fs::perms::others_write) != fs::perms::none)
        return (fs::is_directory(st) ? "directory " : "file ") + path.string() +
               " is world-writable; refusing to load plugin code from it";
    return "";
}

string sha256_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path.string() + ": cannot open to hash");
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw Error("OpenSSL SHA-256 initialisation failed");
    std::array<char, 1 << 16> buffer;
    while (in) {
        in.read(buffer.data(), buffer.size());
        if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(ctx.get(), digest, &length);
    static const char* hex = "0123456789abcdef";
    string out;
    for (unsigned i = 0; i < length; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 15];
    }
    return out;
}

namespace {

/// Smallest plugin table this host can use: everything up to and including `extensions`
/// exists since ABI 1.0.
constexpr std::size_t kMinPluginTableSize = offsetof(capsule_plugin, extensions) + sizeof(void*);

/// Checks the table against the manifest; returns the reason for refusal or "".
string check_table(const capsule_plugin* t, const PluginManifest& m) {
    if (t->struct_size < kMinPluginTableSize)
        return "plugin table is " + std::to_string(t->struct_size) + " bytes, ABI 1.0 needs at least " +
               std::to_string(kMinPluginTableSize);
    const AbiVersion lib{t->abi_major, t->abi_minor};
    if (lib.major != kHostAbiVersion.major)
        return "ABI version mismatch: library implements " + to_string(lib) + ", host implements " +
               to_string(kHostAbiVersion) + " (major versions must match)";
    if (lib.major != m.abi.major || lib.minor != m.abi.minor)
        return "library ABI " + to_string(lib) + " differs from the manifest's " + to_string(m.abi);
    if (!t->name || m.name != t->name)
        return "library names itself '" + string(t->name ? t->name : "(null)") +
               "', manifest says '" + m.name + "'";
    if (!t->version || m.version != t->version)
        return "library version '" + string(t->version ? t->version : "(null)") +
               "' differs from the manifest's '" + m.version + "'";
    if (t->device != static_cast<int32_t>(m.device))
        return "library device " +
               (t->device >= 0 && t->device < static_cast<int32_t>(Spellings<Device>::values.size())
                    ? string(to_string(static_cast<Device>(t->device)))
                    : std::to_string(t->device)) +
               " differs from the manifest's " + string(to_string(m.device));
    if (m.device != Device::cpu &&
        (!t->device_interface || t->device_interface->struct_size < sizeof(capsule_device_interface) ||
         !t->device_interface->allocate || !t->device_interface->release ||
         !t->device_interface->copy_to_device || !t->device_interface->copy_to_host))
        return "a " + string(to_string(m.device)) +
               " plugin must supply a complete device interface (allocate, release, copies)";
    if (t->num_kernels > 0 && !t->kernels) return "plugin table lists kernels but gives no array";

    std::map<string, const KernelCapsule*> declared;
    for (const auto& k : m.capsules) declared[k.name] = &k;
    std::map<string, int> implemented;
    for (std::size_t i = 0; i < t->num_kernels; ++i) {
        const auto& k = t->kernels[i];
        if (k.struct_size < sizeof(capsule_kernel) || !k.capsule_name)
            return "kernel entry " + std::to_string(i) + " is malformed (size or name)";
        if (!declared.count(k.capsule_name))
            return "library implements capsule '" + string(k.capsule_name) +
                   "' that the manifest does not declare";
        if (!k.forward) return "capsule '" + string(k.capsule_name) + "' has no forward kernel";
        if (++implemented[k.capsule_name] > 1)
            return "library lists capsule '" + string(k.capsule_name) + "' twice";
    }
    for (const auto& k : m.capsules) {
        const bool runnable = k.runtime == RuntimeSupport::eager || k.runtime == RuntimeSupport::test_only;
        if (runnable && !implemented.count(k.name))
            return "manifest marks capsule '" + k.name + "' " + string(to_string(k.runtime)) +
                   " but the library has no kernel for it";
        if (!runnable && implemented.count(k.name))
            return "library implements capsule '" + k.name + "' that the manifest marks " +
                   string(to_string(k.runtime)) + "; mark it eager or test-only";
    }
    return "";
}

}  // namespace

void load_plugin_library(PluginRecord& record, const PluginHostOptions& options) {
    auto fail = [&](string reason) {
        record.status = PluginStatus::failed;
        record.failure = std::move(reason);
        record.loaded.reset();
    };
    const auto& m = *record.manifest;
    if (m.source.empty()) return fail("library '" + *m.library + "' cannot be located: manifest has no file");
    const fs::path dir = m.source.parent_path().empty() ? fs::path(".") : m.source.parent_path();
    const fs::path lib = dir / *m.library;
    record.library_path = lib;
    for (const auto& p : {dir, m.source})
        if (auto why = world_writable_reason(p); !why.empty()) return fail(why);
    std::error_code ec;
    if (!fs::is_regular_file(lib, ec)) return fail("library " + lib.string() + " not found");
    if (auto why = world_writable_reason(lib); !why.empty()) return fail(why);
    try {
        record.sha256 = sha256_file(lib);
    } catch (const Error& e) {
        return fail(e.what());
    }
    if (options.trusted_sha256 && !options.trusted_sha256->count(record.sha256))
        return fail("library " + lib.string() + " has SHA-256 " + record.sha256 +
                    ", which is not among the pinned trusted hashes");

    auto loaded = std::make_shared<LoadedPlugin>();
    capsule_plugin_entry_fn entry = nullptr;
    try {
        // RTLD_NODELETE: a plugin stays mapped until the process exits, like the registry that
        // names its capsules; unloading C++ libraries with static state at exit is fragile (an
        // ASan build reported the plugin's static runtime allocations as leaked once unmapped).
        const auto mode = boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now |
                          static_cast<boost::dll::load_mode::type>(RTLD_NODELETE);
        auto handle = std::make_shared<boost::dll::shared_library>(lib, mode);
        if (!handle->has(CAPSULE_PLUGIN_ENTRY_SYMBOL))
            return fail("library " + lib.string() + " has no entry symbol " CAPSULE_PLUGIN_ENTRY_SYMBOL);
        entry = handle->get<const capsule_plugin*(uint32_t, uint32_t)>(CAPSULE_PLUGIN_ENTRY_SYMBOL);
        loaded->library = handle;
    } catch (const std::exception& e) {
        // Boost.DLL's message carries dlerror's text: which library or symbol is missing.
        return fail("cannot load " + lib.string() + ": " + e.what());
    }
    loaded->table = entry(kHostAbiVersion.major, kHostAbiVersion.minor);
    if (!loaded->table)
        return fail("plugin refused host ABI " + to_string(kHostAbiVersion) + " (entry returned null)");
    if (auto why = check_table(loaded->table, m); !why.empty()) return fail(why);
    if (loaded->table->init) {
        capsule_status status{sizeof(capsule_status), 0, {}};
        if (loaded->table->init(&status) != CAPSULE_OK) {
            status.message[sizeof status.message - 1] = '\0';
            return fail("init failed (code " + std::to_string(status.code) + "): " + status.message);
        }
    }
    loaded->initialized = true;
    record.probe = loaded->probe();
    record.loaded = std::move(loaded);
    record.status = PluginStatus::loaded;
}

}  // namespace detail
}  // namespace capsule
