#include "body_coding.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <new>
#include <string>

namespace capsule::serve {

struct BodyDecoder::Zlib {
    z_stream stream{};
    bool ended = false;  // the last member or stream is whole
};

std::optional<ContentCoding> content_coding(std::string_view value) {
    std::string name(value);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (name.empty() || name == "identity") return ContentCoding::identity;
    if (name == "gzip" || name == "x-gzip") return ContentCoding::gzip;
    if (name == "deflate") return ContentCoding::deflate;
    return std::nullopt;
}

BodyDecoder::BodyDecoder(ContentCoding coding) : coding_(coding) {
    if (coding == ContentCoding::identity) return;
    zlib_ = std::make_unique<Zlib>();
    // 15 + 32: a zlib or gzip header, detected (deflate bodies are zlib streams, RFC 9110 8.4.1.2).
    if (inflateInit2(&zlib_->stream, 15 + 32) != Z_OK) throw std::bad_alloc();
}

BodyDecoder::~BodyDecoder() {
    if (zlib_) inflateEnd(&zlib_->stream);
}

bool BodyDecoder::feed(std::string_view data, const std::function<bool(std::string_view)>& out) {
    if (!zlib_) return out(data);
    auto& z = *zlib_;
    z.stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    z.stream.avail_in = static_cast<uInt>(data.size());
    std::array<char, 16384> buffer;
    while (z.stream.avail_in > 0) {
        if (z.ended) {
            // Another gzip member follows (RFC 1952 2.2); a deflate body is one zlib stream.
            if (coding_ != ContentCoding::gzip || inflateReset(&z.stream) != Z_OK) return false;
            z.ended = false;
        }
        z.stream.next_out = reinterpret_cast<Bytef*>(buffer.data());
        z.stream.avail_out = static_cast<uInt>(buffer.size());
        const int ret = inflate(&z.stream, Z_NO_FLUSH);
        if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) return false;
        const std::size_t n = buffer.size() - z.stream.avail_out;
        if (n > 0 && !out({buffer.data(), n})) return false;
        if (ret == Z_STREAM_END) z.ended = true;
        else if (ret == Z_BUF_ERROR && n == 0) return false;  // no progress possible
    }
    // The input is taken; inflate may still hold output of it.
    while (!z.ended) {
        z.stream.next_out = reinterpret_cast<Bytef*>(buffer.data());
        z.stream.avail_out = static_cast<uInt>(buffer.size());
        const int ret = inflate(&z.stream, Z_NO_FLUSH);
        const std::size_t n = buffer.size() - z.stream.avail_out;
        if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) return false;
        if (n > 0 && !out({buffer.data(), n})) return false;
        if (ret == Z_STREAM_END) z.ended = true;
        if (n == 0) break;
    }
    return true;
}

bool BodyDecoder::complete() const { return !zlib_ || zlib_->ended; }

}  // namespace capsule::serve
