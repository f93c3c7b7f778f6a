// Shape and dtype inference for every BackendOp and the structural nodes. The attribute
// conventions, parameters and shape rules implemented here are documented op by op in
// docs/ops.md; keep the two in step.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "capsule/shape_math.hpp"
#include "capsule/ir.hpp"

namespace capsule {
namespace {

using std::int64_t;
using std::size_t;
using std::string;

[[noreturn]] void fail(const string& reason) { throw Error(ErrorCode::input, reason); }

int64_t add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) fail("integer overflow in shape arithmetic");
    return r;
}
int64_t sub(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow in shape arithmetic");
    return r;
}
int64_t mul(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow in shape arithmetic");
    return r;
}
/// Product of the dimensions; fails on overflow.
int64_t product(const Shape& shape, size_t begin = 0, size_t end = SIZE_MAX) {
    end = std::min(end, shape.size());
    begin = std::min(begin, end);
    const auto dims = std::span<const int64_t>(shape).subspan(begin, end - begin);
    if (auto n = try_element_count(dims)) return *n;
    fail("integer overflow in shape arithmetic: the product of " + shape_text(dims) +
         " exceeds 2^63-1");
}

string str(int64_t v) { return std::to_string(v); }
string quoted(const string& s) { return "'" + s + "'"; }

/// A number as a person would write it: 1e-12, 0.5, 3.
string num(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

string list_to_string(const std::vector<double>& v) {
    string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        out += num(v[i]);
    }
    return out + "]";
}

string attr_to_string(const AttrValue& value) {
    switch (value.index()) {
        case 0: return "integer " + str(std::get<int64_t>(value));
        case 1: return "number " + num(std::get<double>(value));
        case 2: return std::get<bool>(value) ? "boolean true" : "boolean false";
        case 3: return "string '" + std::get<string>(value) + "'";
        case 4: return "integer list " + to_string(std::get<std::vector<int64_t>>(value));
        default: return "number list " + list_to_string(std::get<std::vector<double>>(value));
    }
}

bool is_float(DType d) { return d == DType::float32 || d == DType::float64; }

/// Broadcasts two shapes NumPy-style.
Shape broadcast(const Shape& a, const Shape& b) {
    Shape out(std::max(a.size(), b.size()));
    if (const auto bad = broadcast_into(a, b, out); bad >= 0)
        fail("shapes " + to_string(a) + " and " + to_string(b) + " do not broadcast (" +
             str(broadcast_dim(a, out.size(), bad)) + " vs " + str(broadcast_dim(b, out.size(), bad)) + ")");
    return out;
}

/// Everything one inference needs: the node, its parents' types, attribute readers that reject
/// unknown names, and the parameter list being collected.
class Context {
public:
    Context(const Node& node, const std::vector<TensorType>& parents,
            std::vector<ParameterSpec>* params)
        : node_(node), in_(parents), params_(params) {}

    const Node& node() const { return node_; }
    const TensorType& in(size_t i) const { return in_[i]; }
    const Shape& shape(size_t i) const { return in_[i].shape; }
    size_t rank(size_t i) const { return in_[i].shape.size(); }
    size_t count() const { return in_.size(); }

    // ---- arity ----
    static string parents_word(size_t n) {
        if (n == 0) return "no parents";
        return std::to_string(n) + (n == 1 ? " parent" : " parents");
    }
    void arity(size_t n) const {
        if (in_.size() != n)
            fail("expects " + parents_word(n) + ", got " + str(int64_t(in_.size())));
    }
    void arity_at_least(size_t n) const {
        if (in_.size() < n)
            fail("expects at least " + parents_word(n) + ", got " + str(int64_t(in_.size())));
    }
    void arity_between(size_t lo, size_t hi) const {
        if (in_.size() < lo || in_.size() > hi)
            fail("expects " + std::to_string(lo) + " or " + std::to_string(hi) + " parents, got " +
                 str(int64_t(in_.size())));
    }

    // ---- attributes ----
    /// Declares the attributes this op takes; any other attribute is an error.
    void attributes(std::initializer_list<const char*> names) {
        allowed_.assign(names.begin(), names.end());
        for (const auto& [key, value] : node_.attrs) {
            if (std::find(allowed_.begin(), allowed_.end(), key) != allowed_.end()) continue;
            if (allowed_.empty())
                fail("unknown attribute " + quoted(key) + " (this op takes none)");
            string list;
            for (const auto& a : allowed_) list += (list.empty() ? "" : ", ") + a;
            fail("unknown attribute " + quoted(key) + "; valid: " + list);
        }
    }
    const AttrValue* find(const char* name) const {
        if (std::find(allowed_.begin(), allowed_.end(), name) == allowed_.end())
            throw std::logic_error(string("shape inference reads undeclared attribute ") + name);
        auto it = node_.attrs.find(name);
        return it == node_.attrs.end() ? nullptr : &it->second;
    }
    [[noreturn]] static void bad(const char* name, const string& expected, const AttrValue& v) {
        fail("attribute " + quoted(name) + " must be " + expected + ", got " + attr_to_string(v));
    }
    [[noreturn]] static void missing(const char* name, const string& type) {
        fail("missing attribute " + quoted(name) + " (" + type + ")");
    }

    std::optional<int64_t> opt_int(const char* name) const {
        const auto* v = find(name);
        if (!v) return std::nullopt;
        if (auto p = std::get_if<int64_t>(v)) return *p;
        bad(name, "an integer", *v);
    }
    int64_t int_or(const char* name, int64_t fallback) const {
        return opt_int(name).value_or(fallback);
    }
    int64_t req_int(const char* name) const {
        auto v = opt_int(name);
        if (!v) missing(name, "integer");
        return *v;
    }
    /// An integer attribute that must be at least `min`.
    int64_t int_min(const char* name, int64_t min, std::optional<int64_t> fallback) const {
        auto v = opt_int(name);
        if (!v && !fallback) missing(name, "integer");
        const int64_t x = v ? *v : *fallback;
        if (x < min) fail("attribute " + quoted(name) + " = " + str(x) + " must be >= " + str(min));
        return x;
    }

