// The NCCL communicator and the cuBLAS GEMM wrapper, built into meshtrain_cuda_host by
// CPU builds on machines with the CUDA toolkit. This program links them for real (it
// constructs an NcclCommunicator and calls linalg::cublas::gemm), so a CPU CI run
// proves they compile and link. Where a GPU per node-local rank is present it also runs
// them against host references; elsewhere those tests are skipped (the job decides
// together, so no rank enters NCCL initialisation alone).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "core/bf16.hpp"
#if defined(MESHTRAIN_CUDA_HOST_WITH_CUDNN) || defined(MESHTRAIN_WITH_CUDNN)
#include "kernels/cudnn_attention.hpp"
#endif
#include "linalg/cublas_gemm.hpp"
#include "linalg/cublaslt_gemm.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

/// True on every rank when every rank has a device of its own (NCCL needs one GPU per
/// rank); otherwise sets *why on every rank.
bool job_has_gpus(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  const int local_size = test::runtime().topology().local_size;
  int ok = rc == cudaSuccess && n >= local_size ? 1 : 0;
  if (rc != cudaSuccess) {
    *why = std::string("no usable CUDA device: ") + cudaGetErrorString(rc);
    cudaGetLastError();  // clear the sticky error
  } else if (n < local_size) {
    *why = "NCCL needs one GPU per rank: " + std::to_string(n) + " device(s) for " +
           std::to_string(local_size) + " ranks on this node";
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, test::world().get());
  if (ok && !all_ok) *why = "another rank of the job has no GPU of its own";
  if (all_ok) EXPECT_EQ(cudaSetDevice(test::runtime().topology().local_rank % n), cudaSuccess);
  return all_ok == 1;
}

#define SKIP_WITHOUT_GPUS()               \
  do {                                    \
    std::string why_;                     \
    if (!job_has_gpus(&why_)) GTEST_SKIP() << why_; \
  } while (0)

template <class T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), std::max<std::size_t>(h.size(), 1) * sizeof(T)), cudaSuccess);
  if (!h.empty()) EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
