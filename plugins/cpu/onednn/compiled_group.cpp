// The oneDNN plugin's compiled groups (ABI 1.1 extension, plugin_abi.h): a run of consecutive
// nodes planned on this plugin becomes one executable. Inside it, a convolution, inner product
// (linear) or matmul absorbs what follows it on its result alone: an inference batch_norm after a
// convolution is folded into its weights and bias, an add of another tensor of the result's shape
// after a convolution (a residual connection) becomes oneDNN's sum post-op, and a relu, clamp,
// sigmoid, tanh or gelu becomes an eltwise post-op, so the intermediate tensors are never written
// and read back. Every other node runs its own capsule's prepared kernel, exactly as node by node.
//
// Values that only the group sees (role INTERNAL) between convolutions and pools are kept
// channels-last (nhwc), the layout oneDNN's x64 convolutions compute in, instead of the host's
// nchw: each convolution would otherwise reorder its input in and its output back. The host's
// buffer of such a value is used as is (same size); only the strides of its view change, which
// the convolution, pooling and batch-norm kernels read (view_desc), and elementwise kernels over
// operands of one layout do not depend on.
//
// relu and clamp as post-ops map NaN to a bound where torch.relu and torch.clamp keep NaN, a
// folded batch_norm would hide (or create) an overflow of the convolution's own result, and a sum
// post-op may add the residual to a partial sum. Such a chain is fused only with finite (folded)
// weights, and each run takes the fused path only when no partial sum of the producer can
// overflow and no NaN can arrive, so that neither an infinity nor a NaN can arise inside it:
// max|x| * max_o sum_i |w[o, i]| + max|bias| + max|residual| <= 1e38 (for matmul,
// max|a| * max|b| * k), with the larger of the original and folded weights. Otherwise the chain
// runs node by node, and the results match the node-by-node kernels.
//
// A convolution (fused or alone) whose weights allow it computes by Winograd where oneDNN has
// it (Fusion::winograd: ResNet's 3x3 convolutions, about 1.2x to 1.5x faster). Its transforms
// mix neighbouring inputs, so it is guarded the same way with kWinogradGain of margin: a run
// whose inputs may hold a NaN or an infinity, or are too large, takes the direct convolutions
// node by node, which give F.conv2d's non-finite outputs exactly where it does. The maxima are magnitude
// bounds that each run carries through the group (value_bounds.hpp): a scan of a value only
// where no bound follows from the bounds of its producer's inputs, or where it is too loose.
#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <span>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capsule/plugin_group.hpp"
#include "kernels.hpp"
#include "value_bounds.hpp"

namespace capsule::onednn {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
/// The largest partial sum a guarded fused path may reach (float32's largest finite value is
/// about 3.4e38).
constexpr double kSafeMagnitude = 1e38;

/// A producer whose primitive can apply a post-op, and its fused preparer.
struct Producer {
    const char* capsule;
    const char* op;
    void* (*prepare_fused)(const PrepareCall&, const Fusion&);
};
constexpr Producer kProducers[] = {{"onednn.conv2d", "conv2d", prepare_conv2d_fused},
                                   {"onednn.linear", "linear", prepare_linear_fused},
                                   {"onednn.matmul", "matmul", prepare_matmul_fused}};

const Producer* producer_of(const char* capsule) {
    for (const auto& p : kProducers)
        if (std::strcmp(p.capsule, capsule) == 0) return &p;
    return nullptr;
}

/// The post-op that computes `capsule` (an elementwise node) on its input, or none.
PostOp post_op_of(const char* capsule, const plugin::Attributes& attrs) {
    using dnnl::algorithm;
    if (std::strcmp(capsule, "onednn.relu") == 0) return {algorithm::eltwise_relu};
    if (std::strcmp(capsule, "onednn.sigmoid") == 0) return {algorithm::eltwise_logistic};
    if (std::strcmp(capsule, "onednn.tanh") == 0) return {algorithm::eltwise_tanh};
    if (std::strcmp(capsule, "onednn.clamp") == 0) return clamp_post_op(attrs);
    if (std::strcmp(capsule, "onednn.gelu") == 0) {
        const auto approximate = attrs.get_string("approximate", "none");
        if (approximate == "none") return {algorithm::eltwise_gelu_erf};
        if (approximate == "tanh") return {algorithm::eltwise_gelu_tanh};
    }
    return {};
}

/// Elements of a tensor view.
int64_t numel(const capsule_tensor_view& t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t.rank; ++d) n *= t.shape[d];
    return n;
}

