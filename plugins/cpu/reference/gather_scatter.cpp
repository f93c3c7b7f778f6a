// Reference kernels of the gather and scatter ops.
//
//   gather_scalar(x[n]; index)          x[index]                   index attribute, may be negative
//   gather_scalar_nat(x[n], i[])        x[i]                       int64 index tensor, 0 <= i < n
//   gather_row(x[n, m]; index)          x[index, :]                index attribute, may be negative
//   gather_vec_nat(x[n], i[k])          index_select(x, 0, i)      0 <= i[j] < n
//   gather_rows_nat(x[n, ...], i[k])    index_select(x, 0, i)      0 <= i[j] < n
//   scatter_add_vec(b[n], i[k], s[k])   index_add(b, 0, i, s)      0 <= i[j] < n, float only
//   scatter_add_row(b[n, m], i[k], s[k, m])  index_add(b, 0, i, s)
//   gather(data, i[...]; axis)        numpy.take(data, i, axis)  -n <= i < n along axis (ONNX Gather)
//
// Index attributes follow Python indexing (-n <= index < n). Index tensors ("nat": natural
// numbers) must hold 0 <= i < n, as torch.index_select / index_add require; a negative or too
// large index is refused with a message naming it, and nothing is read or written out of bounds.
// Gathers move elements and work for every dtype; their backward (and every scatter) needs a float
// dtype. Gradients of repeated indices accumulate. Index inputs get no gradient.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {
namespace {

using namespace ew;
using plugin::dispatch_float;

/// A Python-style index attribute, normalised into [0, n).
int64_t attr_index(const plugin::Attributes& attrs, int64_t n, const char* op) {
    require(attrs.has("index"),
            [&] { return std::string(op) + ": missing attribute 'index' (integer)"; });
    const int64_t i = attrs.get_int("index", 0);
    require(i >= -n && i < n, [&] {
        return std::string(op) + ": attribute 'index' = " + std::to_string(i) +
               " out of range for length " + std::to_string(n);
    });
    return i < 0 ? i + n : i;
}

/// Validates an int64 index tensor of rank `rank` against length `n`; returns its data.
const int64_t* index_tensor(const Tensor& idx, int rank, int64_t n, const char* op) {
    check_view(idx, {op, ": index (input 1)"}, CAPSULE_DTYPE_INT64);
    require(idx.rank() == rank, [&] {
        return std::string(op) + ": index (input 1) must have rank " + std::to_string(rank) +
               ", got shape " + shape_string(idx.shape());
    });
    const int64_t* ip = idx.data<const int64_t>();
    const int64_t k = idx.numel();
    for (int64_t j = 0; j < k; ++j)
        if (!(ip[j] >= 0 && ip[j] < n)) [[unlikely]]
            fail(CAPSULE_ERROR_INVALID_DATA, std::string(op) + ": index " + std::to_string(ip[j]) +
                 (rank == 0 ? std::string() : " at position " + std::to_string(j)) +
                 " is out of range for length " + std::to_string(n) +
                 (n > 0 ? " (valid: 0.." + std::to_string(n - 1) + ")" : std::string()));
    return ip;
}

void check_x(const Tensor& x, int rank, const char* op, bool at_least = false) {
    check_view(x, {op, ": input 0"});
    require(at_least ? x.rank() >= rank : x.rank() == rank, [&] {
        return std::string(op) + ": input 0 must have rank " + (at_least ? ">= " : "") +
               std::to_string(rank) + ", got shape " + shape_string(x.shape());
    });
}

int64_t row_size(const Tensor& x) {
    int64_t r = 1;
    for (int i = 1; i < x.rank(); ++i) r *= x.dim(i);
    return r;
}

/// Forward of the gathers: copies rows `rows[j]` (each `row` elements) of x to output row j.
void gather_rows(const Tensor& x, const Tensor& y, const int64_t* rows, int64_t k, int64_t row) {
    const std::size_t bytes = static_cast<std::size_t>(row) * element_size(x.dtype());
    if (bytes == 0) return;
    const char* src = static_cast<const char*>(x.view->data);
    char* dst = static_cast<char*>(y.view->data);
    for (int64_t j = 0; j < k; ++j)
        std::memcpy(dst + static_cast<std::size_t>(j) * bytes,
                    src + static_cast<std::size_t>(rows[j]) * bytes, bytes);
}

/// Backward of the gathers: gx = 0, then gx[rows[j]] += g[j] (row-wise).
void scatter_rows_grad(const Tensor& gx, const Tensor& g, const int64_t* rows, int64_t k,
                       int64_t row) {
    dispatch_float(gx.dtype(), [&]<typename T>(T) {
        T* out = gx.data<T>();
        const T* gp = g.data<const T>();
        const int64_t n = gx.numel();
        for (int64_t i = 0; i < n; ++i) out[i] = T(0);
        for (int64_t j = 0; j < k; ++j) {
            T* d = out + rows[j] * row;
            const T* s = gp + j * row;
            for (int64_t c = 0; c < row; ++c) d[c] += s[c];
        }
    });
}

void gather_output(const Tensor& y, const Tensor& x, const Dims& shape, const char* op) {
    check_view(y, {op, ": output"}, x.dtype());
    check_shape(y, {op, ": output"}, shape);
}

void gather_grads(const BackwardCall& call, const Tensor& x, const Dims& out_shape, const int64_t* rows,
                  int64_t k, int64_t row, const char* op) {
    const Tensor g = call.grad_output(0);
    check_view(g, {op, ": grad output"}, x.dtype());
    check_shape(g, {op, ": grad output"}, out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, {op, ": grad input 0"}, x, "input 0");
    scatter_rows_grad(gx, g, rows, k, row);
}

// ---- scatter_add ----

struct ScatterArgs {
    Tensor base, index, source;
    const int64_t* ip;
    int64_t k, row;
};

ScatterArgs scatter_args(std::size_t num_inputs, const auto& input, bool rows, const char* op) {
    require_arity(num_inputs, 3, op);
    const Tensor base = input(0), index = input(1), source = input(2);
    check_float(base, {op, ": base (input 0)"});
    require(base.rank() == (rows ? 2 : 1), [&] {
        return std::string(op) + ": base (input 0) must have rank " + (rows ? "2" : "1") +
               ", got shape " + shape_string(base.shape());
    });
    const int64_t* ip = index_tensor(index, 1, base.dim(0), op);
    check_view(source, {op, ": source (input 2)"}, base.dtype());
    Dims want{index.dim(0)};
    if (rows) want.push_back(base.dim(1));
    check_shape(source, {op, ": source (input 2)"}, want);
    return {base, index, source, ip, index.dim(0), rows ? base.dim(1) : 1};
}

void scatter_add_forward(const ForwardCall& call, bool rows, const char* op) {
    const auto a = scatter_args(call.num_inputs(), [&](std::size_t i) { return call.input(i); }, rows, op);
    const Tensor y = call.output(0);
    check_like(y, {op, ": output"}, a.base, "the base");
    dispatch_float(a.base.dtype(), [&]<typename T>(T) {
        const T* bp = a.base.template data<const T>();
        const T* sp = a.source.template data<const T>();
        T* out = y.data<T>();
        const int64_t n = a.base.numel();
        for (int64_t i = 0; i < n; ++i) out[i] = bp[i];
        for (int64_t j = 0; j < a.k; ++j) {
            T* d = out + a.ip[j] * a.row;
            const T* s = sp + j * a.row;
            for (int64_t c = 0; c < a.row; ++c) d[c] += s[c];
        }
    });
}

/// grad base = g; grad source[j] = g[index[j]] (row-wise).
void scatter_add_backward(const BackwardCall& call, bool rows, const char* op) {
    const auto a = scatter_args(call.num_inputs(), [&](std::size_t i) { return call.input(i); }, rows, op);
    const Tensor g = call.grad_output(0);
    check_like(g, {op, ": grad output"}, a.base, "the base");
    const Tensor gb = call.grad_input(0), gs = call.grad_input(2);
    if (gb.present()) check_like(gb, {op, ": grad input 0"}, a.base, "the base");
    if (gs.present()) check_like(gs, {op, ": grad input 2"}, a.source, "the source");
    dispatch_float(a.base.dtype(), [&]<typename T>(T) {
        const T* gp = g.data<const T>();
        if (gb.present()) {
            T* out = gb.data<T>();
            const int64_t n = a.base.numel();
            for (int64_t i = 0; i < n; ++i) out[i] = gp[i];
        }
        if (gs.present()) {
            T* out = gs.data<T>();
            for (int64_t j = 0; j < a.k; ++j) {
                const T* s = gp + a.ip[j] * a.row;
                T* d = out + j * a.row;
                for (int64_t c = 0; c < a.row; ++c) d[c] = s[c];
            }
        }
    });
}

// ---- gather(data, indices; axis = 0): ONNX Gather / numpy.take ----

struct GatherPlan {
    int64_t outer = 1, n = 0, inner = 1, k = 0;  // data viewed as [outer, n, inner]; k indices
    Dims out_shape;                              // data[:axis] + indices.shape + data[axis+1:]
    const int64_t* index = nullptr;
};

GatherPlan gather_plan(std::size_t num_inputs, const Tensor& data, const Tensor& idx,
                       const plugin::Attributes& attrs) {
    require_arity(num_inputs, 2, "gather");
    check_view(data, "gather: data (input 0)");
    require(data.rank() >= 1, [&] {
        return "gather: data (input 0) has shape " + shape_string(data.shape()) +
               "; expected rank >= 1";
    });
    check_view(idx, "gather: indices (input 1)", CAPSULE_DTYPE_INT64);
    const int64_t axis = normalize_axis(attrs.get_int("axis", 0), data.rank(), "axis", "gather");
    GatherPlan p;
    for (int d = 0; d < data.rank(); ++d) {
        if (d < axis) {
            p.outer *= data.dim(d);
            p.out_shape.push_back(data.dim(d));
        } else if (d == axis) {
            p.n = data.dim(d);
            for (auto e : idx.shape()) p.out_shape.push_back(e);
        } else {
            p.inner *= data.dim(d);
            p.out_shape.push_back(data.dim(d));
        }
    }
    p.k = idx.numel();
    p.index = idx.data<const int64_t>();
    for (int64_t j = 0; j < p.k; ++j)
        if (!(p.index[j] >= -p.n && p.index[j] < p.n)) [[unlikely]]
            fail(CAPSULE_ERROR_INVALID_DATA, "gather: index " + std::to_string(p.index[j]) + " at position " +
                 std::to_string(j) + " is out of range for axis " + std::to_string(axis) +
                 " of size " + std::to_string(p.n) +
                 (p.n > 0 ? " (valid: " + std::to_string(-p.n) + ".." + std::to_string(p.n - 1) + ")"
                          : std::string()));
    return p;
}

/// The data row that index j reads (negative indices count from the end).
int64_t gather_row_of(const GatherPlan& p, int64_t j) {
    return p.index[j] < 0 ? p.index[j] + p.n : p.index[j];
}

}  // namespace

