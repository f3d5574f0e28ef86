// Safetensors export and import (checkpoint.init_from): what `convert` writes loads back
// onto any mesh bit for bit (fp32), sharded or not; Hugging Face spellings (GPT-2 without
// "transformer.", mask buffers, a tied lm_head) are accepted; a missing parameter, a wrong
// shape, an unexpected tensor or a tied head that differs is a UserError.
#include <gtest/gtest.h>

#include <fstream>

#include "ckpt_test_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "formats/safetensors.hpp"
#include "checkpoint/export.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;
using parallel::Strategy;

MeshShape mesh_shape_of(int n) { return n == 4 ? MeshShape{1, 2, 2} : n == 2 ? MeshShape{1, 1, 2} : MeshShape{1, 1, 1}; }
MeshShape other_mesh_shape_of(int n) { return n == 4 ? MeshShape{1, 4, 1} : n == 2 ? MeshShape{1, 2, 1} : MeshShape{1, 1, 1}; }

/// Known masters with the vocab padding rows (>= valid_vocab) of embedding/head zeroed:
/// what an import of a file without padding rows must produce.
std::vector<std::vector<float>> expected_masters(const parallel::FsdpEngine<float>& eng, const model::ModelDims& d,
                                                 float (*round)(float) = nullptr) {
  std::vector<std::vector<float>> out;
  for (int u = 0; u < eng.num_units(); ++u) {
    const parallel::UnitState& st = eng.state(u);
    std::vector<float> host(static_cast<std::size_t>(st.numel), 0.0f);
    model::for_each_global_run(eng.specs(), eng.layouts()[u], eng.tp_size(), eng.tp_rank(), st.begin,
                               st.begin + st.numel,
                               [&](const model::ParamSlot& slot, std::int64_t off, std::int64_t row, std::int64_t col,
                                   std::int64_t n) {
                                 const model::ParamSpec& p = eng.specs()[slot.spec];
                                 const bool vocab_rows = p.split_dim == 0 && p.shape.size() == 2 &&
                                                         p.shape[0] == d.vocab &&
                                                         (p.is_embedding || p.role == "lm_head.weight");
                                 for (std::int64_t j = 0; j < n; ++j) {
                                   const float v = vocab_rows && row >= d.valid_vocab
                                                       ? 0.0f
                                                       : known_value(p.name, 0, row, col + j, p.cols());
                                   host[off + j] = round ? round(v) : v;
                                 }
                               });
    out.push_back(std::move(host));
  }
  return out;
}

float to_bf16(float v) { return static_cast<float>(bf16(v)); }

/// Saves the known state, exports it on rank 0 with `opt` into `out`, then loads it with
/// load_weights on another mesh. Returns that job.
std::unique_ptr<Job> export_and_import(const Config& cfg, const std::string& name, const checkpoint::ExportOptions& opt,
                                       checkpoint::ExportSummary* summary = nullptr) {
  const MpiComm& w = world();
  const std::string dir = fresh_dir(w, name);
  std::string h5;
  {
    auto src = make_job(w, cfg, mesh_shape_of(w.size()), Strategy::FullShard);
    fill_known(*src->engine);
    checkpoint::TrainState st;
    st.step = 12;
    h5 = checkpoint::save(*src->engine, *src->mesh, train::checkpoint_meta(src->setup), st, dir + "/ckpt").path;
  }
  agree_on_errors(w, [&] {
    if (w.rank() == 0) {
      const auto s = checkpoint::export_safetensors(h5, dir + "/hf", opt);
      if (summary) *summary = s;
    }
  });
  auto dst = make_job(w, cfg, other_mesh_shape_of(w.size()), Strategy::FullShard);
  fill_known(*dst->engine, 5);  // moments must end up zero, masters replaced
  checkpoint::load_weights(*dst->engine, *dst->mesh, dst->setup.spec.dims, dir + "/hf", 1234);
  return dst;
}

std::vector<std::vector<float>> zeros_like(const parallel::FsdpEngine<float>& eng) {
  std::vector<std::vector<float>> z;
  for (int u = 0; u < eng.num_units(); ++u) z.emplace_back(eng.state(u).numel, 0.0f);
  return z;
}

