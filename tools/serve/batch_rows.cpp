#include "batch_rows.hpp"

#include <cstring>
#include <string>

#include "capsule/error.hpp"

namespace capsule::serve {

namespace {
std::size_t row_bytes(const Tensor& t) {
    if (t.shape().empty()) throw Error(ErrorCode::other, "a batched tensor needs a batch dimension");
    return t.shape()[0] > 0 ? t.nbytes() / static_cast<std::size_t>(t.shape()[0]) : 0;
}
}  // namespace

Tensor concatenate_rows(const std::vector<const Tensor*>& parts, std::int64_t rows) {
    Shape shape = parts.at(0)->shape();
    row_bytes(*parts[0]);  // has a batch dimension
    std::int64_t given = 0;
    for (const auto* p : parts) {
        Shape other = p->shape();
        other.at(0) = shape.at(0);
        if (p->dtype() != parts[0]->dtype() || other != shape)
            throw Error(ErrorCode::other, "batched tensors differ in dtype or in a dimension after the batch");
        given += p->shape()[0];
    }
    if (given > rows)
        throw Error(ErrorCode::other, std::to_string(given) + " rows do not fit a batch of " + std::to_string(rows));
    shape[0] = rows;
    Tensor out = Tensor::zeros(parts[0]->dtype(), shape);
    auto* at = static_cast<char*>(out.data());
    for (const auto* p : parts) {
        std::memcpy(at, p->data(), p->nbytes());
        at += p->nbytes();
    }
    return out;
}

Tensor slice_rows(const Tensor& t, std::int64_t first, std::int64_t rows) {
    const std::size_t bytes_per_row = row_bytes(t);
    if (first < 0 || rows < 0 || first + rows > t.shape()[0])
        throw Error(ErrorCode::other, "rows " + std::to_string(first) + ".." + std::to_string(first + rows) +
                                          " are outside a batch of " + std::to_string(t.shape()[0]));
    Shape shape = t.shape();
    shape[0] = rows;
    Tensor out = Tensor::zeros(t.dtype(), shape);
    std::memcpy(out.data(), static_cast<const char*>(t.data()) + bytes_per_row * std::size_t(first),
                bytes_per_row * std::size_t(rows));
    return out;
}

}  // namespace capsule::serve