template <class T>
std::vector<T> host_copy(const T* d, std::size_t n) {
  std::vector<T> h(n);
  if (n) EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(CudaLink, NcclVersionIsCompiledIn) {
  // Needs no GPU: the header version baked into the NCCL communicator's object file.
  const std::string v = nccl_version_string();
  EXPECT_TRUE(std::regex_match(v, std::regex(R"(\d+\.\d+\.\d+)"))) << v;
}

TEST(CudaLink, NcclCollectivesMatchHostReference) {
  SKIP_WITHOUT_GPUS();
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreate(&compute), cudaSuccess);
  {
    NcclCommunicator comm(test::world(), "nccl-test", compute);
    const int me = comm.rank(), p = comm.size();
    EXPECT_STREQ(comm.backend(), "nccl");
    EXPECT_EQ(p, test::world().size());
    const std::size_t n = 1023;  // odd on purpose
    auto pattern = [](int r, std::size_t i) { return static_cast<float>(int((r * 31 + i * 7) % 17) - 8); };

    // all_reduce (sum) and all_gather in flight together, waited in reverse order.
    std::vector<float> x(n), g(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = g[i] = pattern(me, i);
    float* dx = device_copy(x);
    float* dg = device_copy(g);
    float* dgathered = device_copy(std::vector<float>(n * p, 99.0f));
    Work a = comm.all_reduce_async(dx, dx, n, DType::F32, ReduceOp::Sum);
    Work b = comm.all_gather_async(dg, dgathered, n, DType::F32);
    b.wait();
    a.wait();
    ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
    const auto reduced = host_copy(dx, n);
    const auto gathered = host_copy(dgathered, n * p);
    for (std::size_t i = 0; i < n; ++i) {
      float s = 0;
      for (int r = 0; r < p; ++r) s += pattern(r, i);
      ASSERT_EQ(reduced[i], s) << "all_reduce element " << i;
    }
    for (std::size_t j = 0; j < n * p; ++j) ASSERT_EQ(gathered[j], pattern(int(j / n), j % n)) << "all_gather element " << j;

    // reduce_scatter (avg) of bf16: small integers / p are exact in bf16.
    std::vector<bf16> rs(n * p);
    for (std::size_t j = 0; j < n * p; ++j) rs[j] = bf16(pattern(me, j));
    bf16* drs = device_copy(rs);
    bf16* drs_out = device_copy(std::vector<bf16>(n, bf16(99.0f)));
    comm.reduce_scatter(drs, drs_out, n, DType::BF16, ReduceOp::Avg);
    ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
    const auto rs_out = host_copy(drs_out, n);
    for (std::size_t i = 0; i < n; ++i) {
      float s = 0;
      for (int r = 0; r < p; ++r) s += pattern(r, me * n + i);
      ASSERT_EQ(static_cast<float>(rs_out[i]), s / p) << "reduce_scatter element " << i;
    }

    // broadcast from the last rank, then a barrier.
    std::vector<double> bc(7, me == p - 1 ? 2.5 : -1.0);
    double* dbc = device_copy(bc);
    comm.broadcast(dbc, bc.size(), DType::F64, p - 1);
    ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
    for (double v : host_copy(dbc, bc.size())) ASSERT_EQ(v, 2.5);
    comm.barrier();
    EXPECT_GE(comm.drain_busy_seconds(), 0.0);

    for (void* ptr : {static_cast<void*>(dx), static_cast<void*>(dg), static_cast<void*>(dgathered),
                      static_cast<void*>(drs), static_cast<void*>(drs_out), static_cast<void*>(dbc)})
      cudaFree(ptr);
  }
  cudaStreamDestroy(compute);
}

/// Row-major reference: C (m, n) = alpha op(A) op(B) + beta C.
template <class T>
std::vector<double> reference_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                                   const std::vector<T>& a, const std::vector<T>& b, double beta,
                                   const std::vector<T>& c) {
  std::vector<double> out(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l) {
        const double av = static_cast<double>(static_cast<float>(ta ? a[l * m + i] : a[i * k + l]));
        const double bv = static_cast<double>(static_cast<float>(tb ? b[j * k + l] : b[l * n + j]));
        s += av * bv;
      }
      out[i * n + j] = alpha * s + beta * static_cast<double>(static_cast<float>(c[i * n + j]));
    }
  return out;
}

template <class T>
void check_gemm(linalg::cublas::Type type, double tol) {
  const int m = 3, n = 4, k = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      std::vector<T> a(m * k), b(k * n), c(m * n);
      for (int i = 0; i < m * k; ++i) a[i] = T(static_cast<float>(i % 7 - 3) * 0.5f);
      for (int i = 0; i < k * n; ++i) b[i] = T(static_cast<float>(i % 5 - 2) * 0.25f);
      for (int i = 0; i < m * n; ++i) c[i] = T(static_cast<float>(i % 3));
      const auto expect = reference_gemm(ta, tb, m, n, k, 1.5, a, b, 0.5, c);
      T* da = device_copy(a);
      T* db = device_copy(b);
      T* dc = device_copy(c);
      // Leading dimensions are the row strides of the stored (untransposed) matrices.
      linalg::cublas::gemm(type, ta, tb, m, n, k, 1.5f, da, ta ? m : k, db, tb ? k : n, 0.5f, dc, n);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = host_copy(dc, c.size());
      for (int i = 0; i < m * n; ++i)
        EXPECT_NEAR(static_cast<double>(static_cast<float>(got[i])), expect[i], tol) << "element " << i;
      cudaFree(da);
      cudaFree(db);
      cudaFree(dc);
    }
}

TEST(CudaLink, CublasGemmMatchesHostReference) {
  SKIP_WITHOUT_GPUS();
  linalg::cublas::set_stream(nullptr);
  EXPECT_NE(linalg::cublas::version_string().find("cuBLAS"), std::string::npos);
  EXPECT_NE(linalg::cublas::device_description().find("device"), std::string::npos);
  // Inputs are multiples of 1/4 with |x| <= 1.5, k = 5: every product and sum is exact
  // in fp32/fp64; bf16 rounds the output to 8 significant bits (|C| < 8: error < 2^-5).
  check_gemm<float>(linalg::cublas::Type::F32, 1e-6);
  check_gemm<double>(linalg::cublas::Type::F64, 1e-12);
  check_gemm<bf16>(linalg::cublas::Type::BF16, 1.0 / 32);
}

