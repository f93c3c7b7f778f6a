#include "sha256.hpp"

namespace capsule::detail {

std::string Sha256::hex() {
    std::uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx_, sizeof digest, digest);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(2 * sizeof digest, '0');
    for (std::size_t i = 0; i < sizeof digest; ++i) {
        out[2 * i] = kHex[digest[i] >> 4];
        out[2 * i + 1] = kHex[digest[i] & 15];
    }
    return out;
}

std::string sha256_hex(std::string_view bytes) {
    Sha256 hash;
    hash.update(bytes.data(), bytes.size());
    return hash.hex();
}

}  // namespace capsule::detail
