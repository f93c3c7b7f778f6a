// The main job's parts: the IDX/gzip reader (hand-written files, corrupt ones), Debian's
// Fashion-MNIST files, the two models, PyTorch's default initialisation, accuracy, and the
// training loop's determinism and progress.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <unistd.h>

#include "capsule/training.hpp"
#include "capsule_fixtures.hpp"
#include "error_checks.hpp"

using namespace capsule;
using capsule_test::raises;
using namespace capsule::testing;
namespace fs = std::filesystem;

namespace {


fs::path temp_dir() {
    auto d = fs::temp_directory_path() / ("capsule-training-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
}

std::string idx_bytes(std::vector<unsigned> dims, const std::string& data, unsigned char type = 8) {
    std::string out{'\0', '\0', char(type), char(dims.size())};
    for (auto d : dims)
        for (int shift = 24; shift >= 0; shift -= 8) out += char((d >> shift) & 0xff);
    return out + data;
}

fs::path write_plain(const std::string& name, const std::string& bytes) {
    auto path = temp_dir() / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
}

fs::path write_gzip(const std::string& name, const std::string& bytes) {
    auto path = temp_dir() / name;
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
    return path;
}

TEST(Idx, ReadsGzipAndPlainFiles) {
    const std::string pixels{'\x01', '\x02', '\x03', '\xff', '\x00', '\x07'};
    for (const auto& path : {write_gzip("a.idx.gz", idx_bytes({2, 3}, pixels)),
                             write_plain("a.idx", idx_bytes({2, 3}, pixels))}) {
        auto a = read_idx(path);
        EXPECT_EQ(a.shape, (Shape{2, 3}));
        EXPECT_EQ(a.data, (std::vector<std::uint8_t>{1, 2, 3, 255, 0, 7}));
    }
}

TEST(Idx, BadFilesGetErrorsNamingTheFileAndTheProblem) {
    const auto dir = temp_dir();
    EXPECT_EQ(error_of([&] { read_idx(dir / "missing-images-idx3-ubyte.gz"); }),
              (dir / "missing-images-idx3-ubyte.gz").string() +
                  ": no such file (Fashion-MNIST comes from Debian's dataset-fashion-mnist package: "
                  "apt-get install dataset-fashion-mnist)");
    auto p = write_gzip("magic.gz", "\x01\x02\x08\x01");
    EXPECT_EQ(error_of([&] { read_idx(p); }), p.string() + ": not an IDX file (magic bytes 1 2, expected 0 0)");
    p = write_gzip("type.gz", idx_bytes({1}, "x", 0x0d));
    EXPECT_EQ(error_of([&] { read_idx(p); }),
              p.string() + ": IDX element type 0x0d is not supported (only unsigned bytes, 0x08)");
    p = write_gzip("short.gz", idx_bytes({4, 4}, "abc"));
    EXPECT_EQ(error_of([&] { read_idx(p); }), p.string() + ": truncated data (3 of 16 bytes)");
    p = write_gzip("long.gz", idx_bytes({2}, "abc"));
    EXPECT_EQ(error_of([&] { read_idx(p); }), p.string() + ": bytes after the 2 the IDX header declares");
    p = write_gzip("huge.gz", idx_bytes({65536, 65536}, ""));
    EXPECT_EQ(error_of([&] { read_idx(p); }),
              p.string() + ": IDX header declares shape [65536, 65536], more than 2 GiB of data");
    // (2^32-1)^3 elements: more than 2^63-1, the product must not wrap to a small count.
    p = write_gzip("wrap.gz", idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, ""));
    EXPECT_EQ(error_of([&] { read_idx(p); }),
              p.string() + ": IDX header declares shape [4294967295, 4294967295, 4294967295], "
                           "more than 2 GiB of data");
    // A gzip header followed by garbage: zlib reports the corruption.
    p = write_plain("corrupt.gz", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + "garbage-garbage");
    EXPECT_NE(error_of([&] { read_idx(p); }).find(p.string() + ": corrupt gzip data ("), std::string::npos);
}

TEST(FashionMnist, DebianFilesHaveTheDocumentedShapeAndBalancedClasses) {
    ASSERT_TRUE(fs::exists(kDefaultFashionMnistDir / "t10k-labels-idx1-ubyte.gz"))
        << "tools/setup.sh installs Debian's dataset-fashion-mnist";
    for (auto [split, n] : {std::pair{"train", 60000}, std::pair{"t10k", 10000}}) {
        auto data = load_fashion_mnist(kDefaultFashionMnistDir, split);
        EXPECT_EQ(data.images.shape(), (Shape{n, 1, 28, 28}));
        EXPECT_EQ(data.labels.shape(), (Shape{n}));
        std::vector<int> per_class(10, 0);
        for (auto l : data.labels.values<std::int64_t>()) ++per_class.at(std::size_t(l));
        for (auto c : per_class) EXPECT_EQ(c, n / 10) << split;  // the dataset is balanced
        auto [lo, hi] = std::minmax_element(data.images.values<float>().begin(), data.images.values<float>().end());
        EXPECT_EQ(*lo, 0.0f);
        EXPECT_EQ(*hi, 1.0f);
    }
    EXPECT_EQ(error_of([] { load_fashion_mnist(kDefaultFashionMnistDir, "val"); }),
              "unknown Fashion-MNIST split 'val'; valid: train, t10k");
}

TEST(FashionMnist, MismatchedImagesAndLabelsAreRefused) {
    const auto dir = temp_dir() / "mismatch";
    fs::create_directories(dir);
    std::rename(write_gzip("i.gz", idx_bytes({2, 28, 28}, std::string(2 * 784, '\0'))).c_str(),
                (dir / "t10k-images-idx3-ubyte.gz").c_str());
    std::rename(write_gzip("l.gz", idx_bytes({3}, "\x01\x02\x03")).c_str(), (dir / "t10k-labels-idx1-ubyte.gz").c_str());
    EXPECT_EQ(error_of([&] { load_fashion_mnist(dir, "t10k"); }),
              (dir / "t10k-labels-idx1-ubyte.gz").string() + ": [3] labels for 2 images");
    std::rename(write_gzip("l.gz", idx_bytes({2}, "\x01\x0c")).c_str(), (dir / "t10k-labels-idx1-ubyte.gz").c_str());
    EXPECT_EQ(error_of([&] { load_fashion_mnist(dir, "t10k"); }),
              (dir / "t10k-labels-idx1-ubyte.gz").string() + ": label 12 of image 1 is not a class in [0, 10)");
}

std::int64_t parameter_count(const ParameterMap& params) {
    std::int64_t n = 0;
    for (const auto& [key, t] : params) n += t.numel();
    return n;
}

TEST(Models, ShapesAndParameterCounts) {
    auto mlp = model_graph(ModelKind::mlp, 8);
    EXPECT_EQ(mlp.nodes.back().shape, (Shape{8, 10}));
    // 784·256 + 256 + 256·256 + 256 + 256·10 + 10
    EXPECT_EQ(parameter_count(initial_parameters(mlp, 0)), 269322);
    auto lenet = model_graph(ModelKind::lenet, 8);
    EXPECT_EQ(lenet.nodes.back().shape, (Shape{8, 10}));
    // LeNet-5's classic count: 156 + 2416 + 48120 + 10164 + 850
    EXPECT_EQ(parameter_count(initial_parameters(lenet, 0)), 61706);
    auto training = training_graph(lenet);
    EXPECT_EQ(training.nodes.back().op, BackendOp::cross_entropy);
    EXPECT_EQ(training.nodes.back().shape, Shape{});
    EXPECT_EQ(error_of([] { parse_model_kind("resnet"); }), "unknown model 'resnet'; valid: mlp, lenet");
}

// nn.Linear / nn.Conv2d reset_parameters: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
TEST(Models, InitialisationFollowsPyTorchAndTheSeed) {
    auto lenet = model_graph(ModelKind::lenet, 1);
    auto a = initial_parameters(lenet, 7), b = initial_parameters(lenet, 7), c = initial_parameters(lenet, 8);
    const std::map<std::string, double> fan_in{{"conv1", 25}, {"conv2", 150}, {"fc1", 400}, {"fc2", 120}, {"fc3", 84}};
    for (const auto& [key, t] : a) {
        EXPECT_TRUE(t.bitwise_equal(b.at(key))) << key;
        EXPECT_FALSE(t.bitwise_equal(c.at(key))) << key;
        const double bound = 1 / std::sqrt(fan_in.at(key.substr(0, key.find('.'))));
        double lo = 0, hi = 0;
        for (auto v : t.to_doubles()) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
        EXPECT_LE(hi, bound) << key;
        EXPECT_GE(lo, -bound) << key;
        if (t.numel() > 1000) {  // spread over the whole interval
            EXPECT_GT(hi, 0.95 * bound) << key;
            EXPECT_LT(lo, -0.95 * bound) << key;
        }
    }
}

const ImageDataset& test_set() {
    static const auto data = load_fashion_mnist(kDefaultFashionMnistDir, "t10k");
    return data;
}

// A model whose only non-zero parameter is fc3.bias[3] predicts class 3 for every image, so its
// accuracy is the share of label 3, counted here directly; 1000 images in batches of 64 leave a
// padded last batch of 40.
TEST(Training, AccuracyCountsArgMaxHitsIncludingAPaddedLastBatch) {
    const auto& profile = find_builtin_profile("checked_cpu");
    auto model = model_graph(ModelKind::mlp, 64);
    auto params = initial_parameters(model, 0);
    for (auto& [key, t] : params) std::memset(t.data(), 0, t.nbytes());
    params.at("fc3.bias").values<float>()[3] = 1;
    auto accepted = profile.accept_graph(built_host(), model);
    ASSERT_TRUE(accepted.accepted);
    auto session = Session::create(profile, *accepted.accepted, model, built_host(), params);
    auto data = take_first(test_set(), 1000);
    int threes = 0;
    for (auto l : data.labels.values<std::int64_t>()) threes += l == 3;
    EXPECT_DOUBLE_EQ(accuracy(session, data), threes / 1000.0);

    // A graph whose output is not the 10 class scores is refused, not scored.
    model.outputs = {model.nodes[3].id};  // relu(fc1): 256 features
    auto features = profile.accept_graph(built_host(), model);
    ASSERT_TRUE(features.accepted);
    auto wrong = Session::create(profile, *features.accepted, model, built_host(), params);
    EXPECT_EQ(error_of([&] { accuracy(wrong, data); }),
              "the model's output 'output_3' is float32[64, 256], expected logits [64, 10]");
}

TEST(Training, SameSeedGivesBitIdenticalParametersAndLossFalls) {
    const auto& profile = find_builtin_profile("checked_cpu");
    const auto train = take_first(load_fashion_mnist(kDefaultFashionMnistDir, "train"), 1024);
    TrainingConfig config{64, SgdOptions{.lr = 0.05, .momentum = 0.9}, 3};
    auto run = [&](std::uint64_t seed, std::vector<double>* losses) {
        config.seed = seed;
        auto plans = plan_training(profile, built_host(), ModelKind::mlp, config);
        EXPECT_TRUE(plans.accepted());
        auto trainer = Trainer::create(profile, built_host(), plans, config);
        std::int64_t calls = 0;
        for (int epoch = 0; epoch < 2; ++epoch) {
            auto r = trainer.train_epoch(train, [&](std::int64_t done, std::int64_t total, double) {
                EXPECT_EQ(total, 16);
                EXPECT_EQ(done, ++calls - 16 * epoch);
            });
            EXPECT_EQ(r.steps, 16);
            if (losses) losses->push_back(r.train_loss);
        }
        return trainer.parameters();
    };
    std::vector<double> losses;
    auto a = run(3, &losses), b = run(3, nullptr), c = run(4, nullptr);
    for (const auto& [key, t] : a) {
        EXPECT_TRUE(t.bitwise_equal(b.at(key))) << key;
        EXPECT_FALSE(t.bitwise_equal(c.at(key))) << key;
    }
    ASSERT_EQ(losses.size(), 2u);
    EXPECT_LT(losses[1], losses[0]);
    EXPECT_LT(losses[0], std::log(10.0));  // below chance level (uniform logits) after one epoch
}

TEST(Training, InferenceOnlyProfilesCannotTrain) {
    auto profile = BackendProfile::checked_cpu();
    profile.name = "inference_cpu";
    profile.config.vjp_mode = VJPMode::none;
    TrainingConfig config;
    auto plans = plan_training(profile, built_host(), ModelKind::mlp, config);
    ASSERT_TRUE(plans.accepted());
    EXPECT_EQ(error_of([&] { Trainer::create(profile, built_host(), plans, config); }),
              "profile inference_cpu has VJP mode none (inference only): backward is refused; use a "
              "profile whose VJP mode is torchlean-tape or backend-vjp");
    EXPECT_TRUE(raises(ErrorCode::other, [&] { Trainer::create(profile, built_host(), plans, config); }));
    EXPECT_EQ(error_of([] { model_graph(ModelKind::mlp, 0); }), "batch size 0 must be >= 1");
}

}  // namespace
