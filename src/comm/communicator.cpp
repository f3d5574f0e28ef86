#include "comm/communicator.hpp"

namespace meshtrain {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F64: return "fp64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

CommStats& comm_stats() {
  static CommStats stats;
  return stats;
}

DeviceCommTimes take_device_comm_times(std::uint64_t tag) {
  std::map<std::uint64_t, DeviceCommTimes>& device = comm_stats().device;
  DeviceCommTimes out;
  if (auto it = device.find(tag); it != device.end()) out = it->second;
  device.erase(device.begin(), device.upper_bound(tag));
  return out;
}

}  // namespace meshtrain
