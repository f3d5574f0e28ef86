# Finds every dependency once and records it in the feature summary.
# Kokkos: installed by scripts/install-deps.sh (CPU) or Spack (clusters); point
# CMAKE_PREFIX_PATH / Kokkos_ROOT at it.

find_package(Kokkos REQUIRED)
set_package_properties(Kokkos PROPERTIES TYPE REQUIRED PURPOSE "portable kernels (Serial/OpenMP/CUDA)")
if(MESHTRAIN_ENABLE_CUDA)
  kokkos_check(DEVICES CUDA)   # fails configure with a clear message when Kokkos lacks CUDA
  # Kokkos compiles device code for exactly one architecture, fixed when Kokkos was built
  # (Kokkos_ARCH_HOPPER90 -> -arch=sm_90 on every translation unit through Kokkos::kokkos).
  # MESHTRAIN_CUDA_ARCH states the one this build is for; Kokkos 4.x exports its own, and a
  # mismatch stops configure here instead of "no kernel image is available" on the GPU.
  if(DEFINED Kokkos_CUDA_ARCHITECTURES)
    if(NOT Kokkos_CUDA_ARCHITECTURES STREQUAL MESHTRAIN_CUDA_ARCH)
      message(FATAL_ERROR
        "MESHTRAIN_CUDA_ARCH=${MESHTRAIN_CUDA_ARCH}, but the Kokkos in ${Kokkos_DIR} was built for "
        "sm_${Kokkos_CUDA_ARCHITECTURES}. Use a Kokkos built for the target GPUs (Spack: kokkos+cuda "
        "cuda_arch=${MESHTRAIN_CUDA_ARCH}; by hand: -DKokkos_ARCH_<NAME>${MESHTRAIN_CUDA_ARCH}=ON) or set "
        "-DMESHTRAIN_CUDA_ARCH=${Kokkos_CUDA_ARCHITECTURES}.")
    endif()
  else()
    message(WARNING "This Kokkos (${Kokkos_VERSION}) does not export Kokkos_CUDA_ARCHITECTURES; "
                    "assuming it was built for MESHTRAIN_CUDA_ARCH=${MESHTRAIN_CUDA_ARCH}.")
  endif()
  if(Kokkos_VERSION VERSION_LESS 4.6)
    message(FATAL_ERROR "CUDA builds need Kokkos >= 4.6 (found ${Kokkos_VERSION}); see doc/install.md")
  endif()
endif()

find_package(MPI REQUIRED COMPONENTS C)
# meshtrain uses the MPI C API from C++; keep the deprecated C++ bindings out of mpi.h.
add_library(meshtrain_mpi INTERFACE)
target_link_libraries(meshtrain_mpi INTERFACE MPI::MPI_C)
target_compile_definitions(meshtrain_mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
set_package_properties(MPI PROPERTIES TYPE REQUIRED PURPOSE "launch, topology, CPU collectives")

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "meshtrain needs a parallel (MPI-IO) HDF5; found a serial one at ${HDF5_INCLUDE_DIRS}. "
                      "On Debian install libhdf5-openmpi-dev; with Spack use hdf5+mpi.")
endif()
set_package_properties(HDF5 PROPERTIES TYPE REQUIRED PURPOSE "collective sharded checkpoints")

find_package(Boost 1.66 REQUIRED COMPONENTS program_options)
set_package_properties(Boost PROPERTIES TYPE REQUIRED PURPOSE "configuration files and command-line options")

find_package(Threads REQUIRED)

# Tokenizers: nlohmann/json parses tokenizer.json / tokenizer_config.json / JSONL data;
# PCRE2 runs the pre-tokenizer split regexes (Unicode classes \p{L}, \p{N}); SentencePiece
# loads tokenizer.model files exactly as the reference does.
find_package(nlohmann_json 3.9 REQUIRED)
set_package_properties(nlohmann_json PROPERTIES TYPE REQUIRED PURPOSE "tokenizer.json, tokenizer_config.json, JSONL data, `meshtrain plan --json`")
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
add_feature_info(PCRE2 PCRE2_FOUND "pre-tokenizer regexes of byte-level BPE tokenizers (${PCRE2_VERSION})")
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
add_feature_info(SentencePiece SENTENCEPIECE_FOUND "tokenizer.model files (${SENTENCEPIECE_VERSION})")

