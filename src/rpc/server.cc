#include "rpc/server.h"

#include <errno.h>
#include <grp.h>
#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "util/log_line.h"

namespace rayaccel::rpc {
namespace {

// Whether the socket file `path` was left by a server that died: nothing listens on it
// (ECONNREFUSED). Any other outcome (accepted, or not ours to try) counts as not stale.
bool SocketIsStale(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool refused =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == ECONNREFUSED;
  close(fd);
  return refused;
}

// The group named by a name or a number.
absl::StatusOr<gid_t> GroupId(const std::string& name) {
  unsigned long number = 0;
  if (absl::SimpleAtoi(name, &number) && number < static_cast<gid_t>(-1)) {
    return static_cast<gid_t>(number);
  }
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  int err = 0;
  // A group with many members needs more room than a first guess: grow and ask again.
  while ((err = getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE &&
         buffer.size() < (size_t{1} << 24)) {
    buffer.resize(buffer.size() * 4);
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "no group \"", name, "\"", err != 0 ? absl::StrCat(": ", std::strerror(err)) : ""));
  }
  return entry.gr_gid;
}

// Makes room for a new socket at `path`: removes a stale socket (a server that died), refuses
// to touch a live one or any other kind of file.
absl::Status PrepareSocketPath(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is longer than ",
                                                   sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
  }
  // The folder, when missing (/run/rayaccel after a reboot): one level, world-traversable.
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  if (!dir.empty() && mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the socket's folder ", dir, ": ", std::strerror(errno),
        geteuid() == 0 ? ""
                       : " (not running as root: choose a folder this user may write with "
                         "--listen unix:PATH, or leave --listen out for this user's default)"));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " exists and is not a socket; not removing it"));
  }
  if (!SocketIsStale(path)) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " is in use (or cannot be checked); not removing it"));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot remove the stale socket ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Where a Unix socket is bound before it is linked at `path`: the same folder (a hard link
// stays within one file system), a name no one else uses. `path` itself when that name would not
// fit in sun_path; the socket then appears when bound, as gRPC makes it.
std::string StagingSocketPath(const std::string& path) {
  static std::atomic<unsigned> servers{0};
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string staging = absl::StrCat(dir, ".starting-", getpid(), "-", servers++);
  return staging.size() < sizeof(sockaddr_un{}.sun_path) ? staging : path;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& options) {
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadCredentialFile(options.tls_cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadCredentialFile(options.tls_key_file, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!options.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadCredentialFile(options.tls_client_ca_file, "TLS client CA");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

void HoldGrpcUntilExit() { grpc_init(); }  // never paired with grpc_shutdown, by design

absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadCredentialFile(path, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0) {
    LogAt(LogLevel::kWarning, "token file {} is readable by every user", path);
  }
  return token;
}

absl::StatusOr<BearerToken> BearerToken::FromFile(const std::string& path) {
  absl::StatusOr<std::string> token = ReadTokenFile(path);
  if (!token.ok()) return token.status();
  return BearerToken(*std::move(token));
}

grpc::Status BearerToken::Check(const grpc::ServerContextBase& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return {grpc::StatusCode::UNAUTHENTICATED, "a bearer token is required"};
  }
  std::string why = Refusal(absl::string_view(it->second.data(), it->second.size()));
  if (!why.empty()) return {grpc::StatusCode::UNAUTHENTICATED, why};
  return grpc::Status::OK;
}

std::string BearerToken::Refusal(absl::string_view value) const {
  if (value.empty()) return "a bearer token is required";
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return "authorization must be \"Bearer <token>\"";
  }
  // Constant time in the token's content: a mismatch does not say where it is.
  unsigned char diff = value.size() == token_.size() ? 0 : 1;
  for (size_t i = 0; i < token_.size(); ++i) {
    diff |= static_cast<unsigned char>(token_[i]) ^
            static_cast<unsigned char>(i < value.size() ? value[i] : 0);
  }
  if (diff != 0) return "wrong bearer token";
  return "";
}

absl::StatusOr<ListenAddress> CheckServerOptions(const ServerOptions& options) {
  absl::StatusOr<ListenAddress> address = ParseListenAddress(options.listen);
  if (!address.ok()) return address.status();
  if ((options.socket_mode & ~0777u) != 0 || (options.socket_mode & 0600u) != 0600u) {
    return absl::InvalidArgumentError(
        absl::StrFormat("socket mode %04o: a mode of at most 0777 that keeps the owner's read "
                        "and write (0600)",
                        options.socket_mode));
  }
  if (!options.socket_group.empty() && address->unix_path.empty()) {
    return absl::InvalidArgumentError("a socket group applies to a Unix socket only");
  }
  if (!options.socket_group.empty()) {
    if (absl::StatusOr<gid_t> gid = GroupId(options.socket_group); !gid.ok()) return gid.status();
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (!options.tls_client_ca_file.empty() && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("a TLS client CA needs a server certificate and key");
  }
  if (absl::Status st =
          CheckPlainTcp(*address, !options.tls_cert_file.empty(), options.allow_insecure_tcp);
      !st.ok()) {
    return st;
  }
  return address;
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                                      const std::vector<grpc::Service*>& services) {
  absl::StatusOr<ListenAddress> address = CheckServerOptions(options);
  if (!address.ok()) return address.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  if (!address->unix_path.empty()) {
    if (absl::Status st = PrepareSocketPath(address->unix_path); !st.ok()) return st;
  }
  // A Unix socket is built under a private name and linked into place once it listens with its
  // mode and group: whoever waits for the path (a raylet, the CLI, systemd's PathExists=) never
  // connects to a socket that is bound but not yet listening, nor sees it before its group.
  const std::string staging =
      address->unix_path.empty() ? "" : StagingSocketPath(address->unix_path);
  if (!staging.empty() && staging != address->unix_path) {
    if (absl::Status st = PrepareSocketPath(staging); !st.ok()) return st;
  }
  std::unique_ptr<Server> out(new Server());
  // The standard grpc.health.v1.Health service ("" is SERVING while the server runs), for
  // Kubernetes gRPC probes and grpc_health_probe. It needs no token: it tells only that the
  // agent answers.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(staging.empty() ? address->grpc_uri : absl::StrCat("unix:", staging),
                           *credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  // The socket is born with its mode: no window in which others may connect. (umask is per
  // process; nothing else here creates files during these few calls.)
  mode_t old_mask = umask(~static_cast<mode_t>(options.socket_mode) & 0777);
  out->server_ = builder.BuildAndStart();
  umask(old_mask);
  if (out->server_ == nullptr || (address->unix_path.empty() && port == 0)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  if (!address->unix_path.empty()) {
    out->unix_path_ = staging;
    out->target_ = address->grpc_uri;
    // Verified, not chmod-ed: chmod would follow a symlink swapped in by whoever can write the
    // folder (lchown does not follow one).
    auto refuse = [&](const std::string& why) {
      out->Shutdown(std::chrono::system_clock::now());
      return absl::PermissionDeniedError(why);
    };
    gid_t gid = static_cast<gid_t>(-1);
    if (!options.socket_group.empty()) {
      gid = *GroupId(options.socket_group);  // checked above
      if (lchown(out->unix_path_.c_str(), static_cast<uid_t>(-1), gid) != 0) {
        return refuse(absl::StrCat("cannot give ", out->unix_path_, " to group ",
                                   options.socket_group, ": ", std::strerror(errno),
                                   " (this needs root, or a user who is a member of the group)"));
      }
    }
    struct stat st {};
    if (lstat(out->unix_path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) ||
        (st.st_mode & 0777) != options.socket_mode ||
        (gid != static_cast<gid_t>(-1) && st.st_gid != gid)) {
      return refuse(absl::StrFormat("%s is not the %04o socket just created", out->unix_path_,
                                    options.socket_mode));
    }
    if (staging != address->unix_path) {
      // link, not rename: a socket another server put there since the check above is kept.
      if (link(staging.c_str(), address->unix_path.c_str()) != 0) {
        return refuse(absl::StrCat("cannot put the socket in place at ", address->unix_path, ": ",
                                   std::strerror(errno),
                                   errno == EEXIST ? " (another server took the path)" : ""));
      }
      unlink(staging.c_str());
      out->unix_path_ = address->unix_path;
    }
  } else {
    out->target_ =
        absl::StrCat(address->grpc_uri.substr(0, address->grpc_uri.rfind(':')), ":", port);
  }
  return out;
}

void Server::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (stopped_ || server_ == nullptr) return;  // never started (cannot listen), or stopped
  stopped_ = true;
  // Probes see NOT_SERVING while the server drains.
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  server_->Shutdown(deadline);
  server_->Wait();
  server_.reset();
  if (!unix_path_.empty()) unlink(unix_path_.c_str());
}

Server::~Server() { Shutdown(std::chrono::system_clock::now()); }

}  // namespace rayaccel::rpc