/// True when a float32 tensor holds a NaN or an infinity.
bool has_non_finite(const capsule_tensor_view& t) { return !std::isfinite(max_magnitude(t)); }

/// A node of the executable: its capsule's kernel and prepared state, and where its operands
/// are. Shapes, strides and attributes are copied: compile's arrays are borrowed for the call.
struct Unit : plugin::GroupUnit {
    /// The forward for an input 0 known to hold no NaN (finite_input_forward), or nullptr.
    capsule_forward_fn finite_forward = nullptr;
    /// How the node-by-node result's bound follows from the inputs' (value_bounds.hpp).
    BoundTerms terms;
    /// With the next `fused_count` units fused in: this unit's primitive with their ops folded in
    /// or applied as post-ops, reading `fused_inputs` (its own, then a residual addend),
    /// `fused_params` and `fused_attrs`, writing `fused_output`.
    void* fused_state = nullptr;
    std::size_t fused_count = 0, fused_output = 0;
    std::vector<std::size_t> fused_inputs;
    std::vector<capsule_tensor_view> fused_params;
    std::vector<capsule_attribute> fused_attrs;
    std::deque<std::vector<float>> folded;  // folded weights and bias (borrowed by the state)
    /// See the file comment: the fused path needs a magnitude check of the inputs on each run
    /// when `fused_guard`, against `fused_terms` (the larger of the original and folded weights'
    /// bounds; for matmul the second operand is an input, bounded per run).
    bool fused_guard = false;
    BoundTerms fused_terms;
    /// The fused state computes by Winograd: its guard allows kWinogradGain less.
    bool winograd = false;
    /// The fused activation's effect on the bound: at most 1 (sigmoid, tanh), or plus
    /// `activation_bound` (clamp's finite limits; 0 for relu and gelu).
    bool unit_activation = false;
    double activation_bound = 0;
};

struct Executable {
    std::deque<Unit> units;
    std::size_t num_values = 0;
    /// Values kept channels-last, with their nhwc strides (see the file comment).
    std::vector<std::size_t> channels_last;
    std::vector<std::array<int64_t, 4>> nhwc_strides;  // by value index; set for channels_last ones
    ~Executable() {
        for (auto& u : units) {
            if (u.state) u.kernel->release(u.state);
            if (u.fused_state) u.kernel->release(u.fused_state);
        }
    }
};

/// Prepare arguments of unit `u` reading values `operands` and writing value `output`, with
/// shapes and layouts from `values` (compile's values, with the strides of channels-last ones).
capsule_prepare_args prepare_args(const Unit& u, const std::vector<std::size_t>& operands,
                                  const std::vector<capsule_tensor_view>& values, const capsule_group_args& g,
                                  std::vector<capsule_tensor_view>& inputs, std::size_t output) {
    inputs.clear();
    for (auto i : operands) inputs.push_back(values[i]);
    return plugin::group_prepare_args(u, inputs, &values[output], g);
}


plugin::Attributes attrs_of(const Unit& u) { return {u.attrs.data(), u.attrs.size()}; }

