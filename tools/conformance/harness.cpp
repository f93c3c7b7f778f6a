#include "harness.hpp"

#include "capsule/attribute_views.hpp"
#include "capsule/error.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

namespace capsule::conformance {

namespace {

/// Contiguous host storage for one tensor plus its ABI view.
struct Buffer {
    DType dtype;
    Shape shape;
    std::vector<std::int64_t> strides;
    std::vector<unsigned char> bytes;
    capsule_tensor_view view{};

    Buffer(DType d, Shape s) : dtype(d), shape(std::move(s)) {
        strides.resize(shape.size());
        std::int64_t stride = 1;
        for (std::size_t i = shape.size(); i-- > 0;) {
            strides[i] = stride;
            stride *= shape[i];
        }
        bytes.assign(static_cast<std::size_t>(element_count(shape)) * dtype_size(dtype) + 1, 0);
        refresh();
    }
    Buffer(const Buffer& o) : dtype(o.dtype), shape(o.shape), strides(o.strides), bytes(o.bytes) { refresh(); }
    Buffer& operator=(const Buffer&) = delete;

    void refresh() {
        view.struct_size = sizeof(capsule_tensor_view);
        view.dtype = static_cast<int32_t>(dtype);
        view.device = CAPSULE_DEVICE_CPU;
        view.rank = static_cast<int32_t>(shape.size());
        view.shape = shape.data();
        view.strides = strides.data();
        view.data = bytes.data();
    }
    std::size_t size() const { return static_cast<std::size_t>(element_count(shape)); }
    double get(std::size_t i) const {
        switch (dtype) {
            case DType::float32: { float v; std::memcpy(&v, &bytes[i * 4], 4); return v; }
            case DType::float64: { double v; std::memcpy(&v, &bytes[i * 8], 8); return v; }
            case DType::int64: { std::int64_t v; std::memcpy(&v, &bytes[i * 8], 8); return double(v); }
            case DType::boolean: return bytes[i] ? 1.0 : 0.0;
            default: break;  // the suite's cases use ABI 1.0's dtypes only
        }
        throw Error(ErrorCode::other, "conformance values of dtype " + std::string(to_string(dtype)) + " are not supported");
    }
    void set(std::size_t i, double v) {
        switch (dtype) {
            case DType::float32: { float f = float(v); std::memcpy(&bytes[i * 4], &f, 4); return; }
            case DType::float64: std::memcpy(&bytes[i * 8], &v, 8); return;
            case DType::int64: { auto n = std::int64_t(v); std::memcpy(&bytes[i * 8], &n, 8); return; }
            case DType::boolean: bytes[i] = v != 0.0; return;
            default: break;
        }
        throw Error(ErrorCode::other, "conformance values of dtype " + std::string(to_string(dtype)) + " are not supported");
    }
    std::vector<double> values() const {
        std::vector<double> out(size());
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = get(i);
        return out;
    }
};

/// How a call types the case's float tensors: as written, or all float64 (gradient checks of
/// kernels that take it), or all float32 (gradient checks of float32-only kernels).
enum class Floats { as_written, float64, float32 };

DType float_type(DType d, Floats floats) {
    if (d != DType::float32 && d != DType::float64) return d;
    return floats == Floats::float64 ? DType::float64 : floats == Floats::float32 ? DType::float32 : d;
}

Buffer make_buffer(const CaseTensor& t, Floats floats = Floats::as_written) {
    const DType d = float_type(t.dtype, floats);
    Buffer b(d, t.shape);
    if (t.values.size() != b.size())
        throw std::runtime_error("case tensor " + to_string(t.shape) + " has " +
                                 std::to_string(t.values.size()) + " values");
    for (std::size_t i = 0; i < t.values.size(); ++i) b.set(i, t.values[i]);
    return b;
}


TensorType output_type(const KernelCase& c, Floats floats) {
    Node node;
    node.id = 0;
    node.kind = NodeKind::op;
    node.op = c.op;
    node.attrs = c.attrs;
    std::vector<TensorType> parents;
    for (const auto& t : c.inputs)
        parents.push_back({t.shape, float_type(t.dtype, floats)});
    return infer_type(node, parents);
}

struct Call {
    std::vector<Buffer> inputs, params, outputs;
    std::vector<capsule_tensor_view> in_views, param_views, out_views;
    AttributeViews attrs;

