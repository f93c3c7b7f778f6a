#include "v2_protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "capsule/error.hpp"
#include "capsule/float16.hpp"
#include "capsule/json_document.hpp"

namespace capsule::serve {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message) { throw ProtocolError(400, message); }

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
    constexpr std::size_t kShown = 8;
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size() && i < kShown; ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() > kShown) out += ", ... (" + std::to_string(shape.size()) + " dimensions)";
    return out + "]";
}

namespace {

/// An input's JSON shape: an array of non-negative integers.
std::vector<std::int64_t> read_shape(const json& input, const std::string& name) {
    if (!input.contains("shape") || !input["shape"].is_array())
        bad("input " + quoted_text(name) + ": 'shape' must be an array");
    std::vector<std::int64_t> shape;
    for (const auto& d : input["shape"]) {
        // A whole number past uint64 (2^64) reaches here as a double.
        const bool huge = (d.is_number_unsigned() && d.get<std::uint64_t>() > std::uint64_t(INT64_MAX)) ||
                          (d.is_number_float() && d.get<double>() >= 0x1p63);
        if (huge) bad("input " + quoted_text(name) + ": 'shape' dimension " + d.dump() + " is too large (over 2^63-1)");
        if (!d.is_number_integer()) bad("input " + quoted_text(name) + ": 'shape' must hold non-negative integers");
        shape.push_back(d.get<std::int64_t>());
    }
    return shape;
}

/// The JSON type of a value, for messages (user JSON is never printed back: it may be huge, or
/// nested deeper than printing can recurse).
std::string kind_of(const json& v) {
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_null()) return "null";
    return "the number " + v.dump();
}

/// The leaves of `data`, row-major: the flat list of the tensor's values, or arrays nested
/// exactly as `shape` ([[1, 2], [3, 4]] for [2, 2]; a ragged or deeper nesting is refused).
/// Nothing recurses deeper than the shape's rank.
std::vector<const json*> leaves(const json& data, const std::vector<std::int64_t>& shape, std::size_t n,
                                const std::string& name) {
    if (!data.is_array()) bad("input " + quoted_text(name) + ": 'data' must be an array");
    std::vector<const json*> out;
    const bool flat = std::none_of(data.begin(), data.end(), [](const json& v) { return v.is_array(); });
    if (flat) {
        if (data.size() != n)
            bad("input " + quoted_text(name) + ": 'data' holds " + std::to_string(data.size()) + " values, its shape " +
                shape_text(shape) + " needs " + std::to_string(n));
        for (const auto& v : data) out.push_back(&v);
        return out;
    }
    out.reserve(n);
    // Nested: level k must be an array of shape[k] elements, down to the leaves at depth rank.
    auto walk = [&](auto&& self, const json& node, std::size_t depth) -> void {
        if (depth == shape.size()) {
            if (node.is_array()) bad("input " + quoted_text(name) + ": 'data' is nested deeper than its shape " + shape_text(shape));
            out.push_back(&node);
            return;
        }
        if (!node.is_array() || std::int64_t(node.size()) != shape[depth])
            bad("input " + quoted_text(name) + ": nested 'data' does not match its shape " + shape_text(shape) +
                " at depth " + std::to_string(depth) + " (expected an array of " + std::to_string(shape[depth]) +
                ", got " + (node.is_array() ? "an array of " + std::to_string(node.size()) : kind_of(node)) + ")");
        for (const auto& item : node) self(self, item, depth + 1);
    };
    walk(walk, data, 0);
    return out;
}

/// What JSON value `v` should have been as an integer of tensor `t`'s datatype, whose range is
/// [lo, hi], or "" when it is one: an integer literal (a number with a fraction or an exponent,
/// such as 845.0, is not one, as JSON's integers are told apart by their text), in range.
template <typename Int>
std::string integer_fault(const Tensor& t, const json& v, Int lo, Int hi) {
    const std::string dt(datatype_name(t.dtype()));
    if (!v.is_number()) return "an integer (" + dt + ")";
    if (v.is_number_float())
        return "an integer literal (" + dt + "): a JSON number with a fraction or exponent is not one, even when whole";
    bool fits = false;
    if (v.is_number_unsigned()) {
        fits = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi);
    } else {
        const auto x = v.get<std::int64_t>();
        fits = x >= static_cast<std::int64_t>(lo) && (x < 0 || static_cast<std::uint64_t>(x) <= static_cast<std::uint64_t>(hi));
    }
    if (fits) return "";
    return "within " + dt + "'s range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

