// onednn.concat.
#include <cstring>
#include <numeric>
#include <span>

#include "capsule/shape_math.hpp"
#include "kernels.hpp"

namespace capsule::onednn {

namespace {

/// torch.cat(xs, dim=axis) / ONNX Concat: inputs of equal rank whose dims agree apart from `axis`
/// (negative counts from the end); zero-size inputs contribute nothing. When every operand is
/// dense in one memory order in which `axis` is outermost-after-the-rest (row-major, any axis; or
/// channels-last nhwc inside a compiled group with axis 1, where a channel concat interleaves per
/// pixel), the concat is a block copy: for each index of the dims before `axis` in memory order,
/// each input's contiguous block in turn, split between the node's threads (oneDNN 2.6's concat
/// takes its slow `simple` path for nhwc channel concats: 6 GB/s). Other float32 layouts run as
/// oneDNN's concat primitive; other dtypes (int64 shapes, bool masks) are row-major block copies.
struct ConcatState : NodeState {
    using NodeState::NodeState;
    bool block_copy = false;
    std::vector<std::size_t> used;  // inputs with elements, in order
    std::vector<memory::desc> src_mds;
    memory::desc dst_md;
    dnnl::concat primitive;
    // Block copies: outer count and each input's block, in bytes.
    int64_t outer = 0;
    std::vector<int64_t> block_bytes;
};

/// True when `t`'s view has exactly the dense strides of its dims in `order` (dims from outermost
/// to innermost in memory); dims of size 1 may have any stride.
bool dense_in(const Tensor& t, std::span<const int> order) {
    if (t.view->strides == nullptr) {  // the host's row-major default
        for (std::size_t i = 0; i < order.size(); ++i)
            if (order[i] != static_cast<int>(i) && t.dim(order[i]) != 1) return false;
        return true;
    }
    int64_t stride = 1;
    for (std::size_t i = order.size(); i-- > 0;) {
        const int d = order[i];
        if (t.dim(d) != 1 && t.view->strides[d] != stride) return false;
        stride *= t.dim(d);
    }
    return true;
}

std::unique_ptr<ConcatState> prepare_concat(const PrepareCall& call) {
    const char* name = "onednn.concat";
    auto s = std::make_unique<ConcatState>(name, call);
    const Tensor y = call.output();
    plugin::require(call.num_inputs() >= 1 && y.rank() >= 1, "onednn.concat: expects one or more inputs of rank >= 1");
    plugin::require(call.attrs().has("axis"), "onednn.concat: attribute 'axis' is required");
    const auto normalized = try_normalize_axis(call.attrs().get_int("axis", 0), y.rank());
    plugin::require(normalized.has_value(), [&] {
        return std::string(name) + ": axis out of range for rank " + std::to_string(y.rank());
    });
    const int64_t axis = *normalized;
    int64_t total = 0;
    for (std::size_t i = 0; i < call.num_inputs(); ++i) {
        const Tensor x = call.input(i);
        plugin::require(x.rank() == y.rank() && x.dtype() == y.dtype(), [&] {
            return std::string(name) + ": input " + std::to_string(i) + " " + shape_string(x.shape()) +
                   " does not match the output " + shape_string(y.shape()) + " in rank or dtype";
        });
        for (int d = 0; d < y.rank(); ++d)
            plugin::require(d == axis || x.dim(d) == y.dim(d), [&] {
                return std::string(name) + ": input " + std::to_string(i) + " " + shape_string(x.shape()) +
                       " differs from the output " + shape_string(y.shape()) + " outside axis " +
                       std::to_string(axis);
            });
        total += x.dim(static_cast<int>(axis));
        if (x.numel() > 0) s->used.push_back(i);
    }
    plugin::require(total == y.dim(static_cast<int>(axis)), [&] {
        return std::string(name) + ": the inputs' sizes along axis " + std::to_string(axis) +
               " sum to " + std::to_string(total) + ", the output has " + std::to_string(y.dim(static_cast<int>(axis)));
    });
    s->limit_threads(double(y.numel()));
    const ThreadScope scope(s->threads);
    if (s->used.empty()) return s;
    // The memory order of the block copy: row-major, or nhwc for a channel concat.
    std::vector<int> order(static_cast<std::size_t>(y.rank()));
    std::iota(order.begin(), order.end(), 0);
    const std::vector<int> nhwc{0, 2, 3, 1};
    auto all_dense = [&](std::span<const int> o) {
        bool dense = dense_in(y, o);
        for (auto i : s->used) dense = dense && dense_in(call.input(i), o);
        return dense;
    };
    const bool float32 = y.dtype() == CAPSULE_DTYPE_FLOAT32;
    if (!all_dense(order) && float32 && y.rank() == 4 && axis == 1 && all_dense(nhwc)) order = nhwc;
    s->block_copy = !float32 || all_dense(order);
    if (s->block_copy) {
        const int64_t element = y.dtype() == CAPSULE_DTYPE_BOOL ? 1 : float32 ? 4 : 8;  // int64, float64: 8
        s->outer = 1;
        for (const int d : order) {
            if (d == axis) break;
            s->outer *= y.dim(d);
        }
        for (auto i : s->used) s->block_bytes.push_back(call.input(i).numel() / s->outer * element);
        return s;
    }
    for (auto i : s->used) s->src_mds.push_back(view_desc(call.input(i)));
    s->dst_md = view_desc(y);
    dnnl::concat::primitive_desc pd(s->dst_md, static_cast<int>(axis), s->src_mds, cpu_engine(), scratchpad_attr());
    s->scratchpad = pd.scratchpad_desc();
    s->primitive = dnnl::concat(pd);
    return s;
}

void concat(const ForwardCall& call) {
    const auto& s = state_of<ConcatState>(call, "onednn.concat");
    if (s.used.empty()) return;
    if (s.block_copy) {
        auto* out = call.output().data<unsigned char>();
        std::vector<const unsigned char*> ins;
        for (auto i : s.used) ins.push_back(call.input(i).data<const unsigned char>());
        const int64_t row = std::accumulate(s.block_bytes.begin(), s.block_bytes.end(), int64_t{0});
#pragma omp parallel for num_threads(s.threads) schedule(static)
        for (int64_t o = 0; o < s.outer; ++o) {
            unsigned char* dst = out + o * row;
            for (std::size_t k = 0; k < ins.size(); ++k) {
                std::memcpy(dst, ins[k] + o * s.block_bytes[k], static_cast<std::size_t>(s.block_bytes[k]));
                dst += s.block_bytes[k];
            }
        }
        return;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_DST, wrap(s.dst_md, call.output().data<float>())}};
    for (std::size_t k = 0; k < s.used.size(); ++k)
        args.emplace(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k), wrap(s.src_mds[k], call.input(s.used[k]).data<float>()));
    execute(s, s.primitive, std::move(args));
}

