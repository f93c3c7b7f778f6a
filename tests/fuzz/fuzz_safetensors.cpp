// libFuzzer target: the safetensors reader (read_safetensors), through an in-memory file.
#include "capsule/tensor_io.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static capsule::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    capsule::fuzz::expect_only_capsule_errors([&] {
        for (const auto& [name, t] : capsule::read_safetensors(path))
            capsule::fuzz::touch(t.data(), t.nbytes());
    });
    return 0;
}
