// `capsule onnx-test [--profile P] [--json-report FILE] [--expect FILE] [--write-passing FILE]
// DIR...`: the ONNX backend-test conformance driver. Runs every case (a directory holding
// model.onnx and test_data_set_N/{input_K.pb, output_K.pb}) under a profile and classifies it:
//   passed       every output of every data set within the case's tolerance;
//   failed       it ran (or broke) and gave wrong values or an unexpected error: a bug;
//   unsupported  an ONNX op, variant or dtype the importer does not map, or an op no capsule of
//                the profile can run; the reason is recorded.
// Prints the counts, a per-op table and the unsupported reasons, and writes a JSON report.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "capsule/onnx_import.hpp"
#include "capsule/session.hpp"
#include "context.hpp"

namespace capsule::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using std::string;

namespace {

/// Comparison tolerance: |actual − expected| ≤ atol + rtol·|expected| (NumPy's assert_allclose,
/// as the ONNX backend runner uses). Integer and bool outputs compare exactly.
struct Tolerance {
    double rtol = 1e-3;
    double atol = 1e-7;
    const char* reason = "ONNX backend runner default";
};

/// Per-op overrides, one line each with its reason. A case uses the loosest tolerance of the ONNX
/// op types it contains.
const std::map<string, Tolerance>& tolerance_overrides() {
    static const std::map<string, Tolerance> table{
        // (none needed so far: every supported case passes at the runner's default)
    };
    return table;
}

/// Backend cases whose expected outputs contradict the ONNX spec's reading by ONNX Runtime and
/// PyTorch, which the importer follows; each is reported as unsupported with the reason, one line
/// each with its source.
const std::map<string, string>& disputed_cases() {
    // onnx 1.12's data truncates float32 to bfloat16; Capsule rounds to nearest even, as ONNX Runtime,
    // PyTorch's .bfloat16() and ONNX's own float32_to_bfloat16 helper do.
    static const string bfloat16 =
        "disputed test data: float32 to bfloat16 truncated, where ONNX Runtime and PyTorch round to nearest even "
        "(onnx/onnx#3876)";
    static const string like_shape =
        "disputed test data: its data set feeds input 'like' as shape [1] where the model declares [3, 4] (ONNX "
        "Runtime refuses such an input too)";
    static const std::map<string, string> table{
        {"node/test_maxunpool_export_with_output_shape",
         "disputed test data: its indices address the unpooled shape, padded to output_shape; ONNX Runtime "
         "(microsoft/onnxruntime#2193) and PyTorch's max_unpool2d write them into output_shape (onnx/onnx#2398)"},
        {"node/test_adam_multiple",
         "disputed test data: the node leaves epsilon at its default (1e-6, the Adam-1 schema's), but its "
         "expected outputs were computed with epsilon = 1e-2 (onnx's adam.py gives epsilon to apply_adam only, "
         "not to make_node); with 1e-6 Capsule matches onnx's apply_adam"},
        {"node/test_cast_FLOAT_to_BFLOAT16", bfloat16},
        {"node/test_castlike_FLOAT_to_BFLOAT16", bfloat16},
        {"node/test_castlike_FLOAT_to_BFLOAT16_expanded", bfloat16},
        {"node/test_castlike_BFLOAT16_to_FLOAT", like_shape},
        {"node/test_castlike_BFLOAT16_to_FLOAT_expanded", like_shape},
    };
    return table;
}

/// The dtype of the imported graph's input node `name` (float32 when no input node has it, e.g.
/// an input that only feeds parameters).
DType input_dtype(const ImportedModel& model, const string& name) {
    for (const auto& node : model.graph.nodes)
        if (node.kind == NodeKind::input && node.name == name) return node.dtype;
    return DType::float32;
}

Tolerance tolerance_for(const std::vector<string>& ops) {
    Tolerance t;
    for (const auto& op : ops) {
        auto it = tolerance_overrides().find(op);
        if (it == tolerance_overrides().end()) continue;
        if (it->second.rtol >= t.rtol && it->second.atol >= t.atol) t = it->second;
        else {
            t.rtol = std::max(t.rtol, it->second.rtol);
            t.atol = std::max(t.atol, it->second.atol);
            t.reason = it->second.reason;
        }
    }
    return t;
}

struct CaseResult {
    string id;
    string status;  // passed, failed, unsupported
    string reason;  // short reason (unsupported) or the failure
    string detail;  // full message
    string op;      // ONNX op an unsupported reason names ("" when model-level)
    std::vector<string> ops;
    double max_abs_error = 0, max_rel_error = 0;
    double seconds = 0;
    Tolerance tolerance;
};

struct Mismatch {
    bool ok = true;
    string message;
};

Mismatch compare(const Tensor& actual, const Tensor& expected, const Tolerance& tol, CaseResult& r,
                 const string& label) {
    if (actual.dtype() != expected.dtype())
        return {false, label + ": dtype " + string(to_string(actual.dtype())) + ", expected " +
                           string(to_string(expected.dtype()))};
    if (actual.shape() != expected.shape())
        return {false, label + ": shape " + to_string(actual.shape()) + ", expected " + to_string(expected.shape())};
    const bool exact = !is_floating(actual.dtype());
    if (exact) {
        if (!actual.bitwise_equal(expected)) {
            for (std::int64_t i = 0; i < actual.numel(); ++i)
                if (actual.at(i) != expected.at(i))
                    return {false, label + ": element " + std::to_string(i) + " is " + std::to_string(actual.at(i)) +
                                       ", expected " + std::to_string(expected.at(i)) + " (exact comparison)"};
        }
        return {};
    }
    Mismatch m;
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < actual.numel(); ++i) {
        const double a = actual.at(i), e = expected.at(i);
        // NaN must meet NaN and an infinity the same infinity (as numpy.testing does).
        const bool special = std::isnan(e) || std::isnan(a) || std::isinf(e) || std::isinf(a);
        if (special) {
            const bool same = std::isnan(e) ? std::isnan(a) : a == e;
            if (!same && bad++ == 0) {
                std::ostringstream s;
                s << std::setprecision(9) << label << ": element " << i << " is " << a << ", expected " << e;
                m.message = s.str();
            }
            if (!same) r.max_abs_error = std::numeric_limits<double>::infinity();
            continue;
        }
        const double err = std::fabs(a - e);
        r.max_abs_error = std::max(r.max_abs_error, err);
        if (e != 0) r.max_rel_error = std::max(r.max_rel_error, err / std::fabs(e));
        if (err > tol.atol + tol.rtol * std::fabs(e)) {
            if (bad++ == 0) {
                std::ostringstream s;
                s << std::setprecision(9) << label << ": element " << i << " is " << a << ", expected " << e;
                m.message = s.str();
            }
        }
    }
    if (bad) {
        m.ok = false;
        std::ostringstream s;
        s << " (" << bad << " of " << actual.numel() << " elements outside rtol " << tol.rtol
          << " atol " << tol.atol << ")";
        m.message += s.str();
    }
    return m;
}

