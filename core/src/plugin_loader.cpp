#include "plugin_loader.hpp"
#include "sha256.hpp"

#include "capsule/library_file.hpp"
#include "capsule/plugin_table.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define BOOST_DLL_USE_STD_FS
#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace capsule {

namespace fs = std::filesystem;
using std::string;

const capsule_kernel* LoadedPlugin::kernel(std::string_view capsule_name) const {
    for (const auto& k : kernels)
        if (capsule_name == k.capsule_name) return &k;
    return nullptr;
}

LoadedPlugin::~LoadedPlugin() {
    if (initialized && table && table->shutdown) table->shutdown();
}

ProbeResult LoadedPlugin::probe() const {
    if (!table->probe) return {true, ""};
    capsule_status status{sizeof(capsule_status), 0, {}};
    int32_t code = CAPSULE_ERROR_INTERNAL;
    try {
        code = table->probe(&status);
    } catch (const std::exception& e) {
        return {false, string("probe threw a C++ exception across the C ABI: ") + e.what()};
    } catch (...) {
        return {false, "probe threw a non-standard C++ exception across the C ABI"};
    }
    if (code == CAPSULE_OK) return {true, ""};
    return {false, detail::status_text(code, status)};
}

namespace detail {

string status_text(int32_t code, const capsule_status& status) {
    const std::size_t n = strnlen(status.message, sizeof status.message);
    string message(status.message, n);
    if (message.empty())
        return "returned code " + std::to_string(code) + " without a message";
    return message + " (code " + std::to_string(code) + ")";
}

namespace {

/// Why one file or directory on a plugin's path is not trusted, or "". `lexical`: `st` came from
/// lstat on the path as given (a symbolic link there is judged by its owner only). `holder`: the
/// entry is the file itself or the directory that holds it, where the sticky bit does not help.
string untrusted_entry(const fs::path& p, const struct stat& st, bool holder, std::string_view what,
                       const fs::path& subject) {
    const auto me = ::geteuid();
    const string where = p == subject ? string(what) + " " + p.string()
                                      : "directory " + p.string() + " (above " + string(what) + " " +
                                            subject.string() + ")";
    if (st.st_uid != 0 && st.st_uid != me)
        return where + " is owned by uid " + std::to_string(st.st_uid) +
               ", neither root nor the current user; refusing to trust it";
    if (S_ISLNK(st.st_mode)) return "";
    const bool writable = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
    if (writable && (holder || !sticky_dir))
        return where + " is " + ((st.st_mode & S_IWOTH) ? "world" : "group") +
               "-writable; refusing to trust it";
    return "";
}

/// Checks `path` and each of its ancestors; `use_lstat`: judge the path as given (links not
/// followed), else the resolved path.
string untrusted_chain(const fs::path& path, bool use_lstat, std::string_view what, int depth = 0) {
    const fs::path subject = path;
    bool holder = depth < 2;
    for (fs::path p = path;; p = p.parent_path()) {
        struct stat st {};
        if ((use_lstat ? ::lstat(p.c_str(), &st) : ::stat(p.c_str(), &st)) != 0)
            return "cannot stat " + p.string() + ": " + std::strerror(errno);
        if (auto why = untrusted_entry(p, st, holder, what, subject); !why.empty()) return why;
        // The entry itself and the directory holding it are "holders"; anything higher is an
        // ancestor.
        holder = ++depth < 2;
        if (p == p.root_path() || p.parent_path() == p) break;
    }
    return "";
}

}  // namespace

string untrusted_path_reason(const fs::path& path, std::string_view what, int levels_above_file) {
    std::error_code ec;
    const fs::path absolute = fs::absolute(path, ec);
    if (ec) return "cannot resolve " + string(what) + " " + path.string() + ": " + ec.message();
    const fs::path resolved = fs::canonical(absolute, ec);
    if (ec) return "cannot resolve " + string(what) + " " + path.string() + ": " + ec.message();
    // A directory judged for the files it (or a directory below it) will hold.
    const int depth = levels_above_file;
    if (auto why = untrusted_chain(absolute.lexically_normal(), true, what, depth); !why.empty()) return why;
    return untrusted_chain(resolved, false, what, depth);
}

string sha256_fd(int fd, const string& label) {
    Sha256 hash;
    constexpr std::size_t kChunk = 64 << 10;  // larger chunks only add page faults
    std::unique_ptr<char[]> buffer(new char[kChunk]);  // not zero-filled: pread overwrites it
    for (off_t offset = 0;;) {
        const ssize_t n = ::pread(fd, buffer.get(), kChunk, offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(ErrorCode::input, label + ": cannot read to hash: " + std::strerror(errno));
        if (n == 0) break;
        hash.update(buffer.get(), static_cast<std::size_t>(n));
        offset += n;
    }
    return hash.hex();
}

string sha256_file(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(ErrorCode::input, path.string() + ": cannot open to hash: " + std::strerror(errno));
    try {
        auto hash = sha256_fd(fd, path.string());
        ::close(fd);
        return hash;
    } catch (...) {
        ::close(fd);
        throw;
    }
}

LibraryLookup find_library(std::shared_ptr<const PluginManifest> manifest, bool hash,
                           const std::optional<std::set<string>>& trusted) {
    auto cell = std::make_shared<LibraryCell>();
    cell->manifest = std::move(manifest);
    cell->trusted_sha256 = trusted;
    if (auto why = locate_library(*cell->manifest, cell->path); !why.empty()) return {nullptr, why};
    if (!hash && !trusted) return {cell, ""};  // hashed when opened
    try {
        cell->sha256 = sha256_file(cell->path);
    } catch (const Error& e) {
        return {cell, e.what()};
    }
    return {cell, pinned_hash_reason(cell->path, cell->sha256, trusted)};
}

string locate_library(const PluginManifest& m, fs::path& path) {
    if (m.source.empty()) return "library '" + *m.library + "' cannot be located: manifest has no file";
    std::error_code ec;
    const fs::path dir = fs::canonical(fs::absolute(m.source.parent_path().empty() ? fs::path(".")
                                                                                   : m.source.parent_path(), ec), ec);
    if (ec) return "cannot resolve the directory of " + m.source.string() + ": " + ec.message();
    const fs::path given = dir / *m.library;
    if (!fs::exists(given, ec)) return "library " + given.string() + " not found";
    const fs::path resolved = fs::canonical(given, ec);
    if (ec) return "cannot resolve library " + given.string() + ": " + ec.message();
    if (!fs::is_regular_file(resolved, ec)) return "library " + given.string() + " is not a regular file";
    // A link may rename a library but not move it outside the plugin's own directory.
    const auto rel = resolved.lexically_relative(dir);
    if (rel.empty() || *rel.begin() == "..")
        return "library " + given.string() + " resolves to " + resolved.string() +
               ", outside its manifest's directory " + dir.string();
    if (auto why = untrusted_path_reason(given, "library"); !why.empty()) return why;
    path = resolved;
    return "";
}

string pinned_hash_reason(const fs::path& library, const string& sha256,
                          const std::optional<std::set<string>>& trusted) {
    if (!trusted || trusted->count(sha256)) return "";
    return "library " + library.string() + " has SHA-256 " + sha256 +
           ", which is not among the pinned trusted hashes";
}

namespace {

using ExtensionFunctions = std::vector<std::pair<bool, const char*>>;  // (present, name)

/// Checks one extension this host knows: its size covers ABI 1.1's struct (`size` bytes) and
/// `functions` (read only once the size is known to cover them) are all present; returns the
/// reason for refusal or "".
template <typename Functions>
string check_extension(const capsule_extension* e, std::size_t size, const char* what, Functions functions) {
    if (e->struct_size < size)
        return string(what) + " extension is " + std::to_string(e->struct_size) + " bytes, ABI 1.1's has " +
               std::to_string(size);
    const ExtensionFunctions listed = functions();
    string missing, all;
    for (std::size_t i = 0; i < listed.size(); ++i) {
        all += (i == 0 ? "" : i + 1 == listed.size() ? " and " : ", ") + string(listed[i].second);
        if (!listed[i].first) missing += (missing.empty() ? "" : ", ") + string(listed[i].second);
    }
    if (!missing.empty())
        return string(what) + " extension lacks its function(s): " + missing + " (" + all + " are all required)";
    return "";
}

/// Finds the extensions this host knows in the table's list; returns the reason for refusal or
/// "". The list is bounded so that a cyclic or garbage list cannot hang the host.
string read_extensions(const capsule_plugin* t, LoadedPlugin& loaded) {
    constexpr int kMaxExtensions = 64;
    int count = 0;
    for (const capsule_extension* e = t->extensions; e; e = e->next) {
        if (++count > kMaxExtensions)
            return "plugin table's extension list has more than " + std::to_string(kMaxExtensions) +
                   " entries (a cycle?)";
        if (e->struct_size < sizeof(capsule_extension))
            return "extension " + std::to_string(count) + " is malformed: struct_size " +
                   std::to_string(e->struct_size);
        if (e->type == CAPSULE_EXTENSION_COMPILED_GROUPS) {
            const auto* groups = reinterpret_cast<const capsule_compiled_groups_extension*>(e);
            if (auto why = check_extension(e, sizeof *groups, "compiled-groups", [&] {
                    return ExtensionFunctions{{groups->compile != nullptr, "compile"},
                                              {groups->run != nullptr, "run"},
                                              {groups->release != nullptr, "release"}};
                });
                !why.empty())
                return why;
            if (loaded.compiled_groups) return "plugin table lists the compiled-groups extension twice";
            loaded.compiled_groups = groups;
        } else if (e->type == CAPSULE_EXTENSION_GROUP_AUTOGRAD) {
            const auto* autograd = reinterpret_cast<const capsule_group_autograd_extension*>(e);
            if (auto why = check_extension(e, sizeof *autograd, "group-autograd", [&] {
                    return ExtensionFunctions{{autograd->record != nullptr, "record"},
                                              {autograd->backward != nullptr, "backward"},
                                              {autograd->release_record != nullptr, "release_record"}};
                });
                !why.empty())
                return why;
            if (loaded.group_autograd) return "plugin table lists the group-autograd extension twice";
            loaded.group_autograd = autograd;
        }
    }
    if (loaded.group_autograd && !loaded.compiled_groups)
        return "plugin table lists the group-autograd extension without the compiled-groups extension "
               "(external autograd runs compiled groups)";
    return "";
}

/// The dynamic loader's own message from a Boost.DLL error, without Boost's wrapping and the
/// errno text that std::system_error appends (which is unrelated: dlopen does not set errno).
string loader_message(const std::system_error& e) {
    string text = e.what();
    const string suffix = ": " + e.code().message();
    if (text.size() > suffix.size() && text.ends_with(suffix)) text.resize(text.size() - suffix.size());
    const string marker = "(dlerror system message: ";
    if (auto at = text.find(marker); at != string::npos && text.ends_with(")"))
        text = text.substr(at + marker.size(), text.size() - at - marker.size() - 1);
    return text;
}

}  // namespace

LoadOutcome open_library(const LibraryCell& cell) {
    const auto& m = *cell.manifest;
    const fs::path& lib = cell.path;
    auto fail = [](string reason) { return LoadOutcome{nullptr, std::move(reason)}; };
    // The file may have changed since discovery: check it again and hash it, holding it open so
    // that dlopen maps the file that was checked (a path can be swapped for another file).
    auto loaded = std::make_shared<LoadedPlugin>();
    std::optional<LibraryFile> file;
    try {
        file.emplace(LibraryFile::open(lib, "library"));
    } catch (const Error& e) {
        return fail(e.what());
    }
    loaded->sha256 = file->sha256();
    if (!cell.sha256.empty() && loaded->sha256 != cell.sha256)
        return fail("library " + lib.string() + " changed since discovery: SHA-256 was " +
                    cell.sha256 + ", is now " + loaded->sha256);
    if (auto why = pinned_hash_reason(lib, loaded->sha256, cell.trusted_sha256); !why.empty())
        return fail(why);

    capsule_plugin_entry_fn entry = nullptr;
    try {
        // RTLD_NODELETE: a plugin stays mapped until the process exits, like the registry that
        // names its capsules; unloading C++ libraries with static state at exit is fragile (an
        // ASan build reported the plugin's static runtime allocations as leaked once unmapped).
        const auto mode = boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now |
                          static_cast<boost::dll::load_mode::type>(RTLD_NODELETE);
        auto handle = std::make_shared<boost::dll::shared_library>(file->loader_path(), mode);
        file->keep_open();
        if (!handle->has(CAPSULE_PLUGIN_ENTRY_SYMBOL))
            return fail("library " + lib.string() + " has no entry symbol " CAPSULE_PLUGIN_ENTRY_SYMBOL);
        entry = handle->get<const capsule_plugin*(uint32_t, uint32_t)>(CAPSULE_PLUGIN_ENTRY_SYMBOL);
        loaded->library = handle;
    } catch (const std::system_error& e) {
        return fail("cannot load " + lib.string() + ": " + file->with_real_path(loader_message(e)));
    } catch (const std::exception& e) {
        return fail("cannot load " + lib.string() + ": " + file->with_real_path(e.what()));
    }
    try {
        loaded->table = entry(kHostAbiVersion.major, kHostAbiVersion.minor);
    } catch (const std::exception& e) {
        return fail(string("entry point threw a C++ exception across the C ABI: ") + e.what());
    } catch (...) {
        return fail("entry point threw a non-standard C++ exception across the C ABI");
    }
    if (!loaded->table)
        return fail("plugin refused host ABI " + to_string(kHostAbiVersion) + " (entry returned null)");
    if (auto why = check_plugin_table(loaded->table, m, loaded->kernels); !why.empty()) return fail(why);
    if (auto why = read_extensions(loaded->table, *loaded); !why.empty()) return fail(why);
    if (loaded->table->init) {
        capsule_status status{sizeof(capsule_status), 0, {}};
        int32_t code = CAPSULE_ERROR_INTERNAL;
        try {
            code = loaded->table->init(&status);
        } catch (const std::exception& e) {
            return fail(string("init threw a C++ exception across the C ABI: ") + e.what());
        } catch (...) {
            return fail("init threw a non-standard C++ exception across the C ABI");
        }
        if (code != CAPSULE_OK) return fail("init failed: " + status_text(code, status));
    }
    loaded->initialized = true;
    return LoadOutcome{std::move(loaded), ""};
}

}  // namespace detail
}  // namespace capsule
