#include "rayaccel/transport.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loader/plugin_loader.h"
#include "transport/descriptor.h"
#include "transport/key.h"
#include "transport/table.h"
#include "transport/transport_internal.h"

namespace rayaccel {

using transport::Collect;
using transport::Millis;
using transport::PathOf;

// --- Transport

Transport::Transport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Transport::~Transport() {
  if (impl_ != nullptr) *impl_->closed = true;
  if (impl_ != nullptr && impl_->endpoint != nullptr) {
    impl_
        ->Call("close_endpoint",
               [&](rayaccel_error* e) { return impl_->api.close_endpoint(impl_->endpoint, e); })
        .IgnoreError();
  }
}

absl::StatusOr<std::unique_ptr<Transport>> Transport::Open(const TransportOptions& options) {
  std::vector<std::string> path =
      options.search_path.empty() ? DefaultSearchPath() : options.search_path;
  std::vector<PluginFile> files = FindPluginFiles(path, {options.plugin});
  if (files.empty() || files[0].path.empty()) {
    return absl::NotFoundError(
        absl::StrCat("plugin ", options.plugin, " not found on ", absl::StrJoin(path, ":")));
  }
  if (options.check_permissions) {
    absl::Status ok = CheckPermissions(files[0].path);
    if (!ok.ok()) return ok;
  }
  absl::StatusOr<std::string> key = transport::ResolveKey(options.key, options.key_file);
  if (!key.ok()) return key.status();
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<std::unique_ptr<LoadedPlugin>> plugin = LoadedPlugin::Open(files[0].path);
  if (!plugin.ok()) return plugin.status();
  impl->plugin = std::move(*plugin);
  std::map<std::string, std::string> config = options.config;
  if (!options.fabric.empty()) {
    if (options.fabric != "ucx" && options.fabric != "libfabric") {
      return absl::InvalidArgumentError(
          absl::StrCat("fabric \"", options.fabric, "\": ucx or libfabric"));
    }
    config["transport_fabric"] = options.fabric;
  }
  absl::Status init = impl->plugin->Initialize(config);
  if (!init.ok()) return init;
  absl::StatusOr<rayaccel_transport_api> table = transport::TransportTable(*impl->plugin);
  if (!table.ok()) return table.status();
  impl->api = *table;
  // A random id: a descriptor names the endpoint that made it, and a restarted one must not
  // take a dead one's name. The kernel's generator (getrandom), never 0.
  std::random_device random;
  while (impl->endpoint_id == 0) {
    impl->endpoint_id = (uint64_t{random()} << 32) | random();
  }

  Collect address;
  rayaccel_endpoint_args args{};
  args.struct_size = sizeof(args);
  args.instance = impl->plugin->instance();
  args.address = &address.sink;
  args.peer_timeout_ms =
      options.peer_timeout <= absl::ZeroDuration() ? 0 : Millis(options.peer_timeout);
  args.key = {reinterpret_cast<const uint8_t*>(key->data()), key->size()};
  absl::Status opened = impl->Call(
      "open_endpoint", [&](rayaccel_error* e) { return impl->api.open_endpoint(&args, e); });
  if (!opened.ok()) return opened;
  impl->endpoint = args.endpoint;
  std::unique_ptr<Transport> t(new Transport(std::move(impl)));
  t->plugin_name_ = t->impl_->plugin->name();
  if (t->impl_->endpoint == nullptr || address.blobs.size() != 1 || address.blobs[0].empty() ||
      address.blobs[0].size() > RAYACCEL_TRANSPORT_MAX_BLOB) {
    return absl::InternalError(absl::StrCat("plugin ", t->plugin_name_,
                                            ": open_endpoint must give one endpoint and one "
                                            "address of 1 to 4096 bytes"));
  }
  t->address_ = std::move(address.blobs[0]);
  return t;
}

absl::StatusOr<Transport::RegionId> Transport::Register(void* address, uint64_t length,
                                                        MemoryKind kind, uint32_t device) {
  if (address == nullptr || length == 0) {
    return absl::InvalidArgumentError("Register needs memory: a non-null address and a length");
  }
  absl::StatusOr<Buffer> b = RegisterWith(address, length, kind, device, 0);
  if (!b.ok()) return b.status();
  return b->region;
}

absl::StatusOr<Transport::Buffer> Transport::Allocate(uint64_t length, MemoryKind kind,
                                                      uint32_t device) {
  if (length == 0) return absl::InvalidArgumentError("Allocate needs a length");
  return RegisterWith(nullptr, length, kind, device, RAYACCEL_REGISTER_ALLOCATE);
}

absl::StatusOr<Transport::Buffer> Transport::RegisterWith(void* address, uint64_t length,
                                                          MemoryKind kind, uint32_t device,
                                                          uint32_t flags) {
  rayaccel_register_args args{};
  args.struct_size = sizeof(args);
  args.endpoint = impl_->endpoint;
  args.address = address;
  args.length = length;
  args.kind = kind == MemoryKind::kDevice ? RAYACCEL_MEMORY_DEVICE : RAYACCEL_MEMORY_HOST;
  args.device_index = device;
  args.flags = flags;
  absl::Status s = impl_->Call(
      "register_memory", [&](rayaccel_error* e) { return impl_->api.register_memory(&args, e); });
  if (!s.ok()) return s;
  Collect packed;
  s = impl_->Call("pack_descriptor", [&](rayaccel_error* e) {
    return impl_->api.pack_descriptor(args.region, &packed.sink, e);
  });
  std::unique_lock<std::shared_mutex> lock(impl_->mu);
  RegionId id = impl_->next_region++;
  absl::StatusOr<std::string> descriptor = absl::InternalError("pack_descriptor gave no blob");
  if (!s.ok()) {
    descriptor = s;
  } else if (args.region == nullptr || args.address == nullptr) {
    descriptor = absl::InternalError("register_memory gave no region or no memory");
  } else if (packed.blobs.size() == 1) {
    descriptor = transport::Encode({plugin_name_, impl_->endpoint_id, id, length, kind, device},
                                   packed.blobs[0]);
  }
  if (!descriptor.ok()) {
    lock.unlock();
    if (args.region != nullptr) {
      impl_
          ->Call("deregister_memory",
                 [&](rayaccel_error* e) { return impl_->api.deregister_memory(args.region, e); })
          .IgnoreError();
    }
    return descriptor.status();
  }
  impl_->regions[id] = {args.region, length, kind, device, std::move(*descriptor)};
  return Buffer{id, args.address, length};
}

absl::Status Transport::Deregister(RegionId region) {
  rayaccel_memory_region* handle = nullptr;
  {
    std::unique_lock<std::shared_mutex> lock(impl_->mu);
    auto it = impl_->regions.find(region);
    if (it == impl_->regions.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no region ", region));
    }
    handle = it->second.handle;
    impl_->regions.erase(it);
  }
  return impl_->Call("deregister_memory",
                     [&](rayaccel_error* e) { return impl_->api.deregister_memory(handle, e); });
}

absl::StatusOr<std::string> Transport::Describe(RegionId region) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  auto it = impl_->regions.find(region);
  if (it == impl_->regions.end()) {
    return absl::InvalidArgumentError(absl::StrCat("no region ", region));
  }
  return it->second.descriptor;
}

