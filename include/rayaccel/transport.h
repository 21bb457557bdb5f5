// rayaccel/transport.h: moving bytes directly between devices (or host memory) of two
// processes, through the transport table of the plugin that owns the memory.
//
// The model (docs/transport.md): a Transport is one endpoint of one plugin in this process.
// Memory registered on it is a region; Describe() packs a region into a descriptor, the
// "tensor reference" that travels through Ray's object metadata. A peer connects to this
// endpoint's address() and pulls with Read() (or pushes with Write()) against the descriptor;
// Notify() tells the other side that what was issued before it has landed.
//
// Errors say whose fault it was:
//   Unavailable         the peer went away, stopped or was cut off (IsPeerLost)
//   Unauthenticated     the peer does not hold this endpoint's key (IsUnauthenticatedPeer)
//   FailedPrecondition  the descriptor names a region that was deregistered (IsStale)
//   InvalidArgument     a malformed request, or a descriptor or address that is not valid
//   DataLoss            a descriptor whose checksum does not match (corrupted in transit)
//   DeadlineExceeded    a wait ran out; the request is still in flight
//   Unimplemented       the plugin or the host cannot do it (no UCX, no device memory support)
//   Internal, ResourceExhausted  a local fault
//
// Many small transfers (a model's tensors, a request's KV-cache blocks) go as one batch:
// PrepareBatch checks every entry once (NIXL's prepXfer), Post issues them all as one
// BatchRequest (postXfer), as often as wanted; the plugin keeps them in flight together and
// each entry succeeds or fails on its own. ReadBatch and WriteBatch do both at once.
//
// Thread-safety: every method may be called from any thread. A Request or BatchRequest belongs
// to one thread at a time and must end (Wait until done, or be destroyed) before its Transport.
#ifndef RAYACCEL_TRANSPORT_H_
#define RAYACCEL_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

// clang-format off
#include "rayaccel/abseil_abi.h"  // first: a mismatch stops here, clearly
// clang-format on
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct rayaccel_request;
enum rayaccel_status : uint32_t;  // rayaccel/plugin.h's