# Host BLAS: OpenBLAS with its CBLAS header, the GEMM of host builds. CUDA builds run every
# GEMM through cuBLAS and do not need (or link) a host BLAS.
if(NOT MESHTRAIN_ENABLE_CUDA)
  if(NOT DEFINED BLA_VENDOR)
    set(BLA_VENDOR OpenBLAS)
  endif()
  find_package(BLAS REQUIRED)
  find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
  if(NOT CBLAS_INCLUDE_DIR)
    message(FATAL_ERROR "cblas.h not found: install libopenblas-dev (Debian) or openblas (Spack)")
  endif()
  add_library(meshtrain_blas INTERFACE)
  target_link_libraries(meshtrain_blas INTERFACE ${BLAS_LIBRARIES})
  target_include_directories(meshtrain_blas INTERFACE ${CBLAS_INCLUDE_DIR})
  add_feature_info(OpenBLAS BLAS_FOUND "host GEMM (${BLAS_LIBRARIES})")
endif()

# CUDA toolkit: required for MESHTRAIN_ENABLE_CUDA; on CPU builds it is used (when
# present) to compile and link the NCCL communicator and cuBLAS GEMM so they cannot rot.
set(_want_cuda_toolkit ${MESHTRAIN_ENABLE_CUDA})
if(NOT MESHTRAIN_ENABLE_CUDA AND NOT MESHTRAIN_CUDA_CHECK STREQUAL "OFF")
  set(_want_cuda_toolkit ON)
endif()
set(MESHTRAIN_HAVE_CUDA_TOOLKIT OFF)
if(_want_cuda_toolkit)
  if(MESHTRAIN_ENABLE_CUDA OR MESHTRAIN_CUDA_CHECK STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  if(CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_ROOT}/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_ROOT}/lib)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(meshtrain_nccl INTERFACE)
      target_include_directories(meshtrain_nccl INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(meshtrain_nccl INTERFACE ${NCCL_LIBRARY})
      set(MESHTRAIN_HAVE_CUDA_TOOLKIT ON)
    elseif(MESHTRAIN_ENABLE_CUDA OR MESHTRAIN_CUDA_CHECK STREQUAL "ON")
      message(FATAL_ERROR "NCCL not found (nccl.h / libnccl): set NCCL_ROOT")
    endif()
    # cuDNN (beside the CUDA toolkit) and the cuDNN frontend, its header-only C++ graph API
    # (the PyPI wheel nvidia-cudnn-frontend, unpacked by scripts/install-deps.sh into
    # $MESHTRAIN_DEPS/cudnn-frontend): the fused attention, kernels/cuda/cudnn_attention.cpp.
    # Without them CUDA builds run the Kokkos attention (gpu.attention=cudnn falls back).
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{CUDNN_ROOT}/include)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{CUDNN_ROOT}/lib $ENV{CUDNN_ROOT}/lib64)
    find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
              HINTS $ENV{CUDNN_FRONTEND_ROOT}/include $ENV{MESHTRAIN_DEPS}/cudnn-frontend/include
                    /opt/meshtrain-deps/cudnn-frontend/include)
    set(MESHTRAIN_HAVE_CUDNN OFF)
    if(MESHTRAIN_HAVE_CUDA_TOOLKIT AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND CUDNN_FRONTEND_INCLUDE_DIR)
      add_library(meshtrain_cudnn INTERFACE)
      # SYSTEM: the frontend's headers are not compiled with meshtrain's warning flags.
      target_include_directories(meshtrain_cudnn SYSTEM INTERFACE ${CUDNN_INCLUDE_DIR} ${CUDNN_FRONTEND_INCLUDE_DIR})
      # The frontend compiles some engines at run time (NVRTC) and loads them (the driver API).
      target_link_libraries(meshtrain_cudnn INTERFACE ${CUDNN_LIBRARY} CUDA::nvrtc CUDA::cuda_driver)
      set(MESHTRAIN_HAVE_CUDNN ON)
    endif()
  endif()
endif()
add_feature_info(CUDA MESHTRAIN_ENABLE_CUDA "Kokkos-CUDA kernels (sm_${MESHTRAIN_CUDA_ARCH}), cuBLAS GEMMs, NCCL communicators")
add_feature_info(CUDA_LINK_CHECK MESHTRAIN_HAVE_CUDA_TOOLKIT "NCCL communicator and cuBLAS GEMM compiled and linked against the CUDA toolkit")
add_feature_info(CUDNN MESHTRAIN_HAVE_CUDNN "cuDNN flash attention (cuDNN ${CUDNN_LIBRARY}, frontend headers ${CUDNN_FRONTEND_INCLUDE_DIR})")

if(MESHTRAIN_ENABLE_TESTS)
  find_package(GTest REQUIRED)
  set_package_properties(GTest PROPERTIES TYPE REQUIRED PURPOSE "unit and MPI tests")
  find_program(MESHTRAIN_PYTHON_REFERENCE NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
endif()
