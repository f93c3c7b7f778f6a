#include "capsule/fashion_mnist.hpp"

#include <zlib.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>

#include "capsule/error.hpp"

namespace capsule {

using std::string;

namespace {

/// A gzip (or plain) file read through zlib; closed on destruction.
class GzFile {
public:
    explicit GzFile(const std::filesystem::path& path) : path_(path) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec))
            throw Error(ErrorCode::input, path.string() + ": no such file" +
                             (path.string().find("idx") != string::npos
                                  ? " (Fashion-MNIST comes from Debian's dataset-fashion-mnist "
                                    "package: apt-get install dataset-fashion-mnist)"
                                  : string()));
        file_ = gzopen(path.c_str(), "rb");
        if (!file_) throw Error(ErrorCode::input, path.string() + ": cannot open for reading");
    }
    ~GzFile() { gzclose(file_); }
    GzFile(const GzFile&) = delete;
    GzFile& operator=(const GzFile&) = delete;

    /// Reads up to `n` bytes; returns how many were read. Raises Error(input) on a zlib error.
    std::size_t read(void* out, std::size_t n) {
        std::size_t total = 0;
        auto* bytes = static_cast<unsigned char*>(out);
        while (total < n) {
            const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - total, 1u << 30));
            const int got = gzread(file_, bytes + total, chunk);
            if (got < 0) {
                int code = 0;
                const char* message = gzerror(file_, &code);
                throw Error(ErrorCode::input, path_.string() + ": corrupt gzip data (" + message + ")");
            }
            if (got == 0) break;
            total += static_cast<std::size_t>(got);
        }
        return total;
    }

    /// Reads exactly `n` bytes or raises Error(input) saying what was cut short.
    void read_exact(void* out, std::size_t n, const string& what) {
        const auto got = read(out, n);
        if (got != n)
            throw Error(ErrorCode::input, path_.string() + ": truncated " + what + " (" + std::to_string(got) +
                             " of " + std::to_string(n) + " bytes)");
    }

private:
    std::filesystem::path path_;
    gzFile file_ = nullptr;
};

// 2 GiB is far above any IDX dataset here and keeps a forged header from allocating the machine.
constexpr std::uint64_t kMaxIdxBytes = std::uint64_t(1) << 31;

}  // namespace

IdxArray read_idx(const std::filesystem::path& path) {
    GzFile file(path);
    std::array<unsigned char, 4> magic{};
    file.read_exact(magic.data(), 4, "header");
    if (magic[0] != 0 || magic[1] != 0)
        throw Error(ErrorCode::input, path.string() + ": not an IDX file (magic bytes " + std::to_string(magic[0]) +
                         " " + std::to_string(magic[1]) + ", expected 0 0)");
    if (magic[2] != 0x08) {
        char type[8];
        std::snprintf(type, sizeof type, "0x%02x", magic[2]);
        throw Error(ErrorCode::input, path.string() + ": IDX element type " + type +
                         " is not supported (only unsigned bytes, 0x08)");
    }
    const int rank = magic[3];
    if (rank < 1) throw Error(ErrorCode::input, path.string() + ": IDX rank 0");
    IdxArray out;
    for (int d = 0; d < rank; ++d) {
        std::array<unsigned char, 4> be{};
        file.read_exact(be.data(), 4, "header");
        const std::uint64_t dim = (std::uint64_t(be[0]) << 24) | (std::uint64_t(be[1]) << 16) |
                                  (std::uint64_t(be[2]) << 8) | std::uint64_t(be[3]);
        out.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto elements = try_element_count(out.shape);  // one byte each
    if (!elements || static_cast<std::uint64_t>(*elements) > kMaxIdxBytes)
        throw Error(ErrorCode::input, path.string() + ": IDX header declares shape " + to_string(out.shape) +
                         ", more than 2 GiB of data");
    const auto count = static_cast<std::size_t>(*elements);
    // Read in chunks that start small and double (up to 16 MiB), so that memory follows the bytes
    // actually present, not a forged header: a 20-byte file claiming 2 GiB allocates 64 KiB.
    constexpr std::size_t kMaxChunk = std::size_t(1) << 24;
    std::size_t chunk = std::size_t(1) << 16;
    while (out.data.size() < count) {
        const std::size_t have = out.data.size(), want = std::min<std::size_t>(chunk, count - have);
        chunk = std::min(chunk * 2, kMaxChunk);
        out.data.resize(have + want);
        const std::size_t got = file.read(out.data.data() + have, want);
        out.data.resize(have + got);
        if (got < want)
            throw Error(ErrorCode::input, path.string() + ": truncated data (" + std::to_string(out.data.size()) +
                             " of " + std::to_string(count) + " bytes)");
    }
    unsigned char extra = 0;
    if (file.read(&extra, 1) != 0)
        throw Error(ErrorCode::input, path.string() + ": bytes after the " + std::to_string(count) +
                         " the IDX header declares");
    return out;
}

const std::vector<std::string_view>& fashion_mnist_classes() {
    static const std::vector<std::string_view> names{"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                     "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                                                     "Ankle boot"};
    return names;
}

ImageDataset take_first(const ImageDataset& data, std::int64_t n) {
    if (n <= 0 || n >= data.size()) return data;
    Shape image_shape = data.images.shape();
    image_shape[0] = n;
    ImageDataset out{Tensor::zeros(DType::float32, image_shape), Tensor::zeros(DType::int64, {n})};
    std::memcpy(out.images.data(), data.images.data(), out.images.nbytes());
    std::memcpy(out.labels.data(), data.labels.data(), out.labels.nbytes());
    return out;
}

ImageDataset load_fashion_mnist(const std::filesystem::path& dir, std::string_view split) {
    if (split != "train" && split != "t10k")
        throw Error(ErrorCode::input, "unknown Fashion-MNIST split '" + string(split) + "'; valid: train, t10k");
    const auto images_path = dir / (string(split) + "-images-idx3-ubyte.gz");
    const auto labels_path = dir / (string(split) + "-labels-idx1-ubyte.gz");
    const auto images = read_idx(images_path);
    const auto labels = read_idx(labels_path);
    if (images.shape.size() != 3 || images.shape[1] != 28 || images.shape[2] != 28)
        throw Error(ErrorCode::input, images_path.string() + ": expected [N, 28, 28] images, got " +
                         to_string(images.shape));
    if (labels.shape.size() != 1 || labels.shape[0] != images.shape[0])
        throw Error(ErrorCode::input, labels_path.string() + ": " + to_string(labels.shape) + " labels for " +
                         std::to_string(images.shape[0]) + " images");
    const std::int64_t n = images.shape[0];
    ImageDataset out;
    out.images = Tensor::zeros(DType::float32, {n, 1, 28, 28});
    out.labels = Tensor::zeros(DType::int64, {n});
    auto pixels = out.images.values<float>();
    for (std::size_t i = 0; i < images.data.size(); ++i) pixels[i] = float(images.data[i]) / 255.0f;
    auto classes = out.labels.values<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
        const auto label = labels.data[std::size_t(i)];
        if (label >= 10)
            throw Error(ErrorCode::input, labels_path.string() + ": label " + std::to_string(label) + " of image " +
                             std::to_string(i) + " is not a class in [0, 10)");
        classes[std::size_t(i)] = label;
    }
    return out;
}

}  // namespace capsule
