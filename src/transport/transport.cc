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

namespace rayaccel {
namespace transport {

// Request latency buckets, in seconds: from a small transfer on one host to a large one over
// a slow network.
constexpr double kLatencyBounds[] = {10e-6, 50e-6, 100e-6, 500e-6, 1e-3, 5e-3,
                                     10e-3, 50e-3, 100e-3, 500e-3, 1,    5};

struct Counters {
  Counters() {
    for (TransportStats::Latency& l : latency) {
      l.bounds.assign(std::begin(kLatencyBounds), std::end(kLatencyBounds));
      l.counts.assign(l.bounds.size() + 1, 0);
    }
  }
  void Transfer(int op, TransferPath path, uint64_t bytes, const absl::Status& s,
                uint64_t connection) {
    std::lock_guard<std::mutex> lock(mu);
    TransportStats::Transfers& t = transfers[op][static_cast<int>(path)];
    if (s.ok()) {
      t.completed++;
      t.bytes += bytes;
    } else {
      t.failed++;
      if (IsPeerLost(s)) lost.insert(connection);
    }
  }
  void Latency(int op, absl::Duration d) {
    const double seconds = absl::ToDoubleSeconds(d);
    std::lock_guard<std::mutex> lock(mu);
    TransportStats::Latency& l = latency[op];
    const size_t bucket =
        std::lower_bound(l.bounds.begin(), l.bounds.end(), seconds) - l.bounds.begin();
    l.counts[bucket]++;
    l.sum_seconds += seconds;
    l.count++;
  }
  std::mutex mu;
  TransportStats::Transfers transfers[2][kTransferPaths];
  TransportStats::Latency latency[2];
  uint64_t connections_opened = 0;
  std::set<uint64_t> lost;  // connections
  uint64_t notifications_sent = 0, notifications_received = 0;
};

absl::StatusOr<rayaccel_transport_api> TransportTable(const LoadedPlugin& plugin) {
  const rayaccel_plugin_api& api = plugin.api();
  if ((api.capabilities & RAYACCEL_CAP_TRANSPORT) == 0 || api.transport == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("plugin ", plugin.name(), " offers no transport (RAYACCEL_CAP_TRANSPORT)"));
  }
  // Built for a version with the transport, negotiated below it: the negotiation is the bug.
  if (plugin.chosen_minor() < 3 && api.abi_minor >= 3) {
    return absl::UnimplementedError(
        absl::StrCat("plugin ", plugin.name(), " negotiated ABI 1.", plugin.chosen_minor(),
                     " although its table says it was built for 1.", api.abi_minor,
                     ", so the host does not use its transport: set chosen_abi_minor = "
                     "rayaccel_choose_minor(host_abi_minor, ",
                     api.abi_minor, ") in rayaccel_plugin_entry"));
  }
  if (plugin.chosen_minor() < 1) {
    return absl::UnimplementedError(absl::StrCat(
        "plugin ", plugin.name(),
        " speaks ABI 1.0, whose transport table was experimental; rebuild it against 1.3"));
  }
  if (plugin.chosen_minor() < 3) {
    return absl::UnimplementedError(absl::StrCat(
        "plugin ", plugin.name(), " speaks ABI 1.", plugin.chosen_minor(),
        ", whose transport takes no shared key and so admits any peer; rebuild it against 1.3"));
  }
  absl::StatusOr<rayaccel_transport_api> table = CheckTransportTable(api.transport);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plugin ", plugin.name(), ": ", table.status().message()));
  }
  // A hook newer than the version both sides chose is not the plugin's to offer.
  if (plugin.chosen_minor() < 5) table->transfer_batch = nullptr;
  return table;
}

}  // namespace transport

