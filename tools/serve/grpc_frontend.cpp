#include "grpc_frontend.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>

#include "capsule/error.hpp"
#include "grpc_service.grpc.pb.h"

namespace capsule::serve {

namespace {

using Clock = std::chrono::steady_clock;

grpc::Status status_of(const ProtocolError& e) {
    switch (e.status) {
        case 400: return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
        case 404: return {grpc::StatusCode::NOT_FOUND, e.what()};
        case 413: return {grpc::StatusCode::RESOURCE_EXHAUSTED, e.what()};
        case 503: return {grpc::StatusCode::UNAVAILABLE, e.what()};
        default: return {grpc::StatusCode::INTERNAL, e.what()};
    }
}

[[noreturn]] void bad(const std::string& message) { throw ProtocolError(400, message); }

/// Copies 32-bit contents into a narrower integer tensor, refusing a value outside its range.
template <typename T, typename Field>
void narrow_contents(Tensor& t, const Field& values, const std::string& name) {
    for (int i = 0; i < values.size(); ++i) {
        const auto v = values.Get(i);
        if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
            bad("input " + quoted_text(name) + ": value " + std::to_string(i) + " (" + std::to_string(v) +
                ") is outside its datatype's range");
        t.values<T>()[static_cast<std::size_t>(i)] = static_cast<T>(v);
    }
}

/// The tensor of a checked input from the typed contents field of its dtype (any other field
/// must be empty), its count checked before the tensor is allocated.
Tensor from_contents(DType dtype, const std::vector<std::int64_t>& shape, const inference::InferTensorContents& c,
                     const std::string& name) {
    const auto n = RequestInputs::element_count(shape);
    // KServe v2's typed fields: int_contents carries INT8/16/32, uint_contents UINT8/16/32; FP16 and
    // BF16 have none (raw_input_contents only).
    const bool signed32 = dtype == DType::int32 || dtype == DType::int16 || dtype == DType::int8;
    const bool unsigned32 = dtype == DType::uint32 || dtype == DType::uint16 || dtype == DType::uint8;
    if (dtype == DType::float16 || dtype == DType::bfloat16)
        bad("input " + quoted_text(name) + ": datatype " + std::string(datatype_name(dtype)) +
            " has no typed contents field; send it in raw_input_contents");
    const char* field = dtype == DType::float32   ? "fp32_contents"
                        : dtype == DType::float64 ? "fp64_contents"
                        : dtype == DType::int64   ? "int64_contents"
                        : dtype == DType::uint64  ? "uint64_contents"
                        : signed32                ? "int_contents"
                        : unsigned32              ? "uint_contents"
                                                  : "bool_contents";
    const std::size_t given = dtype == DType::float32   ? std::size_t(c.fp32_contents_size())
                              : dtype == DType::float64 ? std::size_t(c.fp64_contents_size())
                              : dtype == DType::int64   ? std::size_t(c.int64_contents_size())
                              : dtype == DType::uint64  ? std::size_t(c.uint64_contents_size())
                              : signed32                ? std::size_t(c.int_contents_size())
                              : unsigned32              ? std::size_t(c.uint_contents_size())
                                                        : std::size_t(c.bool_contents_size());
    const std::size_t all = std::size_t(c.int_contents_size()) + c.uint_contents_size() + c.uint64_contents_size() +
                            c.bytes_contents_size() + c.fp32_contents_size() + c.fp64_contents_size() +
                            c.int64_contents_size() + c.bool_contents_size();
    if (all != given)
        bad("input " + quoted_text(name) + ": its values must be in contents." + field + " (the field of datatype " +
            std::string(datatype_name(dtype)) + "), not another field");
    if (given != n)
        bad("input " + quoted_text(name) + ": contents." + field + " holds " + std::to_string(given) +
            " values, its shape " + shape_text(shape) + " needs " + std::to_string(n));
    Tensor t = Tensor::zeros(dtype, shape);
    switch (dtype) {
        case DType::float32: std::memcpy(t.data(), c.fp32_contents().data(), n * sizeof(float)); break;
        case DType::float64: std::memcpy(t.data(), c.fp64_contents().data(), n * sizeof(double)); break;
        case DType::int64: std::memcpy(t.data(), c.int64_contents().data(), n * sizeof(std::int64_t)); break;
        case DType::boolean:
            for (std::size_t i = 0; i < n; ++i) static_cast<std::uint8_t*>(t.data())[i] = c.bool_contents(int(i)) ? 1 : 0;
            break;
        case DType::uint64: std::memcpy(t.data(), c.uint64_contents().data(), n * sizeof(std::uint64_t)); break;
        case DType::int32: std::memcpy(t.data(), c.int_contents().data(), n * sizeof(std::int32_t)); break;
        case DType::uint32: std::memcpy(t.data(), c.uint_contents().data(), n * sizeof(std::uint32_t)); break;
        case DType::int16: narrow_contents<std::int16_t>(t, c.int_contents(), name); break;
        case DType::int8: narrow_contents<std::int8_t>(t, c.int_contents(), name); break;
        case DType::uint16: narrow_contents<std::uint16_t>(t, c.uint_contents(), name); break;
        case DType::uint8: narrow_contents<std::uint8_t>(t, c.uint_contents(), name); break;
        case DType::float16:
        case DType::bfloat16: break;  // refused above
    }
    return t;
}

/// The validated request, as REST's parse_infer_request gives it.
InferRequest read_request(const inference::ModelInferRequest& req, const ModelVersion& model) {
    InferRequest request;
    request.id = req.id();
    const bool raw = req.raw_input_contents_size() > 0;
    if (raw && req.raw_input_contents_size() != req.inputs_size())
        bad("raw_input_contents holds " + std::to_string(req.raw_input_contents_size()) + " entries for " +
            std::to_string(req.inputs_size()) + " inputs (one per input, in order)");
    RequestInputs inputs(model, request);
    for (int i = 0; i < req.inputs_size(); ++i) {
        const auto& in = req.inputs(i);
        const std::vector<std::int64_t> shape(in.shape().begin(), in.shape().end());
        const DType dtype = inputs.check(in.name(), in.datatype(), shape);
        if (raw) {
            if (in.has_contents()) bad("input " + quoted_text(in.name()) + ": both contents and raw_input_contents");
            const auto& bytes = req.raw_input_contents(i);
            const std::size_t needed = RequestInputs::element_count(shape) * dtype_size(dtype);
            if (bytes.size() != needed)
                bad("input " + quoted_text(in.name()) + ": " + std::to_string(bytes.size()) +
                    " bytes of data, its datatype and shape need " + std::to_string(needed));
            Tensor t = Tensor::zeros(dtype, shape);
            fill_from_bytes(t, bytes, in.name());
            inputs.store(in.name(), std::move(t));
        } else {
            inputs.store(in.name(), from_contents(dtype, shape, in.contents(), in.name()));
        }
    }
    inputs.finish();
    for (const auto& out : req.outputs()) {
        for (const auto& [key, _] : out.parameters()) check_output_parameter(out.name(), key);
        add_output(request, model, out.name(), true);
    }
    default_outputs(request, model, true);
    return request;
}

void write_response(const InferRequest& request, const ModelVersion& model, const std::vector<Tensor>& outputs,
                    inference::ModelInferResponse& res) {
    res.set_model_name(model.model());
    res.set_model_version(model.version());
    res.set_id(request.id);
    for (const auto& wanted : request.outputs) {
        std::size_t k = 0;
        while (model.outputs()[k].name != wanted.name) ++k;
        const Tensor& t = outputs.at(k);
        auto* out = res.add_outputs();
        out->set_name(wanted.name);
        out->set_datatype(std::string(datatype_name(t.dtype())));
        for (auto d : t.shape()) out->add_shape(d);
        res.add_raw_output_contents(static_cast<const char*>(t.data()), t.nbytes());
    }
}

class Service final : public inference::GRPCInferenceService::Service {
public:
    explicit Service(InferenceService& service) : service_(service) {}

    grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                            inference::ServerLiveResponse* res) override {
        res->set_live(true);
        return grpc::Status::OK;
    }
    grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                             inference::ServerReadyResponse* res) override {
        res->set_ready(service_.ready());
        return grpc::Status::OK;
    }
    grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* req,
                            inference::ModelReadyResponse* res) override {
        // A model not ready as a whole is ready=false too, as a version is (REST: 503 and the reason).
        return guarded([&] { res->set_ready(service_.readiness(req->name(), req->version()).ready); });
    }
    grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                                inference::ServerMetadataResponse* res) override {
        res->set_name("capsule");
        res->set_version(CAPSULE_VERSION);
        return grpc::Status::OK;
    }
    grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* req,
                               inference::ModelMetadataResponse* res) override {
        return guarded([&] {
            const auto version = service_.find(req->name(), req->version());
            res->set_name(version->model());
            for (const auto& v : service_.versions(version->model())) res->add_versions(v);
            res->set_platform("capsule");
            auto fill = [](const std::vector<TensorMetadata>& list, auto* (inference::ModelMetadataResponse::*add)(),
                           inference::ModelMetadataResponse* r) {
                for (const auto& m : list) {
                    auto* t = (r->*add)();
                    t->set_name(m.name);
                    t->set_datatype(std::string(datatype_name(m.dtype)));
                    for (auto d : m.shape) t->add_shape(d);
                }
            };
            fill(version->inputs(), &inference::ModelMetadataResponse::add_inputs, res);
            fill(version->outputs(), &inference::ModelMetadataResponse::add_outputs, res);
        });
    }
    grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* req,
                            inference::ModelInferResponse* res) override {
        const auto arrived = Clock::now();
        std::shared_ptr<const ModelVersion> version;
        if (auto s = guarded([&] { version = service_.find(req->model_name(), req->model_version()); }); !s.ok())
            return s;
        std::unique_ptr<InferenceService::Admission> admission;
        int status = 200;
        InferenceService::Outcome outcome;
        grpc::Status result = grpc::Status::OK;
        try {
            admission = service_.admit();  // busy: UNAVAILABLE, counted under the model
            InferenceService::require_ready(*version);
            auto request = read_request(*req, *version);
            outcome = service_.run(*version, request, arrived);
            write_response(request, *version, outcome.outputs, *res);
        } catch (const ProtocolError& e) {
            status = e.status;
            result = status_of(e);
        } catch (const Error& e) {
            // As REST: a kernel's refusal of this request's values is the client's error.
            if (e.code() == ErrorCode::input) {
                status = 400;
                result = {grpc::StatusCode::INVALID_ARGUMENT, std::string("the model refused the request's data: ") + e.what()};
            } else {
                status = 500;
                result = {grpc::StatusCode::INTERNAL, std::string("inference failed: ") + e.what()};
            }
        } catch (const std::bad_alloc&) {
            status = 503;
            result = {grpc::StatusCode::UNAVAILABLE, "out of memory for this request; retry later or send fewer rows"};
        }
        service_.metrics().record(version->model(), version->version(), status, outcome.queue, outcome.compute);
        return result;
    }