std::vector<fs::path> numbered(const fs::path& dir, const string& prefix) {
    std::vector<std::pair<int, fs::path>> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const string name = e.path().filename().string();
        if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".pb") continue;
        try {
            found.emplace_back(std::stoi(name.substr(prefix.size())), e.path());
        } catch (const std::exception&) {
        }
    }
    std::sort(found.begin(), found.end());
    std::vector<fs::path> out;
    for (auto& [k, p] : found) out.push_back(p);
    return out;
}

std::vector<fs::path> data_sets(const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

string first_line(const string& s) { return s.substr(0, s.find('\n')); }

CaseResult run_case(const fs::path& dir, const string& id, const BackendProfile& profile, const PluginHost& host) {
    CaseResult r;
    r.id = id;
    const auto start = std::chrono::steady_clock::now();
    auto finish = [&](string status, string reason, string detail = {}) {
        r.status = std::move(status);
        r.reason = std::move(reason);
        r.detail = detail.empty() ? r.reason : std::move(detail);
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return r;
    };
    if (!fs::exists(dir / "model.onnx"))
        return finish("unsupported", "no model.onnx in the case directory (a download-only case)");
    if (auto it = disputed_cases().find(id); it != disputed_cases().end()) return finish("unsupported", it->second);
    try {
        const auto sets = data_sets(dir);
        if (sets.empty()) return finish("unsupported", "no test_data_set_N directory");
        // What the importer does not map makes the case unsupported, not failed.
        auto unsupported = [&](const OnnxUnsupported& u) {
            r.op = u.op_type;
            return finish("unsupported", u.op_type.empty() ? u.reason : u.op_type + ": " + u.reason, u.message);
        };
        // Each data file holds the value of one graph input or output as the model types it: a
        // tensor, a sequence of tensors, or an optional.
        const fs::path model_path = dir / "model.onnx";
        std::vector<std::vector<OnnxValue>> inputs, outputs;
        for (const auto& set : sets) {
            for (auto [prefix, into] : {std::pair{"input_", &inputs}, std::pair{"output_", &outputs}}) {
                into->emplace_back();
                std::size_t index = 0;
                for (const auto& p : numbered(set, prefix)) {
                    auto value = try_read_onnx_value(p, model_path, into == &outputs, index++);
                    if (auto* u = std::get_if<OnnxUnsupported>(&value)) return unsupported(*u);
                    into->back().push_back(std::get<OnnxValue>(std::move(value)));
                }
            }
        }
        const auto input_names = onnx_graph_inputs(model_path);
        // Static shapes come from the data set's inputs, sequence lengths and element types too,
        // and which optionals are empty. An input the importer must know as a constant
        // (Reshape's shape, Clip's bounds, axes fed as inputs) is bound from the data set's value:
        // the model is specialised to it (OnnxImportOptions::constant_inputs).
        std::set<std::string> constant_names;
        auto import_for = [&](std::size_t s) -> OnnxImportResult {
            OnnxImportOptions options;
            for (std::size_t k = 0; k < inputs[s].size(); ++k) {
                const OnnxValue& v = inputs[s][k];
                const string name = k < input_names.size() ? input_names[k] : string();
                options.positional_input_shapes.push_back(v.kind == OnnxValue::Kind::tensor ? v.tensors[0].shape() : Shape{});
                if (v.kind == OnnxValue::Kind::none) options.absent_inputs.insert(name);
                if (v.kind != OnnxValue::Kind::sequence) continue;
                auto& types = options.sequence_inputs[name];
                for (const auto& t : v.tensors) types.push_back({t.shape(), t.dtype()});
            }
            for (int attempt = 0;; ++attempt) {
                auto result = try_import_onnx(model_path, options);
                const auto* u = std::get_if<OnnxUnsupported>(&result);
                if (!u || u->constant_input.empty() || attempt > 16) return result;
                const auto at = std::find(input_names.begin(), input_names.end(), u->constant_input);
                const auto position = static_cast<std::size_t>(at - input_names.begin());
                if (at == input_names.end() || position >= inputs[s].size() ||
                    inputs[s][position].kind != OnnxValue::Kind::tensor || options.constant_inputs.count(u->constant_input))
                    return result;
                options.constant_inputs[u->constant_input] = inputs[s][position].tensors[0];
                constant_names.insert(u->constant_input);
            }
        };
        auto signature = [](const std::vector<OnnxValue>& values) {
            std::vector<std::pair<int, std::vector<TensorType>>> out;
            for (const auto& v : values) {
                out.emplace_back(static_cast<int>(v.kind), std::vector<TensorType>{});
                for (const auto& t : v.tensors) out.back().second.push_back({t.shape(), t.dtype()});
            }
            return out;
        };
        // The data set's tensors in the order of ImportedModel::input_names / output_names, where
        // a sequence stands as its elements and an empty optional as nothing.
        auto flat = [](const std::vector<OnnxValue>& values) {
            std::vector<Tensor> out;
            for (const auto& v : values) out.insert(out.end(), v.tensors.begin(), v.tensors.end());
            return out;
        };
        auto imported = import_for(0);
        if (auto* u = std::get_if<OnnxUnsupported>(&imported)) return unsupported(*u);
        ImportedModel model = std::get<ImportedModel>(std::move(imported));
        r.ops = model.op_types;
        r.tolerance = tolerance_for(r.ops);
        for (std::size_t s = 0; s < sets.size(); ++s) {
            // A later data set whose inputs differ in kind or type (a sequence's length, an empty
            // optional, a shape), or that binds constants, gets its own import.
            if (s > 0 && (!constant_names.empty() || signature(inputs[s]) != signature(inputs[0]))) {
                imported = import_for(s);
                if (auto* u = std::get_if<OnnxUnsupported>(&imported)) return unsupported(*u);
                model = std::get<ImportedModel>(std::move(imported));
            }
            auto accepted = profile.accept_graph(host, model.graph);
            if (!accepted.accepted) return finish("unsupported", "the gate rejects the plan under " + profile.name);
            const auto given = flat(inputs[s]), expected = flat(outputs[s]);
            if (given.size() != model.input_names.size())
                return finish("failed", "data set has " + std::to_string(given.size()) + " input tensors, the model " +
                                            std::to_string(model.input_names.size()));
            std::map<string, Tensor> values;
            for (std::size_t k = 0; k < given.size(); ++k)
                values[model.input_names[k]] = bfloat16_from_bits(given[k], input_dtype(model, model.input_names[k]));
            ParameterMap parameters = model.parameters;
            auto runtime_inputs = bind_onnx_inputs(model, values, parameters);
            auto session = Session::create(profile, *accepted.accepted, model.graph, host, parameters);
            auto got = session.run(runtime_inputs);
            if (got.size() != expected.size())
                return finish("failed", "produced " + std::to_string(got.size()) + " output tensors, expected " +
                                            std::to_string(expected.size()));
            for (std::size_t k = 0; k < got.size(); ++k) {
                auto m = compare(got[k], bfloat16_from_bits(expected[k], got[k].dtype()), r.tolerance, r,
                                 sets[s].filename().string() + " output " + std::to_string(k) + " (" +
                                     model.output_names[k] + ")");
                if (!m.ok) return finish("failed", "wrong values", m.message);
            }
        }
        return finish("passed", "");
    } catch (const Error& e) {
        if (e.code() == ErrorCode::planning)
            return finish("unsupported", "planning under " + profile.name + ": " + first_line(e.what()), e.what());
        return finish("failed", "error: " + first_line(e.what()), e.what());
    } catch (const std::exception& e) {
        return finish("failed", "error: " + first_line(e.what()), e.what());
    }
}

/// Case directories under `dir`: the directory itself when it holds model.onnx, else its
/// `test_*` subdirectories, else theirs (a data root holding categories).
void collect(const fs::path& dir, std::vector<std::pair<string, fs::path>>& cases, int depth = 0) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error(ErrorCode::input, "onnx-test: " + dir.string() + " is not a directory");
    auto id_of = [](const fs::path& p) {
        return p.parent_path().filename().string() + "/" + p.filename().string();
    };
    const auto canonical = fs::weakly_canonical(dir, ec);
    if (fs::exists(dir / "model.onnx") || canonical.filename().string().rfind("test_", 0) == 0) {
        cases.emplace_back(id_of(canonical), canonical);
        return;
    }
    std::vector<fs::path> subs;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.is_directory()) subs.push_back(e.path());
    std::sort(subs.begin(), subs.end());
    for (const auto& s : subs) {
        if (s.filename().string().rfind("test_", 0) == 0) cases.emplace_back(id_of(fs::weakly_canonical(s, ec)), s);
        else if (depth == 0) collect(s, cases, depth + 1);
    }
}