namespace {

// A transport hook's status, classified by cause (see transport.h).
absl::Status StatusFor(rayaccel_status code, const std::string& text) {
  switch (code) {
    case RAYACCEL_STATUS_OK:
      return absl::OkStatus();
    case RAYACCEL_STATUS_PEER_LOST:
      return absl::UnavailableError(absl::StrCat("peer lost: ", text));
    case RAYACCEL_STATUS_STALE:
      return absl::FailedPreconditionError(absl::StrCat("stale descriptor: ", text));
    case RAYACCEL_STATUS_UNAUTHENTICATED:
      return absl::UnauthenticatedError(absl::StrCat("peer refused: ", text));
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
    case RAYACCEL_STATUS_NOT_FOUND:
      return absl::InvalidArgumentError(text);
    case RAYACCEL_STATUS_UNSUPPORTED:
    case RAYACCEL_STATUS_UNAVAILABLE:
      return absl::UnimplementedError(text);
    case RAYACCEL_STATUS_RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(text);
    case RAYACCEL_STATUS_TIMEOUT:
      return absl::DeadlineExceededError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::Status ToStatus(rayaccel_status code, const ErrorBuffer& err, absl::string_view what) {
  return StatusFor(code, absl::StrCat(what, ": ", err.text[0] != '\0' ? err.text : "(no message)"));
}

// A value outside the enumerators (a broken plugin's) reads as unreported.
TransferPath PathOf(rayaccel_transfer_path path) {
  const auto p = static_cast<uint32_t>(path);
  return p <= RAYACCEL_PATH_SAME_HOST ? static_cast<TransferPath>(p) : TransferPath::kUnreported;
}

// What a batch entry's status says, where the plugin gives only the code.
std::string EntryText(rayaccel_status code) {
  switch (code) {
    case RAYACCEL_STATUS_STALE:
      return "the peer has deregistered the region";
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
      return "the peer refused the range (not inside a region it holds)";
    case RAYACCEL_STATUS_PEER_LOST:
      return "the peer was lost";
    default:
      return absl::StrCat("failed (status ", static_cast<int>(code), ")");
  }
}

// Written into a part's statuses before the plugin sees them: a value no plugin returns, so an
// entry the plugin forgot to report is caught.
constexpr auto kUnreported = static_cast<rayaccel_status>(0xffffffffu);

uint32_t Millis(absl::Duration d) {
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, UINT32_MAX));
}

// A blob sink that appends each blob to a vector of strings.
struct Collect {
  std::vector<std::string> blobs;
  rayaccel_blob_sink sink{sizeof(rayaccel_blob_sink), this, &Put};
  static rayaccel_status Put(void* self, rayaccel_blob b) {
    if (b.size > 0 && b.data == nullptr) return RAYACCEL_STATUS_INVALID_ARGUMENT;
    static_cast<Collect*>(self)->blobs.emplace_back(reinterpret_cast<const char*>(b.data), b.size);
    return RAYACCEL_STATUS_OK;
  }
};

}  // namespace

struct Transport::Impl {
  // Set as the transport closes: its endpoint's requests are gone, whoever holds one.
  std::shared_ptr<bool> closed = std::make_shared<bool>(false);
  // Shared with the requests, which count themselves as they end (also after a close).
  std::shared_ptr<transport::Counters> counters = std::make_shared<transport::Counters>();
  std::unique_ptr<LoadedPlugin> plugin;
  rayaccel_transport_api api{};
  rayaccel_transport_endpoint* endpoint = nullptr;
  uint64_t endpoint_id = 0;

  struct Region {
    rayaccel_memory_region* handle;
    uint64_t length;
    MemoryKind kind;
    uint32_t device;
    std::string descriptor;
  };
  // Guards the maps. Hooks on a handle run under the shared lock; removing a handle takes the
  // exclusive lock, so no hook still uses it when it is closed.
  mutable std::shared_mutex mu;
  std::map<RegionId, Region> regions;
  RegionId next_region = 1;
  std::map<ConnectionId, rayaccel_connection*> connections;
  ConnectionId next_connection = 1;

  // What a call naming a connection that is not open gets: ids are never reused, so one this
  // transport gave out was closed (UNAVAILABLE, as its transfers in flight failed), any other
  // was never a connection (INVALID_ARGUMENT).
  absl::Status NoConnection(ConnectionId connection) const {
    if (connection > 0 && connection < next_connection) {
      return absl::UnavailableError(absl::StrCat("connection ", connection, " was closed"));
    }
    return absl::InvalidArgumentError(absl::StrCat("no connection ", connection));
  }

  template <typename Hook>
  absl::Status Call(absl::string_view what, Hook&& hook) const {
    ErrorBuffer err;
    rayaccel_status s = CallPlugin(&err, hook);
    return ToStatus(s, err, what);
  }
};

// --- Request