// The cuBLASLt epilogue matmuls (linalg/cuda/cublaslt_gemm.cpp), linked here by every CPU
// build with the CUDA toolkit, run where a GPU is: bias + GELU keeping the pre-activation,
// then the dGELU + bias gradient of the same shape, in fp32 against a double reference
// (selfcheck_paths and test_kernels_gemm_epilogue check them through linalg::gemm_epilogue).
TEST(CudaLink, CublasLtEpiloguesMatchHostReference) {
  SKIP_WITHOUT_GPUS();
  const int m = 16, n = 32, k = 24;  // row-major C (m, n); strides and pointers cuBLASLt takes
  std::vector<float> a(m * k), b(k * n), bias(n), dy(m * k);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7 - 3) * 0.25f;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5 - 2) * 0.125f;
  for (int j = 0; j < n; ++j) bias[j] = static_cast<float>(j % 3 - 1) * 0.5f;
  for (int i = 0; i < m * k; ++i) dy[i] = static_cast<float>(i % 4 - 1.5) * 0.5f;
  const auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  const auto dgelu = [&](double x) {
    const double h = 1e-5;
    return (gelu(x + h) - gelu(x - h)) / (2 * h);
  };
  float *da = device_copy(a), *db = device_copy(b), *dbias = device_copy(bias), *ddy = device_copy(dy);
  float* dpre = device_copy(std::vector<float>(m * n));
  float* dact = device_copy(std::vector<float>(m * n));
  float* dh = device_copy(std::vector<float>(m * n));
  float* dbg = device_copy(std::vector<float>(n));
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, linalg::cublaslt::kMaxWorkspaceBytes), cudaSuccess);
  // Forward: pre = a b + bias, act = gelu(pre).
  linalg::cublaslt::Call f;
  f.type = linalg::cublas::Type::F32;
  f.epilogue = linalg::Epilogue::BiasGelu;
  f.m = m, f.n = n, f.k = k;
  f.a = da, f.lda = k, f.b = db, f.ldb = n, f.c = dact, f.ldc = n, f.bias = dbias, f.pre = dpre, f.ld_pre = n;
  std::string why;
  ASSERT_GE(linalg::cublaslt::workspace_bytes(f, &why), 0) << why;
  linalg::cublaslt::matmul(f, ws, nullptr);
  // Backward: dh = (dy b) * gelu'(pre) (dy (m, k)), and the bias gradient (column sums).
  linalg::cublaslt::Call g = f;
  g.epilogue = linalg::Epilogue::DGeluBiasGrad;
  g.a = ddy, g.lda = k, g.b = db, g.ldb = n, g.c = dh, g.ldc = n, g.bias = dbg;
  ASSERT_GE(linalg::cublaslt::workspace_bytes(g, &why), 0) << why;
  linalg::cublaslt::matmul(g, ws, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto pre = host_copy(dpre, m * n), act = host_copy(dact, m * n), h = host_copy(dh, m * n), bg = host_copy(dbg, n);
  std::vector<double> bg_ref(n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double p = bias[j], d = 0;
      for (int l = 0; l < k; ++l) p += static_cast<double>(a[i * k + l]) * b[l * n + j];
      for (int l = 0; l < k; ++l) d += static_cast<double>(dy[i * k + l]) * b[l * n + j];
      EXPECT_NEAR(pre[i * n + j], p, 1e-5) << "pre " << i << "," << j;
      // cuBLASLt's GELU may use the device's approximate tanh (2^-11 relative).
      EXPECT_NEAR(act[i * n + j], gelu(p), 2e-3 * (1 + std::fabs(p))) << "act " << i << "," << j;
      const double hr = d * dgelu(p);
      EXPECT_NEAR(h[i * n + j], hr, 2e-3 * (1 + std::fabs(d))) << "dh " << i << "," << j;
      bg_ref[j] += hr;
    }
  for (int j = 0; j < n; ++j) EXPECT_NEAR(bg[j], bg_ref[j], 2e-3 * m) << "bias gradient " << j;
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dbias), static_cast<void*>(ddy),
                  static_cast<void*>(dpre), static_cast<void*>(dact), static_cast<void*>(dh), static_cast<void*>(dbg), ws})
    cudaFree(p);
}

