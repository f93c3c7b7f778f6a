// The native CUDA plugin (plugins/cuda): its table against its manifest, its probe, its argument
// guards (these need no GPU), and, when a CUDA device is usable, every kernel it implements run
// through its own device interface (allocate, copy in, run, copy out) against values computed
// here on the host with the standard library; backward kernels against central finite
// differences of the plugin's own forward kernels in float64.
//
// Without a built plugin (no nvcc at configure time) every test skips, saying so; without a
// usable device the kernel tests skip with the probe's message.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capsule/manifest.hpp"
#include "capsule/plugin_abi.h"

namespace {

using Dims = std::vector<int64_t>;
using Values = std::vector<double>;

const std::string kLibraryName = "libcapsule_native_cuda.so";
const std::string kLibrary = std::string(CAPSULE_PLUGIN_DIR) + "/" + kLibraryName;

// ---------------------------------------------------------------------------------------------
// Loading and probing (once per process)

struct Loaded {
    bool built = false;
    std::string error;
    capsule_plugin_entry_fn entry = nullptr;
    const capsule_plugin* plugin = nullptr;
};

const Loaded& loaded() {
    static const Loaded l = [] {
        Loaded r;
        r.built = std::filesystem::exists(kLibrary);
        if (!r.built) return r;
        void* handle = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char* e = dlerror();
            r.error = e ? e : "dlopen failed";
            return r;
        }
        r.entry = reinterpret_cast<capsule_plugin_entry_fn>(dlsym(handle, CAPSULE_PLUGIN_ENTRY_SYMBOL));
        if (!r.entry) {
            r.error = kLibrary + " has no symbol " CAPSULE_PLUGIN_ENTRY_SYMBOL;
            return r;
        }
        r.plugin = r.entry(CAPSULE_ABI_MAJOR, CAPSULE_ABI_MINOR);
        if (!r.plugin) r.error = "capsule_plugin_entry(1, 0) returned NULL";
        return r;
    }();
    return l;
}

struct ProbeResult {
    int32_t returned = -1;
    capsule_status status{};
};

const ProbeResult& probe_result() {
    static const ProbeResult p = [] {
        ProbeResult r;
        r.status.struct_size = sizeof r.status;
        r.returned = loaded().plugin->probe(&r.status);
        return r;
    }();
    return p;
}

#define REQUIRE_PLUGIN()                                                                    \
    do {                                                                                    \
        if (!loaded().built)                                                                \
            GTEST_SKIP() << kLibrary << " was not built (CMake found no CUDA compiler, or "  \
                                        "CAPSULE_WITH_CUDA is OFF)";                        \
        ASSERT_NE(loaded().plugin, nullptr) << loaded().error;                              \
    } while (0)

const capsule_kernel* find_kernel(const std::string& name) {
    const auto& p = *loaded().plugin;
    for (size_t i = 0; i < p.num_kernels; ++i)
        if (name == p.kernels[i].capsule_name) return &p.kernels[i];
    return nullptr;
}

/// `capsule`'s forward kernel on these views: its status code (-1 when the plugin has no such
/// kernel) and message.
std::pair<int32_t, std::string> forward_on_views(const std::string& capsule,
                                                 const std::vector<capsule_tensor_view>& inputs,
                                                 const std::vector<capsule_tensor_view>& params,
                                                 const std::vector<capsule_tensor_view>& outputs,
                                                 const std::vector<capsule_attribute>& attrs) {
    const auto* k = find_kernel(capsule);
    if (!k) return {-1, "no kernel " + capsule};
    capsule_forward_args args{};
    args.struct_size = sizeof args;
    args.inputs = inputs.data();
    args.num_inputs = inputs.size();
    args.params = params.data();
    args.num_params = params.size();
    args.outputs = outputs.data();
    args.num_outputs = outputs.size();
    args.attrs = attrs.data();
    args.num_attrs = attrs.size();
    capsule_status st{};
    st.struct_size = sizeof st;
    const int32_t code = k->forward(&args, &st);
    return {code, std::string(st.message)};
}

// ---------------------------------------------------------------------------------------------
// Host tensors, attributes and views

struct HostTensor {
    Dims shape;
    Values values;
};

int64_t count_of(const Dims& d) {
    int64_t n = 1;
    for (auto v : d) n *= v;
    return n;
}

Dims contiguous_strides(const Dims& shape) {
    Dims s(shape.size());
    int64_t stride = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        s[i] = stride;
        stride *= shape[i];
    }
    return s;
}

struct Attr {
    std::string name;
    int32_t kind = CAPSULE_ATTR_INT;
    int64_t i = 0;
    double f = 0;
    std::string s;
    std::vector<int64_t> ints = {};
};
Attr int_attr(std::string n, int64_t v) { return {std::move(n), CAPSULE_ATTR_INT, v, 0, {}}; }
Attr float_attr(std::string n, double v) { return {std::move(n), CAPSULE_ATTR_FLOAT, 0, v, {}}; }
Attr bool_attr(std::string n, bool v) { return {std::move(n), CAPSULE_ATTR_BOOL, v ? 1 : 0, 0, {}}; }
Attr string_attr(std::string n, std::string v) { return {std::move(n), CAPSULE_ATTR_STRING, 0, 0, std::move(v)}; }
Attr ints_attr(std::string n, std::vector<int64_t> v) { return {std::move(n), CAPSULE_ATTR_INTS, 0, 0, {}, std::move(v)}; }

/// ABI views of `attrs` (which must outlive them).
std::vector<capsule_attribute> attr_views(const std::vector<Attr>& attrs) {
    std::vector<capsule_attribute> views;
    for (const auto& a : attrs) {
        capsule_attribute v{};
        v.struct_size = sizeof v;
        v.name = a.name.c_str();
        v.kind = a.kind;
        v.int_value = a.i;
        v.float_value = a.f;
        v.string_value = a.s.c_str();
        v.ints = a.ints.data();
        v.count = a.ints.size();
        views.push_back(v);
    }
    return views;
}

/// A device tensor allocated and copied through the plugin's device interface.
class DeviceTensor {
public:
    DeviceTensor(capsule_dtype dtype, Dims shape)
        : dtype_(dtype), shape_(std::move(shape)), strides_(contiguous_strides(shape_)) {
        const auto& di = *loaded().plugin->device_interface;
        capsule_status st{};
        st.struct_size = sizeof st;
        if (di.allocate(bytes(), &data_, &st) != CAPSULE_OK)
            throw std::runtime_error(std::string("allocate: ") + st.message);
    }
    DeviceTensor(capsule_dtype dtype, const HostTensor& t) : DeviceTensor(dtype, t.shape) { upload(t.values); }
    ~DeviceTensor() { loaded().plugin->device_interface->release(data_); }
    DeviceTensor(const DeviceTensor&) = delete;
    DeviceTensor& operator=(const DeviceTensor&) = delete;

    size_t size() const { return static_cast<size_t>(count_of(shape_)); }
    size_t bytes() const { return size() * (dtype_ == CAPSULE_DTYPE_BOOL ? 1 : dtype_ == CAPSULE_DTYPE_FLOAT32 ? 4 : 8); }

    /// float32, float64, int64 (integral values) or bool (nonzero = true) from doubles.
    void upload(const Values& values) {
        if (values.size() != size()) throw std::runtime_error("upload: wrong number of values");
        std::vector<unsigned char> host(bytes());
        for (size_t i = 0; i < values.size(); ++i) {
            if (dtype_ == CAPSULE_DTYPE_FLOAT64) std::memcpy(&host[i * 8], &values[i], 8);
            else if (dtype_ == CAPSULE_DTYPE_INT64) { const auto v = static_cast<int64_t>(values[i]); std::memcpy(&host[i * 8], &v, 8); }
            else if (dtype_ == CAPSULE_DTYPE_BOOL) host[i] = values[i] != 0;
            else { const float f = static_cast<float>(values[i]); std::memcpy(&host[i * 4], &f, 4); }
        }
        capsule_status st{};
        st.struct_size = sizeof st;
        if (loaded().plugin->device_interface->copy_to_device(data_, host.data(), bytes(), &st) != CAPSULE_OK)
            throw std::runtime_error(std::string("copy_to_device: ") + st.message);
    }
    Values download() const {
        std::vector<unsigned char> host(bytes());
        capsule_status st{};
        st.struct_size = sizeof st;
        if (loaded().plugin->device_interface->copy_to_host(host.data(), data_, bytes(), &st) != CAPSULE_OK)
            throw std::runtime_error(std::string("copy_to_host: ") + st.message);
        Values out(size());
        for (size_t i = 0; i < out.size(); ++i) {
            if (dtype_ == CAPSULE_DTYPE_FLOAT64) std::memcpy(&out[i], &host[i * 8], 8);
            else if (dtype_ == CAPSULE_DTYPE_INT64) { int64_t v; std::memcpy(&v, &host[i * 8], 8); out[i] = double(v); }
            else if (dtype_ == CAPSULE_DTYPE_BOOL) out[i] = host[i];
            else { float f; std::memcpy(&f, &host[i * 4], 4); out[i] = f; }
        }
        return out;
    }
    capsule_tensor_view view() const {
        capsule_tensor_view v{};
        v.struct_size = sizeof v;
        v.dtype = dtype_;
        v.device = CAPSULE_DEVICE_CUDA;
        v.rank = static_cast<int32_t>(shape_.size());
        v.shape = shape_.data();
        v.strides = strides_.data();
        v.data = data_;
        return v;
    }

private:
    capsule_dtype dtype_;
    Dims shape_, strides_;
    void* data_ = nullptr;
};

/// One kernel call's device tensors.
struct DeviceCall {
    std::vector<std::unique_ptr<DeviceTensor>> inputs, params;
    std::unique_ptr<DeviceTensor> output;
    std::vector<capsule_tensor_view> in_views, param_views;
    capsule_tensor_view out_view{};
    std::vector<Attr> attrs;
    std::vector<capsule_attribute> attr_views_;

    DeviceCall(capsule_dtype dtype, const std::vector<HostTensor>& in, const std::vector<HostTensor>& par,
               std::vector<Attr> a, const Dims& out_shape)
        : attrs(std::move(a)) {
        for (const auto& t : in) inputs.push_back(std::make_unique<DeviceTensor>(dtype, t));
        for (const auto& t : par) params.push_back(std::make_unique<DeviceTensor>(dtype, t));
        output = std::make_unique<DeviceTensor>(dtype, out_shape);
        for (auto& t : inputs) in_views.push_back(t->view());
        for (auto& t : params) param_views.push_back(t->view());
        out_view = output->view();
        attr_views_ = attr_views(attrs);
    }

    /// Runs the forward kernel; "" on success, else the status message.
    std::string forward(const capsule_kernel& k) {
        const auto [code, message] = forward_on_views(k.capsule_name, in_views, param_views, {out_view}, attr_views_);
        if (code != CAPSULE_OK) return message.empty() ? "(no message)" : message;
        return "";
    }
};

::testing::AssertionResult all_close(const Values& got, const Values& want, double rtol, double atol) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
    for (size_t i = 0; i < got.size(); ++i) {
        const bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                        : std::isinf(want[i]) ? got[i] == want[i]
                        : std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
        if (!ok)
            return ::testing::AssertionFailure()
                   << "element " << i << " = " << got[i] << ", expected " << want[i];
    }
    return ::testing::AssertionSuccess();
}

struct Tolerance {
    double rtol, atol;
};
Tolerance tolerance(capsule_dtype dtype) {
    return dtype == CAPSULE_DTYPE_FLOAT64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-5, 1e-6};
}
const char* dtype_name(capsule_dtype d) { return d == CAPSULE_DTYPE_FLOAT64 ? "float64" : "float32"; }
constexpr capsule_dtype kFloatTypes[] = {CAPSULE_DTYPE_FLOAT32, CAPSULE_DTYPE_FLOAT64};

/// Runs `capsule`'s forward kernel on the device; failures are reported and yield {}.
Values run_forward(const std::string& capsule, capsule_dtype dtype, const std::vector<HostTensor>& inputs,
                   const std::vector<HostTensor>& params, const std::vector<Attr>& attrs,
                   const Dims& out_shape) {
    const auto* k = find_kernel(capsule);
    if (!k) {
        ADD_FAILURE() << "no kernel " << capsule;
        return {};
    }
    DeviceCall call(dtype, inputs, params, attrs, out_shape);
    if (auto err = call.forward(*k); !err.empty()) {
        ADD_FAILURE() << capsule << " forward failed: " << err;
        return {};
    }
    return call.output->download();
}