const char* TransferPathName(TransferPath path) {
  switch (path) {
    case TransferPath::kFabric:
      return "fabric";
    case TransferPath::kStaged:
      return "staged";
    case TransferPath::kDeviceIpc:
      return "device-ipc";
    case TransferPath::kSameHost:
      return "same-host";
    case TransferPath::kUnreported:
      break;
  }
  return "unreported";
}

Request::Request(const Transport* transport, rayaccel_request* handle, TransferPath path)
    : transport_(transport),
      closed_(transport != nullptr ? transport->impl_->closed : nullptr),
      handle_(handle),
      path_(path) {}

bool Request::Orphaned() {
  if (handle_ == nullptr || closed_ == nullptr || !*closed_) return false;
  handle_ = nullptr;
  result_ = absl::UnavailableError("the transport was closed with the request in flight");
  Count();
  return true;
}

Request::Request(Request&& other) noexcept
    : transport_(other.transport_),
      closed_(std::move(other.closed_)),
      handle_(std::exchange(other.handle_, nullptr)),
      path_(other.path_),
      result_(std::move(other.result_)),
      counters_(std::move(other.counters_)),
      op_(std::exchange(other.op_, -1)),
      bytes_(other.bytes_),
      connection_(other.connection_),
      start_(other.start_) {}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    Abandon();
    transport_ = other.transport_;
    closed_ = std::move(other.closed_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = other.path_;
    result_ = std::move(other.result_);
    counters_ = std::move(other.counters_);
    op_ = std::exchange(other.op_, -1);
    bytes_ = other.bytes_;
    connection_ = other.connection_;
    start_ = other.start_;
  }
  return *this;
}

void Request::Count() {
  if (op_ < 0 || counters_ == nullptr) return;
  counters_->Transfer(op_, path_, bytes_, result_, connection_);
  counters_->Latency(op_, absl::Now() - start_);
  op_ = -1;
}

Request::~Request() { Abandon(); }

void Request::Abandon() {
  if (handle_ == nullptr || Orphaned()) return;
  const Transport::Impl& impl = *transport_->impl_;
  impl.Call("abandon", [&](rayaccel_error* e) { return impl.api.abandon(handle_, e); })
      .IgnoreError();
  handle_ = nullptr;
}

absl::Status Request::Wait(absl::Time deadline) {
  if (handle_ == nullptr || Orphaned()) return result_;
  const Transport::Impl& impl = *transport_->impl_;
  while (true) {
    ErrorBuffer err;
    rayaccel_status s =
        CallPlugin(&err, [&](rayaccel_error* e) { return impl.api.poll(handle_, e); });
    if (s != RAYACCEL_STATUS_TIMEOUT) {
      handle_ = nullptr;  // released by the plugin
      result_ = ToStatus(s, err, "transfer");
      Count();
      return result_;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("the request is still in flight");
    }
    impl.Call("wait",
              [&](rayaccel_error* e) {
                // Short waits: a completion the progress thread saw between our poll and this wait
                // is caught by the next poll, at most a millisecond later.
                return impl.api.wait(impl.endpoint, std::min<uint32_t>(Millis(left), 1), e);
              })
        .IgnoreError();  // the poll above tells the outcome
  }
}

// --- BatchRequest

void BatchRequest::End(Part& part, const absl::Status& status) {
  part.ended = true;
  for (size_t i = part.begin; i < part.end; ++i) {
    if (!part.statuses) {  // one transfer
      entries_[i] = status.ok() ? status
                                : absl::Status(status.code(),
                                               absl::StrCat("entry ", i, ": ", status.message()));
      continue;
    }
    const rayaccel_status code = part.statuses[i - part.begin];
    if (code == RAYACCEL_STATUS_OK) {
      entries_[i] = absl::OkStatus();
    } else if (code == kUnreported) {
      entries_[i] = status.ok() ? absl::InternalError(absl::StrCat(
                                      "entry ", i, ": the plugin did not report its outcome"))
                                : status;
    } else {
      entries_[i] = StatusFor(code, absl::StrCat("entry ", i, ": ", EntryText(code)));
    }
  }
  // The plugin's own words for the first failure of its part, where it gave them.
  if (!status.ok() && result_.ok()) result_ = status;
}

bool BatchRequest::done() const {
  return std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.ended; });
}

