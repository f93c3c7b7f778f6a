// Ops that move or copy values without arithmetic: reshapes, permutations, broadcasts,
// concatenation, slicing, padding, tiling and triangles. The output shape is all they compute.
#include "context.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace capsule::shape_inference {

namespace {
/// The smallest and largest value of an integer dtype narrower than 64 bits, or uint64's.
std::pair<double, double> integer_range(DType dtype) {
    switch (dtype) {
        case DType::int8: return {-128.0, 127.0};
        case DType::uint8: return {0.0, 255.0};
        case DType::int16: return {-32768.0, 32767.0};
        case DType::uint16: return {0.0, 65535.0};
        case DType::int32: return {-2147483648.0, 2147483647.0};
        case DType::uint32: return {0.0, 4294967295.0};
        default: return {0.0, 18446744073709549568.0};  // uint64: the largest double below 2^64
    }
}
}  // namespace

TensorType flatten(Context& c) {
    c.arity(1);
    c.attributes({"start_dim", "end_dim"});
    const auto& in = c.shape(0);
    const int64_t start = axis_for("start_dim", c.int_or("start_dim", 1), in.size());
    const int64_t end = axis_for("end_dim", c.int_or("end_dim", -1), in.size());
    if (in.empty()) return {{1}, c.in(0).dtype};
    if (start > end)
        fail("start_dim " + str(start) + " comes after end_dim " + str(end) + " for shape " +
             to_string(in));
    Shape out(in.begin(), in.begin() + start);
    out.push_back(product(in, size_t(start), size_t(end) + 1));
    out.insert(out.end(), in.begin() + end + 1, in.end());
    return {out, c.in(0).dtype};
}

TensorType reshape(Context& c) {
    c.arity(1);
    c.attributes({"shape"});
    const auto& in = c.shape(0);
    auto target = c.req_ints("shape");
    const int64_t total = product(in);
    int64_t known = 1;
    std::optional<size_t> infer_at;
    for (size_t i = 0; i < target.size(); ++i) {
        if (target[i] == -1) {
            if (infer_at)
                fail("attribute 'shape' = " + to_string(target) + " has more than one -1");
            infer_at = i;
        } else if (target[i] < 0) {
            fail("attribute 'shape' = " + to_string(target) +
                 " has a negative dimension other than -1");
        } else {
            known = mul(known, target[i]);
        }
    }
    if (infer_at) {
        if (known == 0)
            fail("cannot infer the -1 in " + to_string(target) +
                 ": the other dimensions hold 0 elements");
        if (total % known != 0)
            fail("cannot reshape " + to_string(in) + " (" + str(total) + " elements) to " +
                 to_string(target));
        target[*infer_at] = total / known;
    } else if (known != total) {
        fail("cannot reshape " + to_string(in) + " (" + str(total) + " elements) to " +
             to_string(target) + " (" + str(known) + " elements)");
    }
    return {target, c.in(0).dtype};
}

TensorType permute(Context& c) {
    c.arity(1);
    c.attributes({"dims"});
    const auto& in = c.shape(0);
    const auto dims = c.req_ints("dims");
    if (dims.size() != in.size())
        fail("attribute 'dims' = " + to_string(dims) + " has " + str(int64_t(dims.size())) +
             " entries for rank " + str(int64_t(in.size())));
    if (in.empty()) return {in, c.in(0).dtype};
    const auto norm = axes_for("dims", dims, in.size());
    Shape out;
    for (auto d : norm) out.push_back(in[size_t(d)]);
    return {out, c.in(0).dtype};
}

TensorType fixed_permutation(Context& c, size_t rank, std::initializer_list<size_t> order) {
    c.arity(1);
    c.attributes({});
    c.rank_is(0, rank);
    Shape out;
    for (auto i : order) out.push_back(c.shape(0)[i]);
    return {out, c.in(0).dtype};
}

TensorType swap_adjacent(Context& c) {
    c.arity(1);
    c.attributes({"depth"});
    const auto& in = c.shape(0);
    const int64_t depth = c.req_int("depth");
    if (depth < 0 || depth >= int64_t(in.size()) - 1)
        fail("attribute 'depth' = " + str(depth) + " out of range for rank " +
             str(int64_t(in.size())) + " (needs 0 <= depth <= rank - 2)");
    Shape out = in;
    std::swap(out[size_t(depth)], out[size_t(depth) + 1]);
    return {out, c.in(0).dtype};
}

