// The capsule conformance harness (after IREE's shared driver conformance suite): one set of
// kernel cases, run against every plugin that implements the op. Cases state inputs, parameters,
// attributes and independently computed expected outputs (hand values or formulas evaluated in
// the test, never the kernel under test). Backward kernels are checked against central finite
// differences of the same plugin's forward kernel in float64.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "capsule/ir.hpp"
#include "capsule/plugin_abi.h"

namespace capsule::conformance {

/// A host tensor for cases: values are stored as double and converted to `dtype` when passed to
/// a kernel (int64 and bool values must be integral).
struct CaseTensor {
    DType dtype = DType::float32;
    Shape shape;
    std::vector<double> values;
};
inline CaseTensor f32(Shape s, std::vector<double> v) { return {DType::float32, std::move(s), std::move(v)}; }
inline CaseTensor f64(Shape s, std::vector<double> v) { return {DType::float64, std::move(s), std::move(v)}; }
inline CaseTensor i64(Shape s, std::vector<double> v) { return {DType::int64, std::move(s), std::move(v)}; }
inline CaseTensor boolean(Shape s, std::vector<double> v) { return {DType::boolean, std::move(s), std::move(v)}; }

struct KernelCase;
/// An error case: the forward kernel of `op` must fail on these inputs with a message containing
/// `error`. `output` gives the output buffer's dtype and shape when shape inference rejects the
/// inputs (otherwise the inferred type is used).
KernelCase error_case(std::string name, BackendOp op, std::vector<CaseTensor> inputs,
                      std::string error, CaseTensor output = {}, Attributes attrs = {},
                      std::vector<CaseTensor> params = {});

struct KernelCase {
    std::string name;  // unique, e.g. "add/broadcast_row"
    BackendOp op = BackendOp::add;
    Attributes attrs;
    std::vector<CaseTensor> inputs;  // runtime parents
    std::vector<CaseTensor> params;  // in parameter_specs order
    /// Expected output; its dtype and shape must equal shape inference. Empty `values` with a
    /// non-empty `check` means the check function validates the output instead (random ops).
    CaseTensor expected;
    double rtol = 1e-5;
    double atol = 1e-6;
    /// Optional custom validation for outputs that have no single expected value (random ops);
    /// returns an empty string on success or the failure description.
    std::function<std::string(const std::vector<double>& output)> check;
    /// When non-empty, the case must fail: the forward kernel must return a non-OK status whose
    /// message contains this text, and no output is compared. The output buffer has the inferred
    /// type; only when shape inference rejects the inputs is it allocated with `expected`'s dtype
    /// and shape (values unused). Error cases never check gradients (check_gradient stays false).
    std::string expected_error;
    /// With expected_error: the backward kernel must fail instead of the forward one. It is
    /// called without the forward output (the output view has no data), with a zero upstream
    /// gradient and gradient buffers for every float input and every parameter.
    bool error_in_backward = false;
    /// Check the backward kernel against finite differences (float64 copies of the inputs).
    bool check_gradient = false;
    /// Inputs (by index) whose gradient is checked; default: every float input.
    std::vector<std::size_t> grad_inputs;
    /// Parameters (by index) whose gradient is checked; default (`all_param_grads`): every one.
    /// Inference batch norm's running statistics change its output but get zero gradients by
    /// definition (they are not trained), so its cases check the other parameters only.
    std::vector<std::size_t> grad_params;
    bool all_param_grads = true;
    /// Finite-difference step and tolerance for the gradient check.
    double fd_step = 1e-6;
    double grad_tol = 1e-5;
};

/// What one case found.
struct CaseOutcome {
    std::string failure;  // "" when the case passed
    /// Whether output values were compared with expected ones (not for error cases and cases
    /// with a custom check); then, over every compared element, the largest |got - want| and the
    /// largest |got - want| / (atol + rtol |want|) (at most 1 when within tolerance).
    bool compared = false;
    double max_abs_error = 0;
    double max_error_ratio = 0;
};

/// Runs `kernel`'s forward on `c` (prepared first, with one thread, when it has `prepare`) and
/// compares its output, or, for an error case, checks that it refuses: with the expected message
/// when `exact_messages` (the messages are the reference kernels' own), with any message otherwise
/// (what `capsule verify` asks of every plugin).
CaseOutcome check_forward(const capsule_kernel& kernel, const KernelCase& c, bool exact_messages = true);
/// Checks `kernel`'s backward against central finite differences of its forward, in float64
/// (see run_gradient_case), or in float32 for a kernel that does not take float64
/// (gradient_in_float32: every float tensor of the case becomes float32, the difference step is
/// at least 1e-3 and the tolerance at least 1e-2, absolute and relative).
CaseOutcome check_gradient(const capsule_kernel& kernel, const KernelCase& c);

/// The kernel entry of capsule `name` in `plugin`'s table, or nullptr.
const capsule_kernel* find_kernel(const capsule_plugin& plugin, const std::string& name);

/// True when `kernel` declares its dtypes (ABI 1.1) without float64: check_gradient then runs
/// the case in float32.
bool gradient_in_float32(const capsule_kernel& kernel);

/// Runs the forward kernel of capsule `capsule_name` from `plugin` on `c` (a kernel with `prepare`
/// is prepared first with one thread, run with its state and released); returns "" on success
/// (for an error case: the kernel failed with the expected message) or a description of the
/// mismatch or error.
std::string run_forward_case(const capsule_plugin& plugin, const std::string& capsule_name,
                             const KernelCase& c);

/// Runs the forward kernel of `capsule_name` on `c`'s inputs (prepared first when the kernel has
/// `prepare`) and returns its output values, or nothing with `error` set. For comparing two
/// plugins on the same inputs.
std::vector<double> run_forward_values(const capsule_plugin& plugin, const std::string& capsule_name,
                                       const KernelCase& c, std::string& error);

/// Runs the backward kernel on float64 copies of the case's inputs with a fixed pseudo-random
/// upstream gradient, and compares every gradient against central finite differences of the
/// forward kernel. Returns "" on success or a description.
std::string run_gradient_case(const capsule_plugin& plugin, const std::string& capsule_name,
                              const KernelCase& c);

/// Runs the backward kernel of `capsule_name` as run_gradient_case does (float64 copies of the
/// case's inputs, the same fixed upstream gradient) and returns the gradients it wrote: one per
/// checked input (`grad_inputs`, or every float input), then one per parameter, each flattened;
/// nothing with `error` set. For comparing two plugins' backward kernels on the same inputs.
std::vector<std::vector<double>> run_gradient_values(const capsule_plugin& plugin, const std::string& capsule_name,
                                                     const KernelCase& c, std::string& error);

/// Case lists, one per family of ops.
std::vector<KernelCase> elementwise_cases();  // unary, binary, random, softmax, reductions, loss
std::vector<KernelCase> shape_cases();        // reshape/permute/concat/slice/gather/scatter
std::vector<KernelCase> linalg_cases();       // matmul, bmm, linear, norms, attention
std::vector<KernelCase> conv_pool_cases();    // conv, conv_transpose, pools, fft_fno, scan
std::vector<KernelCase> indexing_cases();     // where, concat, gather, slice, pad, cumsum, tile, triu
std::vector<KernelCase> logic_cases();        // comparisons, logical ops, cast
std::vector<KernelCase> activation_cases();   // rounding, trigonometric, hyperbolic, activations
std::vector<KernelCase> stability_cases();    // extreme inputs: overflow, underflow, cancellation

/// Every case of every family.
std::vector<KernelCase> all_cases();

/// Opens a plugin library with dlopen (RTLD_LOCAL|RTLD_NOW) and returns its table, or nullptr
/// with `error` set. For tests only; the runtime loads plugins through the PluginHost.
const capsule_plugin* open_plugin_library(const std::string& path, std::string& error);

}  // namespace capsule::conformance