/// Checks `capsule`'s backward kernel in float64 against central differences of its forward
/// kernel, for every input and parameter, with a fixed pseudo-random upstream gradient.
void check_gradient(const std::string& capsule, const std::vector<HostTensor>& inputs,
                    const std::vector<HostTensor>& params, const std::vector<Attr>& attrs,
                    const Dims& out_shape, double tol = 1e-6) {
    SCOPED_TRACE(capsule + " backward");
    const auto* k = find_kernel(capsule);
    ASSERT_NE(k, nullptr);
    ASSERT_NE(k->backward, nullptr);
    constexpr capsule_dtype f64 = CAPSULE_DTYPE_FLOAT64;
    DeviceCall base(f64, inputs, params, attrs, out_shape);
    ASSERT_EQ(base.forward(*k), "");

    HostTensor gout{out_shape, Values(static_cast<size_t>(count_of(out_shape)))};
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (auto& v : gout.values) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        v = double(state >> 11) / double(1ull << 53) * 2.0 - 1.0;
    }
    DeviceTensor gout_dev(f64, gout);
    std::vector<std::unique_ptr<DeviceTensor>> gin, gpar;
    std::vector<capsule_tensor_view> gin_views, gpar_views;
    for (const auto& t : inputs) gin.push_back(std::make_unique<DeviceTensor>(f64, t.shape));
    for (const auto& t : params) gpar.push_back(std::make_unique<DeviceTensor>(f64, t.shape));
    for (auto& t : gin) gin_views.push_back(t->view());
    for (auto& t : gpar) gpar_views.push_back(t->view());
    const capsule_tensor_view gout_view = gout_dev.view();

    capsule_backward_args args{};
    args.struct_size = sizeof args;
    args.inputs = base.in_views.data();
    args.num_inputs = base.in_views.size();
    args.params = base.param_views.data();
    args.num_params = base.param_views.size();
    args.outputs = &base.out_view;
    args.num_outputs = 1;
    args.grad_outputs = &gout_view;
    args.grad_inputs = gin_views.data();
    args.grad_params = gpar_views.data();
    args.attrs = base.attr_views_.data();
    args.num_attrs = base.attr_views_.size();
    capsule_status st{};
    st.struct_size = sizeof st;
    ASSERT_EQ(k->backward(&args, &st), CAPSULE_OK) << st.message;

    auto objective = [&](const std::vector<HostTensor>& in, const std::vector<HostTensor>& par) {
        const Values y = run_forward(capsule, f64, in, par, attrs, out_shape);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += y[i] * gout.values[i];
        return s;
    };
    const double h = 1e-6;
    auto check = [&](bool is_param, size_t index, const DeviceTensor& grad) {
        const auto& src = is_param ? params[index] : inputs[index];
        const Values got = grad.download();
        Values numeric(src.values.size());
        for (size_t e = 0; e < src.values.size(); ++e) {
            auto in_plus = inputs, in_minus = inputs;
            auto par_plus = params, par_minus = params;
            (is_param ? par_plus : in_plus)[index].values[e] += h;
            (is_param ? par_minus : in_minus)[index].values[e] -= h;
            numeric[e] = (objective(in_plus, par_plus) - objective(in_minus, par_minus)) / (2 * h);
        }
        EXPECT_TRUE(all_close(got, numeric, tol, tol))
            << (is_param ? "grad of parameter " : "grad of input ") << index;
    };
    for (size_t i = 0; i < inputs.size(); ++i) check(false, i, *gin[i]);
    for (size_t i = 0; i < params.size(); ++i) check(true, i, *gpar[i]);
}

// ---------------------------------------------------------------------------------------------
// Host references (independent of the plugin)

Dims broadcast(const Dims& a, const Dims& b) {
    const size_t rank = std::max(a.size(), b.size());
    Dims out(rank);
    for (size_t i = 0; i < rank; ++i) {
        const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
        const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
        out[i] = std::max(da, db);
    }
    return out;
}

/// Row-major index in `shape` (right-aligned, size-1 dims broadcast) of output coordinates.
int64_t source_index(const Dims& coords, const Dims& shape) {
    int64_t index = 0;
    const size_t pad = coords.size() - shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
        index = index * shape[d] + (shape[d] == 1 ? 0 : coords[d + pad]);
    return index;
}

Dims coords_of(int64_t flat, const Dims& shape) {
    Dims c(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
        c[d] = flat % shape[d];
        flat /= shape[d];
    }
    return c;
}

HostTensor host_binary(const HostTensor& a, const HostTensor& b,
                       const std::function<double(double, double)>& f) {
    HostTensor out{broadcast(a.shape, b.shape), {}};
    for (int64_t o = 0; o < count_of(out.shape); ++o) {
        const Dims c = coords_of(o, out.shape);
        out.values.push_back(f(a.values[source_index(c, a.shape)], b.values[source_index(c, b.shape)]));
    }
    return out;
}

Values host_softmax(const HostTensor& x, int64_t axis, bool log) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (axis < 0) axis += rank;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape[d];
    const int64_t n = x.shape[axis];
    Values y(x.values.size());
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            auto at = [&](int64_t j) { return static_cast<size_t>((o * n + j) * inner + i); };
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < n; ++j) m = std::max(m, x.values[at(j)]);
            for (int64_t j = 0; j < n; ++j) s += std::exp(x.values[at(j)] - m);
            for (int64_t j = 0; j < n; ++j)
                y[at(j)] = log ? x.values[at(j)] - m - std::log(s) : std::exp(x.values[at(j)] - m) / s;
        }
    return y;
}

/// numpy.matmul.
HostTensor host_matmul(const HostTensor& a0, const HostTensor& b0) {
    Dims a = a0.shape, b = b0.shape;
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
    const Dims ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    const Dims batch = broadcast(ba, bb);
    HostTensor out;
    out.shape = batch;
    if (a0.shape.size() > 1) out.shape.push_back(m);
    if (b0.shape.size() > 1) out.shape.push_back(n);
    for (int64_t p = 0; p < count_of(batch); ++p) {
        const Dims c = coords_of(p, batch);
        const int64_t ia = source_index(c, ba) * m * k, ib = source_index(c, bb) * k * n;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t q = 0; q < k; ++q)
                    s += a0.values[ia + i * k + q] * b0.values[ib + q * n + j];
                out.values.push_back(s);
            }
    }
    return out;
}

/// Deterministic values in [lo, hi).
Values ramp(int64_t n, double lo, double hi, uint64_t seed = 1) {
    Values v(static_cast<size_t>(n));
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (auto& x : v) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x = lo + (hi - lo) * (double(state >> 11) / double(1ull << 53));
    }
    return v;
}
HostTensor tensor(Dims shape, double lo, double hi, uint64_t seed = 1) {
    const int64_t n = count_of(shape);
    return {std::move(shape), ramp(n, lo, hi, seed)};
}

// ---------------------------------------------------------------------------------------------
// Fixture: kernels need a usable device

class CudaKernels : public ::testing::Test {
protected:
    void SetUp() override {
        REQUIRE_PLUGIN();
        const auto& p = probe_result();
        if (p.returned != CAPSULE_OK)
            GTEST_SKIP() << "no usable CUDA device, the plugin's probe says: " << p.status.message;
    }
};

struct UnaryCase {
    std::string op;
    std::vector<Attr> attrs;
    std::function<double(double)> f;
    double lo, hi;  // input range (smooth, away from kinks for the gradient check)
};

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double softplus(double x, double beta, double threshold) {
    return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}

