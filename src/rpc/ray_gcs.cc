#include "rpc/ray_gcs.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/validate.h"
#include "ray/node_publication.h"
#include "ray/rpc/drain_node.grpc.pb.h"
#include "ray/rpc/node_info.grpc.pb.h"
#include "rpc/server.h"

namespace rayaccel::rpc {

namespace autoscaler = ::ray::rpc::autoscaler;

namespace {

std::shared_ptr<grpc::Channel> Channel(const GcsOptions& gcs) {
  if (gcs.tls.ca.empty())
    return grpc::CreateChannel(gcs.address, grpc::InsecureChannelCredentials());
  return grpc::CreateChannel(
      gcs.address, grpc::SslCredentials(grpc::SslCredentialsOptions{gcs.tls.ca, gcs.tls.private_key,
                                                                    gcs.tls.cert_chain}));
}

void Prepare(const GcsOptions& gcs, grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + gcs.timeout);
  if (!gcs.token.empty()) context->AddMetadata("authorization", "Bearer " + gcs.token);
}

absl::Status Answered(const GcsOptions& gcs, const char* call, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("Ray's GCS at ", gcs.address, " did not answer ", call, ": ",
                                   EscapeControl(status.error_message().substr(0, 512))));
}

// This host's addresses, as Ray writes a raylet's (numeric, no scope or prefix).
std::set<std::string> HostAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = a->ifa_addr->sa_family;
    const void* where =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr)
        : family == AF_INET6 ? static_cast<const void*>(
                                   &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr)
                             : nullptr;
    if (where != nullptr && inet_ntop(family, where, text, sizeof(text)) != nullptr) {
      out.insert(text);
    }
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

absl::StatusOr<std::string> GcsTokenFromEnvironment() {
  if (const char* token = std::getenv("RAY_AUTH_TOKEN"); token != nullptr && token[0] != '\0') {
    return std::string(token);
  }
  if (const char* path = std::getenv("RAY_AUTH_TOKEN_PATH"); path != nullptr && path[0] != '\0') {
    return ReadTokenFile(path);
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || home[0] == '\0') return std::string();
  const std::string path = absl::StrCat(home, "/.ray/auth_token");
  if (access(path.c_str(), F_OK) != 0) return std::string();
  return ReadTokenFile(path);
}

absl::StatusOr<GcsOptions::Tls> GcsTlsFromEnvironment() {
  const char* use = std::getenv("RAY_USE_TLS");
  if (use == nullptr ||
      (!absl::EqualsIgnoreCase(use, "1") && !absl::EqualsIgnoreCase(use, "true"))) {
    return GcsOptions::Tls{};
  }
  GcsOptions::Tls tls;
  for (const auto& [variable, field] :
       {std::pair<const char*, std::string*>{"RAY_TLS_CA_CERT", &tls.ca},
        {"RAY_TLS_SERVER_CERT", &tls.cert_chain},
        {"RAY_TLS_SERVER_KEY", &tls.private_key}}) {
    const char* path = std::getenv(variable);
    if (path == nullptr || path[0] == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat("RAY_USE_TLS=", use, " needs ", variable, " (as Ray's processes do)"));
    }
    absl::StatusOr<std::string> pem = ReadCredentialFile(path, variable);
    if (!pem.ok()) return pem.status();
    if (pem->empty()) {  // else an empty CA would read as no TLS at all
      return absl::InvalidArgumentError(absl::StrCat(variable, " ", path, " is empty"));
    }
    *field = *std::move(pem);
  }
  return tls;
}

absl::Status DrainNode(const GcsOptions& gcs, const std::string& node_id,
                       const std::string& reason_message) {
  if (absl::Status st = CheckNodeId(node_id); !st.ok()) return st;
  autoscaler::DrainNodeRequest request;
  request.set_node_id(absl::HexStringToBytes(node_id));
  request.set_reason(autoscaler::DRAIN_NODE_REASON_PREEMPTION);
  request.set_reason_message(reason_message);
  request.set_deadline_timestamp_ms(0);

  auto stub = autoscaler::AutoscalerStateService::NewStub(Channel(gcs));
  grpc::ClientContext context;
  Prepare(gcs, &context);
  autoscaler::DrainNodeReply reply;
  if (absl::Status st = Answered(gcs, "DrainNode", stub->DrainNode(&context, request, &reply));
      !st.ok()) {
    return st;
  }
  if (!reply.is_accepted()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Ray's GCS at ", gcs.address, " refused to drain node ", node_id, ": ",
                     EscapeControl(reply.rejection_reason_message().substr(0, 512))));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindNodeOnThisHost(const GcsOptions& gcs,
                                               const std::map<std::string, std::string>& labels) {
  ::ray::rpc::GetAllNodeInfoRequest request;
  request.set_state_filter(::ray::rpc::GcsNodeInfo::ALIVE);
  auto stub = ::ray::rpc::NodeInfoGcsService::NewStub(Channel(gcs));
  grpc::ClientContext context;
  Prepare(gcs, &context);
  ::ray::rpc::GetAllNodeInfoReply reply;
  if (absl::Status st =
          Answered(gcs, "GetAllNodeInfo", stub->GetAllNodeInfo(&context, request, &reply));
      !st.ok()) {
    return st;
  }
  const std::set<std::string> here = HostAddresses();
  std::vector<const ::ray::rpc::GcsNodeInfo*> on_host;
  for (const auto& node : reply.node_info_list()) {
    if (node.state() == ::ray::rpc::GcsNodeInfo::ALIVE && node.node_id().size() == 28 &&
        here.count(node.node_manager_address()) > 0) {
      on_host.push_back(&node);
    }
  }
  std::vector<const ::ray::rpc::GcsNodeInfo*> ours;
  for (const auto* node : on_host) {
    bool all = true;
    for (const auto& [key, value] : labels) {
      auto it = node->labels().find(key);
      all = all && it != node->labels().end() && it->second == value;
    }
    if (all) ours.push_back(node);
  }
  if (on_host.size() == 1 && ours.size() <= 1) ours = on_host;  // labels may be set otherwise
  if (ours.size() == 1) return absl::BytesToHexString(ours[0]->node_id());
  if (ours.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no live Ray node on this host (", absl::StrJoin(here, ", "), ") in Ray's GCS at ",
        gcs.address, on_host.empty() ? "" : " carries this node's labels"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(ours.size(),
                   " live Ray nodes on this host carry this node's labels; give "
                   "--node-id"));
}

}  // namespace rayaccel::rpc