size_t BatchRequest::failed() const {
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(),
                                           [](const absl::Status& s) { return !s.ok(); }));
}

void BatchRequest::Count() {
  if (counters_ == nullptr) return;
  for (size_t i = 0; i < entries_.size(); ++i) {
    counters_->Transfer(op_, paths_[i], lengths_[i], entries_[i], connection_);
  }
  counters_->Latency(op_, absl::Now() - start_);
  counters_ = nullptr;
}

absl::Status BatchRequest::Wait(absl::Time deadline) {
  for (Part& part : parts_) {
    if (part.ended) continue;
    absl::Status s = part.request.Wait(deadline);
    if (absl::IsDeadlineExceeded(s) && !part.request.done()) return s;
    End(part, s);
  }
  Count();
  const size_t bad = failed();
  if (bad == 0) return absl::OkStatus();
  const auto first =
      std::find_if(entries_.begin(), entries_.end(), [](const absl::Status& s) { return !s.ok(); });
  const absl::Status& why = result_.ok() ? *first : result_;
  return absl::Status(why.code(), absl::StrCat(bad, " of ", entries_.size(),
                                               " entries failed; the first: ", why.message()));
}

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

absl::StatusOr<PreparedBatch> Transport::PrepareBatch(
    TransferOp op, ConnectionId connection, const std::vector<TransferEntry>& entries) const {
  if (entries.empty()) return absl::InvalidArgumentError("a batch of no transfers");
  PreparedBatch batch;
  batch.op_ = op;
  batch.connection_ = connection;
  batch.endpoint_ = impl_->endpoint_id;
  batch.entries_.reserve(entries.size());
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  if (impl_->connections.count(connection) == 0) return impl_->NoConnection(connection);
  for (size_t i = 0; i < entries.size(); ++i) {
    const TransferEntry& e = entries[i];
    auto fail = [i](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("entry ", i, ": ", s.message()));
    };
    if (e.length == 0) return fail(absl::InvalidArgumentError("a transfer of 0 bytes"));
    absl::StatusOr<transport::Envelope> remote = transport::Decode(e.descriptor);
    if (!remote.ok()) return fail(remote.status());
    if (remote->info.plugin != plugin_name_) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("the descriptor is plugin ", remote->info.plugin,
                                                  "'s; this transport is ", plugin_name_, "'s")));
    }
    if (e.remote_offset > remote->info.length || e.length > remote->info.length - e.remote_offset) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("bytes [", e.remote_offset, ", +", e.length,
                       ") lie outside the remote region of ", remote->info.length, " bytes")));
    }
    batch.entries_.push_back({e.local, e.local_offset, std::string(remote->payload),
                              remote->info.endpoint, remote->info.region, e.remote_offset,
                              e.length});
  }
  return batch;
}

absl::StatusOr<BatchRequest> Transport::ReadBatch(ConnectionId connection,
                                                  const std::vector<TransferEntry>& entries) {
  absl::StatusOr<PreparedBatch> batch = PrepareBatch(TransferOp::kRead, connection, entries);
  if (!batch.ok()) return batch.status();
  return Post(*batch);
}

absl::StatusOr<BatchRequest> Transport::WriteBatch(ConnectionId connection,
                                                   const std::vector<TransferEntry>& entries) {
  absl::StatusOr<PreparedBatch> batch = PrepareBatch(TransferOp::kWrite, connection, entries);
  if (!batch.ok()) return batch.status();
  return Post(*batch);
}

