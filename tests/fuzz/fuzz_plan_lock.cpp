// libFuzzer target: plan lockfiles (parse_plan_lock), read by `capsule run --lock`, their JSON
// round trip, and the diff of a lock against itself (empty) and against an empty plan.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "capsule/plan_lock.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        const auto lock = parse_plan_lock(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.lock.json");
        const auto text = plan_lock_to_json(lock).dump();
        const auto again = parse_plan_lock(text, "round-trip.lock.json");
        if (!plan_lock_diff(lock, again).empty() || plan_lock_to_json(again).dump() != text) {
            std::fprintf(stderr, "fuzz: plan_lock_to_json does not round-trip:\n%s\n", text.c_str());
            std::abort();
        }
        PlanLock empty;
        (void)plan_lock_diff(lock, empty);
    });
    return 0;
}