TEST(Import, ExportedModelLoadsOnAnotherMeshExactly) {
  for (const std::string family : {"gpt2", "llama"}) {
    SCOPED_TRACE(family);
    Config cfg = tiny_config(family);
    cfg.model.vocab_size = 260;  // padded to 264: the export drops 4 rows, the import zero-fills them
    cfg.model.vocab_pad_multiple = 8;
    checkpoint::ExportSummary s;
    auto job = export_and_import(cfg, "export_" + family, {}, &s);
    EXPECT_EQ(count_mismatches(*job->engine, 0, expected_masters(*job->engine, job->setup.spec.dims)), 0);
    EXPECT_EQ(count_mismatches(*job->engine, 1, zeros_like(*job->engine)), 0);
    EXPECT_EQ(count_mismatches(*job->engine, 2, zeros_like(*job->engine)), 0);
    if (world().rank() == 0) {
      EXPECT_EQ(s.files, (std::vector<std::string>{"model.safetensors", "config.json"}));
      EXPECT_EQ(s.step, 12);
      formats::SafetensorsFile f("ckpt_test_np" + std::to_string(world().size()) + "/export_" + family +
                                    "/hf/model.safetensors");
      const auto* emb = f.find(family == "gpt2" ? "transformer.wte.weight" : "model.embed_tokens.weight");
      ASSERT_NE(emb, nullptr);
      EXPECT_EQ(emb->shape, (std::vector<std::int64_t>{260, 64}));
      EXPECT_EQ(f.metadata().at("format"), "pt");
    }
  }
}

TEST(Import, ShardedExportLoadsThroughItsIndex) {
  checkpoint::ExportOptions opt;
  opt.max_shard_bytes = 40000;  // tiny llama: ~0.3 MB of tensors -> several shards
  checkpoint::ExportSummary s;
  auto job = export_and_import(tiny_config("llama"), "export_sharded", opt, &s);
  EXPECT_EQ(count_mismatches(*job->engine, 0, expected_masters(*job->engine, job->setup.spec.dims)), 0);
  if (world().rank() == 0) {
    ASSERT_GT(s.files.size(), 3u);
    EXPECT_EQ(s.files.front(), strprintf("model-00001-of-%05zu.safetensors", s.files.size() - 2));
    EXPECT_EQ(s.files.back(), "model.safetensors.index.json");
  }
}

TEST(Import, Bf16ExportRoundsToBf16) {
  checkpoint::ExportOptions opt;
  opt.dtype = "bf16";
  auto job = export_and_import(tiny_config("gpt2"), "export_bf16", opt);
  EXPECT_EQ(count_mismatches(*job->engine, 0, expected_masters(*job->engine, job->setup.spec.dims, to_bf16)), 0);
}

/// Writes a safetensors file of the known masters under the given names (from the
/// registry name to the file's name, "" = leave out), plus extra F32 tensors.
std::string write_hf_file(const std::string& path, const model::ModelDims& d,
                          const std::function<std::string(const std::string&)>& rename,
                          const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& extra,
                          std::int64_t shape_delta_for = -1) {
  const auto specs = model::build_param_specs(d, 1);
  std::vector<formats::SafetensorsEntry> entries;
  std::vector<std::vector<float>> data;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const model::ParamSpec& p = specs[i];
    const std::string name = rename(p.name);
    if (name.empty()) continue;
    std::vector<std::int64_t> shape = p.shape;
    if (static_cast<std::int64_t>(i) == shape_delta_for) shape[0] += 1;
    std::vector<float> v;
    for (std::int64_t r = 0; r < shape[0]; ++r)
      for (std::int64_t c = 0; c < p.cols(); ++c) v.push_back(known_value(p.name, 0, r, c, p.cols()));
    entries.push_back({name, "F32", shape});
    data.push_back(std::move(v));
  }
  for (const auto& [name, shape] : extra) {
    entries.push_back({name, "F32", shape});
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    data.emplace_back(static_cast<std::size_t>(n), 0.5f);
  }
  if (world().rank() == 0)
    formats::write_safetensors(path, entries, {}, [&](std::size_t i, std::vector<unsigned char>& out) {
      const auto* b = reinterpret_cast<const unsigned char*>(data[i].data());
      out.assign(b, b + data[i].size() * 4);
    });
  MPI_Barrier(world().get());
  return path;
}