// gather_scalar(index): x[index] of a vector, rank-0 output.
void gather_scalar_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "gather_scalar");
    const Tensor x = call.input(0);
    check_x(x, 1, "gather_scalar");
    const int64_t i = attr_index(call.attrs(), x.dim(0), "gather_scalar");
    const Tensor y = call.output(0);
    gather_output(y, x, {}, "gather_scalar");
    gather_rows(x, y, &i, 1, 1);
}
void gather_scalar_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "gather_scalar");
    const Tensor x = call.input(0);
    check_x(x, 1, "gather_scalar");
    const int64_t i = attr_index(call.attrs(), x.dim(0), "gather_scalar");
    gather_grads(call, x, {}, &i, 1, 1, "gather_scalar");
}

// gather_scalar_nat(x, i): x[i] with a rank-0 int64 index tensor.
void gather_scalar_nat_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "gather_scalar_nat");
    const Tensor x = call.input(0);
    check_x(x, 1, "gather_scalar_nat");
    const int64_t* ip = index_tensor(call.input(1), 0, x.dim(0), "gather_scalar_nat");
    const Tensor y = call.output(0);
    gather_output(y, x, {}, "gather_scalar_nat");
    gather_rows(x, y, ip, 1, 1);
}
void gather_scalar_nat_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 2, "gather_scalar_nat");
    const Tensor x = call.input(0);
    check_x(x, 1, "gather_scalar_nat");
    const int64_t* ip = index_tensor(call.input(1), 0, x.dim(0), "gather_scalar_nat");
    gather_grads(call, x, {}, ip, 1, 1, "gather_scalar_nat");
}