/// The bound rule of a unit's node-by-node result (value_bounds.hpp), from its capsule.
BoundTerms node_terms(const Unit& u, const capsule_group_args& g) {
    const std::string_view name = u.kernel->capsule_name;
    if (name == "onednn.conv2d" || name == "onednn.linear") {
        if (u.params.empty()) return {};
        const auto& w = u.params[0];
        return {BoundRule::affine, max_row_l1(w), u.params.size() > 1 ? max_magnitude(u.params[1]) : 0.0,
                w.rank > 0 && w.shape[0] > 0 ? numel(w) / w.shape[0] : 0};
    }
    if (name == "onednn.matmul") {
        const auto& a = g.values[u.inputs.at(0)];
        return {BoundRule::matmul, 0, 0, a.rank > 0 ? a.shape[a.rank - 1] : 1};
    }
    if (name == "onednn.clamp") {
        // |clamp(x)| <= max(|x|, |min|, |max|) over the finite limits; min = +inf, max = -inf or
        // a NaN limit makes every element non-finite.
        const auto attrs = attrs_of(u);
        const double min = attrs.get_float("min", -kInfinity), max = attrs.get_float("max", kInfinity);
        if (std::isnan(min) || std::isnan(max) || min == kInfinity || max == -kInfinity)
            return {BoundRule::affine, 1, kInfinity};
        double limit = 0;
        for (const double v : {min, max})
            if (std::isfinite(v)) limit = std::max(limit, std::fabs(v));
        return {BoundRule::affine, 1, limit};
    }
    if (name == "onednn.reduce_mean") {
        // The sum of the reduced elements is formed in float32 before the division.
        const auto& x = g.values[u.inputs.at(0)];
        const auto& y = g.values[u.output];
        const int64_t outputs = numel(y);
        if (numel(x) == 0) return {};  // a mean of no elements is NaN: unknown, so measured
        return {BoundRule::mean, 0, 0, outputs > 0 ? numel(x) / outputs : 0};
    }
    // An average pool's output is a mean of its window (with padding's zeros): at most the
    // input's bound; a window whose float32 sum overflows is computed again in double
    // (fix_avg_pool in conv_pool.cpp).
    if (name == "onednn.relu" || name == "onednn.gelu" || name.starts_with("onednn.max_pool2d") ||
        name.starts_with("onednn.avg_pool2d"))
        return {BoundRule::same};
    if (name == "onednn.sigmoid" || name == "onednn.tanh" || name == "onednn.softmax") return {BoundRule::unit};
    if (name == "onednn.add" || name == "onednn.sub") return {BoundRule::sum};
    if (name == "onednn.mul") return {BoundRule::product};
    if (name == "onednn.concat") return {BoundRule::max_input};
    return {};  // batch_norm, log_softmax
}

/// The bound of fused unit `u`'s result before its activation: its producer's from the inputs'
/// bounds, plus the residual addend's.
double fused_sum_bound(const Unit& u, const ValueBounds& bounds) {
    const bool residual = u.fused_inputs.size() > u.inputs.size();
    const std::span<const std::size_t> producer_inputs(u.fused_inputs.data(), u.inputs.size());
    const double producer = bounds.transfer(u.fused_terms, producer_inputs);
    if (!residual) return producer;
    const double addend = bounds.get(u.fused_inputs.back());
    return producer < 0 || addend < 0 ? ValueBounds::kUnknown : producer + addend;  // +inf stays
}

/// True when no partial sum of guarded unit `u` can overflow on this run's inputs and no NaN can
/// reach its activation (see the file comment), so that its fused path computes what the
/// node-by-node kernels compute. Propagated bounds may be loose: when they fail the check, the
/// inputs not yet scanned this run are scanned and the check is made again on exact maxima.
bool fused_path_safe(const Unit& u, ValueBounds& bounds, const capsule_tensor_view* values) {
    const double limit = u.winograd ? kSafeMagnitude / kWinogradGain : kSafeMagnitude;
    auto safe = [&] {
        const double b = fused_sum_bound(u, bounds);
        return b >= 0 && b <= limit;
    };
    if (!u.fused_guard || safe()) return true;
    bool scanned = false;
    for (auto v : u.fused_inputs)
        if (!bounds.measured(v)) {
            bounds.measure(v, values[v]);
            scanned = true;
        }
    return scanned && safe();
}

/// The bound of fused unit `u`'s result, after its activation.
double fused_result_bound(const Unit& u, const ValueBounds& bounds) {
    const double sum = fused_sum_bound(u, bounds);
    if (sum < 0 || !(sum <= std::numeric_limits<float>::max())) return sum;
    if (u.unit_activation) return 1;
    return widened(sum + u.activation_bound);  // the activation's rounding
}

/// True when unit `next` is `capsule` and reads only `value`, which only it reads and nothing
/// after the group needs: the producer of `value` may then compute `next` too.
bool consumes_alone(const Unit& next, const char* capsule, std::size_t value, const capsule_group_args& g) {
    return std::strcmp(next.kernel->capsule_name, capsule) == 0 && next.inputs.size() == 1 &&
           next.inputs[0] == value && g.value_roles[value] == CAPSULE_VALUE_INTERNAL && plugin::group_readers(g, value) == 1;
}

