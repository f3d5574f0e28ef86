#include "train/run_record.hpp"

#include <hdf5.h>

#include <boost/version.hpp>
#include <filesystem>

#include "build_config.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "core/kokkos_compat.hpp"
#include "formats/json.hpp"
#include "kernels/attention.hpp"
#include "linalg/gemm.hpp"
#include "runtime/runtime.hpp"

namespace meshtrain::train {

formats::Json library_versions() {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  formats::Json v;
  v["meshtrain"] = std::string(MESHTRAIN_VERSION) + " (" + MESHTRAIN_GIT_DESCRIBE + ")";
  v["compiler"] = MESHTRAIN_CXX_COMPILER;
  v["kokkos"] = kokkos_version_string() + " " + kokkos_backend_name();
  v["mpi"] = mpi_library_version();
  v["hdf5"] = strprintf("%u.%u.%u", maj, min, rel);
  v["boost"] = std::string(BOOST_LIB_VERSION);
  v["gemm"] = linalg::gemm_backend_name();
  v["cuda"] = linalg::cuda_description();
  const std::string fused = kernels::fused_attention_version();
  v["attention"] = fused.empty() ? std::string("Kokkos blocked attention") : fused + " flash attention (gpu.attention)";
  return v;
}

std::string record_with_resume_note(const plan::RunSetup& s, const RunStart& start) {
  namespace fs = std::filesystem;
  const checkpoint::ResumeSpec& given = s.spec.checkpoint.resume;
  const char* rerun = "a rerun of this file continues from the newest checkpoint in checkpoint.dir";
  const std::string weights = s.spec.checkpoint.init_from.empty() ? "its initial weights" : s.spec.checkpoint.init_from;
  std::string note;
  if (!start.resumed_from.empty()) {
    note = strprintf("This run resumed from %s (step %d)", start.resumed_from.c_str(), start.step);
    if (given.kind == checkpoint::ResumeSpec::Kind::Path) {
      note += strprintf(", given as checkpoint.resume=%s; written as auto: %s", given.path.c_str(), rerun);
      // A checkpoint outside checkpoint.dir is not what auto finds: before this run has
      // saved one of its own, a rerun would start from scratch.
      std::error_code ec;
      const fs::path dir = fs::weakly_canonical(s.spec.checkpoint.dir, ec);
      const fs::path from = fs::weakly_canonical(start.resumed_from, ec);
      if (from.parent_path() != dir)
        note += "\n(that checkpoint is outside checkpoint.dir: until this run has saved a checkpoint, give "
                "--checkpoint.resume=" + given.path + " again)";
    }
    note += ".";
  } else if (given.kind == checkpoint::ResumeSpec::Kind::None) {
    note = strprintf("This run started from %s, given as checkpoint.resume=none; written as auto: %s.", weights.c_str(),
                     rerun);
  } else {
    note = strprintf("This run started from %s (no checkpoint in checkpoint.dir); %s.", weights.c_str(), rerun);
  }
  // Every line of the note is a comment, also after a newline inside a path.
  std::string comment = "# ";
  for (const char c : note) comment += c == '\n' ? std::string("\n# ") : std::string(1, c);
  comment += "\n";
  std::string ini = s.record_ini;
  const std::size_t section = ini.find("[checkpoint]\n");
  const std::size_t key = section == std::string::npos ? section : ini.find("\nresume = ", section);
  if (key == std::string::npos) return ini + comment;
  return ini.insert(key + 1, comment);
}

void write_run_record(const plan::RunSetup& s, const Topology& topo, const std::string& dir, const RunStart& start) {
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
                        "# Effective configuration of this run (every key, defaults included; what meshtrain resolved for this\n"
                        "# job's ranks is a comment, so that the file reruns the run on any number of ranks).\n" +
                            record_with_resume_note(s, start),
                        fault::Point::RecordWrite);
  file_io::replace_file(dir + "/mesh.txt", describe_mesh_shape(s.mesh_shape, &topo), fault::Point::RecordWrite);
  formats::Json run;
  run["world_size"] = topo.world_size;
  run["nodes"] = topo.num_nodes;
  run["mesh"] = s.mesh_shape.str();
  run["strategy"] = parallel::strategy_name(s.strategy);
  run["strategy_reason"] = s.strategy_reason;
  run["grad_accum"] = s.batch.grad_accum;
  run["global_batch"] = s.batch.global_batch;
  run["parameters"] = s.spec.dims.num_params();
  run["memory_budget_bytes"] = s.memory_budget;
  // Absolute: a later run into this output.dir finds which checkpoints the record describes
  // (train/earlier_run.hpp), whatever its working directory.
  const fs::path checkpoint_dir = fs::absolute(s.spec.checkpoint.dir, ec);
  const fs::path canonical = fs::weakly_canonical(checkpoint_dir, ec);
  run["checkpoint_dir"] = (ec ? checkpoint_dir : canonical).lexically_normal().string();
  run["versions"] = library_versions();
  file_io::replace_file(dir + "/run.json", formats::json_text(run) + "\n", fault::Point::RecordWrite);
}

}  // namespace meshtrain::train
