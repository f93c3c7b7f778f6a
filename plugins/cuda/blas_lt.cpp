// cuBLASLt plans for linear with a bias epilogue (blas_lt.hpp).
//
// Row-major y [rows, out] is the column-major matrix D [out, rows] = op(A) · B with A the weight
// buffer read as column-major [in, out] and transposed (op(A) = w [out, in]), and B the input
// buffer read as column-major [in, rows]; the bias then runs along D's rows, which is what
// CUBLASLT_EPILOGUE_BIAS broadcasts ("bias vector length must match matrix D rows").
#include "blas_lt.hpp"

#include <map>
#include <string>
#include <tuple>

#include <cublasLt.h>

#include "cuda_common.hpp"

namespace capsule::cuda {
namespace {

void check_lt(cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    throw KernelError(status == CUBLAS_STATUS_ALLOC_FAILED ? CAPSULE_ERROR_OUT_OF_MEMORY : CAPSULE_ERROR_DEVICE,
                      std::string("cuBLASLt ") + what + ": " + cublasGetStatusString(status) + " (" +
                          cublasGetStatusName(status) + ")");
}

/// The largest power of two up to 16 that divides the address (cuBLASLt picks kernels by it).
int alignment(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    int bytes = 1;
    while (bytes < 16 && a % std::uintptr_t(bytes * 2) == 0) bytes *= 2;
    return bytes;
}

/// Descriptors and the chosen algorithm of one (dtype, shape, alignments).
struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
        if (d) (void)cublasLtMatrixLayoutDestroy(d);
        if (b) (void)cublasLtMatrixLayoutDestroy(b);
        if (a) (void)cublasLtMatrixLayoutDestroy(a);
        if (desc) (void)cublasLtMatmulDescDestroy(desc);
    }
};

using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, int, int>;

/// This thread's cuBLASLt handle and plans, for the current device (rebuilt when it changes).
struct ThreadPlans {
    cublasLtHandle_t handle = nullptr;
    int device = -1;
    std::map<PlanKey, Plan> plans;
    ThreadPlans() = default;
    ThreadPlans(const ThreadPlans&) = delete;
    ThreadPlans& operator=(const ThreadPlans&) = delete;
    ~ThreadPlans() {
        plans.clear();
        if (handle) (void)cublasLtDestroy(handle);
    }
};

ThreadPlans& thread_plans() {
    thread_local ThreadPlans local;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    if (!local.handle || local.device != device) {
        local.plans.clear();
        if (local.handle) (void)cublasLtDestroy(local.handle);
        local.handle = nullptr;
        check_lt(cublasLtCreate(&local.handle), "cublasLtCreate");
        local.device = device;
    }
    return local;
}

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value, const char* what) {
    check_lt(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value), what);
}

/// Builds the descriptors and asks the heuristic for one algorithm without workspace.
void make_plan(Plan& p, cublasLtHandle_t handle, capsule_dtype dtype, int64_t rows, int64_t in, int64_t out,
               const void* bias) {
    const bool single = dtype == CAPSULE_DTYPE_FLOAT32;
    const cudaDataType_t type = single ? CUDA_R_32F : CUDA_R_64F;
    check_lt(cublasLtMatmulDescCreate(&p.desc, single ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F, type),
             "cublasLtMatmulDescCreate");
    set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "setting TRANSA");
    set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "setting TRANSB");
    set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, "setting the bias epilogue");
    set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "setting the bias pointer");
    check_lt(cublasLtMatrixLayoutCreate(&p.a, type, uint64_t(in), uint64_t(out), in), "cublasLtMatrixLayoutCreate");
    check_lt(cublasLtMatrixLayoutCreate(&p.b, type, uint64_t(in), uint64_t(rows), in), "cublasLtMatrixLayoutCreate");
    check_lt(cublasLtMatrixLayoutCreate(&p.d, type, uint64_t(out), uint64_t(rows), out), "cublasLtMatrixLayoutCreate");
    cublasLtMatmulPreference_t preference = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const uint64_t no_workspace = 0;
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &no_workspace, sizeof no_workspace);
    if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, preference, 1, &result, &count);
    (void)cublasLtMatmulPreferenceDestroy(preference);
    // NOT_SUPPORTED: no algorithm for this problem; the caller computes it without cuBLASLt.
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) return;
    check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
    p.found = count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    p.algo = result.algo;
}

}  // namespace

bool lt_linear_with_bias(capsule_dtype dtype, cudaStream_t stream, int64_t rows, int64_t in, int64_t out,
                         const void* x, const void* w, const void* bias, void* y) {
    if (rows == 0 || in == 0 || out == 0) return false;
    ThreadPlans& local = thread_plans();
    const PlanKey key{int(dtype), 0, rows, in, out, alignment(x), alignment(w), alignment(bias), alignment(y)};
    auto [it, added] = local.plans.try_emplace(key);
    Plan& plan = it->second;
    if (added) {
        try {
            make_plan(plan, local.handle, dtype, rows, in, out, bias);
        } catch (...) {
            local.plans.erase(it);
            throw;
        }
    }
    if (!plan.found) return false;
    set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "setting the bias pointer");
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const bool single = dtype == CAPSULE_DTYPE_FLOAT32;
    const void* alpha = single ? static_cast<const void*>(&one_f) : &one_d;
    const void* beta = single ? static_cast<const void*>(&zero_f) : &zero_d;
    check_lt(cublasLtMatmul(local.handle, plan.desc, alpha, w, plan.a, x, plan.b, beta, y, plan.d, y, plan.d,
                            &plan.algo, nullptr, 0, stream),
             "cublasLtMatmul (linear with bias epilogue)");
    return true;
}

}  // namespace capsule::cuda