namespace rayaccel {

class Transport;
namespace transport {
struct Counters;  // what a transport's requests count as they end (transport.cc)
}

enum class MemoryKind { kHost = 0, kDevice = 1 };

// How a transfer's bytes moved, as the plugin reports it (RAYACCEL_PATH_*).
enum class TransferPath {
  kUnreported = 0,  // the plugin does not say (built before ABI 1.4)
  kFabric = 1,      // the fabric moved the memory as it is
  kStaged = 2,      // device memory copied through host memory
  kDeviceIpc = 3,   // device to device on one host (CUDA or HIP IPC)
  kSameHost = 4,    // host memory of two processes of one host, copied by the owner between them
};
inline constexpr int kTransferPaths = 5;  // the TransferPath values, kUnreported included
// "fabric", "staged", "device-ipc", "same-host", "unreported".
const char* TransferPathName(TransferPath path);

enum class TransferOp { kRead = 0, kWrite = 1 };

// One transfer of a batch: as Read's or Write's arguments.
struct TransferEntry {
  uint64_t local = 0;  // a region of this transport (Transport::RegionId)
  uint64_t local_offset = 0;
  std::string descriptor;  // the peer's Describe() of its region
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

struct TransportOptions {
  std::string plugin;                         // a name ("sim") or a path to the .so
  std::map<std::string, std::string> config;  // the plugin's initialize configuration
  std::vector<std::string> search_path;       // empty: DefaultSearchPath()
  bool check_permissions = true;              // refuse plugin files others can write
  // How long a silent peer may stay silent before it counts as lost; bounds Connect too.
  absl::Duration peer_timeout = absl::Seconds(10);
  // The secret both ends of a connection prove before any region is named (16 to 4096
  // bytes). Empty: the file `key_file`, else the file RAYACCEL_TRANSPORT_KEY_FILE names, else
  // this host's default key for this user (created on first use; another host cannot know
  // it, so a peer on another host is refused until the operator gives both the same key).
  std::string key;
  std::string key_file;
  // The fabric, for a plugin that offers more than one (the in-tree ones: plugins/common's
  // transport_fabric.h): "ucx" or "libfabric", passed as its config key transport_fabric.
  // Empty: the plugin's choice (RAYACCEL_TRANSPORT_FABRIC, else UCX). libfabric's provider is
  // its own FI_PROVIDER's.
  std::string fabric;
};

// What a transport has done since it opened (Transport::Stats()). A batch counts each entry
// as a transfer; latencies are per request (a batch is one), from issue to the Wait or Test
// that saw it end.
struct TransportStats {
  struct Transfers {
    uint64_t completed = 0;  // transfers that landed
    uint64_t bytes = 0;      // their bytes
    uint64_t failed = 0;     // transfers that failed (refused, stale, lost, ...)
  };
  // By direction and path: transfers[op][path], op a TransferOp, path a TransferPath.
  Transfers transfers[2][kTransferPaths];
  // Request latency by direction: a request ended within bounds[i] seconds counts in
  // counts[i] (counts[bounds.size()]: beyond the last), with the sum, as Prometheus keeps it.
  struct Latency {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum_seconds = 0;
    uint64_t count = 0;
  };
  Latency latency[2];
  uint64_t connections = 0;         // open now
  uint64_t connections_opened = 0;  // since the transport opened
  uint64_t peers_lost = 0;          // connections whose peer was lost (died, stopped, cut off)
  uint64_t regions = 0;             // registered now
  uint64_t registered_bytes = 0;    // their bytes
  uint64_t notifications_sent = 0;
  uint64_t notifications_received = 0;
};

// What a descriptor says about the region it names, read without trusting it: Inspect()
// checks the envelope (size, magic, version, checksum) first.
struct DescriptorInfo {
  std::string plugin;     // the plugin whose endpoint registered it
  uint64_t endpoint = 0;  // the owning endpoint's random id
  uint64_t region = 0;    // the region's id on that endpoint
  uint64_t length = 0;    // the region's size in bytes
  MemoryKind kind = MemoryKind::kHost;
  uint32_t device = 0;
};

// One operation in flight. Move-only; destroying one that has not completed abandons it (the
// plugin releases it when it ends). It may outlive its Transport: closing the transport ends
// it, and Wait then says Unavailable (destroying the two at once on two threads is a race).
class Request {
 public:
  Request() = default;
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  // Blocks until the request completes or `deadline` passes. OK once it completed; its error
  // once it failed; DeadlineExceeded while still in flight (Wait may be called again).
  absl::Status Wait(absl::Time deadline);
  // Never blocks: Wait with a deadline in the past.
  absl::Status Test() { return Wait(absl::InfinitePast()); }
  bool done() const { return handle_ == nullptr; }
  // A transfer's path, known once it was issued.
  TransferPath path() const { return path_; }

 private:
  friend class Transport;
  Request(const Transport* transport, rayaccel_request* handle,
          TransferPath path = TransferPath::kUnreported);
  void Abandon();   // hands an unfinished request back to the plugin
  bool Orphaned();  // the transport closed: the handle is gone with its endpoint
  void Count();     // a transfer that ended: into the transport's counters, once
  const Transport* transport_ = nullptr;
  std::shared_ptr<const bool> closed_;  // set when the transport closes
  rayaccel_request* handle_ = nullptr;
  TransferPath path_ = TransferPath::kUnreported;
  absl::Status result_;
  // A transfer's: what it counts as when it ends (op -1: not a transfer).
  std::shared_ptr<transport::Counters> counters_;
  int op_ = -1;
  uint64_t bytes_ = 0;
  uint64_t connection_ = 0;
  absl::Time start_;
};

// A batch whose entries were checked once: post it any number of times (Transport::Post).
// Copyable; it names regions by id, so a region deregistered since fails the post, clearly.
class PreparedBatch {
 public:
  size_t size() const { return entries_.size(); }
  TransferOp op() const { return op_; }

