// What a raylet with its own gRPC does to learn a node's accelerators from the rayaccel agent:
// serve rayaccel.v1.RayletAcceleratorSink from code it generated from rayaccel's .proto files,
// and decide what to apply with rayaccel's C host API (rayaccel/host.h), so that it accepts
// exactly what rayaccel's own sink accepts. It is one node's sink, as a raylet is.
//   proto-sink-example ADDRESS NODE_ID
// Prints each applied publication; runs until killed.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rayaccel/host.h"
#include "rayaccel/v1/sink.grpc.pb.h"

namespace {

namespace v1 = rayaccel::v1;

class Sink final : public v1::RayletAcceleratorSink::Service {
 public:
  Sink(std::string node_id, rayaccel_publication_order* order)
      : node_id_(std::move(node_id)), order_(order) {}

  grpc::Status Publish(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::PublishAck, v1::PublishRequest>* stream) override {
    v1::PublishRequest request;
    if (!stream->Read(&request)) return grpc::Status::OK;
    if (!request.has_hello()) return Refuse("the first message must be hello");
    const v1::Hello hello = request.hello();
    if (!hello.node_id().empty() && hello.node_id() != node_id_) {
      return Refuse("the agent says it is node " + hello.node_id() + "; this sink is node " +
                    node_id_);
    }
    if (hello.node_id().empty()) {  // the agent learns which node it is
      v1::PublishAck named;
      named.set_node_id(node_id_);
      if (!stream->Write(named)) return grpc::Status::OK;
    }
    while (stream->Read(&request)) {
      if (!request.has_snapshot()) return Refuse("after hello, only snapshots");
      const v1::NodeSnapshot& s = request.snapshot();
      // The publication as host.h reads it: views into the message, valid for the call.
      std::vector<const char*> names, keys, values;
      std::vector<double> quantities;
      for (const auto& [name, quantity] : s.resources_total()) {
        names.push_back(name.c_str());
        quantities.push_back(quantity);
      }
      for (const auto& [key, value] : s.labels()) {
        keys.push_back(key.c_str());
        values.push_back(value.c_str());
      }
      rayaccel_publication p = {};
      p.struct_size = sizeof(p);
      p.node_id = node_id_.c_str();
      p.session = hello.agent_session().c_str();
      p.generation = s.generation();
      p.resource_names = names.data();
      p.resource_quantities = quantities.data();
      p.resource_count = names.size();
      p.label_keys = keys.data();
      p.label_values = values.data();
      p.label_count = keys.size();
      char message[512] = "";
      rayaccel_error error = {sizeof(error), message, sizeof(message)};
      if (rayaccel_publication_check(&p, &error) != RAYACCEL_STATUS_OK) {
        return Refuse("snapshot " + std::to_string(s.generation()) + ": " + error.message);
      }
      int apply = 0;
      uint64_t current = 0;
      if (rayaccel_publication_order_admit(order_, p.node_id, p.session, p.generation, &apply,
                                           &current, &error) != RAYACCEL_STATUS_OK) {
        return Refuse(error.message);
      }
      if (apply) Print(s);
      v1::PublishAck ack;
      ack.set_applied_generation(current);
      ack.set_stale(apply == 0);
      if (!stream->Write(ack)) break;
    }
    return grpc::Status::OK;
  }

 private:
  static grpc::Status Refuse(const std::string& why) {
    std::fprintf(stderr, "refused: %s\n", why.c_str());
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
  }

  void Print(const v1::NodeSnapshot& s) {
    // Sorted, as Ray's resource maps print: the generated map's order is unspecified.
    std::map<std::string, double> resources(s.resources_total().begin(), s.resources_total().end());
    std::printf("node %s generation %llu:", node_id_.c_str(),
                static_cast<unsigned long long>(s.generation()));
    for (const auto& [name, quantity] : resources) std::printf(" %s=%g", name.c_str(), quantity);
    std::printf(" (%d labels, %d devices)\n", s.labels_size(), s.devices_size());
    std::fflush(stdout);
  }

  const std::string node_id_;
  rayaccel_publication_order* const order_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ADDRESS NODE_ID\n", argv[0]);
    return 2;
  }
  rayaccel_publication_order* order = nullptr;
  char message[512] = "";
  rayaccel_error error = {sizeof(error), message, sizeof(message)};
  if (rayaccel_publication_order_create(&order, &error) != RAYACCEL_STATUS_OK) {
    std::fprintf(stderr, "%s\n", error.message);
    return 1;
  }
  Sink sink(argv[2], order);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(argv[1], grpc::InsecureServerCredentials());
  builder.RegisterService(&sink);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  std::printf("listening on %s\n", argv[1]);
  std::fflush(stdout);
  server->Wait();
  rayaccel_publication_order_destroy(order);
  return 0;
}
