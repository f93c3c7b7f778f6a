// libFuzzer target: the IDX reader (read_idx; plain or gzip-compressed), through an in-memory file.
#include "capsule/fashion_mnist.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static capsule::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    capsule::fuzz::expect_only_capsule_errors([&] {
        const auto idx = capsule::read_idx(path);
        if (idx.shape.empty()) std::abort();
        std::uint64_t count = 1;
        for (auto d : idx.shape) count *= static_cast<std::uint64_t>(d);
        if (count != idx.data.size()) std::abort();
    });
    return 0;
}
