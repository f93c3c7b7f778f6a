// SHA-256 (FIPS 180-4) of bytes, as lowercase hex: the identity of a plugin library, an evidence
// record or a model file. Nettle computes it (with the CPU's SHA extensions where present). Nettle
// rather than OpenSSL's libcrypto: loading libcrypto cost every `capsule` command 1.5 ms of
// relocations, and its first digest another 0.6 to 1.6 ms of provider set-up. Internal to the core.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nettle/sha2.h>

namespace capsule::detail {

/// An incremental SHA-256: update() any number of times, then hex() once.
class Sha256 {
public:
    Sha256() { sha256_init(&ctx_); }
    void update(const void* data, std::size_t size) {
        sha256_update(&ctx_, size, static_cast<const std::uint8_t*>(data));
    }
    /// The digest of everything given to update(), as 64 lowercase hexadecimal digits.
    std::string hex();

private:
    sha256_ctx ctx_;
};

/// The SHA-256 of `bytes`, as 64 lowercase hexadecimal digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace capsule::detail
