// Running untrusted work (vendor plugin code) in a child process, so that a crash or a hang
// becomes a report instead of taking the caller down (DESIGN.md section 10, "Loading is lazy":
// `capsule plugins --probe` and `capsule verify` use it).
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace capsule {

/// How a child process ended, and what it wrote to its pipe.
struct ChildProcessOutcome {
    enum class End { exited, crashed, timed_out, not_started };
    End end = End::not_started;
    int exit_status = 0;  // End::exited: the status passed to _exit
    int signal = 0;       // End::crashed: the signal that ended it
    std::string output;   // everything written to the pipe (also when it crashed or timed out)
    std::string error;    // End::not_started: why (pipe or fork failed)

    /// `crashed (signal 11, Segmentation fault)`, `timed out after 10 s`, `exited with status 3`,
    /// or "" for an exit with status 0.
    std::string describe(std::chrono::milliseconds timeout) const;
};

/// Forks; the child calls `work(fd)`, which writes its results to the pipe `fd`, and leaves with
/// _exit(0) (neither atexit handlers nor destructors of the parent's objects run in it; an
/// exception escaping `work` exits with status 2). The parent reads the pipe until the child closes
/// it or `timeout` passes (then kills it with SIGKILL) and reaps it. Never throws. Call it from a
/// single-threaded point of the program: only the calling thread exists in the child.
ChildProcessOutcome run_in_child_process(std::chrono::milliseconds timeout,
                                         const std::function<void(int fd)>& work);

/// Writes all of `text` to `fd` (retrying on EINTR and short writes); false when the pipe closed.
bool write_all(int fd, const std::string& text);

}  // namespace capsule
