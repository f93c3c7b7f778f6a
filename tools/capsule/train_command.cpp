// `capsule train` and `capsule eval`: Fashion-MNIST training and evaluation under a backend
// profile (the main job). Training plans and gates the training graph, the optimizer step and
// the inference graph, prints the plan report, trains with a progress bar (plain lines when
// stdout is not a terminal), and saves the model as JSON IR + safetensors for `capsule run`.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <iostream>

#include "capsule/report.hpp"
#include "capsule/tensor_io.hpp"
#include "capsule/training.hpp"
#include "context.hpp"

namespace capsule::cli {

namespace {

struct TrainArgs {
    std::string profile = "checked_cpu";
    std::string model = "mlp";
    int epochs = 5;
    std::int64_t batch_size = 64;
    std::string optimizer = "sgd";
    std::optional<double> lr;
    double momentum = 0.9;
    double weight_decay = 0;
    std::uint64_t seed = 0;
    std::string data = kDefaultFashionMnistDir.string();
    std::string output = "fashion_mnist_model.json";
    std::int64_t train_limit = 0;
};

struct EvalArgs {
    std::string profile = "checked_cpu";
    std::string model;
    std::string data = kDefaultFashionMnistDir.string();
};

OptimizerOptions optimizer_options(const TrainArgs& a) {
    if (a.optimizer == "sgd")
        return SgdOptions{.lr = a.lr.value_or(0.05), .momentum = a.momentum, .weight_decay = a.weight_decay};
    return AdamOptions{.lr = a.lr.value_or(1e-3), .weight_decay = a.weight_decay};
}

/// A progress bar redrawn in place on a terminal; otherwise a plain line every 10%.
class Progress {
public:
    Progress(int epoch, int epochs) : epoch_(epoch), epochs_(epochs), tty_(::isatty(STDOUT_FILENO)) {}

    void operator()(std::int64_t done, std::int64_t total, double loss) {
        const int percent = int(100 * done / total);
        if (tty_) {
            if (percent == last_ && done != total) return;
            constexpr int kWidth = 30;
            const int filled = int(kWidth * done / total);
            std::printf("\repoch %d/%d [%s%s] %3d%% %lld/%lld loss %.4f", epoch_, epochs_,
                        std::string(std::size_t(filled), '=').c_str(),
                        std::string(std::size_t(kWidth - filled), ' ').c_str(), percent,
                        static_cast<long long>(done), static_cast<long long>(total), loss);
            if (done == total) std::printf("\n");
            std::fflush(stdout);
        } else if (percent / 10 != last_ / 10 || done == total) {
            std::printf("epoch %d/%d: %3d%% (%lld/%lld batches) running loss %.4f\n", epoch_, epochs_,
                        percent, static_cast<long long>(done), static_cast<long long>(total), loss);
            std::fflush(stdout);
        }
        last_ = percent;
    }

private:
    int epoch_, epochs_;
    bool tty_;
    int last_ = -1;
};

/// Checks, before any training, that `out` names a file whose directory exists (or can be
/// created) and accepts new files; raises Error(input) with the reason otherwise.
void check_output_path(const std::filesystem::path& out) {
    namespace fs = std::filesystem;
    if (out.empty() || !out.has_filename() || fs::is_directory(out))
        throw Error(ErrorCode::input, "--output '" + out.string() + "' must name a model file, e.g. model.json");
    std::error_code ec;
    if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
    if (ec) throw Error(ErrorCode::input, "--output: cannot create directory " + out.parent_path().string() + ": " + ec.message());
    const auto probe = fs::path(out).concat(".capsule-write-test");
    if (!std::ofstream(probe)) throw Error(ErrorCode::input, "--output: cannot write files next to " + out.string() + ": " + std::strerror(errno));
    fs::remove(probe, ec);
}

/// Writes `model` with its parameters beside it: `out.json` + `out.safetensors`.
void save_model(const Graph& model, const ParameterMap& params, const std::filesystem::path& out) {
    auto weights = out;
    weights.replace_extension(".safetensors");
    Graph graph = model;
    graph.parameters = weights.filename().string();
    if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
    write_safetensors(weights, params);
    std::ofstream file(out);
    file << graph_to_json(graph);
    if (!file.flush()) throw Error(ErrorCode::input, "cannot write " + out.string());
    std::cout << "saved " << out.string() << " and " << weights.string() << "\n";
}

std::string percent(double fraction) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f%%", 100 * fraction);
    return text;
}

}  // namespace

