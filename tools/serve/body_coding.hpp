// Content-codings of request bodies (RFC 9110 8.4): identity, gzip and deflate, named in any
// case. The server decodes bodies itself, with zlib, rather than leave it to cpp-httplib 0.11,
// whose decoder matches the names case-sensitively and fails on a gzip body of more than one
// member (RFC 1952 allows several, as `cat a.gz b.gz` makes).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string_view>

namespace capsule::serve {

enum class ContentCoding { identity, gzip, deflate };

/// The coding a Content-Encoding value names ("" is identity), or nullopt for any other value
/// (another coding, or a list of codings); x-gzip is gzip (RFC 9110 8.4.1.3).
std::optional<ContentCoding> content_coding(std::string_view value);

/// Decodes one body, fed in pieces.
class BodyDecoder {
public:
    /// Raises std::bad_alloc when zlib cannot allocate its state.
    explicit BodyDecoder(ContentCoding coding);
    ~BodyDecoder();
    BodyDecoder(const BodyDecoder&) = delete;
    BodyDecoder& operator=(const BodyDecoder&) = delete;

    /// Decodes the next piece of the body, passing decoded bytes to `out` as they come (it returns
    /// false to stop: the caller bounds the decoded size there, against decompression bombs).
    /// Returns false when the data is not of the coding or `out` stopped.
    bool feed(std::string_view data, const std::function<bool(std::string_view)>& out);
    /// Whether the bytes fed so far end where a whole gzip member or deflate stream ends.
    bool complete() const;

private:
    struct Zlib;
    ContentCoding coding_;
    std::unique_ptr<Zlib> zlib_;  // null for identity
};

}  // namespace capsule::serve
