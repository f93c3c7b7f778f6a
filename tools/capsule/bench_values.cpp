// Deterministic pseudo-random inputs (and missing parameters) for `capsule bench`.
#include <cmath>
#include <new>
#include <random>
#include <spdlog/spdlog.h>

#include "bench.hpp"
#include "capsule/shape_math.hpp"

namespace capsule::cli {

namespace {

Tensor random_tensor(const TensorType& type, double scale, std::mt19937& rng) {
    std::vector<double> values(static_cast<std::size_t>(element_count(type.shape)));
    std::uniform_real_distribution<double> uniform(-scale, scale);
    std::bernoulli_distribution coin;
    for (auto& v : values) {
        switch (type.dtype) {
            case DType::boolean: v = coin(rng) ? 1 : 0; break;
            // Integers: 1, an index of any axis longer than 1 and never a zero divisor.
            default: v = is_floating(type.dtype) ? uniform(rng) : 1; break;
        }
    }
    return Tensor::from_values(type.dtype, type.shape, values);
}

/// The type of every parameter the graph's nodes read, by key.
std::map<std::string, TensorType> parameter_types(const Graph& graph) {
    const auto position = node_positions(graph);
    std::map<std::string, TensorType> types;
    std::vector<TensorType> parents;
    for (const auto& node : graph.nodes) {
        if (node.kind == NodeKind::input || node.kind == NodeKind::detach) continue;
        parents.clear();
        for (auto p : node.parents) {
            const auto& parent = graph.nodes.at(position.at(p));
            parents.push_back({parent.shape, parent.dtype});
        }
        for (auto& spec : parameter_specs(node, parents)) types[spec.key] = std::move(spec.type);
    }
    return types;
}

/// Weights uniform in ±1/sqrt(fan-in) (fan-in: every dimension after the first); running
/// variances 1, so that batch norm divides by a positive number.
Tensor random_parameter(const std::string& key, const TensorType& type, std::mt19937& rng) {
    if (key.ends_with("running_var"))
        return Tensor::from_values(type.dtype, type.shape,
                                   std::vector<double>(static_cast<std::size_t>(element_count(type.shape)), 1.0));
    double fan_in = 1;
    for (std::size_t i = 1; i < type.shape.size(); ++i) fan_in *= double(type.shape[i]);
    return random_tensor(type, 1.0 / std::sqrt(std::max(fan_in, 1.0)), rng);
}

/// make() (a tensor of `type` for `what`), with an allocation failure named: "bench input 'x'
/// float32[100000, 100000] needs 40000000000 bytes: out of memory" (ErrorCode::input: the shape
/// came from the model or --input-shape).
template <typename Make>
Tensor named_allocation(const std::string& what, const TensorType& type, Make&& make) {
    try {
        return make();
    } catch (const std::bad_alloc&) {
        const auto bytes = try_byte_size(type.shape, dtype_size(type.dtype));
        throw Error(ErrorCode::input, what + " " + std::string(to_string(type.dtype)) + to_string(type.shape) +
                                          " needs " + (bytes ? std::to_string(*bytes) : std::string("over 2^63")) +
                                          " bytes: out of memory");
    }
}

}  // namespace

std::map<std::string, Tensor> bench_values(const LoadedModel& model, ParameterMap& parameters,
                                           std::size_t& drawn_parameters) {
    std::mt19937 rng(0);
    std::map<std::string, Tensor> values;
    for (const auto& node : model.graph.nodes)
        if (node.kind == NodeKind::input)
            values.emplace(node.parameter_prefix(),
                           named_allocation("bench input '" + node.parameter_prefix() + "'", {node.shape, node.dtype},
                                            [&] { return random_tensor({node.shape, node.dtype}, 1.0, rng); }));
    drawn_parameters = 0;
    const bool no_parameters_given =
        model.parameter_inputs.empty() && !model.graph.parameters && parameters.empty();
    if (model.parameter_inputs.empty() && !no_parameters_given) return values;
    const auto types = parameter_types(model.graph);
    // An ONNX input that supplies parameters: every key it feeds has its type.
    for (const auto& [name, keys] : model.parameter_inputs) {
        const auto& type = types.at(keys.at(0));
        values.emplace(name, named_allocation("bench input '" + name + "'", type,
                                              [&] { return random_parameter(keys.at(0), type, rng); }));
        ++drawn_parameters;
    }
    if (no_parameters_given)
        for (const auto& [key, type] : types) {
            parameters.emplace(key, named_allocation("parameter '" + key + "'", type,
                                                     [&] { return random_parameter(key, type, rng); }));
            ++drawn_parameters;
        }
    return values;
}

}  // namespace capsule::cli
