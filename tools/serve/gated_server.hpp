// cpp-httplib's request parsing and routing on connection handling of our own. cpp-httplib 0.11
// gives each connection a worker thread for its whole life and has no deadline for a request's
// head or body, so a few clients that trickle bytes could hold every worker. GatedServer accepts
// with cpp-httplib, parks each connection in a ConnectionGate (no thread) until its next request
// has arrived (the head, and a body of up to max_body_bytes), and only then runs cpp-httplib's
// process_request on a worker, through a RequestStream that serves the bytes the gate read and
// reads anything more (a larger or chunked body) at a minimum rate; between keep-alive requests
// the connection goes back to the gate.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "connection_gate.hpp"

namespace capsule::serve {

struct ConnectionLimits {
    GateLimits gate;
    int workers = 16;  // requests being read, computed or answered at once
    /// A request body must arrive within `body_grace` plus one second per `min_body_rate` bytes.
    std::chrono::milliseconds body_grace{10000};
    double min_body_rate = 1 << 20;  // bytes per second
    std::chrono::seconds read_timeout{5}, write_timeout{5};  // per read or write call
};

class GatedServer : public httplib::Server {
public:
    /// Raises std::system_error when the gate cannot be made.
    explicit GatedServer(ConnectionLimits limits);
    ~GatedServer() override;

    /// After stop() and listen_after_bind's return: closes the connections waiting for a request
    /// (none has one in flight) and returns once every request in flight is answered.
    void drain();

    /// For handlers: the connection of the request this thread is answering closes once the
    /// response is written (its body, or part of it, was left unread, or its framing is in doubt).
    static void close_after_response();
    /// For the pre-routing handler: the request's head has been read; its body is read from now
    /// on under the minimum rate and, when `chunked`, only as far as its framing is valid
    /// (ChunkedFraming, chunked_framing.hpp).
    static void body_begins(bool chunked);
    /// For handlers, after reading a chunked body: why its framing is malformed, or "" (also for
    /// a body that is not chunked). `read_all`: cpp-httplib took the body as complete (its
    /// parser may end one early).
    static std::string chunked_fault(bool read_all);
    /// For handlers: a read of the request this thread is answering failed on its deadline
    /// (read_timeout, or the body's minimum rate).
    static bool read_timed_out();
    /// For the expect-100 and pre-routing handlers: the request's head (request line, header
    /// lines, blank line) as it arrived, which cpp-httplib's parsed headers do not show in full
    /// (it drops a line without a colon or with an empty value). Empty when the head is over the
    /// gate's max_head_bytes.
    static std::string_view request_head();

    /// Runs on every request once cpp-httplib has parsed its head and before anything else
    /// (process_request's hook): the one place a request may be changed.
    void set_request_setup(std::function<void(httplib::Request&)> setup) { setup_ = std::move(setup); }

private:
    bool process_and_close_socket(socket_t sock) override;
    void serve_connection(socket_t sock, std::string read);

    ConnectionLimits limits_;
    std::unique_ptr<httplib::ThreadPool> workers_;
    std::unique_ptr<ConnectionGate> gate_;
    bool drained_ = false;
    std::function<void(httplib::Request&)> setup_;
};

}  // namespace capsule::serve
