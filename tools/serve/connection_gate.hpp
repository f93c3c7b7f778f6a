// Holds accepted HTTP connections on no thread until their next request has arrived.
// cpp-httplib 0.11 gives each connection a worker thread for its whole life, including the wait
// for a request and the reads of its head and body, so clients that open connections and trickle
// bytes (slowloris, or a body sent a byte at a time) could occupy every worker. Here one epoll
// thread reads every waiting connection without blocking and hands a connection to `ready`, with
// the bytes it has read, only once a complete request head (up to the blank line after the
// headers) has arrived, and then also the whole body when the head declares one Content-Length
// of at most max_body_bytes (and the gate's buffers stay within max_buffered_bytes); a body sent
// chunked, or after `Expect: 100-continue`, or larger, is read by the worker under the minimum
// rate (gated_server.hpp). The gate looks at a head to know how many bytes to wait for and to
// refuse what cpp-httplib would read differently from a proxy; cpp-httplib parses it. A connection that sends nothing within `idle`, whose head is not
// complete within `head` after its first byte, or whose buffered body falls behind
// `min_body_rate` after that, is closed (with a 408 once its head is complete); so are
// connections past `max_connections`. The gate answers a head that check_head (request_head.hpp)
// refuses itself, with the cause, and closes the connection: a bare CR or LF or a NUL (400), a
// request line (414) or header line (431) over 8 KiB, a head over max_head_bytes (431).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "request_head.hpp"

namespace capsule::serve {

struct GateLimits {
    std::chrono::milliseconds idle{2000};  // no byte of a request yet (keep-alive idle)
    std::chrono::milliseconds head{10000};  // from a request's first byte to the end of its head
    double min_body_rate = 1 << 20;         // bytes per second, after `head`
    std::size_t max_head_bytes = 65536;
    std::size_t max_body_bytes = std::size_t(4) << 20;       // bodies buffered here, each
    std::size_t max_buffered_bytes = std::size_t(256) << 20;  // all connections' buffered bytes
    std::size_t max_connections = 10000;                      // waiting at once; more are closed
};

/// The bytes that a request starting at `bytes` needs before a worker takes it: 0 while its head
/// is incomplete or when check_head refuses it (the gate answers that); else the head's length,
/// plus the body's when the head declares exactly one Content-Length of at most `max_body`, no
/// Transfer-Encoding and no Expect header.
std::size_t request_bytes_needed(std::string_view bytes, std::size_t max_body, std::size_t max_head);

class ConnectionGate {
public:
    /// `ready(fd, bytes)` runs on the gate's thread and takes the connection over, with the bytes
    /// read from it so far (the start of its next request); it must not block. Raises
    /// std::system_error when epoll or the gate's thread cannot be made.
    ConnectionGate(GateLimits limits, std::function<void(int, std::string)> ready);
    ~ConnectionGate();
    ConnectionGate(const ConnectionGate&) = delete;
    ConnectionGate& operator=(const ConnectionGate&) = delete;

    /// Takes connection `fd` (a connected stream socket) over, with `bytes` already read from it,
    /// until its next request has arrived; thread-safe. After stop(), closes it at once.
    void add(int fd, std::string bytes = {});
    /// Closes every waiting connection (none has a request in flight) and ends the thread.
    void stop();

private:
    using Clock = std::chrono::steady_clock;
    struct Waiting {
        Clock::time_point deadline;
        Clock::time_point first_byte;
        std::string bytes;           // read so far
        HeadScanner head;            // reads the head as it arrives
        std::size_t head_bytes = 0;  // the head's length once it is complete
        std::size_t needed = 0;      // the bytes the request needs, once its head is complete
        int refusal = 0;             // the status answered when the head is refused, and why
        std::string why;
        bool closing = false;        // refused and answered: what the client still sends is discarded
        std::size_t discarded = 0;
    };
    enum class Verdict { wait, close, ready, refuse };
    void loop();
    Verdict receive(int fd, Waiting& w, Clock::time_point now);
    Verdict judge(Waiting& w) const;
    void read_head(Waiting& w) const;
    void refuse(int fd, Waiting& w, Clock::time_point now);
    void drop(int fd);  // under mutex_: forget and close

    GateLimits limits_;
    std::function<void(int, std::string)> ready_;
    int epoll_ = -1, wake_ = -1;
    std::mutex mutex_;
    std::unordered_map<int, Waiting> waiting_;
    std::size_t buffered_ = 0;  // bytes held in waiting_
    bool stopped_ = false;
    std::vector<char> chunk_;  // the gate thread's read buffer
    std::thread thread_;
};

}  // namespace capsule::serve
