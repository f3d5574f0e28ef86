#include "format.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "h5.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"

namespace meshtrain::checkpoint::format {
namespace {

/// One key of the model description: how it is read from and written to ModelDims.
struct Field {
  const char* key;
  enum Kind { Int, Real, Text } kind;
  std::function<std::string(const model::ModelDims&)> text;  ///< for messages and comparison
};

std::string real_text(double v) { return strprintf("%.17g", v); }

const std::vector<Field>& fields() {
  using D = model::ModelDims;
  static const std::vector<Field> f = {
      {"family", Field::Text, [](const D& d) { return std::string(model::family_name(d.family)); }},
      {"vocab_size", Field::Int, [](const D& d) { return std::to_string(d.valid_vocab); }},
      {"padded_vocab_size", Field::Int, [](const D& d) { return std::to_string(d.vocab); }},
      {"d_model", Field::Int, [](const D& d) { return std::to_string(d.d_model); }},
      {"n_layers", Field::Int, [](const D& d) { return std::to_string(d.n_layers); }},
      {"n_heads", Field::Int, [](const D& d) { return std::to_string(d.n_heads); }},
      {"n_kv_heads", Field::Int, [](const D& d) { return std::to_string(d.n_kv_heads); }},
      {"head_dim", Field::Int, [](const D& d) { return std::to_string(d.head_dim); }},
      {"ffn_dim", Field::Int, [](const D& d) { return std::to_string(d.ffn_dim); }},
      {"max_seq_len", Field::Int, [](const D& d) { return std::to_string(d.max_seq_len); }},
      {"tie_embeddings", Field::Int, [](const D& d) { return std::string(d.tied ? "1" : "0"); }},
      {"norm_eps", Field::Real, [](const D& d) { return real_text(d.norm_eps); }},
      {"rope_theta", Field::Real, [](const D& d) { return real_text(d.rope_theta); }},
  };
  return f;
}

/// The adapted projections in the family's canonical order ("q,v" and "v,q" are one setting).
std::string canonical_targets(const model::ModelDims& d) {
  const std::vector<std::string> names = model::lora_target_names(d.family);
  std::vector<std::string> out;
  for (int i = 0; i < static_cast<int>(names.size()); ++i)
    if (std::find(d.lora_target_ids.begin(), d.lora_target_ids.end(), i) != d.lora_target_ids.end()) out.push_back(names[i]);
  return join(out, ",");
}

/// Names of the datasets directly under `group` of an open file.
std::vector<std::string> dataset_names(hid_t file, const char* group) {
  std::vector<std::string> names;
  h5::Handle g = h5::group(H5Gopen2(file, group, H5P_DEFAULT));
  if (!g.valid()) return names;
  H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
             [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
               static_cast<std::vector<std::string>*>(out)->emplace_back(name);
               return 0;
             },
             &names);
  return names;
}

std::string size_text(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? std::string("unknown size") : strprintf("%llu bytes", static_cast<unsigned long long>(n));
}

std::string describe_type(hid_t t) {
  const std::size_t bits = H5Tget_size(t) * 8;
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return strprintf("float%zu", bits);
    case H5T_INTEGER: return strprintf("%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_STRING: return "string";
    default: return "a non-numeric type";
  }
}

}  // namespace

void write_model_attrs(hid_t group, const model::ModelDims& d) {
  for (const Field& f : fields()) {
    const std::string v = f.text(d);
    switch (f.kind) {
      case Field::Int: h5::write_attr(group, f.key, static_cast<std::int64_t>(std::stoll(v))); break;
      case Field::Real: h5::write_attr(group, f.key, std::stod(v)); break;  // %.17g round-trips exactly
      case Field::Text: h5::write_attr(group, f.key, v); break;
    }
  }
  // The LoRA settings: the adapters change the model's function (alpha has no dataset of
  // its own), so readers compare them like the dimensions above.
  h5::write_attr(group, "lora_rank", static_cast<std::int64_t>(d.lora_rank));
  h5::write_attr(group, "lora_alpha", d.lora_alpha);
  h5::write_attr(group, "lora_targets", d.lora_rank > 0 ? canonical_targets(d) : std::string());
  h5::write_attr(group, "base_quant", std::string(choice_name(d.base_quant)));
  h5::write_attr(group, "base_quant_embeddings", static_cast<std::int64_t>(d.base_quant_embeddings ? 1 : 0));
}

