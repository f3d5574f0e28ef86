// What a checkpoint save moved and where its time went, reduced over the ranks for the
// log line and `meshtrain bench io`. Each rank writes its own pieces (h5::piece_dxpl), so
// the data phase is bounded by the file system alone; the line says so rather than
// leaving the reader to guess whether the network was involved.
#include <algorithm>

#include "meshtrain/checkpoint/checkpoint.hpp"
#include "meshtrain/core/check.hpp"
#include "meshtrain/core/format.hpp"

namespace meshtrain::checkpoint {

void reduce_write_stats(const MpiComm& comm, std::uint64_t my_bytes, double my_data_seconds, IoStats& stats) {
  MPI_CHECK(MPI_Allreduce(&my_data_seconds, &stats.data_seconds, 1, MPI_DOUBLE, MPI_MAX, comm.get()));
  const int writer = my_bytes > 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&writer, &stats.writer_ranks, 1, MPI_INT, MPI_SUM, comm.get()));
  // Per node: the bytes its ranks wrote; the leader of each node then counts for the world.
  const MpiComm node = comm.split_shared();
  std::uint64_t node_bytes = 0;
  MPI_CHECK(MPI_Allreduce(&my_bytes, &node_bytes, 1, MPI_UINT64_T, MPI_SUM, node.get()));
  const int node_writes = node.rank() == 0 && node_bytes > 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&node_writes, &stats.writer_nodes, 1, MPI_INT, MPI_SUM, comm.get()));
  MPI_CHECK(MPI_Allreduce(&node_bytes, &stats.max_node_bytes, 1, MPI_UINT64_T, MPI_MAX, comm.get()));
}

std::string describe_save(const IoStats& s) {
  std::string line = strprintf("%s in %.2f s (%.2f GB/s)", format_bytes(static_cast<double>(s.bytes)).c_str(),
                               s.seconds, s.gbps());
  if (s.data_seconds <= 0) return line;
  const double node_gbps = static_cast<double>(s.max_node_bytes) / s.data_seconds / 1e9;
  line += strprintf("; data %.2f s: file system %.2f GB/s from %d rank(s) on %d node(s) (busiest node %.2f GB/s), "
                    "network 0 B (each rank writes its own pieces); metadata and commit %.2f s",
                    s.data_seconds, s.data_gbps(), s.writer_ranks, s.writer_nodes, node_gbps,
                    std::max(0.0, s.seconds - s.data_seconds));
  return line;
}

}  // namespace meshtrain::checkpoint