/// The vector-Jacobian product of torch.cat: each input's gradient is its block of dy along
/// `axis` (row-major copies; any dtype the forward takes).
void concat_backward(const BackwardCall& call) {
    const char* name = "onednn.concat";
    const Tensor dy = call.grad_output();
    plugin::require(call.num_inputs() >= 1 && dy.rank() >= 1, "onednn.concat: expects at least one input of rank >= 1");
    const auto axis = try_normalize_axis(call.attrs().get_int("axis", 0), dy.rank());
    plugin::require(axis.has_value(), [&] {
        return std::string(name) + ": axis out of range for rank " + std::to_string(dy.rank());
    });
    const int64_t element = dy.dtype() == CAPSULE_DTYPE_BOOL ? 1 : dy.dtype() == CAPSULE_DTYPE_FLOAT32 ? 4 : 8;
    int64_t outer = 1;
    for (int64_t d = 0; d < *axis; ++d) outer *= dy.dim(int(d));
    const int64_t row = outer == 0 ? 0 : dy.numel() / outer * element;  // bytes of dy per outer index
    // Checked whole before any copy: each input matches dy apart from `axis`, and their sizes
    // along it add up to dy's.
    int64_t along = 0;
    for (std::size_t k = 0; k < call.num_inputs(); ++k) {
        const Tensor x = call.input(k);
        bool matches = x.rank() == dy.rank() && x.dtype() == dy.dtype();
        for (int d = 0; matches && d < x.rank(); ++d) matches = d == *axis || x.dim(d) == dy.dim(d);
        const Tensor gx = call.grad_input(k);
        matches = matches && (!gx.present() || (gx.dtype() == x.dtype() && std::equal(gx.shape().begin(), gx.shape().end(),
                                                                                      x.shape().begin(), x.shape().end())));
        plugin::require(matches, [&] {
            return std::string(name) + ": input " + std::to_string(k) + " " + shape_string(x.shape()) +
                   " (or its gradient) does not match grad output " + shape_string(dy.shape());
        });
        along += x.dim(int(*axis));
    }
    plugin::require(along == dy.dim(int(*axis)), [&] {
        return std::string(name) + ": grad output " + shape_string(dy.shape()) + " is not the concat of the inputs";
    });
    int64_t offset = 0;
    const auto* g = dy.data<const unsigned char>();
    for (std::size_t k = 0; k < call.num_inputs(); ++k) {
        const Tensor x = call.input(k), gx = call.grad_input(k);
        const int64_t block = outer == 0 ? 0 : x.numel() / outer * element;
        if (gx.present())
            for (int64_t o = 0; o < outer; ++o)
                std::memcpy(gx.data<unsigned char>() + o * block, g + o * row + offset, static_cast<std::size_t>(block));
        offset += block;
    }
}

}  // namespace

const capsule_kernel concat_kernel = plugin::kernel("onednn.concat", forward_entry<concat>, backward_entry<concat_backward>,
                                                    prepare_entry<ConcatState, prepare_concat>,
                                                    release_entry<ConcatState>);

}  // namespace capsule::onednn
