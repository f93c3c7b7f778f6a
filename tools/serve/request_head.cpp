#include "request_head.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "v2_protocol.hpp"

namespace capsule::serve {

namespace {

/// Calls `line(text)` for each header line of `head` (after the request line, before the blank
/// line), without its CRLF, until `line` returns false. Lines end in CRLF only, as HeadScanner
/// reads them.
template <typename F>
void for_each_header_line(std::string_view head, F&& line) {
    std::size_t at = head.find("\r\n");
    while (at != std::string_view::npos) {
        const std::size_t next = head.find("\r\n", at + 2);
        if (next == std::string_view::npos) return;  // not a whole line: the head is cut
        const std::string_view text = head.substr(at + 2, next - at - 2);
        at = next;
        if (text.empty() || !line(text)) return;
    }
}

/// "the request line 'GET /...'" or "header line 'Host: ...'" for a message: the line's first
/// bytes (up to `end`).
std::string line_named(std::string_view bytes, std::size_t start, std::size_t end) {
    if (start == end && start > 0) return "an empty line in the head";
    const auto text = bytes.substr(start, std::min<std::size_t>(end - start, 60));
    return (start == 0 ? "the request line " : "header line ") + quoted_text(text) + (end - start > 60 ? "..." : "");
}

HeadVerdict refused(int status, std::string why) { return {0, status, std::move(why)}; }

bool is_tchar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
}

std::string_view trimmed(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

HeadVerdict HeadScanner::scan(std::string_view bytes, std::size_t max_head_bytes) {
    constexpr const char* kCrlf = " (lines end in CRLF only, RFC 9112 section 2.2)";
    for (; at_ < bytes.size(); ++at_) {
        const char c = bytes[at_];
        if (c == '\0') return refused(400, "a NUL byte in " + line_named(bytes, line_, at_) + " (RFC 9110 section 5.5)");
        if (c == '\n') return refused(400, "a bare LF (not after CR) ending " + line_named(bytes, line_, at_) + kCrlf);
        if (c == '\r') {
            if (at_ + 1 == bytes.size()) break;  // its LF has not arrived yet
            if (bytes[at_ + 1] != '\n')
                return refused(400, "a bare CR (not before LF) after " + line_named(bytes, line_, at_) + kCrlf);
            if (at_ == line_ && line_ > 0) return {at_ + 2, 0, {}};  // the blank line: the head is complete
            ++at_;
            line_ = at_ + 1;
            continue;
        }
        if (at_ + 3 - line_ > kMaxHeadLineBytes) {  // this line, with its CRLF, is over the limit
            const bool request_line = line_ == 0;
            return refused(request_line ? 414 : 431,
                           line_named(bytes, line_, at_ + 1) + " is over " + std::to_string(kMaxHeadLineBytes) +
                               " bytes (the limit of a " + (request_line ? "request" : "header") + " line)");
        }
    }
    if (bytes.size() >= max_head_bytes)
        return refused(431, "the request head is over " + std::to_string(max_head_bytes) +
                                " bytes without its end (a blank line)");
    return {};
}

HeadVerdict check_head(std::string_view bytes, std::size_t max_head_bytes) {
    return HeadScanner{}.scan(bytes, max_head_bytes);
}

bool same_name(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

std::string malformed_header_line(std::string_view head) {
    std::string why;
    for_each_header_line(head, [&](std::string_view line) {
        const auto colon = line.find(':');
        const auto name = line.substr(0, colon);
        if (line.front() == ' ' || line.front() == '\t')
            why = "header line " + quoted_text(line) + " starts with whitespace (obs-fold, RFC 9112 section 5.2)";
        else if (colon == std::string_view::npos)
            why = "header line " + quoted_text(line) + " has no colon";
        else if (name.empty() || !std::all_of(name.begin(), name.end(), is_tchar))
            why = "header name " + quoted_text(name) + " is not a token (RFC 9110 section 5.6.2; no whitespace " +
                  "before the colon, RFC 9112 section 5.1)";
        return why.empty();
    });
    return why;
}

std::vector<std::string_view> header_values(std::string_view head, std::string_view name) {
    std::vector<std::string_view> values;
    for_each_header_line(head, [&](std::string_view line) {
        const auto colon = line.find(':');
        if (colon != std::string_view::npos && same_name(line.substr(0, colon), name))
            values.push_back(trimmed(line.substr(colon + 1)));
        return true;
    });
    return values;
}

}  // namespace capsule::serve
