// decode_auto.cpp: the compiled-in calibration table and choose_decode() (decode_auto.h).
#include "gpu/attention/decode_auto.h"

#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "gpu/attention/decode.h"
#include "gpu/attention/decode_impl.h"
#include "gpu/core/device_info.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu {

const std::vector<DecodeAutoRow>& decode_auto_table() {
  static const std::vector<DecodeAutoRow> rows = {
#include "gpu/attention/decode_auto_table.inc"
  };
  return rows;
}

namespace {
// The name of device `index` (cached: cudaGetDeviceProperties is slow, and the executor asks
// once per batch size).
std::string device_name(int index) {
  static std::mutex mu;
  static std::map<int, std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = names.find(index);
  if (it != names.end()) return it->second;
  std::string name;
  for (const DeviceInfo& d : list_devices())
    if (d.index == index) name = d.name;
  names[index] = name;
  return name;
}
}  // namespace

DecodeChoice choose_decode(const DecodeArgs& a) {
  const LaunchLimits lim = current_launch_limits();
  const std::string device = device_name(lim.device);
  DecodeAutoQuery q;
  q.device = device;
  q.kv_format = to_string(a.kv.geom.format);
  q.layout = to_string(a.kv.geom.layout);
  q.head_dim = a.kv.geom.head_dim;
  q.gqa_group = a.kv.geom.num_kv_heads > 0 ? a.num_qo_heads / a.kv.geom.num_kv_heads : 0;
  q.block_size = a.kv.geom.block_size;
  q.batch = a.num_seqs;
  q.context = detail::seq_len_bound64(a);

  DecodeChoice ch;
  std::ostringstream why;
  // Rows of versions that are registered and whose scope holds this geometry (rule 2a).
  auto in_scope = [&](const DecodeAutoRow& r) {
    for (const auto& v : decode_versions())
      if (v.name == r.version) return decode_version_in_scope(v.id, a.kv.geom);
    return false;
  };
  if (const DecodeAutoRow* r = nearest_auto_row(decode_auto_table(), q, in_scope)) {
    for (const auto& v : decode_versions()) {
      if (v.name != r->version) continue;
      DecodeTuning tu;
      tu.num_splits = auto_row_splits(*r, q);
      const std::string reason = decode_unsupported_reason(a, v.id, tu);
      if (!reason.empty()) {
        why << "the nearest measured shape's " << v.name << " declines (" << reason << "); ";
        break;
      }
      ch.version = v.id;
      ch.tuning = tu;
      why << "calibrated (" << r->device << "): nearest measured shape " << r->kv_format << " "
          << r->layout << " d" << r->head_dim << " g" << r->gqa_group << " b" << r->block_size
          << " " << r->batch << " x " << r->context << ": " << r->version << " splits "
          << r->num_splits << " (" << r->median_us << " us)";
      ch.basis = why.str();
      return ch;
    }
  } else {
    why << "no calibration for " << (device.empty() ? "this device" : device) << " / "
        << q.kv_format << " / " << q.layout << " of a version in scope; ";
  }
  // Default rule: v5 (every format at its own measured design point), then v4, then the
  // newest version that supports the shape. Not simply the newest: a new version is tuned
  // for the shapes it was measured on (v6 and v7 are slower than v4/v5 on most of them).
  const auto& vs = decode_versions();
  std::vector<int> order;
  for (const char* name : {"v5_mma_decode_2stage", "v4_mma_decode"})
    for (const auto& v : vs)
      if (v.name == name) order.push_back(v.id);
  for (auto it = vs.rbegin(); it != vs.rend(); ++it) order.push_back(it->id);
  for (int id : order) {
    if (!decode_unsupported_reason(a, id).empty()) continue;
    ch.version = id;
    why << "default rule: " << decode_version(id).name
        << " (v5, else v4, else the newest version that supports the shape)";
    ch.basis = why.str();
    return ch;
  }
  KVLAB_UNSUPPORTED_IF(
      true, "version auto: no decode version supports these arguments (" << why.str() << ")");
  return ch;
}

}  // namespace kvlab::gpu
