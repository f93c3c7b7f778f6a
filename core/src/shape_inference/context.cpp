// The Context every op family reads its node through, and the checked shape arithmetic they
// share. Every message raised here is part of the op's documented errors (docs/ops.md).
#include "context.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "capsule/shape_math.hpp"

namespace capsule::shape_inference {

void fail(const string& reason) { throw Error(ErrorCode::input, reason); }

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
int64_t product(const Shape& shape, size_t begin, size_t end) {
    end = std::min(end, shape.size());
    begin = std::min(begin, end);
    const auto dims = std::span<const int64_t>(shape).subspan(begin, end - begin);
    if (auto n = try_element_count(dims)) return *n;
    fail("integer overflow in shape arithmetic: the product of " + shape_text(dims) +
         " exceeds 2^63-1");
}

string str(int64_t v) { return std::to_string(v); }
string quoted(const string& s) { return "'" + s + "'"; }

string num(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

namespace {

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

/// The floating-point dtypes (*F* in docs/ops.md): float32, float64 and ABI 1.1's float16 and
/// bfloat16. Which of them a node runs on is its capsule's mask.
bool is_float(DType d) {
    return d == DType::float32 || d == DType::float64 || d == DType::float16 || d == DType::bfloat16;
}

string parents_word(size_t n) {
    if (n == 0) return "no parents";
    return std::to_string(n) + (n == 1 ? " parent" : " parents");
}

}  // namespace

Shape broadcast(const Shape& a, const Shape& b) {
    Shape out(std::max(a.size(), b.size()));
    if (const auto bad = broadcast_into(a, b, out); bad >= 0)
        fail("shapes " + to_string(a) + " and " + to_string(b) + " do not broadcast (" +
             str(broadcast_dim(a, out.size(), bad)) + " vs " +
             str(broadcast_dim(b, out.size(), bad)) + ")");
    return out;
}

int64_t axis_for(const char* name, int64_t axis, size_t rank) {
    if (const auto a = try_normalize_axis(axis, std::max<int64_t>(int64_t(rank), 1))) return *a;
    fail("attribute " + quoted(name) + " = " + str(axis) + " out of range for rank " +
         str(int64_t(rank)));
}

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

// ---- arity ----

void Context::arity(size_t n) const {
    if (in_.size() != n) fail("expects " + parents_word(n) + ", got " + str(int64_t(in_.size())));
}
void Context::arity_at_least(size_t n) const {
    if (in_.size() < n)
        fail("expects at least " + parents_word(n) + ", got " + str(int64_t(in_.size())));
}
void Context::arity_between(size_t lo, size_t hi) const {
    if (in_.size() < lo || in_.size() > hi)
        fail("expects " + std::to_string(lo) + " or " + std::to_string(hi) + " parents, got " +
             str(int64_t(in_.size())));
}

// ---- attributes ----

void Context::attributes(std::initializer_list<const char*> names) {
    allowed_.assign(names.begin(), names.end());
    for (const auto& [key, value] : node_.attrs) {
        if (std::find(allowed_.begin(), allowed_.end(), key) != allowed_.end()) continue;
        if (allowed_.empty()) fail("unknown attribute " + quoted(key) + " (this op takes none)");
        string list;
        for (const auto& a : allowed_) list += (list.empty() ? "" : ", ") + a;
        fail("unknown attribute " + quoted(key) + "; valid: " + list);
    }
}
const AttrValue* Context::find(const char* name) const {
    if (std::find(allowed_.begin(), allowed_.end(), name) == allowed_.end())
        throw std::logic_error(string("shape inference reads undeclared attribute ") + name);
    auto it = node_.attrs.find(name);
    return it == node_.attrs.end() ? nullptr : &it->second;
}
void Context::bad(const char* name, const string& expected, const AttrValue& v) {
    fail("attribute " + quoted(name) + " must be " + expected + ", got " + attr_to_string(v));
}
void Context::missing(const char* name, const string& type) {
    fail("missing attribute " + quoted(name) + " (" + type + ")");
}

std::optional<int64_t> Context::opt_int(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (auto p = std::get_if<int64_t>(v)) return *p;
    bad(name, "an integer", *v);
}
int64_t Context::int_or(const char* name, int64_t fallback) const {
    return opt_int(name).value_or(fallback);
}
int64_t Context::req_int(const char* name) const {
    auto v = opt_int(name);
    if (!v) missing(name, "integer");
    return *v;
}
int64_t Context::int_min(const char* name, int64_t min, std::optional<int64_t> fallback) const {
    auto v = opt_int(name);
    if (!v && !fallback) missing(name, "integer");
    const int64_t x = v ? *v : *fallback;
    if (x < min) fail("attribute " + quoted(name) + " = " + str(x) + " must be >= " + str(min));
    return x;
}

std::optional<double> Context::opt_double(const char* name) const {
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
double Context::double_or(const char* name, double fallback) const {
    return opt_double(name).value_or(fallback);
}
double Context::positive(const char* name, double fallback) const {
    const double x = double_or(name, fallback);
    if (!(x > 0) || !std::isfinite(x))
        fail("attribute " + quoted(name) + " = " + num(x) + " must be a finite number > 0");
    return x;
}

bool Context::bool_or(const char* name, bool fallback) const {
    const auto* v = find(name);
    if (!v) return fallback;
    if (auto p = std::get_if<bool>(v)) return *p;
    bad(name, "true or false", *v);
}

string Context::string_or(const char* name, const string& fallback,
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

std::optional<std::vector<int64_t>> Context::opt_ints(const char* name) const {
    const auto* v = find(name);
    if (!v) return std::nullopt;
    if (auto p = std::get_if<std::vector<int64_t>>(v)) return *p;
    bad(name, "a list of integers", *v);
}
std::vector<int64_t> Context::req_ints(const char* name) const {
    auto v = opt_ints(name);
    if (!v) missing(name, "list of integers");
    return *v;
}
Shape Context::req_shape(const char* name) const {
    auto v = req_ints(name);
    for (auto d : v)
        if (d < 0) fail("attribute " + quoted(name) + " = " + to_string(v) + " has a negative dimension");
    return v;
}

std::vector<int64_t> Context::tuple(const char* name, size_t n, int64_t min,
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
        bad(name, n == 1 ? "an integer" : "an integer or a list of " + std::to_string(n) + " integers",
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

string Context::parent_label(size_t i, const char* role) const {
    return "parent " + std::to_string(i) + (role ? string(" (") + role + ")" : string());
}
void Context::keep_dtype(std::optional<DType>& dtype, size_t& first, size_t i) const {
    if (!dtype) {
        dtype = in_[i].dtype;
        first = i;
    } else if (*dtype != in_[i].dtype) {
        fail("parents have different dtypes: parent " + std::to_string(first) + " is " +
             string(to_string(*dtype)) + ", parent " + std::to_string(i) + " is " +
             string(to_string(in_[i].dtype)));
    }
}
DType Context::floats(std::initializer_list<size_t> which) const {
    std::optional<DType> dtype;
    size_t first = 0;
    for (auto i : which) {
        if (!is_float(in_[i].dtype))
            fail(parent_label(i) + " has dtype " + string(to_string(in_[i].dtype)) +
                 "; expected a floating-point dtype (float32, float64, float16, bfloat16)");
        keep_dtype(dtype, first, i);
    }
    return dtype.value_or(DType::float32);
}
DType Context::all_floats() const {
    std::optional<DType> dtype;
    for (size_t i = 0; i < in_.size(); ++i) dtype = floats({0, i});
    return dtype.value_or(DType::float32);
}
DType Context::same_dtype(std::initializer_list<size_t> which) const {
    std::optional<DType> dtype;
    size_t first = 0;
    for (auto i : which) keep_dtype(dtype, first, i);
    return dtype.value_or(DType::float32);
}
void Context::index_dtype(size_t i) const {
    if (in_[i].dtype != DType::int64)
        fail(parent_label(i, "index") + " has dtype " + string(to_string(in_[i].dtype)) +
             "; expected int64");
}

// ---- ranks ----

void Context::rank_is(size_t i, size_t r, const char* role) const {
    if (rank(i) != r)
        fail("expects " + parent_label(i, role) + " of rank " + std::to_string(r) + ", got shape " +
             to_string(shape(i)));
}
void Context::rank_at_least(size_t i, size_t r, const char* role) const {
    if (rank(i) < r)
        fail("expects " + parent_label(i, role) + " of rank >= " + std::to_string(r) +
             ", got shape " + to_string(shape(i)));
}

// ---- parameters ----

void Context::param(const string& suffix, Shape shape, DType dtype) const {
    if (!params_) return;
    const auto prefix = node_.parameter_prefix();
    params_->push_back({suffix.empty() ? prefix : prefix + "." + suffix, {std::move(shape), dtype}});
}

}  // namespace capsule::shape_inference
