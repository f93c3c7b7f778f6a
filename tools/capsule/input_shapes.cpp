// `--input-shape NAME=D0,D1,...` (or `NAME=D0xD1x...`), shared by `capsule plan` and `capsule bench`.
#include "context.hpp"

namespace capsule::cli {

std::map<std::string, Shape> parse_input_shapes(const std::vector<std::string>& specs) {
    std::map<std::string, Shape> out;
    for (const auto& spec : specs) {
        auto eq = spec.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::input, "--input-shape '" + spec + "': expected NAME=D0,D1,... or NAME=D0xD1x...");
        const char separator = spec.find(',', eq) == std::string::npos &&
                                       spec.find('x', eq) != std::string::npos ? 'x' : ',';
        // Every dimension present: "x=" (rank 0) is fine, "x=1x" or "x=1,,2" is not.
        if (spec.size() > eq + 1 && (spec.back() == separator || spec.find(std::string(2, separator)) != std::string::npos))
            throw Error(ErrorCode::input, "--input-shape '" + spec + "': an empty dimension");
        Shape shape;
        std::size_t start = eq + 1;
        while (start < spec.size()) {
            auto end = spec.find(separator, start);
            if (end == std::string::npos) end = spec.size();
            try {
                std::size_t used = 0;
                auto item = spec.substr(start, end - start);
                shape.push_back(std::stoll(item, &used));
                if (used != item.size()) throw std::invalid_argument(item);
            } catch (const std::exception&) {
                throw Error(ErrorCode::input, "--input-shape '" + spec + "': dimensions must be integers");
            }
            start = end + 1;
        }
        const auto name = spec.substr(0, eq);
        if (out.count(name)) throw Error(ErrorCode::input, "--input-shape '" + name + "' given twice");
        out[name] = shape;
    }
    return out;
}

}  // namespace capsule::cli
