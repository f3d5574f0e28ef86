#pragma once
/// \brief Measured ceilings: the GEMM throughput of this device (the denominator of MFU)
/// and a STREAM-like copy bandwidth, both measured in the same run as what they divide.

namespace meshtrain::linalg {

/// FLOP/s of square GEMMs of size n in fp32 (or bf16 when `bf16`), best of repeated runs
/// lasting about `seconds` in total (device-synchronised).
double measure_gemm_flops(int n, double seconds, bool bf16);

/// Bytes/s of a device memory copy of `bytes` (read + write counted), best of repeats.
double measure_copy_bandwidth(double bytes, double seconds);

}  // namespace meshtrain::linalg
