// capsule-serve (also run as `capsule serve`): serves a model repository over the Open Inference
// Protocol v2 (REST). See README.md, "Serving".
#include <atomic>
#include <csignal>
#include <ctime>
#include <functional>
#include <cstdio>
#include <iostream>
#include <pthread.h>
#include <thread>

#include <CLI/CLI.hpp>

#include "../openmp_spinning.hpp"
#include "capsule/error.hpp"
#include "capsule/registry.hpp"
#include "grpc_frontend.hpp"
#include "http_frontend.hpp"
#include "model_repository.hpp"

namespace fs = std::filesystem;
using namespace capsule;
using namespace capsule::serve;

namespace {

fs::path executable_dir() {
    std::error_code ec;
    auto exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : exe.parent_path();
}

void print_repository(const ModelRepository& repo) {
    if (repo.models().empty()) std::cout << "capsule-serve: the model repository holds no model directory\n";
    for (const auto& [name, model] : repo.models()) {
        if (!model.reason.empty()) std::cout << "model " << name << ": NOT READY: " << model.reason << "\n";
        for (const auto& [number, version] : model.versions) {
            std::cout << "model " << name << " version " << number << ": ";
            if (version->ready()) std::cout << "ready (" << version->plan_summary() << ")\n";
            else std::cout << "NOT READY: " << version->reason() << "\n";
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    capsule::tools::bound_openmp_spinning();  // before any plugin loads libgomp
    CLI::App app{"capsule serve: a model repository over the Open Inference Protocol v2 (KServe v2), REST and gRPC"};
    app.name("capsule serve");
    fs::path repository_dir;
    HttpOptions http;
    app.add_option("--model-repository", repository_dir,
                   "model repository: DIR/<model>/config.json and DIR/<model>/<version>/model.onnx (or model.json)")
        ->required();
    app.add_option("--host", http.host, "address to listen on")->capture_default_str();
    app.add_option("--http-port", http.port, "HTTP port (0: any free port, printed on start)")
        ->capture_default_str()->check(CLI::Range(0, 65535));
    GrpcOptions grpc;
    app.add_option("--grpc-port", grpc.port, "gRPC port (0: any free port, printed on start; -1: no gRPC)")
        ->capture_default_str()->check(CLI::Range(-1, 65535));
    app.add_option("--http-threads", http.threads,
                   "worker threads serving REST requests (a connection waits for its request's head on none)")
        ->capture_default_str()->check(CLI::Range(1, 1024));
    app.add_option("--header-timeout", http.header_timeout_s,
                   "seconds a request's head may take from its first byte (a slower connection is closed); "
                   "also the grace before --min-body-rate applies")
        ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
    app.add_option("--min-body-rate", http.min_body_rate,
                   "bytes per second a request body must average after --header-timeout of grace (else 400 and close)")
        ->capture_default_str()->check(CLI::Range(1.0, 1e12));
    int max_concurrency = 64;
    app.add_option("--max-concurrency", max_concurrency, "infer requests in flight at once; more get HTTP 503")
        ->capture_default_str()->check(CLI::Range(1, 1 << 20));
    app.add_option("--max-request-bytes", http.max_request_bytes, "largest request body; larger ones get HTTP 413")
        ->capture_default_str()->check(CLI::Range(std::size_t(1024), std::size_t(1) << 40));
    int drain_timeout = 30;
    app.add_option("--drain-timeout", drain_timeout,
                   "seconds a SIGTERM waits for requests in flight before the server exits anyway (status 1)")
        ->capture_default_str()->check(CLI::Range(1, 3600));
    app.footer("Exit status: 0 after a SIGTERM or SIGINT once the requests in flight are answered; 1 when a "
               "port cannot be bound, the drain outlasts --drain-timeout or a second signal arrives; 2 for bad "
               "arguments or a repository that cannot be read.");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help: 0
    }

    // SIGTERM and SIGINT are taken by one thread (sigwait): every thread made later inherits the
    // blocked mask, so no worker is interrupted and the shutdown is an orderly drain.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end the server

    // One thread takes the signals from the start: while the repository loads, a signal ends the
    // process at once (nothing is in flight); once serving, the first starts the drain (not ready,
    // stop accepting, answer what is in flight) and a watchdog then ends the process on a second
    // signal, or after --drain-timeout while requests are still in flight.
    std::atomic<InferenceService*> serving{nullptr};
    std::atomic<bool> woken_by_main{false}, finished{false};
    std::function<void()> stop_accepting;  // set before `serving`
    std::thread watchdog;
    std::thread waiter([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        if (woken_by_main) return;
        const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        InferenceService* service = serving.load();
        if (!service) {
            std::cout << "capsule-serve: " << name << " while loading the model repository: exiting" << std::endl;
            std::_Exit(0);
        }
        std::cout << "capsule-serve: " << name << ": draining requests in flight, then exiting" << std::endl;
        watchdog = std::thread([&, service] {
            timespec timeout{drain_timeout, 0};
            siginfo_t info;
            for (;;) {
                const int got = sigtimedwait(&signals, &info, &timeout);
                if (finished) return;
                if (got > 0) {
                    std::cout << "capsule-serve: second signal: exiting without finishing the drain" << std::endl;
                    std::_Exit(1);
                }
                if (service->in_flight() > 0) {
                    std::cout << "capsule-serve: " << service->in_flight() << " requests still in flight after "
                              << drain_timeout << " s: exiting" << std::endl;
                    std::_Exit(1);
                }
                // Only idle or slow connections are left (cpp-httplib waits for them): no answer is lost.
                std::cout << "capsule-serve: no request in flight after " << drain_timeout
                          << " s; closing the connections left" << std::endl;
                std::_Exit(0);
            }
        });
        service->stop();
        stop_accepting();
    });
    int status = 0;
    try {
        auto host = std::make_shared<const PluginHost>(PluginHost::discover(
            PluginSearchPath::standard(executable_dir(), std::getenv("CAPSULE_PLUGIN_PATH"), {})));
        auto repository = std::make_shared<const ModelRepository>(ModelRepository::load(repository_dir, host));
        print_repository(*repository);
        InferenceService service(repository, max_concurrency);
        grpc.host = http.host;
        grpc.threads = http.threads;
        grpc.max_concurrency = max_concurrency;
        grpc.max_request_bytes = http.max_request_bytes;
        GrpcFrontend grpc_frontend(service, grpc);
        HttpFrontend frontend(service, http);
        const int port = frontend.bind();
        const int grpc_port = grpc.port >= 0 ? grpc_frontend.start() : -1;
        const std::string shown_host = http.host.find(':') != std::string::npos ? "[" + http.host + "]" : http.host;
        if (grpc_port >= 0) std::cout << "capsule-serve: gRPC on " << shown_host << ":" << grpc_port << std::endl;
        std::cout << "capsule-serve: listening on http://" << shown_host << ":" << port << std::endl;
        stop_accepting = [&] {
            frontend.stop();
            grpc_frontend.stop();
        };
        serving = &service;
        frontend.serve();
        woken_by_main = true;  // serve() also returns when the server stops for another reason
        pthread_kill(waiter.native_handle(), SIGTERM);
        waiter.join();
        grpc_frontend.stop();
        finished = true;
        if (watchdog.joinable()) {
            pthread_kill(watchdog.native_handle(), SIGTERM);
            watchdog.join();
        }
        std::cout << "capsule-serve: stopped" << std::endl;
    } catch (const Error& e) {
        std::cerr << "capsule serve: " << e.what() << "\n";
        status = e.code() == ErrorCode::input ? 2 : 1;
    } catch (const std::exception& e) {  // e.g. a repository directory that fails while listed
        std::cerr << "capsule serve: " << e.what() << "\n";
        status = 1;
    }
    if (waiter.joinable()) {  // a failed start: the waiter still waits for a signal
        woken_by_main = true;
        pthread_kill(waiter.native_handle(), SIGTERM);
        waiter.join();
    }
    return status;
}