    /// `inferred` (may be null) receives whether shape inference accepted the inputs; with it, an
    /// output that inference rejects is allocated from `c.expected` instead of raising.
    Call(const KernelCase& c, Floats floats, bool* inferred = nullptr) : attrs(c.attrs) {
        for (const auto& t : c.inputs) inputs.push_back(make_buffer(t, floats));
        for (const auto& t : c.params) params.push_back(make_buffer(t, floats));
        TensorType type;
        if (!inferred) {
            type = output_type(c, floats);
        } else {
            try {
                type = output_type(c, floats);
                *inferred = true;
            } catch (const std::exception&) {
                type = {c.expected.shape, c.expected.dtype};
                *inferred = false;
            }
        }
        outputs.emplace_back(type.dtype, type.shape);
        relink();
    }
    void relink() {
        in_views.clear(); param_views.clear(); out_views.clear();
        for (auto& b : inputs) { b.refresh(); in_views.push_back(b.view); }
        for (auto& b : params) { b.refresh(); param_views.push_back(b.view); }
        for (auto& b : outputs) { b.refresh(); out_views.push_back(b.view); }
    }
    /// Runs `k`'s forward kernel; a kernel with `prepare` (ABI 1.1) is prepared first, as a
    /// session does (inputs and outputs without data, parameters with it), run with its state,
    /// and released.
    std::string forward(const capsule_kernel& k) {
        relink();
        void* state = nullptr;
        if (k.prepare) {
            std::vector<capsule_tensor_view> in = in_views, out = out_views;
            for (auto& v : in) v.data = nullptr;
            for (auto& v : out) v.data = nullptr;
            capsule_prepare_args p{};
            p.struct_size = sizeof p;
            p.inputs = in.data(); p.num_inputs = in.size();
            p.params = param_views.data(); p.num_params = param_views.size();
            p.outputs = out.data(); p.num_outputs = out.size();
            p.attrs = attrs.data(); p.num_attrs = attrs.size();
            p.num_threads = 1;
            capsule_status st{};
            st.struct_size = sizeof st;
            if (k.prepare(&p, &state, &st) != CAPSULE_OK)
                return "prepare failed (code " + std::to_string(st.code) + "): " + st.message;
        }
        struct Release {
            const capsule_kernel& k;
            void* state;
            ~Release() { if (state && k.release) k.release(state); }
        } release{k, state};
        capsule_forward_args a{};
        a.struct_size = sizeof a;
        a.inputs = in_views.data(); a.num_inputs = in_views.size();
        a.params = param_views.data(); a.num_params = param_views.size();
        a.outputs = out_views.data(); a.num_outputs = out_views.size();
        a.attrs = attrs.data(); a.num_attrs = attrs.size();
        a.state = state;
        capsule_status st{};
        st.struct_size = sizeof st;
        if (k.forward(&a, &st) != CAPSULE_OK)
            return "forward failed (code " + std::to_string(st.code) + "): " + st.message;
        return "";
    }
};

/// Calls the backward kernel of `k` on `call`'s inputs and parameters without the forward
/// output (its view has no data), with a zero upstream gradient; returns "" or the failure.
std::string backward_without_output(const capsule_kernel& k, Call& call) {
    if (!k.backward) return std::string(k.capsule_name) + " has no backward kernel";
    call.relink();
    for (auto& v : call.out_views) v.data = nullptr;
    Buffer gout(call.outputs[0].dtype, call.outputs[0].shape);
    std::vector<Buffer> gin, gparam;
    for (auto& b : call.inputs) gin.emplace_back(b.dtype, b.shape);
    for (auto& b : call.params) gparam.emplace_back(b.dtype, b.shape);
    std::vector<capsule_tensor_view> gin_views, gparam_views;
    for (auto& b : gin) {
        b.refresh();
        gin_views.push_back(b.view);
        if (b.dtype != DType::float32 && b.dtype != DType::float64) gin_views.back().data = nullptr;
    }
    for (auto& b : gparam) { b.refresh(); gparam_views.push_back(b.view); }
    gout.refresh();
    capsule_backward_args a{};
    a.struct_size = sizeof a;
    a.inputs = call.in_views.data(); a.num_inputs = call.in_views.size();
    a.params = call.param_views.data(); a.num_params = call.param_views.size();
    a.outputs = call.out_views.data(); a.num_outputs = call.out_views.size();
    a.grad_outputs = &gout.view;
    a.grad_inputs = gin_views.data();
    a.grad_params = gparam_views.data();
    a.attrs = call.attrs.data(); a.num_attrs = call.attrs.size();
    capsule_status st{};
    st.struct_size = sizeof st;
    if (k.backward(&a, &st) != CAPSULE_OK)
        return "backward failed (code " + std::to_string(st.code) + "): " + st.message;
    return "";
}

/// Compares every element (|got - want| <= atol + rtol |want|; NaN must be NaN, an infinity the
/// same infinity), folding the error statistics into `outcome` and describing the first mismatch
/// in its `failure` (when it has none yet).
void compare(const std::vector<double>& got, const std::vector<double>& want, double rtol,
             double atol, const std::string& what, CaseOutcome& outcome) {
    outcome.compared = true;
    if (got.size() != want.size()) {
        if (outcome.failure.empty())
            outcome.failure = what + ": " + std::to_string(got.size()) + " values, expected " +
                              std::to_string(want.size());
        return;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
        bool ok;
        if (std::isnan(want[i]) || std::isinf(want[i])) {
            ok = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
        } else {
            const double err = std::fabs(got[i] - want[i]);
            const double allowed = atol + rtol * std::fabs(want[i]);
            ok = err <= allowed;  // false for a NaN result
            if (std::isnan(err)) {
                outcome.max_abs_error = INFINITY;
                outcome.max_error_ratio = INFINITY;
            } else {
                outcome.max_abs_error = std::max(outcome.max_abs_error, err);
                outcome.max_error_ratio =
                    std::max(outcome.max_error_ratio, allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0));
            }
        }
        if (!ok && outcome.failure.empty()) {
            std::ostringstream os;
            os.precision(10);
            os << what << "[" << i << "] = " << got[i] << ", expected " << want[i]
               << " (rtol " << rtol << ", atol " << atol << ")";
            outcome.failure = os.str();
        }
    }
}

CaseOutcome failed(std::string why) {
    CaseOutcome o;
    o.failure = std::move(why);
    return o;
}

}  // namespace

