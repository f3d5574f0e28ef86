#pragma once
/// \brief Measured ceilings: the GEMM throughput of this device (the denominator of MFU)
/// and a STREAM-like copy bandwidth, both measured in the same run as what they divide.

#include "linalg/gemm.hpp"

namespace meshtrain::linalg {

struct GemmRate {
  double best = 0;  ///< FLOP/s of the fastest repeat
  double mean = 0;  ///< FLOP/s over all repeats
};

/// C (m,n) = op(A) op(B), row-major, fp32 (or bf16 when `bf16`), repeated for about
/// `seconds` after one warm-up call, each repeat device-synchronised, on random operands in
/// [-1, 1) (kernels::fill_uniform). The one GEMM timer of the ceilings, `meshtrain bench
/// gemm` and MFU.
GemmRate time_gemm(Op a, Op b, int m, int n, int k, double seconds, bool bf16);

/// FLOP/s of square GEMMs of size n in fp32 (or bf16 when `bf16`), best of repeated runs
/// lasting about `seconds` in total (device-synchronised).
double measure_gemm_flops(int n, double seconds, bool bf16);

/// Bytes/s of a device memory copy of `bytes` (read + write counted), best of repeats.
double measure_copy_bandwidth(double bytes, double seconds);

}  // namespace meshtrain::linalg
