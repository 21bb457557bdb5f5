// The UCX helper's handles: requests, regions, links, device mappings, connections and the
// endpoint, each what the host holds (transport_handles.h) plus the helper's bookkeeping. Every
// field is guarded by the endpoint's `mu` unless its comment says otherwise.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_HANDLES_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_HANDLES_H_

#include <ucp/api/ucp.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/plugin_util.h"
#include "common/same_host_copy.h"
#include "common/same_host_regions.h"
#include "common/same_host_ring.h"
#include "common/transport_args.h"
#include "common/transport_handles.h"
#include "common/transport_peers.h"
#include "common/ucx/staging.h"
#include "common/ucx/ucp.h"
#include "common/ucx/wire.h"
#include "common/ucx_transport.h"

namespace rayaccel::plugin::ucx {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Pieces of one staged transfer in flight at a time.
constexpr uint32_t kPiecesInFlight = 4;
// An entry of a batch larger than this goes alone, zero-copy, as a transfer does.
constexpr uint64_t kChunkEntryMax = kChunkBytes;
// The most a write, or a read's reply, carries eagerly on the network fabric: one message, where
// UCX's rendezvous would add a round trip (a handshake before the bytes) to save a copy. Over TCP
// between two network namespaces, 64 KiB writes took 45 us instead of 73 to 185, 256 KiB reads 1.3
// GB/s instead of 0.7 (docs/performance.md).
constexpr uint64_t kEagerMax = 256 << 10;
// The least a transfer the owner copies between two processes of one host moves: below it, the
// copy's system calls (about 3 us here) cost more than carrying the bytes in the reply over
// loopback TCP (docs/performance.md).
constexpr uint64_t kSameHostCopyMin = 16 << 10;
// A copied range costs about a microsecond of its own (the kernel pins its pages), as much as
// 512 bytes cost in a message chunk: smaller entries of a batch travel in messages.
constexpr uint64_t kCopiedEntryMin = 512;
// A ring transfer of at most this many bytes travels in its slot (two memcpy) rather than by the
// owner's system call into or out of the reader; the most request rings one owner serves.
constexpr uint64_t kRingInlineMax = 8 << 10;
constexpr uint32_t kMaxRings = 64;
// From this size a copy between an owner and its reader is split across threads
// (ring.cc's CopyWithReader), in at most this many parts.
constexpr uint64_t kParallelCopyMin = 4 << 20;
// A reader's own READs from published regions (ring.h's ReadsDirectly): below this size only
// the first of a burst (READs less than kReadBurstGap apart), measured: 64 KiB 10.5 us by the
// reader (its copy, and its checks that the owner runs) against 7 on the ring with the owner
// awake; from it, every one (1 MiB: 12.3 GB/s, p99 0.15 ms, against the owner's copy's tail).
constexpr uint64_t kReadsDirectlyAlways = 256 << 10;
constexpr std::chrono::milliseconds kReadBurstGap(1);
// From this size a READ on the ring with the owner awake on another CPU is shared (ring.cc's
// RingTransfer): the owner copies the first half while the reader copies the rest from the
// published region, two CPUs at one READ.
constexpr uint64_t kSharedReadMin = 32 << 10;
constexpr uint32_t kParallelCopyParts = 4;
// How long a reader spins within the call for the owner's answer before leaving a request: an
// owner awake answers within microseconds, one asleep wakes in tens.
constexpr std::chrono::microseconds kRingReaderSpin(100);

// A peer's region as its descriptor names it.
struct RemoteRegion {
  uint64_t owner = 0, id = 0, length = 0;
  uint16_t flags = 0;
};

// One range of a batch, on its way into a chunk.
struct ChunkItem {
  uint32_t entry;
  char* local;
  uint64_t region, offset, length;
};

// The helper's handles (transport_handles.h), each naming the helper's hooks.
struct Endpoint;
struct Connection;
struct Request;
const rayaccel_transport_api* Hooks();

struct Request : rayaccel_request {
  Request() { helper = Hooks(); }
  enum class Kind { kRead, kWrite, kFlush, kNotify, kBatch };
  Endpoint* endpoint = nullptr;
  Connection* connection = nullptr;  // null once the connection is closed
  Kind kind = Kind::kRead;
  uint64_t id = 0;        // a transfer's number on its connection
  uint64_t mark = 0;      // a flush or notification: waits for every transfer numbered below
  void* local = nullptr;  // a read: where the bytes go
  uint64_t length = 0;
  ucp_mem_h memh = nullptr;
  bool replied = false;      // a read: the owner's reply arrived; a write: its acknowledgement
  bool same_host = false;    // the owner copies the bytes between the processes (same_host_copy.h)
  uint32_t ring_n = 0;       // its number on the connection's ring, while in ring_requests
  bool ring_inline = false;  // a ring READ's bytes come back in its slot
  // A shared ring READ: why the part the reader copied itself may not be kept (OK: it may).
  rayaccel_status shared_part = RAYACCEL_STATUS_OK;
  rayaccel_status reply = RAYACCEL_STATUS_OK;
  int ucx = 0;  // UCX operations that still hold this request
  bool done = false;
  bool abandoned = false;  // nobody will poll it: freed once UCX lets go of it
  rayaccel_status status = RAYACCEL_STATUS_OK;
  std::string why;
  std::string header;   // the wire header, alive until UCX is done with it
  std::string payload;  // a notification's bytes, likewise
  // Device memory UCX cannot reach: the bytes travel through this host copy, copied from the
  // device before a write goes out and to it once a read has landed.
  bool staged = false;
  uint32_t device = 0;
  Staging staging;
  // A large staged transfer goes as pieces (kStagedPiece each) under one group request, which
  // the host holds; the pieces are the endpoint's own.
  Request* group = nullptr;  // a piece: the group it counts in
  bool is_group = false;
  // A group: the transfer it moves, the next byte to issue, its pieces in flight (at most
  // kPiecesInFlight), whether the call that made it is still issuing, and why its first failed
  // piece failed (its status in `reply`).
  rayaccel_transfer_args whole{};
  RemoteRegion remote;
  uint64_t next_piece = 0;
  uint32_t pieces_in_flight = 0;
  bool issuing = false;
  bool held = false;
  bool queued = false;  // in the endpoint's ready_groups: not freed until taken from it
  std::string first_why;
  // A batch (Kind::kBatch): each entry's outcome, copied to the host's array by the poll that
  // ends it, and its parts still running (`held` while the call that made it issues; its first
  // failure in `reply` and `first_why`).
  std::vector<rayaccel_status> entry_status;
  rayaccel_status* statuses_out = nullptr;
  uint32_t parts_running = 0;
  // A part of a batch: the batch, and which entry it moves (a transfer of its own) or which
  // entries (a chunk: one message each way for many small ranges, each with its status).
  Request* batch = nullptr;
  uint32_t entry = 0;
  struct ChunkEntry {
    uint32_t entry;
    char* local;
    uint64_t length;
    rayaccel_status status;
  };
  std::vector<ChunkEntry> chunk;
  std::string scratch;  // a chunk read's reply, received whole before its bytes are scattered
};

struct Region : rayaccel_memory_region {
  Region() { helper = Hooks(); }
  Endpoint* endpoint = nullptr;
  uint64_t id = 0;
  void* base = nullptr;
  uint64_t length = 0;
  ucp_mem_h memh[2] = {nullptr, nullptr};  // per fabric
  int allocated_by = -1;                   // the fabric whose mapping owns the memory
  std::string descriptor;
  // Device memory the plugin's driver copies through host memory (DeviceMemoryOps): no UCX
  // mapping; `owned` when the driver allocated it for us.
  bool staged = false;
  bool owned = false;
  uint32_t device = 0;
  bool host = false;  // host memory: an owner on this host may copy to or from it directly
  // What a reader on this host maps the region with: for a staged region that is one whole
  // allocation, the driver's handle (DeviceMemoryOps::Export); for host memory the helper
  // allocated, its memfd's (`shared`). Empty: not mapped by readers.
  std::string ipc_handle;
  std::unique_ptr<SharedMemory> shared;  // host memory readers on this host map (same_host_copy.h)
};

// This endpoint's UCX endpoints to one remote endpoint, shared by every connection between
// the two in either direction. One pair per pair of endpoints, because UCX pairs the
// endpoints two workers create to each other in the order each side created them: endpoints
// per connection would be paired across connections, and closing one would close another's.
// Data moves on one without error handling, because UCX (1.13) offers peer-failure handling
// only on transports slower than shared memory; control messages use one with it.
// Heartbeats on the control endpoint tell a stopped peer from a live one, which UCX's
// keepalive does not (a stopped process's kernel still answers for it).
struct Link {
  Endpoint* endpoint = nullptr;
  uint64_t uuid = 0;  // the remote endpoint's id
  ucp_ep_h control = nullptr;
  ucp_ep_h data = nullptr;
  int fabric = -1;       // the data endpoint's (kLocal or kNetwork)
  int users = 0;         // connections and peer records on it
  bool trusted = false;  // a handshake over it succeeded: kept while unused
  bool failed = false;   // lost or closed: every user fails, then its endpoints go
  bool ucx_failed = false;
  bool say_goodbye = false;  // tell the remote endpoint before closing (we declared it lost)
  std::string why;           // why it failed
};

// A reader's mapping of an owner's device region (one host, DeviceMemoryOps::Import), per
// connection and region. Made while the endpoint's lock is held from the ask to the answer;
// used outside it (`users`); closed when the owner asks for it back, once unused.
struct Mapping {
  enum class State { kAsked, kMapped, kRefused };
  State state = State::kAsked;
  bool answered = false;  // kAsked: the owner's reply is in
  rayaccel_status answer = RAYACCEL_STATUS_OK;
  std::string handle;
  uint32_t device = 0;  // the owner's device (the plugin's index, host-wide)
  uint64_t length = 0;
  void* base = nullptr;              // kMapped
  std::unique_ptr<PeerMemory> host;  // kMapped host memory: the owner's SharedMemory
  int users = 0;                     // copies running outside the lock
  bool revoked = false;              // the owner asked for it back, or the connection failed
  bool confirm = false;              // tell the owner once closed
};

struct Connection : rayaccel_connection {
  Connection() { helper = Hooks(); }
  using State = peers::HandshakeState;
  Endpoint* endpoint = nullptr;
  Link* link = nullptr;    // null once the link is gone
  uint64_t token = 0;      // names this connection in the owner's bookkeeping
  uint64_t peer_uuid = 0;  // the owner's endpoint id, as its address says
  Nonce nonce{};           // ours, for the handshake
  State state = State::kHello;
  rayaccel_status failure = RAYACCEL_STATUS_OK;  // once set, the connection is dead for good
  std::string failure_text;
  std::chrono::steady_clock::time_point last_heard;
  uint64_t next_id = 1;
  std::map<uint64_t, Request*> transfers;  // in flight, by number
  std::vector<Request*> barriers;          // flushes and notifications waiting
  // The owner runs on this host, in another process (its welcome says): its mappable device
  // regions are mapped rather than staged.
  bool may_map = false;
  std::map<uint64_t, Mapping> mappings;  // by the owner's region id
  // What proves to an owner on this host that this process is the reader (same_host_copy.h):
  // it reads these bytes here. Kept for the connection's life.
  Mac same_host_proof{};
  bool same_host = false;  // the owner's welcome: it copies host memory to and from this process
  pid_t owner_pid = 0;     // the owner's process, as its welcome says (a same-host owner's)
  // The owner's request ring (same_host_ring.h), shared with a transfer spinning on it outside
  // the lock; its requests not yet answered, in the order posted.
  std::shared_ptr<RingReader> ring;
  std::deque<Request*> ring_requests;
  // The owner's published host regions (same_host_regions.h): READs it need not wake for; when
  // the last one of more than a slot was asked for.
  std::shared_ptr<PublishedRegionsReader> published;
  std::chrono::steady_clock::time_point last_read;
};

struct Endpoint : rayaccel_transport_endpoint {
  Endpoint() { helper = Hooks(); }
  std::mutex mu;  // held around every UCX call, so UCX callbacks run with it held
  EndpointOptions options;
  std::string key;  // the shared secret both sides of a connection prove
  // Two data fabrics (kLocal: UCX's self, and shared memory where the operator names it;
  // kNetwork: TCP, RDMA), each a UCX context and its data worker; either may be missing where
  // UCX_TLS leaves it nothing (SplitTransports says why the fabrics are split so). Control messages
  // use a worker of their own: UCX (1.13) refuses endpoints of mixed error handling between one
  // pair of workers, and control endpoints want peer-failure detection, data endpoints cannot have
  // it on shared memory.
  struct Fabric {
    Endpoint* endpoint = nullptr;
    int index = 0;
    ucp_context_h context = nullptr;
    ucp_worker_h worker = nullptr;  // transfers and notifications
  } fabrics[2];
  bool shared_memory = false;      // the operator put posix or sysv in UCX_TLS
  bool same_host_copy = true;      // SameHostCopyEnabled() when the endpoint opened
  bool request_rings = true;       // RingEnabled() then (same_host_ring.h)
  ucp_worker_h control = nullptr;  // handshake, heartbeats, bye: on the network fabric's
                                   // context where there is one
  uint64_t memory_types = 0;       // UCS_MEMORY_TYPE_* bits UCX can reach
  uint64_t uuid = 0;
  uint32_t peer_timeout_ms = 0;
  peers::RegionTable<Region> regions;             // the owner's live regions: what it serves
  std::map<uint64_t, uint32_t> serving;           // region id -> owner operations using its memory
  std::map<uint64_t, uint32_t> ring_holds;        // region id -> ring copies outside the lock
  std::map<uint64_t, std::set<uint64_t>> mapped;  // region id -> readers (tokens) that map it
  std::map<uint64_t, Connection*> connections;    // by token
  std::map<Request*, bool> requests;              // every live request
  std::map<uint64_t, std::unique_ptr<Link>> links;  // by remote uuid