    std::optional<double> opt_double(const char* name) const {
        const auto* v = find(name);
        if (!v) return std::nullopt;
        double x;
        if (auto p = std::get_if<double>(v))
            x = *p;
        else if (auto q = std::get_if<int64_t>(v))
            x = static_cast<double>(*q);
        else
            bad(name, "a number", *v);
        if (std::isnan(x)) fail("attribute " + quoted(name) + " must not be NaN");
        return x;
    }
    double double_or(const char* name, double fallback) const {
        return opt_double(name).value_or(fallback);
    }
    /// A finite number > 0.
    double positive(const char* name, double fallback) const {
        const double x = double_or(name, fallback);
        if (!(x > 0) || !std::isfinite(x))
            fail("attribute " + quoted(name) + " = " + num(x) + " must be a finite number > 0");
        return x;
    }

    bool bool_or(const char* name, bool fallback) const {
        const auto* v = find(name);
        if (!v) return fallback;
        if (auto p = std::get_if<bool>(v)) return *p;
        bad(name, "true or false", *v);
    }

    string string_or(const char* name, const string& fallback,
                     std::initializer_list<const char*> choices) const {
        const auto* v = find(name);
        if (!v) return fallback;
        string list;
        for (auto c : choices) list += (list.empty() ? "" : ", ") + string(c);
        auto p = std::get_if<string>(v);
        if (!p) bad(name, "one of " + list, *v);
        for (auto c : choices)
            if (*p == c) return *p;
        fail("attribute " + quoted(name) + " = '" + *p + "' must be one of " + list);
    }

    std::optional<std::vector<int64_t>> opt_ints(const char* name) const {
        const auto* v = find(name);
        if (!v) return std::nullopt;
        if (auto p = std::get_if<std::vector<int64_t>>(v)) return *p;
        bad(name, "a list of integers", *v);
    }
    std::vector<int64_t> req_ints(const char* name) const {
        auto v = opt_ints(name);
        if (!v) missing(name, "list of integers");
        return *v;
    }
    /// A shape given as a list of integers, every entry >= 0.
    Shape req_shape(const char* name) const {
        auto v = req_ints(name);
        for (auto d : v)
            if (d < 0)
                fail("attribute " + quoted(name) + " = " + to_string(v) +
                     " has a negative dimension");
        return v;
    }

    /// An integer, or a list of `n` integers, each >= `min`. For `n` spatial dimensions.
    std::vector<int64_t> tuple(const char* name, size_t n, int64_t min,
                               std::optional<std::vector<int64_t>> fallback) const {
        const auto* v = find(name);
        std::vector<int64_t> out;
        if (!v) {
            if (!fallback) missing(name, n == 1 ? "integer" : "integer or list of 2 integers");
            out = *fallback;
        } else if (auto p = std::get_if<int64_t>(v)) {
            out.assign(n, *p);
        } else if (auto q = std::get_if<std::vector<int64_t>>(v); q && q->size() == n) {
            out = *q;
        } else {
            bad(name,
                n == 1 ? "an integer"
                       : "an integer or a list of " + std::to_string(n) + " integers",
                *v);
        }
        const bool scalar = !v || std::holds_alternative<int64_t>(*v);
        for (auto x : out)
            if (x < min)
                fail("attribute " + quoted(name) + " = " + (scalar ? str(x) : to_string(out)) +
                     " must be >= " + str(min));
        return out;
    }

    // ---- dtypes ----
    string parent_label(size_t i, const char* role = nullptr) const {
        return "parent " + std::to_string(i) + (role ? string(" (") + role + ")" : string());
    }
    /// Parents `which` must be float32 or float64, all the same; returns that dtype.
    DType floats(std::initializer_list<size_t> which) const {
        std::optional<DType> dtype;
        size_t first = 0;
        for (auto i : which) {
            if (!is_float(in_[i].dtype))
                fail(parent_label(i) + " has dtype " + string(to_string(in_[i].dtype)) +
                     "; expected float32 or float64");
            if (!dtype) {
                dtype = in_[i].dtype;
                first = i;
            } else if (*dtype != in_[i].dtype) {
                fail("parents have different dtypes: parent " + std::to_string(first) + " is " +
                     string(to_string(*dtype)) + ", parent " + std::to_string(i) + " is " +
                     string(to_string(in_[i].dtype)));
            }
        }
        return dtype.value_or(DType::float32);
    }
    /// Every parent must be a float tensor of one dtype.
    DType all_floats() const {
        std::optional<DType> dtype;
        for (size_t i = 0; i < in_.size(); ++i) dtype = floats({0, i});
        return dtype.value_or(DType::float32);
    }
    /// Every parent in `which` has the same dtype (any dtype); returns it.
    DType same_dtype(std::initializer_list<size_t> which) const {
        std::optional<DType> dtype;
        size_t first = 0;
        for (auto i : which) {
            if (!dtype) {
                dtype = in_[i].dtype;
                first = i;
            } else if (*dtype != in_[i].dtype) {
                fail("parents have different dtypes: parent " + std::to_string(first) + " is " +
                     string(to_string(*dtype)) + ", parent " + std::to_string(i) + " is " +
                     string(to_string(in_[i].dtype)));
            }
        }
        return dtype.value_or(DType::float32);
    }
    void index_dtype(size_t i) const {
        if (in_[i].dtype != DType::int64)
            fail(parent_label(i, "index") + " has dtype " + string(to_string(in_[i].dtype)) +
                 "; expected int64");
    }

