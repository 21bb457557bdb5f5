// The raylet end of the publishing channel: a gRPC service the raylet registers in its own
// server (or `rayaccel sink` runs standalone). It checks each update with SinkState's rules
// and hands what it applies to a small listener.
#ifndef RAYACCEL_RPC_RAYLET_SINK_H_
#define RAYACCEL_RPC_RAYLET_SINK_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "rayaccel/v1/sink.grpc.pb.h"
#include "rpc/server.h"
#include "rpc/sink_state.h"

namespace rayaccel::rpc {

class RayletSink final : public v1::RayletAcceleratorSink::Service {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // Called once per applied update, outside any sink lock, from the stream's thread.
    virtual void OnNodeResources(const std::string& node_id,
                                 const std::map<std::string, double>& resources_total,
                                 const std::map<std::string, std::string>& labels,
                                 const v1::NodeSnapshot& snapshot) = 0;
  };

  // `listener` may be null; it and `token` (required of every agent when set) must outlive
  // the service. `own_node_id`: the node this sink is (a raylet's NodeID); an agent that does
  // not know it yet (started before Ray) learns it in the answer to its hello, and one that
  // names another node is refused. Empty: a sink of many nodes, each agent names its own.
  explicit RayletSink(Listener* listener, const BearerToken* token = nullptr,
                      std::string own_node_id = "")
      : listener_(listener), token_(token), own_node_id_(std::move(own_node_id)) {}

  // Protocol (sink.proto): hello first, then snapshots, each answered with an ack. Anything
  // else ends the stream with INVALID_ARGUMENT; what was applied before stands.
  grpc::Status Publish(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::PublishAck, v1::PublishRequest>* stream) override;

  const SinkState& state() const { return state_; }

  // For the sink's metrics: agents' streams open now and ever accepted, and streams refused
  // (a bad token, hello or snapshot).
  uint64_t streams_open() const { return streams_open_.load(); }
  uint64_t streams_accepted() const { return streams_accepted_.load(); }
  uint64_t refusals() const { return refusals_.load(); }

 private:
  grpc::Status Refuse(const std::string& peer, const std::string& why);
  std::atomic<uint64_t> streams_open_{0}, streams_accepted_{0}, refusals_{0};
  Listener* listener_;
  const BearerToken* token_;
  const std::string own_node_id_;
  SinkState state_;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_RAYLET_SINK_H_