Command add_train_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("train", "train a Fashion-MNIST model (mlp or lenet) under a profile");
    auto args = std::make_shared<TrainArgs>();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")->capture_default_str();
    sub->add_option("--model", args->model, "mlp (784-256-256-10) or lenet (LeNet-5)")
        ->check(CLI::IsMember({"mlp", "lenet"}))->capture_default_str();
    sub->add_option("--epochs", args->epochs, "passes over the training set")->check(CLI::Range(1, 1000000))->capture_default_str();
    sub->add_option("--batch-size", args->batch_size, "images per step")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))->capture_default_str();
    sub->add_option("--optimizer", args->optimizer, "sgd (torch.optim.SGD) or adam (torch.optim.Adam)")
        ->check(CLI::IsMember({"sgd", "adam"}))->capture_default_str();
    // Finite and non-negative, as torch.optim requires; checked before any data is read.
    const auto rate = CLI::Range(0.0, 1e9);
    sub->add_option("--lr", args->lr, "learning rate (default 0.05 for sgd, 0.001 for adam)")->check(rate);
    sub->add_option("--momentum", args->momentum, "sgd momentum")->check(rate)->capture_default_str();
    sub->add_option("--weight-decay", args->weight_decay, "L2 weight decay")->check(rate)->capture_default_str();
    sub->add_option("--seed", args->seed, "seed of initialisation and shuffling")->capture_default_str();
    sub->add_option("--data", args->data, "directory of the Fashion-MNIST idx .gz files")->capture_default_str();
    sub->add_option("--output", args->output, "model file to write (JSON IR; weights beside it as .safetensors)")
        ->capture_default_str();
    sub->add_option("--train-limit", args->train_limit, "train on the first N images only (0: all)")
        ->check(CLI::NonNegativeNumber)->capture_default_str();
    return [&options, args]() {
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        check_output_path(args->output);
        for (auto [name, value] : {std::pair{"--lr", args->lr.value_or(0)}, std::pair{"--momentum", args->momentum},
                                   std::pair{"--weight-decay", args->weight_decay}})
            if (!std::isfinite(value)) throw Error(ErrorCode::input, std::string(name) + " must be a finite number");
        TrainingConfig config{args->batch_size, optimizer_options(*args), args->seed};
        const auto plans = plan_training(profile, ctx.host(), parse_model_kind(args->model), config);
        std::cout << "training graph (" << args->model << ", batch " << args->batch_size << "):\n"
                  << gate_report(profile, plans.training_plan.gate, false)
                  << "optimizer step:\n" << gate_report(profile, plans.optimizer_plan.gate, false)
                  << "inference graph:\n" << gate_report(profile, plans.inference_plan.gate, false);
        if (!plans.accepted()) return int(kGateRejected);
        auto trainer = Trainer::create(profile, ctx.host(), plans, config);
        const auto train = take_first(load_fashion_mnist(args->data, "train"), args->train_limit);
        const auto test = load_fashion_mnist(args->data, "t10k");
        std::cout << "training on " << train.size() << " images, testing on " << test.size() << "\n";
        double accuracy = 0;
        for (int epoch = 1; epoch <= args->epochs; ++epoch) {
            Progress progress(epoch, args->epochs);
            const auto result = trainer.train_epoch(train, std::ref(progress));
            const auto eval_start = std::chrono::steady_clock::now();
            accuracy = trainer.evaluate(test);
            const std::chrono::duration<double> eval = std::chrono::steady_clock::now() - eval_start;
            std::printf("epoch %d/%d: train loss %.4f, test accuracy %s, %.1f s training (%lld steps), %.1f s testing\n",
                        epoch, args->epochs, result.train_loss, percent(accuracy).c_str(),
                        result.train_seconds, static_cast<long long>(result.steps), eval.count());
            std::fflush(stdout);
        }
        save_model(trainer.model(), trainer.parameters(), args->output);
        std::cout << "test accuracy: " << percent(accuracy) << "\n";
        return int(kOk);
    };
}

Command add_eval_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("eval", "report a saved model's Fashion-MNIST test accuracy");
    auto args = std::make_shared<EvalArgs>();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")->capture_default_str();
    sub->add_option("model", args->model, "JSON IR model written by `capsule train`")->required();
    sub->add_option("--data", args->data, "directory of the Fashion-MNIST idx .gz files")->capture_default_str();
    return [&options, args]() {
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        const Graph graph = load_graph(args->model);
        const auto test = load_fashion_mnist(args->data, "t10k");
        auto result = profile.accept_graph(ctx.host(), graph);
        std::cout << gate_report(profile, result.gate, false);
        if (!result.accepted) return int(kGateRejected);
        auto session = Session::create(profile, *result.accepted, graph, ctx.host(), load_graph_parameters(graph));
        const double acc = accuracy(session, test);
        std::cout << "test accuracy: " << percent(acc) << " ("
                  << static_cast<long long>(acc * double(test.size()) + 0.5) << "/" << test.size() << ")\n";
        return int(kOk);
    };
}

}  // namespace capsule::cli