 private:
  friend class Transport;
  struct Entry {
    uint64_t local, local_offset;
    std::string payload;  // the plugin's part of the descriptor
    uint64_t remote_endpoint, remote_region, remote_offset, length;
    bool same_payload = false;  // as the entry before: passed to the plugin as the same bytes
  };
  TransferOp op_ = TransferOp::kRead;
  uint64_t connection_ = 0;
  uint64_t endpoint_ = 0;  // the transport that prepared it
  std::vector<Entry> entries_;
};

// A batch in flight. Move-only; destroying one that has not completed abandons it.
class BatchRequest {
 public:
  BatchRequest() = default;
  BatchRequest(BatchRequest&&) noexcept = default;
  BatchRequest& operator=(BatchRequest&&) noexcept = default;

  // Blocks until every entry ended or `deadline` passes. OK when all landed; when some failed,
  // the first failed entry's error, saying how many failed; DeadlineExceeded while any is in
  // flight (Wait may be called again).
  absl::Status Wait(absl::Time deadline);
  absl::Status Test() { return Wait(absl::InfinitePast()); }
  bool done() const;
  size_t size() const { return entries_.size(); }
  // Entry i's outcome, once Wait returned other than DeadlineExceeded.
  const absl::Status& entry(size_t i) const { return entries_.at(i); }
  // How entry i's bytes move, known once the batch was posted.
  TransferPath path(size_t i) const { return paths_.at(i); }
  size_t failed() const;

 private:
  friend class Transport;
  // One plugin request for entries [begin, end): a batch (statuses, one per entry, which the
  // plugin writes when it ends) or, for a plugin without batches, one transfer. Declared
  // before the request, so that an unfinished request is abandoned before they are freed.
  struct Part {
    std::unique_ptr<rayaccel_status[]> statuses;
    size_t begin = 0, end = 0;
    Request request;
    bool ended = false;
  };
  void End(Part& part, const absl::Status& status);
  void Count();  // every entry ended: into the transport's counters, once
  std::shared_ptr<transport::Counters> counters_;
  int op_ = 0;
  uint64_t connection_ = 0;
  std::vector<uint64_t> lengths_;
  absl::Time start_;
  std::vector<Part> parts_;
  std::vector<absl::Status> entries_;
  std::vector<TransferPath> paths_;
  absl::Status result_;
};

class Transport {
 public:
  using RegionId = uint64_t;
  using ConnectionId = uint64_t;

  // Loads the plugin in this process (transport needs the memory in the caller's address
  // space, so it never runs in the isolation host), initializes it and opens an endpoint.
  static absl::StatusOr<std::unique_ptr<Transport>> Open(const TransportOptions& options);
  // Closes every connection, releases every region, abandons requests, unloads the plugin.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // This endpoint's address: opaque bytes a peer passes to Connect().
  const std::string& address() const { return address_; }
  const std::string& plugin_name() const { return plugin_name_; }

  // Registers [address, address + length) for transfers. The memory must stay valid until
  // Deregister returns.
  absl::StatusOr<RegionId> Register(void* address, uint64_t length,
                                    MemoryKind kind = MemoryKind::kHost, uint32_t device = 0);
  // Memory the plugin allocates and registers (UCX: its own allocation): a staging buffer or
  // pool for tensors. Deregister frees it. Unimplemented when the plugin cannot allocate.
  struct Buffer {
    RegionId region = 0;
    void* data = nullptr;
    uint64_t size = 0;
  };
  absl::StatusOr<Buffer> Allocate(uint64_t length, MemoryKind kind = MemoryKind::kHost,
                                  uint32_t device = 0);
  // Invalidates the region: once this returns, a connected peer's transfer with one of its
  // descriptors fails with FailedPrecondition, and the memory may be freed.
  absl::Status Deregister(RegionId region);
  // The region's descriptor (at most kMaxDescriptorBytes): opaque bytes for a peer's Read or
  // Write. Layout in docs/transport.md.
  absl::StatusOr<std::string> Describe(RegionId region) const;
  static absl::StatusOr<DescriptorInfo> Inspect(absl::string_view descriptor);

