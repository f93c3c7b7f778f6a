#include "gated_server.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "chunked_framing.hpp"

namespace capsule::serve {

namespace {

using Clock = std::chrono::steady_clock;

/// Runs each task on the calling thread: cpp-httplib's accept loop then hands a connection to
/// process_and_close_socket at once, which parks it in the gate.
class InlineQueue final : public httplib::TaskQueue {
public:
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
};

/// A connection's bytes for cpp-httplib: first those the gate read, then reads through a 4 KiB
/// buffer (its line reader asks for one byte at a time) under deadlines: each read or write waits at most read_timeout or
/// write_timeout; the whole head at most the gate's `head` limit; the body at most `body_grace`
/// plus one second per `min_body_rate` bytes read. A read past its deadline fails (-1), which
/// cpp-httplib treats as a connection cut short.
class RequestStream final : public httplib::Stream {
public:
    RequestStream(int fd, const ConnectionLimits& limits, std::string read)
        : fd_(fd), limits_(limits), buffer_(read.begin(), read.end()), end_(read.size()) {
        if (buffer_.size() < 4096) buffer_.resize(4096);
    }

    void begin_request() {
        body_ = false;
        timed_out_ = false;
        head_.clear();
        head_too_large_ = false;
        deadline_ = Clock::now() + limits_.gate.head;
    }
    void begin_body(bool chunked) {
        body_ = true;
        deadline_ = Clock::now() + limits_.body_grace;
        chunked_.reset();
        if (chunked) chunked_.emplace();
    }
    /// The chunked framing of the body read so far; none when the body is not chunked.
    const std::optional<ChunkedFraming>& chunked() const { return chunked_; }
    bool buffered() const { return begin_ < end_; }
    /// The head's bytes read so far (all of it once the body begins); empty when too large.
    std::string_view head() const { return head_too_large_ ? std::string_view{} : std::string_view(head_); }
    /// A read of this request failed because its deadline passed.
    bool timed_out() const { return timed_out_; }
    /// The bytes read but not yet taken: the start of a pipelined request.
    std::string leftover() const { return {buffer_.data() + begin_, end_ - begin_}; }

    bool is_readable() const override { return buffered() || wait(POLLIN, read_deadline()); }
    bool is_writable() const override { return wait(POLLOUT, Clock::now() + limits_.write_timeout); }

    ssize_t read(char* ptr, size_t size) override {
        if (!buffered()) {
            if (!wait(POLLIN, read_deadline())) {
                timed_out_ = true;
                return -1;
            }
            if (size >= buffer_.size()) return checked(ptr, kept(ptr, counted(receive(ptr, size))));
            const ssize_t n = counted(receive(buffer_.data(), buffer_.size()));
            if (n <= 0) return n;
            begin_ = 0;
            end_ = static_cast<std::size_t>(n);
        }
        const std::size_t n = std::min(size, end_ - begin_);
        std::memcpy(ptr, buffer_.data() + begin_, n);
        begin_ += n;
        return checked(ptr, kept(ptr, static_cast<ssize_t>(n)));
    }

    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override { address(::getpeername, ip, port); }
    void get_local_ip_and_port(std::string& ip, int& port) const override { address(::getsockname, ip, port); }
    socket_t socket() const override { return fd_; }

private:
    Clock::time_point read_deadline() const { return std::min(deadline_, Clock::now() + limits_.read_timeout); }

    /// Waits until the socket is ready for `events` or `deadline` passes.
    bool wait(short events, Clock::time_point deadline) const {
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left <= 0) return false;
            pollfd p{fd_, events, 0};
            const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
            if (r > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
            if (r < 0 && errno != EINTR) return false;
        }
    }

    ssize_t receive(char* ptr, std::size_t size) const {
        ssize_t n;
        do n = ::recv(fd_, ptr, size, 0);
        while (n < 0 && errno == EINTR);
        return n;
    }

    /// Keeps the bytes cpp-httplib takes for the head (it reads a head a byte at a time, never
    /// past its blank line), up to the gate's max_head_bytes.
    ssize_t kept(const char* ptr, ssize_t n) {
        if (body_ || n <= 0 || head_too_large_) return n;
        head_too_large_ = head_.size() + static_cast<std::size_t>(n) > limits_.gate.max_head_bytes;
        if (head_too_large_) head_.clear();
        else head_.append(ptr, static_cast<std::size_t>(n));
        return n;
    }

    /// A chunked body's bytes reach cpp-httplib only once ChunkedFraming has taken them: a read
    /// holding a framing fault fails (-1), so cpp-httplib's lenient parser never acts on it.
    ssize_t checked(const char* ptr, ssize_t n) {
        if (!body_ || !chunked_ || n <= 0) return n;
        chunked_->feed({ptr, static_cast<std::size_t>(n)});
        return chunked_->state() == ChunkedFraming::State::bad ? -1 : n;
    }

