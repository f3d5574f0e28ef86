#pragma once
/// \file
/// \brief One check macro per library. Each prints host, rank, file:line and the
/// library's own error string, then aborts every rank (see `meshtrain::fatal`).
/// The CUDA/NCCL/cuBLAS macros expand only where their headers are included.

#include <mpi.h>

#include "core/error.hpp"

namespace meshtrain::detail {
std::string mpi_error_string(int code);
}

#define MPI_CHECK(call)                                                                  \
  do {                                                                                   \
    int mpi_check_rc_ = (call);                                                          \
    if (mpi_check_rc_ != MPI_SUCCESS)                                                    \
      ::meshtrain::fatal("MPI", ::meshtrain::detail::mpi_error_string(mpi_check_rc_), #call, \
                         __FILE__, __LINE__);                                            \
  } while (0)

/// HDF5 calls return a negative value on failure; HDF5 prints its own error stack.
#define H5_CHECK(call)                                                          \
  ([&]() {                                                                      \
    auto h5_check_rc_ = (call);                                                 \
    if (h5_check_rc_ < 0)                                                       \
      ::meshtrain::fatal("HDF5", "call failed (see the HDF5 error stack above)", #call, \
                         __FILE__, __LINE__);                                   \
    return h5_check_rc_;                                                        \
  }())

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t cuda_check_rc_ = (call);                                                   \
    if (cuda_check_rc_ != cudaSuccess)                                                     \
      ::meshtrain::fatal("CUDA", cudaGetErrorString(cuda_check_rc_), #call, __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(call)                                                                  \
  do {                                                                                    \
    ncclResult_t nccl_check_rc_ = (call);                                                 \
    if (nccl_check_rc_ != ncclSuccess)                                                    \
      ::meshtrain::fatal("NCCL",                                                          \
                         std::string(ncclGetErrorString(nccl_check_rc_)) + " — " +        \
                             ncclGetLastError(nullptr),                                   \
                         #call, __FILE__, __LINE__);                                      \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t cublas_check_rc_ = (call);                                               \
    if (cublas_check_rc_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::meshtrain::fatal("cuBLAS", cublasGetStatusString(cublas_check_rc_), #call, __FILE__, \
                         __LINE__);                                                         \
  } while (0)