std::vector<UnaryCase> unary_cases() {
    return {
        {"abs", {}, [](double x) { return std::fabs(x); }, -2, 2},
        {"sqrt", {}, [](double x) { return std::sqrt(x); }, 0.2, 3},
        {"relu", {}, [](double x) { return x > 0 ? x : 0.0; }, -2, 2},
        {"gelu", {}, gelu_erf, -3, 3},
        {"gelu", {string_attr("approximate", "tanh")}, gelu_tanh, -3, 3},
        {"sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }, -4, 4},
        {"tanh", {}, [](double x) { return std::tanh(x); }, -2, 2},
        {"softplus", {}, [](double x) { return softplus(x, 1, 20); }, -3, 3},
        {"softplus", {float_attr("beta", 2.0), float_attr("threshold", 1.0)},
         [](double x) { return softplus(x, 2, 1); }, -2, 2},
        {"exp", {}, [](double x) { return std::exp(x); }, -2, 2},
        {"log", {}, [](double x) { return std::log(x); }, 0.2, 4},
        {"sin", {}, [](double x) { return std::sin(x); }, -3, 3},
        {"cos", {}, [](double x) { return std::cos(x); }, -3, 3},
        {"inv", {}, [](double x) { return 1 / x; }, 0.5, 3},
        {"scale", {float_attr("factor", -2.5)}, [](double x) { return -2.5 * x; }, -2, 2},
        {"clamp", {float_attr("min", -0.5), float_attr("max", 0.75)},
         [](double x) { return std::min(std::max(x, -0.5), 0.75); }, -2, 2},
        {"clamp", {float_attr("min", -0.5)}, [](double x) { return std::max(x, -0.5); }, -2, 2},
        {"clamp", {int_attr("max", 1)}, [](double x) { return std::min(x, 1.0); }, -2, 2},
    };
}

/// "[2, 3]".
std::string shape_text(const Dims& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
    return text + "]";
}

std::string describe(const std::vector<Attr>& attrs) {
    std::string s;
    for (const auto& a : attrs) s += " " + a.name;
    return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Without a device: the table, the probe, the guards

TEST(CudaPlugin, TableMatchesTheManifest) {
    REQUIRE_PLUGIN();
    const auto& p = *loaded().plugin;
    const auto manifest =
        capsule::load_manifest(std::filesystem::path(CAPSULE_SOURCE_DIR) / "plugins/cuda/native_cuda.capsule.json");
    EXPECT_EQ(p.struct_size, sizeof(capsule_plugin));
    EXPECT_EQ(p.abi_major, static_cast<uint32_t>(CAPSULE_ABI_MAJOR));
    EXPECT_EQ(p.abi_minor, static_cast<uint32_t>(CAPSULE_ABI_MINOR));
    EXPECT_EQ(p.abi_major, manifest.abi.major);
    EXPECT_STREQ(p.name, manifest.name.c_str());
    EXPECT_STREQ(p.version, manifest.version.c_str());
    EXPECT_EQ(p.device, CAPSULE_DEVICE_CUDA);
    EXPECT_EQ(manifest.device, capsule::Device::cuda);
    ASSERT_TRUE(manifest.library.has_value());
    EXPECT_EQ(*manifest.library, kLibraryName);
    EXPECT_NE(p.probe, nullptr);

    std::map<std::string, const capsule::KernelCapsule*> declared;
    for (const auto& c : manifest.capsules) declared[c.name] = &c;
    std::set<std::string> implemented;
    for (size_t i = 0; i < p.num_kernels; ++i) {
        const auto& k = p.kernels[i];
        SCOPED_TRACE(k.capsule_name);
        EXPECT_EQ(k.struct_size, sizeof(capsule_kernel));
        EXPECT_TRUE(implemented.insert(k.capsule_name).second) << "duplicate kernel";
        EXPECT_NE(k.forward, nullptr);
        auto it = declared.find(k.capsule_name);
        ASSERT_NE(it, declared.end()) << "kernel not declared in the manifest";
        EXPECT_EQ(it->second->runtime, capsule::RuntimeSupport::eager)
            << "the manifest must mark an implemented capsule eager";
        if (it->second->vjp_mode != capsule::VJPMode::none) {
            EXPECT_NE(k.backward, nullptr);
        }
    }
    // A build without cuDNN has no conv2d, pooling or batch_norm kernels (plugins/cuda/CMakeLists.txt); the
    // manifest it generates beside the library then marks them planner-only.
    const std::set<std::string> on_cudnn{"native_cuda.conv2d", "native_cuda.max_pool2d", "native_cuda.max_pool2d_pad",
                                         "native_cuda.avg_pool2d", "native_cuda.avg_pool2d_pad",
                                         "native_cuda.batch_norm"};
    const bool cudnn = implemented.count("native_cuda.conv2d") == 1;
    for (const auto& c : manifest.capsules) {
        if (on_cudnn.count(c.name) && !cudnn) continue;
        const bool runs = c.runtime == capsule::RuntimeSupport::eager ||
                          c.runtime == capsule::RuntimeSupport::test_only;
        EXPECT_EQ(runs, implemented.count(c.name) == 1)
            << c.name << " is " << to_string(c.runtime) << " in the manifest";
    }
    EXPECT_EQ(implemented.size(), cudnn ? 48u : 42u);

    // A different major ABI is refused.
    EXPECT_EQ(loaded().entry(CAPSULE_ABI_MAJOR + 1, 0), nullptr);

    const auto* di = p.device_interface;
    ASSERT_NE(di, nullptr);
    EXPECT_EQ(di->struct_size, sizeof(capsule_device_interface));
    EXPECT_NE(di->allocate, nullptr);
    EXPECT_NE(di->release, nullptr);
    EXPECT_NE(di->copy_to_device, nullptr);
    EXPECT_NE(di->copy_to_host, nullptr);
    EXPECT_NE(di->synchronize, nullptr);
}

TEST(CudaPlugin, ProbeSaysWhyNoDeviceIsUsable) {
    REQUIRE_PLUGIN();
    const auto& p = probe_result();
    std::cout << "[   INFO   ] native_cuda probe: " << (p.returned == CAPSULE_OK ? "ok: " : "failed: ")
              << p.status.message << std::endl;
    if (p.returned == CAPSULE_OK)
        GTEST_SKIP() << "a CUDA device is usable here (" << p.status.message
                     << "); this test checks the message when none is";
    EXPECT_EQ(p.returned, CAPSULE_ERROR_DEVICE);
    EXPECT_EQ(p.status.code, p.returned);
    const std::string message = p.status.message;
    EXPECT_FALSE(message.empty());
    EXPECT_NE(message.find("native_cuda"), std::string::npos) << message;
    EXPECT_NE(message.find("(cudaError"), std::string::npos)
        << "the message names the CUDA error: " << message;
    EXPECT_NE(message.find("CUDA runtime"), std::string::npos)
        << "the message gives the runtime version: " << message;
    // Probing again gives the same answer (no state is left behind).
    capsule_status again{};
    again.struct_size = sizeof again;
    EXPECT_EQ(loaded().plugin->probe(&again), p.returned);
    EXPECT_STREQ(again.message, p.status.message);
}

TEST(CudaPlugin, KernelsRefuseBadArgumentsBeforeTouchingTheDevice) {
    REQUIRE_PLUGIN();
    // Views with fake pointers: every call must fail in its guards, before any CUDA call.
    float fake[16] = {};
    const Dims s23{2, 3}, s3{3}, s4{4}, s34{3, 4}, s44{4, 4};
    const Dims st23 = contiguous_strides(s23), st3 = contiguous_strides(s3), st4 = contiguous_strides(s4),
               st34 = contiguous_strides(s34), st44 = contiguous_strides(s44);
    auto view = [&](const Dims& shape, const Dims& strides, int32_t device, int32_t dtype) {
        capsule_tensor_view v{};
        v.struct_size = sizeof v;
        v.dtype = dtype;
        v.device = device;
        v.rank = static_cast<int32_t>(shape.size());
        v.shape = shape.data();
        v.strides = strides.data();
        v.data = fake;
        return v;
    };
    auto call = [&](const char* capsule, std::vector<capsule_tensor_view> in, capsule_tensor_view out,
                    std::vector<capsule_attribute> attrs = {}) {
        EXPECT_NE(find_kernel(capsule), nullptr) << capsule;
        return forward_on_views(capsule, in, {}, {out}, attrs);
    };
    constexpr int32_t cuda = CAPSULE_DEVICE_CUDA, cpu = CAPSULE_DEVICE_CPU;
    constexpr int32_t f32 = CAPSULE_DTYPE_FLOAT32, f64 = CAPSULE_DTYPE_FLOAT64, i64 = CAPSULE_DTYPE_INT64;

    auto [code, message] = call("native_cuda.add", {view(s23, st23, cpu, f32), view(s23, st23, cuda, f32)},
                                view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "input 0 is a cpu tensor; native_cuda kernels take CUDA tensors");

    std::tie(code, message) = call("native_cuda.relu", {view(s23, st23, cuda, i64)}, view(s23, st23, cuda, i64));
    EXPECT_EQ(code, CAPSULE_ERROR_UNSUPPORTED);
    EXPECT_EQ(message, "input 0 has dtype int64; native_cuda kernels support float32 and float64");

    std::tie(code, message) = call("native_cuda.mul", {view(s23, st23, cuda, f32), view(s23, st23, cuda, f64)},
                                   view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "input 1 has dtype float64 but input 0 has float32");

    std::tie(code, message) = call("native_cuda.sub", {view(s23, st23, cuda, f32), view(s4, st4, cuda, f32)},
                                   view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "shapes [2, 3] and [4] do not broadcast");

    std::tie(code, message) = call("native_cuda.add", {view(s23, st23, cuda, f32), view(s3, st3, cuda, f32)},
                                   view(s34, st34, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "output has shape [3, 4], expected [2, 3]");

    const Dims transposed{1, 2};  // a [2, 3] view with column-major strides
    std::tie(code, message) = call("native_cuda.exp", {view(s23, transposed, cuda, f32)}, view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "input 0 is not row-major contiguous (dimension 1 has stride 2, expected 1)");

    std::tie(code, message) = call("native_cuda.matmul", {view(s23, st23, cuda, f32), view(s44, st44, cuda, f32)},
                                   view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "matmul inner dimensions differ: [2, 3] x [4, 4]");

    std::tie(code, message) = call("native_cuda.scale", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "scale needs attribute 'factor'");

    std::vector<Attr> axis{int_attr("axis", 2)};
    std::tie(code, message) = call("native_cuda.softmax", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(axis));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "attribute 'axis' = 2 is out of range for rank 2");

    std::vector<Attr> approximate{string_attr("approximate", "fast")};
    std::tie(code, message) = call("native_cuda.gelu", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(approximate));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "gelu attribute 'approximate' must be 'none' or 'tanh', got 'fast'");

    std::tie(code, message) = call("native_cuda.linear", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "missing parameter 0");

    const Dims s6{6}, s32{3, 2}, s53{5, 3};
    const Dims st6 = contiguous_strides(s6), st32 = contiguous_strides(s32), st53 = contiguous_strides(s53);
    std::tie(code, message) = call("native_cuda.reshape", {view(s23, st23, cuda, f32)}, view(s44, st44, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "reshape output [4, 4] does not hold the 6 elements of [2, 3]");
    std::vector<Attr> axis0{int_attr("axis", 0)}, axis1{int_attr("axis", 1)};
    std::tie(code, message) = call("native_cuda.concat", {view(s23, st23, cuda, f32), view(s32, st32, cuda, f32)},
                                   view(s53, st53, cuda, f32), attr_views(axis0));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "concat input 1 [3, 2] differs from input 0 [2, 3] off the axis");
    std::tie(code, message) = call("native_cuda.concat", {view(s23, st23, cuda, f32), view(s6, st6, cuda, f32)},
                                   view(s53, st53, cuda, f32), attr_views(axis0));
    EXPECT_EQ(message, "concat input 1 [6] has another rank than input 0 [2, 3]");
    std::tie(code, message) = call("native_cuda.concat", {view(s23, st23, cuda, f32), view(s23, st23, cuda, f32)},
                                   view(s53, st53, cuda, f32), attr_views(axis0));
    EXPECT_EQ(message, "output has shape [5, 3], expected [4, 3]");
    std::tie(code, message) = call("native_cuda.concat", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32));
    EXPECT_EQ(message, "concat needs attribute 'axis'");
    std::vector<Attr> axes5{Attr{"axes", CAPSULE_ATTR_INT, 5, 0, {}}};
    std::tie(code, message) = call("native_cuda.reduce_mean", {view(s23, st23, cuda, f32)}, view(s3, st3, cuda, f32),
                                   attr_views(axes5));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "reduce_mean axis 5 is out of range for rank 2");
    std::tie(code, message) = call("native_cuda.reduce_sum", {view(s23, st23, cuda, f32)}, view(s3, st3, cuda, f32),
                                   attr_views(axis1));
    EXPECT_EQ(message, "output has shape [3], expected []");

    // cross_entropy: logits [2, 3], int64 targets [2].
    const Dims s2{2}, s0{};
    const Dims st2 = contiguous_strides(s2), st0 = contiguous_strides(s0);
    std::tie(code, message) = call("native_cuda.cross_entropy", {view(s23, st23, cuda, f32), view(s2, st2, cuda, f32)},
                                   view(s0, st0, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "target must be int64");
    std::vector<Attr> bad_reduction{string_attr("reduction", "max")};
    std::tie(code, message) = call("native_cuda.cross_entropy", {view(s23, st23, cuda, f32), view(s2, st2, cuda, i64)},
                                   view(s0, st0, cuda, f32), attr_views(bad_reduction));
    EXPECT_EQ(message, "cross_entropy reduction must be mean, sum or none, got 'max'");
    std::tie(code, message) = call("native_cuda.cross_entropy", {view(s23, st23, cuda, f32), view(s3, st3, cuda, i64)},
                                   view(s0, st0, cuda, f32));
    EXPECT_EQ(message, "target has shape [3], expected [2]");
    // The optimizer steps: sgd needs lr and step; adam checks its betas.
    std::tie(code, message) = call("native_cuda.sgd", {view(s23, st23, cuda, f32), view(s23, st23, cuda, f32),
                                                       view(s23, st23, cuda, f32)},
                                   view(s23, st23, cuda, f32));
    EXPECT_EQ(message, "sgd writes 2 outputs (parameter and 1 state buffer(s)), got 1");

    // scaled_dot_product_attention (native_cuda.flash_attention): q [1, 2, E], k [1, 3, E], v [1, 3, 4].
    const Dims q1{1, 2, 4}, k1{1, 3, 4}, v1{1, 3, 4}, kw{1, 3, 5}, q130{1, 2, 130}, k130{1, 3, 130}, m33{3, 3}, m23{2, 3};
    const Dims stq1 = contiguous_strides(q1), stk1 = contiguous_strides(k1), stkw = contiguous_strides(kw),
               stq130 = contiguous_strides(q130), stk130 = contiguous_strides(k130), stm33 = contiguous_strides(m33),
               stm23 = contiguous_strides(m23);
    const auto attention = [&](std::vector<capsule_tensor_view> in, std::vector<Attr> attrs = {}) {
        return call("native_cuda.flash_attention", std::move(in), view(q1, stq1, cuda, f32), attr_views(attrs));
    };
    const auto q = view(q1, stq1, cuda, f32), k = view(k1, stk1, cuda, f32), v = view(v1, stk1, cuda, f32);
    std::tie(code, message) = attention({q, view(kw, stkw, cuda, f32), v});
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "scaled_dot_product_attention: query and key embeddings differ ([1, 2, 4] and [1, 3, 5])");
    std::tie(code, message) = attention({view(q130, stq130, cuda, f32), view(k130, stk130, cuda, f32), v});
    EXPECT_EQ(code, CAPSULE_ERROR_UNSUPPORTED);
    EXPECT_EQ(message, "scaled_dot_product_attention: native_cuda.flash_attention keeps a head of at most 128 values "
                       "per row in registers; query [1, 2, 130] and value [1, 3, 4] have 130");
    std::tie(code, message) = attention({q, k, v, view(m23, stm23, cuda, CAPSULE_DTYPE_BOOL)}, {bool_attr("is_causal", true)});
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "scaled_dot_product_attention: is_causal cannot be combined with a mask");
    std::tie(code, message) = attention({q, k, v, view(m23, stm23, cuda, i64)});
    EXPECT_EQ(message, "scaled_dot_product_attention: mask must be bool or float32, got int64");
    std::tie(code, message) = attention({q, k, v, view(m33, stm33, cuda, f32)});
    EXPECT_EQ(message, "scaled_dot_product_attention: mask [3, 3] does not broadcast to the scores [1, 2, 3]");
    std::tie(code, message) = attention({q, k, v}, {float_attr("scale", INFINITY)});
    EXPECT_EQ(message, "scaled_dot_product_attention: attribute 'scale' must be finite");

    // Element moves and layer_norm: x [2, 3].
    std::vector<Attr> perm_attrs{ints_attr("dims", {0, 0})};
    std::tie(code, message) = call("native_cuda.permute", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(perm_attrs));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "permute: attribute 'dims' = [0, 0] repeats axis 0");
    std::tie(code, message) = call("native_cuda.transpose2d", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32));
    EXPECT_EQ(message, "output has shape [2, 3], expected [3, 2]");
    std::tie(code, message) = call("native_cuda.transpose3d_last_two", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32));
    EXPECT_EQ(message, "transpose3d_last_two expects a rank-3 input, got rank 2");
    const Dims nine(9, 1), st9 = contiguous_strides(nine);
    std::vector<Attr> nine_dims{ints_attr("dims", {8, 7, 6, 5, 4, 3, 2, 1, 0})};
    std::tie(code, message) = call("native_cuda.permute", {view(nine, st9, cuda, f32)}, view(nine, st9, cuda, f32),
                                   attr_views(nine_dims));
    EXPECT_EQ(code, CAPSULE_ERROR_UNSUPPORTED);
    EXPECT_EQ(message, "permute: native_cuda moves elements of tensors of at most 8 dimensions, got [1, 1, 1, 1, 1, 1, 1, 1, 1]");
    std::vector<Attr> zero_step{ints_attr("starts", {0}), ints_attr("ends", {2}), ints_attr("steps", {0})};
    std::tie(code, message) = call("native_cuda.slice", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(zero_step));
    EXPECT_EQ(message, "slice: attribute 'steps' has a 0 step");
    std::vector<Attr> clamped{ints_attr("starts", {-100}), ints_attr("ends", {INT64_MAX}), ints_attr("axes", {1})};
    std::tie(code, message) = call("native_cuda.slice", {view(s23, st23, cuda, f32)}, view(s4, st4, cuda, f32),
                                   attr_views(clamped));
    EXPECT_EQ(message, "output has shape [4], expected [2, 3]");  // clamped to the whole axis
    std::vector<Attr> wide_reflect{ints_attr("pads", {0, 3, 0, 0}), string_attr("mode", "reflect")};
    std::tie(code, message) = call("native_cuda.pad", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(wide_reflect));
    EXPECT_EQ(message, "pad: mode 'reflect' needs pads smaller than the padded axis: axis 1 has size 3");
    std::vector<Attr> crop{ints_attr("pads", {-3, 0, 0, 0})};
    std::tie(code, message) = call("native_cuda.pad", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(crop));
    EXPECT_EQ(message, "pad: attribute 'pads' crops axis 0 (size 2) below 0");
    std::tie(code, message) = call("native_cuda.gather", {view(s23, st23, cuda, f32), view(s2, st2, cuda, f32)},
                                   view(s23, st23, cuda, f32));
    EXPECT_EQ(message, "gather: indices (input 1) must be int64, got float32");
    std::vector<Attr> axis_far{int_attr("axis", 2)};
    std::tie(code, message) = call("native_cuda.gather", {view(s23, st23, cuda, f32), view(s2, st2, cuda, i64)},
                                   view(s23, st23, cuda, f32), attr_views(axis_far));
    EXPECT_EQ(message, "gather: attribute 'axis' = 2 is out of range for rank 2");
    std::vector<Attr> ln{ints_attr("normalized_shape", {2}), bool_attr("elementwise_affine", false)};
    std::tie(code, message) = call("native_cuda.layer_norm", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(ln));
    EXPECT_EQ(message, "layer_norm: normalized_shape [2] does not match the trailing dimensions of [2, 3]");
    std::vector<Attr> ln3{ints_attr("normalized_shape", {3})};
    std::tie(code, message) = call("native_cuda.layer_norm", {view(s23, st23, cuda, f32)}, view(s23, st23, cuda, f32),
                                   attr_views(ln3));
    EXPECT_EQ(message, "layer_norm expects 2 parameters (weight, bias as elementwise_affine and bias say), got 0");

    if (!find_kernel("native_cuda.conv2d")) return;  // built without cuDNN: conv2d is planner-only
    // conv2d: x [1, 2, 5, 5], weight [3, 2, 3, 3], bias [3] -> y [1, 3, 3, 3].
    const Dims x4{1, 2, 5, 5}, x2{1, 2, 2, 2}, w4{3, 2, 3, 3}, w1{3, 1, 3, 3}, y4{1, 3, 3, 3}, y5{1, 3, 5, 5}, b3{3};
    const Dims stx4 = contiguous_strides(x4), stx2 = contiguous_strides(x2), stw4 = contiguous_strides(w4),
               stw1 = contiguous_strides(w1), sty4 = contiguous_strides(y4), sty5 = contiguous_strides(y5),
               stb3 = contiguous_strides(b3);
    // `capsule`'s forward on input x with parameters.
    auto call_with_params = [&](const char* capsule, const capsule_tensor_view& x,
                                const std::vector<capsule_tensor_view>& params, const capsule_tensor_view& out,
                                const std::vector<Attr>& attrs) {
        return forward_on_views(capsule, {x}, params, {out}, attr_views(attrs));
    };
    auto conv = [&](const Dims& xs, const Dims& xst, std::vector<capsule_tensor_view> params, capsule_tensor_view out,
                    std::vector<Attr> attrs) {
        return call_with_params("native_cuda.conv2d", view(xs, xst, cuda, f32), params, out, attrs);
    };
    const auto w = view(w4, stw4, cuda, f32), b = view(b3, stb3, cuda, f32), y = view(y4, sty4, cuda, f32);
    const std::vector<Attr> k3{int_attr("out_channels", 3), int_attr("kernel_size", 3)};
    std::tie(code, message) = conv(x4, stx4, {w}, y, k3);
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "conv2d expects parameters weight and bias");
    std::vector<Attr> no_bias = k3;
    no_bias.push_back(bool_attr("bias", false));
    std::tie(code, message) = conv(x4, stx4, {w, b}, y, no_bias);
    EXPECT_EQ(message, "conv2d with bias = false expects the parameter weight only");
    std::tie(code, message) = conv(x4, stx4, {view(w1, stw1, cuda, f32), b}, y, k3);
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "weight has shape [3, 1, 3, 3], expected [3, 2, 3, 3]");
    std::vector<Attr> groups = k3;
    groups.push_back(int_attr("groups", 4));
    std::tie(code, message) = conv(x4, stx4, {w, b}, y, groups);
    EXPECT_EQ(message, "conv2d groups 4 must divide the input channels 2 and out_channels 3");
    std::tie(code, message) = conv(x4, stx4, {w, b}, view(y5, sty5, cuda, f32), k3);
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "output has shape [1, 3, 5, 5], expected [1, 3, 3, 3]");
    std::tie(code, message) = conv(x2, stx2, {w, b}, y, k3);
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "conv2d padded input 2 is smaller than the dilated kernel 3");
    std::vector<Attr> zero_stride = k3;
    zero_stride.push_back(int_attr("stride", 0));
    std::tie(code, message) = conv(x4, stx4, {w, b}, y, zero_stride);
    EXPECT_EQ(message, "conv2d needs stride >= 1, dilation >= 1 and padding >= 0");
    std::tie(code, message) = conv(x4, stx4, {w, view(b3, stb3, cuda, f64)}, y, k3);
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "bias has dtype float64 but input 0 has float32");

    // Pooling: x [1, 2, 5, 5].
    const Dims p2{1, 2, 2, 2}, p3{1, 2, 3, 3};
    const Dims stp2 = contiguous_strides(p2), stp3 = contiguous_strides(p3);
    std::tie(code, message) = call("native_cuda.max_pool2d", {view(x4, stx4, cuda, f32)}, view(p2, stp2, cuda, f32));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "max_pool2d needs attribute 'kernel_size'");
    std::vector<Attr> wide_pad{int_attr("kernel_size", 2), int_attr("padding", 2)};
    std::tie(code, message) = call("native_cuda.max_pool2d_pad", {view(x4, stx4, cuda, f32)}, view(p3, stp3, cuda, f32),
                                   attr_views(wide_pad));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "max_pool2d_pad needs kernel_size >= 1, stride >= 1 and 0 <= padding <= kernel_size / 2");
    // 5 wide, window 2, stride 2, ceil_mode: a third window [4, 6) that cuDNN does not have.
    std::vector<Attr> ceil{int_attr("kernel_size", 2), bool_attr("ceil_mode", true)};
    std::tie(code, message) = call("native_cuda.avg_pool2d_pad", {view(x4, stx4, cuda, f32)}, view(p3, stp3, cuda, f32),
                                   attr_views(ceil));
    EXPECT_EQ(code, CAPSULE_ERROR_UNSUPPORTED);
    EXPECT_EQ(message, "avg_pool2d_pad with ceil_mode adds a window past the padding here; cuDNN pooling has no such window");
    std::vector<Attr> k2{int_attr("kernel_size", 2)};
    std::tie(code, message) = call("native_cuda.avg_pool2d", {view(x4, stx4, cuda, f32)}, view(p3, stp3, cuda, f32),
                                   attr_views(k2));
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "output has shape [1, 2, 3, 3], expected [1, 2, 2, 2]");

    // batch_norm: x [1, 2, 5, 5]; parameters [2].
    const Dims c2{2}, one_value{1, 2, 1, 1};
    const Dims stc2 = contiguous_strides(c2), st1 = contiguous_strides(one_value);
    const auto bn = [&](const Dims& xs, const Dims& xst, size_t params, std::vector<Attr> attrs) {
        const capsule_tensor_view x = view(xs, xst, cuda, f32);
        return call_with_params("native_cuda.batch_norm", x, std::vector(params, view(c2, stc2, cuda, f32)), x, attrs);
    };
    std::tie(code, message) = bn(x4, stx4, 2, {});
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "batch_norm expects parameters weight, bias, running_mean and running_var");
    std::tie(code, message) = bn(x4, stx4, 4, {bool_attr("affine", false)});
    EXPECT_EQ(message, "batch_norm with affine = false expects parameters running_mean and running_var");
    std::tie(code, message) = bn(one_value, st1, 4, {bool_attr("training", true)});
    EXPECT_EQ(code, CAPSULE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "batch_norm training needs more than 1 value per channel");
    std::tie(code, message) = bn(x4, stx4, 4, {float_attr("eps", 0)});
    EXPECT_EQ(message, "batch_norm attribute 'eps' must be > 0");
}