LoraSettings read_lora(hid_t file) {
  h5::QuietErrors quiet;
  LoraSettings out;
  h5::Handle g = h5::group(H5Gopen2(file, kModelGroup, H5P_DEFAULT));
  if (!g.valid()) return out;
  const auto rank = h5::read_int_attr(g.get(), "lora_rank");
  const auto alpha = h5::read_double_attr(g.get(), "lora_alpha");
  const auto targets = h5::read_string_attr(g.get(), "lora_targets");
  if (!rank || !alpha || !targets) return out;  // written before the settings were recorded
  out.recorded = true;
  out.rank = static_cast<int>(*rank);
  out.alpha = *alpha;
  out.targets = *targets;
  if (const auto quant = h5::read_string_attr(g.get(), "base_quant")) {
    const std::optional<BaseQuant> q = parse_choice<BaseQuant>(*quant);
    MESHTRAIN_REQUIRE(q.has_value(), "/model's base_quant '%s' is not one of %s: the file is damaged or newer",
                      quant->c_str(), choice_list<BaseQuant>().c_str());
    out.base_quant = *q;
  }
  if (const auto embeddings = h5::read_int_attr(g.get(), "base_quant_embeddings"))
    out.base_quant_embeddings = *embeddings != 0 || out.base_quant == BaseQuant::None;
  return out;
}

LoraSettings lora_settings(const model::ModelDims& d) {
  LoraSettings out;
  out.recorded = true;
  out.rank = d.lora_rank;
  out.alpha = d.lora_alpha;
  out.targets = d.lora_rank > 0 ? canonical_targets(d) : std::string();
  out.base_quant = d.base_quant;
  out.base_quant_embeddings = d.base_quant_embeddings;
  return out;
}


model::ModelDims read_model_dims(hid_t file, const std::string& path) {
  h5::QuietErrors quiet;
  h5::Handle g = h5::group(H5Gopen2(file, kModelGroup, H5P_DEFAULT));
  MESHTRAIN_REQUIRE(g.valid(), "checkpoint %s has no /model group: it is not a meshtrain checkpoint", path.c_str());
  auto need_int = [&](const char* key) {
    const auto v = h5::read_int_attr(g.get(), key);
    MESHTRAIN_REQUIRE(v.has_value(), "checkpoint %s: /model lacks the integer attribute '%s'", path.c_str(), key);
    return *v;
  };
  auto need_real = [&](const char* key) {
    const auto v = h5::read_double_attr(g.get(), key);
    MESHTRAIN_REQUIRE(v.has_value(), "checkpoint %s: /model lacks the float attribute '%s'", path.c_str(), key);
    return *v;
  };
  const auto family = h5::read_string_attr(g.get(), "family");
  MESHTRAIN_REQUIRE(family.has_value(), "checkpoint %s: /model lacks the attribute 'family'", path.c_str());
  model::ModelDims d;
  d.family = model::parse_family(*family);
  d.valid_vocab = need_int("vocab_size");
  d.vocab = need_int("padded_vocab_size");
  d.d_model = static_cast<int>(need_int("d_model"));
  d.n_layers = static_cast<int>(need_int("n_layers"));
  d.n_heads = static_cast<int>(need_int("n_heads"));
  d.n_kv_heads = static_cast<int>(need_int("n_kv_heads"));
  d.head_dim = static_cast<int>(need_int("head_dim"));
  d.ffn_dim = static_cast<int>(need_int("ffn_dim"));
  d.max_seq_len = static_cast<int>(need_int("max_seq_len"));
  d.tied = need_int("tie_embeddings") != 0;
  d.norm_eps = need_real("norm_eps");
  d.rope_theta = need_real("rope_theta");
  const LoraSettings lora = read_lora(file);
  if (lora.recorded && lora.rank > 0) {
    d.lora_rank = lora.rank;
    d.lora_alpha = lora.alpha;
    d.base_quant = lora.base_quant;
    d.base_quant_embeddings = lora.base_quant_embeddings;
    for (std::size_t start = 0; start <= lora.targets.size();) {
      const std::size_t comma = std::min(lora.targets.find(',', start), lora.targets.size());
      if (comma > start) d.lora_targets.push_back(lora.targets.substr(start, comma - start));
      start = comma + 1;
    }
    const std::vector<std::string> valid = model::lora_target_names(d.family);
    for (const std::string& t : d.lora_targets) {
      const auto it = std::find(valid.begin(), valid.end(), t);
      MESHTRAIN_REQUIRE(it != valid.end(), "checkpoint %s: /model names the LoRA target '%s', which is not a %s projection",
                        path.c_str(), t.c_str(), model::family_name(d.family));
      d.lora_target_ids.push_back(static_cast<int>(it - valid.begin()));
    }
    MESHTRAIN_REQUIRE(!d.lora_targets.empty(), "checkpoint %s: /model has lora_rank=%d but no lora_targets",
                      path.c_str(), lora.rank);
  }
  MESHTRAIN_REQUIRE(d.vocab > 0 && d.valid_vocab > 0 && d.valid_vocab <= d.vocab && d.d_model > 0 && d.n_layers > 0 &&
                        d.n_heads > 0 && d.n_kv_heads > 0 && d.head_dim > 0 && d.ffn_dim > 0 && d.max_seq_len > 0,
                    "checkpoint %s: the model description in /model is inconsistent", path.c_str());
  return d;
}

