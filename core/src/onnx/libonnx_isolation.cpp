// libonnx's checker and shape inference run in a child process. They are C++ code without
// bounds checks that crashes on some malformed models (null dereferences in per-op inference
// functions, found by fuzz_onnx); a model that crashes them must be refused with a message, not
// take the host down.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <onnx/defs/schema.h>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;

namespace {

constexpr int kTimeoutSeconds = 60;

void write_all(int fd, const string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += static_cast<std::size_t>(n);
    }
}

/// The child's side: run `step`, report 'E' + message, or 'O' + the inferred types (value_info
/// and outputs of the graph, when `want_types`), then exit without running destructors.
[[noreturn]] void child(int fd, onnx::ModelProto& model, bool want_types,
                        const std::function<void(onnx::ModelProto&)>& step) {
    // A crash is reported to the parent as the signal that ended this process.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
    string reply;
    try {
        step(model);
        onnx::GraphProto types;
        if (want_types) {
            *types.mutable_value_info() = model.graph().value_info();
            *types.mutable_output() = model.graph().output();
        }
        reply = "O" + types.SerializeAsString();
    } catch (const std::exception& e) {
        reply = string("E") + e.what();
    } catch (...) {
        reply = "Eunknown exception";
    }
    write_all(fd, reply);
    ::_exit(0);
}

string describe_status(int status) {
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = ::strsignal(sig);
        return "crashed (signal " + std::to_string(sig) + (name ? string(", ") + name : string()) + ")";
    }
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status)) + " without a result";
    return "ended without a result";
}

}  // namespace

std::optional<string> run_libonnx_isolated(onnx::ModelProto& model, const string& src, const string& what,
                                           bool want_types, const std::function<void(onnx::ModelProto&)>& step) {
    // libonnx builds its schema table on first use: build it here, once, not in every child.
    onnx::OpSchemaRegistry::Schema("Relu", 13);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorCode::other, src + ": cannot run " + what + ": pipe: " + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        ::close(fds[0]);
        ::close(fds[1]);
        throw Error(ErrorCode::other, src + ": cannot run " + what + ": fork: " + std::strerror(err));
    }
    if (pid == 0) {
        ::close(fds[0]);
        child(fds[1], model, want_types, step);
    }
    ::close(fds[1]);
    string reply;
    bool timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
    char buffer[65536];
    while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) continue;  // the deadline check above ends the wait
        const auto n = ::read(fds[0], buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
        throw Error(ErrorCode::input, src + ": libonnx's " + what + " did not finish in " + std::to_string(kTimeoutSeconds) +
                         " s; the model is refused");
    if (reply.empty() || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw Error(ErrorCode::input, src + ": libonnx's " + what + " " + describe_status(status) +
                         " on this model; the model is malformed or uses a case libonnx does not handle");
    if (reply[0] == 'E') return reply.substr(1);
    if (want_types) {
        onnx::GraphProto types;
        if (!types.ParseFromArray(reply.data() + 1, static_cast<int>(reply.size() - 1)))
            throw Error(ErrorCode::input, src + ": libonnx's " + what + " returned an unreadable result");
        *model.mutable_graph()->mutable_value_info() = std::move(*types.mutable_value_info());
        *model.mutable_graph()->mutable_output() = std::move(*types.mutable_output());
    }
    return std::nullopt;
}

}  // namespace capsule::onnx_import