// ---------------------------------------------------------------------------------------------
// With a device: values against host references

TEST_F(CudaKernels, UnaryOpsMatchTheStandardLibrary) {
    for (auto dtype : kFloatTypes)
        for (const auto& c : unary_cases()) {
            SCOPED_TRACE(c.op + describe(c.attrs) + " " + dtype_name(dtype));
            HostTensor x = tensor({3, 5, 7}, c.lo, c.hi, 7);
            if (c.op == "relu" || c.op == "abs") x.values[3] = 0.0;
            Values want;
            for (double v : x.values) want.push_back(c.f(dtype == CAPSULE_DTYPE_FLOAT32 ? double(float(v)) : v));
            const auto got = run_forward("native_cuda." + c.op, dtype, {x}, {}, c.attrs, x.shape);
            const auto tol = tolerance(dtype);
            EXPECT_TRUE(all_close(got, want, tol.rtol, tol.atol));
        }
}

TEST_F(CudaKernels, UnaryOpsPropagateNaNAndHandleEmptyTensors) {
    const HostTensor x{{4}, {NAN, -1.0, 0.5, 3.0}};
    for (const char* op : {"relu", "exp", "tanh"}) {
        const auto y = run_forward(std::string("native_cuda.") + op, CAPSULE_DTYPE_FLOAT32, {x}, {}, {}, x.shape);
        ASSERT_EQ(y.size(), 4u);
        EXPECT_TRUE(std::isnan(y[0])) << op;
    }
    const auto clamped = run_forward("native_cuda.clamp", CAPSULE_DTYPE_FLOAT64, {x}, {},
                                     {float_attr("min", 0.0), float_attr("max", 1.0)}, x.shape);
    ASSERT_EQ(clamped.size(), 4u);
    EXPECT_TRUE(std::isnan(clamped[0]));
    EXPECT_EQ(clamped[1], 0.0);
    EXPECT_EQ(clamped[3], 1.0);
    const HostTensor empty{{0, 3}, {}};
    EXPECT_TRUE(run_forward("native_cuda.sigmoid", CAPSULE_DTYPE_FLOAT32, {empty}, {}, {}, empty.shape).empty());
}

TEST_F(CudaKernels, BinaryOpsBroadcastLikeNumPy) {
    const std::map<std::string, std::function<double(double, double)>> ops = {
        {"add", [](double a, double b) { return a + b; }},
        {"sub", [](double a, double b) { return a - b; }},
        {"mul", [](double a, double b) { return a * b; }},
        {"max", [](double a, double b) { return std::max(a, b); }},
        {"min", [](double a, double b) { return std::min(a, b); }},
    };
    const std::vector<std::pair<Dims, Dims>> shapes = {
        {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 3}, {4, 1}}, {{}, {2, 2}}, {{5, 1, 4, 1}, {1, 3, 1, 6}},
        {{300, 7}, {300, 1}}};
    for (auto dtype : kFloatTypes)
        for (const auto& [name, f] : ops)
            for (const auto& [sa, sb] : shapes) {
                SCOPED_TRACE(name + " " + dtype_name(dtype) + " " + std::to_string(sa.size()) + "-d x " +
                             std::to_string(sb.size()) + "-d");
                HostTensor a = tensor(sa, -2, 2, 3), b = tensor(sb, -2, 2, 4);
                if (dtype == CAPSULE_DTYPE_FLOAT32) {
                    for (auto& v : a.values) v = float(v);
                    for (auto& v : b.values) v = float(v);
                }
                const HostTensor want = host_binary(a, b, f);
                const auto got = run_forward("native_cuda." + name, dtype, {a, b}, {}, {}, want.shape);
                const auto tol = tolerance(dtype);
                EXPECT_TRUE(all_close(got, want.values, tol.rtol, tol.atol));
            }
}

