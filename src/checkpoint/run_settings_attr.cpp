// The run-settings record of a checkpoint (root attribute `run_settings`, written by save.cpp).
#include <filesystem>

#include "h5.hpp"
#include "meshtrain/checkpoint/checkpoint.hpp"
#include "meshtrain/comm/agree.hpp"
#include "meshtrain/comm/collectives.hpp"

namespace meshtrain::checkpoint {

StoredRunSettings stored_run_settings(const MpiComm& comm, const std::string& path) {
  StoredRunSettings out;
  if (comm.rank() == 0) {
    // Only a file HDF5 recognises is opened: a damaged one is left to load()'s validation,
    // which names the problem.
    h5::QuietErrors quiet;
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec) && H5Fis_hdf5(path.c_str()) > 0) {
      h5::Handle f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
      if (f.valid()) {
        out.readable = true;
        if (const auto text = h5::read_string_attr(f.get(), "run_settings")) {
          out.recorded = true;
          out.text = *text;
        }
        // A window length meshtrain can run (config.cpp bounds train.seq_len by 2^22).
        if (const auto t = h5::read_int_attr(f.get(), "seq_len"); t && *t >= 1 && *t <= (1 << 22))
          out.seq_len = static_cast<int>(*t);
      }
    }
  }
  out.readable = broadcast_value(comm, out.readable);
  out.recorded = broadcast_value(comm, out.recorded);
  out.text = broadcast_string(comm, out.text);
  out.seq_len = broadcast_value(comm, out.seq_len);
  return out;
}

}  // namespace meshtrain::checkpoint
