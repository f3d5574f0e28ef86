#pragma once
/// \brief DPO without LoRA adapters (train.objective = dpo, model.lora_rank = 0), or with LoRA
/// adapters continued from checkpoint.init_from (train/dpo.hpp, kDpoReferenceStored): the
/// reference model is the run's initial policy, which training overwrites, so its per-row
/// log-probabilities are computed once, in a pass before step 1, and stored beside the run
/// as `<output.dir>/reference_logps.json`; a resume reads them back instead of recomputing
/// them from weights it no longer has.
///
/// The file: {"format": "meshtrain-dpo-reference", "version": 1, "dataset": the dataset's
/// identity (the resume record's data.dir: size, rows and a sampled CRC of train.bin),
/// "train": [logp of train row r], "val": [... val row r], "crc32c": CRC-32C of the two
/// arrays' float64 bytes}. JSON numbers are written in the shortest form that reads back as
/// the same double, so a resume uses the very values the run started with.

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::train {

struct ReferenceLogps {
  std::string dataset;              ///< the dataset's identity when they were computed
  std::vector<double> train, val;   ///< sum of log p over each row's counted targets, per row
};

/// `<out_dir>/reference_logps.json`.
std::string reference_logps_path(const std::string& out_dir);

/// Writes the file atomically (replaced whole or kept).
void write_reference_logps(const std::string& path, const ReferenceLogps& r);

/// Reads and validates the file: UserError naming it when it is missing, not this format,
/// damaged (its CRC), not finite, or made for another dataset or row count than
/// `dataset` / `train_rows` / `val_rows`.
ReferenceLogps read_reference_logps(const std::string& path, const std::string& dataset, std::uint64_t train_rows,
                                    std::uint64_t val_rows);

}  // namespace meshtrain::train