// gather_row(index): x[index, :] of a matrix.
void gather_row_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "gather_row");
    const Tensor x = call.input(0);
    check_x(x, 2, "gather_row");
    const int64_t i = attr_index(call.attrs(), x.dim(0), "gather_row");
    const Tensor y = call.output(0);
    gather_output(y, x, {x.dim(1)}, "gather_row");
    gather_rows(x, y, &i, 1, x.dim(1));
}
void gather_row_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 1, "gather_row");
    const Tensor x = call.input(0);
    check_x(x, 2, "gather_row");
    const int64_t i = attr_index(call.attrs(), x.dim(0), "gather_row");
    gather_grads(call, x, {x.dim(1)}, &i, 1, x.dim(1), "gather_row");
}

// gather_vec_nat(x, i): x[i[j]] for each j.
void gather_vec_nat_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "gather_vec_nat");
    const Tensor x = call.input(0), idx = call.input(1);
    check_x(x, 1, "gather_vec_nat");
    const int64_t* ip = index_tensor(idx, 1, x.dim(0), "gather_vec_nat");
    const Tensor y = call.output(0);
    gather_output(y, x, {idx.dim(0)}, "gather_vec_nat");
    gather_rows(x, y, ip, idx.dim(0), 1);
}
void gather_vec_nat_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 2, "gather_vec_nat");
    const Tensor x = call.input(0), idx = call.input(1);
    check_x(x, 1, "gather_vec_nat");
    const int64_t* ip = index_tensor(idx, 1, x.dim(0), "gather_vec_nat");
    gather_grads(call, x, {idx.dim(0)}, ip, idx.dim(0), 1, "gather_vec_nat");
}