/// Stores JSON integer `v` as element i of T; `wrong` refuses anything integer_fault names.
template <typename T, typename Wrong>
void store_integer(Tensor& t, std::size_t i, const json& v, Wrong& wrong) {
    const auto fault = integer_fault<T>(t, v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    if (!fault.empty()) wrong(i, fault);
    static_cast<T*>(t.data())[i] = std::is_signed_v<T> ? static_cast<T>(v.get<std::int64_t>()) : static_cast<T>(v.get<std::uint64_t>());
}

void fill_from_json(Tensor& t, const std::vector<const json*>& values, const std::string& name) {
    const auto n = values.size();
    auto wrong = [&](std::size_t i, const std::string& what) {
        bad("input " + quoted_text(name) + ": value " + std::to_string(i) + " is " + kind_of(*values[i]) + ", not " + what);
    };
    for (std::size_t i = 0; i < n; ++i) {
        const json& v = *values[i];
        switch (t.dtype()) {
            case DType::float32: {
                if (!v.is_number()) wrong(i, "a number");
                const auto f = static_cast<float>(v.get<double>());  // rounds to nearest, as float32 parsing does
                if (std::isinf(f)) wrong(i, "within FP32's range");
                static_cast<float*>(t.data())[i] = f;
                break;
            }
            case DType::float64:
                if (!v.is_number()) wrong(i, "a number");
                static_cast<double*>(t.data())[i] = v.get<double>();
                break;
            case DType::int64: store_integer<std::int64_t>(t, i, v, wrong); break;
            case DType::boolean:
                if (!v.is_boolean()) wrong(i, "true or false");
                static_cast<std::uint8_t*>(t.data())[i] = v.get<bool>() ? 1 : 0;
                break;
            case DType::float16:
            case DType::bfloat16: {
                if (!v.is_number()) wrong(i, "a number");
                const double d = v.get<double>();
                const auto bits = t.dtype() == DType::float16 ? float16_from_double(d)
                                                              : bfloat16_from_double(d);
                const float back = t.dtype() == DType::float16 ? float16_to_float(bits) : bfloat16_to_float(bits);
                if (std::isinf(back)) wrong(i, t.dtype() == DType::float16 ? "within FP16's range" : "within BF16's range");
                static_cast<std::uint16_t*>(t.data())[i] = bits;
                break;
            }
            case DType::uint64: store_integer<std::uint64_t>(t, i, v, wrong); break;
            case DType::int32: store_integer<std::int32_t>(t, i, v, wrong); break;
            case DType::int16: store_integer<std::int16_t>(t, i, v, wrong); break;
            case DType::int8: store_integer<std::int8_t>(t, i, v, wrong); break;
            case DType::uint32: store_integer<std::uint32_t>(t, i, v, wrong); break;
            case DType::uint16: store_integer<std::uint16_t>(t, i, v, wrong); break;
            case DType::uint8: store_integer<std::uint8_t>(t, i, v, wrong); break;
        }
    }
}

/// Counts a JSON text's values and refuses it, before any document is built, when it holds more
/// than a request to `model` needs (every input at max_batch_size rows, plus slack for the
/// rest): a document costs tens of bytes per value, so 60 MB of `[[],[],...]` would take
/// gigabytes. Small texts skip the count.
void check_value_budget(std::string_view text, const ModelVersion& model) {
    constexpr std::size_t kCountAbove = std::size_t(1) << 20, kSlack = 10000;
    if (text.size() < kCountAbove) return;
    std::size_t budget = kSlack;
    const auto rows = std::max<std::int64_t>(1, model.config().max_batch_size);
    for (const auto& m : model.inputs()) {
        std::size_t n = 1;
        for (auto d : m.shape) n *= static_cast<std::size_t>(d < 0 ? rows : d);
        budget += n;
    }
    struct Counter : nlohmann::json_sax<json> {
        std::size_t values = 0, budget = 0;
        bool more() { return ++values <= budget; }
        bool null() override { return more(); }
        bool boolean(bool) override { return more(); }
        bool number_integer(number_integer_t) override { return more(); }
        bool number_unsigned(number_unsigned_t) override { return more(); }
        bool number_float(number_float_t, const string_t&) override { return more(); }
        bool string(string_t&) override { return more(); }
        bool binary(binary_t&) override { return more(); }
        bool start_object(std::size_t) override { return more(); }
        bool key(string_t&) override { return true; }
        bool end_object() override { return true; }
        bool start_array(std::size_t) override { return more(); }
        bool end_array() override { return true; }
        bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
    } counter;
    counter.budget = budget;
    json::sax_parse(text, &counter, json::input_format_t::json, false);
    if (counter.values > budget)
        bad("the request holds more than " + std::to_string(budget) + " JSON values, more than any request to this "
            "model needs (its inputs at max_batch_size rows); send large tensors as binary data");
}

/// `parameters.<key>` of an input or output object, or null.
const json* parameter(const json& object, const char* key) {
    if (!object.contains("parameters")) return nullptr;
    const auto& p = object["parameters"];
    if (!p.is_object()) bad("'parameters' must be an object");
    return p.contains(key) ? &p[key] : nullptr;
}

bool flag(const json* value, const std::string& what) {
    if (!value) return false;
    if (!value->is_boolean()) bad(what + " must be true or false");
    return value->get<bool>();
}

/// A tensor's values as a JSON array. JSON has no NaN or infinity: such an output must be asked
/// for as binary data (nlohmann would write null, a silently wrong value).
json tensor_values(const Tensor& t, const std::string& name) {
    if (is_floating(t.dtype()))
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            const double v = t.at(i);
            if (!std::isfinite(v))
                throw ProtocolError(400, "output " + quoted_text(name) + " holds " + (std::isnan(v) ? "NaN" : "an infinity") +
                                             " at " + std::to_string(i) + ", which JSON cannot carry: ask for it as "
                                             "binary data (outputs[].parameters.binary_data: true)");
        }
    json data = json::array();
    auto& array = data.get_ref<json::array_t&>();
    const auto n = static_cast<std::size_t>(t.numel());
    array.reserve(n);
    for (std::size_t i = 0; i < n; ++i) switch (t.dtype()) {
            case DType::float32: array.emplace_back(double(static_cast<const float*>(t.data())[i])); break;
            case DType::float64: array.emplace_back(static_cast<const double*>(t.data())[i]); break;
            case DType::int64: array.emplace_back(static_cast<const std::int64_t*>(t.data())[i]); break;
            case DType::boolean: array.emplace_back(static_cast<const std::uint8_t*>(t.data())[i] != 0); break;
            case DType::uint64: array.emplace_back(static_cast<const std::uint64_t*>(t.data())[i]); break;
            case DType::float16:
            case DType::bfloat16: array.emplace_back(t.at(static_cast<std::int64_t>(i))); break;
            default: array.emplace_back(static_cast<std::int64_t>(t.at(static_cast<std::int64_t>(i))));  // 8 to 32-bit integers
        }
    return data;
}

}  // namespace