  absl::StatusOr<ConnectionId> Connect(absl::string_view peer_address);
  // Requests still in flight on the connection then fail with Unavailable, and so does every
  // later call naming it (ids are never reused).
  absl::Status Close(ConnectionId connection);

  // Transfers between a local region and the region a peer's descriptor names. The ranges are
  // checked here against the local region and the descriptor (which catches mistakes), and by
  // the peer against the regions it holds (which decides: a refusal fails the request with
  // FailedPrecondition for a deregistered region, InvalidArgument for a range outside one).
  absl::StatusOr<Request> Read(ConnectionId connection, RegionId local, uint64_t local_offset,
                               absl::string_view descriptor, uint64_t remote_offset,
                               uint64_t length);
  absl::StatusOr<Request> Write(ConnectionId connection, RegionId local, uint64_t local_offset,
                                absl::string_view descriptor, uint64_t remote_offset,
                                uint64_t length);
  // A message (1..1024 bytes) the peer receives after everything issued before it on this
  // connection has landed.
  absl::StatusOr<Request> Notify(ConnectionId connection, absl::string_view message);
  // Checks every entry as Read or Write checks one (InvalidArgument naming the first bad entry)
  // and keeps what the checks decoded; 1 or more entries, any number.
  absl::StatusOr<PreparedBatch> PrepareBatch(TransferOp op, ConnectionId connection,
                                             const std::vector<TransferEntry>& entries) const;
  // Issues every entry of the batch, as one plugin call per 4096 entries (ABI 1.5), or one
  // transfer each where the plugin has no batches. An error means nothing started.
  absl::StatusOr<BatchRequest> Post(const PreparedBatch& batch);
  absl::StatusOr<BatchRequest> ReadBatch(ConnectionId connection,
                                         const std::vector<TransferEntry>& entries);
  absl::StatusOr<BatchRequest> WriteBatch(ConnectionId connection,
                                          const std::vector<TransferEntry>& entries);

  // Completes when every transfer issued on the connection so far has landed at the peer.
  absl::StatusOr<Request> Flush(ConnectionId connection);

  // What this transport has done since it opened.
  TransportStats Stats() const;

  // Notifications received so far, oldest first; waits until at least `min_count` arrived or
  // the deadline passes (then returns what there is).
  absl::StatusOr<std::vector<std::string>> TakeNotifications(
      size_t min_count = 0, absl::Time deadline = absl::InfinitePast());

  static constexpr size_t kMaxDescriptorBytes = 4096;

 private:
  struct Impl;
  explicit Transport(std::unique_ptr<Impl> impl);
  absl::StatusOr<Buffer> RegisterWith(void* address, uint64_t length, MemoryKind kind,
                                      uint32_t device, uint32_t flags);
  absl::StatusOr<Request> Transfer(int op, ConnectionId connection, RegionId local,
                                   uint64_t local_offset, absl::string_view descriptor,
                                   uint64_t remote_offset, uint64_t length);
  friend class Request;
  std::unique_ptr<Impl> impl_;
  std::string address_;
  std::string plugin_name_;
};

// Status helpers for callers that react to the cause.
inline bool IsPeerLost(const absl::Status& s) { return absl::IsUnavailable(s); }
inline bool IsStale(const absl::Status& s) { return absl::IsFailedPrecondition(s); }
inline bool IsUnauthenticatedPeer(const absl::Status& s) { return absl::IsUnauthenticated(s); }

}  // namespace rayaccel

#endif  // RAYACCEL_TRANSPORT_H_
