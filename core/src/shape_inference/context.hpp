// Shared by the shape inference files: the per-node Context (parents' types, attribute readers
// that reject unknown names, the parameter list being collected), checked shape arithmetic, and
// one inference function per op family. infer.cpp dispatches to them; each family's file says
// which ops it covers. The attribute conventions and shape rules are documented op by op in
// docs/ops.md; keep the two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "capsule/ir.hpp"

namespace capsule::shape_inference {

using std::int64_t;
using std::size_t;
using std::string;

/// Raises Error(input) with `reason`; infer_type's callers prefix the node.
[[noreturn]] void fail(const string& reason);

// Shapes come from untrusted graphs: every sum and product is checked.
int64_t add(int64_t a, int64_t b);
int64_t sub(int64_t a, int64_t b);
int64_t mul(int64_t a, int64_t b);
/// Product of the dimensions [begin, end); fails on overflow.
int64_t product(const Shape& shape, size_t begin = 0, size_t end = SIZE_MAX);

string str(int64_t v);
string quoted(const string& s);
/// A number as a person would write it: 1e-12, 0.5, 3.
string num(double v);

/// Broadcasts two shapes NumPy-style.
Shape broadcast(const Shape& a, const Shape& b);
/// Normalises a possibly negative axis; `rank` 0 is treated as rank 1 (as PyTorch does).
int64_t axis_for(const char* name, int64_t axis, size_t rank);
/// Normalises a list of distinct axes.
std::vector<int64_t> axes_for(const char* name, const std::vector<int64_t>& axes, size_t rank);

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
    void arity(size_t n) const;
    void arity_at_least(size_t n) const;
    void arity_between(size_t lo, size_t hi) const;

    // ---- attributes ----
    /// Declares the attributes this op takes; any other attribute is an error.
    void attributes(std::initializer_list<const char*> names);
    const AttrValue* find(const char* name) const;
    [[noreturn]] static void missing(const char* name, const string& type);

    std::optional<int64_t> opt_int(const char* name) const;
    int64_t int_or(const char* name, int64_t fallback) const;
    int64_t req_int(const char* name) const;
    /// An integer attribute that must be at least `min`.
    int64_t int_min(const char* name, int64_t min, std::optional<int64_t> fallback) const;
    std::optional<double> opt_double(const char* name) const;
    double double_or(const char* name, double fallback) const;
    /// A finite number > 0.
    double positive(const char* name, double fallback) const;
    bool bool_or(const char* name, bool fallback) const;
    string string_or(const char* name, const string& fallback,
                     std::initializer_list<const char*> choices) const;
    std::optional<std::vector<int64_t>> opt_ints(const char* name) const;
    std::vector<int64_t> req_ints(const char* name) const;
    /// A shape given as a list of integers, every entry >= 0.
    Shape req_shape(const char* name) const;
    /// An integer, or a list of `n` integers, each >= `min`. For `n` spatial dimensions.
    std::vector<int64_t> tuple(const char* name, size_t n, int64_t min,
                               std::optional<std::vector<int64_t>> fallback) const;

    // ---- dtypes ----
    string parent_label(size_t i, const char* role = nullptr) const;
    /// Parents `which` must be float32 or float64, all the same; returns that dtype.
    DType floats(std::initializer_list<size_t> which) const;
    /// Every parent must be a float tensor of one dtype.
    DType all_floats() const;
    /// Every parent in `which` has the same dtype (any dtype); returns it.
    DType same_dtype(std::initializer_list<size_t> which) const;
    void index_dtype(size_t i) const;

    // ---- ranks ----
    void rank_is(size_t i, size_t r, const char* role = nullptr) const;
    void rank_at_least(size_t i, size_t r, const char* role = nullptr) const;

    // ---- parameters ----
    void param(const string& suffix, Shape shape, DType dtype) const;

private:
    [[noreturn]] static void bad(const char* name, const string& expected, const AttrValue& v);
    /// Records parent `i`'s dtype as the first seen (`first`), or fails when it differs from it.
    void keep_dtype(std::optional<DType>& dtype, size_t& first, size_t i) const;