  // The owner's side: one record per reader that said hello, by the reader's token.
  struct Peer {
    Endpoint* endpoint = nullptr;
    uint64_t token = 0, uuid = 0;
    Link* link = nullptr;                        // null once the link is gone
    std::string local_address, network_address;  // the reader's data workers, reached once
                                                 // it proved the key
    bool welcomed = false;
    Nonce reader_nonce{}, owner_nonce{};
    bool authenticated = false;
    bool failed = false;                             // to be closed
    uint32_t refuse = 0;                             // a RefusedReason to send before closing
    std::chrono::steady_clock::time_point deadline;  // for the handshake, then the heartbeat
    uint32_t serving = 0;                            // operations in flight for it
    // On this host, proven: copies go straight to it (shared with a ring copy running outside
    // the lock).
    std::shared_ptr<PeerProcess> process;
    std::unique_ptr<RingOwner> ring;  // its request ring (same_host_ring.h), served
  };
  std::map<uint64_t, std::unique_ptr<Peer>> peers;
  struct Hello {
    uint64_t uuid, token;
    Nonce nonce;
    std::string control, local, network;
  };
  std::vector<Hello> hellos;  // queued by the handler, answered after progress returns

  // Messages queued inside UCX callbacks, sent after progress returns. `to_peer`: the owner's
  // record of a reader (by token); otherwise a connection of ours.
  struct Outgoing {
    bool to_peer;
    uint64_t token;
    unsigned id;
    std::string bytes;
    std::string payload = {};  // an acknowledgement's data (kPutBatchAck's statuses)
  };
  std::vector<Outgoing> outbox;
  // Page-locked host buffers for staged pieces; null without device memory.
  std::shared_ptr<PinnedPool> pinned;
  // Reads to serve: validated in the handler, sent after progress returns.
  struct GetServe {
    uint64_t token, id, region, offset, length;
    rayaccel_status status;
    uint64_t to;  // where a reader on this host wants the bytes in its memory (0: by message)
  };
  std::vector<GetServe> gets;
  // Batched reads to serve, likewise: the ranges, or why the whole message is refused.
  struct BatchServe {
    uint64_t token, id;
    rayaccel_status status;
    std::vector<std::array<uint64_t, 3>> ranges;  // region, offset, length
    std::vector<uint64_t> to;  // a copied chunk: each range's address in the reader
  };
  std::vector<BatchServe> batch_gets;
  std::vector<Request*> ready_notifications;  // their barrier passed: send them
  // Staged groups with a piece ended in a UCX callback: their next pieces go out after
  // progress returns (IssueReadyGroups), as replies do, never from inside a callback.
  std::vector<Request*> ready_groups;
  // Request rings: how many this owner serves, those stopped and not yet joined, and how many
  // of this reader's requests wait on an owner's ring.
  uint32_t rings = 0;
  std::vector<std::unique_ptr<RingOwner>> stopped_rings;
  // Host regions published to readers with rings (same_host_regions.h): made with the first
  // host region while the same-host paths are on; null otherwise.
  std::unique_ptr<PublishedRegions> published;
  uint32_t ring_waiting = 0;