std::string quoted_text(std::string_view text) {
    constexpr std::size_t kMax = 200;
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < kMax; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'') {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        } else {
            out += char(c);
        }
    }
    if (text.size() > kMax) out += "...";
    return out + "'";
}

void fill_from_bytes(Tensor& t, std::string_view bytes, const std::string& name) {
    if (bytes.size() != t.nbytes())
        bad("input " + quoted_text(name) + ": " + std::to_string(bytes.size()) + " bytes of data, its datatype and shape need " +
            std::to_string(t.nbytes()));
    std::memcpy(t.data(), bytes.data(), bytes.size());
    if (t.dtype() == DType::boolean)
        for (std::size_t i = 0; i < bytes.size(); ++i)
            if (static_cast<std::uint8_t>(bytes[i]) > 1)
                bad("input " + quoted_text(name) + ": BOOL byte " + std::to_string(i) + " is " +
                    std::to_string(static_cast<std::uint8_t>(bytes[i])) + ", not 0 or 1");
}

DType RequestInputs::check(const std::string& name, const std::string& datatype, const std::vector<std::int64_t>& shape) {
    const TensorMetadata* expected = nullptr;
    for (const auto& m : model_.inputs())
        if (m.name == name) expected = &m;
    if (!expected) {
        std::string names;
        for (const auto& m : model_.inputs()) names += (names.empty() ? "" : ", ") + m.name;
        bad("unknown input " + quoted_text(name) + "; the model's inputs: " + names);
    }
    if (request_.inputs.count(name) || !checked_.insert(name).second) bad("input " + quoted_text(name) + " is given twice");
    if (datatype != datatype_name(expected->dtype))
        bad("input " + quoted_text(name) + ": datatype " + quoted_text(datatype) + " is not the model's " +
            std::string(datatype_name(expected->dtype)));
    for (auto d : shape)
        if (d < 0) bad("input " + quoted_text(name) + ": shape " + shape_text(shape) + " must hold non-negative integers");
    bool same = shape.size() == expected->shape.size();
    for (std::size_t i = 0; same && i < shape.size(); ++i) same = expected->shape[i] == -1 || expected->shape[i] == shape[i];
    if (!same)
        bad("input " + quoted_text(name) + ": shape " + shape_text(shape) + " is not the model's " + shape_text(expected->shape) +
            (expected->shape.empty() || expected->shape[0] != -1 ? "" : " (-1: the batch dimension)"));
    if (model_.config().max_batch_size > 0) {
        const auto rows = shape.at(0);
        if (rows < 1 || rows > model_.config().max_batch_size)
            bad("input " + quoted_text(name) + ": batch " + std::to_string(rows) + " is outside 1.." +
                std::to_string(model_.config().max_batch_size) + " (max_batch_size)");
        if (request_.rows != 0 && rows != request_.rows)
            bad("input " + quoted_text(name) + ": batch " + std::to_string(rows) + " differs from the other inputs' " +
                std::to_string(request_.rows));
        request_.rows = rows;
    }
    return expected->dtype;
}