    // ---- ranks ----
    void rank_is(size_t i, size_t r, const char* role = nullptr) const {
        if (rank(i) != r)
            fail("expects " + parent_label(i, role) + " of rank " + std::to_string(r) +
                 ", got shape " + to_string(shape(i)));
    }
    void rank_at_least(size_t i, size_t r, const char* role = nullptr) const {
        if (rank(i) < r)
            fail("expects " + parent_label(i, role) + " of rank >= " + std::to_string(r) +
                 ", got shape " + to_string(shape(i)));
    }

    // ---- parameters ----
    void param(const string& suffix, Shape shape, DType dtype) const {
        if (!params_) return;
        const auto prefix = node_.parameter_prefix();
        params_->push_back(
            {suffix.empty() ? prefix : prefix + "." + suffix, {std::move(shape), dtype}});
    }

private:
    const Node& node_;
    const std::vector<TensorType>& in_;
    std::vector<ParameterSpec>* params_;
    std::vector<string> allowed_;
};

/// Normalises a possibly negative axis; `rank` 0 is treated as rank 1 (as PyTorch does).
int64_t axis_for(const char* name, int64_t axis, size_t rank) {
    if (const auto a = try_normalize_axis(axis, std::max<int64_t>(int64_t(rank), 1))) return *a;
    fail("attribute " + quoted(name) + " = " + str(axis) + " out of range for rank " +
         str(int64_t(rank)));
}

