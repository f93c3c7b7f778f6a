// Gathers and scatters: an int64 index parent (or an 'index' attribute) picks elements, rows or
// slices of the data parent.
#include "context.hpp"

#include <cstddef>
#include <string>

namespace capsule::shape_inference {

namespace {

/// An index attribute in [-length, length), counted from the end when negative.
int64_t checked_index(const char* name, int64_t index, int64_t length) {
    if (index < -length || index >= length)
        fail("attribute " + quoted(name) + " = " + str(index) + " out of range for length " +
             str(length));
    return index < 0 ? index + length : index;
}

}  // namespace

TensorType gather_by_attribute(Context& c, size_t data_rank) {
    c.arity(1);
    c.attributes({"index"});
    c.rank_is(0, data_rank);
    checked_index("index", c.req_int("index"), c.shape(0)[0]);
    return {Shape(c.shape(0).begin() + 1, c.shape(0).end()), c.in(0).dtype};
}

TensorType gather_by_parent(Context& c, size_t index_rank) {
    c.arity(2);
    c.attributes({});
    c.rank_is(0, 1);
    c.index_dtype(1);
    c.rank_is(1, index_rank, "index");
    return {c.shape(1), c.in(0).dtype};
}

TensorType gather_rows_nat(Context& c) {
    c.arity(2);
    c.attributes({});
    c.rank_at_least(0, 1);
    c.index_dtype(1);
    c.rank_is(1, 1, "index");
    Shape out = c.shape(0);
    out[0] = c.shape(1)[0];
    return {out, c.in(0).dtype};
}

TensorType scatter_add(Context& c, bool rows) {
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

// The indices of gather_elements and scatter_elements: parent 1, int64, of data's (parent 0's)
// rank, at most data's size along every axis but `axis` (any size along it).
namespace {
void element_indices(Context& c) {
    c.rank_at_least(0, 1);
    c.index_dtype(1);
    const auto& data = c.shape(0);
    const auto& indices = c.shape(1);
    if (indices.size() != data.size())
        fail("expects parent 1 (indices) of rank " + std::to_string(data.size()) + " (data's), got " +
             to_string(indices));
    const auto axis = size_t(axis_for("axis", c.int_or("axis", 0), data.size()));
    for (size_t d = 0; d < data.size(); ++d)
        if (d != axis && indices[d] > data[d])
            fail("parent 1 (indices) of shape " + to_string(indices) + " is larger than parent 0 (data) " +
                 to_string(data) + " along axis " + std::to_string(d) + " (only axis " + std::to_string(axis) +
                 " may differ)");
}
}  // namespace

// ONNX ScatterElements: data, indices of data's rank (at most data's size along every axis but
// `axis`), updates of indices' shape and data's dtype; the output is data's type.
TensorType scatter_elements(Context& c) {
    c.arity(3);
    c.attributes({"axis", "reduction"});
    element_indices(c);
    const auto& data = c.shape(0);
    const auto& indices = c.shape(1);
    if (c.shape(2) != indices)
        fail("parent 2 (updates) has shape " + to_string(c.shape(2)) + "; expected indices' shape " +
             to_string(indices));
    const DType dtype = c.same_dtype({0, 2});
    const auto reduction = c.string_or("reduction", "none", {"none", "add", "mul", "max", "min"});
    if (reduction != "none" && dtype == DType::boolean)
        fail("reduction " + quoted(reduction) + " needs float32, float64 or int64 data; got bool");
    return {data, dtype};
}

// ONNX GatherElements (torch.gather): indices of data's rank; the output has their shape, which
// may be smaller than data's along every axis but `axis` (and any size along it).
TensorType gather_elements(Context& c) {
    c.arity(2);
    c.attributes({"axis"});
    element_indices(c);
    return {c.shape(1), c.in(0).dtype};
}

}  // namespace capsule::shape_inference