    /// Body bytes earn the body more time: one second per min_body_rate bytes.
    ssize_t counted(ssize_t n) {
        if (body_ && n > 0)
            deadline_ += std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(double(n) / limits_.min_body_rate));
        return n;
    }

    void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        char host[NI_MAXHOST], service[NI_MAXSERV];
        if (get(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
            ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, service, sizeof service,
                          NI_NUMERICHOST | NI_NUMERICSERV) != 0)
            return;
        ip = host;
        port = std::atoi(service);
    }

    int fd_;
    const ConnectionLimits& limits_;
    std::vector<char> buffer_;
    std::size_t begin_ = 0, end_ = 0;
    bool body_ = false, timed_out_ = false, head_too_large_ = false;
    std::string head_;
    std::optional<ChunkedFraming> chunked_;
    Clock::time_point deadline_{};
};

/// True when the whole of a request (request_bytes_needed) arrives on `fd` within `wait`
/// (peeked: nothing is consumed). A closed-loop client's next request on a kept-alive
/// connection usually does, and the worker then keeps the connection rather than passing it
/// through the gate (a wake-up of the gate's thread and a hand-over to a worker); anything
/// less, or a head that check_head refuses, still goes to the gate, so no worker waits on a slow
/// client and the gate answers every malformed head.
bool request_arrives_within(int fd, std::chrono::milliseconds wait, std::size_t max_body, std::size_t max_head) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
    static thread_local std::vector<char> peeked(65536);
    const ssize_t n = ::recv(fd, peeked.data(), peeked.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0) return false;
    const std::size_t needed = request_bytes_needed({peeked.data(), static_cast<std::size_t>(n)}, max_body, max_head);
    return needed > 0 && static_cast<std::size_t>(n) >= needed;
}

thread_local RequestStream* current_stream = nullptr;
thread_local bool close_requested = false;

/// Waiting connections each hold a descriptor: allow as many as the hard limit does.
void raise_open_files_limit() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
    }
}

}  // namespace

GatedServer::GatedServer(ConnectionLimits limits) : limits_(limits) {
    raise_open_files_limit();
    new_task_queue = [] { return new InlineQueue; };
    workers_ = std::make_unique<httplib::ThreadPool>(static_cast<std::size_t>(std::max(1, limits_.workers)));
    gate_ = std::make_unique<ConnectionGate>(limits_.gate, [this](int fd, std::string read) {
        workers_->enqueue([this, fd, read = std::move(read)] { serve_connection(fd, read); });
    });
}

GatedServer::~GatedServer() { drain(); }

void GatedServer::drain() {
    if (drained_) return;
    drained_ = true;
    gate_->stop();
    workers_->shutdown();  // runs what is queued, then joins
}

void GatedServer::close_after_response() { close_requested = true; }

bool GatedServer::read_timed_out() { return current_stream && current_stream->timed_out(); }

std::string_view GatedServer::request_head() { return current_stream ? current_stream->head() : std::string_view{}; }

void GatedServer::body_begins(bool chunked) {
    if (current_stream) current_stream->begin_body(chunked);
}

std::string GatedServer::chunked_fault(bool read_all) {
    if (!current_stream || !current_stream->chunked()) return {};
    const auto& framing = *current_stream->chunked();
    if (framing.state() == ChunkedFraming::State::bad) return framing.why();
    if (read_all && framing.state() != ChunkedFraming::State::done)
        return "malformed chunked body (RFC 9112 section 7.1): it ends before its last chunk and final CRLF";
    return {};
}

bool GatedServer::process_and_close_socket(socket_t sock) {
    gate_->add(sock);
    return true;
}

void GatedServer::serve_connection(socket_t sock, std::string read) {
    RequestStream stream(sock, limits_, std::move(read));
    current_stream = &stream;
    for (std::size_t served = 1;; ++served) {
        stream.begin_request();
        close_requested = false;
        bool closed_by_client = false;
        const bool last = served >= keep_alive_max_count_ || svr_sock_ == INVALID_SOCKET;
        const bool answered = process_request(stream, last, closed_by_client, setup_);
        if (!answered || closed_by_client || last || close_requested || svr_sock_ == INVALID_SOCKET) break;
        // The next request, when all of it is here already (pipelined, or sent at once), is
        // answered on this worker; otherwise the gate waits for it on no thread.
        std::string left = stream.leftover();
        const auto& gate = limits_.gate;
        const std::size_t needed = request_bytes_needed(left, gate.max_body_bytes, gate.max_head_bytes);
        if (left.empty() ? request_arrives_within(sock, std::chrono::milliseconds(1), gate.max_body_bytes, gate.max_head_bytes)
                         : needed > 0 && left.size() >= needed)
            continue;
        current_stream = nullptr;
        gate_->add(sock, std::move(left));
        return;
    }
    current_stream = nullptr;
    close_requested = false;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
}

}  // namespace capsule::serve