    const Node& node_;
    const std::vector<TensorType>& in_;
    std::vector<ParameterSpec>* params_;
    std::vector<string> allowed_;
};

// ---- op families, one file each ----

// elementwise.cpp
TensorType rand_uniform(Context& c);
TensorType bernoulli_mask(Context& c);
TensorType unary_float(Context& c);
/// One parent of any dtype but bool (abs, neg, sign), kept by the output.
TensorType unary_numeric(Context& c);
TensorType binary_broadcast(Context& c);
/// binary_broadcast for ops defined on int64 too (add, sub, mul, max, min): the parents share
/// one dtype, float32, float64 or int64.
TensorType binary_broadcast_numeric(Context& c);
TensorType scale(Context& c);
TensorType clamp(Context& c);
TensorType gelu(Context& c);
TensorType softplus(Context& c);
TensorType safe_log(Context& c);
/// A unary float op whose attributes are optional finite numbers (`nonzero`: and not 0).
TensorType unary_with_numbers(Context& c, std::initializer_list<const char*> names,
                              bool nonzero = false);
/// Comparisons (`bool_only` false: any one dtype) and logical ops (bool parents): broadcast,
/// bool result.
TensorType predicate(Context& c, size_t parents, bool bool_only);
TensorType where(Context& c);
/// mod: two parents of one dtype (float or int64), broadcast; the `fmod` flag.
TensorType mod(Context& c);
/// is_inf: a float parent, bool result of its shape; the two detect_* flags.
TensorType is_inf(Context& c);
TensorType cast(Context& c);

// reduction.cpp
TensorType softmax_like(Context& c);
TensorType sum(Context& c);
TensorType reduce(Context& c);
TensorType arg_reduce(Context& c);
TensorType top_k(Context& c);
TensorType non_max_suppression(Context& c);
TensorType non_zero(Context& c);
TensorType cumsum(Context& c);

// shape_ops.cpp
TensorType flatten(Context& c);
TensorType reshape(Context& c);
TensorType permute(Context& c);
TensorType fixed_permutation(Context& c, size_t rank, std::initializer_list<size_t> order);
TensorType swap_adjacent(Context& c);
TensorType broadcast_to(Context& c);
TensorType concat_vectors(Context& c);
TensorType concat_leading(Context& c);
TensorType concat(Context& c);
TensorType slice_leading(Context& c);
TensorType slice(Context& c);
TensorType pad(Context& c);
TensorType tile(Context& c);
TensorType triangle(Context& c);

// indexing.cpp
/// gather_scalar (`data_rank` 1) and gather_row (2): the 'index' attribute picks an element or
/// a row.
TensorType gather_by_attribute(Context& c, size_t data_rank);
/// gather_scalar_nat (`index_rank` 0) and gather_vec_nat (1): the int64 index parent picks
/// elements of a vector, the result has its shape.
TensorType gather_by_parent(Context& c, size_t index_rank);
TensorType gather_rows_nat(Context& c);
/// scatter_add_vec (`rows` false) and scatter_add_row.
TensorType scatter_add(Context& c, bool rows);
TensorType gather(Context& c);
TensorType gather_elements(Context& c);
TensorType scatter_elements(Context& c);

// linalg.cpp
TensorType matmul(Context& c);
TensorType bmm(Context& c);
TensorType det(Context& c);
TensorType linear(Context& c);

// nn.cpp
TensorType mse_loss(Context& c);
TensorType cross_entropy(Context& c);
TensorType layer_norm(Context& c);
TensorType batch_norm(Context& c);
TensorType fft_fno(Context& c);
TensorType selective_scan(Context& c);
TensorType attention(Context& c);

// convolution.cpp
/// conv (nd = 1) and conv2d (nd = 2); transposed when `transposed`.
TensorType convolution(Context& c, size_t nd, bool transposed);
enum class PoolKind { max, avg, smooth_max };
/// max/avg/smooth-max pooling over nd = 1 or 2 spatial dimensions; `padded` for the _pad ops.
TensorType pooling(Context& c, size_t nd, PoolKind kind, bool padded);

}  // namespace capsule::shape_inference
