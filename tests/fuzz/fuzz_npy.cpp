// libFuzzer target: the .npy reader (read_npy), through an in-memory file.
#include "capsule/tensor_io.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static capsule::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    capsule::fuzz::expect_only_capsule_errors([&] {
        const auto t = capsule::read_npy(path);
        capsule::fuzz::touch(t.data(), t.nbytes());
    });
    return 0;
}