/// Folds inference batch normalisation into the convolution before it (as ONNX Runtime's and
/// PyTorch's conv-bn fusion do): with s = weight / sqrt(running_var + eps) per output channel,
/// conv weights become w * s and the bias (b - running_mean) * s + bias_bn, computed in double.
/// Sets the fused unit's parameters and attributes (bias on); false when `bn` cannot be folded.
bool fold_batch_norm(Unit& conv, const Unit& bn) {
    const auto attrs = attrs_of(bn);
    if (attrs.get_bool("training", false)) return false;
    const bool affine = attrs.get_bool("affine", true);
    const double eps = attrs.get_float("eps", 1e-5);
    const auto& w = conv.params.at(0);
    const int64_t out = w.shape[0];
    const std::size_t stats = affine ? 2 : 0;
    if (bn.params.size() != stats + 2 || w.dtype != CAPSULE_DTYPE_FLOAT32) return false;
    auto channel = [&](std::size_t p, int64_t o) { return double(static_cast<const float*>(bn.params[p].data)[o]); };
    const bool conv_bias = attrs_of(conv).get_bool("bias", true);
    const int64_t per_out = out > 0 ? numel(w) / out : 0;
    auto& weights = conv.folded.emplace_back(static_cast<std::size_t>(out * per_out));
    auto& bias = conv.folded.emplace_back(static_cast<std::size_t>(out));
    const auto* w0 = static_cast<const float*>(w.data);
    for (int64_t o = 0; o < out; ++o) {
        const double var = channel(stats + 1, o);
        if (!(var + eps > 0)) return false;
        const double scale = (affine ? channel(0, o) : 1.0) / std::sqrt(var + eps);
        const double b = conv_bias ? double(static_cast<const float*>(conv.params.at(1).data)[o]) : 0.0;
        bias[o] = static_cast<float>((b - channel(stats, o)) * scale + (affine ? channel(1, o) : 0.0));
        for (int64_t i = 0; i < per_out; ++i)
            weights[o * per_out + i] = static_cast<float>(double(w0[o * per_out + i]) * scale);
    }
    for (float v : weights)
        if (!std::isfinite(v)) return false;
    for (float v : bias)
        if (!std::isfinite(v)) return false;
    capsule_tensor_view wv = w, bv = w;
    wv.data = weights.data();
    bv.rank = 1;
    bv.shape = &w.shape[0];
    bv.strides = &conv.dims.emplace_back(1, 1)[0];
    bv.data = bias.data();
    conv.fused_params = {wv, bv};
    conv.fused_attrs.clear();
    for (const auto& a : conv.attrs)
        if (std::strcmp(a.name, "bias") != 0) conv.fused_attrs.push_back(a);  // bias defaults to on
    return true;
}

/// True when a convolution with parameters `params` (weight, then bias) may compute by Winograd:
/// every parameter finite and the weights' transform within kWinogradGain of float32's range.
bool winograd_allowed(const std::vector<capsule_tensor_view>& params) {
    for (const auto& p : params)
        if (has_non_finite(p)) return false;
    return !params.empty() && max_row_l1(params[0]) * kWinogradGain <= kSafeMagnitude;
}

/// When unit `next` is an add (no broadcasting) that reads `value`, which only it reads and
/// nothing after the group needs, and another value of the same shape: that other value (the
/// residual the producer of `value` may add as a post-op). Otherwise none.
std::optional<std::size_t> residual_addend(const Unit& next, std::size_t value, const capsule_group_args& g) {
    if (std::strcmp(next.kernel->capsule_name, "onednn.add") != 0 || next.inputs.size() != 2) return std::nullopt;
    const std::size_t a = next.inputs[0], b = next.inputs[1];
    if ((a == value) == (b == value)) return std::nullopt;  // neither, or value + value
    if (g.value_roles[value] != CAPSULE_VALUE_INTERNAL || plugin::group_readers(g, value) != 1) return std::nullopt;
    const std::size_t other = a == value ? b : a;
    const auto same_shape = [&](std::size_t v) {
        const auto &x = g.values[v], &y = g.values[next.output];
        return x.rank == y.rank && std::equal(x.shape, x.shape + x.rank, y.shape);
    };
    if (!same_shape(value) || !same_shape(other)) return std::nullopt;
    return other;
}

