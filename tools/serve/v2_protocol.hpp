// The Open Inference Protocol v2 (KServe v2, as served by Triton and MLServer) over REST: request
// parsing and response building for infer, model metadata and errors, with the binary tensor data
// extension (Triton's `binary_tensor_data`). No HTTP here: bodies in, bodies out.
//
// Tensors: datatypes FP32, FP64, FP16, BF16, INT64, INT32, INT16, INT8, UINT64, UINT32, UINT16, UINT8
// and BOOL (the runtime's dtypes; BF16 is Triton's name), row-major. JSON `data` is
// the flattened tensor or the same values as nested arrays. With the binary extension, the body
// is the JSON header (its length in the Inference-Header-Content-Length HTTP header) followed by
// each binary input's bytes, in the order of `inputs`, sized by its
// `parameters.binary_data_size`; BOOL is one byte per element (0 or 1).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "capsule/tensor.hpp"
#include "model_repository.hpp"

namespace capsule::serve {

/// A request the server refuses: the HTTP status (400 malformed or mismatched, 404 unknown model
/// or version, 413 too large, 503 not ready or busy, 500 a failure inside the runtime) and a
/// message a person can act on. Sent as the protocol's error object {"error": message}.
struct ProtocolError : std::runtime_error {
    ProtocolError(int http_status, const std::string& message) : std::runtime_error(message), status(http_status) {}
    int status;
};

/// The protocol's name of a dtype (FP32, FP64, FP16, BF16, INT64 ... INT8, UINT64 ... UINT8, BOOL).
std::string_view datatype_name(DType dtype);

/// A parsed, validated infer request for one model version.
struct InferRequest {
    std::string id;  // echoed in the response ("" when absent)
    std::map<std::string, Tensor> inputs;
    /// Rows of the batch (dimension 0) with max_batch_size > 0, else 0.
    std::int64_t rows = 0;
    struct Output {
        std::string name;
        bool binary = false;
    };
    /// The outputs to return, in response order (every output when the request names none).
    std::vector<Output> outputs;
};

/// Checks a request's inputs against a model one at a time, whatever the transport, and collects
/// them into an InferRequest. Raises ProtocolError(400) naming the input and the cause.
class RequestInputs {
public:
    RequestInputs(const ModelVersion& model, InferRequest& request) : model_(model), request_(request) {}
    /// Checks the input's name (known, not given twice), datatype and shape (a batch in
    /// 1..max_batch_size, equal for every input); returns its dtype. Allocates nothing: the
    /// caller checks the data's size against element_count(shape) before making the tensor.
    DType check(const std::string& name, const std::string& datatype, const std::vector<std::int64_t>& shape);
    /// Elements of a checked shape (bounded by the model's sizes and max_batch_size).
    static std::size_t element_count(const std::vector<std::int64_t>& shape);
    /// Keeps the filled tensor of a checked input.
    void store(const std::string& name, Tensor t);
    /// Raises when an input of the model was not given.
    void finish() const;

private:
    const ModelVersion& model_;
    InferRequest& request_;
    std::set<std::string> checked_;
};

/// `text` in single quotes for a message: control characters, non-ASCII bytes (names may not be
/// valid UTF-8), quotes and backslashes as \xNN; cut after 200 bytes.
std::string quoted_text(std::string_view text);

/// A shape for a message, e.g. [1, 784]; a request's shape may have any rank, so at most 8
/// dimensions are shown.
std::string shape_text(const std::vector<std::int64_t>& shape);

/// A JSON document as text; invalid UTF-8 in strings (names from URLs or requests) is replaced
/// by U+FFFD rather than throwing.
std::string json_text(const nlohmann::json& doc);

/// Copies the tensor's bytes (row-major, little-endian; `bytes` must be its size) into `t`;
/// BOOL bytes must be 0 or 1.
void fill_from_bytes(Tensor& t, std::string_view bytes, const std::string& name);

/// Adds output `name` to the request's outputs. Raises ProtocolError(400) for an unknown or
/// repeated one.
void add_output(InferRequest& request, const ModelVersion& model, const std::string& name, bool binary);
/// Refuses (ProtocolError 400) an output parameter of an extension this server does not
/// implement: classification (Triton's classification extension).
void check_output_parameter(const std::string& output, const std::string& key);
/// When the request named no output (an absent or empty list, over REST and gRPC alike), asks for
/// every output of `model`, binary or not as `binary` says.
void default_outputs(InferRequest& request, const ModelVersion& model, bool binary);

/// Parses `body` against `model`'s inputs. `json_length`: the Inference-Header-Content-Length
/// header (binary extension), absent for a JSON-only body. Raises ProtocolError(400) naming the
/// input and the cause: malformed JSON, an unknown, missing or
/// repeated input, a datatype or shape that is not the model's (a batch outside
/// 1..max_batch_size, or inputs with different batches), data of the wrong count or type, a
/// value outside its datatype's range, binary sizes that do not add up to the body.
InferRequest parse_infer_request(std::string_view body, std::optional<std::size_t> json_length,
                                 const ModelVersion& model);

/// A response body: JSON, or the JSON header followed by binary outputs (then json_length is set
/// and the content type is application/octet-stream).
struct ResponseBody {
    std::string body;
    std::string content_type = "application/json";
    std::optional<std::size_t> json_length;
};

/// The infer response for `request` with `outputs` (in `model.outputs()` order).
ResponseBody infer_response(const InferRequest& request, const ModelVersion& model,
                            const std::vector<Tensor>& outputs);

/// Model metadata: name, versions, platform, inputs and outputs with datatypes and shapes (-1 is
/// the batch dimension), plus Capsule's readiness and plan.
nlohmann::json model_metadata(const ModelVersion& model, const std::vector<std::string>& versions);

/// {"error": message}.
std::string error_body(const std::string& message);

}  // namespace capsule::serve
