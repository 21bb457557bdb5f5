// A snapshot from the wire, as an --agent client and the raylet sink take it from a peer that
// may be hostile: parsed, converted, and checked as the sink checks it.
#include <cstddef>
#include <cstdint>

#include "rpc/sink_state.h"
#include "rpc/snapshot_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rayaccel::v1::NodeSnapshot proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)rayaccel::rpc::FromProto(proto);
  (void)rayaccel::rpc::CheckNodeResources(proto.resources_total());
  (void)rayaccel::rpc::CheckNodeLabels(proto.labels());
  rayaccel::rpc::SinkState state;
  (void)state.Apply(std::string(56, 'a'), "s1", proto);
  return 0;
}
