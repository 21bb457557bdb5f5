// A snapshot from the wire, as an --agent client and the raylet sink take it from a peer that
// may be hostile: parsed, converted, and checked as the sink checks it; and the same bytes as a
// telemetry sample the sink keeps for that node (parsed, checked, summed).
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
  const std::string node(56, 'a');
  (void)state.Apply(node, "s1", proto);
  rayaccel::v1::Telemetry telemetry;
  if (telemetry.ParseFromArray(data, static_cast<int>(size))) {
    (void)state.ApplyTelemetry(node, "s1", telemetry);
    (void)state.LoadOf(node);
  }
  return 0;
}
