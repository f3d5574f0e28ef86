// Writes what torch_reference.py needs to check meshtrain against PyTorch:
//   manifest.json            dims, batch, optimizer and schedule settings, tensor list
//   params/<name>.f32        initial weights (logical HF tensors, little-endian fp32)
//   grads/<name>.f32         gradients of step 1
//   tokens.i32, targets.i32  (steps, global_batch, seq_len) batches
//   logits.f32               (global_batch*seq_len, vocab) logits of step 1 (before the update)
//   curve.json               loss and grad norm of each of the steps
// Usage: reference_dump CONFIG.ini OUT_DIR [--section.key=value ...]   (1 rank)
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "app/run_spec_resolve.hpp"
#include "comm/watchdog.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "formats/json.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "model/init.hpp"
#include "parallel/micro_step.hpp"
#include "runtime/runtime.hpp"
#include "train/step.hpp"

using namespace meshtrain;

namespace {

/// Logical HF tensors from a unit-state array (1 rank: the state covers every element).
std::map<std::string, std::vector<float>> logical_tensors(parallel::FsdpEngine<float>& eng, bool grads) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& p : eng.specs()) out[p.name].assign(static_cast<std::size_t>(p.numel()), 0.0f);
  for (int u = 0; u < eng.num_units(); ++u) {
    const parallel::UnitState& st = eng.state(u);
    std::vector<float> host(st.numel);
    Kokkos::deep_copy(UView<float, HostMem>(host.data(), host.size()), grads ? st.grad.view() : st.master.view());
    model::for_each_global_run(eng.specs(), eng.layouts()[u], 1, 0, st.begin, st.begin + st.numel,
                               [&](const model::ParamSlot& slot, std::int64_t pos, std::int64_t row, std::int64_t col,
                                   std::int64_t n) {
                                 const auto& p = eng.specs()[slot.spec];
                                 std::copy(host.begin() + pos, host.begin() + pos + n,
                                           out[p.name].begin() + row * p.cols() + col);
                               });
  }
  return out;
}

template <class V>
void write_raw(const std::string& path, const V& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(v[0])));
}

}  // namespace

int main(int argc, char** argv) {
  Runtime rt(argc, argv, MPI_COMM_WORLD);
  set_abort_context(&abort_all_ranks, rt.topology().world_rank);
  if (argc < 3 || rt.topology().world_size != 1) {
    std::fprintf(stderr, "usage: reference_dump CONFIG.ini OUT_DIR [--k=v ...]  (one rank)\n");
    return 2;
  }
  const std::string out = argv[2];
  std::vector<std::string> args = {argv[1], "--parallel.strategy=no_shard", "--train.peak_tflops=1"};
  for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
  try {
    const Config cfg = parse_config("train", args).config;
    const plan::RunSetup setup = app::resolve_run(cfg, rt.topology());
    const TrainConfig& tc = cfg.train;
    train::Session<float> session(rt, setup);
    auto& eng = session.engine();
    eng.init_parameters(tc.seed);

    namespace fs = std::filesystem;
    fs::create_directories(out + "/params");
    fs::create_directories(out + "/grads");
    for (const auto& [name, v] : logical_tensors(eng, false)) write_raw(out + "/params/" + name + ".f32", v);
    formats::Json list = formats::Json::array();
    for (const auto& p : eng.specs())
      list.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"weight_decay", p.is_embedding ? tc.decay_embeddings : p.weight_decay}});

    const data::Dataset ds = data::Dataset::load(setup.spec.data, setup.spec.dims.valid_vocab, tc.seed);
    const data::Sampler sampler(ds.train, tc.seq_len, tc.seed);
    const int G = setup.batch.global_batch, T = tc.seq_len;
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(tc.steps) * G * T), targets(tokens.size());
    for (int s = 0; s < tc.steps; ++s)
      sampler.fill(static_cast<std::uint64_t>(s) * G, G, tokens.data() + static_cast<std::size_t>(s) * G * T,
                   targets.data() + static_cast<std::size_t>(s) * G * T);
    write_raw(out + "/tokens.i32", tokens);
    write_raw(out + "/targets.i32", targets);

    // Logits of the first batch with the initial weights.
    {
      Buffer<std::int32_t> dev(static_cast<std::size_t>(G) * T, MemCategory::Workspace);
      Kokkos::deep_copy(dev.view(), UView<std::int32_t, HostMem>(tokens.data(), dev.size()));
      write_raw(out + "/logits.f32", parallel::forward_logits(eng, session.model(), session.context(), dev.data(),
                                                              model::BatchShape{G, T}, false));
    }

    const train::StepSettings st = train::step_settings(setup);
    int updates = 0;
    formats::Json curve = formats::Json::array();
    for (int s = 0; s < tc.steps; ++s) {
      const train::BatchFiller fill = [&](int micro, std::int32_t* in, std::int32_t* tgt) {
        const std::size_t off = (static_cast<std::size_t>(s) * G + static_cast<std::size_t>(micro) * tc.micro_batch) * T;
        std::copy(tokens.begin() + off, tokens.begin() + off + tc.micro_batch * T, in);
        std::copy(targets.begin() + off, targets.begin() + off + tc.micro_batch * T, tgt);
      };
      // AdamW leaves the reduced gradients in place, so step 1's gradients are read after it.
      const train::StepResult r = train::train_step(session, st, s, updates, fill);
      if (s == 0)
        for (const auto& [name, v] : logical_tensors(eng, true)) write_raw(out + "/grads/" + name + ".f32", v);
      curve.push_back({{"step", s + 1}, {"loss", r.loss}, {"grad_norm", r.grad_norm}, {"lr", r.lr}});
    }
    std::ofstream(out + "/curve.json") << formats::json_text(curve) << "\n";

    formats::Json m;
    m["family"] = choice_name(cfg.model.family);
    m["vocab"] = setup.spec.dims.vocab;
    m["valid_vocab"] = setup.spec.dims.valid_vocab;
    m["d_model"] = setup.spec.dims.d_model;
    m["n_layers"] = setup.spec.dims.n_layers;
    m["n_heads"] = setup.spec.dims.n_heads;
    m["n_kv_heads"] = setup.spec.dims.n_kv_heads;
    m["ffn_dim"] = setup.spec.dims.ffn_dim;
    m["tied"] = setup.spec.dims.tied;
    m["norm_eps"] = setup.spec.dims.norm_eps;
    m["rope_theta"] = setup.spec.dims.rope_theta;
    m["steps"] = tc.steps;
    m["global_batch"] = G;
    m["seq_len"] = T;
    m["beta1"] = tc.beta1;
    m["beta2"] = tc.beta2;
    m["adam_eps"] = tc.adam_eps;
    m["weight_decay"] = tc.weight_decay;
    m["grad_clip"] = tc.grad_clip;
    m["lr"] = tc.lr;
    m["min_lr"] = tc.min_lr;
    m["warmup_steps"] = tc.warmup_steps;
    m["lr_schedule"] = choice_name(tc.lr_schedule);
    m["tensors"] = list;
    std::ofstream(out + "/manifest.json") << formats::json_text(m) << "\n";
  } catch (const UserError& e) {
    std::fprintf(stderr, "reference_dump: %s\n", e.what());
    return 2;
  }
  return 0;
}
