// Shared by the libFuzzer targets: run one input, accept capsule::Error as the correct refusal of
// malformed input, and abort (a crash libFuzzer records) on any other exception.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "capsule/error.hpp"
#include "capsule/registry.hpp"

namespace capsule::fuzz {

/// The reference plugin's manifest from the source tree in a manifests-only host (no library is
/// ever opened), built once: what planning under checked_cpu sees.
inline const PluginHost& reference_manifests_host() {
    static const PluginHost host = [] {
        PluginHostOptions options;
        options.load = LoadPolicy::manifests_only;
        return PluginHost::from_manifests(
            {load_manifest(std::filesystem::path(CAPSULE_SOURCE_DIR) / "plugins/cpu/reference.capsule.json")},
            options);
    }();
    return host;
}

/// Runs `body`; a capsule::Error is the expected outcome for bad input (it must carry a message).
/// Any other exception is a fault: it is printed and the process aborts.
template <typename F>
void expect_only_capsule_errors(F&& body) {
    try {
        body();
    } catch (const capsule::Error& e) {
        if (std::string_view(e.what()).empty()) {
            std::fprintf(stderr, "fuzz: capsule::Error with an empty message\n");
            std::abort();
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz: unexpected exception (not capsule::Error): %s\n", e.what());
        std::abort();
    } catch (...) {
        std::fprintf(stderr, "fuzz: unexpected non-std exception\n");
        std::abort();
    }
}

/// Reads every byte of a buffer, so that AddressSanitizer checks it is as large as claimed.
inline void touch(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const volatile unsigned char*>(data);
    unsigned sum = 0;
    for (std::size_t i = 0; i < size; ++i) sum += bytes[i];
    __asm__ volatile("" : : "r"(sum) : "memory");
}

/// A regular file in memory (memfd) that the path-taking readers can open by name
/// (`/proc/self/fd/N`); rewritten for each input.
class MemoryFile {
public:
    MemoryFile() : fd_(memfd_create("capsule-fuzz", 0)) {
        if (fd_ < 0) {
            std::perror("memfd_create");
            std::abort();
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    const std::filesystem::path& write(const std::uint8_t* data, std::size_t size) {
        if (ftruncate(fd_, 0) != 0) std::abort();
        std::size_t done = 0;
        while (done < size) {
            const auto n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
            if (n <= 0) std::abort();
            done += static_cast<std::size_t>(n);
        }
        return path_;
    }

private:
    int fd_;
    std::filesystem::path path_;
};

}  // namespace capsule::fuzz