/// Fuses what follows producer unit k into it: a batch_norm folded into a conv2d, then (conv2d
/// only, when `allow_residual`) an add of another tensor as a sum post-op, then an elementwise
/// op as an eltwise post-op. Returns the pattern ("conv2d+batch_norm+add+relu") and sets
/// `u.fused_count`, or returns "" when nothing was fused. When oneDNN has no fast convolution with
/// the residual add, tries again without it. A conv2d that computes by Winograd gets a fused state
/// even when nothing follows it (pattern "conv2d", fused_count 0).
std::string fuse_at(Executable& exe, std::size_t k, const std::vector<capsule_tensor_view>& views,
                    const capsule_group_args& g, bool allow_residual = true) {
    Unit& u = exe.units[k];
    const Producer* producer = producer_of(u.kernel->capsule_name);
    if (!producer) return "";
    const bool conv = std::strcmp(producer->op, "conv2d") == 0;
    std::string pattern = producer->op;
    std::size_t next = k + 1, result = u.output;
    u.fused_params = u.params;
    u.fused_attrs = u.attrs;
    u.fused_inputs = u.inputs;
    u.folded.clear();
    u.unit_activation = false;
    u.activation_bound = 0;
    bool folded = false;
    if (conv && next < exe.units.size() && consumes_alone(exe.units[next], "onednn.batch_norm", result, g) &&
        fold_batch_norm(u, exe.units[next])) {
        pattern += "+batch_norm";
        result = exe.units[next++].output;
        folded = true;
    }
    Fusion fusion;
    if (conv && allow_residual && next < exe.units.size())
        if (const auto addend = residual_addend(exe.units[next], result, g)) {
            fusion.add_input1 = true;
            u.fused_inputs.push_back(*addend);
            pattern += "+add";
            result = exe.units[next++].output;
        }
    PostOp& post = fusion.activation;
    bool maps_nan = false;
    if (next < exe.units.size()) {
        const Unit& act = exe.units[next];
        post = post_op_of(act.kernel->capsule_name, attrs_of(act));
        if (post && !consumes_alone(act, act.kernel->capsule_name, result, g)) post = {};
        // relu and clip map NaN to a bound (see the file comment).
        maps_nan = post.algorithm == dnnl::algorithm::eltwise_relu || post.algorithm == dnnl::algorithm::eltwise_clip;
        bool finite = true;
        for (const auto& p : u.fused_params) finite = finite && !has_non_finite(p);
        if (maps_nan && !finite) post = {};
        if (post) {
            pattern += std::string("+") + (std::strchr(act.kernel->capsule_name, '.') + 1);
            u.unit_activation = post.algorithm == dnnl::algorithm::eltwise_logistic ||
                                post.algorithm == dnnl::algorithm::eltwise_tanh;
            u.activation_bound = node_terms(act, g).bias;  // clamp's finite limits, else 0
            result = exe.units[next++].output;
        } else {
            maps_nan = false;
        }
    }
    fusion.winograd = conv && winograd_allowed(u.fused_params);
    if (next == k + 1 && !fusion.winograd) return "";
    u.fused_terms = u.terms;
    if (u.fused_terms.rule == BoundRule::affine && !u.fused_params.empty()) {  // the larger of both
        u.fused_terms.weight = std::max(u.fused_terms.weight, max_row_l1(u.fused_params[0]));
        if (u.fused_params.size() > 1)
            u.fused_terms.bias = std::max(u.fused_terms.bias, max_magnitude(u.fused_params[1]));
    }
    std::vector<capsule_tensor_view> inputs;
    auto args = prepare_args(u, u.fused_inputs, views, g, inputs, result);
    args.params = u.fused_params.data();
    args.num_params = u.fused_params.size();
    args.attrs = u.fused_attrs.data();
    args.num_attrs = u.fused_attrs.size();
    u.fused_state = producer->prepare_fused(PrepareCall{&args}, fusion);
    if (!u.fused_state) return fusion.add_input1 ? fuse_at(exe, k, views, g, false) : "";
    u.winograd = computes_winograd(u.kernel, u.fused_state);
    if (next == k + 1 && !u.winograd) {  // no Winograd for these shapes: nothing gained
        u.kernel->release(std::exchange(u.fused_state, nullptr));
        return "";
    }
    u.fused_guard = maps_nan || folded || fusion.add_input1 || u.winograd;
    u.fused_count = next - k - 1;
    u.fused_output = result;
    return pattern;
}

/// How a unit's kernel depends on the layout of its values.
enum class LayoutUse {
    any,    // reads each value's layout from its view (conv2d, pools, concat)
    same,   // works in any layout shared by all its operands (elementwise, batch_norm)
    plain,  // needs the host's row-major layout
};

