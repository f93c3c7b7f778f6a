#include "model_config.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "capsule/json_document.hpp"

namespace capsule::serve {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& where, const std::string& why) {
    throw Error(ErrorCode::input, path.string() + ": " + where + ": " + why);
}

void only_keys(const json& object, std::initializer_list<const char*> allowed, const std::filesystem::path& path,
               const std::string& where) {
    if (!object.is_object()) fail(path, where, "expected an object");
    for (const auto& [key, _] : object.items())
        if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }))
            fail(path, where, "unknown key '" + key + "'");
}

std::int64_t count(const json& v, std::int64_t lo, std::int64_t hi, const std::filesystem::path& path,
                   const std::string& where) {
    if (!v.is_number_integer()) fail(path, where, "expected an integer");
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(hi))
        fail(path, where, "must be at most " + std::to_string(hi));
    const auto n = v.get<std::int64_t>();
    if (n < lo || n > hi) fail(path, where, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return n;
}

}  // namespace

ModelConfig read_model_config(const std::filesystem::path& path) {
    std::error_code ec;  // a FIFO would block the start, /dev/zero would never end
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error(ErrorCode::input, path.string() + ": the model configuration must be a regular file");
    if (std::filesystem::file_size(path, ec) > (std::uintmax_t(1) << 20))
        throw Error(ErrorCode::input, path.string() + ": the model configuration is larger than 1 MiB");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::input, path.string() + ": cannot read the model configuration");
    std::stringstream text;
    text << in.rdbuf();
    const json doc = parse_json_document(text.str(), path);
    only_keys(doc, {"profile", "max_batch_size", "inputs", "dynamic_batching", "threads"}, path, "$");
    ModelConfig config;
    if (!doc.contains("profile") || !doc["profile"].is_string() || doc["profile"].get<std::string>().empty())
        fail(path, "$.profile", "required: a backend profile name or profile .json file");
    config.profile = doc["profile"].get<std::string>();
    if (doc.contains("max_batch_size"))
        config.max_batch_size = count(doc["max_batch_size"], 0, 4096, path, "$.max_batch_size");
    if (doc.contains("threads")) config.threads = int(count(doc["threads"], 0, 4096, path, "$.threads"));
    if (doc.contains("inputs")) {
        const auto& inputs = doc["inputs"];
        if (!inputs.is_object()) fail(path, "$.inputs", "expected an object of input name to shape");
        for (const auto& [name, dims] : inputs.items()) {
            const std::string where = "$.inputs." + name;
            if (!dims.is_array()) fail(path, where, "expected a shape (an array of dimensions)");
            Shape shape;
            for (std::size_t i = 0; i < dims.size(); ++i)
                shape.push_back(count(dims[i], 0, std::int64_t(1) << 40, path, where + "[" + std::to_string(i) + "]"));
            config.inputs.emplace(name, std::move(shape));
        }
    }
    if (doc.contains("dynamic_batching")) {
        const auto& db = doc["dynamic_batching"];
        only_keys(db, {"max_queue_delay_us", "preferred_batch_sizes"}, path, "$.dynamic_batching");
        if (config.max_batch_size == 0)
            fail(path, "$.dynamic_batching", "needs max_batch_size > 0 (the batch is dimension 0)");
        DynamicBatching batching;
        if (db.contains("max_queue_delay_us"))
            batching.max_queue_delay_us =
                count(db["max_queue_delay_us"], 0, 10'000'000, path, "$.dynamic_batching.max_queue_delay_us");
        if (db.contains("preferred_batch_sizes")) {
            const auto& sizes = db["preferred_batch_sizes"];
            if (!sizes.is_array()) fail(path, "$.dynamic_batching.preferred_batch_sizes", "expected an array");
            for (std::size_t i = 0; i < sizes.size(); ++i)
                batching.preferred_batch_sizes.push_back(count(sizes[i], 1, config.max_batch_size, path,
                    "$.dynamic_batching.preferred_batch_sizes[" + std::to_string(i) + "]"));
            std::sort(batching.preferred_batch_sizes.begin(), batching.preferred_batch_sizes.end());
        }
        config.dynamic_batching = batching;
    }
    return config;
}

}  // namespace capsule::serve
