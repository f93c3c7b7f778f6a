#include "http_frontend.hpp"

#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <regex>

#include "body_coding.hpp"
#include "capsule/error.hpp"
#include "gated_server.hpp"
#include "request_head.hpp"
#include "v2_protocol.hpp"

namespace capsule::serve {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kServerName = "capsule";
constexpr const char* kJsonType = "application/json";

void reply_error(httplib::Response& res, int status, const std::string& message) {
    res.status = status;
    res.set_content(error_body(message), kJsonType);
}

/// The Inference-Header-Content-Length header (binary tensor data extension), if present, read
/// from the head as sent (cpp-httplib drops a header with an empty value). Raises
/// ProtocolError(400) for more than one, or for a value that is not a byte count.
std::optional<std::size_t> json_length_of(std::string_view head) {
    const auto values = header_values(head, "Inference-Header-Content-Length");
    if (values.empty()) return std::nullopt;
    if (values.size() > 1) throw ProtocolError(400, "more than one Inference-Header-Content-Length header");
    const auto text = values.front();
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size())
        throw ProtocolError(400, "Inference-Header-Content-Length " + quoted_text(text) + " is not a byte count");
    return n;
}

/// Makes the connection of the request being answered close once its response is written. Used
/// whenever a body is left unread or its framing is in doubt: cpp-httplib 0.11 would keep such a
/// connection alive, and the unread bytes would be read as the next request (request smuggling).
void close_after_response(const httplib::Request&) { GatedServer::close_after_response(); }

/// Whether cpp-httplib 0.11 reads the body of a request with this method. It reads none for the
/// others (GET, HEAD, OPTIONS, ...), so a body sent with them would be read as the next request.
bool method_reads_body(const std::string& method) {
    return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

/// Why the request's framing is refused (before its body is read), or 0: a head check_head
/// refuses, a malformed header line (request_head.hpp), a head over the gate's limit (431), more than one Content-Length,
/// Transfer-Encoding, Content-Encoding or Inference-Header-Content-Length header, an
/// Inference-Header-Content-Length that is not a byte count, a Content-Length that is not a plain decimal
/// number, both Content-Length and Transfer-Encoding, a Transfer-Encoding other than chunked (in any case), a
/// Content-Encoding other than identity, gzip or deflate (415), a declared length over the limit, a
/// body on a method whose bodies are never read (GET, HEAD, ...), or a POST, PUT, PATCH or
/// DELETE that declares no length (411: HTTP/1.1 gives it an empty body, cpp-httplib would
/// read until the connection closes and hold a worker meanwhile).
int framing_refusal(const httplib::Request& req, std::size_t max_bytes, std::string& why) {
    const auto head = GatedServer::request_head();
    if (head.empty()) return why = "the request head is too large", 431;
    // The gate has refused these already (this is the head cpp-httplib read, checked the same way).
    if (auto verdict = check_head(head, head.size() + 1); verdict.status != 0) return why = verdict.why, verdict.status;
    if (why = malformed_header_line(head); !why.empty()) return 400;
    try {
        json_length_of(head);
    } catch (const ProtocolError& e) {
        return why = e.what(), e.status;
    }
    // Framing headers as sent: cpp-httplib percent-decodes header values ("Content-Length: %32"
    // would read as 2 here while a proxy in front reads no length at all).
    const auto length_values = header_values(head, "Content-Length");
    const auto encoding_values = header_values(head, "Transfer-Encoding");
    const auto lengths = length_values.size();
    const bool chunked = !encoding_values.empty();
    if (lengths > 1) return why = "more than one Content-Length header", 400;
    if (encoding_values.size() > 1) return why = "more than one Transfer-Encoding header", 400;
    if (lengths == 1 && chunked) return why = "both Content-Length and Transfer-Encoding", 400;
    // Coding names are case-insensitive (RFC 9112 section 7), as cpp-httplib 0.11 compares them.
    if (chunked && !same_name(encoding_values.front(), "chunked"))
        return why = "Transfer-Encoding " + quoted_text(encoding_values.front()) + " is not supported (only chunked)", 400;
    // From the head: the request setup takes Content-Encoding away from cpp-httplib.
    const auto encodings_sent = header_values(head, "Content-Encoding");
    if (encodings_sent.size() > 1) return why = "more than one Content-Encoding header", 400;
    if (encodings_sent.size() == 1 && !content_coding(encodings_sent.front()))
        return why = "Content-Encoding " + quoted_text(encodings_sent.front()) +
                     " is not supported (identity, gzip, deflate)", 415;
    if (lengths == 1) {
        const std::string text(length_values.front());
        std::uint64_t n = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits) return why = "Content-Length " + quoted_text(text) + " is not a decimal byte count", 400;
        if (ec != std::errc{} || end != text.data() + text.size() || n > max_bytes)
            return why = "request body of " + text + " bytes exceeds " + std::to_string(max_bytes) +
                         " bytes (capsule serve --max-request-bytes)", 413;
        if (n > 0 && !method_reads_body(req.method))
            return why = "a " + req.method + " request with a body (Content-Length " + text + ")", 400;
    }
    if (chunked && !method_reads_body(req.method)) return why = "a " + req.method + " request with a chunked body", 400;
    if (lengths == 0 && !chunked && method_reads_body(req.method))
        return why = "a " + req.method + " request without Content-Length or Transfer-Encoding (send Content-Length: 0 "
                     "for an empty body)", 411;
    return 0;
}