std::size_t RequestInputs::element_count(const std::vector<std::int64_t>& shape) {
    // Bounded: every dimension is the model's but the batch, which is at most max_batch_size.
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

void RequestInputs::store(const std::string& name, Tensor t) { request_.inputs.emplace(name, std::move(t)); }

void RequestInputs::finish() const {
    for (const auto& m : model_.inputs())
        if (!request_.inputs.count(m.name)) bad("missing input " + quoted_text(m.name) + "");
}

void add_output(InferRequest& request, const ModelVersion& model, const std::string& name, bool binary) {
    bool known = false;
    for (const auto& m : model.outputs()) known = known || m.name == name;
    if (!known) bad("unknown output " + quoted_text(name) + "");
    for (const auto& o : request.outputs)
        if (o.name == name) bad("output " + quoted_text(name) + " is requested twice");
    request.outputs.push_back({name, binary});
}

void check_output_parameter(const std::string& output, const std::string& key) {
    if (key == "classification")
        bad("output " + quoted_text(output) + ": parameter 'classification' asks for the classification extension, "
            "which this server does not support");
}

void default_outputs(InferRequest& request, const ModelVersion& model, bool binary) {
    if (request.outputs.empty())
        for (const auto& m : model.outputs()) request.outputs.push_back({m.name, binary});
}

std::string_view datatype_name(DType dtype) {
    switch (dtype) {
        case DType::float32: return "FP32";
        case DType::float64: return "FP64";
        case DType::int64: return "INT64";
        case DType::boolean: return "BOOL";
        case DType::int32: return "INT32";
        case DType::int16: return "INT16";
        case DType::int8: return "INT8";
        case DType::uint64: return "UINT64";
        case DType::uint32: return "UINT32";
        case DType::uint16: return "UINT16";
        case DType::uint8: return "UINT8";
        case DType::float16: return "FP16";
        case DType::bfloat16: return "BF16";  // Triton's name; the v2 protocol lists no bfloat16
    }
    return "?";
}

InferRequest parse_infer_request(std::string_view body, std::optional<std::size_t> json_length,
                                 const ModelVersion& model) {
    if (json_length && *json_length > body.size())
        bad("Inference-Header-Content-Length " + std::to_string(*json_length) + " exceeds the body (" +
            std::to_string(body.size()) + " bytes)");
    const std::string_view header = json_length ? body.substr(0, *json_length) : body;
    std::string_view binary = json_length ? body.substr(*json_length) : std::string_view{};
    check_value_budget(header, model);
    json doc;
    try {
        doc = parse_json_document(header, "request");
    } catch (const Error& e) {
        bad(e.what());
    }
    if (!doc.is_object()) bad("the request must be a JSON object");
    for (const auto& [key, _] : doc.items())
        if (key != "id" && key != "inputs" && key != "outputs" && key != "parameters")
            bad("unknown request key " + quoted_text(key) + " (valid: id, parameters, inputs, outputs)");
    InferRequest request;
    if (doc.contains("id")) {
        if (!doc["id"].is_string()) bad("'id' must be a string");
        request.id = doc["id"].get<std::string>();
    }
    const bool binary_default = flag(parameter(doc, "binary_data_output"), "parameters.binary_data_output");
    if (!doc.contains("inputs") || !doc["inputs"].is_array()) bad("'inputs' must be an array of tensors");
    RequestInputs inputs(model, request);
    for (const auto& input : doc["inputs"]) {
        if (!input.is_object() || !input.contains("name") || !input["name"].is_string())
            bad("each input must be an object with a string 'name'");
        const auto name = input["name"].get<std::string>();
        for (const auto& [key, _] : input.items())
            if (key != "name" && key != "shape" && key != "datatype" && key != "parameters" && key != "data")
                bad("input " + quoted_text(name) + ": unknown key " + quoted_text(key) +
                    " (valid: name, shape, datatype, parameters, data)");
        if (!input.contains("datatype") || !input["datatype"].is_string())
            bad("input " + quoted_text(name) + ": 'datatype' must be a string such as \"FP32\"");
        const auto shape = read_shape(input, name);
        const DType dtype = inputs.check(name, input["datatype"].get<std::string>(), shape);
        const std::size_t n = RequestInputs::element_count(shape);
        // The data is checked before the tensor is allocated: a small body cannot make the server
        // allocate a large batch's worth of memory.
        if (const json* size = parameter(input, "binary_data_size")) {
            if (!json_length) bad("input " + quoted_text(name) + ": binary_data_size without an Inference-Header-Content-Length header");
            if (input.contains("data")) bad("input " + quoted_text(name) + ": both 'data' and binary_data_size");
            if (!size->is_number_unsigned()) bad("input " + quoted_text(name) + ": binary_data_size must be a non-negative integer");
            const auto bytes = size->get<std::uint64_t>();
            const std::size_t needed = n * dtype_size(dtype);
            if (bytes != needed)
                bad("input " + quoted_text(name) + ": binary_data_size " + std::to_string(bytes) + " is not the " +
                    std::to_string(needed) + " bytes of " + std::string(datatype_name(dtype)) + shape_text(shape));
            if (bytes > binary.size())
                bad("input " + quoted_text(name) + ": binary_data_size " + std::to_string(bytes) + " exceeds the " +
                    std::to_string(binary.size()) + " binary bytes left in the body");
            Tensor t = Tensor::zeros(dtype, shape);
            fill_from_bytes(t, binary.substr(0, bytes), name);
            binary.remove_prefix(bytes);
            inputs.store(name, std::move(t));
        } else {
            if (!input.contains("data")) bad("input " + quoted_text(name) + ": no 'data' and no binary_data_size");
            const auto values = leaves(input["data"], shape, n, name);
            Tensor t = Tensor::zeros(dtype, shape);
            fill_from_json(t, values, name);
            inputs.store(name, std::move(t));
        }
    }
    if (!binary.empty())
        bad(std::to_string(binary.size()) + " bytes of binary data are not claimed by any input's binary_data_size");
    inputs.finish();
    if (doc.contains("outputs")) {
        if (!doc["outputs"].is_array()) bad("'outputs' must be an array");
        for (const auto& output : doc["outputs"]) {  // an empty list asks for every output, as gRPC's
            if (!output.is_object() || !output.contains("name") || !output["name"].is_string())
                bad("each requested output must be an object with a string 'name'");
            const auto name = output["name"].get<std::string>();
            for (const auto& [key, _] : output.items())
                if (key != "name" && key != "parameters")
                    bad("output " + quoted_text(name) + ": unknown key " + quoted_text(key) + " (valid: name, parameters)");
            if (output.contains("parameters") && output["parameters"].is_object())
                for (const auto& [key, _] : output["parameters"].items()) check_output_parameter(name, key);
            const json* b = parameter(output, "binary_data");
            add_output(request, model, name, b ? flag(b, "output " + quoted_text(name) + ": binary_data") : binary_default);
        }
    }
    default_outputs(request, model, binary_default);
    return request;
}

ResponseBody infer_response(const InferRequest& request, const ModelVersion& model,
                            const std::vector<Tensor>& outputs) {
    json doc{{"model_name", model.model()}, {"model_version", model.version()}};
    if (!request.id.empty()) doc["id"] = request.id;
    json list = json::array();
    std::string binary;
    for (const auto& wanted : request.outputs) {
        std::size_t k = 0;
        while (model.outputs()[k].name != wanted.name) ++k;
        const Tensor& t = outputs.at(k);
        json out{{"name", wanted.name}, {"datatype", datatype_name(t.dtype())}, {"shape", t.shape()}};
        if (wanted.binary) {
            out["parameters"] = {{"binary_data_size", t.nbytes()}};
            binary.append(static_cast<const char*>(t.data()), t.nbytes());
        } else {
            out["data"] = tensor_values(t, wanted.name);
        }
        list.push_back(std::move(out));
    }
    doc["outputs"] = std::move(list);
    ResponseBody response;
    response.body = json_text(doc);
    const bool any_binary = std::any_of(request.outputs.begin(), request.outputs.end(),
                                        [](const InferRequest::Output& o) { return o.binary; });
    if (any_binary) {
        response.json_length = response.body.size();
        response.body += binary;
        response.content_type = "application/octet-stream";
    }
    return response;
}

json model_metadata(const ModelVersion& model, const std::vector<std::string>& versions) {
    auto tensors = [](const std::vector<TensorMetadata>& list) {
        json out = json::array();
        for (const auto& m : list) out.push_back({{"name", m.name}, {"datatype", datatype_name(m.dtype)}, {"shape", m.shape}});
        return out;
    };
    json doc{{"name", model.model()}, {"versions", versions}, {"platform", "capsule"},
             {"inputs", tensors(model.inputs())}, {"outputs", tensors(model.outputs())}};
    doc["parameters"] = {{"ready", model.ready()}, {"profile", model.config().profile},
                         {"max_batch_size", model.config().max_batch_size}};
    if (!model.ready()) doc["parameters"]["reason"] = model.reason();
    else doc["parameters"]["plan"] = model.plan_summary();
    return doc;
}

std::string json_text(const json& doc) { return doc.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_body(const std::string& message) {
    // A parser's message may quote the request (an unterminated 5 MB string): keep the start.
    constexpr std::size_t kMax = 2000;
    return json_text(json{{"error", message.size() <= kMax ? message : message.substr(0, kMax) + "... (cut)"}});
}

}  // namespace capsule::serve