// gather_rows_nat(x, i): rows x[i[j], ...] for each j.
void gather_rows_nat_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "gather_rows_nat");
    const Tensor x = call.input(0), idx = call.input(1);
    check_x(x, 1, "gather_rows_nat", true);
    const int64_t* ip = index_tensor(idx, 1, x.dim(0), "gather_rows_nat");
    Dims shape(x.shape().begin(), x.shape().end());
    shape[0] = idx.dim(0);
    const Tensor y = call.output(0);
    gather_output(y, x, shape, "gather_rows_nat");
    gather_rows(x, y, ip, idx.dim(0), row_size(x));
}
void gather_rows_nat_backward(const BackwardCall& call) {
    require_arity(call.num_inputs(), 2, "gather_rows_nat");
    const Tensor x = call.input(0), idx = call.input(1);
    check_x(x, 1, "gather_rows_nat", true);
    const int64_t* ip = index_tensor(idx, 1, x.dim(0), "gather_rows_nat");
    Dims shape(x.shape().begin(), x.shape().end());
    shape[0] = idx.dim(0);
    gather_grads(call, x, shape, ip, idx.dim(0), row_size(x), "gather_rows_nat");
}

void scatter_add_vec_forward(const ForwardCall& call) { scatter_add_forward(call, false, "scatter_add_vec"); }
void scatter_add_vec_backward(const BackwardCall& call) { scatter_add_backward(call, false, "scatter_add_vec"); }
void scatter_add_row_forward(const ForwardCall& call) { scatter_add_forward(call, true, "scatter_add_row"); }
void scatter_add_row_backward(const BackwardCall& call) { scatter_add_backward(call, true, "scatter_add_row"); }

