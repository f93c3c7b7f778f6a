// ONNX RNN, GRU and LSTM (opsets 7-14) unrolled over their static sequence length into BackendOps:
// the input projection X·Wᵀ (+ biases) of every time step is one `matmul`, then each step is a
// `matmul` of the previous hidden state by Rᵀ, gate slices, activations and elementwise updates,
// exactly the equations of the ONNX spec (docs/onnx.md states the conditions). W, R, B, initial
// states and peepholes may be constants or graph inputs.
#include <set>

#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;
using std::vector;
using Id = std::int64_t;

namespace {

enum class Cell { rnn, gru, lstm };

constexpr std::int64_t kMaxSteps = 4096;  // time steps × directions: bounds the unrolled graph

/// One activation of the `activations` attribute, with its alpha / beta where it takes them.
struct Activation {
    string name;
    double alpha = 0, beta = 0;
};

struct RecurrentSpec {
    Cell cell = Cell::rnn;
    std::int64_t gates = 1, hidden = 0, directions = 1, steps = 0, batch = 0, input = 0;
    bool reverse_only = false, batch_first = false, linear_before_reset = false;
    std::optional<double> clip;
    vector<Activation> activations;  // per direction: f (, g (, h))
    DType dtype = DType::float32;
};

/// The `activations` attribute (or the defaults: RNN Tanh; GRU Sigmoid, Tanh; LSTM Sigmoid, Tanh,
/// Tanh), `count` per direction; alphas and betas are taken in order by the activations that use
/// them, as ONNX Runtime reads them.
vector<Activation> read_activations(const onnx::NodeProto& n, Cell cell, std::int64_t directions) {
    const vector<string> defaults = cell == Cell::rnn ? vector<string>{"Tanh"}
                                    : cell == Cell::gru ? vector<string>{"Sigmoid", "Tanh"}
                                                        : vector<string>{"Sigmoid", "Tanh", "Tanh"};
    vector<string> names;
    if (const auto* a = find_attr(n, "activations")) names.assign(a->strings().begin(), a->strings().end());
    if (names.empty())
        for (std::int64_t d = 0; d < directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
    if (names.size() != defaults.size() * static_cast<std::size_t>(directions))
        unsupported("activations lists " + std::to_string(names.size()) + " functions, expected " +
                    std::to_string(defaults.size() * static_cast<std::size_t>(directions)));
    vector<float> alphas, betas;
    if (const auto* a = find_attr(n, "activation_alpha")) alphas.assign(a->floats().begin(), a->floats().end());
    if (const auto* a = find_attr(n, "activation_beta")) betas.assign(a->floats().begin(), a->floats().end());
    std::size_t next_alpha = 0, next_beta = 0;
    auto take = [](const vector<float>& from, std::size_t& next, double fallback) {
        return next < from.size() ? static_cast<double>(from[next++]) : fallback;
    };
    vector<Activation> out;
    for (const auto& name : names) {
        Activation act{name};
        if (name == "LeakyRelu") act.alpha = take(alphas, next_alpha, 0.01);
        else if (name == "Elu") act.alpha = take(alphas, next_alpha, 1.0);
        else if (name == "HardSigmoid") {
            act.alpha = take(alphas, next_alpha, 0.2);
            act.beta = take(betas, next_beta, 0.5);
        } else if (!std::set<string>{"Sigmoid", "Tanh", "Relu", "Softsign", "Softplus"}.count(name)) {
            unsupported("activation '" + name + "' (supported: Sigmoid, Tanh, Relu, LeakyRelu, Elu, HardSigmoid, Softsign, Softplus)");
        }
        out.push_back(act);
    }
    return out;
}

RecurrentSpec read_spec(ImportContext& c, const onnx::NodeProto& n, Cell cell) {
    RecurrentSpec s;
    s.cell = cell;
    s.gates = cell == Cell::rnn ? 1 : cell == Cell::gru ? 3 : 4;
    const auto& xt = c.type(n.input(0));
    s.dtype = xt.dtype;
    if (s.dtype != DType::float32 && s.dtype != DType::float64) unsupported("X must be float32 or float64");
    if (xt.shape.size() != 3) unsupported("X must have rank 3, got shape " + to_string(xt.shape));
    const auto layout = attr_int(n, "layout", 0);
    if (layout != 0 && layout != 1) unsupported("layout " + std::to_string(layout) + " (0: [S, B, I], 1: [B, S, I])");
    s.batch_first = layout == 1;
    s.steps = xt.shape[s.batch_first ? 1 : 0];
    s.batch = xt.shape[s.batch_first ? 0 : 1];
    s.input = xt.shape[2];
    const string direction = attr_string(n, "direction", "forward");
    if (direction == "bidirectional") s.directions = 2;
    else if (direction == "reverse") s.reverse_only = true;
    else if (direction != "forward") unsupported("direction '" + direction + "'");
    const Shape& rs = c.type(n.input(2)).shape;
    if (rs.size() != 3) unsupported("R must have rank 3, got shape " + to_string(rs));
    s.hidden = attr_int(n, "hidden_size", rs[2]);
    // Bounds before any product of them: sizes a model declares are untrusted.
    constexpr std::int64_t kMaxSize = std::int64_t(1) << 24;
    if (s.hidden < 1 || s.hidden > kMaxSize || s.input > kMaxSize || s.batch > kMaxSize)
        unsupported("hidden_size " + std::to_string(s.hidden) + ", input size " + std::to_string(s.input) + " or batch " +
                    std::to_string(s.batch) + " outside [1, 2^24]");
    if (s.steps > kMaxSteps / s.directions) unsupported("more than " + std::to_string(kMaxSteps) + " time steps to unroll");
    const Shape w_expected{s.directions, s.gates * s.hidden, s.input}, r_expected{s.directions, s.gates * s.hidden, s.hidden};
    if (c.type(n.input(1)).shape != w_expected) unsupported("W has shape " + to_string(c.type(n.input(1)).shape) + ", expected " + to_string(w_expected));
    if (rs != r_expected) unsupported("R has shape " + to_string(rs) + ", expected " + to_string(r_expected));
    if (s.steps < 1 || s.batch < 1 || s.input < 1) unsupported("empty sequence, batch or input size");
    if (const auto* a = find_attr(n, "clip")) {
        if (!(a->f() > 0)) unsupported("clip must be positive");
        s.clip = a->f();
    }
    if (attr_int(n, "input_forget", 0) != 0) unsupported("input_forget (coupled input and forget gates)");
    s.linear_before_reset = attr_int(n, "linear_before_reset", 0) != 0;
    s.activations = read_activations(n, cell, s.directions);
    return s;
}

/// Builds the unrolled cell; holds the node's context and the handful of helpers every step uses.
class Unroller {
public:
    Unroller(ImportContext& c, const onnx::NodeProto& n, const RecurrentSpec& s) : c_(c), n_(n), s_(s) {}

    void run();

private:
    ImportContext& c_;
    const onnx::NodeProto& n_;
    const RecurrentSpec& s_;

    Id slice(Id x, std::int64_t axis, std::int64_t start, std::int64_t end) { return slice_axis(c_, x, axis, start, end); }
    Id reshape(Id x, Shape shape) { return c_.add("reshape", {x}, {{"shape", std::move(shape)}}); }
    Id add(Id a, Id b) { return c_.add("add", {a, b}); }
    Id mul(Id a, Id b) { return c_.add("mul", {a, b}); }
    Id gate(Id x, std::int64_t k) { return slice(x, 1, k * s_.hidden, (k + 1) * s_.hidden); }
    /// Entry d of a per-direction input [D, ...] without its leading axis.
    Id direction_of(Id x, std::int64_t d) {
        Shape rest = c_.node_type(x).shape;
        rest.erase(rest.begin());
        return reshape(slice(x, 0, d, d + 1), rest);
    }
    /// Activation `a` of x; `clipped`: x first clamped to [−clip, clip] (every gate's input; not
    /// LSTM's output activation h(Ct), as ONNX Runtime).
    Id apply(const Activation& a, Id x, bool clipped = true) {
        Id pre = x;
        if (s_.clip && clipped) pre = c_.add("clamp", {x}, {{"min", -*s_.clip}, {"max", *s_.clip}});
        if (a.name == "Sigmoid") return c_.add("sigmoid", {pre});
        if (a.name == "Tanh") return c_.add("tanh", {pre});
        if (a.name == "Relu") return c_.add("relu", {pre});
        if (a.name == "Softsign") return c_.add("softsign", {pre});
        if (a.name == "Softplus") return c_.add("softplus", {pre});
        if (a.name == "LeakyRelu") return c_.add("leaky_relu", {pre}, {{"negative_slope", a.alpha}});
        if (a.name == "Elu") return c_.add("elu", {pre}, {{"alpha", a.alpha}});
        return c_.add("hardsigmoid", {pre}, {{"alpha", a.alpha}, {"beta", a.beta}});
    }
    /// An optional per-direction state input [D, B, H] (batch-first: [B, D, H]) for direction d, or zeros.
    Id initial_state(int input, std::int64_t d) {
        const string name = input_name(n_, input);
        if (name.empty())
            return filled(c_, n_, s_.dtype, 0, {s_.batch, s_.hidden});
        Id x = c_.runtime(name);
        const Shape expected = s_.batch_first ? Shape{s_.batch, s_.directions, s_.hidden} : Shape{s_.directions, s_.batch, s_.hidden};
        if (c_.node_type(x).shape != expected)
            unsupported("input " + std::to_string(input) + " has shape " + to_string(c_.node_type(x).shape) + ", expected " + to_string(expected));
        if (s_.batch_first) x = c_.add("permute", {x}, {{"dims", vector<std::int64_t>{1, 0, 2}}});
        return direction_of(x, d);
    }

    struct Direction {
        vector<Id> hidden;  // per time step, in time order: [B, H]
        Id last_h = -1, last_c = -1;
    };
    Direction unroll(Id x_flat, std::int64_t d);
    void define_outputs(const vector<Direction>& dirs);
};

/// Direction d over the [S·B, I] input: its steps run backwards when it is the reverse direction.
Unroller::Direction Unroller::unroll(Id x_flat, std::int64_t d) {
    const std::int64_t H = s_.hidden, G = s_.gates, B = s_.batch;
    const bool backwards = s_.reverse_only || d == 1;
    const Id w_t = c_.add("permute", {direction_of(c_.runtime(n_.input(1)), d)}, {{"dims", vector<std::int64_t>{1, 0}}});  // [I, GH]
    const Id r_t = c_.add("permute", {direction_of(c_.runtime(n_.input(2)), d)}, {{"dims", vector<std::int64_t>{1, 0}}});  // [H, GH]
    Id projected = c_.add("matmul", {x_flat, w_t});  // [S·B, GH]
    Id recurrent_bias_h = -1;  // GRU with linear_before_reset: R's h-gate bias, inside r ⊙ (…)
    if (const string b = input_name(n_, 3); !b.empty()) {
        if (c_.type(b).shape != Shape{s_.directions, 2 * G * H})
            unsupported("B has shape " + to_string(c_.type(b).shape) + ", expected " + to_string(Shape{s_.directions, 2 * G * H}));
        const Id bias = direction_of(c_.runtime(b), d);  // [2GH]: W's biases, then R's
        const Id wb = slice(bias, 0, 0, G * H), rb = slice(bias, 0, G * H, 2 * G * H);
        if (s_.cell == Cell::gru && s_.linear_before_reset) {
            recurrent_bias_h = slice(rb, 0, 2 * H, 3 * H);
            projected = add(projected, add(wb, c_.add("concat", {slice(rb, 0, 0, 2 * H),
                                                               filled(c_, n_, s_.dtype, 0, {H})},
                                                      {{"axis", std::int64_t{0}}})));
        } else {
            projected = add(projected, add(wb, rb));
        }
    }
    projected = reshape(projected, {s_.steps, B, G * H});
    const std::size_t per_direction = s_.activations.size() / static_cast<std::size_t>(s_.directions);
    const Activation* act = &s_.activations[static_cast<std::size_t>(d) * per_direction];
    Id h = initial_state(5, d), cell = s_.cell == Cell::lstm ? initial_state(6, d) : -1;
    Id peep_i = -1, peep_o = -1, peep_f = -1;
    if (const string p = s_.cell == Cell::lstm ? input_name(n_, 7) : string(); !p.empty()) {
        if (c_.type(p).shape != Shape{s_.directions, 3 * H})
            unsupported("P has shape " + to_string(c_.type(p).shape) + ", expected " + to_string(Shape{s_.directions, 3 * H}));
        const Id pd = direction_of(c_.runtime(p), d);  // [3H]: i, o, f
        peep_i = slice(pd, 0, 0, H);
        peep_o = slice(pd, 0, H, 2 * H);
        peep_f = slice(pd, 0, 2 * H, 3 * H);
    }
    const Id one = s_.cell == Cell::gru ? scalar_constant(c_, n_, "one", s_.dtype, 1) : -1;
    const Id r_t_zr = s_.cell == Cell::gru ? slice(r_t, 1, 0, 2 * H) : -1, r_t_h = s_.cell == Cell::gru ? slice(r_t, 1, 2 * H, 3 * H) : -1;
    Direction out;
    out.hidden.assign(static_cast<std::size_t>(s_.steps), -1);
    for (std::int64_t k = 0; k < s_.steps; ++k) {
        const std::int64_t t = backwards ? s_.steps - 1 - k : k;
        const Id xw = reshape(slice(projected, 0, t, t + 1), {B, G * H});
        if (s_.cell == Cell::rnn) {
            h = apply(act[0], add(xw, c_.add("matmul", {h, r_t})));  // Ht = f(Xt·Wᵀ + Ht−1·Rᵀ + Wb + Rb)
        } else if (s_.cell == Cell::lstm) {
            const Id g = add(xw, c_.add("matmul", {h, r_t}));  // gates i, o, f, c
            Id gi = gate(g, 0), go = gate(g, 1), gf = gate(g, 2);
            if (peep_i >= 0) {
                gi = add(gi, mul(peep_i, cell));
                gf = add(gf, mul(peep_f, cell));
            }
            const Id i = apply(act[0], gi), f = apply(act[0], gf), candidate = apply(act[1], gate(g, 3));
            cell = add(mul(f, cell), mul(i, candidate));  // Ct = ft ⊙ Ct−1 + it ⊙ ct
            if (peep_o >= 0) go = add(go, mul(peep_o, cell));
            h = mul(apply(act[0], go), apply(act[2], cell, false));  // Ht = ot ⊙ h(Ct)
        } else {
            const Id zr = c_.add("matmul", {h, r_t_zr});  // gates z, r, h
            const Id z = apply(act[0], add(gate(xw, 0), slice(zr, 1, 0, H)));
            const Id r = apply(act[0], add(gate(xw, 1), slice(zr, 1, H, 2 * H)));
            Id recurrent;
            if (s_.linear_before_reset) {
                Id hr = c_.add("matmul", {h, r_t_h});
                if (recurrent_bias_h >= 0) hr = add(hr, recurrent_bias_h);
                recurrent = mul(r, hr);  // rt ⊙ (Ht−1·Rhᵀ + Rbh)
            } else {
                recurrent = c_.add("matmul", {mul(r, h), r_t_h});  // (rt ⊙ Ht−1)·Rhᵀ
            }
            const Id candidate = apply(act[1], add(gate(xw, 2), recurrent));
            h = add(mul(c_.add("sub", {one, z}), candidate), mul(z, h));  // Ht = (1 − zt) ⊙ ht + zt ⊙ Ht−1
        }
        out.hidden[static_cast<std::size_t>(t)] = h;
    }
    out.last_h = h;
    out.last_c = cell;
    return out;
}

void Unroller::define_outputs(const vector<Direction>& dirs) {
    const std::int64_t B = s_.batch, H = s_.hidden;
    auto finish = [&](Id x, const string& name) {
        c_.define_node(name, c_.add_identity(x, name));
    };
    auto stack = [&](const vector<Id>& parts, std::int64_t axis) {
        return parts.size() == 1 ? parts[0] : c_.add("concat", parts, {{"axis", axis}});
    };
    if (const string y = n_.output_size() > 0 ? n_.output(0) : string(); !y.empty()) {
        vector<Id> per_direction;
        for (const auto& dir : dirs) {
            vector<Id> steps;
            for (Id h : dir.hidden) steps.push_back(reshape(h, {1, 1, B, H}));
            per_direction.push_back(stack(steps, 0));  // [S, 1, B, H]
        }
        Id all = stack(per_direction, 1);  // [S, D, B, H]
        if (s_.batch_first) all = c_.add("permute", {all}, {{"dims", vector<std::int64_t>{2, 0, 1, 3}}});
        finish(all, y);
    }
    for (int k = 1; k <= (s_.cell == Cell::lstm ? 2 : 1); ++k) {
        const string name = n_.output_size() > k ? n_.output(k) : string();
        if (name.empty()) continue;
        vector<Id> parts;
        for (const auto& dir : dirs) parts.push_back(reshape(k == 1 ? dir.last_h : dir.last_c, {1, B, H}));
        Id last = stack(parts, 0);  // [D, B, H]
        if (s_.batch_first) last = c_.add("permute", {last}, {{"dims", vector<std::int64_t>{1, 0, 2}}});
        finish(last, name);
    }
}

void Unroller::run() {
    if (const string lens = input_name(n_, 4); !lens.empty()) {
        const auto values = int_values(c_.constant(lens, "sequence_lens"));
        if (static_cast<std::int64_t>(values.size()) != s_.batch)
            unsupported("sequence_lens has " + std::to_string(values.size()) + " entries for a batch of " + std::to_string(s_.batch));
        for (auto l : values)
            if (l != s_.steps) unsupported("sequence_lens other than the full length " + std::to_string(s_.steps) + " (got " + std::to_string(l) + ")");
    }
    Id x = c_.runtime(n_.input(0));
    if (s_.batch_first) x = c_.add("permute", {x}, {{"dims", vector<std::int64_t>{1, 0, 2}}});
    const Id x_flat = reshape(x, {s_.steps * s_.batch, s_.input});
    vector<Direction> dirs;
    for (std::int64_t d = 0; d < s_.directions; ++d) dirs.push_back(unroll(x_flat, d));
    define_outputs(dirs);
}

void convert_cell(ImportContext& c, const onnx::NodeProto& n, Cell cell) {
    const RecurrentSpec s = read_spec(c, n, cell);
    Unroller(c, n, s).run();
}

}  // namespace

void convert_rnn(ImportContext& c, const onnx::NodeProto& n) { convert_cell(c, n, Cell::rnn); }
void convert_gru(ImportContext& c, const onnx::NodeProto& n) { convert_cell(c, n, Cell::gru); }
void convert_lstm(ImportContext& c, const onnx::NodeProto& n) { convert_cell(c, n, Cell::lstm); }

}  // namespace capsule::onnx_import