/// Normalises a list of distinct axes.
std::vector<int64_t> axes_for(const char* name, const std::vector<int64_t>& axes, size_t rank) {
    std::vector<int64_t> out;
    for (auto a : axes) {
        const auto normal = try_normalize_axis(a, std::max<int64_t>(int64_t(rank), 1));
        if (!normal)
            fail("attribute " + quoted(name) + " entry " + str(a) + " out of range for rank " +
                 str(int64_t(rank)));
        const int64_t n = *normal;
        if (std::find(out.begin(), out.end(), n) != out.end())
            fail("attribute " + quoted(name) + " = " + to_string(axes) + " repeats axis " + str(n));
        out.push_back(n);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Op families

TensorType unary_float(Context& c) {
    c.arity(1);
    c.attributes({});
    return {c.shape(0), c.floats({0})};
}

TensorType binary_broadcast(Context& c) {
    c.arity(2);
    c.attributes({});
    const auto dtype = c.floats({0, 1});
    return {broadcast(c.shape(0), c.shape(1)), dtype};
}

TensorType softmax_like(Context& c) {
    c.arity(1);
    c.attributes({"axis"});
    const auto dtype = c.floats({0});
    axis_for("axis", c.int_or("axis", -1), c.rank(0));
    return {c.shape(0), dtype};
}

TensorType reduce(Context& c) {
    c.arity(1);
    c.attributes({"axes", "keepdims"});
    const auto dtype = c.floats({0});
    const bool keep = c.bool_or("keepdims", false);
    const auto& in = c.shape(0);
    std::vector<int64_t> axes;
    if (auto given = c.opt_ints("axes")) {
        if (given->empty()) fail("attribute 'axes' is empty; omit it to reduce over every axis");
        axes = axes_for("axes", *given, in.size());
    } else {
        for (size_t i = 0; i < in.size(); ++i) axes.push_back(int64_t(i));
    }
    Shape out;
    for (size_t i = 0; i < in.size(); ++i) {
        const bool reduced = std::find(axes.begin(), axes.end(), int64_t(i)) != axes.end();
        if (!reduced)
            out.push_back(in[i]);
        else if (keep)
            out.push_back(1);
    }
    return {out, dtype};
}

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

int64_t checked_index(const char* name, int64_t index, int64_t length) {
    if (index < -length || index >= length)
        fail("attribute " + quoted(name) + " = " + str(index) + " out of range for length " +
             str(length));
    return index < 0 ? index + length : index;
}

TensorType matmul(Context& c) {
    c.arity(2);
    c.attributes({});
    const auto dtype = c.floats({0, 1});
    const auto& a0 = c.shape(0);
    const auto& b0 = c.shape(1);
    if (a0.empty() || b0.empty())
        fail("both parents must have rank >= 1, got " + to_string(a0) + " x " + to_string(b0));
    auto inner_error = [&] {
        fail("inner dimensions differ: " + to_string(a0) + " x " + to_string(b0));
    };
    if (a0.size() == 1 && b0.size() == 1) {
        if (a0[0] != b0[0]) inner_error();
        return {{}, dtype};
    }
    Shape a = a0, b = b0;
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    if (a[a.size() - 1] != b[b.size() - 2]) inner_error();
    Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
    Shape out;
    try {
        out = broadcast(batch_a, batch_b);
    } catch (const Error&) {
        fail("batch dimensions do not broadcast: " + to_string(a0) + " x " + to_string(b0));
    }
    if (a0.size() > 1) out.push_back(a[a.size() - 2]);
    if (b0.size() > 1) out.push_back(b[b.size() - 1]);
    return {out, dtype};
}

TensorType bmm(Context& c) {
    c.arity(2);
    c.attributes({});
    const auto dtype = c.floats({0, 1});
    c.rank_is(0, 3);
    c.rank_is(1, 3);
    const auto& a = c.shape(0);
    const auto& b = c.shape(1);
    if (a[0] != b[0]) fail("batch dimensions differ: " + to_string(a) + " x " + to_string(b));
    if (a[2] != b[1]) fail("inner dimensions differ: " + to_string(a) + " x " + to_string(b));
    return {{a[0], a[1], b[2]}, dtype};
}

TensorType linear(Context& c) {
    c.arity(1);
    c.attributes({"out_features", "bias"});
    const auto dtype = c.floats({0});
    c.rank_at_least(0, 1);
    const int64_t out_features = c.int_min("out_features", 0, std::nullopt);
    const bool bias = c.bool_or("bias", true);
    Shape out = c.shape(0);
    const int64_t in_features = out.back();
    out.back() = out_features;
    c.param("weight", {out_features, in_features}, dtype);
    if (bias) c.param("bias", {out_features}, dtype);
    return {out, dtype};
}

TensorType mse_loss(Context& c) {
    c.arity(2);
    c.attributes({"reduction"});
    const auto dtype = c.floats({0, 1});
    const auto reduction = c.string_or("reduction", "mean", {"mean", "sum", "none"});
    if (c.shape(0) != c.shape(1))
        fail("input shape " + to_string(c.shape(0)) + " and target shape " + to_string(c.shape(1)) +
             " differ");
    if (reduction == "none") return {c.shape(0), dtype};
    return {{}, dtype};
}

TensorType cross_entropy(Context& c) {
    c.arity(2);
    c.attributes({"reduction", "ignore_index"});
    const auto dtype = c.floats({0});
    c.index_dtype(1);
    c.rank_is(0, 2, "input");
    c.rank_is(1, 1, "target");
    const auto reduction = c.string_or("reduction", "mean", {"mean", "sum", "none"});
    c.int_or("ignore_index", -100);
    if (c.shape(1)[0] != c.shape(0)[0])
        fail("target shape " + to_string(c.shape(1)) + " does not match the batch of input shape " +
             to_string(c.shape(0)));
    if (reduction == "none") return {{c.shape(0)[0]}, dtype};
    return {{}, dtype};
}

TensorType layer_norm(Context& c) {
    c.arity(1);
    c.attributes({"normalized_shape", "eps", "elementwise_affine", "bias"});
    const auto dtype = c.floats({0});
    Shape normalized;
    if (const auto* v = c.find("normalized_shape"); v && std::holds_alternative<int64_t>(*v))
        normalized = {std::get<int64_t>(*v)};
    else
        normalized = c.req_ints("normalized_shape");
    c.positive("eps", 1e-5);
    const bool affine = c.bool_or("elementwise_affine", true);
    const bool bias = c.bool_or("bias", true);
    if (normalized.empty()) fail("attribute 'normalized_shape' is empty");
    const auto& in = c.shape(0);
    if (normalized.size() > in.size() ||
        !std::equal(normalized.begin(), normalized.end(), in.end() - int64_t(normalized.size())))
        fail("attribute 'normalized_shape' = " + to_string(normalized) +
             " does not match the trailing dimensions of " + to_string(in));
    if (affine) {
        c.param("weight", normalized, dtype);
        if (bias) c.param("bias", normalized, dtype);
    }
    return {in, dtype};
}

TensorType batch_norm(Context& c) {
    c.arity(1);
    c.attributes({"eps", "momentum", "training", "affine"});
    const auto dtype = c.floats({0});
    c.positive("eps", 1e-5);
    const double momentum = c.double_or("momentum", 0.1);
    if (!(momentum >= 0 && momentum <= 1))
        fail("attribute 'momentum' = " + num(momentum) + " must be in [0, 1]");
    const bool training = c.bool_or("training", false);
    const bool affine = c.bool_or("affine", true);
    c.rank_at_least(0, 2);
    const auto& in = c.shape(0);
    const int64_t channels = in[1];
    if (training && product(in) != 0 && product(in) / channels == 1)
        fail("training needs more than 1 value per channel, got input shape " + to_string(in));
    if (affine) {
        c.param("weight", {channels}, dtype);
        c.param("bias", {channels}, dtype);
    }
    c.param("running_mean", {channels}, dtype);
    c.param("running_var", {channels}, dtype);
    return {in, dtype};
}

string dims_to_string(const std::vector<int64_t>& v) {
    return v.size() == 1 ? str(v[0]) : to_string(v);
}

/// conv (nd = 1) and conv2d (nd = 2); transposed when `transposed`.
TensorType convolution(Context& c, size_t nd, bool transposed) {
    c.arity(1);
    if (transposed)
        c.attributes({"out_channels", "kernel_size", "stride", "padding", "output_padding",
                      "dilation", "groups", "bias"});
    else
        c.attributes(
            {"out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias"});
    const auto dtype = c.floats({0});
    const int64_t out_channels = c.int_min("out_channels", 1, std::nullopt);
    const auto kernel = c.tuple("kernel_size", nd, 1, std::nullopt);
    const auto stride = c.tuple("stride", nd, 1, std::vector<int64_t>(nd, 1));
    const auto padding = c.tuple("padding", nd, 0, std::vector<int64_t>(nd, 0));
    const auto dilation = c.tuple("dilation", nd, 1, std::vector<int64_t>(nd, 1));
    const auto output_padding = transposed
                                    ? c.tuple("output_padding", nd, 0, std::vector<int64_t>(nd, 0))
                                    : std::vector<int64_t>(nd, 0);
    const int64_t groups = c.int_min("groups", 1, 1);
    const bool bias = c.bool_or("bias", true);
    c.rank_is(0, nd + 2);
    const auto& in = c.shape(0);
    const int64_t in_channels = in[1];
    if (in_channels % groups != 0)
        fail("input channels " + str(in_channels) + " are not divisible by groups " + str(groups));
    if (out_channels % groups != 0)
        fail("attribute 'out_channels' = " + str(out_channels) + " is not divisible by groups " +
             str(groups));
    Shape out{in[0], out_channels};
    static const char* const kAxis[2][2] = {{"length", ""}, {"height", "width"}};
    for (size_t i = 0; i < nd; ++i) {
        const int64_t size = in[2 + i];
        const int64_t span = add(mul(dilation[i], kernel[i] - 1), 1);  // dilated kernel
        int64_t o;
        if (!transposed) {
            const int64_t padded = add(size, mul(2, padding[i]));
            if (padded < span)
                fail(string("padded input ") + kAxis[nd - 1][i] + " " + str(padded) +
                     " is smaller than the dilated kernel " + str(span));
            o = (padded - span) / stride[i] + 1;
        } else {
            if (output_padding[i] >= stride[i] && output_padding[i] >= dilation[i])
                fail("attribute 'output_padding' = " + dims_to_string(output_padding) +
                     " must be smaller than the stride or the dilation");
            o = add(add(sub(mul(size - 1, stride[i]), mul(2, padding[i])), span - 1),
                    output_padding[i] + 1);
            if (o < 1)
                fail(string("output ") + kAxis[nd - 1][i] + " " + str(o) + " is too small (input " +
                     kAxis[nd - 1][i] + " " + str(size) + ")");
        }
        out.push_back(o);
    }
    Shape weight = transposed ? Shape{in_channels, out_channels / groups}
                              : Shape{out_channels, in_channels / groups};
    weight.insert(weight.end(), kernel.begin(), kernel.end());
    c.param("weight", weight, dtype);
    if (bias) c.param("bias", {out_channels}, dtype);
    return {out, dtype};
}

enum class PoolKind { max, avg, smooth_max };

/// max/avg/smooth-max pooling over nd = 1 or 2 spatial dimensions; `padded` for the _pad ops.
TensorType pooling(Context& c, size_t nd, PoolKind kind, bool padded) {
    c.arity(1);
    if (kind == PoolKind::smooth_max)
        c.attributes({"kernel_size", "stride", "temperature"});
    else if (!padded)
        c.attributes({"kernel_size", "stride"});
    else if (kind == PoolKind::avg)
        c.attributes({"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"});
    else
        c.attributes({"kernel_size", "stride", "padding", "ceil_mode"});
    const auto dtype = c.floats({0});
    const auto kernel = c.tuple("kernel_size", nd, 1, std::nullopt);
    const auto stride = c.tuple("stride", nd, 1, kernel);
    std::vector<int64_t> padding(nd, 0);
    bool ceil_mode = false;
    if (padded) {
        padding = c.tuple("padding", nd, 0, std::vector<int64_t>(nd, 0));
        ceil_mode = c.bool_or("ceil_mode", false);
        if (kind == PoolKind::avg) c.bool_or("count_include_pad", true);
        for (size_t i = 0; i < nd; ++i)
            if (padding[i] > kernel[i] / 2)
                fail("attribute 'padding' = " + dims_to_string(padding) +
                     " must be at most half the kernel size " + dims_to_string(kernel));
    }
    if (kind == PoolKind::smooth_max) c.positive("temperature", 1.0);
    c.rank_is(0, nd + 2);
    const auto& in = c.shape(0);
    Shape out{in[0], in[1]};
    static const char* const kAxis[2][2] = {{"length", ""}, {"height", "width"}};
    for (size_t i = 0; i < nd; ++i) {
        const int64_t size = add(in[2 + i], mul(2, padding[i]));
        if (size < kernel[i])
            fail(string(padded ? "padded input " : "input ") + kAxis[nd - 1][i] + " " + str(size) +
                 " is smaller than the kernel " + str(kernel[i]));
        const int64_t span = size - kernel[i];
        int64_t o = span / stride[i] + (ceil_mode && span % stride[i] != 0 ? 1 : 0) + 1;
        // PyTorch: the last window must start inside the input or the left padding.
        if (ceil_mode && mul(o - 1, stride[i]) >= in[2 + i] + padding[i]) --o;
        out.push_back(o);
    }
    return {out, dtype};
}

TensorType fft_fno(Context& c) {
    c.arity(1);
    c.attributes({"modes", "out_channels"});
    const auto dtype = c.floats({0});
    const int64_t modes = c.int_min("modes", 1, std::nullopt);
    const int64_t out_channels = c.int_min("out_channels", 1, std::nullopt);
    c.rank_is(0, 3);
    const auto& in = c.shape(0);
    if (modes > in[2] / 2 + 1)
        fail("attribute 'modes' = " + str(modes) + " exceeds L/2 + 1 = " + str(in[2] / 2 + 1) +
             " for length " + str(in[2]));
    c.param("weight_real", {in[1], out_channels, modes}, dtype);
    c.param("weight_imag", {in[1], out_channels, modes}, dtype);
    return {{in[0], out_channels, in[2]}, dtype};
}

TensorType selective_scan(Context& c) {
    c.arity(5);
    c.attributes({"delta_softplus"});
    const auto dtype = c.all_floats();
    c.bool_or("delta_softplus", false);
    c.rank_is(0, 3, "u");
    c.rank_is(1, 3, "delta");
    c.rank_is(2, 2, "A");
    c.rank_is(3, 3, "B");
    c.rank_is(4, 3, "C");
    const auto& u = c.shape(0);
    const int64_t batch = u[0], d = u[1], length = u[2];
    const int64_t n = c.shape(2)[1];
    auto expect = [&](size_t i, const char* role, const Shape& want, const char* spelled) {
        if (c.shape(i) != want)
            fail("expects parent " + std::to_string(i) + " (" + role + ") of shape " + spelled +
                 " = " + to_string(want) + ", got " + to_string(c.shape(i)));
    };
    expect(1, "delta", u, "[B, D, L]");
    expect(2, "A", {d, n}, "[D, N]");
    expect(3, "B", {batch, n, length}, "[B, N, L]");
    expect(4, "C", {batch, n, length}, "[B, N, L]");
    return {u, dtype};
}

TensorType attention(Context& c) {
    c.arity_between(3, 4);
    c.attributes({"is_causal", "scale"});
    const auto dtype = c.floats({0, 1, 2});
    const bool causal = c.bool_or("is_causal", false);
    if (auto scale = c.opt_double("scale"); scale && !std::isfinite(*scale))
        fail("attribute 'scale' must be finite");
    c.rank_at_least(0, 2, "query");
    c.rank_at_least(1, 2, "key");
    c.rank_at_least(2, 2, "value");
    const auto& q = c.shape(0);
    const auto& k = c.shape(1);
    const auto& v = c.shape(2);
    if (k.size() != q.size() || v.size() != q.size() ||
        !std::equal(q.begin(), q.end() - 2, k.begin()) ||
        !std::equal(q.begin(), q.end() - 2, v.begin()))
        fail("query, key and value must have the same batch dimensions: " + to_string(q) + ", " +
             to_string(k) + ", " + to_string(v));
    const size_t r = q.size();
    if (q[r - 1] != k[r - 1])
        fail("query embedding " + str(q[r - 1]) + " differs from key embedding " + str(k[r - 1]) +
             ": " + to_string(q) + " vs " + to_string(k));
    if (k[r - 2] != v[r - 2])
        fail("key length " + str(k[r - 2]) + " differs from value length " + str(v[r - 2]) + ": " +
             to_string(k) + " vs " + to_string(v));
    Shape scores(q.begin(), q.end() - 1);
    scores.push_back(k[r - 2]);  // [..., L, S]
    if (c.count() == 4) {
        if (causal) fail("attribute 'is_causal' = true cannot be combined with a mask parent");
        const auto mask_dtype = c.in(3).dtype;
        if (mask_dtype != DType::boolean && mask_dtype != dtype)
            fail("parent 3 (mask) has dtype " + string(to_string(mask_dtype)) +
                 "; expected bool or the query's " + string(to_string(dtype)));
        Shape b;
        try {
            b = broadcast(c.shape(3), scores);
        } catch (const Error&) {
        }
        if (b != scores)
            fail("parent 3 (mask) of shape " + to_string(c.shape(3)) +
                 " does not broadcast to the attention scores " + to_string(scores));
    }
    Shape out(q.begin(), q.end() - 1);
    out.push_back(v[r - 1]);
    return {out, dtype};
}

// ---- ops for ONNX import ----

/// Parents `which` broadcast together (NumPy rules, left to right).
Shape broadcast_all(const Context& c, std::initializer_list<size_t> which) {
    Shape out;
    for (auto i : which) out = broadcast(out, c.shape(i));
    return out;
}

TensorType where(Context& c) {
    c.arity(3);
    c.attributes({});
    if (c.in(0).dtype != DType::boolean)
        fail(c.parent_label(0, "condition") + " has dtype " + string(to_string(c.in(0).dtype)) +
             "; expected bool");
    const auto dtype = c.same_dtype({1, 2});
    return {broadcast_all(c, {0, 1, 2}), dtype};
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

TensorType gather(Context& c) {
    c.arity(2);
    c.attributes({"axis"});
    c.rank_at_least(0, 1);
    c.index_dtype(1);
    const auto& data = c.shape(0);
    const auto axis = size_t(axis_for("axis", c.int_or("axis", 0), data.size()));
    Shape out(data.begin(), data.begin() + std::ptrdiff_t(axis));
    out.insert(out.end(), c.shape(1).begin(), c.shape(1).end());
    out.insert(out.end(), data.begin() + std::ptrdiff_t(axis) + 1, data.end());
    product(out);
    return {out, c.in(0).dtype};
}

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
    if (dtype == DType::int64 && (value != std::trunc(value) || std::fabs(value) > 9.0e18))
        fail("attribute 'value' = " + num(value) + " is not an int64 value (the input is int64)");
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

TensorType arg_reduce(Context& c) {
    c.arity(1);
    c.attributes({"axis", "keepdims", "select_last_index"});
    const DType dtype = c.in(0).dtype;
    if (dtype == DType::boolean) fail("parent 0 has dtype bool; expected float32, float64 or int64");
    const auto& in = c.shape(0);
    const auto axis = size_t(axis_for("axis", c.int_or("axis", 0), in.size()));
    const bool keep = c.bool_or("keepdims", true);
    c.bool_or("select_last_index", false);
    if (!in.empty() && in[axis] == 0)
        fail("axis " + str(int64_t(axis)) + " has size 0 (input shape " + to_string(in) +
             "); there is no element to pick");
    Shape out;
    for (size_t i = 0; i < in.size(); ++i) {
        if (i != axis) out.push_back(in[i]);
        else if (keep) out.push_back(1);
    }
    return {out, DType::int64};
}

/// A unary float op whose attributes are optional finite numbers (`nonzero`: and not 0).
TensorType unary_with_numbers(Context& c, std::initializer_list<const char*> names,
                              bool nonzero = false) {
    c.arity(1);
    c.attributes(names);
    for (auto name : names)
        if (auto v = c.opt_double(name); v && (!std::isfinite(*v) || (nonzero && *v == 0)))
            fail("attribute " + quoted(name) + " = " + num(*v) + " must be a finite " +
                 (nonzero ? "nonzero " : "") + "number");
    return {c.shape(0), c.floats({0})};
}

/// Comparisons (`bool_only` false: any one dtype) and logical ops (bool parents): broadcast,
/// bool result.
TensorType predicate(Context& c, size_t parents, bool bool_only) {
    c.arity(parents);
    c.attributes({});
    for (size_t i = 0; bool_only && i < parents; ++i)
        if (c.in(i).dtype != DType::boolean)
            fail(c.parent_label(i) + " has dtype " + string(to_string(c.in(i).dtype)) +
                 "; expected bool");
    if (parents == 1) return {c.shape(0), DType::boolean};
    c.same_dtype({0, 1});
    return {broadcast(c.shape(0), c.shape(1)), DType::boolean};
}

TensorType cast(Context& c) {
    c.arity(1);
    c.attributes({"to"});
    if (!c.find("to")) Context::missing("to", "string");
    return {c.shape(0), parse<DType>(c.string_or("to", "", {"float32", "float64", "int64", "bool"}))};
}

TensorType cumsum(Context& c) {
    c.arity(1);
    c.attributes({"axis", "exclusive", "reverse"});
    const DType dtype = c.in(0).dtype;
    if (dtype == DType::boolean) fail("parent 0 has dtype bool; expected float32, float64 or int64");
    axis_for("axis", c.req_int("axis"), c.rank(0));
    c.bool_or("exclusive", false);
    c.bool_or("reverse", false);
    return c.in(0);
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

TensorType infer(Context& c) {
    const Node& node = c.node();
    for (size_t i = 0; i < c.count(); ++i)
        for (auto d : c.shape(i))
            if (d < 0)
                fail("parent " + std::to_string(i) + " has a negative dimension in shape " +
                     to_string(c.shape(i)));
    switch (node.kind) {
        case NodeKind::input:
            c.arity(0);
            c.attributes({});
            return {node.shape, node.dtype};
        case NodeKind::constant:
            c.arity(0);
            c.attributes({});
            c.param("", node.shape, node.dtype);
            return {node.shape, node.dtype};
        case NodeKind::detach:
            c.arity(1);
            c.attributes({});
            return c.in(0);
        case NodeKind::op: break;
    }
    if (!node.op) fail("op node has no op");

    switch (*node.op) {
        case BackendOp::rand_uniform: {
            c.arity(0);
            c.attributes({"shape", "seed", "dtype"});
            const auto shape = c.req_shape("shape");
            c.int_or("seed", 0);
            const auto dtype = c.string_or("dtype", "float32", {"float32", "float64"});
            const auto type = dtype == "float64" ? DType::float64 : DType::float32;
            byte_size(shape, type);  // the output is allocated from this untrusted shape
            return {shape, type};
        }
        case BackendOp::bernoulli_mask: {
            c.arity(1);
            c.attributes({"seed"});
            c.int_or("seed", 0);
            return {c.shape(0), c.floats({0})};
        }
        case BackendOp::add:
        case BackendOp::sub:
        case BackendOp::mul:
        case BackendOp::max:
        case BackendOp::min: return binary_broadcast(c);
        case BackendOp::scale: {
            c.arity(1);
            c.attributes({"factor"});
            if (!c.opt_double("factor")) Context::missing("factor", "number");
            return {c.shape(0), c.floats({0})};
        }
        case BackendOp::clamp: {
            c.arity(1);
            c.attributes({"min", "max"});
            const auto lo = c.opt_double("min");
            const auto hi = c.opt_double("max");
            if (!lo && !hi) fail("needs attribute 'min' or 'max' (or both)");
            return {c.shape(0), c.floats({0})};
        }
        case BackendOp::abs:
        case BackendOp::sqrt:
        case BackendOp::relu:
        case BackendOp::sigmoid:
        case BackendOp::tanh:
        case BackendOp::exp:
        case BackendOp::log:
        case BackendOp::sin:
        case BackendOp::cos:
        case BackendOp::inv: return unary_float(c);
        case BackendOp::gelu: {
            c.arity(1);
            c.attributes({"approximate"});
            c.string_or("approximate", "none", {"none", "tanh"});
            return {c.shape(0), c.floats({0})};
        }
        case BackendOp::softplus: {
            c.arity(1);
            c.attributes({"beta", "threshold"});
            c.positive("beta", 1.0);
            c.double_or("threshold", 20.0);
            return {c.shape(0), c.floats({0})};
        }
        case BackendOp::safe_log: {
            c.arity(1);
            c.attributes({"eps"});
            c.positive("eps", 1e-12);
            return {c.shape(0), c.floats({0})};
        }
        case BackendOp::log_softmax:
        case BackendOp::softmax: return softmax_like(c);
        case BackendOp::sum: {
            c.arity(1);
            c.attributes({});
            return {{}, c.floats({0})};
        }
        case BackendOp::reduce_sum:
        case BackendOp::reduce_mean: return reduce(c);
        case BackendOp::flatten: return flatten(c);
        case BackendOp::reshape: return reshape(c);
        case BackendOp::permute: return permute(c);
        case BackendOp::transpose2d: return fixed_permutation(c, 2, {1, 0});
        case BackendOp::swapAdjacentAtDepth: return swap_adjacent(c);
        case BackendOp::transpose3d_first_to_last: return fixed_permutation(c, 3, {1, 2, 0});
        case BackendOp::transpose3d_last_to_first: return fixed_permutation(c, 3, {2, 0, 1});
        case BackendOp::transpose3d_last_two: return fixed_permutation(c, 3, {0, 2, 1});
        case BackendOp::broadcastTo: return broadcast_to(c);
        case BackendOp::concat_vectors: return concat_vectors(c);
        case BackendOp::concat_leading_axis: return concat_leading(c);
        case BackendOp::slice_leading_axis_range: return slice_leading(c);
        case BackendOp::gather_scalar: {
            c.arity(1);
            c.attributes({"index"});
            c.rank_is(0, 1);
            checked_index("index", c.req_int("index"), c.shape(0)[0]);
            return {{}, c.in(0).dtype};
        }
        case BackendOp::gather_scalar_nat: {
            c.arity(2);
            c.attributes({});
            c.rank_is(0, 1);
            c.index_dtype(1);
            c.rank_is(1, 0, "index");
            return {{}, c.in(0).dtype};
        }
        case BackendOp::gather_row: {
            c.arity(1);
            c.attributes({"index"});
            c.rank_is(0, 2);
            checked_index("index", c.req_int("index"), c.shape(0)[0]);
            return {{c.shape(0)[1]}, c.in(0).dtype};
        }
        case BackendOp::gather_vec_nat: {
            c.arity(2);
            c.attributes({});
            c.rank_is(0, 1);
            c.index_dtype(1);
            c.rank_is(1, 1, "index");
            return {{c.shape(1)[0]}, c.in(0).dtype};
        }
        case BackendOp::gather_rows_nat: {
            c.arity(2);
            c.attributes({});
            c.rank_at_least(0, 1);
            c.index_dtype(1);
            c.rank_is(1, 1, "index");
            Shape out = c.shape(0);
            out[0] = c.shape(1)[0];
            return {out, c.in(0).dtype};
        }
        case BackendOp::scatter_add_vec:
        case BackendOp::scatter_add_row: {
            const bool rows = *node.op == BackendOp::scatter_add_row;
            c.arity(3);
            c.attributes({});
            const auto dtype = c.floats({0, 2});
            c.index_dtype(1);
            c.rank_is(0, rows ? 2 : 1, "base");
            c.rank_is(1, 1, "index");
            c.rank_is(2, rows ? 2 : 1, "source");
            Shape want{c.shape(1)[0]};
            if (rows) want.push_back(c.shape(0)[1]);
            if (c.shape(2) != want)
                fail("expects parent 2 (source) of shape " + to_string(want) + " (index length" +
                     (rows ? ", base columns" : "") + "), got " + to_string(c.shape(2)));
            return {c.shape(0), dtype};
        }
        case BackendOp::matmul: return matmul(c);
        case BackendOp::bmm: return bmm(c);
        case BackendOp::linear: return linear(c);
        case BackendOp::mse_loss: return mse_loss(c);
        case BackendOp::layer_norm: return layer_norm(c);
        case BackendOp::batch_norm:
        case BackendOp::batchnorm_channel_first: return batch_norm(c);
        case BackendOp::conv: return convolution(c, 1, false);
        case BackendOp::conv2d: return convolution(c, 2, false);
        case BackendOp::conv_transpose: return convolution(c, 1, true);
        case BackendOp::conv_transpose2d: return convolution(c, 2, true);
        case BackendOp::max_pool: return pooling(c, 1, PoolKind::max, false);
        case BackendOp::max_pool2d: return pooling(c, 2, PoolKind::max, false);
        case BackendOp::max_pool2d_pad: return pooling(c, 2, PoolKind::max, true);
        case BackendOp::smooth_max_pool: return pooling(c, 1, PoolKind::smooth_max, false);
        case BackendOp::smooth_max_pool2d: return pooling(c, 2, PoolKind::smooth_max, false);
        case BackendOp::avg_pool: return pooling(c, 1, PoolKind::avg, false);
        case BackendOp::avg_pool2d: return pooling(c, 2, PoolKind::avg, false);
        case BackendOp::avg_pool2d_pad: return pooling(c, 2, PoolKind::avg, true);
        case BackendOp::fft_fno: return fft_fno(c);
        case BackendOp::selective_scan: return selective_scan(c);
        case BackendOp::scaled_dot_product_attention: return attention(c);
        case BackendOp::div:
        case BackendOp::pow: return binary_broadcast(c);
        case BackendOp::neg:
        case BackendOp::erf: return unary_float(c);
        case BackendOp::where: return where(c);
        case BackendOp::concat: return concat(c);
        case BackendOp::gather: return gather(c);
        case BackendOp::slice: return slice(c);
        case BackendOp::pad: return pad(c);
        case BackendOp::reduce_max:
        case BackendOp::reduce_min:
        case BackendOp::reduce_prod: return reduce(c);
        case BackendOp::argmax:
        case BackendOp::argmin: return arg_reduce(c);
        case BackendOp::floor:
        case BackendOp::ceil:
        case BackendOp::sign:
        case BackendOp::tan:
        case BackendOp::asin:
        case BackendOp::acos:
        case BackendOp::atan:
        case BackendOp::sinh:
        case BackendOp::cosh:
        case BackendOp::asinh:
        case BackendOp::acosh:
        case BackendOp::atanh:
        case BackendOp::hardswish:
        case BackendOp::softsign:
        case BackendOp::mish: return unary_float(c);
        case BackendOp::leaky_relu: return unary_with_numbers(c, {"negative_slope"});
        case BackendOp::elu:
        case BackendOp::thresholded_relu: return unary_with_numbers(c, {"alpha"});
        case BackendOp::celu: return unary_with_numbers(c, {"alpha"}, true);
        case BackendOp::selu: return unary_with_numbers(c, {"alpha", "gamma"});
        case BackendOp::hardsigmoid: return unary_with_numbers(c, {"alpha", "beta"});
        case BackendOp::equal:
        case BackendOp::less:
        case BackendOp::less_equal:
        case BackendOp::greater:
        case BackendOp::greater_equal: return predicate(c, 2, false);
        case BackendOp::logical_not: return predicate(c, 1, true);
        case BackendOp::logical_and:
        case BackendOp::logical_or:
        case BackendOp::logical_xor: return predicate(c, 2, true);
        case BackendOp::cast: return cast(c);
        case BackendOp::cumsum: return cumsum(c);
        case BackendOp::tile: return tile(c);
        case BackendOp::triu:
        case BackendOp::tril: return triangle(c);
        case BackendOp::cross_entropy: return cross_entropy(c);
        case BackendOp::sgd:
        case BackendOp::adam:
            fail(node.op_spelling() + " is an optimizer step (it updates a parameter and its state "
                 "buffers in place, several outputs); capsule::Optimizer runs it, a graph cannot "
                 "hold it");
    }
    fail("invalid op value " + std::to_string(static_cast<int>(*node.op)));
}

}  // namespace

TensorType infer_type(const Node& node, const std::vector<TensorType>& parents) {
    Context context(node, parents, nullptr);
    return infer(context);
}

std::vector<ParameterSpec> parameter_specs(const Node& node,
                                           const std::vector<TensorType>& parents) {
    std::vector<ParameterSpec> params;
    Context context(node, parents, &params);
    infer(context);
    return params;
}

}  // namespace capsule
