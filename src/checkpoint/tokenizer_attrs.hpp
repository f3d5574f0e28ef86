#pragma once
// The tokenizer record as attributes of /model (internal to the checkpoint module).
#include <hdf5.h>

#include "checkpoint/checkpoint.hpp"

namespace meshtrain::checkpoint {

/// Writes `ref` as the attributes tokenizer, tokenizer_kind, tokenizer_vocab_size and
/// tokenizer_hash of `group` (/model). Collective under MPI-IO.
void write_tokenizer_attrs(hid_t group, const TokenizerRef& ref);

/// The record in /model of an open file; not `recorded` when the attributes are absent.
TokenizerRef read_tokenizer_attrs(hid_t file);

}  // namespace meshtrain::checkpoint
