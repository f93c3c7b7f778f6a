// capsule::Error: one type whose code is, numerically, the `capsule` tool's exit code.
#include <gtest/gtest.h>

#include <type_traits>

#include "capsule/error.hpp"
#include "capsule/vocabulary.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;

namespace {

// DESIGN.md section 7: 1 anything else, 2 usage or bad input, 3 planning failed, 4 gate rejected,
// 5 runtime probe failed.
TEST(Error, CodeValuesAreTheCliExitCodes) {
    static_assert(std::is_same_v<std::underlying_type_t<ErrorCode>, int>);
    EXPECT_EQ(static_cast<int>(ErrorCode::other), 1);
    EXPECT_EQ(static_cast<int>(ErrorCode::input), 2);
    EXPECT_EQ(static_cast<int>(ErrorCode::planning), 3);
    EXPECT_EQ(static_cast<int>(ErrorCode::gate), 4);
    EXPECT_EQ(static_cast<int>(ErrorCode::probe), 5);
}

TEST(Error, CodeNames) {
    EXPECT_STREQ(to_string(ErrorCode::other), "other");
    EXPECT_STREQ(to_string(ErrorCode::input), "input");
    EXPECT_STREQ(to_string(ErrorCode::planning), "planning");
    EXPECT_STREQ(to_string(ErrorCode::gate), "gate");
    EXPECT_STREQ(to_string(ErrorCode::probe), "probe");
}

TEST(Error, CarriesCodeAndMessage) {
    const Error e(ErrorCode::probe, "plugin x cannot run on this machine: no device");
    EXPECT_EQ(e.code(), ErrorCode::probe);
    EXPECT_STREQ(e.what(), "plugin x cannot run on this machine: no device");
    const std::runtime_error& base = e;  // callers that only know std:: exceptions keep the message
    EXPECT_STREQ(base.what(), e.what());
}

TEST(Error, VocabularyRefusalsAreInputErrors) {
    EXPECT_TRUE(raises(ErrorCode::input, [] { parse<Device>("gpu0"); }, "unknown device 'gpu0'; valid: cpu"));
}

TEST(Error, RaisesReportsTheWrongCodeOrNoError) {
    EXPECT_FALSE(raises(ErrorCode::input, [] { throw Error(ErrorCode::planning, "p"); }));
    EXPECT_FALSE(raises(ErrorCode::input, [] { throw Error(ErrorCode::input, "abc"); }, "xyz"));
    EXPECT_FALSE(raises(ErrorCode::input, [] {}));
    EXPECT_FALSE(raises(ErrorCode::input, [] { throw std::runtime_error("plain"); }));
}

}  // namespace
