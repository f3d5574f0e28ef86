#pragma once
/// \brief The parameter registry: the single source of every parameter's Hugging Face
/// name, logical shape, tensor-parallel split, initialisation and FSDP unit — and the
/// mapping between a rank's TP-local elements and the logical tensor.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_dims.hpp"

namespace meshtrain::model {

enum class InitKind { Normal, Ones, Zeros, Uniform };

struct ParamSpec {
  std::string name;                 ///< HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::string role;                 ///< name inside its unit, e.g. "self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;  ///< logical (global) shape, 1-D or 2-D
  int split_dim = -1;               ///< -1: replicated over tp; else the dim sliced over tp
  int split_chunks = 1;             ///< the split dim is this many equal chunks, each sliced (fused q|k|v)
  bool grad_tp_sum = false;         ///< replicated, but each tp rank's gradient is partial: sum over tp
  InitKind init = InitKind::Normal;
  double init_std = 0.02;           ///< Normal: std; Uniform: bound (U(-bound, bound))
  bool weight_decay = true;
  bool is_embedding = false;
  bool fused_with_previous = false; ///< laid out right after the previous parameter (one GEMM for both)
  bool frozen = false;              ///< not trained (LoRA fine-tuning freezes the base model)
  bool is_lora = false;             ///< a LoRA adapter matrix (absent from base-model weight files)
  int unit = 0;                     ///< FSDP unit: 0 = outer (embeddings, final norm, head), 1+i = block i

  std::int64_t numel() const;
  std::int64_t rows() const { return shape[0]; }
  std::int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
};

/// Every parameter of the model, in flat-buffer order (units in order, params in a fixed
/// order inside each unit chosen so fused GEMMs see adjacent weights: q|k|v, gate|up).
/// `tp` decides how GQA key/value projections are held: split when n_kv_heads % tp == 0,
/// otherwise replicated on every tp rank with partial gradients summed over tp.
std::vector<ParamSpec> build_param_specs(const ModelDims& dims, int tp = 1);

/// Shape of the TP-local slice held by every rank of a tp group.
std::vector<std::int64_t> local_shape(const ParamSpec& p, int tp);
std::int64_t local_numel(const ParamSpec& p, int tp);

/// A rectangle of a 2-D tensor (1-D tensors use cols = 1): rows [row0, row0+nrows) x
/// cols [col0, col0+ncols).
struct Box {
  std::int64_t row0 = 0, col0 = 0, nrows = 0, ncols = 0;
  std::int64_t numel() const { return nrows * ncols; }
};

/// Splits the run [begin, end) of row-major TP-local elements of `p` into at most three
/// rectangles in local coordinates (partial first row, whole rows, partial last row).
std::vector<Box> local_run_boxes(const ParamSpec& p, int tp, std::int64_t begin, std::int64_t end);

/// Maps a local rectangle of tp rank `tp_rank` to rectangles of the logical tensor
/// (several when it crosses chunk boundaries of a fused split). Each output box comes with
/// the local box it corresponds to (same size).
struct BoxPair {
  Box local;
  Box global;
};
std::vector<BoxPair> local_to_global(const ParamSpec& p, int tp, int tp_rank, const Box& local);

/// True if the tp rank's copy of this parameter counts towards global sums (norms,
/// checkpoint writes): split parameters on every rank, replicated ones on tp rank 0 only.
inline bool counted_on_tp_rank(const ParamSpec& p, int tp_rank) { return p.split_dim >= 0 || tp_rank == 0; }

}  // namespace meshtrain::model
