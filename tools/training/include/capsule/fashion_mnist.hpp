// The Fashion-MNIST dataset (Xiao, Rasul, Vollgraf 2017: 28x28 grey-scale images of 10 clothing
// classes; 60,000 for training, 10,000 for testing) as shipped by Debian's
// `dataset-fashion-mnist` package: IDX files (LeCun's MNIST format), gzip-compressed, under
// /usr/share/datasets/fashion-mnist.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "capsule/tensor.hpp"

namespace capsule {

/// Where Debian's dataset-fashion-mnist installs the files.
inline const std::filesystem::path kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// An IDX array of unsigned bytes (type code 0x08): row-major `data` with `shape`.
struct IdxArray {
    Shape shape;
    std::vector<std::uint8_t> data;
};

/// Reads an IDX file: magic 0x00 0x00 0x08 <rank>, `rank` big-endian uint32 dimensions, then the
/// bytes. The file may be gzip-compressed or plain (read through zlib). Raises Error(input) naming
/// the file when it is missing or unreadable, not valid gzip, has another magic or element type,
/// is shorter than its header says, or has bytes after the data.
IdxArray read_idx(const std::filesystem::path& path);

/// Images and labels of one split.
struct ImageDataset {
    Tensor images;  ///< float32 [N, 1, 28, 28], pixel / 255 (so in [0, 1]), NCHW
    Tensor labels;  ///< int64 [N], class index in [0, 10)
    std::int64_t size() const { return labels.numel(); }
};

/// The first `n` images and labels of `data` (a copy); all of them when n <= 0 or n >= size.
ImageDataset take_first(const ImageDataset& data, std::int64_t n);

/// Loads split `train` (60,000) or `t10k` (10,000) from `dir`:
/// `<split>-images-idx3-ubyte.gz` ([N, 28, 28]) and `<split>-labels-idx1-ubyte.gz` ([N]).
/// Raises Error(input) for an unknown split, a missing file (naming the package that provides
/// it), images that are not 28x28, image and label counts that differ, or a label outside
/// [0, 10).
ImageDataset load_fashion_mnist(const std::filesystem::path& dir, std::string_view split);

/// The ten class names, by label.
const std::vector<std::string_view>& fashion_mnist_classes();

}  // namespace capsule