absl::StatusOr<DescriptorInfo> Transport::Inspect(absl::string_view descriptor) {
  absl::StatusOr<transport::Envelope> e = transport::Decode(descriptor);
  if (!e.ok()) return e.status();
  return e->info;
}

absl::StatusOr<Transport::ConnectionId> Transport::Connect(absl::string_view peer_address) {
  if (peer_address.empty() || peer_address.size() > RAYACCEL_TRANSPORT_MAX_BLOB) {
    return absl::InvalidArgumentError(
        absl::StrCat("a peer address of ", peer_address.size(), " bytes: must be 1 to 4096"));
  }
  rayaccel_connection* handle = nullptr;
  rayaccel_blob blob{reinterpret_cast<const uint8_t*>(peer_address.data()), peer_address.size()};
  absl::Status s = impl_->Call("connect", [&](rayaccel_error* e) {
    return impl_->api.connect(impl_->endpoint, blob, &handle, e);
  });
  if (!s.ok()) return s;
  if (handle == nullptr) return absl::InternalError("connect succeeded without a connection");
  std::unique_lock<std::shared_mutex> lock(impl_->mu);
  ConnectionId id = impl_->next_connection++;
  impl_->connections[id] = handle;
  std::lock_guard<std::mutex> counted(impl_->counters->mu);
  impl_->counters->connections_opened++;
  return id;
}

