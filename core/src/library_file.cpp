#include "capsule/library_file.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "capsule/error.hpp"
#include "plugin_loader.hpp"

namespace capsule {

namespace fs = std::filesystem;
using std::string;

namespace {

/// Reads exactly `size` bytes at `offset`; false on a short read or an error.
bool read_at(int fd, void* out, std::size_t size, std::uint64_t offset) {
    auto* p = static_cast<char*>(out);
    while (size > 0) {
        const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return true;
}

/// Why the ELF file of `size` bytes open at `fd` cannot be mapped whole, or "". The dynamic
/// loader maps each PT_LOAD segment's file range; a range past the end of the file maps, then
/// faults with SIGBUS when touched.
string elf_layout_reason(int fd, std::uint64_t size) {
    Elf64_Ehdr header{};
    if (!read_at(fd, &header, sizeof header, 0) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
        return "is not an ELF file";
    if (header.e_ident[EI_CLASS] != ELFCLASS64) return "is not a 64-bit ELF file";
    if (header.e_phentsize != sizeof(Elf64_Phdr)) return "has a malformed ELF header (program header size)";
    const std::uint64_t table_bytes = std::uint64_t(header.e_phnum) * sizeof(Elf64_Phdr);
    if (header.e_phoff > size || table_bytes > size - header.e_phoff)
        return "is truncated: its ELF program headers end past the end of the file";
    std::vector<Elf64_Phdr> segments(header.e_phnum);
    if (!read_at(fd, segments.data(), table_bytes, header.e_phoff)) return "cannot be read (program headers)";
    for (const auto& s : segments)
        if (s.p_type == PT_LOAD && (s.p_offset > size || s.p_filesz > size - s.p_offset))
            return "is truncated: a loadable segment ends at byte " + std::to_string(s.p_offset + s.p_filesz) +
                   ", the file has " + std::to_string(size);
    return "";
}

}  // namespace

LibraryFile LibraryFile::open(const fs::path& path, std::string_view what) {
    const string label = string(what) + " " + path.string();
    if (auto why = detail::untrusted_path_reason(path, what); !why.empty()) throw Error(ErrorCode::probe, why);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(ErrorCode::probe, "cannot open " + label + ": " + std::strerror(errno));
    LibraryFile file(path, fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(ErrorCode::probe, label + " is not a regular file");
    if (auto why = elf_layout_reason(fd, static_cast<std::uint64_t>(st.st_size)); !why.empty())
        throw Error(ErrorCode::probe, label + " " + why);
    file.sha256_ = detail::sha256_fd(fd, label);
    return file;
}

LibraryFile::LibraryFile(LibraryFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), sha256_(std::move(other.sha256_)) {
    other.fd_ = -1;
}

LibraryFile::~LibraryFile() {
    if (fd_ >= 0) ::close(fd_);
}

fs::path LibraryFile::loader_path() const { return "/proc/self/fd/" + std::to_string(fd_); }

string LibraryFile::with_real_path(string text) const {
    const string fake = loader_path().string();
    for (auto at = text.find(fake); at != string::npos; at = text.find(fake, at + path_.string().size()))
        text.replace(at, fake.size(), path_.string());
    return text;
}

}  // namespace capsule
