// libFuzzer target: backend profile documents (profile_from_json) and the JSON round trip of an
// accepted profile.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "capsule/profile.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        const auto profile =
            profile_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-profile.json");
        const auto text = profile_to_json(profile).dump();
        const auto again = profile_from_json(text, "round-trip.json");
        if (!(again == profile)) {
            std::fprintf(stderr, "fuzz: profile_to_json does not round-trip:\n%s\n---\n%s\n", text.c_str(),
                         profile_to_json(again).dump().c_str());
            std::abort();
        }
    });
    return 0;
}
