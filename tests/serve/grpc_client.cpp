// The gRPC side of capsule serve, checked by a client built on the generated GRPCInferenceService
// stub (run by tests/serve/test_serve.py against a server it started):
//
//   serve_grpc_client PORT X.npy EXPECTED.npy
//
// X.npy: float32 [3, 784] rows for the repository's `mlp` model (max_batch_size 8);
// EXPECTED.npy: `capsule run`'s output for them. Checks health, metadata, readiness (of a model
// that is not ready too), inference with typed contents and with raw_input_contents against
// EXPECTED, and every error path: each must give its status code and a message naming the cause.
// Prints each failure and a summary; exits 1 when anything failed.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "capsule/tensor_io.hpp"
#include "grpc_service.grpc.pb.h"

namespace {

int checks = 0, failures = 0;

void check(bool ok, const std::string& what) {
    ++checks;
    if (!ok) {
        ++failures;
        std::printf("FAIL: %s\n", what.c_str());
    }
}

std::vector<float> floats(const capsule::Tensor& t) {
    const auto* p = static_cast<const float*>(t.data());
    return {p, p + t.numel()};
}

bool close(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::fabs(a[i] - b[i]) > 1e-6 + 1e-5 * std::fabs(b[i])) return false;
    return true;
}

inference::ModelInferRequest mlp_request(const std::vector<float>& x, std::int64_t rows) {
    inference::ModelInferRequest req;
    req.set_model_name("mlp");
    req.set_id("grpc-1");
    auto* in = req.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    in->add_shape(rows);
    in->add_shape(784);
    for (std::int64_t i = 0; i < rows * 784; ++i) in->mutable_contents()->add_fp32_contents(x[std::size_t(i)]);
    return req;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: serve_grpc_client PORT X.npy EXPECTED.npy\n");
        return 2;
    }
    const auto x = floats(capsule::read_npy(argv[2]));
    const auto expected = floats(capsule::read_npy(argv[3]));
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    auto channel = grpc::CreateCustomChannel(std::string("127.0.0.1:") + argv[1], grpc::InsecureChannelCredentials(), args);
    auto stub = inference::GRPCInferenceService::NewStub(channel);
    auto call = [&](auto method, const auto& req, auto& res) {
        grpc::ClientContext context;
        return ((*stub).*method)(&context, req, &res);
    };

    {
        inference::ServerLiveResponse live;
        inference::ServerReadyResponse ready;
        inference::ServerMetadataResponse meta;
        check(call(&inference::GRPCInferenceService::Stub::ServerLive, inference::ServerLiveRequest{}, live).ok() &&
                  live.live(), "ServerLive");
        check(call(&inference::GRPCInferenceService::Stub::ServerReady, inference::ServerReadyRequest{}, ready).ok() &&
                  ready.ready(), "ServerReady");
        check(call(&inference::GRPCInferenceService::Stub::ServerMetadata, inference::ServerMetadataRequest{}, meta).ok() &&
                  meta.name() == "capsule", "ServerMetadata");
    }
    {
        inference::ModelMetadataRequest req;
        req.set_name("mlp");
        inference::ModelMetadataResponse meta;
        const auto s = call(&inference::GRPCInferenceService::Stub::ModelMetadata, req, meta);
        check(s.ok() && meta.inputs_size() == 1 && meta.inputs(0).name() == "input" &&
                  meta.inputs(0).datatype() == "FP32" && meta.inputs(0).shape_size() == 2 &&
                  meta.inputs(0).shape(0) == -1 && meta.inputs(0).shape(1) == 784 && meta.outputs(0).name() == "logits" &&
                  meta.versions_size() == 1 && meta.versions(0) == "1",
              "ModelMetadata of mlp: " + meta.DebugString());
        req.set_name("nope");
        const auto missing = call(&inference::GRPCInferenceService::Stub::ModelMetadata, req, meta);
        check(missing.error_code() == grpc::StatusCode::NOT_FOUND &&
                  missing.error_message().find("unknown model 'nope'") != std::string::npos,
              "ModelMetadata of an unknown model: " + missing.error_message());
    }
    {
        inference::ModelReadyRequest req;
        inference::ModelReadyResponse ready;
        req.set_name("mlp");
        check(call(&inference::GRPCInferenceService::Stub::ModelReady, req, ready).ok() && ready.ready(), "mlp is ready");
        req.set_name("rocm_only");
        check(call(&inference::GRPCInferenceService::Stub::ModelReady, req, ready).ok() && !ready.ready(),
              "rocm_only is not ready");
        // A model not ready as a whole (config.json unusable, no version directory): the same answer.
        for (const char* name : {"bad_config", "no_version"}) {
            req.set_name(name);
            ready.set_ready(true);
            const auto s = call(&inference::GRPCInferenceService::Stub::ModelReady, req, ready);
            check(s.ok() && !ready.ready(), std::string(name) + " is not ready (OK, ready=false): " + s.error_message());
        }
        req.set_name("nope");
        check(call(&inference::GRPCInferenceService::Stub::ModelReady, req, ready).error_code() == grpc::StatusCode::NOT_FOUND,
              "ModelReady of an unknown model: NOT_FOUND");
        // A version string no version may have ("0", "01") is NOT_FOUND for every model, ready or not.
        for (const char* name : {"mlp", "rocm_only", "bad_config", "no_version"})
            for (const char* version : {"0", "01"}) {
                req.set_name(name);
                req.set_version(version);
                const auto s = call(&inference::GRPCInferenceService::Stub::ModelReady, req, ready);
                check(s.error_code() == grpc::StatusCode::NOT_FOUND,
                      std::string("ModelReady ") + name + " version " + version + ": NOT_FOUND: " + s.error_message());
            }
        req.set_version("");
    }
    auto infer = [&](const inference::ModelInferRequest& req, inference::ModelInferResponse& res) {
        return call(&inference::GRPCInferenceService::Stub::ModelInfer, req, res);
    };
    {
        inference::ModelInferResponse res;
        const auto s = infer(mlp_request(x, 3), res);
        std::vector<float> got;
        if (s.ok() && res.raw_output_contents_size() == 1) {
            const auto& raw = res.raw_output_contents(0);
            got.resize(raw.size() / sizeof(float));
            std::memcpy(got.data(), raw.data(), got.size() * sizeof(float));
        }
        check(s.ok() && res.id() == "grpc-1" && res.model_name() == "mlp" && res.outputs_size() == 1 &&
                  res.outputs(0).name() == "logits" && res.outputs(0).shape_size() == 2 && res.outputs(0).shape(0) == 3 &&
                  close(got, expected),
              "ModelInfer with fp32_contents equals `capsule run`: " + s.error_message());
        inference::ModelInferRequest raw = mlp_request(x, 3);
        raw.mutable_inputs(0)->clear_contents();
        raw.add_raw_input_contents(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
        const auto r = infer(raw, res);
        if (r.ok() && res.raw_output_contents_size() == 1)
            std::memcpy(got.data(), res.raw_output_contents(0).data(), got.size() * sizeof(float));
        check(r.ok() && close(got, expected), "ModelInfer with raw_input_contents equals `capsule run`: " + r.error_message());
    }
    // Error paths: status code and a message that names the cause.
    struct Case {
        const char* what;
        grpc::StatusCode code;
        const char* message;
        void (*edit)(inference::ModelInferRequest&);
    };
    const Case cases[] = {
        {"unknown model", grpc::StatusCode::NOT_FOUND, "unknown model 'nope'",
         [](inference::ModelInferRequest& r) { r.set_model_name("nope"); }},
        {"unknown version", grpc::StatusCode::NOT_FOUND, "has no version '9'",
         [](inference::ModelInferRequest& r) { r.set_model_version("9"); }},
        {"model not ready", grpc::StatusCode::UNAVAILABLE, "is not ready",
         [](inference::ModelInferRequest& r) { r.set_model_name("rocm_only"); }},
        {"wrong datatype", grpc::StatusCode::INVALID_ARGUMENT, "datatype 'FP64' is not the model's FP32",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->set_datatype("FP64"); }},
        {"wrong shape", grpc::StatusCode::INVALID_ARGUMENT, "is not the model's [-1, 784]",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(1, 783); }},
        {"huge batch", grpc::StatusCode::INVALID_ARGUMENT, "outside 1..8",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(0, std::int64_t(1) << 62); }},
        {"negative dimension", grpc::StatusCode::INVALID_ARGUMENT, "non-negative",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(1, -784); }},
        {"too few values", grpc::StatusCode::INVALID_ARGUMENT, "holds 2351 values, its shape [3, 784] needs 2352",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->mutable_contents()->mutable_fp32_contents()->RemoveLast(); }},
        {"values in another field", grpc::StatusCode::INVALID_ARGUMENT, "must be in contents.fp32_contents",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->mutable_contents()->add_int64_contents(1); }},
        {"unknown input", grpc::StatusCode::INVALID_ARGUMENT, "unknown input 'x'",
         [](inference::ModelInferRequest& r) { r.mutable_inputs(0)->set_name("x"); }},
        {"missing input", grpc::StatusCode::INVALID_ARGUMENT, "missing input 'input'",
         [](inference::ModelInferRequest& r) { r.clear_inputs(); }},
        {"input twice", grpc::StatusCode::INVALID_ARGUMENT, "given twice",
         [](inference::ModelInferRequest& r) { *r.add_inputs() = r.inputs(0); }},
        {"unknown output", grpc::StatusCode::INVALID_ARGUMENT, "unknown output 'y'",
         [](inference::ModelInferRequest& r) { r.add_outputs()->set_name("y"); }},
        {"the classification extension", grpc::StatusCode::INVALID_ARGUMENT,
         "classification extension, which this server does not support",
         [](inference::ModelInferRequest& r) {
             auto* out = r.add_outputs();
             out->set_name("logits");
             (*out->mutable_parameters())["classification"].set_int64_param(2);
         }},
        {"raw entries not one per input", grpc::StatusCode::INVALID_ARGUMENT, "raw_input_contents holds 2 entries for 1 inputs",
         [](inference::ModelInferRequest& r) {
             r.add_raw_input_contents("a");
             r.add_raw_input_contents("b");
         }},
        {"raw bytes of the wrong size", grpc::StatusCode::INVALID_ARGUMENT, "9 bytes of data, its datatype and shape need 9408",
         [](inference::ModelInferRequest& r) {
             r.mutable_inputs(0)->clear_contents();
             r.add_raw_input_contents("123456789");
         }},
        {"raw and typed contents", grpc::StatusCode::INVALID_ARGUMENT, "both contents and raw_input_contents",
         [](inference::ModelInferRequest& r) { r.add_raw_input_contents(std::string(9408, '\0')); }},
        {"an index a kernel refuses (the client's data)", grpc::StatusCode::INVALID_ARGUMENT,
         "the model refused the request's data: node",
         [](inference::ModelInferRequest& r) {
             r.set_model_name("pick");
             r.clear_inputs();
             r.clear_outputs();
             auto* values = r.add_inputs();
             values->set_name("x");
             values->set_datatype("FP32");
             values->add_shape(1);
             values->add_shape(4);
             for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) values->mutable_contents()->add_fp32_contents(v);
             auto* i = r.add_inputs();
             i->set_name("i");
             i->set_datatype("INT64");
             i->add_shape(1);
             i->add_shape(2);
             i->mutable_contents()->add_int64_contents(0);
             i->mutable_contents()->add_int64_contents(100);
         }},
        {"message over --max-request-bytes", grpc::StatusCode::RESOURCE_EXHAUSTED, "",
         [](inference::ModelInferRequest& r) { r.set_id(std::string(5 << 20, 'x')); }},
    };
    for (const auto& c : cases) {
        auto req = mlp_request(x, 3);
        c.edit(req);
        inference::ModelInferResponse res;
        const auto s = infer(req, res);
        check(s.error_code() == c.code && s.error_message().find(c.message) != std::string::npos,
              std::string(c.what) + ": got code " + std::to_string(int(s.error_code())) + " '" + s.error_message() + "'");
    }
    std::printf("grpc: %d of %d checks passed\n", checks - failures, checks);
    return failures == 0 ? 0 : 1;
}
