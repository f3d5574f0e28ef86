// The GGUF base of a model.base_quant=gguf run, and its matrices' block types.
#include "checkpoint/gguf_base.hpp"

#include "base_ref.hpp"
#include "checkpoint/weights_path.hpp"
#include "formats/gguf_file.hpp"
#include "gguf_import.hpp"
#include "h5.hpp"
#include "model/param_spec.hpp"

namespace meshtrain::checkpoint {

std::string gguf_base_of(const std::string& weights, const std::string& what) {
  const WeightsPath w = classify_weights_path(weights, what);
  if (w.kind == WeightsKind::Gguf) return w.path;
  if (w.kind != WeightsKind::Hdf5) return "";
  // A LoRA checkpoint names its base (an unreadable file: the load that follows says why).
  h5::QuietErrors quiet;
  if (H5Fis_hdf5(w.path.c_str()) <= 0) return "";
  h5::Handle f = h5::file(H5Fopen(w.path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
  if (!f.valid()) return "";
  const std::optional<BaseRef> ref = read_base_ref(f.get());
  return ref && !ref->path.empty() && formats::looks_like_gguf(ref->path) ? ref->path : "";
}

model::BaseFormats gguf_base_formats(const std::string& path, const model::ModelDims& dims) {
  const std::vector<model::ParamSpec> specs = model::build_param_specs(dims);
  const GgufWeights w(path, specs, dims);
  model::BaseFormats out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const model::ParamSpec& p = specs[i];
    if (!p.frozen || p.shape.size() != 2) continue;
    out[p.name] = {static_cast<std::uint32_t>(w.type(static_cast<int>(i))), w.rows(static_cast<int>(i))};
  }
  return out;
}

}  // namespace meshtrain::checkpoint