std::vector<string> read_list(const fs::path& path) {
    std::ifstream in(path);
    if (!in) throw Error(ErrorCode::input, "onnx-test: cannot read " + path.string());
    std::vector<string> out;
    string line;
    while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (line.empty() || line[0] == '#') continue;
        out.push_back(line);
    }
    return out;
}

struct Args {
    string profile = "checked_cpu";
    std::vector<string> dirs;
    string json_report;
    string expect;
    string write_passing;
    string filter;
    bool verbose = false;
};

}  // namespace

Command add_onnx_test_command(CLI::App& app, const GlobalOptions& options) {
    auto* sub = app.add_subcommand("onnx-test",
                                   "run ONNX backend test cases and classify each one (passed, failed, "
                                   "unsupported); exits 1 when a case failed or an --expect case did not pass");
    auto args = std::make_shared<Args>();
    sub->add_option("--profile", args->profile, "backend profile name or profile .json file")->capture_default_str();
    sub->add_option("dirs", args->dirs, "data root, category directory or case directory (repeatable)")->required();
    sub->add_option("--json-report", args->json_report, "write a JSON report to this file");
    sub->add_option("--expect", args->expect,
                    "file of case ids (category/test_name) that must pass; any that does not is a regression");
    sub->add_option("--write-passing", args->write_passing, "write the sorted ids of the passing cases here");
    sub->add_option("--filter", args->filter, "only cases whose id contains this text");
    sub->add_flag("--verbose", args->verbose, "print one line per case");
    return [&options, args]() {
        const auto t0 = std::chrono::steady_clock::now();
        Context ctx(options);
        const auto profile = ctx.profile(args->profile);
        std::vector<std::pair<string, fs::path>> cases;
        for (const auto& d : args->dirs) collect(d, cases);
        if (!args->filter.empty())
            std::erase_if(cases, [&](const auto& c) { return c.first.find(args->filter) == string::npos; });
        if (cases.empty()) throw Error(ErrorCode::input, "onnx-test: no test cases found under the given directories");
        require_onnx_import();

        std::vector<CaseResult> results;
        for (const auto& [id, dir] : cases) {
            results.push_back(run_case(dir, id, profile, ctx.host()));
            const auto& r = results.back();
            if (args->verbose || r.status == "failed")
                std::cout << std::left << std::setw(12) << r.status << r.id
                          << (r.reason.empty() ? "" : "  " + (r.status == "failed" ? r.detail : r.reason)) << "\n";
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        std::map<string, int> counts{{"passed", 0}, {"failed", 0}, {"unsupported", 0}};
        std::map<string, std::map<string, int>> per_op;
        std::map<string, int> reasons;
        std::set<string> passing;
        for (const auto& r : results) {
            counts[r.status]++;
            for (const auto& op : r.ops) per_op[op][r.status]++;
            if (r.ops.empty() && !r.op.empty()) per_op[r.op][r.status]++;
            if (r.status == "unsupported") reasons[r.reason]++;
            if (r.status == "passed") passing.insert(r.id);
        }
        // Regressions against the expected list.
        std::vector<string> regressions;
        std::size_t expected_count = 0, not_found = 0;
        if (!args->expect.empty()) {
            std::map<string, const CaseResult*> by_id;
            for (const auto& r : results) by_id[r.id] = &r;
            for (const auto& id : read_list(args->expect)) {
                ++expected_count;
                auto it = by_id.find(id);
                if (it == by_id.end()) { ++not_found; continue; }
                if (it->second->status != "passed")
                    regressions.push_back(id + ": " + it->second->status + ": " + it->second->detail);
            }
        }

        std::cout << "\nper-op table (cases containing the op):\n"
                  << std::left << std::setw(28) << "op" << std::right << std::setw(8) << "passed" << std::setw(8)
                  << "failed" << std::setw(13) << "unsupported" << "\n";
        for (const auto& [op, c] : per_op) {
            auto get = [&](const char* k) { auto it = c.find(k); return it == c.end() ? 0 : it->second; };
            std::cout << std::left << std::setw(28) << op << std::right << std::setw(8) << get("passed")
                      << std::setw(8) << get("failed") << std::setw(13) << get("unsupported") << "\n";
        }
        std::vector<std::pair<int, string>> sorted_reasons;
        for (const auto& [reason, n] : reasons) sorted_reasons.emplace_back(-n, reason);
        std::sort(sorted_reasons.begin(), sorted_reasons.end());
        std::cout << "\nunsupported reasons:\n";
        for (const auto& [n, reason] : sorted_reasons) std::cout << std::setw(6) << -n << "  " << reason << "\n";
        if (counts["failed"]) {
            std::cout << "\nfailed cases:\n";
            for (const auto& r : results)
                if (r.status == "failed") std::cout << "  " << r.id << ": " << r.detail << "\n";
        }
        if (!regressions.empty()) {
            std::cout << "\nexpected to pass but did not (" << regressions.size() << "):\n";
            for (const auto& g : regressions) std::cout << "  " << g << "\n";
        }
        std::cout << "\nprofile " << profile.name << ": " << results.size() << " cases: " << counts["passed"]
                  << " passed, " << counts["failed"] << " failed, " << counts["unsupported"] << " unsupported ("
                  << std::fixed << std::setprecision(1) << seconds << " s)\n";
        if (!args->expect.empty()) {
            std::size_t new_passes = 0;
            std::set<string> listed;
            for (const auto& id : read_list(args->expect)) listed.insert(id);
            for (const auto& id : passing) new_passes += !listed.count(id);
            std::cout << "expected list " << args->expect << ": " << expected_count << " cases, "
                      << regressions.size() << " regression(s), " << not_found << " not among the cases run, "
                      << new_passes << " passing case(s) not listed yet (add them with --write-passing)\n";
        }

        if (!args->json_report.empty()) {
            json report{{"profile", profile.name},
                        {"dirs", args->dirs},
                        {"seconds", seconds},
                        {"counts", counts},
                        {"regressions", regressions}};
            json ops = json::object();
            for (const auto& [op, c] : per_op) ops[op] = c;
            report["ops"] = ops;
            report["unsupported_reasons"] = reasons;
            json tol = json::object();
            for (const auto& [op, t] : tolerance_overrides())
                tol[op] = {{"rtol", t.rtol}, {"atol", t.atol}, {"reason", t.reason}};
            report["tolerance"] = {{"default", {{"rtol", Tolerance{}.rtol}, {"atol", Tolerance{}.atol}}},
                                   {"overrides", tol}};
            json list = json::array();
            for (const auto& r : results) {
                json c{{"case", r.id}, {"status", r.status}, {"ops", r.ops}, {"seconds", r.seconds}};
                if (!r.reason.empty()) c["reason"] = r.reason;
                if (r.detail != r.reason) c["detail"] = r.detail;
                if (r.status != "unsupported") {
                    c["max_abs_error"] = r.max_abs_error;
                    c["max_rel_error"] = r.max_rel_error;
                    c["rtol"] = r.tolerance.rtol;
                    c["atol"] = r.tolerance.atol;
                }
                list.push_back(c);
            }
            report["cases"] = list;
            if (const auto parent = std::filesystem::path(args->json_report).parent_path(); !parent.empty())
                std::filesystem::create_directories(parent);
            std::ofstream out(args->json_report);
            if (!out) throw Error(ErrorCode::input, "onnx-test: cannot write " + args->json_report);
            out << report.dump(2) << "\n";
        }
        if (!args->write_passing.empty()) {
            std::ofstream out(args->write_passing);
            if (!out) throw Error(ErrorCode::input, "onnx-test: cannot write " + args->write_passing);
            for (const auto& id : passing) out << id << "\n";
        }
        return counts["failed"] || !regressions.empty() ? int(kOther) : int(kOk);
    };
}

}  // namespace capsule::cli
