#pragma once
/// \brief One-thread kernels that keep a training step's scalars on the device (the loss
/// summed over the LM head's chunks and the micro-steps, its mean over the global batch):
/// queued on the compute stream like any kernel, so the host reads nothing inside a step
/// and a CUDA graph can capture them (train/step.hpp). Each does exactly the double
/// additions and division the host did before, in the same order, so the results are bit for
/// bit the host's.

#include <cstdint>

namespace meshtrain::kernels {

/// acc[0] += ((0 + parts[0]) + parts[1]) + ... + parts[n-1]: the chunk losses of one head
/// summed in chunk order from zero, then added to the step's running sum.
void add_in_order(const double* parts, int n, double* acc);
/// acc[0] += value.
void add_scalar(double* acc, double value);
/// x[0] = value (a kernel, not a copy from host memory).
void set_scalar(double* x, double value);
/// out[0] = x[0] / divisor.
void divide_scalar(const double* x, double divisor, double* out);
/// out[0] = x[0] / divisor[0]: the divisor read on the device (a value that changes each step
/// and reaches a replayed CUDA graph through the step's uploaded scalars).
void divide_by_scalar(const double* x, const double* divisor, double* out);
/// out[i] = float(1 / divisor[0]) for i < n: a gradient scale per row, read on the device
/// (the head's cross-entropy multiplies its rows by it, kernels::cross_entropy).
void fill_reciprocal(float* out, std::int64_t n, const double* divisor);

}  // namespace meshtrain::kernels
