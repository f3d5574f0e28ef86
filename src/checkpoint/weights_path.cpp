#include "checkpoint/weights_path.hpp"

#include <hdf5.h>

#include <filesystem>

#include "h5.hpp"
#include "checkpoint/checkpoint.hpp"
#include "formats/gguf_file.hpp"
#include "core/error.hpp"

namespace meshtrain::checkpoint {
namespace fs = std::filesystem;

WeightsPath classify_weights_path(const std::string& path, const std::string& what) {
  std::error_code ec;
  MESHTRAIN_REQUIRE(fs::exists(path, ec), "%s: no such file or directory", what.c_str());
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path + "/model.safetensors", ec) || fs::exists(path + "/model.safetensors.index.json", ec))
      return {WeightsKind::Safetensors, path};
    const std::string newest = newest_checkpoint(path);
    MESHTRAIN_REQUIRE(!newest.empty(),
                      "%s: the directory holds no model.safetensors, no model.safetensors.index.json and no "
                      "complete checkpoint (step_*.h5)",
                      what.c_str());
    return {WeightsKind::Hdf5, newest};
  }
  {
    h5::QuietErrors quiet;
    if (fs::is_regular_file(path, ec) && H5Fis_hdf5(path.c_str()) > 0) return {WeightsKind::Hdf5, path};
  }
  if (fs::is_regular_file(path, ec) && formats::looks_like_gguf(path)) return {WeightsKind::Gguf, path};
  const bool st_name = path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  return {st_name ? WeightsKind::Safetensors : WeightsKind::Hdf5, path};
}

}  // namespace meshtrain::checkpoint