#if defined(MESHTRAIN_CUDA_HOST_WITH_CUDNN) || defined(MESHTRAIN_WITH_CUDNN)
// The cuDNN attention (kernels/cuda/cudnn_attention.cpp): linked here by every CPU build on a
// machine with cuDNN (the version needs no GPU), and run where a GPU is: the fused forward
// reads q, k, v in place from one (N, ld) buffer through sdpa_layout and must match a double
// reference, its log-sum-exp statistics included.
TEST(CudaLink, CudnnAttentionIsLinkedIn) {
  const std::string v = kernels::cudnn::version_string();
  EXPECT_TRUE(std::regex_search(v, std::regex(R"(^cuDNN [0-9]+\.[0-9]+\.[0-9]+ \(frontend 1\.[0-9]+\.[0-9]+\)$)"))) << v;
}

TEST(CudaLink, CudnnAttentionMatchesADoubleReference) {
  SKIP_WITHOUT_GPUS();
  const int B = 2, T = 96, Hq = 4, Hkv = 2, hd = 64, group = 2;
  kernels::AttentionShape s;
  s.B = B, s.T = T, s.Hq = Hq, s.Hkv = Hkv, s.hd = hd, s.group = group;
  s.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int ld = (Hq + 2 * Hkv) * hd, ldo = Hq * hd, N = B * T;
  const kernels::SdpaLayout L = kernels::sdpa_layout(s, ld, ld, ld, ldo);
  ASSERT_TRUE(L.supported) << L.why_not;
  std::vector<bf16> qkv(static_cast<std::size_t>(N) * ld);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = bf16(static_cast<float>((i * 2654435761u >> 7) % 17) / 8.0f - 1.0f);
  bf16* d_qkv = device_copy(qkv);
  bf16* d_out = device_copy(std::vector<bf16>(static_cast<std::size_t>(N) * ldo));
  float* d_stats = device_copy(std::vector<float>(static_cast<std::size_t>(B) * Hq * T * 2));
  const std::size_t ws_bytes = kernels::cudnn::sdpa_forward_workspace(L, s.scale, true);
  void* ws = nullptr;
  if (ws_bytes) ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  kernels::cudnn::sdpa_forward(L, s.scale, d_qkv, d_qkv + Hq * hd, d_qkv + (Hq + Hkv) * hd, d_out, d_stats, ws, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out = host_copy(d_out, static_cast<std::size_t>(N) * ldo);
  const auto stats = host_copy(d_stats, static_cast<std::size_t>(B) * Hq * T * 2);
  double worst = 0, worst_lse = 0;
  std::vector<double> p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < T; ++i) {
        auto x = [&](int t, int col) { return static_cast<double>(static_cast<float>(qkv[(static_cast<std::size_t>(b) * T + t) * ld + col])); };
        const int j = h / group;
        double mx = -1e300, sum = 0;
        for (int t = 0; t <= i; ++t) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += x(i, h * hd + c) * x(t, (Hq + j) * hd + c);
          mx = std::max(mx, p[t] = s.scale * d);
        }
        for (int t = 0; t <= i; ++t) sum += (p[t] = std::exp(p[t] - mx));
        worst_lse = std::max(worst_lse, std::abs(stats[((static_cast<std::size_t>(b) * Hq + h) * T + i) * 2] - (mx + std::log(sum))));
        for (int c = 0; c < hd; ++c) {
          double o = 0;
          for (int t = 0; t <= i; ++t) o += p[t] / sum * x(t, (Hq + Hkv + j) * hd + c);
          const double got = static_cast<float>(out[(static_cast<std::size_t>(b) * T + i) * ldo + h * hd + c]);
          worst = std::max(worst, std::abs(got - o));
        }
      }
  EXPECT_LE(worst, 1.0 / 64) << "out (bf16, |out| <= 1)";
  EXPECT_LE(worst_lse, 1e-3) << "log-sum-exp statistics";
  cudaFree(ws);
  cudaFree(d_qkv);
  cudaFree(d_out);
  cudaFree(d_stats);
}
#endif

}  // namespace