CaseOutcome check_forward(const capsule_kernel& kernel, const KernelCase& c, bool exact_messages) {
    const auto* k = &kernel;
    try {
        if (!c.expected_error.empty()) {
            if (c.check_gradient) return failed("an error case cannot check gradients");
            // The output has the inferred type, or `expected`'s when inference rejects the
            // inputs (the kernel must refuse them too); nothing is compared.
            bool inferred = false;
            Call call(c, Floats::as_written, &inferred);
            const std::string err =
                c.error_in_backward ? backward_without_output(*k, call) : call.forward(*k);
            if (err.empty())
                return failed(std::string(c.error_in_backward ? "backward" : "forward") +
                              " succeeded; expected an error containing '" + c.expected_error + "'");
            if (exact_messages && err.find(c.expected_error) == std::string::npos)
                return failed("expected an error containing '" + c.expected_error + "', got: " + err);
            return {};
        }
        Call call(c, Floats::as_written);
        if (c.expected.dtype != call.outputs[0].dtype || c.expected.shape != call.outputs[0].shape)
            return failed("case expects " + std::string(to_string(c.expected.dtype)) +
                          to_string(c.expected.shape) + " but shape inference gives " +
                          std::string(to_string(call.outputs[0].dtype)) +
                          to_string(call.outputs[0].shape));
        if (auto err = call.forward(*k); !err.empty()) return failed(err);
        auto got = call.outputs[0].values();
        if (c.check) return failed(c.check(got));
        CaseOutcome outcome;
        compare(got, c.expected.values, c.rtol, c.atol, "output", outcome);
        return outcome;
    } catch (const std::exception& e) {
        return failed(std::string("case error: ") + e.what());
    }
}

std::string run_forward_case(const capsule_plugin& plugin, const std::string& capsule_name,
                             const KernelCase& c) {
    const auto* k = find_kernel(plugin, capsule_name);
    if (!k) return "plugin has no kernel for " + capsule_name;
    return check_forward(*k, c).failure;
}

std::vector<double> run_forward_values(const capsule_plugin& plugin, const std::string& capsule_name,
                                       const KernelCase& c, std::string& error) {
    try {
        const auto* k = find_kernel(plugin, capsule_name);
        if (!k) {
            error = "plugin has no kernel for " + capsule_name;
            return {};
        }
        Call call(c, Floats::as_written);
        error = call.forward(*k);
        if (!error.empty()) return {};
        return call.outputs[0].values();
    } catch (const std::exception& e) {
        error = std::string("case error: ") + e.what();
        return {};
    }
}