std::string load_error(Job& job, const std::string& path) {
  try {
    checkpoint::load_weights(*job.engine, *job.mesh, job.setup.spec.dims, path, 1234);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string strip_transformer(const std::string& n) {
  return n.compare(0, 12, "transformer.") == 0 ? n.substr(12) : n;
}

TEST(Import, HuggingFaceGpt2SpellingsAreAccepted) {
  const std::string dir = fresh_dir(world(), "hf_gpt2");
  auto job = make_job(world(), tiny_config("gpt2"), mesh_shape_of(world().size()), Strategy::FullShard);
  const model::ModelDims& d = job->setup.spec.dims;
  // The hub's gpt2: no "transformer." prefix, causal-mask buffers, and lm_head = wte.
  const std::string p = write_hf_file(dir + "/hub.safetensors", d, strip_transformer,
                                      {{"h.0.attn.bias", {1, 1, 64, 64}}, {"h.1.attn.masked_bias", {}}});
  checkpoint::load_weights(*job->engine, *job->mesh, d, p, 1234);
  EXPECT_EQ(count_mismatches(*job->engine, 0, expected_masters(*job->engine, d)), 0);

  // A tied lm_head equal to the embedding is dropped silently; a different one is an error.
  const auto specs = model::build_param_specs(d, 1);
  std::vector<formats::SafetensorsEntry> entries;
  std::vector<std::vector<float>> data;
  for (const auto& s : specs) {
    std::vector<float> v;
    for (std::int64_t r = 0; r < s.rows(); ++r)
      for (std::int64_t c = 0; c < s.cols(); ++c) v.push_back(known_value(s.name, 0, r, c, s.cols()));
    entries.push_back({s.name, "F32", s.shape});
    data.push_back(v);
    if (s.name == "transformer.wte.weight") {
      entries.push_back({"lm_head.weight", "F32", s.shape});
      data.push_back(v);
    }
  }
  const auto write = [&](const std::string& path) {
    if (world().rank() == 0)
      formats::write_safetensors(path, entries, {}, [&](std::size_t i, std::vector<unsigned char>& out) {
        const auto* b = reinterpret_cast<const unsigned char*>(data[i].data());
        out.assign(b, b + data[i].size() * 4);
      });
    MPI_Barrier(world().get());
    return path;
  };
  EXPECT_EQ(load_error(*job, write(dir + "/tied_equal.safetensors")), "");
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i].name == "lm_head.weight") data[i][7] += 1.0f;
  const std::string m = load_error(*job, write(dir + "/tied_differs.safetensors"));
  EXPECT_NE(m.find("lm_head.weight differs from transformer.wte.weight"), std::string::npos) << m;
  // gpt2 always ties: the message must not suggest model.tie_embeddings=false, which the
  // gpt2 family rejects (issue 16), but say that the head cannot be loaded.
  EXPECT_EQ(m.find("tie_embeddings=false"), std::string::npos) << m;
  EXPECT_NE(m.find("gpt2 always ties"), std::string::npos) << m;
}

TEST(Import, MissingWrongShapeAndUnexpectedTensorsAreErrors) {
  const std::string dir = fresh_dir(world(), "hf_bad");
  auto job = make_job(world(), tiny_config("llama"), mesh_shape_of(world().size()), Strategy::FullShard);
  const model::ModelDims& d = job->setup.spec.dims;
  const auto same = [](const std::string& n) { return n; };

  std::string m = load_error(*job, write_hf_file(dir + "/missing.safetensors", d, [](const std::string& n) {
    return n == "model.layers.1.mlp.down_proj.weight" ? std::string() : n;
  }, {}));
  EXPECT_NE(m.find("lack the parameter model.layers.1.mlp.down_proj.weight"), std::string::npos) << m;

  m = load_error(*job, write_hf_file(dir + "/nohead.safetensors", d, [](const std::string& n) {
    return n == "lm_head.weight" ? std::string() : n;
  }, {}));
  EXPECT_NE(m.find("set model.tie_embeddings=true"), std::string::npos) << m;

  m = load_error(*job, write_hf_file(dir + "/shape.safetensors", d, same, {}, 1));
  EXPECT_NE(m.find("has shape (65), the model expects (64)"), std::string::npos) << m;

  m = load_error(*job, write_hf_file(dir + "/extra.safetensors", d, same, {{"model.layers.2.mlp.up_proj.weight", {4}}}));
  EXPECT_NE(m.find("not parameters of this llama model: model.layers.2.mlp.up_proj.weight"), std::string::npos) << m;

  m = load_error(*job, dir + "/no_such.safetensors");
  EXPECT_NE(m.find("no such file or directory"), std::string::npos) << m;

  if (world().rank() == 0) fs::create_directories(dir + "/empty_dir_with_file"), std::ofstream(dir + "/empty_dir_with_file/x") << 1;
  MPI_Barrier(world().get());
  m = load_error(*job, dir + "/empty_dir_with_file");
  EXPECT_NE(m.find("holds no model.safetensors, no model.safetensors.index.json and no complete checkpoint"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace meshtrain::test