// gather: out[o, j, i] = data[o, indices[j], i] with data viewed as [outer, n, inner] around
// `axis` (ONNX Gather, numpy.take). Indices in [-n, n), negative ones counting from the end; any
// other index is an error. The backward kernel scatter-adds the gradient (repeats accumulate).
void gather_forward(const ForwardCall& call) {
    const Tensor data = call.input(0);
    const auto p = gather_plan(call.num_inputs(), data, call.input(1), call.attrs());
    const Tensor y = call.output(0);
    gather_output(y, data, p.out_shape, "gather");
    const std::size_t bytes = static_cast<std::size_t>(p.inner) * element_size(data.dtype());
    if (bytes == 0) return;
    const char* src = static_cast<const char*>(data.view->data);
    char* dst = static_cast<char*>(y.view->data);
    for (int64_t o = 0; o < p.outer; ++o)
        for (int64_t j = 0; j < p.k; ++j)
            std::memcpy(dst + static_cast<std::size_t>(o * p.k + j) * bytes,
                        src + static_cast<std::size_t>(o * p.n + gather_row_of(p, j)) * bytes, bytes);
}
void gather_backward(const BackwardCall& call) {
    const Tensor data = call.input(0);
    check_float(data, "gather: data (input 0)");
    const auto p = gather_plan(call.num_inputs(), data, call.input(1), call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "gather: grad output", data.dtype());
    check_shape(g, "gather: grad output", p.out_shape);
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "gather: grad input 0", data, "input 0");
    dispatch_float(data.dtype(), [&]<typename T>(T) {
        T* out = gx.data<T>();
        const T* gp = g.data<const T>();
        std::fill(out, out + data.numel(), T(0));
        for (int64_t o = 0; o < p.outer; ++o)
            for (int64_t j = 0; j < p.k; ++j) {
                T* d = out + (o * p.n + gather_row_of(p, j)) * p.inner;
                const T* s = gp + (o * p.k + j) * p.inner;
                for (int64_t c = 0; c < p.inner; ++c) d[c] += s[c];
            }
    });
}

namespace {

// ---- gather_elements(data, indices; axis = 0): ONNX GatherElements / torch.gather ----

/// For every element of `indices` (row-major), the offset in `data` it reads: its own
/// coordinates, with the `axis` coordinate replaced by the index (negative ones counting from
/// the end). Refuses an index outside [-n, n) and shapes shape inference would refuse.
std::vector<int64_t> gather_elements_sources(std::size_t num_inputs, const Tensor& data, const Tensor& idx,
                                             const plugin::Attributes& attrs, const std::string& op = "gather_elements") {
    require_arity(num_inputs, 2, op.c_str());
    check_view(data, {op.c_str(), ": data (input 0)"});
    check_view(idx, {op.c_str(), ": indices (input 1)"}, CAPSULE_DTYPE_INT64);
    const int rank = data.rank();
    require(rank >= 1 && idx.rank() == rank, [&] {
        return op + ": indices " + shape_string(idx.shape()) + " must have the rank of data " +
               shape_string(data.shape()) + " (at least 1)";
    });
    const int64_t axis = normalize_axis(attrs.get_int("axis", 0), rank, "axis", op.c_str());
    std::vector<int64_t> stride(static_cast<std::size_t>(rank), 1);
    for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * data.dim(d + 1);
    for (int d = 0; d < rank; ++d)
        require(d == axis || idx.dim(d) <= data.dim(d), [&] {
            return op + ": indices " + shape_string(idx.shape()) + " exceed data " +
                   shape_string(data.shape()) + " along axis " + std::to_string(d);
        });
    const int64_t n = data.dim(static_cast<int>(axis)), count = idx.numel();
    const int64_t* index = idx.data<const int64_t>();
    std::vector<int64_t> sources(static_cast<std::size_t>(count));
    std::vector<int64_t> coord(static_cast<std::size_t>(rank), 0);
    for (int64_t e = 0; e < count; ++e) {
        const int64_t i = index[e];
        if (!(i >= -n && i < n)) [[unlikely]]
            fail(CAPSULE_ERROR_INVALID_DATA, op + ": index " + std::to_string(i) + " at position " + std::to_string(e) +
                 " is out of range for axis " + std::to_string(axis) + " of size " + std::to_string(n) +
                 (n > 0 ? " (valid: " + std::to_string(-n) + ".." + std::to_string(n - 1) + ")" : std::string()));
        int64_t offset = 0;
        for (int d = 0; d < rank; ++d) offset += (d == axis ? (i < 0 ? i + n : i) : coord[d]) * stride[d];
        sources[static_cast<std::size_t>(e)] = offset;
        for (int d = rank - 1; d >= 0 && ++coord[d] == idx.dim(d); --d) coord[d] = 0;  // next coordinate
    }
    return sources;
}

}  // namespace