const capsule_kernel* find_kernel(const capsule_plugin& plugin, const std::string& name) {
    for (std::size_t i = 0; i < plugin.num_kernels; ++i)
        if (name == plugin.kernels[i].capsule_name) return &plugin.kernels[i];
    return nullptr;
}

bool gradient_in_float32(const capsule_kernel& k) {
    const bool declares = CAPSULE_HAS_FIELD(&k, capsule_kernel, dtypes) && k.dtypes != 0;
    return declares && !(k.dtypes & CAPSULE_DTYPE_BIT(CAPSULE_DTYPE_FLOAT64));
}

std::string run_gradient_case(const capsule_plugin& plugin, const std::string& capsule_name,
                              const KernelCase& c) {
    const auto* k = find_kernel(plugin, capsule_name);
    if (!k) return "plugin has no kernel for " + capsule_name;
    return check_gradient(*k, c).failure;
}

namespace {

/// Gradients are checked in float64, or in float32 for a kernel whose dtypes exclude float64 (the
/// oneDNN capsules): central differences of a float32 forward then use a step of
/// kFloat32Step and compare within kFloat32GradTol (absolute and relative), since their rounding
/// error is about 6e-8 · |objective| / step.
constexpr double kFloat32Step = 1e-3, kFloat32GradTol = 1e-2;

Floats gradient_floats(const capsule_kernel& k) {
    return gradient_in_float32(k) ? Floats::float32 : Floats::float64;
}

/// One backward call on float64 (or float32, gradient_floats) copies of a case's inputs
/// (Backward::run).
struct Backward {
    std::unique_ptr<Call> base;  // inputs, parameters and the forward output
    std::unique_ptr<Buffer> gout;
    std::vector<Buffer> gin, gparam;

    /// Runs `k`'s forward and then its backward with a fixed pseudo-random upstream gradient in
    /// [-1, 1]; returns "" or the failure.
    std::string run(const capsule_kernel& k, const KernelCase& c) {
        if (!k.backward) return std::string(k.capsule_name) + " has no backward kernel";
        if (!c.expected_error.empty()) return "an error case cannot check gradients";
        base = std::make_unique<Call>(c, gradient_floats(k));
        if (auto err = base->forward(k); !err.empty()) return err;
        gout = std::make_unique<Buffer>(base->outputs[0].dtype, base->outputs[0].shape);
        std::uint64_t state = 0x9E3779B97F4A7C15ull;
        for (std::size_t i = 0; i < gout->size(); ++i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            gout->set(i, double(state >> 11) / double(1ull << 53) * 2.0 - 1.0);
        }
        for (auto& b : base->inputs) gin.emplace_back(b.dtype, b.shape);
        for (auto& b : base->params) gparam.emplace_back(b.dtype, b.shape);
        std::vector<capsule_tensor_view> gin_views, gparam_views;
        for (auto& b : gin) {
            b.refresh();
            gin_views.push_back(b.view);
            if (!is_float(b.dtype)) gin_views.back().data = nullptr;  // index inputs: no grad
        }
        for (auto& b : gparam) { b.refresh(); gparam_views.push_back(b.view); }
        base->relink();
        gout->refresh();
        capsule_backward_args a{};
        a.struct_size = sizeof a;
        a.inputs = base->in_views.data(); a.num_inputs = base->in_views.size();
        a.params = base->param_views.data(); a.num_params = base->param_views.size();
        a.outputs = base->out_views.data(); a.num_outputs = base->out_views.size();
        a.grad_outputs = &gout->view;
        a.grad_inputs = gin_views.data();
        a.grad_params = gparam_views.data();
        a.attrs = base->attrs.data(); a.num_attrs = base->attrs.size();
        capsule_status st{};
        st.struct_size = sizeof st;
        if (k.backward(&a, &st) != CAPSULE_OK)
            return "backward failed (code " + std::to_string(st.code) + "): " + st.message;
        return "";
    }

    static bool is_float(DType d) { return d == DType::float32 || d == DType::float64; }

    /// The inputs whose gradient a case checks: `grad_inputs`, or every float input.
    static std::vector<std::size_t> checked_inputs(const KernelCase& c) {
        std::vector<std::size_t> which = c.grad_inputs;
        if (which.empty())
            for (std::size_t i = 0; i < c.inputs.size(); ++i)
                if (is_float(c.inputs[i].dtype)) which.push_back(i);
        return which;
    }
};

}  // namespace

