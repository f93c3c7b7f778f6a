// Ops that work along axes: reductions (the reduced axes go, or stay as 1 with keepdims),
// softmax and cumsum (shape kept, the axis only checked) and argmax/argmin.
#include "context.hpp"

#include <algorithm>
#include <vector>

namespace capsule::shape_inference {

TensorType softmax_like(Context& c) {
    c.arity(1);
    c.attributes({"axis"});
    const auto dtype = c.floats({0});
    axis_for("axis", c.int_or("axis", -1), c.rank(0));
    return {c.shape(0), dtype};
}

TensorType sum(Context& c) {
    c.arity(1);
    c.attributes({});
    return {{}, c.floats({0})};
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

TensorType arg_reduce(Context& c) {
    c.arity(1);
    c.attributes({"axis", "keepdims", "select_last_index"});
    const DType dtype = c.in(0).dtype;
    if (dtype == DType::boolean) fail("parent 0 has dtype bool; expected a float or integer dtype");
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

TensorType top_k(Context& c) {
    c.arity(1);
    c.attributes({"k", "axis", "largest"});
    const DType dtype = c.in(0).dtype;
    if (dtype == DType::boolean) fail("parent 0 has dtype bool; expected a float or integer dtype");
    Shape out = c.shape(0);
    if (out.empty()) fail("parent 0 is a scalar; top_k needs an axis");
    const auto axis = size_t(axis_for("axis", c.int_or("axis", -1), out.size()));
    const int64_t k = c.req_int("k");
    if (k < 0 || k > out[axis])
        fail("k " + str(k) + " is outside [0, " + str(out[axis]) + "] (axis " + str(int64_t(axis)) + " of " +
             to_string(c.shape(0)) + ")");
    c.bool_or("largest", true);
    out[axis] = k;
    return {out, DType::int64};
}

TensorType non_max_suppression(Context& c) {
    c.arity(2);
    c.attributes({"max_output_boxes_per_class", "iou_threshold", "score_threshold", "center_point_box"});
    c.floats({0, 1});
    const Shape& boxes = c.shape(0);
    const Shape& scores = c.shape(1);
    if (boxes.size() != 3 || boxes[2] != 4) fail("boxes " + to_string(boxes) + " must be [batches, boxes, 4]");
    if (scores.size() != 3 || scores[0] != boxes[0] || scores[2] != boxes[1])
        fail("scores " + to_string(scores) + " must be [" + str(boxes[0]) + ", classes, " + str(boxes[1]) +
             "] for boxes " + to_string(boxes));
    const int64_t per_class = c.int_min("max_output_boxes_per_class", 0, std::nullopt);
    const int64_t center = c.int_or("center_point_box", 0);
    if (center != 0 && center != 1) fail("center_point_box " + str(center) + " must be 0 or 1");
    // ONNX: "Value range [0, 1]" (ONNX Runtime refuses others; 2 would suppress nothing, −0.5
    // every overlapping box).
    const double iou = c.double_or("iou_threshold", 0.0);
    if (!(iou >= 0 && iou <= 1)) fail("attribute 'iou_threshold' = " + num(iou) + " must be in [0, 1]");
    c.opt_double("score_threshold");
    return {{mul(mul(boxes[0], scores[1]), std::min(per_class, boxes[1])), 3}, DType::int64};
}

TensorType non_zero(Context& c) {
    c.arity(1);
    c.attributes({});
    if (c.rank(0) == 0) fail("parent 0 is a scalar; non_zero needs rank ≥ 1");
    return {{int64_t(c.rank(0)), product(c.shape(0))}, DType::int64};
}

TensorType cumsum(Context& c) {
    c.arity(1);
    c.attributes({"axis", "exclusive", "reverse"});
    const DType dtype = c.in(0).dtype;
    if (dtype == DType::boolean) fail("parent 0 has dtype bool; expected a float or integer dtype");
    axis_for("axis", c.req_int("axis"), c.rank(0));
    c.bool_or("exclusive", false);
    c.bool_or("reverse", false);
    return c.in(0);
}

}  // namespace capsule::shape_inference