  peers::NotificationQueue notifications;
  peers::EventCount refused;    // peers refused, for the log
  uint64_t dropped_strays = 0;  // data messages from no admitted peer
  peers::EventCount malformed;  // messages of the wrong shape, for the log
  std::chrono::steady_clock::time_point next_heartbeat;
  uint64_t activity = 0;  // bumped by every callback, so `wait` can tell something happened
  std::condition_variable progressed;  // the progress thread saw activity: `wait` looks again

  // Answers peers while the application is not calling in: handshakes, heartbeats, reads and
  // writes to serve, notifications. Asleep on UCX's event fds until something arrives.
  std::thread progress;
  int stop_fd = -1;  // eventfd that ends the progress thread
};

using Ep = Endpoint;
using Conn = Connection;
using Peer = Ep::Peer;

// The host's handles as the helper's own (every handle the host passes came from this helper,
// or from a plugin's dispatch by its `helper`).
inline Ep* Of(rayaccel_transport_endpoint* h) { return static_cast<Ep*>(h); }
inline Region* Of(rayaccel_memory_region* h) { return static_cast<Region*>(h); }
inline Conn* Of(rayaccel_connection* h) { return static_cast<Conn*>(h); }
inline Request* Of(rayaccel_request* h) { return static_cast<Request*>(h); }

constexpr int kLocal = 0;           // ep->fabrics[kLocal]: UCX's self (and shared memory if named)
constexpr int kNetwork = 1;         // ep->fabrics[kNetwork]: TCP, RDMA, peers anywhere
constexpr size_t kMaxPeers = 4096;  // admitted readers per endpoint

inline void LogTo(const Ep* ep, rayaccel_log_level level, const std::string& text) {
  Log(ep->options.host, level, "ucx transport: " + text);
}

inline milliseconds PeerTimeout(const Ep* ep) { return milliseconds(ep->peer_timeout_ms); }
inline Clock::time_point PeerDeadline(const Ep* ep) { return Clock::now() + PeerTimeout(ep); }
inline milliseconds HeartbeatInterval(const Ep* ep) {
  return peers::HeartbeatInterval(PeerTimeout(ep));
}

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_HANDLES_H_
