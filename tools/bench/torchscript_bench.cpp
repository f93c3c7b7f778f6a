// LibTorch running a TorchScript module directly (torch::jit::load), the peer of
// `capsule bench --profile libtorch_forward_cpu` in tools/bench_vs_torchscript.sh: the same model
// (tools/bench/torchscript_models.py writes it as TorchScript and as ONNX), input shape and
// intra-op thread count. Prints one timed run per line, in ms, after WARMUP untimed runs; with
// --check OUTPUT.npy instead, the largest absolute difference from that float32 array.
//
//   torchscript_bench MODEL.pt INPUT.npy THREADS WARMUP ITERATIONS
//   torchscript_bench MODEL.pt INPUT.npy THREADS --check OUTPUT.npy
//
// Built by the script with g++ against Debian's libtorch-dev; not part of the CMake build.
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

/// A float32 C-order .npy file (format versions 1 and 2) as a tensor; exits on anything else.
torch::Tensor read_npy(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char magic[8];
    if (!in.read(magic, 8) || std::string(magic + 1, 5) != "NUMPY") {
        std::cerr << path << ": not a .npy file\n";
        std::exit(2);
    }
    std::uint32_t header_size = 0;
    if (magic[6] == 1) {
        std::uint16_t n = 0;
        in.read(reinterpret_cast<char*>(&n), 2);
        header_size = n;
    } else {
        in.read(reinterpret_cast<char*>(&header_size), 4);
    }
    std::string header(header_size, ' ');
    in.read(header.data(), header_size);
    if (header.find("'descr': '<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos) {
        std::cerr << path << ": expected float32 C-order data, header " << header << "\n";
        std::exit(2);
    }
    std::vector<int64_t> shape;
    const auto open = header.find('(', header.find("'shape'"));
    const auto close = header.find(')', open);
    std::string dims = header.substr(open + 1, close - open - 1);
    for (std::size_t at = 0; at < dims.size();) {
        const auto comma = dims.find(',', at);
        const std::string d = dims.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (d.find_first_of("0123456789") != std::string::npos) shape.push_back(std::stoll(d));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    auto t = torch::empty(shape, torch::kFloat);
    in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(t.numel() * 4));
    if (!in) {
        std::cerr << path << ": truncated\n";
        std::exit(2);
    }
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 6) {
        std::cerr << "usage: torchscript_bench MODEL.pt INPUT.npy THREADS (WARMUP ITERATIONS | --check OUTPUT.npy)\n";
        return 2;
    }
    at::set_num_threads(std::stoi(argv[3]));
    torch::jit::Module loaded = torch::jit::load(argv[1]);
    loaded.eval();
    // torch.jit.optimize_for_inference's passes (MKL-DNN convolutions, fusions), as PyTorch's
    // deployment guide recommends for CPU inference.
    torch::jit::Module module = torch::jit::optimize_for_inference(loaded);
    const torch::Tensor input = read_npy(argv[2]);
    c10::InferenceMode inference;
    auto run = [&] { return module.forward({input}).toTensor(); };
    if (std::string(argv[4]) == "--check") {
        const auto want = read_npy(argv[5]);
        std::printf("%.3g\n", (run() - want).abs().max().item<float>());
        return 0;
    }
    const int warmup = std::stoi(argv[4]), iterations = std::stoi(argv[5]);
    for (int i = 0; i < warmup; ++i) run();
    for (int i = 0; i < iterations; ++i) {
        const auto start = std::chrono::steady_clock::now();
        run();
        const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
        std::printf("%.4f\n", ms.count());
    }
    return 0;
}