absl::Status Transport::Close(ConnectionId connection) {
  rayaccel_connection* handle = nullptr;
  {
    std::unique_lock<std::shared_mutex> lock(impl_->mu);
    auto it = impl_->connections.find(connection);
    if (it == impl_->connections.end()) {
      return impl_->NoConnection(connection);
    }
    handle = it->second;
    impl_->connections.erase(it);
  }
  return impl_->Call("close", [&](rayaccel_error* e) { return impl_->api.close(handle, e); });
}

absl::StatusOr<Request> Transport::Read(ConnectionId connection, RegionId local,
                                        uint64_t local_offset, absl::string_view descriptor,
                                        uint64_t remote_offset, uint64_t length) {
  return Transfer(RAYACCEL_TRANSFER_READ, connection, local, local_offset, descriptor,
                  remote_offset, length);
}

absl::StatusOr<Request> Transport::Write(ConnectionId connection, RegionId local,
                                         uint64_t local_offset, absl::string_view descriptor,
                                         uint64_t remote_offset, uint64_t length) {
  return Transfer(RAYACCEL_TRANSFER_WRITE, connection, local, local_offset, descriptor,
                  remote_offset, length);
}

absl::StatusOr<Request> Transport::Transfer(int op, ConnectionId connection, RegionId local,
                                            uint64_t local_offset, absl::string_view descriptor,
                                            uint64_t remote_offset, uint64_t length) {
  if (length == 0) return absl::InvalidArgumentError("a transfer of 0 bytes");
  absl::StatusOr<transport::Envelope> remote = transport::Decode(descriptor);
  if (!remote.ok()) return remote.status();
  if (remote->info.plugin != plugin_name_) {
    return absl::InvalidArgumentError(absl::StrCat("the descriptor is plugin ", remote->info.plugin,
                                                   "'s; this transport is ", plugin_name_, "'s"));
  }
  if (remote_offset > remote->info.length || length > remote->info.length - remote_offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", remote_offset, ", +", length,
                                                   ") lie outside the remote region of ",
                                                   remote->info.length, " bytes"));
  }
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  if (remote->info.endpoint == impl_->endpoint_id &&
      impl_->regions.count(remote->info.region) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stale descriptor: region ", remote->info.region, " was deregistered on this endpoint"));
  }
  auto region = impl_->regions.find(local);
  if (region == impl_->regions.end()) {
    return absl::InvalidArgumentError(absl::StrCat("no local region ", local));
  }
  if (local_offset > region->second.length || length > region->second.length - local_offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", local_offset, ", +", length,
                                                   ") lie outside local region ", local, " of ",
                                                   region->second.length, " bytes"));
  }
  auto conn = impl_->connections.find(connection);
  if (conn == impl_->connections.end()) {
    return impl_->NoConnection(connection);
  }
  rayaccel_transfer_args args{};
  args.struct_size = sizeof(args);
  args.connection = conn->second;
  args.op = static_cast<rayaccel_transfer_op>(op);
  args.local = region->second.handle;
  args.local_offset = local_offset;
  args.remote_descriptor = {reinterpret_cast<const uint8_t*>(remote->payload.data()),
                            remote->payload.size()};
  args.remote_offset = remote_offset;
  args.length = length;
  args.path = RAYACCEL_PATH_UNREPORTED;
  const absl::Time start = absl::Now();
  absl::Status s = impl_->Call(op == RAYACCEL_TRANSFER_READ ? "read" : "write",
                               [&](rayaccel_error* e) { return impl_->api.transfer(&args, e); });
  if (!s.ok()) {
    impl_->counters->Transfer(op, TransferPath::kUnreported, length, s, connection);
    return s;
  }
  Request r(this, args.request, PathOf(args.path));
  r.counters_ = impl_->counters;
  r.op_ = op;
  r.bytes_ = length;
  r.connection_ = connection;
  r.start_ = start;
  if (r.done()) r.Count();  // completed within the call
  return r;
}

