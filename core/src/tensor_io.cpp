#include "capsule/tensor_io.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <fstream>
#include <cctype>

#include <nlohmann/json.hpp>

#include "capsule/error.hpp"
#include "capsule/shape_math.hpp"
#include "json_reader.hpp"

namespace capsule {

namespace fs = std::filesystem;
using std::string;

namespace {

/// Bytes of a tensor of `shape` and `dtype` (try_byte_size), or nullopt past 2^63-1.
std::optional<std::size_t> checked_nbytes(const Shape& shape, DType dtype) {
    if (auto n = try_byte_size(shape, dtype_size(dtype))) return static_cast<std::size_t>(*n);
    return std::nullopt;
}

}  // namespace

namespace {

[[noreturn]] void bad(const fs::path& path, const string& why) {
    throw Error(ErrorCode::input, path.string() + ": " + why);
}

string npy_descr(DType d) {
    switch (d) {
        case DType::float32: return "<f4";
        case DType::float64: return "<f8";
        case DType::int64: return "<i8";
        case DType::boolean: return "|b1";
        case DType::int32: return "<i4";
        case DType::int8: return "|i1";
        case DType::uint8: return "|u1";
        case DType::int16: return "<i2";
        case DType::uint16: return "<u2";
        case DType::uint32: return "<u4";
        case DType::uint64: return "<u8";
        case DType::float16: return "<f2";
        case DType::bfloat16: break;  // numpy has no bfloat16 type
    }
    return "?";
}

DType dtype_from_npy(const fs::path& path, const string& descr) {
    for (auto d : all_values<DType>())
        if (npy_descr(d) == descr) return d;
    bad(path, "unsupported .npy dtype '" + descr +
                  "'; supported: <f4 (float32), <f8 (float64), <f2 (float16), <i8 (int64), <i4 (int32), "
                  "<i2 (int16), |i1 (int8), <u8 (uint64), <u4 (uint32), <u2 (uint16), |u1 (uint8), |b1 (bool); "
                  "bfloat16 has no .npy type (use safetensors' BF16)");
}

/// Scans the header dict {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } with a
/// plain linear scanner (no regex: a hostile 64 KB header must not exhaust the stack).
class NpyHeaderScanner {
public:
    NpyHeaderScanner(const fs::path& path, const string& text) : path_(path), s_(text) {}

