// Reference kernels of the ops whose result length depends on the data: non_max_suppression
// (ONNX NonMaxSuppression) and non_zero (ONNX NonZero). Each writes its selected rows (columns)
// first and fills the rest of its upper-bound output with -1; the ONNX importer marks how many
// are real (Graph::output_lengths), and the session returns only those. No gradient (indices).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <vector>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {

using namespace ew;

namespace {

/// A box as [min_y, min_x, max_y, max_x] from ONNX's two encodings: corners [y1, x1, y2, x2] in
/// either order, or [x_center, y_center, width, height] (center_point_box = 1).
template <typename T>
std::array<double, 4> corners(const T* b, bool center) {
    if (center) {
        const double xc = b[0], yc = b[1], w = b[2], h = b[3];
        return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
    }
    return {std::min<double>(b[0], b[2]), std::min<double>(b[1], b[3]), std::max<double>(b[0], b[2]),
            std::max<double>(b[1], b[3])};
}

/// ONNX Runtime's SuppressByIOU: true when the boxes' intersection over union exceeds
/// `threshold`; boxes that do not overlap, or have no area, never suppress each other.
bool suppresses(const std::array<double, 4>& a, const std::array<double, 4>& b, double threshold) {
    const double ix0 = std::max(a[1], b[1]), ix1 = std::min(a[3], b[3]);
    const double iy0 = std::max(a[0], b[0]), iy1 = std::min(a[2], b[2]);
    if (ix1 <= ix0 || iy1 <= iy0) return false;
    const double inter = (ix1 - ix0) * (iy1 - iy0);
    const double area_a = (a[3] - a[1]) * (a[2] - a[0]), area_b = (b[3] - b[1]) * (b[2] - b[0]);
    const double uni = area_a + area_b - inter;
    if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return false;
    return inter / uni > threshold;
}

}  // namespace

void non_max_suppression_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 2, "non_max_suppression");
    const Tensor boxes = call.input(0), scores = call.input(1), y = call.output(0);
    check_view(boxes, "non_max_suppression: boxes");
    check_view(scores, "non_max_suppression: scores", boxes.dtype());
    require(is_float(boxes.dtype()), [&] {
        return std::string("non_max_suppression: boxes have dtype ") + dtype_name(boxes.dtype()) +
               "; expected float32 or float64";
    });
    require(boxes.rank() == 3 && boxes.dim(2) == 4, "non_max_suppression: boxes must be [batches, boxes, 4]");
    const int64_t batches = boxes.dim(0), n = boxes.dim(1);
    require(scores.rank() == 3 && scores.dim(0) == batches && scores.dim(2) == n,
            "non_max_suppression: scores must be [batches, classes, boxes]");
    const int64_t classes = scores.dim(1);
    const auto attrs = call.attrs();
    require(attrs.has("max_output_boxes_per_class"),
            "non_max_suppression: missing attribute 'max_output_boxes_per_class' (integer)");
    const int64_t per_class = attrs.get_int("max_output_boxes_per_class", 0);
    require(per_class >= 0, "non_max_suppression: max_output_boxes_per_class is negative");
    const double iou = attrs.get_float("iou_threshold", 0.0);
    const bool has_score_threshold = attrs.has("score_threshold");
    const double score_threshold = attrs.get_float("score_threshold", 0.0);
    const bool center = attrs.get_int("center_point_box", 0) != 0;
    const int64_t rows = batches * classes * std::min(per_class, n);
    check_view(y, "non_max_suppression: output", CAPSULE_DTYPE_INT64);
    const int64_t want[2] = {rows, 3};
    check_shape(y, "non_max_suppression: output", want);
    int64_t* out = y.data<int64_t>();
    std::fill(out, out + rows * 3, int64_t{-1});
    int64_t written = 0;
    dispatch<kFloatDtypes>(boxes.dtype(), [&]<typename T>(T) {
        const T* bp = boxes.data<const T>();
        const T* sp = scores.data<const T>();
        for (int64_t b = 0; b < batches; ++b) {
            std::vector<std::array<double, 4>> box(static_cast<std::size_t>(n));
            for (int64_t i = 0; i < n; ++i) box[i] = corners(bp + (b * n + i) * 4, center);
            for (int64_t c = 0; c < classes; ++c) {
                const T* s = sp + (b * classes + c) * n;
                // Candidates above the threshold, by descending score, ties by index (a NaN
                // score is never above a threshold and, without one, sorts last).
                std::vector<int64_t> order;
                for (int64_t i = 0; i < n; ++i)
                    if (!has_score_threshold || double(s[i]) > score_threshold) order.push_back(i);
                std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b2) {
                    const double sa = s[a], sb = s[b2];
                    if (std::isnan(sa) || std::isnan(sb)) return !std::isnan(sa) && std::isnan(sb);
                    return sa > sb;
                });
                std::vector<int64_t> kept;
                for (int64_t i : order) {
                    if (static_cast<int64_t>(kept.size()) >= per_class) break;
                    bool keep = true;
                    for (int64_t k : kept)
                        if (suppresses(box[k], box[i], iou)) {
                            keep = false;
                            break;
                        }
                    if (!keep) continue;
                    kept.push_back(i);
                    out[written * 3] = b;
                    out[written * 3 + 1] = c;
                    out[written * 3 + 2] = i;
                    ++written;
                }
            }
        }
    });
}

void non_zero_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "non_zero");
    const Tensor x = call.input(0), y = call.output(0);
    check_view(x, "non_zero: input");
    require(x.rank() >= 1, "non_zero: input is a scalar; non_zero needs rank >= 1");
    const int64_t rank = x.rank(), count = x.numel();
    check_view(y, "non_zero: output", CAPSULE_DTYPE_INT64);
    const int64_t want[2] = {rank, count};
    check_shape(y, "non_zero: output", want);
    int64_t* out = y.data<int64_t>();
    std::fill(out, out + rank * count, int64_t{-1});
    dispatch<kAllDtypes>(x.dtype(), [&]<typename T>(T) {
        const T* xp = x.data<const T>();
        std::vector<int64_t> index(static_cast<std::size_t>(rank), 0);
        int64_t column = 0;
        for (int64_t k = 0; k < count; ++k) {
            const auto v = load(xp[k]);
            if (v != decltype(v){}) {  // NaN != 0: counted, as numpy.nonzero
                for (int64_t d = 0; d < rank; ++d) out[d * count + column] = index[d];
                ++column;
            }
            for (int64_t d = rank - 1; d >= 0; --d) {
                if (++index[d] < x.dim(d)) break;
                index[d] = 0;
            }
        }
    });
}

}  // namespace capsule::reference