absl::StatusOr<Request> Transport::Notify(ConnectionId connection, absl::string_view message) {
  if (message.empty() || message.size() > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) {
    return absl::InvalidArgumentError(absl::StrCat("a notification of ", message.size(),
                                                   " bytes: must be 1 to ",
                                                   RAYACCEL_TRANSPORT_MAX_NOTIFICATION));
  }
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  auto conn = impl_->connections.find(connection);
  if (conn == impl_->connections.end()) {
    return impl_->NoConnection(connection);
  }
  rayaccel_notify_args args{};
  args.struct_size = sizeof(args);
  args.connection = conn->second;
  args.message = {reinterpret_cast<const uint8_t*>(message.data()), message.size()};
  absl::Status s =
      impl_->Call("notify", [&](rayaccel_error* e) { return impl_->api.notify(&args, e); });
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> counted(impl_->counters->mu);
    impl_->counters->notifications_sent++;
  }
  return Request(this, args.request);  // null: completed within the call
}

absl::StatusOr<Request> Transport::Flush(ConnectionId connection) {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  auto conn = impl_->connections.find(connection);
  if (conn == impl_->connections.end()) {
    return impl_->NoConnection(connection);
  }
  rayaccel_request* handle = nullptr;
  absl::Status s = impl_->Call(
      "flush", [&](rayaccel_error* e) { return impl_->api.flush(conn->second, &handle, e); });
  if (!s.ok()) return s;
  return Request(this, handle);  // null: nothing was outstanding
}

TransportStats Transport::Stats() const {
  TransportStats out;
  {
    std::lock_guard<std::mutex> lock(impl_->counters->mu);
    const transport::Counters& c = *impl_->counters;
    std::copy(&c.transfers[0][0], &c.transfers[0][0] + size_t{2} * kTransferPaths,
              &out.transfers[0][0]);
    out.latency[0] = c.latency[0];
    out.latency[1] = c.latency[1];
    out.connections_opened = c.connections_opened;
    out.peers_lost = c.lost.size();
    out.notifications_sent = c.notifications_sent;
    out.notifications_received = c.notifications_received;
  }
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  out.connections = impl_->connections.size();
  out.regions = impl_->regions.size();
  for (const auto& [id, region] : impl_->regions) out.registered_bytes += region.length;
  return out;
}

absl::StatusOr<std::vector<std::string>> Transport::TakeNotifications(size_t min_count,
                                                                      absl::Time deadline) {
  Collect got;
  while (true) {
    absl::Status s = impl_->Call("get_notifications", [&](rayaccel_error* e) {
      return impl_->api.get_notifications(impl_->endpoint, &got.sink, e);
    });
    if (!s.ok()) return s;
    absl::Duration left = deadline - absl::Now();
    if (got.blobs.size() >= min_count || left <= absl::ZeroDuration()) {
      std::lock_guard<std::mutex> counted(impl_->counters->mu);
      impl_->counters->notifications_received += got.blobs.size();
      return got.blobs;
    }
    impl_
        ->Call("wait",
               [&](rayaccel_error* e) {
                 return impl_->api.wait(impl_->endpoint, std::min<uint32_t>(Millis(left), 100), e);
               })
        .IgnoreError();
  }
}

}  // namespace rayaccel