LayoutUse layout_use(const Unit& u, const capsule_group_args& g) {
    const std::string_view name = u.kernel->capsule_name;
    if (name == "onednn.conv2d" || name.starts_with("onednn.max_pool2d") || name.starts_with("onednn.avg_pool2d") ||
        name == "onednn.concat" || name == "onednn.reduce_mean")
        return LayoutUse::any;
    if (name == "onednn.relu" || name == "onednn.clamp" || name == "onednn.gelu" || name == "onednn.sigmoid" ||
        name == "onednn.tanh" || name == "onednn.batch_norm" || name == "onednn.abs" || name == "onednn.sqrt" ||
        name == "onednn.leaky_relu" || name == "onednn.hardswish")
        return LayoutUse::same;
    if (name == "onednn.add" || name == "onednn.sub" || name == "onednn.mul") {
        // Without broadcasting, the binary primitive pairs elements at equal offsets.
        const auto& y = g.values[u.output];
        for (auto i : u.inputs) {
            const auto& x = g.values[i];
            if (x.rank != y.rank || !std::equal(x.shape, x.shape + x.rank, y.shape)) return LayoutUse::plain;
        }
        return LayoutUse::same;
    }
    return LayoutUse::plain;
}

/// The root of `v` in a union-find forest.
std::size_t root(std::vector<std::size_t>& parent, std::size_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
}

/// Picks the values to keep channels-last (see the file comment): values that units of kind
/// `same` tie together form one class, which goes channels-last when each of its values is an
/// internal, non-empty float32 [N, C, H, W] tensor read and written only by units of kind `any`
/// or `same`, and a convolution or pool touches the class (otherwise nothing would gain).
void choose_layouts(Executable& exe, const capsule_group_args& g) {
    const std::size_t n = g.num_values;
    std::vector<std::size_t> parent(n);
    std::iota(parent.begin(), parent.end(), std::size_t{0});
    std::vector<char> eligible(n), touched_by_any(n, 0);
    for (std::size_t v = 0; v < n; ++v) {
        const auto& t = g.values[v];
        eligible[v] = g.value_roles[v] == CAPSULE_VALUE_INTERNAL && t.rank == 4 &&
                      t.dtype == CAPSULE_DTYPE_FLOAT32 && numel(t) > 0;
    }
    for (const auto& u : exe.units) {
        const LayoutUse use = layout_use(u, g);
        std::vector<std::size_t> operands(u.inputs);
        operands.push_back(u.output);
        for (auto v : operands) {
            if (use == LayoutUse::plain) eligible[v] = 0;
            if (use == LayoutUse::any) touched_by_any[v] = 1;
            if (use == LayoutUse::same) parent[root(parent, v)] = root(parent, u.output);
        }
    }
    std::vector<char> class_ok(n, 1), class_gains(n, 0);
    for (std::size_t v = 0; v < n; ++v) {
        const std::size_t r = root(parent, v);
        class_ok[r] = class_ok[r] && eligible[v];
        class_gains[r] = class_gains[r] || touched_by_any[v];
    }
    exe.nhwc_strides.assign(n, {});
    for (std::size_t v = 0; v < n; ++v) {
        const std::size_t r = root(parent, v);
        if (!class_ok[r] || !class_gains[r]) continue;
        const int64_t* d = g.values[v].shape;  // N, C, H, W
        exe.nhwc_strides[v] = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
        exe.channels_last.push_back(v);
    }
}

/// `values` with the strides of the executable's channels-last values.
void apply_layouts(const Executable& exe, std::vector<capsule_tensor_view>& values) {
    for (auto v : exe.channels_last) values[v].strides = exe.nhwc_strides[v].data();
}