std::vector<std::string> model_differences(const model::ModelDims& in_file, const model::ModelDims& run) {
  std::vector<std::string> out;
  for (const Field& f : fields()) {
    const std::string a = f.text(in_file), b = f.text(run);
    if (a != b) out.push_back(strprintf("%s: %s in the checkpoint, %s in this run", f.key, a.c_str(), b.c_str()));
  }
  return out;
}

}  // namespace meshtrain::checkpoint::format

namespace meshtrain::checkpoint {

std::string LoraSettings::str() const {
  if (rank <= 0) return "no LoRA (model.lora_rank=0)";
  const std::string quant =
      base_quant == BaseQuant::None
          ? std::string()
          : strprintf(", model.base_quant=%s%s", choice_name(base_quant),
                      base_quant_embeddings ? "" : ", model.base_quant_embeddings=false");
  return strprintf("model.lora_rank=%d, model.lora_alpha=%g, model.lora_targets=%s%s", rank, alpha, targets.c_str(),
                   quant.c_str());
}

bool LoraSettings::same(const LoraSettings& o) const {
  if (rank <= 0 || o.rank <= 0) return rank <= 0 && o.rank <= 0;
  return rank == o.rank && alpha == o.alpha && targets == o.targets && base_quant == o.base_quant &&
         (base_quant == BaseQuant::None || base_quant_embeddings == o.base_quant_embeddings);
}

LoraSettings stored_lora_settings(const std::string& path) {
  h5::QuietErrors quiet;
  h5::Handle f = format::open_checked(path);
  return format::read_lora(f.get());
}

}  // namespace meshtrain::checkpoint