private:
    /// Runs `body`; a ProtocolError becomes its status (and is counted).
    template <typename F>
    grpc::Status guarded(F&& body) {
        try {
            body();
            return grpc::Status::OK;
        } catch (const ProtocolError& e) {
            service_.metrics().record_unrouted(e.status);
            return status_of(e);
        }
    }
    InferenceService& service_;
};

}  // namespace

class GrpcFrontend::Impl {
public:
    Impl(InferenceService& shared, GrpcOptions grpc_options) : service(shared), options(std::move(grpc_options)) {}
    Service service;
    GrpcOptions options;
    std::unique_ptr<grpc::Server> server;
};

GrpcFrontend::GrpcFrontend(InferenceService& service, GrpcOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {}

GrpcFrontend::~GrpcFrontend() {
    stop();
    impl_->server.reset();
}

int GrpcFrontend::start() {
    const auto& o = impl_->options;
    grpc::ServerBuilder builder;
    int port = 0;
    const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;  // IPv6
    builder.AddListeningPort(host + ":" + std::to_string(o.port), grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&impl_->service);
    builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(o.max_request_bytes, INT32_MAX)));
    builder.SetMaxSendMessageSize(-1);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a second server must fail to bind
    grpc::ResourceQuota quota("capsule-serve");
    // Each call in flight holds a thread: twice the concurrency limit, so that the limit answers
    // a burst before gRPC's own "thread pool exhausted" does.
    quota.SetMaxThreads(std::max(o.threads, 2 * o.max_concurrency + 8));
    builder.SetResourceQuota(quota);
    impl_->server = builder.BuildAndStart();
    if (!impl_->server || port == 0)
        throw Error(ErrorCode::other, "cannot serve gRPC on " + o.host + ":" + std::to_string(o.port) +
                                          " (in use, or not an address of this machine)");
    return port;
}

void GrpcFrontend::stop() {
    if (impl_->server) impl_->server->Shutdown();  // waits for the calls in flight; callable twice
}

}  // namespace capsule::serve
