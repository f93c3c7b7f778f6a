// The main job's models as JSON IR graphs, built node by node with shapes from shape inference,
// and PyTorch's default initialisation of their parameters.
#include <cmath>
#include <random>

#include "capsule/training.hpp"

namespace capsule {

using std::string;

ModelKind parse_model_kind(std::string_view name) {
    if (name == "mlp") return ModelKind::mlp;
    if (name == "lenet") return ModelKind::lenet;
    throw Error(ErrorCode::input, "unknown model '" + string(name) + "'; valid: mlp, lenet");
}

namespace {

/// Appends nodes with consecutive ids; each op node's shape and dtype come from infer_type.
class GraphBuilder {
public:
    explicit GraphBuilder(Graph graph = {})
        : graph_(std::move(graph)), position_(node_positions(graph_)) {}

    std::int64_t input(const string& name, Shape shape, DType dtype = DType::float32) {
        Node n;
        n.kind = NodeKind::input;
        n.name = name;
        n.shape = std::move(shape);
        n.dtype = dtype;
        return add(std::move(n));
    }

    std::int64_t op(BackendOp op, std::vector<std::int64_t> parents, Attributes attrs = {},
                    const string& name = {}) {
        Node n;
        n.kind = NodeKind::op;
        n.op = op;
        n.name = name;
        n.parents = std::move(parents);
        n.attrs = std::move(attrs);
        std::vector<TensorType> types;
        for (auto p : n.parents) {
            auto it = position_.find(p);
            if (it == position_.end())
                throw Error(ErrorCode::input, "model builder: unknown parent id " + std::to_string(p));
            const auto& parent = graph_.nodes[it->second];
            types.push_back({parent.shape, parent.dtype});
        }
        const auto type = infer_type(n, types);
        n.shape = type.shape;
        n.dtype = type.dtype;
        return add(std::move(n));
    }

    Graph finish(std::vector<std::int64_t> outputs) {
        graph_.outputs = std::move(outputs);
        check_graph(graph_);
        return std::move(graph_);
    }

private:
    std::int64_t add(Node n) {
        n.id = graph_.nodes.empty() ? 0 : graph_.nodes.back().id + 1;
        graph_.nodes.push_back(std::move(n));
        position_.emplace(graph_.nodes.back().id, graph_.nodes.size() - 1);
        return graph_.nodes.back().id;
    }
    Graph graph_;
    std::unordered_map<std::int64_t, std::size_t> position_;
};

using I = std::int64_t;

I linear(GraphBuilder& g, I x, I out, const string& name) {
    return g.op(BackendOp::linear, {x}, {{"out_features", out}}, name);
}
I relu(GraphBuilder& g, I x) { return g.op(BackendOp::relu, {x}); }

}  // namespace

Graph model_graph(ModelKind kind, std::int64_t batch) {
    if (batch < 1) throw Error(ErrorCode::input, "batch size " + std::to_string(batch) + " must be >= 1");
    GraphBuilder g;
    I x = g.input("image", {batch, 1, 28, 28});
    if (kind == ModelKind::mlp) {
        x = g.op(BackendOp::flatten, {x}, {{"start_dim", I{1}}}, "flatten");
        x = relu(g, linear(g, x, 256, "fc1"));
        x = relu(g, linear(g, x, 256, "fc2"));
    } else {
        x = relu(g, g.op(BackendOp::conv2d, {x}, {{"out_channels", I{6}}, {"kernel_size", I{5}}, {"padding", I{2}}}, "conv1"));
        x = g.op(BackendOp::max_pool2d, {x}, {{"kernel_size", I{2}}}, "pool1");
        x = relu(g, g.op(BackendOp::conv2d, {x}, {{"out_channels", I{16}}, {"kernel_size", I{5}}}, "conv2"));
        x = g.op(BackendOp::max_pool2d, {x}, {{"kernel_size", I{2}}}, "pool2");
        x = g.op(BackendOp::flatten, {x}, {{"start_dim", I{1}}}, "flatten");
        x = relu(g, linear(g, x, 120, "fc1"));
        x = relu(g, linear(g, x, 84, "fc2"));
    }
    // The logits layer is the graph's output; its name keys its parameters (fc3.weight).
    return g.finish({linear(g, x, 10, "fc3")});
}

Graph training_graph(const Graph& model) {
    if (model.outputs.size() != 1)
        throw Error(ErrorCode::input, "a training graph needs a model with one output (the logits)");
    const auto index = model.index_of(model.outputs[0]);
    if (!index) throw Error(ErrorCode::input, "the model's output " + std::to_string(model.outputs[0]) + " is not a node id");
    const auto& logits = model.nodes[*index];
    if (logits.shape.size() != 2)
        throw Error(ErrorCode::input, "the model's output must be logits [batch, classes], got " + to_string(logits.shape));
    Graph base = model;
    base.parameters.reset();
    GraphBuilder g(std::move(base));
    const I label = g.input("label", {logits.shape[0]}, DType::int64);
    const I loss = g.op(BackendOp::cross_entropy, {logits.id, label}, {}, "loss");
    return g.finish({loss});
}

ParameterMap initial_parameters(const Graph& model, std::uint64_t seed) {
    std::mt19937_64 engine(seed);
    // 53 random bits → [0, 1), the same on every platform (std distributions are not).
    auto uniform = [&](double bound) {
        const double u = double(engine() >> 11) * 0x1.0p-53;
        return (2 * u - 1) * bound;
    };
    ParameterMap params;
    std::map<std::int64_t, TensorType> types;
    for (const auto& node : model.nodes) {
        std::vector<TensorType> parents;
        for (auto p : node.parents) parents.push_back(types.at(p));
        types[node.id] = {node.shape, node.dtype};
        const auto specs = parameter_specs(node, parents);
        if (specs.empty() || node.kind != NodeKind::op) continue;
        // fan_in = weight.numel() / out_features: in_features (linear), C_in/groups·kh·kw (conv).
        const auto& weight = specs[0].type.shape;
        const double fan_in = double(element_count(weight)) / double(weight[0]);
        const double bound = 1 / std::sqrt(fan_in);
        for (const auto& spec : specs) {
            std::vector<double> values(static_cast<std::size_t>(element_count(spec.type.shape)));
            for (auto& v : values) v = uniform(bound);
            params[spec.key] = Tensor::from_values(spec.type.dtype, spec.type.shape, values);
        }
    }
    return params;
}

}  // namespace capsule