// gather_elements: out[e] = data[sources[e]] (any dtype, element by element); the backward
// kernel scatter-adds the gradient into data (repeated indices accumulate).
void gather_elements_forward(const ForwardCall& call) {
    const Tensor data = call.input(0), idx = call.input(1);
    const auto sources = gather_elements_sources(call.num_inputs(), data, idx, call.attrs());
    const Tensor y = call.output(0);
    gather_output(y, data, Dims(idx.shape().begin(), idx.shape().end()), "gather_elements");
    const std::size_t bytes = element_size(data.dtype());
    const char* src = static_cast<const char*>(data.view->data);
    char* dst = static_cast<char*>(y.view->data);
    for (std::size_t e = 0; e < sources.size(); ++e)
        std::memcpy(dst + e * bytes, src + static_cast<std::size_t>(sources[e]) * bytes, bytes);
}
void gather_elements_backward(const BackwardCall& call) {
    const Tensor data = call.input(0), idx = call.input(1);
    check_float(data, "gather_elements: data (input 0)");
    const auto sources = gather_elements_sources(call.num_inputs(), data, idx, call.attrs());
    const Tensor g = call.grad_output(0);
    check_view(g, "gather_elements: grad output", data.dtype());
    check_shape(g, "gather_elements: grad output", idx.shape());
    const Tensor gx = call.grad_input(0);
    if (!gx.present()) return;
    check_like(gx, "gather_elements: grad input 0", data, "input 0");
    dispatch_float(data.dtype(), [&]<typename T>(T) {
        T* out = gx.data<T>();
        const T* gp = g.data<const T>();
        std::fill(out, out + data.numel(), T(0));
        for (std::size_t e = 0; e < sources.size(); ++e) out[sources[e]] += gp[e];
    });
}

// scatter_elements(data, indices, updates; axis, reduction): ONNX ScatterElements. out = data,
// then for each e in row-major order out[targets[e]] = updates[e] (none) or the current value
// combined with it (add, mul, max, min; see combine). The targets are gather_elements' sources:
// the same index rule and checks.
namespace {

enum class Reduction { none, add, mul, max, min };

Reduction reduction_of(const plugin::Attributes& attrs) {
    const std::string r = attrs.get_string("reduction", "none");
    if (r == "none") return Reduction::none;
    if (r == "add") return Reduction::add;
    if (r == "mul") return Reduction::mul;
    if (r == "max") return Reduction::max;
    if (r == "min") return Reduction::min;
    fail("scatter_elements: reduction '" + r + "' is not one of none, add, mul, max, min");
}

/// The targets of scatter_elements' updates in data (checked as gather_elements' sources are),
/// after checking the updates against indices and data.
std::vector<int64_t> scatter_targets(std::size_t num_inputs, const Tensor& data, const Tensor& idx,
                                     const Tensor& updates, const plugin::Attributes& attrs) {
    require_arity(num_inputs, 3, "scatter_elements");
    check_view(updates, "scatter_elements: updates (input 2)", data.dtype());
    check_shape(updates, "scatter_elements: updates (input 2)", idx.shape());
    return gather_elements_sources(2, data, idx, attrs, "scatter_elements");
}

/// a combined with b: max / min keep NaN from either side, as torch.scatter_reduce's amax / amin
/// and ONNX's Max / Min do.
template <typename T>
T combine(Reduction r, T a, T b) {
    switch (r) {
        case Reduction::add: return a + b;
        case Reduction::mul: return a * b;
        case Reduction::max:
            if constexpr (std::is_floating_point_v<T>)
                if (a != a || b != b) return a != a ? a : b;
            return a < b ? b : a;
        case Reduction::min:
            if constexpr (std::is_floating_point_v<T>)
                if (a != a || b != b) return a != a ? a : b;
            return b < a ? b : a;
        case Reduction::none: return b;
    }
    return b;
}

}  // namespace