    void parse(DType& dtype, Shape& shape) {
        bool have_descr = false, have_fortran = false, have_shape = false;
        skip_space();
        expect('{');
        while (true) {
            skip_space();
            if (peek() == '}') break;
            const string key = quoted();
            skip_space();
            expect(':');
            skip_space();
            if (key == "descr") {
                dtype = dtype_from_npy(path_, quoted());
                have_descr = true;
            } else if (key == "fortran_order") {
                const string word = identifier();
                if (word == "True") bad(path_, "Fortran-order .npy arrays are not supported; save C order");
                if (word != "False") bad(path_, "npy header: fortran_order must be True or False");
                have_fortran = true;
            } else if (key == "shape") {
                shape = tuple();
                have_shape = true;
            } else {
                bad(path_, "npy header has an unknown key '" + key + "'");
            }
            skip_space();
            if (peek() == ',') ++pos_;
        }
        if (!have_descr) bad(path_, "npy header has no 'descr'");
        if (!have_fortran) bad(path_, "npy header has no 'fortran_order'");
        if (!have_shape) bad(path_, "npy header has no 'shape'");
    }

private:
    char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
    void skip_space() {
        while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    void expect(char c) {
        if (peek() != c) bad(path_, string("malformed npy header: expected '") + c + "' at offset " + std::to_string(pos_));
        ++pos_;
    }
    string quoted() {
        expect('\'');
        auto end = s_.find('\'', pos_);
        if (end == string::npos) bad(path_, "malformed npy header: unterminated string");
        string out = s_.substr(pos_, end - pos_);
        pos_ = end + 1;
        return out;
    }
    string identifier() {
        std::size_t start = pos_;
        while (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        return s_.substr(start, pos_ - start);
    }
    Shape tuple() {
        expect('(');
        Shape shape;
        while (true) {
            skip_space();
            if (peek() == ')') break;
            std::size_t start = pos_;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
            if (pos_ == start || pos_ - start > 15) bad(path_, "bad npy shape at offset " + std::to_string(start));
            shape.push_back(std::stoll(s_.substr(start, pos_ - start)));
            skip_space();
            if (peek() == ',') {
                ++pos_;
            } else if (peek() != ')') {
                bad(path_, "bad npy shape at offset " + std::to_string(pos_));
            }
        }
        ++pos_;
        return shape;
    }

    const fs::path& path_;
    const string& s_;
    std::size_t pos_ = 0;
};

void parse_npy_header(const fs::path& path, const string& header, DType& dtype, Shape& shape) {
    NpyHeaderScanner(path, header).parse(dtype, shape);
}

string read_file(const fs::path& path, const char* what) {
    return detail::read_text_file(path, what);
}

}  // namespace

Tensor read_npy(const fs::path& path) {
    const string bytes = read_file(path, ".npy file");
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
        bad(path, "not a .npy file (bad magic)");
    const int major = static_cast<unsigned char>(bytes[6]);
    std::size_t header_len = 0, offset = 0;
    if (major == 1) {
        header_len = static_cast<unsigned char>(bytes[8]) |
                     (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
        offset = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) bad(path, "truncated .npy header");
        for (int i = 0; i < 4; ++i)
            header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
        offset = 12;
    } else {
        bad(path, "unsupported .npy format version " + std::to_string(major));
    }
    if (bytes.size() < offset + header_len) bad(path, "truncated .npy header");
    DType dtype{};
    Shape shape;
    parse_npy_header(path, bytes.substr(offset, header_len), dtype, shape);
    const std::size_t data_start = offset + header_len;
    // Checked before allocating, so a forged header cannot reserve memory the file does not hold.
    const auto needed = checked_nbytes(shape, dtype);
    if (!needed || bytes.size() - data_start != *needed)
        bad(path, "data holds " + std::to_string(bytes.size() - data_start) + " bytes, shape " +
                      to_string(shape) + " of " + string(to_string(dtype)) + " needs " +
                      (needed ? std::to_string(*needed) : string("more than 2^63-1 bytes")));
    Tensor t = Tensor::zeros(dtype, shape);
    if (t.nbytes()) std::memcpy(t.data(), bytes.data() + data_start, t.nbytes());
    if (dtype == DType::boolean)
        for (auto& b : t.values<unsigned char>())
            if (b > 1) bad(path, "bool array holds a byte other than 0 or 1");
    return t;
}

void write_npy(const fs::path& path, const Tensor& tensor) {
    if (tensor.dtype() == DType::bfloat16)
        throw Error(ErrorCode::input, path.string() + ": .npy has no bfloat16 type; write a safetensors file (BF16)");
    string shape = "(";
    for (std::size_t i = 0; i < tensor.shape().size(); ++i)
        shape += std::to_string(tensor.shape()[i]) + (tensor.shape().size() == 1 ? "," : i + 1 < tensor.shape().size() ? ", " : "");
    shape += ")";
    string header = "{'descr': '" + npy_descr(tensor.dtype()) + "', 'fortran_order': False, 'shape': " +
                    shape + ", }";
    // Pad so that magic + version + length + header is a multiple of 64, ending in '\n'.
    const std::size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    if (!out) throw Error(ErrorCode::other, path.string() + ": cannot open for writing");
    const unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                        static_cast<unsigned char>(header.size() & 0xFF),
                                        static_cast<unsigned char>(header.size() >> 8)};
    out.write(reinterpret_cast<const char*>(preamble), 10);
    out << header;
    out.write(static_cast<const char*>(tensor.data()), static_cast<std::streamsize>(tensor.nbytes()));
    if (!out) throw Error(ErrorCode::other, path.string() + ": write failed");
}

namespace {
const std::pair<const char*, DType> kSafetensorsTypes[] = {
    {"F32", DType::float32}, {"F64", DType::float64}, {"I64", DType::int64}, {"BOOL", DType::boolean},
    {"I32", DType::int32},   {"I8", DType::int8},     {"U8", DType::uint8},  {"I16", DType::int16},
    {"U16", DType::uint16},  {"U32", DType::uint32},  {"U64", DType::uint64}, {"F16", DType::float16},
    {"BF16", DType::bfloat16}};
}

std::map<string, Tensor> read_safetensors(const fs::path& path) {
    const string bytes = read_file(path, "safetensors file");
    if (bytes.size() < 8) bad(path, "too short for a safetensors header");
    std::uint64_t header_size = 0;
    for (int i = 0; i < 8; ++i)
        header_size |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    if (header_size > bytes.size() - 8) bad(path, "header size " + std::to_string(header_size) + " exceeds the file");
    const detail::JsonDocument header(std::string_view(bytes).substr(8, header_size), path.string());
    const detail::JsonCursor root = header.root();
    if (!root.is_object()) bad(path, "safetensors header is not a JSON object");
    const std::size_t data_start = 8 + header_size;
    const std::size_t data_size = bytes.size() - data_start;
    std::map<string, Tensor> out;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    // Tensors in name order: the first bad one named does not depend on the header's order.
    std::vector<std::pair<std::string_view, detail::JsonCursor>> members;
    root.each_member([&](std::string_view key, const detail::JsonCursor& c) {
        if (key != "__metadata__") members.emplace_back(key, c);
    });
    std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [key, c] : members) {
        const string name(key);
        c.object({"dtype", "shape", "data_offsets"});
        const string dt = c.at("dtype").string();
        auto found = std::find_if(std::begin(kSafetensorsTypes), std::end(kSafetensorsTypes),
                                  [&](const auto& p) { return dt == p.first; });
        if (found == std::end(kSafetensorsTypes))
            c.at("dtype").fail("unsupported dtype '" + dt +
                               "'; supported: F32, F64, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL");
        Shape shape;
        c.at("shape").each([&](const detail::JsonCursor& dim, std::size_t) {
            auto d = dim.integer();
            if (d < 0 || d > (std::int64_t(1) << 40)) dim.fail("invalid dimension " + std::to_string(d));
            shape.push_back(d);
        });
        auto o = c.at("data_offsets");
        if (o.array_size() != 2) o.fail("data_offsets must be [begin, end]");
        std::int64_t bounds[2] = {0, 0};
        o.each([&](const detail::JsonCursor& v, std::size_t i) { bounds[i] = v.integer(); });
        const auto begin = bounds[0], end = bounds[1];
        if (begin < 0 || end < begin || static_cast<std::uint64_t>(end) > data_size)
            o.fail("offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") lie outside the " + std::to_string(data_size) + "-byte data section");
        const auto needed = checked_nbytes(shape, found->second);
        if (!needed || static_cast<std::size_t>(end - begin) != *needed)
            o.fail("offsets cover " + std::to_string(end - begin) + " bytes, shape " + to_string(shape) +
                   " of " + dt + " needs " + (needed ? std::to_string(*needed) : string("more than 2^63-1 bytes")));
        Tensor t = Tensor::zeros(found->second, shape);
        if (t.nbytes()) std::memcpy(t.data(), bytes.data() + data_start + begin, t.nbytes());
        if (t.dtype() == DType::boolean)  // as .npy: a bool is one byte, 0 or 1
            for (auto b : t.values<unsigned char>())
                if (b > 1) c.at("dtype").fail("BOOL tensor holds a byte other than 0 or 1");
        ranges.emplace_back(begin, end);
        out.emplace(name, std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second) bad(path, "tensors overlap in the data section");
    return out;
}

void write_safetensors(const fs::path& path, const std::map<string, Tensor>& tensors) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    std::uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        const char* dt = nullptr;
        for (const auto& [n, d] : kSafetensorsTypes)
            if (d == t.dtype()) dt = n;
        header[name] = {{"dtype", dt}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
        offset += t.nbytes();
    }
    string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary);
    if (!out) throw Error(ErrorCode::other, path.string() + ": cannot open for writing");
    unsigned char size_bytes[8];
    for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(size_bytes), 8);
    out << text;
    for (const auto& [name, t] : tensors)
        out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
    if (!out) throw Error(ErrorCode::other, path.string() + ": write failed");
}

}  // namespace capsule
