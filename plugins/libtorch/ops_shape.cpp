// Shape, indexing and copying capsules of the LibTorch plugin: reshapes, permutations,
// concatenation, slicing (ONNX Slice's clamping rules), padding, tiling, triangles, gathers and
// scatter-adds. Index checks follow docs/ops.md: an index out of range is an error, never a clamp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops.hpp"

namespace capsule::libtorch {

namespace {
const at::Tensor& x0(const OpArgs& a) { return a.inputs.at(0); }

/// Raises unless every entry of the int64 tensor `index` lies in [low, n): an index out of range
/// is the caller's data (CAPSULE_ERROR_INVALID_DATA: bad input, `capsule serve` answers 400).
void check_indices(const char* op, const at::Tensor& index, int64_t low, int64_t n) {
    if (index.numel() == 0) return;
    const int64_t lo = index.min().item<int64_t>(), hi = index.max().item<int64_t>();
    if (lo < low || hi >= n)
        plugin::fail(CAPSULE_ERROR_INVALID_DATA, std::string(op) + ": index " + std::to_string(lo < low ? lo : hi) +
                     " out of range for a dimension of size " + std::to_string(n));
}

/// ONNX's indices in [-n, n) as positions in [0, n): raises for any other index.
at::Tensor from_end(const char* op, const at::Tensor& indices, int64_t n) {
    check_indices(op, indices, -n, n);
    return at::where(indices < 0, indices + n, indices);
}

/// A single index attribute `x[index]` along a dimension of size n (negative counts from the end).
int64_t scalar_index(const char* op, int64_t index, int64_t n) {
    if (index < -n || index >= n)
        plugin::fail(std::string(op) + ": index " + std::to_string(index) + " out of range for size " +
                     std::to_string(n));
    return index < 0 ? index + n : index;
}
}  // namespace

at::Tensor op_flatten(const OpArgs& a) {
    const int64_t rank = x0(a).dim();
    if (rank == 0) return x0(a).reshape({1});
    return at::flatten(x0(a), axis_of(a.attrs, "start_dim", rank, 1), axis_of(a.attrs, "end_dim", rank, -1));
}
at::Tensor op_reshape(const OpArgs& a) { return at::reshape(x0(a), a.attrs.get_ints("shape", {})); }
at::Tensor op_permute(const OpArgs& a) { return x0(a).permute(a.attrs.get_ints("dims", {})).contiguous(); }
at::Tensor op_transpose2d(const OpArgs& a) { return x0(a).t().contiguous(); }
at::Tensor op_swapAdjacentAtDepth(const OpArgs& a) {
    const int64_t depth = a.attrs.get_int("depth", 0);
    return x0(a).transpose(depth, depth + 1).contiguous();
}
at::Tensor op_transpose3d_first_to_last(const OpArgs& a) { return x0(a).permute({1, 2, 0}).contiguous(); }
at::Tensor op_transpose3d_last_to_first(const OpArgs& a) { return x0(a).permute({2, 0, 1}).contiguous(); }
at::Tensor op_transpose3d_last_two(const OpArgs& a) { return x0(a).permute({0, 2, 1}).contiguous(); }
at::Tensor op_broadcastTo(const OpArgs& a) { return x0(a).expand(a.attrs.get_ints("shape", {})).contiguous(); }
at::Tensor op_concat_vectors(const OpArgs& a) { return at::cat(a.inputs, 0); }
at::Tensor op_concat_leading_axis(const OpArgs& a) { return at::cat(a.inputs, 0); }
at::Tensor op_concat(const OpArgs& a) { return at::cat(a.inputs, axis_of(a.attrs, "axis", x0(a).dim(), 0)); }

// x[start:end] with Python's clamping.
at::Tensor op_slice_leading_axis_range(const OpArgs& a) {
    const int64_t n = x0(a).size(0);
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
    const int64_t start = clamp(a.attrs.get_int("start", 0)), end = clamp(a.attrs.get_int("end", n));
    return x0(a).slice(0, start, std::max(start, end)).contiguous();
}

// ONNX Slice (docs/ops.md): per listed axis, the positions start, start+step, ... before end,
// after clamping; negative steps walk backwards. Gathered with index_select, whose gradient
// scatters back into the sliced positions.
at::Tensor op_slice(const OpArgs& a) {
    at::Tensor x = x0(a);
    const std::vector<int64_t> starts = a.attrs.get_ints("starts", {}), ends = a.attrs.get_ints("ends", {});
    std::vector<int64_t> axes = a.attrs.get_ints("axes", {});
    if (axes.empty())
        for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    std::vector<int64_t> steps = a.attrs.get_ints("steps", std::vector<int64_t>(starts.size(), 1));
    if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
        plugin::fail("slice: 'starts', 'ends', 'axes' and 'steps' must have equal lengths");
    for (std::size_t i = 0; i < starts.size(); ++i) {
        const int64_t rank = x.dim();
        int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (axis < 0 || axis >= rank) plugin::fail("slice: axis " + std::to_string(axes[i]) + " out of range");
        const int64_t n = x.size(axis), step = steps[i];
        if (step == 0) plugin::fail("slice: a step is 0");
        int64_t start = starts[i] < 0 ? starts[i] + n : starts[i];
        int64_t end = ends[i] < 0 ? ends[i] + n : ends[i];
        if (step > 0) {
            start = std::clamp(start, int64_t{0}, n);
            end = std::clamp(end, int64_t{0}, n);
        } else {
            start = std::clamp(start, int64_t{0}, n - 1);
            end = std::clamp(end, int64_t{-1}, n - 1);
        }
        const int64_t span = step > 0 ? end - start : start - end;
        // |step| as unsigned: -INT64_MIN does not fit int64.
        const uint64_t magnitude = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
        const int64_t length = span <= 0 ? 0 : int64_t(1 + uint64_t(span - 1) / magnitude);  // ⌈span/|step|⌉
        const at::Tensor index = at::arange(0, length, at::kLong) * step + start;
        x = at::index_select(x, axis, index);
    }
    return x;
}

namespace {
/// Reflect or edge padding of every axis (ONNX Pad; NumPy's `reflect` and `edge`) as one
/// index_select per padded axis: output position p (from −begin to n + end − 1) reads input
/// position p mirrored at the ends without repeating the edge, or clamped to the edge. Its
/// gradient sums into the positions read, as docs/ops.md says.
at::Tensor pad_by_index(at::Tensor x, const std::vector<int64_t>& pads, bool reflect) {
    const int64_t rank = x.dim();
    for (int64_t d = 0; d < rank; ++d) {
        const int64_t begin = pads[d], end = pads[d + rank], n = x.size(d);
        if (begin == 0 && end == 0) continue;
        const int64_t out = n + begin + end;
        if (out < 0) plugin::fail("pad: axis " + std::to_string(d) + " would have a negative size");
        if (out > 0 && n == 0) plugin::fail("pad: axis " + std::to_string(d) + " is empty and cannot be padded by " + std::string(reflect ? "reflection" : "its edge"));
        if (reflect && (begin >= n || end >= n))
            plugin::fail("pad: reflect needs each pad below the axis size (" + std::to_string(n) + ")");
        at::Tensor p = at::arange(-begin, n + end, at::kLong);
        if (reflect && n > 1) {
            const int64_t period = 2 * (n - 1);
            p = at::remainder(p, period);
            p = at::where(p >= n, period - p, p);
        } else {
            p = at::clamp(p, 0, n - 1);
        }
        x = at::index_select(x, d, p);
    }
    return x;
}
}  // namespace

// ONNX Pad with pads [x1_begin, x2_begin, ..., x1_end, x2_end, ...]; torch's pad lists the last
// axis first as (begin, end) pairs. Negative pads crop.
at::Tensor op_pad(const OpArgs& a) {
    const std::string mode = a.attrs.get_string("mode", "constant");
    const std::vector<int64_t> pads = a.attrs.get_ints("pads", {});
    const int64_t rank = x0(a).dim();
    if (static_cast<int64_t>(pads.size()) != 2 * rank) plugin::fail("pad: 'pads' needs 2 entries per axis");
    if (mode == "reflect" || mode == "edge") return pad_by_index(x0(a), pads, mode == "reflect");
    if (mode != "constant") plugin::fail("pad: mode must be constant, reflect or edge, got '" + mode + "'");
    std::vector<int64_t> torch_pads;
    for (int64_t d = rank - 1; d >= 0; --d) {
        torch_pads.push_back(pads[d]);
        torch_pads.push_back(pads[d + rank]);
    }
    const double value = a.attrs.get_float("value", 0.0);
    // An int64 input with an integer attribute pads with that exact int64 (not its double).
    const capsule_attribute* attr = a.attrs.find("value");
    if (x0(a).scalar_type() == at::kLong && attr && attr->kind == CAPSULE_ATTR_INT)
        return at::constant_pad_nd(x0(a), torch_pads, at::Scalar(attr->int_value));
    // A value outside float32's range pads a float32 tensor with ±inf.
    return at::constant_pad_nd(fitting(x0(a), {value}), torch_pads, value).to(x0(a).scalar_type());
}

at::Tensor op_tile(const OpArgs& a) { return at::tile(x0(a), a.attrs.get_ints("repeats", {})); }
namespace {
// k clamped to ±(rows + columns), where every or no element is kept: ATen's index arithmetic
// overflows for k near ±2^63.
int64_t diagonal(const OpArgs& a) {
    const int64_t bound = x0(a).size(-2) + x0(a).size(-1);
    return std::clamp(a.attrs.get_int("k", 0), -bound, bound);
}
}  // namespace
at::Tensor op_triu(const OpArgs& a) { return at::triu(x0(a), diagonal(a)); }
at::Tensor op_tril(const OpArgs& a) { return at::tril(x0(a), diagonal(a)); }

at::Tensor op_gather_scalar(const OpArgs& a) {
    return x0(a)[scalar_index("gather_scalar", a.attrs.get_int("index", 0), x0(a).size(0))].clone();
}
// A natural-number index: negative values are out of range, not counted from the end.
at::Tensor op_gather_scalar_nat(const OpArgs& a) {
    const int64_t index = a.inputs.at(1).item<int64_t>(), n = x0(a).size(0);
    if (index < 0 || index >= n)
        plugin::fail(CAPSULE_ERROR_INVALID_DATA, "gather_scalar_nat: index " + std::to_string(index) + " is out of range for length " +
                     std::to_string(n) + " (valid: 0.." + std::to_string(n - 1) + ")");
    return x0(a)[index].clone();
}
at::Tensor op_gather_row(const OpArgs& a) {
    return x0(a)[scalar_index("gather_row", a.attrs.get_int("index", 0), x0(a).size(0))].clone();
}
at::Tensor op_gather_vec_nat(const OpArgs& a) {
    check_indices("gather_vec_nat", a.inputs.at(1), 0, x0(a).size(0));
    return at::index_select(x0(a), 0, a.inputs.at(1));
}
at::Tensor op_gather_rows_nat(const OpArgs& a) {
    check_indices("gather_rows_nat", a.inputs.at(1), 0, x0(a).size(0));
    return at::index_select(x0(a), 0, a.inputs.at(1));
}
at::Tensor op_scatter_add_vec(const OpArgs& a) {
    check_indices("scatter_add_vec", a.inputs.at(1), 0, x0(a).size(0));
    return x0(a).index_add(0, a.inputs.at(1), a.inputs.at(2));
}
at::Tensor op_scatter_add_row(const OpArgs& a) {
    check_indices("scatter_add_row", a.inputs.at(1), 0, x0(a).size(0));
    return x0(a).index_add(0, a.inputs.at(1), a.inputs.at(2));
}

// ONNX Gather / numpy.take: indices in [-n, n), negative ones counting from the end.
at::Tensor op_gather(const OpArgs& a) {
    const at::Tensor& data = x0(a);
    const at::Tensor& indices = a.inputs.at(1);
    const int64_t axis = axis_of(a.attrs, "axis", data.dim(), 0);
    const int64_t n = data.size(axis);
    const at::Tensor flat = from_end("gather", indices, n).reshape({-1});
    std::vector<int64_t> shape(data.sizes().begin(), data.sizes().begin() + axis);
    shape.insert(shape.end(), indices.sizes().begin(), indices.sizes().end());
    shape.insert(shape.end(), data.sizes().begin() + axis + 1, data.sizes().end());
    return at::index_select(data, axis, flat).reshape(shape);
}

// ONNX GatherElements / torch.gather, with ONNX's negative indices.
at::Tensor op_gather_elements(const OpArgs& a) {
    const at::Tensor& data = x0(a);
    const at::Tensor& indices = a.inputs.at(1);
    const int64_t axis = axis_of(a.attrs, "axis", data.dim(), 0);
    const int64_t n = data.size(axis);
    return at::gather(data, axis, from_end("gather_elements", indices, n));
}

/// ONNX ScatterElements: at::scatter (none) or at::scatter_reduce with include_self (add: sum,
/// mul: prod, max: amax, min: amin) on a copy of data, negative indices counted from the end.
at::Tensor op_scatter_elements(const OpArgs& a) {
    const at::Tensor& data = x0(a);
    const at::Tensor& indices = a.inputs.at(1);
    const at::Tensor& updates = a.inputs.at(2);
    const int64_t axis = axis_of(a.attrs, "axis", data.dim(), 0);
    const at::Tensor index = from_end("scatter_elements", indices, data.size(axis));
    const std::string reduction = a.attrs.get_string("reduction", "none");
    if (reduction == "none") return at::scatter(data, axis, index, updates);
    const char* reduce = reduction == "add"   ? "sum"
                         : reduction == "mul" ? "prod"
                         : reduction == "max" ? "amax"
                         : reduction == "min" ? "amin"
                                              : nullptr;
    if (!reduce) plugin::fail("scatter_elements: reduction '" + reduction + "' is not one of none, add, mul, max, min");
    return at::scatter_reduce(data, axis, index, updates, reduce, /*include_self=*/true);
}

}  // namespace capsule::libtorch