void scatter_elements_forward(const ForwardCall& call) {
    const Tensor data = call.input(0), idx = call.input(1), updates = call.input(2);
    const auto targets = scatter_targets(call.num_inputs(), data, idx, updates, call.attrs());
    const Reduction r = reduction_of(call.attrs());
    const Tensor y = call.output(0);
    check_view(y, "scatter_elements: output", data.dtype());
    check_shape(y, "scatter_elements: output", data.shape());
    const std::size_t bytes = element_size(data.dtype());
    std::memcpy(y.view->data, data.view->data, static_cast<std::size_t>(data.numel()) * bytes);
    if (r == Reduction::none) {
        const char* src = static_cast<const char*>(updates.view->data);
        char* dst = static_cast<char*>(y.view->data);
        for (std::size_t e = 0; e < targets.size(); ++e)
            std::memcpy(dst + static_cast<std::size_t>(targets[e]) * bytes, src + e * bytes, bytes);
        return;
    }
    auto reduce = [&]<typename T>(T) {
        T* out = y.data<T>();
        const T* u = updates.data<const T>();
        for (std::size_t e = 0; e < targets.size(); ++e) out[targets[e]] = combine(r, out[targets[e]], u[e]);
    };
    if (data.dtype() == CAPSULE_DTYPE_INT64)
        reduce(int64_t{});
    else
        dispatch_float(data.dtype(), reduce);
}

void scatter_elements_backward(const BackwardCall& call) {
    const Tensor data = call.input(0), idx = call.input(1), updates = call.input(2);
    check_float(data, "scatter_elements: data (input 0)");
    const auto targets = scatter_targets(call.num_inputs(), data, idx, updates, call.attrs());
    const Reduction r = reduction_of(call.attrs());
    if (r != Reduction::none && r != Reduction::add)
        plugin::fail(CAPSULE_ERROR_UNSUPPORTED, "scatter_elements: no backward kernel for reduction '" +
                                                    call.attrs().get_string("reduction", "none") +
                                                    "' (only none and add are differentiated)");
    const Tensor g = call.grad_output(0);
    check_like(g, "scatter_elements: grad output", data, "input 0");
    const Tensor gd = call.grad_input(0), gu = call.grad_input(2);
    dispatch_float(data.dtype(), [&]<typename T>(T) {
        const T* gp = g.data<const T>();
        if (gd.present()) {
            check_like(gd, "scatter_elements: grad input 0", data, "input 0");
            T* out = gd.data<T>();
            std::copy(gp, gp + data.numel(), out);
            if (r == Reduction::none)  // overwritten positions do not reach the output
                for (const int64_t t : targets) out[t] = T(0);
        }
        if (gu.present()) {
            check_like(gu, "scatter_elements: grad input 2", updates, "input 2");
            T* out = gu.data<T>();
            for (std::size_t e = 0; e < targets.size(); ++e) out[e] = gp[targets[e]];
        }
    });
}

}  // namespace capsule::reference