TEST_F(CudaKernels, SoftmaxAndLogSoftmaxOverAnyAxis) {
    const HostTensor x = tensor({2, 3, 4}, -3, 3, 5);
    const HostTensor wide = tensor({3, 1000}, -10, 10, 6);  // rows wider than one block
    for (auto dtype : kFloatTypes)
        for (bool log : {false, true}) {
            const std::string capsule = log ? "native_cuda.log_softmax" : "native_cuda.softmax";
            const auto tol = tolerance(dtype);
            for (int64_t axis : {0, 1, 2, -1, -3}) {
                SCOPED_TRACE(capsule + " axis " + std::to_string(axis) + " " + dtype_name(dtype));
                const auto got = run_forward(capsule, dtype, {x}, {}, {int_attr("axis", axis)}, x.shape);
                EXPECT_TRUE(all_close(got, host_softmax(x, axis, log), tol.rtol * 5, tol.atol * 5));
            }
            SCOPED_TRACE(capsule + " default axis, 1000-wide rows " + dtype_name(dtype));
            const auto got = run_forward(capsule, dtype, {wide}, {}, {}, wide.shape);
            EXPECT_TRUE(all_close(got, host_softmax(wide, -1, log), tol.rtol * 10, tol.atol * 10));
        }
}

TEST_F(CudaKernels, MatmulFollowsNumPy) {
    const std::vector<std::pair<Dims, Dims>> shapes = {
        {{2, 3}, {3, 4}},          {{3}, {3, 4}},       {{2, 3}, {3}},         {{3}, {3}},
        {{2, 2, 3}, {2, 3, 4}},    {{2, 2, 3}, {3, 4}}, {{3}, {2, 3, 4}},      {{2, 3}, {5, 3, 2}},
        {{2, 1, 2, 3}, {3, 3, 2}}, {{64, 48}, {48, 80}}, {{2, 0}, {0, 3}}};
    for (auto dtype : kFloatTypes)
        for (const auto& [sa, sb] : shapes) {
            SCOPED_TRACE(std::string("matmul ") + dtype_name(dtype) + " " + std::to_string(count_of(sa)) +
                         " x " + std::to_string(count_of(sb)) + " elements, ranks " +
                         std::to_string(sa.size()) + " x " + std::to_string(sb.size()));
            const HostTensor a = tensor(sa, -1, 1, 8), b = tensor(sb, -1, 1, 9);
            const HostTensor want = host_matmul(a, b);
            const auto got = run_forward("native_cuda.matmul", dtype, {a, b}, {}, {}, want.shape);
            const auto tol = tolerance(dtype);
            EXPECT_TRUE(all_close(got, want.values, tol.rtol * 10, tol.atol * 10));
        }
}

TEST_F(CudaKernels, LinearWithAndWithoutBias) {
    const HostTensor x = tensor({2, 3, 4}, -1, 1, 10), w = tensor({5, 4}, -1, 1, 11), bias = tensor({5}, -1, 1, 12);
    HostTensor want{{2, 3, 5}, {}};
    for (int64_t r = 0; r < 6; ++r)
        for (int64_t o = 0; o < 5; ++o) {
            double s = 0;
            for (int64_t i = 0; i < 4; ++i) s += x.values[r * 4 + i] * w.values[o * 4 + i];
            want.values.push_back(s);
        }
    HostTensor want_bias = want;
    for (size_t i = 0; i < want_bias.values.size(); ++i) want_bias.values[i] += bias.values[i % 5];
    for (auto dtype : kFloatTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        const auto tol = tolerance(dtype);
        EXPECT_TRUE(all_close(run_forward("native_cuda.linear", dtype, {x}, {w, bias}, {int_attr("out_features", 5)},
                                          want.shape),
                              want_bias.values, tol.rtol * 10, tol.atol * 10));
        EXPECT_TRUE(all_close(run_forward("native_cuda.linear", dtype, {x}, {w},
                                          {int_attr("out_features", 5), bool_attr("bias", false)}, want.shape),
                              want.values, tol.rtol * 10, tol.atol * 10));
    }
}

TEST_F(CudaKernels, BackwardKernelsMatchFiniteDifferences) {
    for (const auto& c : unary_cases()) {
        SCOPED_TRACE(c.op + describe(c.attrs));
        HostTensor x = tensor({2, 5}, c.lo, c.hi, 13);
        for (auto& v : x.values)  // keep clear of the kinks of abs, relu and clamp
            for (double kink : {0.0, -0.5, 0.75, 1.0})
                if (std::fabs(v - kink) < 1e-3) v += 0.01;
        check_gradient("native_cuda." + c.op, {x}, {}, c.attrs, x.shape);
    }
    for (const char* op : {"add", "sub", "mul", "max", "min"}) {
        SCOPED_TRACE(op);
        const HostTensor a = tensor({2, 1, 3}, -2, 2, 14), b = tensor({4, 1}, -2, 2, 15);
        check_gradient(std::string("native_cuda.") + op, {a, b}, {}, {}, {2, 4, 3});
        check_gradient(std::string("native_cuda.") + op, {a, a}, {}, {}, a.shape);  // same shape, ties
    }
    for (const char* op : {"softmax", "log_softmax"})
        for (int64_t axis : {0, -1}) {
            SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
            const HostTensor x = tensor({3, 4}, -2, 2, 16);
            check_gradient(std::string("native_cuda.") + op, {x}, {}, {int_attr("axis", axis)}, x.shape);
        }
    const std::vector<std::pair<Dims, Dims>> matmuls = {
        {{2, 3}, {3, 4}}, {{3}, {3, 2}}, {{2, 3}, {3}}, {{3}, {3}}, {{2, 2, 3}, {3, 2}},
        {{3, 2}, {2, 2, 3}}, {{2, 1, 2, 3}, {3, 3, 2}}, {{2, 2, 3}, {2, 3, 2}}};
    for (const auto& [sa, sb] : matmuls) {
        SCOPED_TRACE("matmul " + std::to_string(sa.size()) + "-d x " + std::to_string(sb.size()) + "-d, " +
                     std::to_string(count_of(sa)) + " x " + std::to_string(count_of(sb)));
        const HostTensor a = tensor(sa, -1, 1, 17), b = tensor(sb, -1, 1, 18);
        check_gradient("native_cuda.matmul", {a, b}, {}, {}, host_matmul(a, b).shape);
    }
    const HostTensor x = tensor({2, 3, 4}, -1, 1, 19), w = tensor({5, 4}, -1, 1, 20), bias = tensor({5}, -1, 1, 21);
    check_gradient("native_cuda.linear", {x}, {w, bias}, {int_attr("out_features", 5)}, {2, 3, 5});
    check_gradient("native_cuda.linear", {x}, {w}, {bool_attr("bias", false)}, {2, 3, 5});
}

/// torch.nn.functional.conv2d by its definition: y[n, o, i, j] = bias[o] + Σ_{c, a, b}
/// x[n, g·C/G + c, i·stride − pad + a·dil, j·stride − pad + b·dil] · w[o, c, a, b] (zero outside x).
HostTensor host_conv2d(const HostTensor& x, const HostTensor& w, const HostTensor* bias, int64_t stride,
                       int64_t pad, int64_t dil, int64_t groups) {
    const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
    const int64_t O = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3];
    const int64_t OH = (H + 2 * pad - dil * (KH - 1) - 1) / stride + 1, OW = (W + 2 * pad - dil * (KW - 1) - 1) / stride + 1;
    HostTensor y{{N, O, OH, OW}, Values(size_t(N * O * OH * OW), 0.0)};
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o)
            for (int64_t i = 0; i < OH; ++i)
                for (int64_t j = 0; j < OW; ++j) {
                    double sum = bias ? bias->values[size_t(o)] : 0.0;
                    const int64_t g = o / (O / groups);
                    for (int64_t c = 0; c < Cg; ++c)
                        for (int64_t a = 0; a < KH; ++a)
                            for (int64_t b = 0; b < KW; ++b) {
                                const int64_t r = i * stride - pad + a * dil, q = j * stride - pad + b * dil;
                                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                                sum += x.values[size_t(((n * C + g * Cg + c) * H + r) * W + q)] *
                                       w.values[size_t(((o * Cg + c) * KH + a) * KW + b)];
                            }
                    y.values[size_t(((n * O + o) * OH + i) * OW + j)] = sum;
                }
    return y;
}

struct ConvCase {
    Dims x, w;
    int64_t stride, pad, dil, groups;
    bool bias;
};

/// Grouped, depthwise, strided, dilated, padded, 1x1 and bias-free convolutions.
std::vector<ConvCase> conv_cases() {
    return {{{2, 4, 7, 6}, {6, 2, 3, 3}, 2, 1, 1, 2, true}, {{1, 3, 8, 8}, {4, 3, 3, 3}, 1, 2, 2, 1, false},
            {{1, 4, 5, 5}, {4, 1, 3, 3}, 1, 1, 1, 4, true}, {{2, 5, 4, 4}, {3, 5, 1, 1}, 1, 0, 1, 1, true},
            {{2, 3, 9, 9}, {5, 3, 5, 5}, 3, 0, 1, 1, true}};
}

std::vector<Attr> conv_attrs(const ConvCase& c) {
    return {int_attr("out_channels", c.w[0]), int_attr("kernel_size", c.w[2]), int_attr("stride", c.stride),
            int_attr("padding", c.pad),       int_attr("dilation", c.dil),       int_attr("groups", c.groups),
            bool_attr("bias", c.bias)};
}

TEST_F(CudaKernels, Conv2dMatchesItsDefinition) {
    if (!find_kernel("native_cuda.conv2d")) GTEST_SKIP() << "built without cuDNN: conv2d is planner-only";
    for (auto dtype : kFloatTypes)
        for (const auto& c : conv_cases()) {
            SCOPED_TRACE("conv2d " + describe(conv_attrs(c)) + " " + dtype_name(dtype));
            const HostTensor x = tensor(c.x, -1, 1, 31), w = tensor(c.w, -1, 1, 32), b = tensor({c.w[0]}, -1, 1, 33);
            const HostTensor want = host_conv2d(x, w, c.bias ? &b : nullptr, c.stride, c.pad, c.dil, c.groups);
            std::vector<HostTensor> params{w};
            if (c.bias) params.push_back(b);
            const auto got = run_forward("native_cuda.conv2d", dtype, {x}, params, conv_attrs(c), want.shape);
            const auto tol = tolerance(dtype);
            EXPECT_TRUE(all_close(got, want.values, tol.rtol * 10, tol.atol * 10));
        }
}

TEST_F(CudaKernels, Conv2dGradientsMatchFiniteDifferences) {
    if (!find_kernel("native_cuda.conv2d")) GTEST_SKIP() << "built without cuDNN: conv2d is planner-only";
    for (const auto& c : conv_cases()) {
        SCOPED_TRACE("conv2d " + describe(conv_attrs(c)));
        const HostTensor x = tensor(c.x, -1, 1, 34), w = tensor(c.w, -1, 1, 35), b = tensor({c.w[0]}, -1, 1, 36);
        std::vector<HostTensor> params{w};
        if (c.bias) params.push_back(b);
        check_gradient("native_cuda.conv2d", {x}, params, conv_attrs(c),
                       host_conv2d(x, w, nullptr, c.stride, c.pad, c.dil, c.groups).shape);
    }
}

/// torch.nn.functional.max_pool2d / avg_pool2d by their definition (no ceil_mode): max over the
/// window's positions inside x (NaN if any is NaN), average over the whole window
/// (count_include_pad) or over its positions inside x.
HostTensor host_pool2d(const HostTensor& x, bool max, int64_t k, int64_t stride, int64_t pad, bool include_pad) {
    const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
    const int64_t OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
    HostTensor y{{N, C, OH, OW}, Values(size_t(N * C * OH * OW), 0.0)};
    for (int64_t p = 0; p < N * C; ++p)
        for (int64_t i = 0; i < OH; ++i)
            for (int64_t j = 0; j < OW; ++j) {
                double acc = max ? -INFINITY : 0.0;
                int64_t inside = 0;
                for (int64_t a = 0; a < k; ++a)
                    for (int64_t b = 0; b < k; ++b) {
                        const int64_t r = i * stride - pad + a, q = j * stride - pad + b;
                        if (r < 0 || r >= H || q < 0 || q >= W) continue;
                        const double v = x.values[size_t((p * H + r) * W + q)];
                        ++inside;
                        acc = max ? (std::isnan(v) || std::isnan(acc) ? NAN : std::max(acc, v)) : acc + v;
                    }
                y.values[size_t((p * OH + i) * OW + j)] = max ? acc : acc / double(include_pad ? k * k : inside);
            }
    return y;
}

