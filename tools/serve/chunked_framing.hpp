// Strict validation of a chunked request body (RFC 9112 section 7.1) before cpp-httplib reads it.
// cpp-httplib 0.11 parses chunk sizes with strtoul ("0x5f", " 5f", "+5f", "-0" and "5f zz" all
// pass), takes a bare LF as a line end, and ends the body at the first line after a chunk's data
// that is not CRLF: what followed was read as another request (request smuggling). cpp-httplib
// still parses the body; this only checks the bytes it is given, in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace capsule::serve {

class ChunkedFraming {
public:
    enum class State { more, done, bad };

    /// Takes the body's next bytes; returns how many of them belong to the body (all, unless it
    /// ends within them). Once bad, takes nothing more and why() names the fault: a chunk size
    /// that is not 1*HEXDIG or overflows 64 bits, a chunk extension that is not `;name[=value]`
    /// (token or quoted-string, optional whitespace around ";" and "="), a line not ended by
    /// CRLF, chunk data not followed by CRLF, a malformed trailer field, or any trailer field
    /// (cpp-httplib 0.11 cannot read them: not supported).
    std::size_t feed(std::string_view bytes);
    State state() const { return state_; }
    const std::string& why() const { return why_; }

private:
    enum class Step { size, ext, size_lf, data, data_cr, data_lf, trailer, trailer_lf, final_lf };
    bool step(char c);  // false once bad
    bool fail(std::string why);
    bool end_size_line();

    State state_ = State::more;
    Step step_ = Step::size;
    std::string line_;             // the chunk-size line, or the trailer line, so far
    std::uint64_t size_ = 0;       // the chunk's size, then its data bytes left
    std::size_t digits_ = 0;       // significant hex digits of the size
    std::uint64_t chunks_ = 0;     // chunks read, for messages
    std::string why_;
};

}  // namespace capsule::serve
