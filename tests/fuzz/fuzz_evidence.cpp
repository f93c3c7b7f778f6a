// libFuzzer target: evidence records (parse_evidence_record), which the `verified` policy reads
// from disk, and the JSON round trip of an accepted record (same results, same id).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "capsule/evidence.hpp"
#include "fuzz_common.hpp"

using namespace capsule;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::expect_only_capsule_errors([&] {
        const auto record =
            parse_evidence_record(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.evidence.json");
        const auto text = evidence_record_to_json(record).dump();
        const auto again = parse_evidence_record(text, "round-trip.evidence.json");
        if (again.id() != record.id() || evidence_record_to_json(again).dump() != text) {
            std::fprintf(stderr, "fuzz: evidence_record_to_json does not round-trip:\n%s\n", text.c_str());
            std::abort();
        }
    });
    return 0;
}