TEST_F(CudaKernels, PoolingMatchesItsDefinition) {
    if (!find_kernel("native_cuda.max_pool2d")) GTEST_SKIP() << "built without cuDNN: pooling is planner-only";
    struct PoolCase {
        const char* capsule;
        bool max;
        int64_t k, stride, pad;
        bool include_pad;
    };
    const PoolCase cases[] = {{"max_pool2d", true, 2, 2, 0, true},      {"max_pool2d_pad", true, 3, 2, 1, true},
                              {"avg_pool2d", false, 3, 1, 0, true},     {"avg_pool2d_pad", false, 3, 2, 1, true},
                              {"avg_pool2d_pad", false, 3, 2, 1, false}};
    for (auto dtype : kFloatTypes)
        for (const auto& c : cases) {
            SCOPED_TRACE(std::string(c.capsule) + " k" + std::to_string(c.k) + " s" + std::to_string(c.stride) + " p" +
                         std::to_string(c.pad) + (c.include_pad ? "" : " exclude pad") + " " + dtype_name(dtype));
            HostTensor x = tensor({2, 3, 7, 6}, -2, -1, 37);  // all negative: padding must not win a max
            x.values[5] = NAN;
            std::vector<Attr> attrs{int_attr("kernel_size", c.k), int_attr("stride", c.stride)};
            if (std::string(c.capsule).ends_with("_pad")) attrs.push_back(int_attr("padding", c.pad));
            if (!c.include_pad) attrs.push_back(bool_attr("count_include_pad", false));
            const HostTensor want = host_pool2d(x, c.max, c.k, c.stride, c.pad, c.include_pad);
            const auto got = run_forward(std::string("native_cuda.") + c.capsule, dtype, {x}, {}, attrs, want.shape);
            const auto tol = tolerance(dtype);
            EXPECT_TRUE(all_close(got, want.values, tol.rtol * 10, tol.atol * 10));
        }
}

TEST_F(CudaKernels, PoolingGradientsMatchFiniteDifferences) {
    if (!find_kernel("native_cuda.max_pool2d")) GTEST_SKIP() << "built without cuDNN: pooling is planner-only";
    const HostTensor x = tensor({1, 2, 6, 5}, -1, 1, 38);  // distinct values: every window has one maximum
    check_gradient("native_cuda.max_pool2d_pad", {x}, {},
                   {int_attr("kernel_size", 3), int_attr("stride", 2), int_attr("padding", 1)}, {1, 2, 3, 3});
    check_gradient("native_cuda.avg_pool2d_pad", {x}, {},
                   {int_attr("kernel_size", 3), int_attr("stride", 2), int_attr("padding", 1),
                    bool_attr("count_include_pad", false)},
                   {1, 2, 3, 3});
    check_gradient("native_cuda.avg_pool2d", {x}, {}, {int_attr("kernel_size", 2)}, {1, 2, 3, 2});
}

/// torch.nn.functional.batch_norm by its definition: per channel, mean and biased variance over N
/// and the spatial dimensions (training) or the running ones, then (x − mean) / sqrt(var + eps)
/// · weight + bias.
HostTensor host_batch_norm(const HostTensor& x, const HostTensor* weight, const HostTensor* bias,
                           const HostTensor& running_mean, const HostTensor& running_var, bool training, double eps) {
    const int64_t N = x.shape[0], C = x.shape[1], S = count_of(x.shape) / std::max<int64_t>(N * C, 1);
    HostTensor y{x.shape, x.values};
    for (int64_t c = 0; c < C; ++c) {
        double mean = running_mean.values[size_t(c)], var = running_var.values[size_t(c)];
        if (training) {
            double sum = 0, sq = 0;
            for (int64_t n = 0; n < N; ++n)
                for (int64_t i = 0; i < S; ++i) sum += x.values[size_t((n * C + c) * S + i)];
            mean = sum / double(N * S);
            for (int64_t n = 0; n < N; ++n)
                for (int64_t i = 0; i < S; ++i) {
                    const double d = x.values[size_t((n * C + c) * S + i)] - mean;
                    sq += d * d;
                }
            var = sq / double(N * S);
        }
        const double w = weight ? weight->values[size_t(c)] : 1.0, b = bias ? bias->values[size_t(c)] : 0.0;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < S; ++i) {
                double& v = y.values[size_t((n * C + c) * S + i)];
                v = (v - mean) / std::sqrt(var + eps) * w + b;
            }
    }
    return y;
}

TEST_F(CudaKernels, BatchNormMatchesItsDefinition) {
    if (!find_kernel("native_cuda.batch_norm")) GTEST_SKIP() << "built without cuDNN: batch_norm is planner-only";
    const HostTensor w = tensor({3}, 0.5, 2, 40), b = tensor({3}, -1, 1, 41), mean = tensor({3}, -0.5, 0.5, 42),
                     var = tensor({3}, 0.5, 2, 43);
    for (auto dtype : kFloatTypes)
        for (const Dims& shape : {Dims{4, 3}, Dims{2, 3, 5}, Dims{2, 3, 4, 5}})
            for (bool training : {false, true})
                for (bool affine : {true, false}) {
                    SCOPED_TRACE(std::string("batch_norm rank ") + std::to_string(shape.size()) +
                                 (training ? " training" : " inference") + (affine ? "" : " affine false") + " " +
                                 dtype_name(dtype));
                    const HostTensor x = tensor(shape, -3, 3, 44);
                    const std::vector<Attr> attrs{bool_attr("training", training), bool_attr("affine", affine),
                                                  float_attr("eps", 1e-3)};
                    const std::vector<HostTensor> params = affine ? std::vector<HostTensor>{w, b, mean, var}
                                                                  : std::vector<HostTensor>{mean, var};
                    const HostTensor want =
                        host_batch_norm(x, affine ? &w : nullptr, affine ? &b : nullptr, mean, var, training, 1e-3);
                    const auto got = run_forward("native_cuda.batch_norm", dtype, {x}, params, attrs, x.shape);
                    const auto tol = tolerance(dtype);
                    EXPECT_TRUE(all_close(got, want.values, tol.rtol * 10, tol.atol * 10));
                }
}

TEST_F(CudaKernels, BatchNormGradientsMatchFiniteDifferences) {
    if (!find_kernel("native_cuda.batch_norm")) GTEST_SKIP() << "built without cuDNN: batch_norm is planner-only";
    const HostTensor x = tensor({2, 3, 2, 3}, -2, 2, 45), w = tensor({3}, 0.5, 2, 46), b = tensor({3}, -1, 1, 47),
                     mean = tensor({3}, -0.5, 0.5, 48), var = tensor({3}, 0.5, 2, 49);
    for (bool training : {false, true}) {
        SCOPED_TRACE(training ? "training" : "inference");
        check_gradient("native_cuda.batch_norm", {x}, {w, b, mean, var}, {bool_attr("training", training)}, x.shape);
        check_gradient("native_cuda.batch_norm", {x}, {mean, var},
                       {bool_attr("training", training), bool_attr("affine", false)}, x.shape);
    }
}

TEST_F(CudaKernels, ReshapeConcatAndReductionsMoveAndSumLikeTorch) {
    for (auto dtype : kFloatTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        const auto tol = tolerance(dtype);
        const HostTensor x = tensor({2, 3, 4}, -1, 1, 50);
        EXPECT_TRUE(all_close(run_forward("native_cuda.reshape", dtype, {x}, {}, {}, {6, 4}), x.values, 0, 0));
        EXPECT_TRUE(all_close(run_forward("native_cuda.flatten", dtype, {x}, {}, {}, {2, 12}), x.values, 0, 0));
        // torch.cat([a, b, c], dim) of [2, 1, 4], [2, 3, 4] and an empty [2, 0, 4] along 1 (and -2).
        const HostTensor a = tensor({2, 1, 4}, -1, 1, 51), e{{2, 0, 4}, {}};
        Values cat;
        for (int64_t n = 0; n < 2; ++n) {
            cat.insert(cat.end(), a.values.begin() + n * 4, a.values.begin() + (n + 1) * 4);
            cat.insert(cat.end(), x.values.begin() + n * 12, x.values.begin() + (n + 1) * 12);
        }
        for (int64_t axis : {1, -2})
            EXPECT_TRUE(all_close(run_forward("native_cuda.concat", dtype, {a, x, e}, {}, {int_attr("axis", axis)},
                                              {2, 4, 4}),
                                  cat, 0, 0));
        // torch.sum / torch.mean over every axis and over one, with and without keepdim.
        EXPECT_TRUE(all_close(run_forward("native_cuda.reduce_sum", dtype, {x}, {}, {}, {}),
                              {std::accumulate(x.values.begin(), x.values.end(), 0.0)}, tol.rtol * 10, tol.atol * 10));
        EXPECT_TRUE(all_close(run_forward("native_cuda.reduce_mean", dtype, {x}, {}, {bool_attr("keepdims", true)}, {1, 1, 1}),
                              {std::accumulate(x.values.begin(), x.values.end(), 0.0) / 24}, tol.rtol * 10, tol.atol * 10));
        Values sum1(8, 0.0);
        for (int64_t i = 0; i < 24; ++i) sum1[size_t(i / 12 * 4 + i % 4)] += x.values[size_t(i)];
        EXPECT_TRUE(all_close(run_forward("native_cuda.reduce_sum", dtype, {x}, {}, {int_attr("axes", 1)}, {2, 4}), sum1,
                              tol.rtol * 10, tol.atol * 10));
        Values mean1 = sum1;
        for (auto& v : mean1) v /= 3;
        EXPECT_TRUE(all_close(run_forward("native_cuda.reduce_mean", dtype, {x}, {},
                                          {int_attr("axes", -2), bool_attr("keepdims", true)}, {2, 1, 4}),
                              mean1, tol.rtol * 10, tol.atol * 10));
        // The mean of no elements is NaN (torch.mean), their sum 0.
        const HostTensor empty{{2, 0}, {}};
        const auto nan_mean = run_forward("native_cuda.reduce_mean", dtype, {empty}, {}, {int_attr("axes", 1)}, {2});
        ASSERT_EQ(nan_mean.size(), 2u);
        EXPECT_TRUE(std::isnan(nan_mean[0]) && std::isnan(nan_mean[1]));
        EXPECT_TRUE(all_close(run_forward("native_cuda.reduce_sum", dtype, {empty}, {}, {int_attr("axes", 1)}, {2}),
                              {0, 0}, 0, 0));
    }
    const HostTensor x = tensor({2, 3, 4}, -1, 1, 52), a = tensor({2, 1, 4}, -1, 1, 53);
    check_gradient("native_cuda.reshape", {x}, {}, {}, {4, 6});
    check_gradient("native_cuda.flatten", {x}, {}, {}, {2, 12});
    check_gradient("native_cuda.concat", {a, x}, {}, {int_attr("axis", 1)}, {2, 4, 4});
    check_gradient("native_cuda.reduce_sum", {x}, {}, {int_attr("axes", 1)}, {2, 4});
    check_gradient("native_cuda.reduce_mean", {x}, {}, {int_attr("axes", 2), bool_attr("keepdims", true)}, {2, 3, 1});
    check_gradient("native_cuda.reduce_mean", {x}, {}, {}, {});
}

/// Runs `capsule`'s forward on device tensors (any number of outputs); "" or the status message.
std::string call_forward(const std::string& capsule, const std::vector<const DeviceTensor*>& inputs,
                         const std::vector<const DeviceTensor*>& outputs, const std::vector<Attr>& attrs) {
    std::vector<capsule_tensor_view> in, out;
    for (const auto* t : inputs) in.push_back(t->view());
    for (const auto* t : outputs) out.push_back(t->view());
    const auto [code, message] = forward_on_views(capsule, in, {}, out, attr_views(attrs));
    return code == CAPSULE_OK ? "" : message;
}

