// Probing a plugin library in a child process (DESIGN.md section 10, "Loading is lazy"): the
// child opens, checks, initialises and probes the library and reports back through a pipe; the
// parent turns a crash or a hang into the plugin's status instead of dying or hanging with it.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capsule/child_process.hpp"
#include "plugin_loader.hpp"

namespace capsule {

using std::string;

namespace {

/// Child side: load and probe, write one JSON object to `fd`.
void probe_in_child(const PluginHost& host, const PluginRecord& record, int fd) {
    nlohmann::json out;
    auto outcome = host.library(record);
    if (outcome.plugin) {
        auto probe = outcome.plugin->probe();
        out = {{"loaded", true}, {"usable", probe.usable}, {"reason", probe.reason}};
    } else {
        out = {{"loaded", false}, {"failure", outcome.failure}};
    }
    write_all(fd, out.dump());
}

string seconds_text(std::chrono::milliseconds timeout) {
    const double s = static_cast<double>(timeout.count()) / 1000.0;
    std::ostringstream text;
    text << (std::floor(s) == s ? static_cast<long long>(s) : s);
    return text.str();
}

/// Reads everything the child writes until it closes the pipe or the deadline passes. Returns
/// false on timeout.
bool read_until_closed(int fd, std::chrono::steady_clock::time_point deadline, string& text) {
    char buffer[4096];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return ready < 0 ? true : false;
        const auto n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return true;
        text.append(buffer, static_cast<std::size_t>(n));
    }
}

}  // namespace

bool write_all(int fd, const string& text) {
    for (std::size_t done = 0; done < text.size();) {
        const auto n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

string ChildProcessOutcome::describe(std::chrono::milliseconds timeout) const {
    switch (end) {
        case End::exited: return exit_status == 0 ? "" : "exited with status " + std::to_string(exit_status);
        case End::crashed: return "crashed (signal " + std::to_string(signal) + ", " + strsignal(signal) + ")";
        case End::timed_out: return "timed out after " + seconds_text(timeout) + " s";
        case End::not_started: return error;
    }
    return error;
}

ChildProcessOutcome run_in_child_process(std::chrono::milliseconds timeout,
                                         const std::function<void(int fd)>& work) {
    ChildProcessOutcome out;
    int fds[2];
    if (::pipe(fds) != 0) {
        out.error = string("cannot create a pipe: ") + std::strerror(errno);
        return out;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        out.error = string("cannot fork: ") + std::strerror(errno);
        return out;
    }
    if (pid == 0) {
        ::close(fds[0]);
        int status = 0;
        try {
            work(fds[1]);
        } catch (...) {
            status = 2;
        }
        _exit(status);
    }
    ::close(fds[1]);
    const bool finished = read_until_closed(fds[0], std::chrono::steady_clock::now() + timeout, out.output);
    ::close(fds[0]);
    if (!finished) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!finished) {
        out.end = ChildProcessOutcome::End::timed_out;
    } else if (WIFSIGNALED(status)) {
        out.end = ChildProcessOutcome::End::crashed;
        out.signal = WTERMSIG(status);
    } else {
        out.end = ChildProcessOutcome::End::exited;
        out.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    return out;
}

PluginRecord PluginHost::probe_isolated(const PluginRecord& record,
                                        std::chrono::milliseconds timeout) const {
    PluginRecord result = record;
    if (record.status != PluginStatus::available && record.status != PluginStatus::loaded) return result;
    auto fail = [&](string reason) {
        result.status = PluginStatus::failed;
        result.failure = std::move(reason);
        return result;
    };
    const auto child = run_in_child_process(timeout, [&](int fd) { probe_in_child(*this, record, fd); });
    if (child.end == ChildProcessOutcome::End::not_started) return fail(child.error + " to probe it");
    if (auto why = child.describe(timeout); !why.empty()) return fail(why + " while loading or probing");
    const auto out = nlohmann::json::parse(child.output, nullptr, false);
    if (out.is_discarded() || !out.is_object())
        return fail("the probing child process reported nothing readable");
    if (!out.value("loaded", false)) return fail(out.value("failure", string("unknown failure")));
    result.status = PluginStatus::loaded;
    result.probe = ProbeResult{out.value("usable", false), out.value("reason", string())};
    return result;
}

}  // namespace capsule
