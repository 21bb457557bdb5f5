#include "cli/agent_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "rayaccel/v1/agent.grpc.pb.h"
#include "rpc/listen_address.h"
#include "rpc/server.h"
#include "rpc/snapshot_proto.h"

namespace rayaccel::cli {

namespace {

// A call to the agent: its stub, and a context with the deadline and the bearer token.
struct Call {
  std::unique_ptr<v1::AcceleratorRegistry::Stub> stub;
  grpc::ClientContext context;
};

absl::Status Open(const AgentClientOptions& options, Call* call) {
  absl::StatusOr<rpc::ListenAddress> address = rpc::ParseListenAddress(options.address);
  if (!address.ok()) return address.status();
  if (absl::Status st =
          rpc::CheckPlainTcp(*address, !options.tls_ca_file.empty(), options.allow_insecure_tcp);
      !st.ok()) {
    return st;
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = rpc::ReadCredentialFile(options.tls_ca_file, "TLS CA");
    if (!ca.ok()) return ca.status();
    credentials = grpc::SslCredentials(grpc::SslCredentialsOptions{*ca, "", ""});
  }
  call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = rpc::ReadTokenFile(options.token_file);
    if (!token.ok()) return token.status();
    call->context.AddMetadata("authorization", "Bearer " + *token);
  }
  call->stub =
      v1::AcceleratorRegistry::NewStub(grpc::CreateChannel(address->grpc_uri, credentials));
  return absl::OkStatus();
}

absl::Status FromGrpc(const AgentClientOptions& options, const grpc::Status& st) {
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat("agent at ", options.address, ": ", st.error_message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const NodeSnapshot>> FetchSnapshot(
    const AgentClientOptions& options) {
  Call call;
  if (absl::Status st = Open(options, &call); !st.ok()) return st;
  v1::NodeSnapshot reply;
  if (grpc::Status st = call.stub->GetSnapshot(&call.context, {}, &reply); !st.ok()) {
    return FromGrpc(options, st);
  }
  absl::StatusOr<NodeSnapshot> snapshot = rpc::FromProto(reply);
  if (!snapshot.ok()) return snapshot.status();
  return std::make_shared<const NodeSnapshot>(*std::move(snapshot));
}

absl::StatusOr<std::map<std::string, std::string>> PrepareAllocationAt(
    const AgentClientOptions& options, const std::vector<std::string>& device_ids,
    uint64_t generation) {
  Call call;
  if (absl::Status st = Open(options, &call); !st.ok()) return st;
  v1::PrepareAllocationRequest request;
  request.set_generation(generation);
  for (const std::string& id : device_ids) request.add_device_ids(id);
  v1::PrepareAllocationResponse reply;
  if (grpc::Status st = call.stub->PrepareAllocation(&call.context, request, &reply); !st.ok()) {
    return FromGrpc(options, st);
  }
  return std::map<std::string, std::string>(reply.env().begin(), reply.env().end());
}

}  // namespace rayaccel::cli