/// F.scaled_dot_product_attention by its definition, in double: out = softmax(scale q kᵀ + mask) v
/// over [..., L, S] scores; `mask` broadcasts to them (bool: 0 hides a key; else added); a fully
/// masked row gives zeros.
HostTensor host_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor* mask,
                          bool boolean_mask, bool causal) {
    const size_t r = q.shape.size();
    const int64_t L = q.shape[r - 2], E = q.shape[r - 1], S = k.shape[r - 2], Ev = v.shape[r - 1];
    const int64_t batch = count_of(Dims(q.shape.begin(), q.shape.end() - 2));
    Dims scores(q.shape.begin(), q.shape.end() - 2);
    scores.insert(scores.end(), {L, S});
    HostTensor out{q.shape, Values(size_t(batch * L * Ev), 0.0)};
    out.shape.back() = Ev;
    const double scale = 1 / std::sqrt(double(E));
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < L; ++i) {
            Values p(static_cast<size_t>(S));
            double m = -INFINITY;
            for (int64_t j = 0; j < S; ++j) {
                double s = 0;
                for (int64_t d = 0; d < E; ++d) s += q.values[size_t((b * L + i) * E + d)] * k.values[size_t((b * S + j) * E + d)];
                s *= scale;
                if (causal && j > i) s = -INFINITY;
                if (mask) {
                    const double mv = mask->values[size_t(source_index(coords_of((b * L + i) * S + j, scores), mask->shape))];
                    if (boolean_mask) s = mv != 0 ? s : -INFINITY;
                    else s += mv;
                }
                p[size_t(j)] = s;
                m = std::max(m, s);
            }
            if (m == -INFINITY) continue;
            double sum = 0;
            for (auto& x : p) sum += x = std::exp(x - m);
            for (int64_t j = 0; j < S; ++j)
                for (int64_t d = 0; d < Ev; ++d)
                    out.values[size_t((b * L + i) * Ev + d)] += p[size_t(j)] / sum * v.values[size_t((b * S + j) * Ev + d)];
        }
    return out;
}

TEST_F(CudaKernels, FlashAttentionMatchesItsDefinition) {
    struct Case {
        Dims q, k, v, mask;
        bool boolean, causal;
    };
    // Several key tiles (16) and query blocks (64); a head of 128 (the widest); causal with
    // L != S; bool and additive masks broadcast over batch and rows; no keys at all.
    const std::vector<Case> cases = {{{2, 3, 70, 8}, {2, 3, 37, 8}, {2, 3, 37, 6}, {}, false, false},
                                     {{1, 130, 16}, {1, 130, 16}, {1, 130, 16}, {}, false, true},
                                     {{1, 20, 32}, {1, 90, 32}, {1, 90, 24}, {}, false, true},
                                     {{2, 9, 128}, {2, 21, 128}, {2, 21, 128}, {}, false, false},
                                     {{2, 2, 11, 4}, {2, 2, 19, 4}, {2, 2, 19, 5}, {2, 1, 11, 19}, true, false},
                                     {{2, 11, 4}, {2, 19, 4}, {2, 19, 4}, {19}, false, false},
                                     {{2, 3, 4}, {2, 0, 4}, {2, 0, 4}, {}, false, false}};
    for (auto dtype : kFloatTypes)
        for (const auto& c : cases) {
            SCOPED_TRACE("q " + shape_text(c.q) + " k " + shape_text(c.k) + " v " + shape_text(c.v) + " mask " +
                         shape_text(c.mask) + (c.causal ? " causal " : " ") + dtype_name(dtype));
            const HostTensor q = tensor(c.q, -2, 2, 41), k = tensor(c.k, -2, 2, 42), v = tensor(c.v, -1, 1, 43);
            HostTensor mask = tensor(c.mask, -2, 2, 44);
            if (c.boolean)
                for (auto& x : mask.values) x = x > -1 ? 1 : 0;
            if (c.boolean) std::fill(mask.values.begin(), mask.values.begin() + 19, 0.0);  // row 0: all hidden
            const bool masked = !c.mask.empty();
            const HostTensor want = host_attention(q, k, v, masked ? &mask : nullptr, c.boolean, c.causal);
            const DeviceTensor dq(dtype, q), dk(dtype, k), dv(dtype, v), out(dtype, want.shape);
            const DeviceTensor dmask(c.boolean ? CAPSULE_DTYPE_BOOL : dtype, mask);
            std::vector<const DeviceTensor*> inputs{&dq, &dk, &dv};
            if (masked) inputs.push_back(&dmask);
            ASSERT_EQ(call_forward("native_cuda.flash_attention", inputs, {&out}, {bool_attr("is_causal", c.causal)}), "");
            const auto tol = tolerance(dtype);
            EXPECT_TRUE(all_close(out.download(), want.values, tol.rtol * 10, tol.atol * 10));
        }
}

TEST_F(CudaKernels, FlashAttentionGradientsMatchFiniteDifferences) {
    // Gradients of q, k, v and of an additive mask (summed over the rows it broadcasts to).
    const HostTensor q = tensor({2, 5, 3}, -1, 1, 51), k = tensor({2, 18, 3}, -1, 1, 52), v = tensor({2, 18, 2}, -1, 1, 53);
    check_gradient("native_cuda.flash_attention", {q, k, v}, {}, {}, {2, 5, 2});
    check_gradient("native_cuda.flash_attention", {q, k, v}, {}, {bool_attr("is_causal", true)}, {2, 5, 2});
    check_gradient("native_cuda.flash_attention", {q, k, v, tensor({2, 1, 18}, -1, 1, 54)}, {}, {float_attr("scale", 0.7)},
                   {2, 5, 2});
}

/// Row-major index of output element `o` of a permutation of `in` (out dim d = in dim perm[d]).
HostTensor host_permute(const HostTensor& x, const Dims& perm) {
    Dims out;
    for (int64_t d : perm) out.push_back(x.shape[size_t(d)]);
    HostTensor y{out, {}};
    for (int64_t o = 0; o < count_of(out); ++o) {
        const Dims c = coords_of(o, out);
        Dims ci(x.shape.size());
        for (size_t d = 0; d < perm.size(); ++d) ci[size_t(perm[d])] = c[d];
        y.values.push_back(x.values[size_t(source_index(ci, x.shape))]);
    }
    return y;
}

TEST_F(CudaKernels, PermutationsSlicesAndPaddingMoveElementsLikeTorch) {
    const HostTensor x = tensor({2, 3, 4}, -1, 1, 61);
    const std::vector<std::tuple<std::string, std::vector<Attr>, Dims>> permutations = {
        {"permute", {ints_attr("dims", {2, -3, 1})}, {2, 0, 1}},
        {"swapAdjacentAtDepth", {int_attr("depth", 1)}, {0, 2, 1}},
        {"transpose3d_first_to_last", {}, {1, 2, 0}},
        {"transpose3d_last_to_first", {}, {2, 0, 1}},
        {"transpose3d_last_two", {}, {0, 2, 1}}};
    for (auto dtype : kFloatTypes)
        for (const auto& [op, attrs, perm] : permutations) {
            SCOPED_TRACE(op + " " + dtype_name(dtype));
            const HostTensor want = host_permute(x, perm);
            EXPECT_TRUE(all_close(run_forward("native_cuda." + op, dtype, {x}, {}, attrs, want.shape), want.values, 0, 0));
            if (dtype == CAPSULE_DTYPE_FLOAT64) check_gradient("native_cuda." + op, {x}, {}, attrs, want.shape);
        }
    const HostTensor m = tensor({3, 5}, -1, 1, 62);
    const HostTensor mt = host_permute(m, {1, 0});
    EXPECT_TRUE(all_close(run_forward("native_cuda.transpose2d", CAPSULE_DTYPE_FLOAT32, {m}, {}, {}, mt.shape), mt.values, 0, 0));
    // slice: x[:, ::-2, 1:] (ONNX: start 2, end INT64_MIN, step -2 on axis 1; start 1, end 10 on axis 2).
    const std::vector<Attr> sl{ints_attr("starts", {2, 1}), ints_attr("ends", {INT64_MIN, 10}), ints_attr("axes", {1, -1}),
                               ints_attr("steps", {-2, 1})};
    HostTensor want_slice{{2, 2, 3}, {}};
    for (int64_t a = 0; a < 2; ++a)
        for (int64_t b : {2, 0})
            for (int64_t c = 1; c < 4; ++c) want_slice.values.push_back(x.values[size_t((a * 3 + b) * 4 + c)]);
    EXPECT_TRUE(all_close(run_forward("native_cuda.slice", CAPSULE_DTYPE_FLOAT32, {x}, {}, sl, want_slice.shape),
                          want_slice.values, 0, 0));
    check_gradient("native_cuda.slice", {x}, {}, sl, want_slice.shape);
    // pad on [3, 5]: rows 1 before and 2 after, columns cropped by 1 before and padded 2 after.
    for (const char* mode : {"constant", "reflect", "edge"}) {
        SCOPED_TRACE(mode);
        std::vector<Attr> pa{ints_attr("pads", {1, -1, 2, 2}), string_attr("mode", mode)};
        if (std::string(mode) == "constant") pa.push_back(float_attr("value", 2.5));
        HostTensor want{{6, 6}, {}};
        for (int64_t r = 0; r < 6; ++r)
            for (int64_t c = 0; c < 6; ++c) {
                int64_t i = r - 1, j = c + 1;  // input row and column read
                const auto fold = [&](int64_t k, int64_t n) {
                    if (std::string(mode) == "edge") return std::clamp<int64_t>(k, 0, n - 1);
                    return k < 0 ? -k : k >= n ? 2 * (n - 1) - k : k;  // reflect
                };
                if (std::string(mode) == "constant" && (i < 0 || i >= 3 || j >= 5)) {
                    want.values.push_back(2.5);
                    continue;
                }
                i = fold(i, 3);
                j = fold(j, 5);
                want.values.push_back(m.values[size_t(i * 5 + j)]);
            }
        EXPECT_TRUE(all_close(run_forward("native_cuda.pad", CAPSULE_DTYPE_FLOAT64, {m}, {}, pa, want.shape), want.values, 0, 0));
        check_gradient("native_cuda.pad", {m}, {}, pa, want.shape);
    }
}

/// Runs `capsule`'s backward for inputs (x, an int64 second input without a gradient) and one
/// output: gx from gy; "" or the status message.
std::string call_backward_of_first(const std::string& capsule, const DeviceTensor& x, const DeviceTensor& second,
                                   const DeviceTensor& gy, const DeviceTensor& gx, const std::vector<Attr>& attrs) {
    const auto* k = find_kernel(capsule);
    if (!k || !k->backward) return "no backward kernel " + capsule;
    const std::vector<capsule_tensor_view> inputs{x.view(), second.view()};
    capsule_tensor_view absent{};
    absent.struct_size = sizeof absent;
    const std::vector<capsule_tensor_view> grads{gx.view(), absent};
    const capsule_tensor_view gout = gy.view();
    const auto views = attr_views(attrs);
    capsule_backward_args args{};
    args.struct_size = sizeof args;
    args.inputs = inputs.data();
    args.num_inputs = inputs.size();
    args.num_outputs = 1;
    args.grad_outputs = &gout;
    args.grad_inputs = grads.data();
    args.attrs = views.data();
    args.num_attrs = views.size();
    capsule_status st{};
    st.struct_size = sizeof st;
    return k->backward(&args, &st) == CAPSULE_OK ? "" : st.message;
}

TEST_F(CudaKernels, GatherTakesAlongAnAxisAndScatterAddsItsGradient) {
    const HostTensor data = tensor({2, 4, 3}, -1, 1, 63);
    const HostTensor indices{{2, 2}, {3, -4, 3, 1}};  // −4 is row 0; 3 repeats: its gradient sums
    const HostTensor gy = tensor({2, 2, 2, 3}, -1, 1, 64);
    for (auto dtype : kFloatTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        const DeviceTensor dd(dtype, data), di(CAPSULE_DTYPE_INT64, indices), out(dtype, Dims{2, 2, 2, 3});
        ASSERT_EQ(call_forward("native_cuda.gather", {&dd, &di}, {&out}, {int_attr("axis", 1)}), "");
        Values want, want_grad(data.values.size(), 0.0);
        for (int64_t p = 0; p < 2; ++p)
            for (int64_t k = 0; k < 4; ++k)
                for (int64_t q = 0; q < 3; ++q) {
                    const int64_t row = (int64_t(indices.values[size_t(k)]) + 4) % 4;
                    want.push_back(data.values[size_t((p * 4 + row) * 3 + q)]);
                    want_grad[size_t((p * 4 + row) * 3 + q)] += gy.values[size_t((p * 4 + k) * 3 + q)];
                }
        EXPECT_TRUE(all_close(out.download(), want, 0, 0));
        // Backward: the gradient of data, scatter-added.
        const DeviceTensor dgy(dtype, gy), dgx(dtype, data.shape);
        ASSERT_EQ(call_backward_of_first("native_cuda.gather", dd, di, dgy, dgx, {int_attr("axis", 1)}), "");
        const auto tol = tolerance(dtype);
        EXPECT_TRUE(all_close(dgx.download(), want_grad, tol.rtol, tol.atol));
        // An index outside [−4, 4): the caller's data error, read back from the device.
        const DeviceTensor bad(CAPSULE_DTYPE_INT64, HostTensor{{2}, {1, 4}}), out2(dtype, Dims{2, 2, 3});
        const auto message = call_forward("native_cuda.gather", {&dd, &bad}, {&out2}, {int_attr("axis", 1)});
        EXPECT_EQ(message, "gather: an index is out of range for axis 1 of size 4 (valid: -4..3)");
    }
}