TensorType broadcast_to(Context& c) {
    c.arity(1);
    c.attributes({"shape"});
    const auto& in = c.shape(0);
    const auto target = c.req_shape("shape");
    bool ok = in.size() <= target.size();
    for (size_t i = 0; ok && i < in.size(); ++i) {
        const int64_t d = in[in.size() - 1 - i];
        ok = d == 1 || d == target[target.size() - 1 - i];
    }
    if (!ok) fail("cannot broadcast " + to_string(in) + " to " + to_string(target));
    return {target, c.in(0).dtype};
}

TensorType concat_vectors(Context& c) {
    c.arity_at_least(2);
    c.attributes({});
    int64_t n = 0;
    for (size_t i = 0; i < c.count(); ++i) {
        c.rank_is(i, 1);
        n = add(n, c.shape(i)[0]);
    }
    std::optional<DType> dtype;
    for (size_t i = 0; i < c.count(); ++i) dtype = c.same_dtype({0, i});
    return {{n}, *dtype};
}

TensorType concat_leading(Context& c) {
    c.arity_at_least(2);
    c.attributes({});
    c.rank_at_least(0, 1);
    Shape out = c.shape(0);
    for (size_t i = 1; i < c.count(); ++i) {
        const auto& s = c.shape(i);
        if (s.size() != out.size() ||
            !std::equal(s.begin() + (s.empty() ? 0 : 1), s.end(), out.begin() + 1))
            fail("parent " + std::to_string(i) + " has shape " + to_string(s) +
                 "; every parent must have parent 0's shape " + to_string(c.shape(0)) +
                 " apart from the leading dimension");
        out[0] = add(out[0], s[0]);
    }
    std::optional<DType> dtype;
    for (size_t i = 0; i < c.count(); ++i) dtype = c.same_dtype({0, i});
    return {out, *dtype};
}

TensorType concat(Context& c) {
    c.arity_at_least(1);
    c.attributes({"axis"});
    c.rank_at_least(0, 1);
    const auto& first = c.shape(0);
    const auto axis = size_t(axis_for("axis", c.req_int("axis"), first.size()));
    Shape out = first;
    for (size_t i = 1; i < c.count(); ++i) {
        const auto& s = c.shape(i);
        bool ok = s.size() == first.size();
        for (size_t d = 0; ok && d < s.size(); ++d) ok = d == axis || s[d] == first[d];
        if (!ok)
            fail("parent " + std::to_string(i) + " has shape " + to_string(s) +
                 "; every parent must have parent 0's shape " + to_string(first) +
                 " apart from axis " + str(int64_t(axis)));
        out[axis] = add(out[axis], s[axis]);
    }
    std::optional<DType> dtype;
    for (size_t i = 0; i < c.count(); ++i) dtype = c.same_dtype({0, i});
    product(out);
    return {out, *dtype};
}

TensorType slice_leading(Context& c) {
    c.arity(1);
    c.attributes({"start", "end"});
    c.rank_at_least(0, 1);
    Shape out = c.shape(0);
    const int64_t n = out[0];
    auto clamp_index = [n](int64_t v) {
        if (v < 0) v += n;  // v >= INT64_MIN and n >= 0: no overflow
        return std::clamp<int64_t>(v, 0, n);
    };
    const int64_t start = clamp_index(c.int_or("start", 0));
    const int64_t end = clamp_index(c.int_or("end", n));
    out[0] = std::max<int64_t>(0, end - start);
    return {out, c.in(0).dtype};
}

namespace {

/// Length of an ONNX Slice along an axis of size `dim`: negative starts/ends count from the end,
/// then starts and ends are clamped to [0, dim] (step > 0) or [-1, dim - 1] (step < 0).
int64_t slice_length(int64_t dim, int64_t start, int64_t end, int64_t step) {
    if (start < 0) start += dim;  // start >= INT64_MIN and dim >= 0: no overflow
    if (end < 0) end += dim;
    int64_t diff;
    if (step > 0) {
        diff = std::clamp<int64_t>(end, 0, dim) - std::clamp<int64_t>(start, 0, dim);
    } else {
        if (dim == 0) return 0;
        diff = std::clamp<int64_t>(start, 0, dim - 1) - std::clamp<int64_t>(end, -1, dim - 1);
        step = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max()
                                                            : -step;
    }
    return diff <= 0 ? 0 : (diff - 1) / step + 1;
}

}  // namespace

