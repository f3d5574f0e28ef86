# Spack recipe for meshtrain. Register the repository once (`spack repo add spack` from
# the repository root), then build this checkout inside an environment:
#
#   spack env activate .                       # spack.yaml: the dependencies
#   spack develop --path . meshtrain@=main     # build the working tree, not a download
#   spack add meshtrain@=main +cuda cuda_arch=90
#   spack install
#
# The variants mirror CMakePresets.json: ~cuda +openmp is the `cpu` preset, +cuda
# cuda_arch=90 is the `cuda` preset.
from spack.package import *

try:  # Spack >= 1.0 keeps the build systems in its builtin package repository.
    from spack_repo.builtin.build_systems.cmake import CMakePackage
    from spack_repo.builtin.build_systems.cuda import CudaPackage
except ImportError:  # older Spack exports them from spack.package
    pass


class Meshtrain(CMakePackage, CudaPackage):
    """MPI-native pretraining and fine-tuning of decoder-only transformer language models
    (GPT-2, Llama) with FSDP x tensor parallelism: Kokkos kernels, MPI and NCCL
    collectives, cuBLAS/OpenBLAS GEMMs, parallel-HDF5 checkpoints."""

    # No public remote: the source is this checkout (`spack develop`, above).
    version("main", branch="main")

    variant("openmp", default=True, description="Kokkos OpenMP backend for host kernels")

    generator("ninja")

    depends_on("c", type="build")  # HDF5 detection enables C
    depends_on("cxx", type="build")
    depends_on("cmake@3.21:", type="build")
    depends_on("ninja", type="build")

    depends_on("mpi")
    depends_on("hdf5@1.10: +mpi")
    depends_on("boost@1.66: +program_options")
    depends_on("nlohmann-json@3.9:")  # tokenizer.json, JSONL data, plan --json
    depends_on("pcre2")  # pre-tokenizer regexes
    depends_on("sentencepiece")  # tokenizer.model files
    depends_on("openblas", when="~cuda")  # host GEMMs; CUDA builds use cuBLAS only
    depends_on("googletest", type="test")

    # Host builds: Kokkos 3.4 (Debian's, used by CI) through 4.x; Kokkos 5 needs C++20.
    depends_on("kokkos@3.4:4 +serial")
    depends_on("kokkos +openmp", when="+openmp")

    with when("+cuda"):
        depends_on("kokkos@4.6:4 +cuda +cuda_lambda +wrapper cxxstd=17")
        depends_on("kokkos@4.7.01:", when="^cuda@13:")  # older Kokkos fails with CUDA 13
        depends_on("nccl@2.18:")
        for arch in CudaPackage.cuda_arch_values:
            depends_on(f"kokkos cuda_arch={arch}", when=f"cuda_arch={arch}")
            depends_on(f"nccl cuda_arch={arch}", when=f"cuda_arch={arch}")
    conflicts("cuda_arch=none", when="+cuda", msg="meshtrain +cuda needs a cuda_arch (90 = H100/H200)")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("MESHTRAIN_ENABLE_CUDA", "cuda"),
            self.define("MESHTRAIN_ENABLE_TESTS", self.run_tests),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
        ]
        if spec.satisfies("~cuda"):
            args.append(self.define("BLA_VENDOR", "OpenBLAS"))
        if spec.satisfies("+cuda"):
            # Kokkos' nvcc_wrapper compiles every translation unit that includes Kokkos;
            # configure checks that Kokkos was built for the same architecture.
            args.append(self.define("CMAKE_CXX_COMPILER", self["kokkos"].kokkos_cxx))
            args.append(self.define("MESHTRAIN_CUDA_ARCH", spec.variants["cuda_arch"].value[0]))
        else:
            # A CPU build never picks up a CUDA toolkit that happens to be on the machine.
            args.append(self.define("MESHTRAIN_CUDA_CHECK", "OFF"))
        return args
