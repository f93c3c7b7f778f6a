// A request's head as it arrived (GatedServer::request_head), for what cpp-httplib 0.11's header
// parser lets through or hides: it keeps a name with whitespace before the colon
// ("Transfer-Encoding : chunked") and an obs-fold line that holds a colon as oddly named headers,
// and drops a line without a colon or with an empty value. cpp-httplib still parses the request;
// this only checks its header lines and reads values it dropped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace capsule::serve {

/// The longest request line or header line, CRLF included: cpp-httplib 0.11's
/// CPPHTTPLIB_REQUEST_URI_MAX_LENGTH and CPPHTTPLIB_HEADER_MAX_LENGTH.
inline constexpr std::size_t kMaxHeadLineBytes = 8192;

/// What the bytes at the start of a request say of its head so far.
struct HeadVerdict {
    std::size_t length = 0;  // through the blank line once complete and valid; else 0
    int status = 0;          // when refused: 400, 414 or 431
    std::string why;         // when refused: the cause, naming the line
};

/// Reads a request head as its bytes arrive, resuming where the last call stopped. Lines end in
/// CRLF only: cpp-httplib 0.11 skips a line that does not and reads on, so a bare LF or CR would
/// end the head for a proxy (RFC 9112 section 2.2 lets one accept bare LF) and not for it.
/// Refuses with 400 a bare LF, a bare CR or a NUL anywhere in the head (RFC 9112 section 2.2,
/// RFC 9110 section 5.5); with 414 a request line, and with 431 a header line, over
/// kMaxHeadLineBytes; with 431 a head not complete within `max_head_bytes`.
class HeadScanner {
public:
    /// `bytes`: everything received so far (a prefix of the previous call's plus what followed).
    HeadVerdict scan(std::string_view bytes, std::size_t max_head_bytes);

private:
    std::size_t at_ = 0, line_ = 0;  // next byte to read; start of the line being read
};

/// HeadScanner's verdict on `bytes` at once.
HeadVerdict check_head(std::string_view bytes, std::size_t max_head_bytes);

/// Why the head's header lines are malformed (RFC 9112 5.1, 5.2), or "" when they are not: a
/// line (CRLF-terminated, as HeadScanner reads lines) that starts with whitespace (obs-fold), has no colon, or whose field name is not a token
/// (RFC 9110 5.6.2; whitespace before the colon).
std::string malformed_header_line(std::string_view head);

/// Whether two header field names are the same (ASCII case-insensitive, RFC 9110 5.1).
bool same_name(std::string_view a, std::string_view b);

/// The values of every header line named `name` (case-insensitive), without the whitespace
/// around them, in order; "" for a line with an empty value.
std::vector<std::string_view> header_values(std::string_view head, std::string_view name);

}  // namespace capsule::serve
