#include "meshtrain/train/run_record.hpp"

#include <hdf5.h>

#include <boost/version.hpp>
#include <filesystem>

#include "meshtrain/build_config.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/fault.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/core/json.hpp"
#include "meshtrain/core/kokkos_compat.hpp"
#include "meshtrain/linalg/gemm.hpp"
#include "meshtrain/runtime/runtime.hpp"

namespace meshtrain::train {

std::string library_versions_json() {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  JsonObject v;
  v.add("meshtrain", std::string(MESHTRAIN_VERSION) + " (" + MESHTRAIN_GIT_DESCRIBE + ")")
      .add("compiler", MESHTRAIN_CXX_COMPILER)
      .add("kokkos", kokkos_version_string() + " " + kokkos_backend_name())
      .add("mpi", mpi_library_version())
      .add("hdf5", strprintf("%u.%u.%u", maj, min, rel))
      .add("boost", std::string(BOOST_LIB_VERSION))
      .add("gemm", linalg::gemm_backend_name())
      .add("cuda", linalg::cuda_description());
  return v.str();
}

void write_run_record(const RunSetup& s, const Topology& topo, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  MESHTRAIN_REQUIRE(!ec, "cannot create output.dir '%s': %s", dir.c_str(), ec.message().c_str());
  // Each file is replaced atomically and every write is checked (file_io): a full disk is
  // one IoError naming the file, and an earlier run's record is never half overwritten.
  // record_ini holds train.grad_accum as resolved (app/run_spec_resolve.cpp): with
  // train.global_batch set it is derived, and the file would otherwise hold a value that the
  // global batch overrides (a warning on reuse).
  file_io::replace_file(dir + "/config.ini",
                        "# Effective configuration of this run (every key, defaults included).\n" + s.record_ini,
                        fault::Point::RecordWrite);
  file_io::replace_file(dir + "/mesh.txt", describe_mesh(s.mesh, &topo), fault::Point::RecordWrite);
  JsonObject run;
  run.add("world_size", topo.world_size)
      .add("nodes", topo.num_nodes)
      .add("mesh", s.mesh.str())
      .add("strategy", parallel::strategy_name(s.strategy))
      .add("strategy_reason", s.strategy_reason)
      .add("grad_accum", s.batch.grad_accum)
      .add("global_batch", s.batch.global_batch)
      .add("parameters", s.dims.num_params())
      .add("memory_budget_bytes", s.memory_budget)
      .add_raw("versions", library_versions_json());
  file_io::replace_file(dir + "/run.json", run.str() + "\n", fault::Point::RecordWrite);
}

}  // namespace meshtrain::train