TensorType slice(Context& c) {
    c.arity(1);
    c.attributes({"starts", "ends", "axes", "steps"});
    c.rank_at_least(0, 1);
    const auto& in = c.shape(0);
    const auto starts = c.req_ints("starts");
    const auto ends = c.req_ints("ends");
    if (ends.size() != starts.size())
        fail("attributes 'starts' and 'ends' have different lengths (" +
             str(int64_t(starts.size())) + " and " + str(int64_t(ends.size())) + ")");
    std::vector<int64_t> axes;
    if (auto given = c.opt_ints("axes")) {
        if (given->size() != starts.size())
            fail("attribute 'axes' has " + str(int64_t(given->size())) + " entries, 'starts' " +
                 str(int64_t(starts.size())));
        axes = axes_for("axes", *given, in.size());
    } else {
        if (starts.size() > in.size())
            fail("attribute 'starts' has " + str(int64_t(starts.size())) +
                 " entries for rank " + str(int64_t(in.size())));
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
    }
    std::vector<int64_t> steps(starts.size(), 1);
    if (auto given = c.opt_ints("steps")) {
        if (given->size() != starts.size())
            fail("attribute 'steps' has " + str(int64_t(given->size())) + " entries, 'starts' " +
                 str(int64_t(starts.size())));
        steps = *given;
    }
    Shape out = in;
    for (size_t i = 0; i < starts.size(); ++i) {
        if (steps[i] == 0) fail("attribute 'steps' = " + to_string(steps) + " has a 0 step");
        const auto a = size_t(axes[i]);
        out[a] = slice_length(in[a], starts[i], ends[i], steps[i]);
    }
    return {out, c.in(0).dtype};
}

TensorType pad(Context& c) {
    c.arity(1);
    c.attributes({"pads", "mode", "value"});
    const auto& in = c.shape(0);
    const auto pads = c.req_ints("pads");
    if (pads.size() != 2 * in.size())
        fail("attribute 'pads' has " + str(int64_t(pads.size())) + " entries; rank " +
             str(int64_t(in.size())) + " needs " + str(int64_t(2 * in.size())) +
             " ([x1_begin, x2_begin, ..., x1_end, x2_end, ...])");
    const auto mode = c.string_or("mode", "constant", {"constant", "reflect", "edge"});
    const double value = c.double_or("value", 0.0);
    if (mode != "constant" && c.opt_double("value"))
        fail("attribute 'value' is only valid with mode 'constant'");
    const DType dtype = c.in(0).dtype;
    // An integer attribute is any int64 exactly; a number must be an integer in int64's range
    // (2^63 is the first double above it).
    const bool integer_attr = c.find("value") && std::holds_alternative<int64_t>(*c.find("value"));
    if (dtype == DType::int64 && !integer_attr &&
        (value != std::trunc(value) || !(value >= -9223372036854775808.0 && value < 9223372036854775808.0)))
        fail("attribute 'value' = " + num(value) + " is not an int64 value (the input is int64)");
    if (is_integer(dtype) && dtype != DType::int64) {
        // A narrower integer dtype: the value must be one of its values (the kernel stores it as is).
        const auto [low, high] = integer_range(dtype);
        if (value != std::trunc(value) || value < low || value > high)
            fail("attribute 'value' = " + num(value) + " is not a " + string(to_string(dtype)) + " value");
    }
    if (dtype == DType::boolean && value != 0 && value != 1)
        fail("attribute 'value' = " + num(value) + " must be 0 or 1 for a bool input");
    Shape out(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
        const int64_t begin = pads[d], end = pads[d + in.size()];
        out[d] = add(add(in[d], begin), end);
        if (out[d] < 0)
            fail("attribute 'pads' = " + to_string(pads) + " crops axis " + str(int64_t(d)) +
                 " (size " + str(in[d]) + ") below 0");
        const int64_t grow = std::max(begin, end);
        if (mode == "reflect" && grow > 0 && grow >= in[d])
            fail("mode 'reflect' needs pads smaller than the padded axis: axis " + str(int64_t(d)) +
                 " has size " + str(in[d]) + ", pads " + str(begin) + " and " + str(end));
        if (mode == "edge" && grow > 0 && in[d] == 0)
            fail("mode 'edge' cannot pad axis " + str(int64_t(d)) + " of size 0");
    }
    product(out);
    return {out, dtype};
}

TensorType tile(Context& c) {
    c.arity(1);
    c.attributes({"repeats"});
    const auto& in = c.shape(0);
    const auto repeats = c.req_ints("repeats");
    if (repeats.size() != in.size())
        fail("attribute 'repeats' has " + str(int64_t(repeats.size())) + " entries for rank " +
             str(int64_t(in.size())));
    Shape out;
    for (size_t d = 0; d < in.size(); ++d) {
        if (repeats[d] < 0)
            fail("attribute 'repeats' = " + to_string(repeats) + " has a negative entry");
        out.push_back(mul(in[d], repeats[d]));
    }
    product(out);
    return {out, c.in(0).dtype};
}

TensorType triangle(Context& c) {
    c.arity(1);
    c.attributes({"k"});
    c.rank_at_least(0, 2);
    c.int_or("k", 0);
    return c.in(0);
}

}  // namespace capsule::shape_inference