namespace meshtrain::checkpoint::format {

h5::Handle open_checked(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MESHTRAIN_REQUIRE(fs::exists(path, ec), "checkpoint %s does not exist", path.c_str());
  MESHTRAIN_REQUIRE(fs::is_regular_file(path, ec), "checkpoint %s is not a regular file", path.c_str());
  h5::QuietErrors quiet;
  MESHTRAIN_REQUIRE(H5Fis_hdf5(path.c_str()) > 0,
                    "checkpoint %s is not an HDF5 file (%s; no HDF5 signature): a damaged or foreign file",
                    path.c_str(), size_text(path).c_str());
  h5::Handle f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
  MESHTRAIN_REQUIRE(f.valid(),
                    "checkpoint %s cannot be opened by HDF5: the file is truncated or damaged (%s); use an earlier "
                    "checkpoint",
                    path.c_str(), size_text(path).c_str());
  return f;
}

void validate(const std::string& path, const std::vector<model::ParamSpec>& specs, const Requirements& req) {
  h5::QuietErrors quiet;
  h5::Handle f = open_checked(path);
  const auto name = h5::read_string_attr(f.get(), "format");
  const auto version = h5::read_int_attr(f.get(), "format_version");
  MESHTRAIN_REQUIRE(name && *name == kFormatName && version,
                    "%s is an HDF5 file but not a meshtrain checkpoint (no 'format' = '%s' and 'format_version' "
                    "attributes)",
                    path.c_str(), kFormatName);
  MESHTRAIN_REQUIRE(*version >= 1 && *version <= kFormatVersion,
                    "checkpoint %s has format version %lld; this meshtrain reads versions 1 to %d (a newer meshtrain "
                    "wrote it: upgrade meshtrain)",
                    path.c_str(), static_cast<long long>(*version), kFormatVersion);
  if (req.same_model) {
    const model::ModelDims in_file = read_model_dims(f.get(), path);
    std::vector<std::string> diff = model_differences(in_file, *req.same_model);
    const LoraSettings stored = read_lora(f.get()), run = lora_settings(*req.same_model);
    if (stored.recorded && !stored.same(run))
      diff.push_back(strprintf("LoRA: %s in the checkpoint, %s in this run", stored.str().c_str(), run.str().c_str()));
    MESHTRAIN_REQUIRE(diff.empty(),
                      "checkpoint %s was written for a different model (%s); run with the checkpoint's model "
                      "settings, or start afresh: checkpoint.resume=none with another output.dir (or with "
                      "checkpoint.overwrite=true, which deletes these checkpoints)",
                      path.c_str(), join(diff, "; ").c_str());
  }
  if (req.lora_of && req.lora_optional) {
    // Initial weights: a base model (no adapters) suits any LoRA setting; adapters in the
    // file are only taken as they are, never dropped or partly loaded.
    const LoraSettings stored = read_lora(f.get()), run = lora_settings(*req.lora_of);
    MESHTRAIN_REQUIRE(!stored.recorded || stored.rank <= 0 || stored.same(run),
                      "checkpoint.init_from=%s holds LoRA adapters (%s) that this run (%s) would %s; to continue "
                      "training them give the same model.lora_* settings (adapters are not merged into the base "
                      "weights on import)",
                      path.c_str(), stored.str().c_str(), run.str().c_str(),
                      run.rank <= 0 ? "drop" : "not load as trained");
  }
  if (!specs.empty()) {
    // Every tensor of the file must be a parameter of this model: anything else (adapters
    // of another LoRA setting, a checkpoint written before the LoRA settings were
    // recorded) would be ignored silently.
    std::set<std::string> wanted;
    for (const model::ParamSpec& p : specs) wanted.insert(p.name);
    std::vector<std::string> extra;
    for (const std::string& n : dataset_names(f.get(), kModelGroup))
      if (!wanted.count(n)) extra.push_back(n);
    if (!extra.empty()) {
      const bool lora = std::any_of(extra.begin(), extra.end(),
                                    [](const std::string& n) { return n.find(".lora_") != std::string::npos; });
      const std::size_t total = extra.size();
      if (extra.size() > 3) {
        extra.resize(3);
        extra.push_back(strprintf("and %zu more", total - 3));
      }
      throw UserError(strprintf("checkpoint %s holds tensors that are not parameters of this model (%s)%s", path.c_str(),
                                join(extra, ", ").c_str(),
                                lora ? ": LoRA adapters; give the model.lora_rank, model.lora_alpha and "
                                       "model.lora_targets of the run that wrote it"
                                     : "; check the model settings"));
    }
  }
  std::vector<const char*> groups = {kModelGroup};
  if (req.optimizer) {
    groups.push_back(kExpAvgGroup);
    groups.push_back(kExpAvgSqGroup);
  }
  for (const char* g : groups) {
    for (const model::ParamSpec& p : specs) {
      const std::string ds = dataset_path(g, p.name);
      if (p.is_lora && req.lora_optional && !h5::link_exists(f.get(), ds)) continue;
      MESHTRAIN_REQUIRE(h5::link_exists(f.get(), ds), "checkpoint %s lacks the dataset %s", path.c_str(), ds.c_str());
      h5::Handle d = h5::dataset(H5Dopen2(f.get(), ds.c_str(), H5P_DEFAULT));
      MESHTRAIN_REQUIRE(d.valid(), "checkpoint %s: %s is not a dataset", path.c_str(), ds.c_str());
      h5::Handle t = h5::type(H5Dget_type(d.get()));
      MESHTRAIN_REQUIRE(t.valid() && H5Tget_class(t.get()) == H5T_FLOAT && H5Tget_size(t.get()) == 4,
                        "checkpoint %s: dataset %s has dtype %s, expected float32", path.c_str(), ds.c_str(),
                        t.valid() ? describe_type(t.get()).c_str() : "unknown");
      h5::Handle sp = h5::space(H5Dget_space(d.get()));
      const int nd = sp.valid() ? H5Sget_simple_extent_ndims(sp.get()) : -1;
      std::vector<std::int64_t> shape;
      if (nd > 0) {
        std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
        H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
        shape.assign(dims.begin(), dims.end());
      }
      MESHTRAIN_REQUIRE(shape == p.shape, "checkpoint %s: dataset %s has shape %s, expected %s", path.c_str(),
                        ds.c_str(), shape_string(shape).c_str(), shape_string(p.shape).c_str());
    }
  }
}

}  // namespace meshtrain::checkpoint::format