TEST_F(CudaKernels, LayerNormMatchesTorchAndItsGradients) {
    // x [2, 3, 4] over normalized_shape [3, 4]: mean and biased variance of each [3, 4] block.
    const HostTensor x = tensor({2, 3, 4}, -2, 2, 65), w = tensor({3, 4}, 0.5, 1.5, 66), b = tensor({3, 4}, -1, 1, 67);
    Values want;
    for (int64_t r = 0; r < 2; ++r) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < 12; ++j) mean += x.values[size_t(r * 12 + j)] / 12;
        for (int64_t j = 0; j < 12; ++j) var += std::pow(x.values[size_t(r * 12 + j)] - mean, 2) / 12;
        for (int64_t j = 0; j < 12; ++j)
            want.push_back((x.values[size_t(r * 12 + j)] - mean) / std::sqrt(var + 1e-3) * w.values[size_t(j)] + b.values[size_t(j)]);
    }
    const std::vector<Attr> attrs{ints_attr("normalized_shape", {3, 4}), float_attr("eps", 1e-3)};
    for (auto dtype : kFloatTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        const auto tol = tolerance(dtype);
        EXPECT_TRUE(all_close(run_forward("native_cuda.layer_norm", dtype, {x}, {w, b}, attrs, x.shape), want,
                              tol.rtol * 10, tol.atol * 10));
    }
    check_gradient("native_cuda.layer_norm", {x}, {w, b}, attrs, x.shape);
    check_gradient("native_cuda.layer_norm", {x}, {}, {ints_attr("normalized_shape", {4}), bool_attr("elementwise_affine", false)},
                   x.shape);
    check_gradient("native_cuda.layer_norm", {x}, {w}, {ints_attr("normalized_shape", {3, 4}), bool_attr("bias", false)}, x.shape);
}

TEST_F(CudaKernels, CrossEntropyMatchesTorchAndRefusesBadTargets) {
    if (!find_kernel("native_cuda.cross_entropy")) GTEST_SKIP() << "no cross_entropy kernel";
    // Logits [4, 3] (one row large: logsumexp must not overflow), targets with one ignored row.
    const HostTensor x{{4, 3}, {1, 2, 3, -1, 0.5, 0, 1000, 999, 998, 0.1, 0.2, 0.3}};
    const HostTensor target{{4}, {2, 0, 1, -100}};
    Values rows;  // logsumexp(x_i) − x_i[t_i], in double
    for (int i = 0; i < 3; ++i) {
        const double* r = &x.values[size_t(i) * 3];
        const double m = std::max({r[0], r[1], r[2]});
        rows.push_back(m + std::log(std::exp(r[0] - m) + std::exp(r[1] - m) + std::exp(r[2] - m)) - r[size_t(target.values[size_t(i)])]);
    }
    for (auto dtype : kFloatTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        const auto tol = tolerance(dtype);
        const DeviceTensor dx(dtype, x), dt(CAPSULE_DTYPE_INT64, target);
        for (const char* reduction : {"none", "sum", "mean"}) {
            SCOPED_TRACE(reduction);
            const bool none = std::string(reduction) == "none";
            const DeviceTensor out(dtype, none ? Dims{4} : Dims{});
            ASSERT_EQ(call_forward("native_cuda.cross_entropy", {&dx, &dt}, {&out}, {string_attr("reduction", reduction)}), "");
            const double sum = rows[0] + rows[1] + rows[2];
            const Values want = none ? Values{rows[0], rows[1], rows[2], 0} : Values{std::string(reduction) == "sum" ? sum : sum / 3};
            EXPECT_TRUE(all_close(out.download(), want, tol.rtol * 10, tol.atol * 10));
        }
        // A target outside [0, C) that is not ignore_index: the caller's data error.
        const DeviceTensor bad(CAPSULE_DTYPE_INT64, HostTensor{{4}, {2, 3, 1, 0}}), out(dtype, Dims{});
        const auto message = call_forward("native_cuda.cross_entropy", {&dx, &bad}, {&out}, {});
        EXPECT_NE(message.find("a target is outside [0, 3)"), std::string::npos) << message;
    }
}

TEST_F(CudaKernels, CrossEntropyGradientIsSoftmaxMinusOneHot) {
    if (!find_kernel("native_cuda.cross_entropy")) GTEST_SKIP() << "no cross_entropy kernel";
    // d loss / d x_i = g_i (softmax(x_i) − onehot(t_i)); g_i = gy / (rows counted) for mean, gy for
    // sum, gy[i] for none; 0 on the ignored row.
    const HostTensor x{{4, 3}, {1, 2, 3, -1, 0.5, 0, 1000, 999, 998, 0.1, 0.2, 0.3}};
    const HostTensor target{{4}, {2, 0, 1, -100}};
    const Values p = host_softmax(x, 1, false);
    for (auto dtype : kFloatTypes)
        for (const char* reduction : {"none", "sum", "mean"}) {
            SCOPED_TRACE(std::string(reduction) + " " + dtype_name(dtype));
            const bool none = std::string(reduction) == "none";
            const HostTensor gy = none ? HostTensor{{4}, {0.5, -2, 1.5, 7}} : HostTensor{{}, {3}};
            Values want(12, 0.0);
            for (int i = 0; i < 3; ++i) {
                const double g = none ? gy.values[size_t(i)] : std::string(reduction) == "sum" ? 3 : 3.0 / 3;
                for (int c = 0; c < 3; ++c)
                    want[size_t(i * 3 + c)] = g * (p[size_t(i * 3 + c)] - (c == int(target.values[size_t(i)]) ? 1 : 0));
            }
            const DeviceTensor dx(dtype, x), dt(CAPSULE_DTYPE_INT64, target), dgy(dtype, gy), dgx(dtype, x.shape);
            ASSERT_EQ(call_backward_of_first("native_cuda.cross_entropy", dx, dt, dgy, dgx,
                                             {string_attr("reduction", reduction)}),
                      "");
            const auto tol = tolerance(dtype);
            EXPECT_TRUE(all_close(dgx.download(), want, tol.rtol * 10, tol.atol * 10));
        }
}

TEST_F(CudaKernels, SgdAndAdamStepsMatchTorchOptim) {
    if (!find_kernel("native_cuda.sgd")) GTEST_SKIP() << "no optimizer kernels";
    const HostTensor p{{4}, {1, -2, 0.5, 3}}, g{{4}, {0.1, -0.3, 2, 0}}, buf{{4}, {0.5, 0.5, -1, 2}},
        v{{4}, {0.01, 0.2, 0.3, 0.4}};
    for (auto dtype : kFloatTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        const auto tol = tolerance(dtype);
        const DeviceTensor dp(dtype, p), dg(dtype, g), db(dtype, buf), dv(dtype, v), p_out(dtype, Dims{4}),
            b_out(dtype, Dims{4}), v_out(dtype, Dims{4});
        // SGD step 2, momentum 0.9, dampening 0.1, weight decay 0.01, lr 0.1 (torch.optim.SGD).
        ASSERT_EQ(call_forward("native_cuda.sgd", {&dp, &dg, &db}, {&p_out, &b_out},
                               {float_attr("lr", 0.1), float_attr("momentum", 0.9), float_attr("dampening", 0.1),
                                float_attr("weight_decay", 0.01), int_attr("step", 2)}),
                  "");
        Values want_p, want_b;
        for (size_t i = 0; i < 4; ++i) {
            const double gi = g.values[i] + 0.01 * p.values[i], b = 0.9 * buf.values[i] + 0.9 * gi;
            want_b.push_back(b);
            want_p.push_back(p.values[i] - 0.1 * b);
        }
        EXPECT_TRUE(all_close(b_out.download(), want_b, tol.rtol * 10, tol.atol * 10));
        EXPECT_TRUE(all_close(p_out.download(), want_p, tol.rtol * 10, tol.atol * 10));
        // Adam step 3, lr 0.01, betas (0.9, 0.999), eps 1e-8 (torch.optim.Adam, amsgrad off).
        ASSERT_EQ(call_forward("native_cuda.adam", {&dp, &dg, &db, &dv}, {&p_out, &b_out, &v_out},
                               {float_attr("lr", 0.01), int_attr("step", 3)}),
                  "");
        Values want_pa, want_m, want_v;
        for (size_t i = 0; i < 4; ++i) {
            const double m = 0.9 * buf.values[i] + 0.1 * g.values[i], s = 0.999 * v.values[i] + 0.001 * g.values[i] * g.values[i];
            want_m.push_back(m);
            want_v.push_back(s);
            want_pa.push_back(p.values[i] - 0.01 / (1 - std::pow(0.9, 3)) * m / (std::sqrt(s) / std::sqrt(1 - std::pow(0.999, 3)) + 1e-8));
        }
        EXPECT_TRUE(all_close(b_out.download(), want_m, tol.rtol * 10, tol.atol * 10));
        EXPECT_TRUE(all_close(v_out.download(), want_v, tol.rtol * 10, tol.atol * 10));
        EXPECT_TRUE(all_close(p_out.download(), want_pa, tol.rtol * 10, tol.atol * 10));
    }
}

TEST_F(CudaKernels, AbsentGradientsAreNotWritten) {
    const auto* k = find_kernel("native_cuda.mul");
    ASSERT_NE(k, nullptr);
    const HostTensor a = tensor({2, 3}, -1, 1, 22), b = tensor({3}, -1, 1, 23);
    DeviceCall base(CAPSULE_DTYPE_FLOAT32, {a, b}, {}, {}, {2, 3});
    ASSERT_EQ(base.forward(*k), "");
    DeviceTensor gout(CAPSULE_DTYPE_FLOAT32, HostTensor{{2, 3}, Values(6, 1.0)});
    DeviceTensor gb(CAPSULE_DTYPE_FLOAT32, HostTensor{{3}, Values(3, 0.0)});
    capsule_tensor_view grad_in[2] = {base.in_views[0], gb.view()};
    grad_in[0].data = nullptr;  // not needed
    const capsule_tensor_view gout_view = gout.view();
    capsule_backward_args args{};
    args.struct_size = sizeof args;
    args.inputs = base.in_views.data();
    args.num_inputs = 2;
    args.outputs = &base.out_view;
    args.num_outputs = 1;
    args.grad_outputs = &gout_view;
    args.grad_inputs = grad_in;
    capsule_status st{};
    st.struct_size = sizeof st;
    ASSERT_EQ(k->backward(&args, &st), CAPSULE_OK) << st.message;
    Values want(3);
    for (int i = 0; i < 6; ++i) want[i % 3] += float(a.values[i]);
    EXPECT_TRUE(all_close(gb.download(), want, 1e-5, 1e-6));
}

TEST_F(CudaKernels, KernelsAreSafeFromManyHostThreads) {
    constexpr int kThreads = 8, kRounds = 20;
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([t, &failures] {
            try {
                const HostTensor a = tensor({3, 16, 24}, -1, 1, 100 + t), b = tensor({24, 8}, -1, 1, 200 + t);
                const HostTensor want = host_matmul(a, b);
                const HostTensor x = tensor({4, 33}, -4, 4, 300 + t);
                const Values want_softmax = host_softmax(x, -1, false);
                const auto* mm = find_kernel("native_cuda.matmul");
                const auto* sm = find_kernel("native_cuda.softmax");
                for (int r = 0; r < kRounds; ++r) {
                    DeviceCall m(CAPSULE_DTYPE_FLOAT64, {a, b}, {}, {}, want.shape);
                    if (auto err = m.forward(*mm); !err.empty()) throw std::runtime_error(err);
                    if (!all_close(m.output->download(), want.values, 1e-12, 1e-12))
                        throw std::runtime_error("matmul result differs in round " + std::to_string(r));
                    DeviceCall s(CAPSULE_DTYPE_FLOAT32, {x}, {}, {}, x.shape);
                    if (auto err = s.forward(*sm); !err.empty()) throw std::runtime_error(err);
                    if (!all_close(s.output->download(), want_softmax, 1e-5, 1e-6))
                        throw std::runtime_error("softmax result differs in round " + std::to_string(r));
                }
            } catch (const std::exception& e) {
                failures[t] = e.what();
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
    capsule_status st{};
    st.struct_size = sizeof st;
    EXPECT_EQ(loaded().plugin->device_interface->synchronize(&st), CAPSULE_OK) << st.message;
}
