// Checks that a call raises capsule::Error with a given code (and message), for the tests.
#pragma once

#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "capsule/error.hpp"

namespace capsule_test {

/// Success when `call()` raises capsule::Error with `code` and, when `substring` is not empty, a
/// message containing it; the failure names what happened instead.
/// `EXPECT_TRUE(raises(ErrorCode::input, [&] { read_npy(path); }, "no such file"));`
template <typename Call>
::testing::AssertionResult raises(capsule::ErrorCode code, Call&& call, std::string_view substring = {}) {
    try {
        call();
    } catch (const capsule::Error& e) {
        if (e.code() != code)
            return ::testing::AssertionFailure() << "raised Error(" << capsule::to_string(e.code()) << "), expected Error("
                                               << capsule::to_string(code) << "): " << e.what();
        if (std::string(e.what()).find(substring) == std::string::npos)
            return ::testing::AssertionFailure() << "Error(" << capsule::to_string(code) << ") message lacks '"
                                               << substring << "': " << e.what();
        return ::testing::AssertionSuccess();
    } catch (const std::exception& e) {
        return ::testing::AssertionFailure() << "raised a non-capsule exception: " << e.what();
    }
    return ::testing::AssertionFailure() << "raised nothing, expected Error(" << capsule::to_string(code) << ")";
}

}  // namespace capsule_test