/// The path of a model, or of one of its versions.
const std::string kModelPath = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

/// The methods the endpoint at `path` answers, for a 405's Allow header; "" when there is none.
std::string allowed_methods(const std::string& path) {
    static const std::regex get(R"(/v2/health/live|/v2/health/ready|/v2|/metrics|)" + kModelPath + "(?:/ready)?");
    static const std::regex post(kModelPath + "/infer");
    if (std::regex_match(path, get)) return "GET, HEAD";
    if (std::regex_match(path, post)) return "POST";
    return "";
}

/// 405 naming the allowed methods when `req`'s path is an endpoint, else 404.
void reply_no_endpoint(const httplib::Request& req, httplib::Response& res) {
    const auto allowed = allowed_methods(req.path);
    if (allowed.empty()) return reply_error(res, 404, "no such endpoint: " + req.method + " " + quoted_text(req.path));
    res.set_header("Allow", allowed);
    reply_error(res, 405, "method " + req.method + " is not allowed for " + quoted_text(req.path) + " (allowed: " +
                              allowed + ")");
}

}  // namespace

HttpFrontend::HttpFrontend(InferenceService& service, HttpOptions options)
    : service_(service), options_(std::move(options)) {
    ConnectionLimits limits;
    limits.workers = options_.threads;
    limits.gate.head = std::chrono::milliseconds(static_cast<long long>(options_.header_timeout_s * 1000));
    limits.body_grace = limits.gate.head;
    limits.min_body_rate = options_.min_body_rate;
    limits.gate.min_body_rate = options_.min_body_rate;
    limits.gate.max_body_bytes = std::min(limits.gate.max_body_bytes, options_.max_request_bytes);
    server_ = std::make_unique<GatedServer>(limits);
    server_->set_payload_max_length(options_.max_request_bytes);
    // A response is written as headers then body: without TCP_NODELAY, Nagle's algorithm holds
    // the body until the client's delayed ACK (about 40 ms per request on a kept-alive connection).
    server_->set_tcp_nodelay(true);
    // Range is ignored (routes()); without this cpp-httplib answers HEAD with Accept-Ranges: bytes.
    server_->set_default_headers({{"Accept-Ranges", "none"}});
    // SO_REUSEADDR only: cpp-httplib also sets SO_REUSEPORT, which would let a second server bind
    // the same port and silently take half of the connections.
    server_->set_socket_options([](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    routes();
}

HttpFrontend::~HttpFrontend() = default;

int HttpFrontend::bind() {
    const int port = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                                        : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port < 0)
        throw Error(ErrorCode::other, "cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                                          " (in use, or not an address of this machine)");
    return port;
}

void HttpFrontend::serve() {
    server_->listen_after_bind();
    server_->drain();
}

void HttpFrontend::stop() { server_->stop(); }

void HttpFrontend::routes() {
    auto& s = *server_;
    // The one place a request is changed: once its head is parsed, before anything reads it.
    s.set_request_setup([](httplib::Request& req) {
        // Range is ignored, as RFC 9110 14.2 lets a server: cpp-httplib would apply it to every
        // response, infer replies included, and build a multi-range one in memory (300 ranges of
        // a 4 MiB reply made 1.26 GB). Every response is whole, with its status (never 206).
        req.ranges.clear();
        // Bodies are decoded by read_body (body_coding.hpp), not by cpp-httplib, which decodes
        // "gzip" and "deflate" only in lower case and a gzip body's first member only. The coding
        // is read from the head as sent.
        req.headers.erase("Content-Encoding");
    });
    // Every status >= 400 without a body gets the protocol's error object (httplib's own 404,
    // 413 for a body over the limit, 400 for a request it could not parse).
    // Before any body is read: framing a front proxy could read differently is refused, and the
    // connection closes after the answer.
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        GatedServer::body_begins(!header_values(GatedServer::request_head(), "Transfer-Encoding").empty());
        std::string why;
        const int status = framing_refusal(req, options_.max_request_bytes, why);
        if (status == 0) return httplib::Server::HandlerResponse::Unhandled;
        service_.metrics().record_http_error(status);
        reply_error(res, status, why);
        close_after_response(req);
        return httplib::Server::HandlerResponse::Handled;
    });
    // Expect: 100-continue is answered with the refusal instead of 100 when the framing is refused.
    s.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
        std::string why;
        const int status = framing_refusal(req, options_.max_request_bytes, why);
        if (status == 0) return 100;
        service_.metrics().record_http_error(status);
        reply_error(res, status, why);
        close_after_response(req);
        return status;
    });
    // Unhandled, though it writes the body: with Handled, cpp-httplib would apply to the body the
    // ranges of a Range header it parsed in part before refusing it (416).
    s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        constexpr auto done = httplib::Server::HandlerResponse::Unhandled;
        // cpp-httplib's own refusals (a request it could not parse or read): the framing is in
        // doubt, or the body unread, so the connection closes.
        if (res.status == 400 || res.status == 413 || res.status == 414 || res.status == 416 || res.status == 431)
            close_after_response(req);
        if (!res.body.empty()) return done;
        if (res.status == 404) {  // no route: a known path with another method is 405
            reply_no_endpoint(req, res);
            service_.metrics().record_http_error(res.status);
            return done;
        }
        std::string message = "malformed HTTP request (HTTP " + std::to_string(res.status) + ")";
        if (res.status == 416)
            message = "malformed Range header " + quoted_text(req.get_header_value("Range")) +
                      " (this server ignores Range, but cpp-httplib refuses one it cannot parse)";
        if (res.status == 413)
            message = req.get_header_value("Content-Type") == "application/x-www-form-urlencoded"
                          ? "a body sent as application/x-www-form-urlencoded (curl -d's default) may hold at most "
                            "8192 bytes (cpp-httplib's form limit); send Content-Type: application/json"
                          : "request body exceeds " + std::to_string(options_.max_request_bytes) +
                                " bytes (capsule serve --max-request-bytes)";
        service_.metrics().record_http_error(res.status);
        res.set_content(error_body(message), kJsonType);
        return done;
    }));
    s.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        service_.metrics().record_http_error(500);
        std::string message = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            message += std::string(": ") + e.what();
        } catch (...) {
        }
        reply_error(res, 500, message);
    });

    s.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(json_text(json{{"live", true}}), kJsonType);
    });
    s.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
        const bool ready = service_.ready();
        res.status = ready ? 200 : 503;
        res.set_content(json_text(json{{"ready", ready}}), kJsonType);
    });
    s.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(json_text(json{{"name", kServerName}, {"version", CAPSULE_VERSION},
                                       {"extensions", {"binary_tensor_data"}}}),
                        kJsonType);
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(service_.metrics().exposition(), "text/plain; version=0.0.4");
    });

    // The model version a URL names, or ProtocolError(404) naming what exists.
    auto find = [this](const httplib::Request& req) { return service_.find(req.matches[1], req.matches[2]); };
    // Runs `body`; a ProtocolError becomes its error object, counted as an inference failure for
    // infer requests and as an HTTP error otherwise.
    auto protocol = [this](httplib::Response& res, bool infer, auto&& body) {
        try {
            body();
        } catch (const ProtocolError& e) {
            if (infer) service_.metrics().record_unrouted(e.status);
            else service_.metrics().record_http_error(e.status);
            reply_error(res, e.status, e.what());
        }
    };
    const std::string& model_path = kModelPath;
    s.Get(model_path, [=, this](const httplib::Request& req, httplib::Response& res) {
        protocol(res, false, [&] {
            const auto version = find(req);
            res.set_content(json_text(model_metadata(*version, service_.versions(version->model()))), kJsonType);
        });
    });
    s.Get(model_path + "/ready", [=, this](const httplib::Request& req, httplib::Response& res) {
        protocol(res, false, [&] {
            const auto r = service_.readiness(req.matches[1], req.matches[2]);
            json body{{"name", r.model}, {"version", r.version}, {"ready", r.ready}};
            if (!r.ready) body["reason"] = r.reason;
            res.status = r.ready ? 200 : 503;
            res.set_content(json_text(body), kJsonType);
        });
    });
    // Infer bodies are read here, through the content reader, with --max-request-bytes counted on
    // the bytes as decoded (gzip, deflate, chunked): cpp-httplib's own limit counts compressed
    // bytes and ignores chunked bodies. A body over the limit, or one that cannot be decoded,
    // stops the read and closes the connection: what is left of it is never read as a request.
    auto read_body = [this](const httplib::Request& req, const httplib::ContentReader& read, std::string& body) {
        // framing_refusal has refused any coding but these.
        const auto sent = header_values(GatedServer::request_head(), "Content-Encoding");
        BodyDecoder decoder(sent.empty() ? ContentCoding::identity : content_coding(sent.front()).value_or(ContentCoding::identity));
        bool too_large = false;
        const bool read_all = read([&](const char* data, std::size_t n) {
            return decoder.feed({data, n}, [&](std::string_view piece) {
                too_large = body.size() + piece.size() > options_.max_request_bytes;
                if (!too_large) body.append(piece);
                return !too_large;
            });
        });
        const std::string framing_fault = GatedServer::chunked_fault(read_all);
        const bool complete = read_all && framing_fault.empty() && decoder.complete();
        if (too_large || !complete) close_after_response(req);  // the rest of the body is never read
        if (!complete && !too_large && GatedServer::read_timed_out())
            throw ProtocolError(408, "the request body did not arrive in time: it must arrive within "
                                     "--header-timeout plus one second per --min-body-rate bytes");
        if (too_large)
            throw ProtocolError(413, "request body exceeds " + std::to_string(options_.max_request_bytes) +
                                         " bytes as decoded (capsule serve --max-request-bytes)");
        if (!framing_fault.empty()) throw ProtocolError(400, framing_fault);
        if (!complete)
            throw ProtocolError(400, "the request body could not be read: cut short, or malformed chunked or "
                                     "compressed data");
    };
    s.Post(model_path + "/infer", [=, this](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& read) {
        const auto arrived = Clock::now();
        std::string request_body;
        try {
            read_body(req, read, request_body);
        } catch (const ProtocolError& e) {
            service_.metrics().record_http_error(e.status);
            return reply_error(res, e.status, e.what());
        }
        std::shared_ptr<const ModelVersion> version;
        protocol(res, true, [&] { version = find(req); });
        if (!version) return;
        std::unique_ptr<InferenceService::Admission> admission;
        int status = 200;
        InferenceService::Outcome outcome;
        try {
            admission = service_.admit();  // busy: 503, counted under the model
            InferenceService::require_ready(*version);
            auto request = parse_infer_request(request_body, json_length_of(GatedServer::request_head()), *version);
            outcome = service_.run(*version, request, arrived);
            auto body = infer_response(request, *version, outcome.outputs);
            if (body.json_length) res.set_header("Inference-Header-Content-Length", std::to_string(*body.json_length));
            res.set_content(std::move(body.body), body.content_type);
        } catch (const ProtocolError& e) {
            status = e.status;
            reply_error(res, status, e.what());
        } catch (const Error& e) {
            // Error(input) from a run: a kernel refused this request's values (an index out of
            // range); the client's to fix. Anything else is the server's failure.
            status = e.code() == ErrorCode::input ? 400 : 500;
            reply_error(res, status, std::string(status == 400 ? "the model refused the request's data: " : "inference failed: ") + e.what());
        } catch (const std::bad_alloc&) {
            status = 503;
            reply_error(res, status, "out of memory for this request; retry later or send fewer rows");
        }
        service_.metrics().record(version->model(), version->version(), status, outcome.queue, outcome.compute);
    });
    // Any other request with a body: its body is not read, the connection closes after the 404
    // (405 for an endpoint's path).
    const auto no_endpoint = [this](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader&) {
        close_after_response(req);  // the body is not read
        reply_no_endpoint(req, res);
        service_.metrics().record_http_error(res.status);
    };
    s.Post(".*", no_endpoint);
    s.Put(".*", no_endpoint);
    s.Patch(".*", no_endpoint);
    s.Delete(".*", no_endpoint);
}

}  // namespace capsule::serve
