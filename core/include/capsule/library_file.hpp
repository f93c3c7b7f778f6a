// A shared library file held open from its checks to dlopen, so that the file that was checked
// and hashed is the file that gets mapped (a path can be swapped for another file in between).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace capsule {

class LibraryFile {
public:
    /// Opens `path` for loading and checks it: trusted on disk (the rules of plugin files, see
    /// docs/plugins.md; `what` names the file in messages, e.g. "library"), a regular file, and
    /// an ELF64 object whose program headers and loadable segments lie within the file (a
    /// truncated library would otherwise kill the process with SIGBUS when its pages are
    /// touched). Hashes the open file (SHA-256). Raises Error(probe) naming the file and the
    /// reason.
    static LibraryFile open(const std::filesystem::path& path, std::string_view what);

    LibraryFile(LibraryFile&& other) noexcept;
    LibraryFile& operator=(LibraryFile&&) = delete;
    LibraryFile(const LibraryFile&) = delete;
    ~LibraryFile();

    const std::filesystem::path& path() const { return path_; }
    /// SHA-256 of the open file, lowercase hex.
    const std::string& sha256() const { return sha256_; }
    /// The path to give dlopen (or Boost.DLL): `/proc/self/fd/N`, the open file itself.
    std::filesystem::path loader_path() const;
    /// `text` (e.g. a dynamic loader message) with loader_path() replaced by path().
    std::string with_real_path(std::string text) const;
    /// Leaves the file open for the rest of the process; call once dlopen has mapped it. The
    /// dynamic loader knows the library by loader_path() and finds a library already loaded by
    /// that name, so the descriptor number must never be reused for another file.
    void keep_open() { fd_ = -1; }

private:
    LibraryFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
    std::filesystem::path path_;
    int fd_ = -1;
    std::string sha256_;
};

}  // namespace capsule
