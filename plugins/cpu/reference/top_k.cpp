// Reference kernel of top_k: ONNX TopK's Indices output. For each line along `axis`, the
// positions of the k largest (or smallest) elements, ordered by value, equal values in index
// order (the ONNX spec's rule; torch.sort(stable=True) gives the same); NaN counts as the largest,
// as argmax. Every dtype but bool; no gradient (indices).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "elementwise_common.hpp"
#include "kernels.hpp"

namespace capsule::reference {

using namespace ew;

void top_k_forward(const ForwardCall& call) {
    require_arity(call.num_inputs(), 1, "top_k");
    const Tensor x = call.input(0);
    check_view(x, "top_k: input");
    require(x.dtype() != CAPSULE_DTYPE_BOOL, "top_k: input has dtype bool; expected a number dtype");
    require(x.rank() > 0, "top_k: input is a scalar; top_k needs an axis");
    const auto attrs = call.attrs();
    const int64_t axis = normalize_axis(attrs.get_int("axis", -1), x.rank(), "axis", "top_k");
    require(attrs.has("k"), "top_k: missing attribute 'k' (integer)");
    const int64_t k = attrs.get_int("k", 0);
    const bool largest = attrs.get_bool("largest", true);
    int64_t outer = 1, len = 1, inner = 1;
    Dims out_shape;
    for (int d = 0; d < x.rank(); ++d) {
        if (d < axis) outer *= x.dim(d);
        else if (d == axis) len = x.dim(d);
        else inner *= x.dim(d);
        out_shape.push_back(d == axis ? k : x.dim(d));
    }
    require(k >= 0 && k <= len, [&] {
        return "top_k: k " + std::to_string(k) + " is outside [0, " + std::to_string(len) + "] (the size of axis " +
               std::to_string(axis) + ")";
    });
    const Tensor y = call.output(0);
    check_view(y, "top_k: output", CAPSULE_DTYPE_INT64);
    check_shape(y, "top_k: output", out_shape);
    if (k == 0 || outer * inner == 0) return;
    dispatch<kFloatDtypes | kIntegerDtypes | kHalfDtypes>(x.dtype(), [&]<typename T>(T) {
        using C = compute_t<T>;
        const T* xp = x.data<const T>();
        int64_t* out = y.data<int64_t>();
        std::vector<int64_t> order(static_cast<std::size_t>(len));
        std::vector<C> line(static_cast<std::size_t>(len));
        auto is_nan = [](C v) {
            if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
            else return false;
        };
        // Strict weak order "a comes before b": NaN first when largest (it is the largest), last
        // otherwise; then by value; ties by index.
        auto before = [&](int64_t a, int64_t b) {
            const C va = line[static_cast<std::size_t>(a)], vb = line[static_cast<std::size_t>(b)];
            const bool na = is_nan(va), nb = is_nan(vb);
            if (na || nb) {
                if (na && nb) return a < b;
                return largest ? na : nb;
            }
            if (va != vb) return largest ? va > vb : va < vb;
            return a < b;
        };
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t j = 0; j < inner; ++j) {
                const T* row = xp + o * len * inner + j;
                for (int64_t i = 0; i < len; ++i) line[static_cast<std::size_t>(i)] = load(row[i * inner]);
                std::iota(order.begin(), order.end(), int64_t{0});
                std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
                int64_t* dst = out + o * k * inner + j;
                for (int64_t i = 0; i < k; ++i) dst[i * inner] = order[static_cast<std::size_t>(i)];
            }
    });
}

}  // namespace capsule::reference
