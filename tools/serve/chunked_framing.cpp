#include "chunked_framing.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "request_head.hpp"
#include "v2_protocol.hpp"

namespace capsule::serve {

namespace {

// A chunk-size line with its extensions, and a trailer line, may hold at most this many bytes.
constexpr std::size_t kMaxLineBytes = 4096;

bool is_tchar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
}
bool is_ws(char c) { return c == ' ' || c == '\t'; }
int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/// Skips a token at `at`; false when there is none.
bool skip_token(std::string_view s, std::size_t& at) {
    const std::size_t start = at;
    while (at < s.size() && is_tchar(s[at])) ++at;
    return at > start;
}

/// Skips a quoted-string (RFC 9110 section 5.6.4) at `at`; false when malformed.
bool skip_quoted(std::string_view s, std::size_t& at) {
    if (at >= s.size() || s[at] != '"') return false;
    for (++at; at < s.size(); ++at) {
        auto c = static_cast<unsigned char>(s[at]);
        if (c == '"') return ++at, true;
        if (c == '\\') {  // quoted-pair
            if (++at == s.size()) return false;
            c = static_cast<unsigned char>(s[at]);
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
    }
    return false;
}

/// Whether `ext` is a chunk-ext: *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
bool valid_extensions(std::string_view ext) {
    std::size_t at = 0;
    auto ws = [&] { while (at < ext.size() && is_ws(ext[at])) ++at; };
    for (ws(); at < ext.size(); ws()) {
        if (ext[at++] != ';') return false;
        ws();
        if (!skip_token(ext, at)) return false;
        ws();
        if (at < ext.size() && ext[at] == '=') {
            ++at;
            ws();
            if (!(at < ext.size() && ext[at] == '"' ? skip_quoted(ext, at) : skip_token(ext, at))) return false;
        }
    }
    return true;
}

}  // namespace

std::size_t ChunkedFraming::feed(std::string_view bytes) {
    std::size_t used = 0;
    while (used < bytes.size() && state_ == State::more) {
        if (step_ == Step::data) {  // the data, in one piece
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(size_, bytes.size() - used));
            used += n;
            size_ -= n;
            if (size_ == 0) step_ = Step::data_cr;
            continue;
        }
        if (!step(bytes[used++])) break;
    }
    return used;
}

bool ChunkedFraming::fail(std::string why) {
    state_ = State::bad;
    why_ = "malformed chunked body (RFC 9112 section 7.1): " + std::move(why);
    return false;
}

/// The chunk-size line has ended (CR): its size was read; checks its extensions.
bool ChunkedFraming::end_size_line() {
    if (!valid_extensions(line_))
        return fail("chunk " + std::to_string(chunks_ + 1) + ": extension " + quoted_text(line_) +
                    " is not ;name[=value] (a token, or a quoted string)");
    step_ = Step::size_lf;
    return true;
}

bool ChunkedFraming::step(char c) {
    const std::string chunk = "chunk " + std::to_string(chunks_ + 1);
    switch (step_) {
    case Step::size:
        if (const int v = hex_value(c); v >= 0) {
            if (digits_ > 0 || v > 0) ++digits_;
            if (digits_ > 16) return fail(chunk + ": its size overflows 64 bits");
            size_ = size_ * 16 + static_cast<std::uint64_t>(v);
            line_ += c;
            return true;
        }
        if (line_.empty())
            return fail(chunk + ": its size line starts with " + quoted_text(std::string_view(&c, 1)) +
                        ", not a hex digit (the size is 1*HEXDIG: no sign, prefix or space)");
        line_.clear();
        if (c == '\r') return end_size_line();
        if (c == '\n') return fail(chunk + ": its size line ends in a bare LF (lines end in CRLF)");
        if (c != ';' && !is_ws(c))
            return fail(chunk + ": " + quoted_text(std::string_view(&c, 1)) + " after its size (only a chunk extension, "
                                                                        "';name[=value]', or CRLF may follow)");
        line_ += c;
        step_ = Step::ext;
        return true;
    case Step::ext:
        if (c == '\r') return end_size_line();
        if (c == '\n') return fail(chunk + ": its size line ends in a bare LF (lines end in CRLF)");
        if (line_.size() >= kMaxLineBytes) return fail(chunk + ": its extensions are over 4096 bytes");
        line_ += c;
        return true;
    case Step::size_lf:
        if (c != '\n') return fail(chunk + ": a bare CR in its size line (lines end in CRLF)");
        line_.clear();
        digits_ = 0;
        step_ = size_ == 0 ? Step::trailer : Step::data;
        return true;
    case Step::data:
        return true;  // feed() takes data in one piece
    case Step::data_cr:
    case Step::data_lf:
        if (c != (step_ == Step::data_cr ? '\r' : '\n'))
            return fail(chunk + ": its data is not followed by CRLF (the size does not match the data)");
        if (step_ == Step::data_lf) ++chunks_, step_ = Step::size;
        else step_ = Step::data_lf;
        return true;
    case Step::trailer:
        if (c == '\r') {
            step_ = line_.empty() ? Step::final_lf : Step::trailer_lf;
            return true;
        }
        if (c == '\n') return fail("a bare LF after the last chunk (lines end in CRLF)");
        if (c == '\0') return fail("a NUL byte in a trailer field");
        if (line_.size() >= kMaxLineBytes) return fail("a trailer field over 4096 bytes");
        line_ += c;
        return true;
    case Step::trailer_lf:
        if (c != '\n') return fail("a bare CR in a trailer field (lines end in CRLF)");
        if (const auto why = malformed_header_line("X\r\n" + line_ + "\r\n\r\n"); !why.empty())
            return fail("after the last chunk, " + why + " (a trailer field, or the final CRLF, expected)");
        return fail("trailer field " + quoted_text(line_) +
                    ": trailer fields are not supported (cpp-httplib 0.11 cannot read them)");
    case Step::final_lf:
        if (c != '\n') return fail("a bare CR after the last chunk (lines end in CRLF)");
        state_ = State::done;
        return true;
    }
    return true;
}

}  // namespace capsule::serve