std::vector<std::vector<double>> run_gradient_values(const capsule_plugin& plugin, const std::string& capsule_name,
                                                     const KernelCase& c, std::string& error) {
    const auto* k = find_kernel(plugin, capsule_name);
    if (!k) {
        error = "plugin has no kernel for " + capsule_name;
        return {};
    }
    try {
        Backward b;
        error = b.run(*k, c);
        if (!error.empty()) return {};
        std::vector<std::vector<double>> out;
        for (auto i : Backward::checked_inputs(c)) out.push_back(b.gin[i].values());
        for (const auto& g : b.gparam) out.push_back(g.values());
        return out;
    } catch (const std::exception& e) {
        error = std::string("case error: ") + e.what();
        return {};
    }
}

CaseOutcome check_gradient(const capsule_kernel& kernel, const KernelCase& c) {
    const auto* k = &kernel;
    try {
        Backward b;
        if (auto err = b.run(*k, c); !err.empty()) return failed(err);
        const Buffer& gout = *b.gout;
        const std::vector<Buffer>& gin = b.gin;
        const std::vector<Buffer>& gparam = b.gparam;
        const Floats floats = gradient_floats(*k);
        const bool f32 = floats == Floats::float32;
        const double step = f32 ? std::max(c.fd_step, kFloat32Step) : c.fd_step;
        const double tol = f32 ? std::max(c.grad_tol, kFloat32GradTol) : c.grad_tol;

        // Central differences of <gout, f(x)> for each checked tensor element.
        auto objective = [&](Call& call) -> double {
            if (auto err = call.forward(*k); !err.empty()) throw std::runtime_error(err);
            double s = 0;
            for (std::size_t i = 0; i < gout.size(); ++i) s += gout.get(i) * call.outputs[0].get(i);
            return s;
        };
        CaseOutcome outcome;
        auto check_tensor = [&](bool is_param, std::size_t index, const Buffer& grad) {
            auto& src = is_param ? c.params[index] : c.inputs[index];
            std::vector<double> numeric(src.values.size());
            for (std::size_t e = 0; e < src.values.size(); ++e) {
                Call plus(c, floats), minus(c, floats);
                auto& bp = is_param ? plus.params[index] : plus.inputs[index];
                auto& bm = is_param ? minus.params[index] : minus.inputs[index];
                bp.set(e, src.values[e] + step);
                bm.set(e, src.values[e] - step);
                numeric[e] = (objective(plus) - objective(minus)) / (2 * step);
            }
            compare(grad.values(), numeric, tol, tol,
                    std::string(is_param ? "grad param " : "grad input ") + std::to_string(index),
                    outcome);
        };
        for (auto i : Backward::checked_inputs(c)) check_tensor(false, i, gin[i]);
        for (std::size_t i = 0; i < c.params.size(); ++i)
            if (c.all_param_grads || std::find(c.grad_params.begin(), c.grad_params.end(), i) != c.grad_params.end())
                check_tensor(true, i, gparam[i]);
        return outcome;
    } catch (const std::exception& e) {
        return failed(std::string("case error: ") + e.what());
    }
}

KernelCase error_case(std::string name, BackendOp op, std::vector<CaseTensor> inputs,
                      std::string error, CaseTensor output, Attributes attrs,
                      std::vector<CaseTensor> params) {
    KernelCase c;
    c.name = std::move(name);
    c.op = op;
    c.attrs = std::move(attrs);
    c.inputs = std::move(inputs);
    c.params = std::move(params);
    c.expected = std::move(output);
    c.expected_error = std::move(error);
    return c;
}

std::vector<KernelCase> all_cases() {
    std::vector<KernelCase> out;
    for (auto family : {elementwise_cases, shape_cases, linalg_cases, conv_pool_cases, indexing_cases,
                        activation_cases, logic_cases, stability_cases}) {
        auto cases = family();
        out.insert(out.end(), std::make_move_iterator(cases.begin()),
                   std::make_move_iterator(cases.end()));
    }
    return out;
}

const capsule_plugin* open_plugin_library(const std::string& path, std::string& error) {
    void* handle = dlopen(path.c_str(), RTLD_LOCAL | RTLD_NOW);
    if (!handle) {
        const char* e = dlerror();
        error = e ? e : "dlopen failed";
        return nullptr;
    }
    auto entry = reinterpret_cast<capsule_plugin_entry_fn>(dlsym(handle, CAPSULE_PLUGIN_ENTRY_SYMBOL));
    if (!entry) {
        error = "no symbol " CAPSULE_PLUGIN_ENTRY_SYMBOL;
        return nullptr;
    }
    return entry(CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR);
}

}  // namespace capsule::conformance
