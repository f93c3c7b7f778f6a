#include "parallel.hpp"

#include <exception>
#include <thread>
#include <vector>

namespace capsule::reference {

std::unique_ptr<ThreadGrant> prepare_thread_grant(const plugin::PrepareCall& call) {
    return std::make_unique<ThreadGrant>(ThreadGrant{call.threads()});
}

int granted_threads(const plugin::ForwardCall& call) {
    const auto* grant = call.state<ThreadGrant>();
    return grant && grant->threads > 0 ? grant->threads : 1;
}

void run_parts(int parts, const std::function<void(int)>& body) {
    if (parts <= 1) {
        body(0);
        return;
    }
    // Threads are started per call rather than pooled: the plugin keeps no global state, and a
    // start (tens of microseconds) is small next to the milliseconds of work gemm gives a part.
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(parts));
    auto guarded = [&](int part) {
        try {
            body(part);
        } catch (...) {
            errors[static_cast<std::size_t>(part)] = std::current_exception();
        }
    };
    {
        std::vector<std::jthread> workers;
        workers.reserve(static_cast<std::size_t>(parts - 1));
        for (int part = 1; part < parts; ++part) workers.emplace_back(guarded, part);
        guarded(0);
    }  // joins
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace capsule::reference
