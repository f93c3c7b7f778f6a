// .npy and safetensors files: hand-assembled bytes (independent of our writer), round trips,
// files written by NumPy, and every malformed-file error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <unistd.h>

#include "capsule/float16.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;
namespace fs = std::filesystem;

namespace {
fs::path temp_file(const std::string& name) {
    return fs::temp_directory_path() / ("capsule-io-" + std::to_string(::getpid()) + "-" + name);
}

void write_bytes(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
}

std::string npy_bytes(const std::string& header_dict, const std::string& data) {
    std::string header = header_dict;
    const std::size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::string out = std::string("\x93NUMPY\x01\x00", 8);
    out += static_cast<char>(header.size() & 0xFF);
    out += static_cast<char>(header.size() >> 8);
    return out + header + data;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
    std::string out;
    for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
    return out;
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
    std::string out;
    std::uint64_t n = header.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    return out + header + data;
}
}  // namespace

TEST(Npy, ReadsHandAssembledFiles) {
    auto p = temp_file("a.npy");
    write_bytes(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", raw<double>({1.5, -2, 3})));
    auto t = read_npy(p);
    EXPECT_EQ(t.dtype(), DType::float64);
    EXPECT_EQ(t.shape(), (Shape{3}));
    EXPECT_EQ(t.to_doubles(), (std::vector<double>{1.5, -2, 3}));
    write_bytes(p, npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }", raw<std::int64_t>({7, -9})));
    EXPECT_EQ(read_npy(p).to_doubles(), (std::vector<double>{7, -9}));
    write_bytes(p, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", raw<float>({0.25f})));
    EXPECT_EQ(read_npy(p).shape(), Shape{});
    EXPECT_EQ(read_npy(p).to_doubles(), std::vector<double>{0.25});
    write_bytes(p, npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (0, 4), }", ""));
    EXPECT_EQ(read_npy(p).numel(), 0);
    fs::remove(p);
}

TEST(Npy, ReadsTheNarrowDtypesOfAbi11) {
    auto p = temp_file("narrow.npy");
    write_bytes(p, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", raw<std::int32_t>({-7, 1 << 30})));
    EXPECT_EQ(read_npy(p).dtype(), DType::int32);
    EXPECT_EQ(read_npy(p).to_doubles(), (std::vector<double>{-7, 1 << 30}));
    write_bytes(p, npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x80\xff", 3)));
    EXPECT_EQ(read_npy(p).dtype(), DType::uint8);
    EXPECT_EQ(read_npy(p).to_doubles(), (std::vector<double>{0, 128, 255}));
    // float16 bits: 0x3c00 = 1, 0xc000 = -2, 0x7bff = 65504 (the largest), 0x0001 = 2^-24.
    write_bytes(p, npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }",
                             raw<std::uint16_t>({0x3c00, 0xc000, 0x7bff, 0x0001})));
    EXPECT_EQ(read_npy(p).dtype(), DType::float16);
    EXPECT_EQ(read_npy(p).to_doubles(), (std::vector<double>{1, -2, 65504, std::ldexp(1.0, -24)}));
    fs::remove(p);
}

TEST(Float16, ConversionsRoundToNearestEven) {
    // float16: 11-bit significands. 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1);
    // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties to the even 1 + 2^-9.
    EXPECT_EQ(float16_from_float(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
    EXPECT_EQ(float16_from_float(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
    EXPECT_EQ(float16_from_float(65504.0f), 0x7bff);
    EXPECT_EQ(float16_from_float(65520.0f), 0x7c00);  // halfway to 65536: rounds to infinity
    EXPECT_EQ(float16_from_float(-0.0f), 0x8000);
    EXPECT_TRUE(std::isnan(float16_to_float(float16_from_float(NAN))));
    EXPECT_EQ(float16_to_float(0x0001), std::ldexp(1.0f, -24));
    // Rounded once from double: 1 + 2^-11 + 2^-40 is above the tie (through float it would tie).
    EXPECT_EQ(float16_from_double(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
    // bfloat16: 8-bit significands. 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 to 1 + 2^-6.
    EXPECT_EQ(bfloat16_from_float(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    EXPECT_EQ(bfloat16_from_float(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
    EXPECT_EQ(bfloat16_from_float(-2.0f), 0xc000);
    EXPECT_EQ(bfloat16_to_float(0x3f81), 1.0f + std::ldexp(1.0f, -7));
    const std::uint16_t nan = bfloat16_from_float(NAN);
    EXPECT_TRUE(std::isnan(bfloat16_to_float(nan)));
    EXPECT_EQ(bfloat16_from_float(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
}

TEST(Npy, RoundTripsEveryDtype) {
    auto p = temp_file("rt.npy");
    for (auto d : all_values<DType>()) {
        auto t = Tensor::from_values(d, {2, 3}, {1, 0, 1, 1, 0, 1});
        if (d == DType::bfloat16) {  // numpy has no bfloat16: refused, nothing written
            fs::remove(p);
            EXPECT_TRUE(raises(ErrorCode::input, [&] { write_npy(p, t); }));
            EXPECT_FALSE(fs::exists(p));
            continue;
        }
        write_npy(p, t);
        EXPECT_TRUE(read_npy(p).bitwise_equal(t)) << to_string(d);
    }
    auto v = Tensor::from_values(DType::float32, {5}, {1, 2, 3, 4, 5});
    write_npy(p, v);
    EXPECT_TRUE(read_npy(p).bitwise_equal(v));
    fs::remove(p);
}

TEST(Npy, ReadsFilesWrittenByNumPy) {
    auto models = fs::path(CAPSULE_SOURCE_DIR) / ".." / "shared" / "models";
    auto file = models / "squeezenet1_1" / "input.npy";
    if (!fs::exists(file)) GTEST_SKIP() << "shared/models not present beside the checkout: " << file;
    auto t = read_npy(file);
    EXPECT_EQ(t.dtype(), DType::float32);
    EXPECT_EQ(t.shape(), (Shape{2, 3, 224, 224}));
    for (auto v : t.values<float>()) ASSERT_TRUE(std::isfinite(v));
}

TEST(Npy, MalformedFilesNameTheProblem) {
    auto p = temp_file("bad.npy");
    struct Case { std::string bytes; std::string expected; };
    const Case cases[] = {
        {"hello world", "not a .npy file (bad magic)"},
        {npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "abcdefgh"),
         "unsupported .npy dtype '<c8'; supported: <f4 (float32), <f8 (float64), <f2 (float16), <i8 (int64)"},
        {npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd"),
         "unsupported .npy dtype '>f4'"},
        {npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "abcd"),
         "Fortran-order .npy arrays are not supported"},
        {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "abcd"),
         "data holds 4 bytes, shape [3] of float32 needs 12"},
        {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (x,), }", "abcd"),
         "bad npy shape at offset"},
        {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "abcd"),
         "npy header has an unknown key 'extra'"},
        {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "abcd"),
         "malformed npy header"},
        {npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }", "\x07"),
         "bool array holds a byte other than 0 or 1"},
        {std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "truncated .npy header"},
        // A forged shape is compared with the bytes present before anything is allocated.
        {npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000, 3), }", "abcd"),
         "data holds 4 bytes, shape [100000000000, 3] of float64 needs 2400000000000"},
    };
    for (const auto& c : cases) {
        write_bytes(p, c.bytes);
        auto msg = error_of([&] { read_npy(p); });
        EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
        EXPECT_EQ(msg.rfind(p.string() + ": ", 0), 0u) << msg;
    }
    EXPECT_TRUE(raises(ErrorCode::input, [&] { read_npy("/nonexistent/x.npy"); }));
    // A 60 KB shape tuple is read by a linear scanner (no regex recursion): a clean error.
    std::string dims;
    for (int i = 0; i < 20000; ++i) dims += "1, ";
    write_bytes(p, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }", "abcd"));
    EXPECT_EQ(read_npy(p).shape().size(), 20000u);
    fs::remove(p);
}

TEST(Safetensors, ReadsHandAssembledFileAndRoundTrips) {
    auto p = temp_file("w.safetensors");
    write_bytes(p, safetensors_bytes(
                       R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "F64", "shape": [1], "data_offsets": [8, 16]}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                       raw<float>({1.0f, -2.5f}) + raw<double>({4.0})));
    auto m = read_safetensors(p);
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m.at("w").to_doubles(), (std::vector<double>{1.0, -2.5}));
    EXPECT_EQ(m.at("b").dtype(), DType::float64);
    write_safetensors(p, m);
    auto back = read_safetensors(p);
    EXPECT_TRUE(back.at("w").bitwise_equal(m.at("w")));
    EXPECT_TRUE(back.at("b").bitwise_equal(m.at("b")));
    fs::remove(p);
}

TEST(Safetensors, MalformedFilesNameTheProblem) {
    auto p = temp_file("bad.safetensors");
    struct Case { std::string bytes; std::string expected; };
    const Case cases[] = {
        {"abc", "too short for a safetensors header"},
        {safetensors_bytes(R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", "a"),
         "$.w.dtype: unsupported dtype 'F8_E4M3'; supported: F32, F64, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL"},
        {safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})", std::string(8, '\0')),
         "offsets cover 8 bytes, shape [4] of F32 needs 16"},
        {safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "abc"),
         "lie outside the 3-byte data section"},
        {safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "v": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})", std::string(8, '\0')),
         "tensors overlap in the data section"},
        {safetensors_bytes(R"({"w": )", ""), "malformed JSON"},
        {safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "offsets": [0, 4]}})", "abcd"),
         "$.w: unknown key 'offsets'"},
        {safetensors_bytes(R"({"b": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", std::string("\x02\x01\x00", 3)),
         "$.b.dtype: BOOL tensor holds a byte other than 0 or 1"},
        {safetensors_bytes(R"({"h": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 3]}})", "abc"),
         "offsets cover 3 bytes, shape [2] of BF16 needs 4"},
    };
    for (const auto& c : cases) {
        write_bytes(p, c.bytes);
        auto msg = error_of([&] { read_safetensors(p); });
        EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
    }
    std::string huge(8, '\xff');
    write_bytes(p, huge);
    EXPECT_NE(error_of([&] { read_safetensors(p); }).find("exceeds the file"), std::string::npos);
    fs::remove(p);
}
