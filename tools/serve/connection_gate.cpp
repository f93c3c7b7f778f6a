#include "connection_gate.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <system_error>
#include <string>
#include <utility>

#include "request_head.hpp"
#include "v2_protocol.hpp"

namespace capsule::serve {

namespace {

constexpr auto npos = std::string_view::npos;

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

/// Sends a fixed response with the protocol's error object and `Connection: close`; best effort,
/// never blocking (a response this small fits the socket's send buffer).
void answer(int fd, int status, const std::string& why) {
    const char* reason = status == 400 ? "Bad Request" : status == 408 ? "Request Timeout" : status == 414 ? "URI Too Long"
                                                                     : "Request Header Fields Too Large";
    const std::string body = error_body(why);
    const std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                                 "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body;
    [[maybe_unused]] const auto n = ::send(fd, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/// Why a client whose request head arrived but whose body did not arrive in time is closed.
const std::string kBodyTimeout = "the request body did not arrive in time: it must arrive within --header-timeout plus "
                                 "one second per --min-body-rate bytes";

/// The body length a head declares when the gate may wait for the body: exactly one
/// Content-Length of plain digits, no Transfer-Encoding and no Expect; otherwise none (-1).
std::int64_t declared_length(std::string_view head) {
    if (!header_values(head, "Transfer-Encoding").empty() || !header_values(head, "Expect").empty()) return -1;
    const auto lengths = header_values(head, "Content-Length");
    if (lengths.size() != 1) return -1;
    const auto value = lengths.front();
    if (value.empty() || value.size() > 15 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return -1;
    return std::stoll(std::string(value));
}

/// The bytes a request whose head of `head` bytes is valid needs before a worker takes it.
std::size_t bytes_needed(std::string_view bytes, std::size_t head, std::size_t max_body) {
    const std::int64_t body = declared_length(bytes.substr(0, head));
    return body >= 0 && static_cast<std::uint64_t>(body) <= max_body ? head + static_cast<std::size_t>(body) : head;
}

}  // namespace

std::size_t request_bytes_needed(std::string_view bytes, std::size_t max_body, std::size_t max_head) {
    const auto head = check_head(bytes, max_head);
    return head.length == 0 ? 0 : bytes_needed(bytes, head.length, max_body);
}

ConnectionGate::ConnectionGate(GateLimits limits, std::function<void(int, std::string)> ready)
    : limits_(limits), ready_(std::move(ready)), chunk_(65536) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) fail("epoll_create1");
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) {
        ::close(epoll_);
        fail("eventfd");
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev) != 0) {
        ::close(wake_);
        ::close(epoll_);
        fail("epoll_ctl");
    }
    thread_ = std::thread([this] { loop(); });
}

ConnectionGate::~ConnectionGate() {
    stop();
    ::close(wake_);
    ::close(epoll_);
}

void ConnectionGate::add(int fd, std::string bytes) {
    const auto now = Clock::now();
    std::unique_lock lock(mutex_);
    if (stopped_ || waiting_.size() >= limits_.max_connections) {
        ::close(fd);
        return;
    }
    Waiting w;
    w.deadline = now + limits_.idle;
    w.first_byte = now;
    buffered_ += bytes.size();
    w.bytes = std::move(bytes);
    read_head(w);
    const Verdict verdict = judge(w);
    if (verdict == Verdict::ready) {
        buffered_ -= w.bytes.size();
        lock.unlock();
        ready_(fd, std::move(w.bytes));
        return;
    }
    auto& waiting = waiting_.emplace(fd, std::move(w)).first->second;
    // Edge-triggered: an event for each arrival of data, and one at once for data already there.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) drop(fd);
    else if (verdict == Verdict::refuse) refuse(fd, waiting, now);
}

void ConnectionGate::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return;
        stopped_ = true;
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    while (!waiting_.empty()) drop(waiting_.begin()->first);
}

void ConnectionGate::drop(int fd) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    const auto it = waiting_.find(fd);
    if (it != waiting_.end()) {
        buffered_ -= it->second.bytes.size();
        waiting_.erase(it);
    }
    ::close(fd);
}

/// Reads the head as far as it has arrived; once it is complete, sets the bytes the request needs
/// (a body too, while the gate's buffers have room for it); when it is malformed, the refusal.
void ConnectionGate::read_head(Waiting& w) const {
    if (w.head_bytes > 0 || w.refusal != 0) return;
    auto verdict = w.head.scan(w.bytes, limits_.max_head_bytes);
    if (verdict.status != 0) {
        w.refusal = verdict.status;
        w.why = std::move(verdict.why);
    } else if (verdict.length > 0) {
        const bool room = buffered_ + limits_.max_body_bytes <= limits_.max_buffered_bytes;
        w.head_bytes = verdict.length;
        w.needed = bytes_needed(w.bytes, verdict.length, room ? limits_.max_body_bytes : 0);
    }
}

