#pragma once
// `meshtrain convert --output DIR`: how an export replaces its directory (doc/checkpoints.md,
// "Export: the output directory"). An export is written whole into a new directory beside
// DIR and swapped in with renames, so DIR holds exactly one export's files -- never an
// earlier export's model.safetensors beside a new sharded one, which readers would prefer
// -- and a failed export leaves DIR as it was. A DIR that holds anything but a previous
// export is refused, untouched.

#include <functional>
#include <string>
#include <vector>

namespace meshtrain::app {

/// The file each export writes beside its files: {"meshtrain_export": 1, "step": N,
/// "files": [...]}. It marks the directory as one a later convert may replace.
inline constexpr const char* kExportManifest = "meshtrain_export.json";

/// What an export wrote: the checkpoint's step and the files' names (for the caller; the
/// manifest lists what the staging directory holds).
struct ExportWritten {
  int step = 0;
  std::vector<std::string> files;
};

/// Runs `write(staging_dir)` (which must write the export's files into staging_dir), adds
/// the manifest, and puts the result at `out_dir`: a new
/// directory, an empty one, or a previous export replaced whole. UserError, before anything
/// is written, when `out_dir` is a file or a non-empty directory that is not a previous
/// export; on any failure the staging directory (and parents this call created) are removed.
void write_export_dir(const std::string& out_dir,
                      const std::function<ExportWritten(const std::string& staging_dir)>& write);

/// Empty when `dir` (existing, non-empty) holds a previous export that may be replaced;
/// otherwise why not, naming a file that is no export's.
std::string why_not_an_export(const std::string& dir);

}  // namespace meshtrain::app
