#include "linalg/cublaslt_gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "core/check.hpp"
#include "core/format.hpp"

namespace meshtrain::linalg::cublaslt {
namespace {

cublasLtHandle_t handle() {
  struct Handle {
    cublasLtHandle_t h = nullptr;
    Handle() { CUBLAS_CHECK(cublasLtCreate(&h)); }
    ~Handle() {
      if (h) cublasLtDestroy(h);
    }
  };
  thread_local Handle h;
  return h.h;
}

cudaDataType_t data_type(cublas::Type t) { return t == cublas::Type::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t al = 1;
  while (al < 256 && a % (2 * al) == 0) al *= 2;
  return al;
}

cublasLtEpilogue_t lt_epilogue(const Call& c) {
  switch (c.epilogue) {
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::BiasGelu: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::DGeluBiasGrad: return c.bias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    // Our B is cuBLASLt's A (the header's mapping): its sums over k are BGRADA's.
    case Epilogue::BiasGradB: return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_pre(Epilogue e) { return e == Epilogue::BiasGelu || e == Epilogue::DGeluBiasGrad; }

/// Everything a plan depends on. Pointers enter through their alignment only (cuBLASLt's
/// heuristic reads the bias and aux pointers' values for that, and our preferences give the
/// matrices' alignments).
using Key = std::array<std::int64_t, 19>;

Key key_of(const Call& c) {
  return {static_cast<std::int64_t>(c.type), static_cast<std::int64_t>(c.fp32_output), static_cast<std::int64_t>(c.epilogue), c.trans_a, c.trans_b, c.m, c.n,
          c.k, c.lda, c.ldb, c.ldc, uses_pre(c.epilogue) ? c.ld_pre : 0, c.bias != nullptr, c.beta == 0.0f,
          alignment(c.a), alignment(c.b), alignment(c.c), c.bias ? alignment(c.bias) : 0,
          uses_pre(c.epilogue) ? alignment(c.pre) : 0};
}

/// A cached plan: the descriptor (pointers set per call), the four layouts (C and D alike),
/// the heuristic's algorithm; or the reason cuBLASLt does not take the call.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  std::string why_not;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    // Host objects; errors at process exit are of no consequence.
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

template <class V>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

/// Why cuBLASLt cannot take the call whatever the heuristic says ("" if it may).
std::string precheck(const Call& c) {
  const char* what = epilogue_name(c.epilogue);
  if (c.m <= 0 || c.n <= 0 || c.k <= 0) return strprintf("%s GEMM with an empty dimension (%d, %d, %d)", what, c.m, c.n, c.k);
  if (c.epilogue == Epilogue::BiasGradB && c.trans_b) return "BiasGradB needs B untransposed";
  // An fp32 output from bf16 operands is a weight gradient (BiasGradB) only.
  if (c.fp32_output && (c.type != cublas::Type::BF16 || c.epilogue != Epilogue::BiasGradB))
    return strprintf("%s with %s operands and an fp32 output", what, c.type == cublas::Type::BF16 ? "bf16" : "fp32");
  // Whether BGRADA scales the sums by alpha is not documented; ours are unscaled.
  if (c.epilogue == Epilogue::BiasGradB && c.alpha != 1.0f) return "BiasGradB with alpha != 1";
  if (uses_pre(c.epilogue)) {
    // cuBLASLt: the GELU aux leading dimension "must be divisible by 8 and be no less than the
    // number of rows in the output matrix" (ours: n).
    if (c.ld_pre % 8 != 0 || c.ld_pre < c.n)
      return strprintf("%s: pre-activation row stride %d is not a multiple of 8 (>= %d)", what, c.ld_pre, c.n);
    if (alignment(c.pre) < 16) return strprintf("%s: pre-activation pointer not 16-byte aligned", what);
  }
  if (c.bias && alignment(c.bias) < 16) return strprintf("%s: bias pointer not 16-byte aligned", what);
  return "";
}

std::unique_ptr<Plan> make_plan(const Call& c) {
  auto p = std::make_unique<Plan>();
  p->why_not = precheck(c);
  if (!p->why_not.empty()) return p;
  const cudaDataType_t dt = data_type(c.type), ct = data_type(c.output_type());
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A is our B and its B our A (row-major as column-major, header).
  const cublasOperation_t ta = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(c));
  if (c.bias) set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  if (uses_pre(c.epilogue)) {
    set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.pre);
    set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(c.ld_pre));
  }
  // Stored column-major: our B (k, n) row-major is (n, k) with ld ldb; transposed, (k, n).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, dt, c.trans_b ? c.k : c.n, c.trans_b ? c.n : c.k, c.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, dt, c.trans_a ? c.m : c.k, c.trans_a ? c.k : c.m, c.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, ct, c.n, c.m, c.ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t max_ws = kMaxWorkspaceBytes;
  const std::uint32_t al_a = alignment(c.b), al_b = alignment(c.a), al_c = alignment(c.c);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle(), p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    p->why_not = strprintf("cuBLASLt has no %s algorithm for %s%s m %d n %d k %d (lda %d ldb %d ldc %d%s): %s",
                           epilogue_name(c.epilogue), c.type == cublas::Type::BF16 ? "bf16" : "fp32",
                           c.fp32_output ? " -> fp32" : "", c.m, c.n, c.k,
                           c.lda, c.ldb, c.ldc, uses_pre(c.epilogue) ? strprintf(" ld_pre %d", c.ld_pre).c_str() : "",
                           cublasGetStatusString(st != CUBLAS_STATUS_SUCCESS ? st : result.state));
    return p;
  }
  p->algo = result.algo;
  p->workspace = result.workspaceSize;
  return p;
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

/// The cached plan of c (made on first use). Call with cache_mutex() held.
const Plan& plan_of(const Call& c) {
  static std::map<Key, std::unique_ptr<Plan>> cache;
  std::unique_ptr<Plan>& p = cache[key_of(c)];
  if (!p) p = make_plan(c);
  return *p;
}

}  // namespace

std::int64_t workspace_bytes(const Call& call, std::string* why_not) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  const Plan& p = plan_of(call);
  if (!p.why_not.empty()) {
    if (why_not) *why_not = p.why_not;
    return -1;
  }
  return static_cast<std::int64_t>(p.workspace);
}

void matmul(const Call& c, void* workspace, void* stream) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  const Plan& p = plan_of(c);
  if (!p.why_not.empty()) fatal("cuBLASLt", p.why_not.c_str(), "cublaslt::matmul", __FILE__, __LINE__);
  // The pointers of this call on the shared descriptor (same alignment as the plan's).
  if (c.bias) set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  if (uses_pre(c.epilogue)) set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.pre);
  CUBLAS_CHECK(cublasLtMatmul(handle(), p.desc, &c.alpha, c.b, p.a, c.a, p.b, &c.beta, c.c, p.c, c.c, p.c, &p.algo,
                              workspace, p.workspace, static_cast<cudaStream_t>(stream)));
}

}  // namespace meshtrain::linalg::cublaslt