/// Ready once the request's needed bytes are here; refused when its head is malformed or too
/// large; otherwise sets the deadline: `head` after the first byte, plus one second per
/// min_body_rate bytes of body read.
ConnectionGate::Verdict ConnectionGate::judge(Waiting& w) const {
    if (w.refusal != 0) return Verdict::refuse;
    if (w.needed > 0 && w.bytes.size() >= w.needed) return Verdict::ready;
    if (w.bytes.empty()) return Verdict::wait;  // the idle deadline stands
    const double body_s = w.head_bytes > 0 ? double(w.bytes.size() - w.head_bytes) / limits_.min_body_rate : 0.0;
    w.deadline = w.first_byte + limits_.head +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(body_s));
    return Verdict::wait;
}

/// Answers a refused request itself (cpp-httplib never sees it) and then only reads, for up to a
/// second and kMaxDiscarded bytes, what the client still sends: closing at once with unread bytes
/// would reset the connection, and the client could lose the answer. Under mutex_.
void ConnectionGate::refuse(int fd, Waiting& w, Clock::time_point now) {
    answer(fd, w.refusal, w.why);
    ::shutdown(fd, SHUT_WR);
    buffered_ -= w.bytes.size();
    w.bytes = std::string();
    w.closing = true;
    w.deadline = now + std::chrono::seconds(1);
}

/// Reads what `fd` has, without blocking, up to the bytes its request needs (what follows stays
/// in the kernel for the worker), and judges it. Under mutex_.
ConnectionGate::Verdict ConnectionGate::receive(int fd, Waiting& w, Clock::time_point now) {
    constexpr std::size_t kMaxDiscarded = std::size_t(1) << 20;
    bool closed = false;
    for (;;) {
        const std::size_t target = w.closing ? kMaxDiscarded : w.needed > 0 ? w.needed : limits_.max_head_bytes;
        if ((w.closing ? w.discarded : w.bytes.size()) >= target) {
            closed = w.closing;  // a refused client that keeps sending is closed
            break;
        }
        const auto want = std::min(chunk_.size(), target - (w.closing ? w.discarded : w.bytes.size()));
        const ssize_t n = ::recv(fd, chunk_.data(), want, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
            closed = true;
            break;
        }
        if (w.closing) {
            w.discarded += static_cast<std::size_t>(n);
            continue;
        }
        if (w.bytes.empty()) w.first_byte = now;
        w.bytes.append(chunk_.data(), static_cast<std::size_t>(n));
        buffered_ += static_cast<std::size_t>(n);
        read_head(w);
        if (w.refusal != 0) break;
    }
    if (w.closing) return closed ? Verdict::close : Verdict::wait;
    const Verdict verdict = judge(w);
    // The peer closed or failed: only a complete request is still answered, or a refusal.
    return closed && verdict == Verdict::wait ? Verdict::close : verdict;
}

void ConnectionGate::loop() {
    std::array<epoll_event, 64> events{};
    std::vector<std::pair<int, std::string>> ready;
    std::vector<int> expired;
    for (;;) {
        const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 50);
        const auto now = Clock::now();
        ready.clear();
        expired.clear();
        {
            std::lock_guard lock(mutex_);
            if (stopped_) return;
            for (int i = 0; i < n; ++i) {
                const int fd = events[i].data.fd;
                const auto it = waiting_.find(fd);
                if (fd == wake_ || it == waiting_.end()) continue;
                switch (receive(fd, it->second, now)) {
                case Verdict::wait:
                    break;
                case Verdict::close:
                    drop(fd);
                    break;
                case Verdict::refuse:
                    refuse(fd, it->second, now);
                    break;
                case Verdict::ready:
                    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
                    buffered_ -= it->second.bytes.size();
                    ready.emplace_back(fd, std::move(it->second.bytes));
                    waiting_.erase(it);
                    break;
                }
            }
            for (const auto& [fd, w] : waiting_)
                if (w.deadline <= now) expired.push_back(fd);
            for (int fd : expired) {
                const Waiting& w = waiting_.at(fd);
                if (!w.closing && w.head_bytes > 0) answer(fd, 408, kBodyTimeout);
                drop(fd);
            }
        }
        for (auto& [fd, bytes] : ready) ready_(fd, std::move(bytes));
    }
}

}  // namespace capsule::serve