absl::StatusOr<BatchRequest> Transport::Post(const PreparedBatch& batch) {
  if (batch.endpoint_ != impl_->endpoint_id || batch.entries_.empty()) {
    return absl::InvalidArgumentError("the batch was not prepared by this transport");
  }
  const rayaccel_transfer_op op =
      batch.op_ == TransferOp::kRead ? RAYACCEL_TRANSFER_READ : RAYACCEL_TRANSFER_WRITE;
  const size_t n = batch.entries_.size();
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  auto conn = impl_->connections.find(batch.connection_);
  if (conn == impl_->connections.end()) return impl_->NoConnection(batch.connection_);
  // What may have changed since the batch was prepared: the local regions.
  std::vector<rayaccel_transfer_entry> entries(n);
  for (size_t i = 0; i < n; ++i) {
    const PreparedBatch::Entry& e = batch.entries_[i];
    if (e.remote_endpoint == impl_->endpoint_id && impl_->regions.count(e.remote_region) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("entry ", i, ": stale descriptor: region ",
                                                        e.remote_region,
                                                        " was deregistered on this endpoint"));
    }
    auto region = impl_->regions.find(e.local);
    if (region == impl_->regions.end()) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, ": no local region ", e.local));
    }
    if (e.local_offset > region->second.length ||
        e.length > region->second.length - e.local_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", i, ": bytes [", e.local_offset, ", +", e.length, ") lie outside local region ",
          e.local, " of ", region->second.length, " bytes"));
    }
    entries[i] = {region->second.handle,
                  e.local_offset,
                  {reinterpret_cast<const uint8_t*>(e.payload.data()), e.payload.size()},
                  e.remote_offset,
                  e.length};
  }
  BatchRequest out;
  out.entries_.assign(n, absl::OkStatus());
  out.op_ = op;
  out.connection_ = batch.connection_;
  out.start_ = absl::Now();
  out.lengths_.reserve(n);
  for (const PreparedBatch::Entry& e : batch.entries_) out.lengths_.push_back(e.length);
  std::vector<rayaccel_transfer_path> paths(n, RAYACCEL_PATH_UNREPORTED);
  // Each part that fails to start fails its entries; an error only when none started.
  auto failed_to_start = [&](size_t begin, size_t end, const absl::Status& s) {
    BatchRequest::Part part;
    part.begin = begin;
    part.end = end;
    out.parts_.push_back(std::move(part));
    out.End(out.parts_.back(), s);
  };
  bool started = false;
  absl::Status first_error;
  const size_t step = impl_->api.transfer_batch != nullptr ? RAYACCEL_TRANSPORT_MAX_BATCH : 1;
  for (size_t begin = 0; begin < n; begin += step) {
    const size_t end = std::min(n, begin + step);
    BatchRequest::Part part;
    part.begin = begin;
    part.end = end;
    absl::Status s;
    if (impl_->api.transfer_batch != nullptr) {
      part.statuses.reset(new rayaccel_status[end - begin]);
      std::fill_n(part.statuses.get(), end - begin, kUnreported);
      rayaccel_transfer_batch_args args{};
      args.struct_size = sizeof(args);
      args.connection = conn->second;
      args.op = op;
      args.count = static_cast<uint32_t>(end - begin);
      args.entries = &entries[begin];
      args.statuses = part.statuses.get();
      args.paths = &paths[begin];
      s = impl_->Call(op == RAYACCEL_TRANSFER_READ ? "batch read" : "batch write",
                      [&](rayaccel_error* e) { return impl_->api.transfer_batch(&args, e); });
      if (s.ok()) part.request = Request(this, args.request);
    } else {
      rayaccel_transfer_args args{};
      args.struct_size = sizeof(args);
      args.connection = conn->second;
      args.op = op;
      args.local = entries[begin].local;
      args.local_offset = entries[begin].local_offset;
      args.remote_descriptor = entries[begin].remote_descriptor;
      args.remote_offset = entries[begin].remote_offset;
      args.length = entries[begin].length;
      args.path = RAYACCEL_PATH_UNREPORTED;
      s = impl_->Call(op == RAYACCEL_TRANSFER_READ ? "read" : "write",
                      [&](rayaccel_error* e) { return impl_->api.transfer(&args, e); });
      if (s.ok()) part.request = Request(this, args.request);
      paths[begin] = args.path;
    }
    if (!s.ok()) {
      if (first_error.ok()) first_error = s;
      failed_to_start(begin, end, s);
      continue;
    }
    started = true;
    out.parts_.push_back(std::move(part));
    if (out.parts_.back().request.done()) {  // ended within the call
      out.End(out.parts_.back(), absl::OkStatus());
    }
  }
  if (!started) return first_error;
  out.paths_.reserve(n);
  for (rayaccel_transfer_path p : paths) out.paths_.push_back(PathOf(p));
  out.counters_ = impl_->counters;
  if (out.done()) out.Count();  // every entry ended within the call
  return out;
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
    std::copy(&c.transfers[0][0], &c.transfers[0][0] + 2 * kTransferPaths, &out.transfers[0][0]);
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
