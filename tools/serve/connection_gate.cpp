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

namespace capsule::serve {

namespace {

constexpr auto npos = std::string_view::npos;

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

/// Tells a client whose request head arrived but whose body did not arrive in time why its
/// connection closes (HTTP 408, the protocol's error object); best effort, never blocking.
void answer_timeout(int fd) {
    static const std::string body =
        R"({"error":"the request body did not arrive in time: it must arrive within --header-timeout plus one )"
        R"(second per --min-body-rate bytes"})";
    static const std::string response = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                                        "Connection: close\r\nContent-Length: " +
                                        std::to_string(body.size()) + "\r\n\r\n" + body;
    [[maybe_unused]] const auto n = ::send(fd, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/// The length of the head at the start of `bytes` (through its blank line, CRLF or, as
/// cpp-httplib also accepts, a bare LF), or 0 while it is incomplete.
std::size_t head_length(std::string_view bytes) {
    const auto crlf = bytes.find("\n\r\n"), lf = bytes.find("\n\n");
    const std::size_t end = std::min(crlf == npos ? npos : crlf + 3, lf == npos ? npos : lf + 2);
    return end == npos ? 0 : end;
}

/// The body length a head declares when the gate may wait for the body: exactly one
/// Content-Length of plain digits, no Transfer-Encoding and no Expect; otherwise none (-1).
std::int64_t declared_length(std::string_view head) {
    std::int64_t length = -1;
    int lengths = 0;
    std::size_t at = head.find('\n');  // skip the request line
    while (at != npos && at + 1 < head.size()) {
        const std::size_t next = head.find('\n', at + 1);
        std::string_view line = head.substr(at + 1, (next == npos ? head.size() : next) - at - 1);
        at = next;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const auto colon = line.find(':');
        if (colon == npos) continue;
        const auto name = line.substr(0, colon);
        auto value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
        if (same_name(name, "transfer-encoding") || same_name(name, "expect")) return -1;
        if (!same_name(name, "content-length")) continue;
        ++lengths;
        if (value.empty() || value.size() > 15 ||
            !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return -1;
        length = std::stoll(std::string(value));
    }
    return lengths == 1 ? length : -1;
}

}  // namespace

std::size_t request_bytes_needed(std::string_view bytes, std::size_t max_body) {
    const std::size_t head = head_length(bytes);
    if (head == 0) return 0;
    const std::int64_t body = declared_length(bytes.substr(0, head));
    return body >= 0 && static_cast<std::uint64_t>(body) <= max_body ? head + static_cast<std::size_t>(body) : head;
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
    if (!w.bytes.empty()) {
        w.needed = needed(w.bytes);
        if (judge(w) == Verdict::ready) {
            buffered_ -= w.bytes.size();
            lock.unlock();
            ready_(fd, std::move(w.bytes));
            return;
        }
    }
    waiting_.emplace(fd, std::move(w));
    // Edge-triggered: an event for each arrival of data, and one at once for data already there.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) drop(fd);
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

/// request_bytes_needed, waiting for a body too while the gate's buffers have room for it.
std::size_t ConnectionGate::needed(std::string_view bytes) const {
    const bool room = buffered_ + limits_.max_body_bytes <= limits_.max_buffered_bytes;
    return request_bytes_needed(bytes, room ? limits_.max_body_bytes : 0);
}

/// Ready once the request's needed bytes are here (or a head of max_head_bytes is not complete);
/// otherwise sets the deadline: `head` after the first byte, plus one second per min_body_rate
/// bytes of body read.
ConnectionGate::Verdict ConnectionGate::judge(Waiting& w) const {
    if (w.needed > 0 ? w.bytes.size() >= w.needed : w.bytes.size() >= limits_.max_head_bytes) return Verdict::ready;
    if (w.bytes.empty()) return Verdict::wait;  // the idle deadline stands
    const std::size_t head = head_length(w.bytes);
    const double body_s = head > 0 ? double(w.bytes.size() - head) / limits_.min_body_rate : 0.0;
    w.deadline = w.first_byte + limits_.head +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(body_s));
    return Verdict::wait;
}

/// Reads what `fd` has, without blocking, up to the bytes its request needs (what follows stays
/// in the kernel for the worker), and judges it. Under mutex_.
ConnectionGate::Verdict ConnectionGate::receive(int fd, Waiting& w, Clock::time_point now) {
    bool closed = false;
    for (;;) {
        const std::size_t target = w.needed > 0 ? w.needed : limits_.max_head_bytes;
        if (w.bytes.size() >= target) break;
        const ssize_t n = ::recv(fd, chunk_.data(), std::min(chunk_.size(), target - w.bytes.size()), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
            closed = true;
            break;
        }
        if (w.bytes.empty()) w.first_byte = now;
        w.bytes.append(chunk_.data(), static_cast<std::size_t>(n));
        buffered_ += static_cast<std::size_t>(n);
        if (w.needed == 0) w.needed = needed(w.bytes);
    }
    const Verdict verdict = judge(w);
    // The peer closed or failed: only a complete request is still answered.
    return closed && verdict != Verdict::ready ? Verdict::close : verdict;
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
                if (head_length(waiting_.at(fd).bytes) > 0) answer_timeout(fd);
                drop(fd);
            }
        }
        for (auto& [fd, bytes] : ready) ready_(fd, std::move(bytes));
    }
}

}  // namespace capsule::serve
