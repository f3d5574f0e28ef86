// What a checkpoint save moved and where its time went, reduced over the ranks for the
// log line and `meshtrain bench io`. Each rank writes its own pieces (h5::piece_dxpl), so
// the data phase is bounded by the file system alone; the line says so rather than
// leaving the reader to guess whether the network was involved.
#include <algorithm>

#include "comm/collectives.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/check.hpp"
#include "core/format.hpp"

namespace meshtrain::checkpoint {

void reduce_write_stats(const MpiComm& comm, std::uint64_t my_bytes, double my_data_seconds, IoStats& stats) {
  stats.data_seconds = all_reduce_value(comm, my_data_seconds, ReduceOp::Max);
  stats.writer_ranks = all_reduce_value(comm, my_bytes > 0 ? 1 : 0, ReduceOp::Sum);
  // Per node: the bytes its ranks wrote; the leader of each node then counts for the world.
  const MpiComm node = comm.split_shared();
  const std::uint64_t node_bytes = all_reduce_value<std::uint64_t>(node, my_bytes, ReduceOp::Sum);
  stats.writer_nodes = all_reduce_value(comm, node.rank() == 0 && node_bytes > 0 ? 1 : 0, ReduceOp::Sum);
  stats.max_node_bytes = all_reduce_value<std::uint64_t>(comm, node_bytes, ReduceOp::Max);
}

std::string describe_save(const IoStats& s) {
  std::string line = strprintf("%s in %.2f s (%.2f GB/s)", format_bytes(static_cast<double>(s.bytes)).c_str(),
                               s.seconds, s.gbps());
  if (s.data_seconds <= 0) return line;
  const double node_gbps = static_cast<double>(s.max_node_bytes) / s.data_seconds / 1e9;
  line += strprintf("; data %.2f s: file system %.2f GB/s from %d rank(s) on %d node(s) (busiest node %.2f GB/s), "
                    "network 0 B (each rank writes its own pieces)",
                    s.data_seconds, s.data_gbps(), s.writer_ranks, s.writer_nodes, node_gbps);
  // Asynchronous: the data phase ran beside training, and the time from the start to the
  // commit includes the steps trained meanwhile; what training paid is the held part.
  if (s.async)
    return line + strprintf("; asynchronous: training held %.2f s; background thread %.2f s CPU, %.2f s in fdatasync, "
                            "%.0f%% of the bytes with O_DIRECT",
                            s.held_seconds, s.background_cpu_seconds, s.background_sync_seconds,
                            s.bytes > 0 ? 100.0 * static_cast<double>(s.direct_bytes) / static_cast<double>(s.bytes) : 0.0);
  return line + strprintf("; metadata and commit %.2f s", std::max(0.0, s.seconds - s.data_seconds));
}

}  // namespace meshtrain::checkpoint
