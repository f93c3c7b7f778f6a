#include "request_head.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "v2_protocol.hpp"

namespace capsule::serve {

namespace {

/// Calls `line(text)` for each header line of `head` (after the request line, before the blank
/// line), its CR removed, until `line` returns false.
template <typename F>
void for_each_header_line(std::string_view head, F&& line) {
    std::size_t at = head.find('\n');
    while (at != std::string_view::npos && at + 1 < head.size()) {
        const std::size_t next = head.find('\n', at + 1);
        if (next == std::string_view::npos) return;  // not a whole line: the head is cut
        std::string_view text = head.substr(at + 1, next - at - 1);
        at = next;
        if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
        if (text.empty() || !line(text)) return;
    }
}

bool is_tchar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
}

std::string_view trimmed(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

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