std::unique_ptr<Executable> compile(const capsule_group_args& g, std::string& description) {
    auto exe = std::make_unique<Executable>();
    exe->num_values = g.num_values;
    for (std::size_t k = 0; k < g.num_nodes; ++k) {
        const auto& node = plugin::group_node(g, k);
        Unit& u = exe->units.emplace_back();
        u.take(node, find_kernel(node.capsule_name ? node.capsule_name : ""), g.num_values);
        u.terms = node_terms(u, g);
        u.finite_forward = finite_input_forward(u.kernel);
    }
    choose_layouts(*exe, g);
    std::vector<capsule_tensor_view> views(g.values, g.values + g.num_values), inputs;
    apply_layouts(*exe, views);
    for (std::size_t k = 0; k < g.num_nodes; ++k) {
        Unit& u = exe->units[k];
        const auto args = prepare_args(u, u.inputs, views, g, inputs, u.output);
        capsule_status status{sizeof status, 0, {}};
        if (u.kernel->prepare)
            plugin::check_call(u.kernel->prepare(&args, &u.state, &status), status, "prepare",
                               u.kernel->capsule_name);
    }
    std::map<std::string, int> fused;
    for (std::size_t k = 0; k < exe->units.size(); ++k)
        if (auto pattern = fuse_at(*exe, k, views, g); !pattern.empty()) {
            if (exe->units[k].fused_count > 0) ++fused[pattern];
            k += exe->units[k].fused_count;  // those nodes are part of this one now
        }
    std::size_t winograd = 0;
    for (const auto& u : exe->units) winograd += u.winograd;
    if (fused.empty() && exe->channels_last.empty() && winograd == 0) return nullptr;
    for (const auto& [pattern, n] : fused)
        description += (description.empty() ? "" : ", ") + pattern + " x" + std::to_string(n);
    if (!fused.empty()) description += " (each a single oneDNN primitive)";
    if (!exe->channels_last.empty())
        description += std::string(description.empty() ? "" : "; ") +
                       std::to_string(exe->channels_last.size()) + " internal tensors kept nhwc";
    std::size_t bf16 = 0;
    for (const auto& u : exe->units) bf16 += computes_in_bf16(u.kernel, u.fused_state ? u.fused_state : u.state);
    if (bf16 > 0)
        description += std::string(description.empty() ? "" : "; ") + std::to_string(bf16) +
                       " convolutions / inner products in bfloat16 (fpmath bf16)";
    if (winograd > 0)
        description += std::string(description.empty() ? "" : "; ") + std::to_string(winograd) +
                       " convolutions by Winograd (on finite inputs within its margin, else direct)";
    return exe;
}

/// Compiles a group (see the file comment); a oneDNN error becomes the plugin's status. Every
/// kernel of the group gets one thread count (UniformThreads): the host's, or 1 when each of them
/// is small (as node by node).
std::unique_ptr<Executable> compile_checked(const capsule_group_args& g, std::string& description) {
    try {
        {
            const UniformThreads uniform;
            std::string granted;
            auto exe = compile(g, granted);
            if (!exe || g.num_threads <= 1 || uniform.largest_work() >= kParallelWork) {
                description = std::move(granted);
                return exe;
            }
        }
        capsule_group_args one = g;
        one.num_threads = 1;
        auto exe = compile(one, description);
        if (exe) description += "; 1 thread (every kernel small)";
        return exe;
    } catch (const dnnl::error& e) {
        rethrow_dnnl("compile", e);
    }
}

/// Runs the units in order, each fused one on its fused path when this run's bounds allow.
void run(const Executable& exe, const capsule_tensor_view* values) {
    const std::size_t num_values = exe.num_values;
    thread_local std::vector<capsule_tensor_view> local;
    local.assign(values, values + num_values);
    apply_layouts(exe, local);
    values = local.data();
    thread_local ValueBounds bounds;
    bounds.reset(num_values);
    const auto& units = exe.units;
    for (std::size_t k = 0; k < units.size(); ++k) {
        const Unit& u = units[k];
        if (u.fused_state && fused_path_safe(u, bounds, values)) {
            plugin::call_forward(u.kernel->forward, u.fused_state, u.kernel->capsule_name, u.fused_inputs,
                                 u.fused_params, u.fused_attrs, values, u.fused_output);
            bounds.set(u.fused_output, fused_result_bound(u, bounds));
            k += u.fused_count;
            continue;
        }
        const bool finite = u.finite_forward && !u.inputs.empty() && bounds.finite(u.inputs[0]);
        plugin::call_forward(finite ? u.finite_forward : u.kernel->forward, u.state, u.kernel->capsule_name,
                             u.inputs, u.params, u.attrs, values, u.output);
        bounds.set(u.output, bounds.transfer(u.terms, u.inputs));
    }
}

}  // namespace

const capsule_compiled_groups_extension compiled_groups_extension =
    plugin::CompiledGroups<Executable, compile_checked, run>::extension;

}  // namespace capsule::onednn
