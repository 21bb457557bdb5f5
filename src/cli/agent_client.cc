#include "cli/agent_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "rayaccel/v1/agent.grpc.pb.h"
#include "rpc/listen_address.h"
#include "rpc/server.h"
#include "rpc/snapshot_proto.h"

namespace rayaccel::cli {

absl::StatusOr<std::shared_ptr<const NodeSnapshot>> FetchSnapshot(
    const AgentClientOptions& options) {
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
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = rpc::ReadTokenFile(options.token_file);
    if (!token.ok()) return token.status();
    context.AddMetadata("authorization", "Bearer " + *token);
  }
  auto stub = v1::AcceleratorRegistry::NewStub(grpc::CreateChannel(address->grpc_uri, credentials));
  v1::NodeSnapshot reply;
  grpc::Status st = stub->GetSnapshot(&context, {}, &reply);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("agent at ", options.address, ": ", st.error_message()));
  }
  absl::StatusOr<NodeSnapshot> snapshot = rpc::FromProto(reply);
  if (!snapshot.ok()) return snapshot.status();
  return std::make_shared<const NodeSnapshot>(*std::move(snapshot));
}

}  // namespace rayaccel::cli
