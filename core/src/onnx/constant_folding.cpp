// Constant folding at import: ONNX nodes that only compute on constants (initializers, Constant
// nodes, static shapes) are evaluated on the host, so that shape computations (Shape → Gather →
// Concat → Reshape) become attributes and no runtime node is left for them. Integer values are
// kept exactly as int64 (Slice's "to the end" is INT64_MAX). A folded value has the bits running
// the node would give: arithmetic and conversions are done in the output's own dtype (float32
// values are computed as float, never rounded twice through double), casts convert exactly as
// the cast kernel does (plugins/cpu/reference/cast.cpp), and int64 arithmetic that would
// overflow is refused instead of wrapping (it is undefined in C++ and never a valid shape).
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "capsule/float16.hpp"
#include "import_context.hpp"

namespace capsule::onnx_import {

using std::string;

namespace {

/// A host constant with its values in a form that is exact for its dtype.
struct CT {
    DType dtype = DType::float32;
    Shape shape;
    std::vector<double> f;        // float dtypes (a float32 value is always a float's value)
    std::vector<std::int64_t> i;  // integers and bool (uint64 as its two's-complement bits)
    bool is_float() const { return is_floating(dtype); }
    std::int64_t size() const { return element_count(shape); }
    double get(std::int64_t k) const { return is_float() ? f[k] : static_cast<double>(i[k]); }
};

CT from_tensor(const Tensor& t) {
    CT c;
    c.dtype = t.dtype();
    c.shape = t.shape();
    switch (t.dtype()) {
        case DType::float32: for (auto v : t.values<float>()) c.f.push_back(v); break;
        case DType::float64: for (auto v : t.values<double>()) c.f.push_back(v); break;
        case DType::int64: for (auto v : t.values<std::int64_t>()) c.i.push_back(v); break;
        case DType::boolean: for (auto v : t.values<unsigned char>()) c.i.push_back(v != 0); break;
        case DType::uint64: for (auto v : t.values<std::uint64_t>()) c.i.push_back(static_cast<std::int64_t>(v)); break;
        default:  // float16 / bfloat16 and integers of at most 32 bits: exact as double
            for (std::int64_t k = 0; k < t.numel(); ++k) {
                if (c.is_float()) c.f.push_back(t.at(k));
                else c.i.push_back(static_cast<std::int64_t>(t.at(k)));
            }
    }
    return c;
}

/// Whether `dtype` is one of ABI 1.0's dtypes (float32, float64, int64, bool), which casts fold
/// into; float16, bfloat16 and uint64 results are left to the cast kernel, which rounds and wraps
/// as those dtypes require (data movement folds for every dtype).
bool computes_only_on_1_0_dtypes(DType dtype) {
    return dtype == DType::float32 || dtype == DType::float64 || dtype == DType::int64 || dtype == DType::boolean;
}

/// Whether the folder computes exactly in `dtype`: ABI 1.0's dtypes, and the integers a CT holds
/// exactly (all but uint64), computed in int64 (a result must then fit the dtype, see fits).
bool computes_exactly(DType dtype) {
    return computes_only_on_1_0_dtypes(dtype) || (is_integer(dtype) && dtype != DType::uint64);
}

/// Whether every value of an integer CT lies in its dtype's range (int64, bool, floats: true).
bool fits(const CT& c) {
    if (c.is_float() || c.dtype == DType::int64 || c.dtype == DType::boolean || c.dtype == DType::uint64) return true;
    const int bits = static_cast<int>(8 * dtype_size(c.dtype));
    const bool is_signed = c.dtype == DType::int8 || c.dtype == DType::int16 || c.dtype == DType::int32;
    const std::int64_t lo = is_signed ? -(std::int64_t(1) << (bits - 1)) : 0;
    const std::int64_t hi = is_signed ? (std::int64_t(1) << (bits - 1)) - 1 : (std::int64_t(1) << bits) - 1;
    for (auto v : c.i) if (v < lo || v > hi) return false;
    return true;
}

Tensor to_tensor(const CT& c) {
    Tensor t = Tensor::zeros(c.dtype, c.shape);
    const auto n = t.numel();
    for (std::int64_t k = 0; k < n; ++k) {
        switch (c.dtype) {
            case DType::float32: t.values<float>()[k] = static_cast<float>(c.f[k]); break;
            case DType::float64: t.values<double>()[k] = c.f[k]; break;
            case DType::int64: t.values<std::int64_t>()[k] = c.i[k]; break;
            case DType::boolean: t.values<unsigned char>()[k] = c.i[k] != 0; break;
            case DType::uint64: t.values<std::uint64_t>()[k] = static_cast<std::uint64_t>(c.i[k]); break;
            case DType::int32: t.values<std::int32_t>()[k] = static_cast<std::int32_t>(c.i[k]); break;
            case DType::int16: t.values<std::int16_t>()[k] = static_cast<std::int16_t>(c.i[k]); break;
            case DType::int8: t.values<std::int8_t>()[k] = static_cast<std::int8_t>(c.i[k]); break;
            case DType::uint32: t.values<std::uint32_t>()[k] = static_cast<std::uint32_t>(c.i[k]); break;
            case DType::uint16: t.values<std::uint16_t>()[k] = static_cast<std::uint16_t>(c.i[k]); break;
            case DType::uint8: t.values<std::uint8_t>()[k] = static_cast<std::uint8_t>(c.i[k]); break;
            case DType::float16: t.values<std::uint16_t>()[k] = float16_from_double(c.f[k]); break;
            case DType::bfloat16: t.values<std::uint16_t>()[k] = bfloat16_from_double(c.f[k]); break;
        }
    }
    return t;
}

/// The most elements a folded value may hold: 512 MiB as the folder's doubles. A model whose
/// constants would fold to more (ConstantOfShape or Expand to [2^20, 2^22], say) is refused with
/// its shape rather than left to fail allocating, or to exhaust the memory filling it.
constexpr std::int64_t kMaxFoldedElements = std::int64_t(1) << 26;

CT make(DType dtype, Shape shape) {
    CT c;
    c.dtype = dtype;
    c.shape = std::move(shape);
    if (c.size() > kMaxFoldedElements)
        unsupported("constant folding would make a value of shape " + to_string(c.shape) + " (" +
                    std::to_string(c.size()) + " elements; at most 2^26 are folded)");
    if (c.is_float()) c.f.assign(c.size(), 0.0); else c.i.assign(c.size(), 0);
    return c;
}

void set(CT& c, std::int64_t k, double fv, std::int64_t iv) {
    if (c.is_float()) c.f[k] = fv; else c.i[k] = c.dtype == DType::boolean ? (iv != 0) : iv;
}

/// Flat index into a broadcast operand for the output's multi-index.
std::int64_t bcast_index(const std::vector<std::int64_t>& idx, const Shape& out, const Shape& in) {
    std::int64_t flat = 0, stride = 1;
    for (std::size_t d = 0; d < in.size(); ++d) {
        std::size_t od = out.size() - 1 - d, id = in.size() - 1 - d;
        if (in[id] != 1) flat += idx[od] * stride;
        stride *= in[id];
    }
    return flat;
}

template <typename F>
void for_each_index(const Shape& shape, F f) {
    const auto n = element_count(shape);
    std::vector<std::int64_t> idx(shape.size(), 0);
    for (std::int64_t k = 0; k < n; ++k) {
        f(k, idx);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

/// Elementwise op over broadcast operands. `fop` (a generic callable) for floats, evaluated in
/// the operands' dtype (float for float32, as the kernels compute); `iop` for integers.
template <typename FOp, typename IOp>
CT binary(const CT& a, const CT& b, DType out_dtype, FOp fop, IOp iop) {
    if (a.dtype != b.dtype) unsupported("operands have different dtypes");
    CT out = make(out_dtype, broadcast_shapes(a.shape, b.shape));
    for_each_index(out.shape, [&](std::int64_t k, const std::vector<std::int64_t>& idx) {
        auto ka = bcast_index(idx, out.shape, a.shape), kb = bcast_index(idx, out.shape, b.shape);
        if (a.is_float()) {
            const double r = a.dtype == DType::float32
                                 ? static_cast<double>(fop(static_cast<float>(a.f[ka]), static_cast<float>(b.f[kb])))
                                 : static_cast<double>(fop(a.f[ka], b.f[kb]));
            // A float op's result is float, or a bool (0 or 1) for a comparison: only the latter
            // is converted (a large float result cast to int64 would be undefined behaviour).
            set(out, k, r, out.is_float() ? 0 : static_cast<std::int64_t>(r));
        } else {
            std::int64_t r = iop(a.i[ka], b.i[kb]);
            set(out, k, static_cast<double>(r), r);
        }
    });
    return out;
}

CT reshaped(CT c, Shape shape) {
    if (element_count(shape) != c.size()) unsupported("cannot reshape " + to_string(c.shape) + " to " + to_string(shape));
    c.shape = std::move(shape);
    return c;
}

/// Cast, element by element, with the cast kernel's rules: one conversion straight into the
/// target type (int64 → float32 rounds once, as static_cast<float>(int64_t): 2^60 + 2^36 + 1
/// becomes 2^60 + 2^37, where a detour through double would give 2^60); float → int64 truncates
/// toward zero and refuses a NaN, infinite or out-of-range value; anything → bool is x != 0.
/// try_fold leaves casts into ABI 1.1's dtypes to the kernel; reaching here is a bug.
[[noreturn]] void not_folded_cast(DType to) {
    throw Error(ErrorCode::other, "constant folding: a cast to " + string(to_string(to)) + " is not folded");
}

CT cast(const CT& c, DType to) {
    CT out = make(to, c.shape);
    for (std::int64_t k = 0; k < c.size(); ++k) {
        if (c.is_float()) {
            const double v = c.f[k];  // exactly the source value (float32 or float64)
            switch (to) {
                case DType::float32: out.f[k] = static_cast<double>(static_cast<float>(v)); break;
                case DType::float64: out.f[k] = v; break;
                case DType::boolean: out.i[k] = v != 0.0; break;
                case DType::int64:
                    // [-2^63, 2^63) holds exactly the values whose truncation fits in int64.
                    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
                        unsupported("Cast of element " + std::to_string(k) + " = " + std::to_string(v) +
                                    " to int64: the value has no int64 value (NaN, infinite or out of range)");
                    out.i[k] = static_cast<std::int64_t>(v);
                    break;
                default: not_folded_cast(to);
            }
        } else {
            const std::int64_t v = c.i[k];
            switch (to) {
                case DType::float32: out.f[k] = static_cast<double>(static_cast<float>(v)); break;
                case DType::float64: out.f[k] = static_cast<double>(v); break;
                case DType::boolean: out.i[k] = v != 0; break;
                case DType::int64: out.i[k] = v; break;
                default: not_folded_cast(to);
            }
        }
    }
    return out;
}

/// int64 a + b, a - b, a * b, refused when the result does not fit (C++ leaves it undefined).
std::int64_t checked_int(char op, std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    const bool overflow = op == '+' ? __builtin_add_overflow(a, b, &r)
                          : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                      : __builtin_mul_overflow(a, b, &r);
    if (overflow)
        unsupported("int64 overflow in a constant: " + std::to_string(a) + " " + op + " " + std::to_string(b));
    return r;
}

}  // namespace

/// Output shape of Reshape / Squeeze / Unsqueeze / Flatten for an input of shape `in`; reads
/// constant inputs (shape, axes) through `ctx`. Shared by folding and the converters.
Shape reshape_target(ImportContext& ctx, const onnx::NodeProto& node, const Shape& in) {
    const string& op = node.op_type();
    const auto rank = static_cast<std::int64_t>(in.size());
    if (op == "Reshape") {
        auto spec = int_values(ctx.constant(input_name(node, 1), "Reshape's shape"));
        const bool allowzero = attr_int(node, "allowzero", 0) != 0;
        Shape out;
        std::int64_t infer = -1;
        for (std::size_t k = 0; k < spec.size(); ++k) {
            std::int64_t d = spec[k];
            if (d == 0 && !allowzero) {
                if (static_cast<std::int64_t>(k) >= rank) unsupported("Reshape copies dimension " + std::to_string(k) + " that the input does not have");
                d = in[k];
            }
            if (d == -1) {
                if (infer >= 0) unsupported("Reshape's shape has more than one -1");
                infer = static_cast<std::int64_t>(k);
                out.push_back(1);
                continue;
            }
            if (d < 0) unsupported("Reshape's shape has a negative dimension " + std::to_string(d));
            out.push_back(d);
        }
        const auto known = element_count(out);  // a -1 counts as 1; raises on overflow
        if (infer >= 0) {
            if (known == 0 || element_count(in) % known != 0)
                unsupported("Reshape cannot infer -1 for " + to_string(in) + " → " + to_string(out));
            out[infer] = element_count(in) / known;
        }
        if (element_count(out) != element_count(in))
            unsupported("Reshape " + to_string(in) + " to " + to_string(out) + ": element counts differ");
        return out;
    }
    if (op == "Flatten") {
        auto axis = attr_int(node, "axis", 1);
        if (axis < 0) axis += rank;
        if (axis < 0 || axis > rank) unsupported("Flatten axis out of range");
        return {element_count(Shape(in.begin(), in.begin() + axis)),
                element_count(Shape(in.begin() + axis, in.end()))};
    }
    std::vector<std::int64_t> axes;
    const bool from_input = ctx.opset() >= 13;
    if (from_input) {
        if (!input_name(node, 1).empty()) axes = int_values(ctx.constant(input_name(node, 1), op + "'s axes"));
    } else if (auto a = attr_ints(node, "axes")) {
        axes = *a;
    }
    if (op == "Squeeze") {
        std::vector<bool> drop(in.size(), false);
        if (axes.empty()) {
            for (std::size_t k = 0; k < in.size(); ++k) drop[k] = in[k] == 1;
        } else {
            for (auto a : axes) {
                auto k = normalize_axis(a, rank);
                if (in[k] != 1) unsupported("Squeeze axis " + std::to_string(a) + " has size " + std::to_string(in[k]));
                drop[k] = true;
            }
        }
        Shape out;
        for (std::size_t k = 0; k < in.size(); ++k)
            if (!drop[k]) out.push_back(in[k]);
        return out;
    }
    if (op == "Unsqueeze") {
        const auto out_rank = rank + static_cast<std::int64_t>(axes.size());
        std::vector<bool> inserted(out_rank, false);
        for (auto a : axes) {
            auto k = a < 0 ? a + out_rank : a;
            if (k < 0 || k >= out_rank || inserted[k]) unsupported("Unsqueeze axes invalid");
            inserted[k] = true;
        }
        Shape out;
        std::size_t src = 0;
        for (std::int64_t k = 0; k < out_rank; ++k) out.push_back(inserted[k] ? 1 : in[src++]);
        return out;
    }
    unsupported("internal: reshape_target for " + op);
}

/// Resolves Slice's starts/ends/axes/steps (attributes before opset 10, constant inputs after)
/// for an input of shape `in`, with NumPy's clamping.
std::vector<std::array<std::int64_t, 3>> slice_ranges(ImportContext& ctx, const onnx::NodeProto& node, const Shape& in) {
    std::vector<std::int64_t> starts, ends, axes, steps;
    if (ctx.opset() < 10) {
        starts = attr_ints(node, "starts").value_or(std::vector<std::int64_t>{});
        ends = attr_ints(node, "ends").value_or(std::vector<std::int64_t>{});
        axes = attr_ints(node, "axes").value_or(std::vector<std::int64_t>{});
    } else {
        starts = int_values(ctx.constant(input_name(node, 1), "Slice's starts"));
        ends = int_values(ctx.constant(input_name(node, 2), "Slice's ends"));
        if (!input_name(node, 3).empty()) axes = int_values(ctx.constant(input_name(node, 3), "Slice's axes"));
        if (!input_name(node, 4).empty()) steps = int_values(ctx.constant(input_name(node, 4), "Slice's steps"));
    }
    const auto rank = static_cast<std::int64_t>(in.size());
    if (axes.empty()) for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
        unsupported("Slice's starts, ends, axes and steps differ in length");
    // Per axis [start, step, count]; untouched axes take everything.
    std::vector<std::array<std::int64_t, 3>> r(in.size());
    for (std::size_t d = 0; d < in.size(); ++d) r[d] = {0, 1, in[d]};
    std::vector<bool> seen(in.size(), false);
    for (std::size_t k = 0; k < axes.size(); ++k) {
        auto a = normalize_axis(axes[k], rank);
        if (seen[a]) unsupported("Slice names axis " + std::to_string(a) + " twice");
        seen[a] = true;
        const std::int64_t n = in[a], step = steps[k];
        if (step == 0 || step == std::numeric_limits<std::int64_t>::min()) unsupported("Slice step " + std::to_string(step));
        std::int64_t s = starts[k], e = ends[k];
        if (step > 0) {
            s = s < 0 ? std::max<std::int64_t>(0, s + n) : std::min(s, n);
            e = e < 0 ? std::max<std::int64_t>(0, e + n) : std::min(e, n);
            r[a] = {s, step, e > s ? (e - s - 1) / step + 1 : 0};
        } else {
            s = s < 0 ? std::max<std::int64_t>(-1, s + n) : std::min(s, n - 1);
            e = e < 0 ? std::max<std::int64_t>(-1, e + n) : std::min(e, n - 1);
            r[a] = {s, step, s > e ? (s - e - 1) / -step + 1 : 0};
        }
    }
    return r;
}

namespace {

CT slice(const CT& x, const std::vector<std::array<std::int64_t, 3>>& r) {
    Shape out_shape;
    for (const auto& a : r) out_shape.push_back(a[2]);
    CT out = make(x.dtype, out_shape);
    const auto strides = contiguous_strides(x.shape);
    for_each_index(out_shape, [&](std::int64_t k, const std::vector<std::int64_t>& idx) {
        std::int64_t src = 0;
        for (std::size_t d = 0; d < idx.size(); ++d) src += (r[d][0] + idx[d] * r[d][1]) * strides[d];
        if (x.is_float()) out.f[k] = x.f[src]; else out.i[k] = x.i[src];
    });
    return out;
}

CT concat(const std::vector<CT>& xs, std::int64_t axis) {
    Shape shape = xs.at(0).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    axis = normalize_axis(axis, rank);
    shape[axis] = 0;
    for (const auto& x : xs) {
        if (x.dtype != xs[0].dtype || x.shape.size() != xs[0].shape.size()) unsupported("Concat operands differ in dtype or rank");
        shape[axis] = checked_add_sizes(shape[axis], x.shape[axis], "Concat's output dimension " + std::to_string(axis));
    }
    CT out = make(xs[0].dtype, shape);
    const std::int64_t outer = element_count(Shape(shape.begin(), shape.begin() + axis));
    const std::int64_t inner = element_count(Shape(shape.begin() + axis + 1, shape.end()));
    std::int64_t k = 0;
    for (std::int64_t o = 0; o < outer; ++o)
        for (const auto& x : xs) {
            const auto chunk = x.shape[axis] * inner;
            for (std::int64_t j = 0; j < chunk; ++j, ++k) {
                if (out.is_float()) out.f[k] = x.f[o * chunk + j]; else out.i[k] = x.i[o * chunk + j];
            }
        }
    return out;
}

CT gather(const CT& x, const CT& idx, std::int64_t axis) {
    if (idx.is_float() || idx.dtype == DType::boolean) unsupported("Gather indices must be integers");
    const auto rank = static_cast<std::int64_t>(x.shape.size());
    axis = normalize_axis(axis, rank);
    Shape shape(x.shape.begin(), x.shape.begin() + axis);
    shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
    shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
    CT out = make(x.dtype, shape);
    const std::int64_t outer = element_count(Shape(x.shape.begin(), x.shape.begin() + axis));
    const std::int64_t inner = element_count(Shape(x.shape.begin() + axis + 1, x.shape.end()));
    const auto n = x.shape[axis];
    std::int64_t k = 0;
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < idx.size(); ++j) {
            auto i = idx.i[j];
            if (i < -n || i >= n) unsupported("Gather index " + std::to_string(i) + " out of range");
            if (i < 0) i += n;
            for (std::int64_t m = 0; m < inner; ++m, ++k) {
                auto src = (o * n + i) * inner + m;
                if (out.is_float()) out.f[k] = x.f[src]; else out.i[k] = x.i[src];
            }
        }
    return out;
}

CT transpose(const CT& x, std::vector<std::int64_t> perm) {
    const auto rank = x.shape.size();
    if (perm.empty()) for (std::size_t d = 0; d < rank; ++d) perm.push_back(static_cast<std::int64_t>(rank - 1 - d));
    Shape shape;
    for (auto p : perm) shape.push_back(x.shape.at(p));
    CT out = make(x.dtype, shape);
    const auto strides = contiguous_strides(x.shape);
    for_each_index(shape, [&](std::int64_t k, const std::vector<std::int64_t>& idx) {
        std::int64_t src = 0;
        for (std::size_t d = 0; d < rank; ++d) src += idx[d] * strides[perm[d]];
        if (out.is_float()) out.f[k] = x.f[src]; else out.i[k] = x.i[src];
    });
    return out;
}

CT expand(const CT& x, const Shape& target) {
    Shape shape = broadcast_shapes(x.shape, target);
    CT out = make(x.dtype, shape);
    for_each_index(shape, [&](std::int64_t k, const std::vector<std::int64_t>& idx) {
        auto src = bcast_index(idx, shape, x.shape);
        if (out.is_float()) out.f[k] = x.f[src]; else out.i[k] = x.i[src];
    });
    return out;
}

std::optional<CT> constant_attribute(const onnx::NodeProto& node) {
    for (const auto& a : node.attribute()) {
        if (a.name() == "value") return from_tensor(tensor_from_proto(a.t()));
        if (a.name() == "value_float") { CT c = make(DType::float32, {}); c.f[0] = a.f(); return c; }
        if (a.name() == "value_int") { CT c = make(DType::int64, {}); c.i[0] = a.i(); return c; }
        if (a.name() == "value_floats") {
            CT c = make(DType::float32, {static_cast<std::int64_t>(a.floats_size())});
            for (int k = 0; k < a.floats_size(); ++k) c.f[k] = a.floats(k);
            return c;
        }
        if (a.name() == "value_ints") {
            CT c = make(DType::int64, {static_cast<std::int64_t>(a.ints_size())});
            for (int k = 0; k < a.ints_size(); ++k) c.i[k] = a.ints(k);
            return c;
        }
        if (a.name() == "sparse_value") unsupported("sparse Constant values are not supported");
        if (a.name() == "value_string" || a.name() == "value_strings") unsupported(string("dtype string") + kSupportedOnnxDtypes);
    }
    unsupported("Constant has no value attribute");
}

}  // namespace

bool try_fold(ImportContext& ctx, const onnx::NodeProto& node) {
    const string& op = node.op_type();
    auto out = [&](const CT& c) {
        // An integer result outside a narrower dtype would wrap: left to the kernel, which wraps.
        if (!fits(c)) return false;
        ctx.define_constant(node.output(0), to_tensor(c));
        return true;
    };
    if (op == "Constant") return out(*constant_attribute(node));
    if (op == "EyeLike") {
        // Depends only on the input's static shape: ones on diagonal k.
        if (!ctx.value(input_name(node, 0)).is_tensor()) unsupported("EyeLike of a sequence or optional");
        const auto& t = ctx.type(input_name(node, 0));
        if (t.shape.size() != 2) unsupported("EyeLike needs a 2-D input");
        DType dtype = t.dtype;
        if (const auto* a = find_attr(node, "dtype")) {
            auto d = dtype_of_onnx(static_cast<int>(a->i()));
            if (!d) unsupported("dtype " + onnx_type_name(static_cast<int>(a->i())) + kSupportedOnnxDtypes);
            dtype = *d;
        }
        const auto k = attr_int(node, "k", 0);
        CT c = make(dtype, t.shape);
        for (std::int64_t r = 0; r < t.shape[0]; ++r)
            if (r + k >= 0 && r + k < t.shape[1]) set(c, r * t.shape[1] + r + k, 1.0, 1);
        return out(c);
    }
    if (op == "Shape" || op == "Size") {
        if (!ctx.value(input_name(node, 0)).is_tensor()) unsupported(op + " of a sequence or optional");
        const auto& t = ctx.type(input_name(node, 0));  // static by construction
        const auto rank = static_cast<std::int64_t>(t.shape.size());
        if (op == "Size") { CT c = make(DType::int64, {}); c.i[0] = element_count(t.shape); return out(c); }
        std::int64_t start = attr_int(node, "start", 0), end = attr_int(node, "end", rank);
        if (start < 0) start += rank;
        if (end < 0) end += rank;
        start = std::clamp<std::int64_t>(start, 0, rank);
        end = std::clamp<std::int64_t>(end, 0, rank);
        CT c = make(DType::int64, {std::max<std::int64_t>(0, end - start)});
        for (std::int64_t k = start; k < end; ++k) c.i[k - start] = t.shape[k];
        return out(c);
    }
    // Arithmetic and comparisons fold on the dtypes computes_exactly names (an integer result
    // must fit its dtype, else the kernel wraps it); casts into ABI 1.0's dtypes also from those
    // integers, such as an int32 window size cast to float.
    static const std::set<string> kComputes{"Neg", "Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater",
                                            "Ceil", "Floor", "Relu", "Abs", "Not", "And", "Or", "Xor"};
    auto dtype_of_input = [&](int k) { return ctx.type(node.input(k)).dtype; };
    if (kComputes.count(op)) {
        for (int k = 0; k < node.input_size(); ++k)
            if (!node.input(k).empty() && !computes_exactly(dtype_of_input(k))) return false;
    }
    if ((op == "Cast" || op == "CastLike") && node.input_size() >= 1 && !node.input(0).empty()) {
        const DType from = dtype_of_input(0);
        const bool exact_source = computes_exactly(from);
        std::optional<DType> to;
        if (op == "Cast") to = dtype_of_onnx(static_cast<int>(attr_int(node, "to", 0)));
        else if (node.input_size() >= 2 && !node.input(1).empty()) to = dtype_of_input(1);
        if (!exact_source || (to && !computes_only_on_1_0_dtypes(*to))) return false;
    }
    if (op == "CastLike" && node.input_size() >= 2 && !node.input(1).empty() && ctx.is_constant(node.input(0))) {
        // Only target_type's dtype matters (static by construction), not its values.
        return out(cast(from_tensor(*ctx.value(node.input(0)).constant), ctx.type(node.input(1)).dtype));
    }
    // Everything else folds only when every present input is a constant.
    for (int k = 0; k < node.input_size(); ++k)
        if (!node.input(k).empty() && !ctx.is_constant(node.input(k))) return false;
    auto arg = [&](int k) { return from_tensor(*ctx.value(node.input(k)).constant); };
    auto present = [&](int k) { return k < node.input_size() && !node.input(k).empty(); };
    if (node.input_size() == 0 && op != "ConstantOfShape") return false;
    if (op == "Identity") return out(arg(0));
    if (op == "Cast") {
        auto to = dtype_of_onnx(static_cast<int>(attr_int(node, "to", 0)));
        if (!to) unsupported("Cast to " + onnx_type_name(static_cast<int>(attr_int(node, "to", 0))) + kSupportedOnnxDtypes);
        return out(cast(arg(0), *to));
    }
    if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten") {
        CT x = arg(0);
        return out(reshaped(x, reshape_target(ctx, node, x.shape)));
    }
    if (op == "Concat") {
        std::vector<CT> xs;
        for (int k = 0; k < node.input_size(); ++k) if (present(k)) xs.push_back(arg(k));
        return out(concat(xs, attr_int(node, "axis", 0)));
    }
    if (op == "Gather") return out(gather(arg(0), arg(1), attr_int(node, "axis", 0)));
    if (op == "Slice") {
        CT x = arg(0);
        return out(slice(x, slice_ranges(ctx, node, x.shape)));
    }
    if (op == "Transpose") return out(transpose(arg(0), attr_ints(node, "perm").value_or(std::vector<std::int64_t>{})));
    if (op == "ConstantOfShape") {
        auto shape = present(0) ? int_values(*ctx.value(node.input(0)).constant) : std::vector<std::int64_t>{};
        CT value = make(DType::float32, {1});
        if (const auto* a = find_attr(node, "value")) value = from_tensor(tensor_from_proto(a->t()));
        if (value.size() != 1) unsupported("ConstantOfShape's value must hold one element, got shape " + to_string(value.shape));
        CT c = make(value.dtype, shape);
        for (std::int64_t k = 0; k < c.size(); ++k) set(c, k, value.get(0), value.is_float() ? 0 : value.i[0]);
        return out(c);
    }
    if (op == "Expand") return out(expand(arg(0), int_values(*ctx.value(node.input(1)).constant)));
    if (op == "Range") {
        CT s = arg(0), l = arg(1), d = arg(2);
        if (s.is_float()) {
            // ONNX Range: n = max(ceil((limit - start) / delta), 0), output[k] = start + k * delta,
            // evaluated in the inputs' dtype.
            auto range = [&]<typename T>(T start, T limit, T delta) {
                const T count = std::ceil((limit - start) / delta);
                if (std::isnan(count) || count >= T(9223372036854775808.0))
                    unsupported("Range(" + std::to_string(double(start)) + ", " + std::to_string(double(limit)) + ", " +
                                std::to_string(double(delta)) + ") has no finite element count");
                const auto n = count > T(0) ? static_cast<std::int64_t>(count) : std::int64_t(0);
                CT c = make(s.dtype, {n});
                for (std::int64_t k = 0; k < n; ++k) c.f[k] = static_cast<double>(start + static_cast<T>(k) * delta);
                return c;
            };
            if (s.dtype == DType::float32)
                return out(range(static_cast<float>(s.f[0]), static_cast<float>(l.f[0]), static_cast<float>(d.f[0])));
            return out(range(s.f[0], l.f[0], d.f[0]));
        }
        std::int64_t start = s.i[0], limit = l.i[0], delta = d.i[0];
        if (delta == 0) unsupported("Range delta 0");
        // ceil((limit - start) / delta) in uint64: the distance may exceed int64 (but not 2^64).
        const bool up = delta > 0;
        if (up ? limit <= start : limit >= start) return out(make(s.dtype, {0}));
        const std::uint64_t span = up ? static_cast<std::uint64_t>(limit) - static_cast<std::uint64_t>(start)
                                      : static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(limit);
        const std::uint64_t step = up ? static_cast<std::uint64_t>(delta) : std::uint64_t(0) - static_cast<std::uint64_t>(delta);
        const std::uint64_t count = span / step + (span % step != 0);
        if (count > static_cast<std::uint64_t>(kMaxFoldedElements)) unsupported("Range of " + std::to_string(count) + " elements");
        const auto n = static_cast<std::int64_t>(count);
        CT c = make(s.dtype, {n});
        // start + k·delta modulo 2^64: exact, since every element lies in [start, limit).
        for (std::int64_t k = 0; k < n; ++k)
            c.i[k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(start) +
                                               static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(delta));
        return out(c);
    }
    if (op == "Neg") {
        CT x = arg(0);
        for (auto& v : x.f) v = -v;
        for (auto& v : x.i) v = checked_int('-', 0, v);
        return out(x);
    }
    if (op == "Not") {
        CT x = arg(0);
        if (x.dtype != DType::boolean) return false;
        for (auto& v : x.i) v = v == 0;
        return out(x);
    }
    if (op == "And" || op == "Or" || op == "Xor") {
        if (arg(0).dtype != DType::boolean) return false;
        return out(binary(arg(0), arg(1), DType::boolean, [](auto, auto) { return 0.0; },
                          [&op](std::int64_t x, std::int64_t y) {
                              return std::int64_t(op == "And" ? (x && y) : op == "Or" ? (x || y) : (x != y));
                          }));
    }
    if (op == "Ceil" || op == "Floor" || op == "Relu" || op == "Abs") {
        // Exact on the host, with the kernels' expressions (Relu: x < 0 ? 0 : x, which keeps -0
        // and NaN).
        CT x = arg(0);
        if (x.dtype == DType::boolean) return false;
        for (auto& v : x.f) v = op == "Ceil" ? std::ceil(v) : op == "Floor" ? std::floor(v) : op == "Relu" ? (v < 0 ? 0.0 : v) : std::fabs(v);
        for (auto& v : x.i) {
            if (op == "Relu") v = std::max<std::int64_t>(v, 0);
            else if (op == "Abs") v = v < 0 ? checked_int('-', 0, v) : v;
        }
        return out(x);
    }
    auto checked = [](char o) { return [o](std::int64_t x, std::int64_t y) { return checked_int(o, x, y); }; };
    if (op == "Add") return out(binary(arg(0), arg(1), arg(0).dtype, std::plus<>(), checked('+')));
    if (op == "Sub") return out(binary(arg(0), arg(1), arg(0).dtype, std::minus<>(), checked('-')));
    if (op == "Mul") return out(binary(arg(0), arg(1), arg(0).dtype, std::multiplies<>(), checked('*')));
    if (op == "Div") {
        CT a = arg(0);
        if (a.dtype == DType::boolean) return false;
        return out(binary(a, arg(1), a.dtype, std::divides<>(), [](std::int64_t x, std::int64_t y) {
            if (y == 0) unsupported("integer division by zero in a constant");
            if (x == std::numeric_limits<std::int64_t>::min() && y == -1)
                unsupported("int64 overflow in a constant: " + std::to_string(x) + " / -1");
            return x / y;
        }));
    }
    if (op == "Equal") return out(binary(arg(0), arg(1), DType::boolean, [](auto x, auto y) { return double(x == y); }, [](std::int64_t x, std::int64_t y) { return std::int64_t(x == y); }));
    if (op == "Less") return out(binary(arg(0), arg(1), DType::boolean, [](auto x, auto y) { return double(x < y); }, [](std::int64_t x, std::int64_t y) { return std::int64_t(x < y); }));
    if (op == "Greater") return out(binary(arg(0), arg(1), DType::boolean, [](auto x, auto y) { return double(x > y); }, [](std::int64_t x, std::int64_t y) { return std::int64_t(x > y); }));
    if (op == "Where") {
        CT c = arg(0), a = arg(1), b = arg(2);
        if (c.dtype != DType::boolean) unsupported("Where's condition must be bool, got " + string(to_string(c.dtype)));
        if (a.dtype != b.dtype) unsupported("Where operands differ in dtype");
        Shape shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape), b.shape);
        CT r = make(a.dtype, shape);
        for_each_index(shape, [&](std::int64_t k, const std::vector<std::int64_t>& idx) {
            bool pick = c.i[bcast_index(idx, shape, c.shape)] != 0;
            const CT& s = pick ? a : b;
            auto src = bcast_index(idx, shape, s.shape);
            if (r.is_float()) r.f[k] = s.f[src]; else r.i[k] = s.i[src];
        });
        return out(r);
    }
    return false;
}

}  // namespace capsule::onnx_import
