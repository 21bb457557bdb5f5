// The libfabric helper's handles: operations, channels, regions, requests, connections (the
// reader's side), peers (the owner's side) and the endpoint. Every field is guarded by the
// endpoint's `mu`, but for the endpoint's atomic `stop`.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_HANDLES_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_HANDLES_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/ofi/fi.h"
#include "common/ofi/wire.h"
#include "common/ofi_transport.h"
#include "common/plugin_util.h"
#include "common/transport_args.h"
#include "common/transport_handles.h"
#include "common/transport_peers.h"

namespace rayaccel::plugin::ofi {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kListenReceives = 64;   // posted on the listener (hellos)
constexpr size_t kChannelReceives = 32;  // posted on each connection's channel
constexpr size_t kMaxPeers = 1024;       // admitted readers per endpoint (a channel each)
constexpr int kCompletionsPerRead = 16;

struct Endpoint;
struct Connection;
struct Region;
struct Request;
struct Peer;
const rayaccel_transport_api* Hooks();

struct Channel;

// One operation posted to libfabric; its context. fi_context2 first: the provider may use it
// (FI_CONTEXT2 mode). Freed when its completion is read, or when its channel closes.
struct Op {
  fi_context2 context{};
  enum class Kind { kReceive, kSend, kRma } kind = Kind::kReceive;
  Channel* channel = nullptr;
  std::string bytes;  // a send's message, a receive's buffer
  // An RMA: the request it counts in, the entry of a batch, the peer region it touches and
  // the local one it uses.
  Request* request = nullptr;
  uint32_t entry = 0;
  uint64_t remote_region = 0;
  Region* local = nullptr;
  uint64_t length = 0;
  // What posting it takes (an RMA): fi_read or fi_write, the local bytes and their
  // registration's descriptor, and the peer's address and key.
  bool read = false;
  void* at = nullptr;
  void* desc = nullptr;
  uint64_t remote_address = 0, rkey = 0;
};

// A libfabric endpoint with its own completion queue and address vector. One per connection
// on each side, and a listener per endpoint for hellos: closing a channel ends every
// operation posted on it, so a peer declared lost can neither complete nor continue one.
struct Channel {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;   // the other side, once known
  std::string address;               // this channel's fabric address
  std::set<Op*> ops;                 // posted or deferred, not completed
  std::deque<Op*> deferred;          // the provider could not take them yet (FI_EAGAIN)
  Connection* connection = nullptr;  // the reader's side of a connection
  Peer* peer_record = nullptr;       // the owner's side
  bool listener = false;
  bool retired = false;  // its connection ended: it only drains
  int wait_fd = -1;      // readable when the provider has something to progress; -1: none
  // Removing the peer's address ends the provider's connection to it (rxm); a provider
  // without connections may still hear from the peer, and shm crashed on such a message.
  bool remove_peer = false;
};

struct Region : rayaccel_memory_region {
  Region() { helper = Hooks(); }
  Endpoint* endpoint = nullptr;
  uint64_t id = 0;
  void* base = nullptr;
  uint64_t length = 0;
  bool owned = false;  // allocated by the helper
  fid_mr* mr = nullptr;
  uint64_t key = 0;
  void* desc = nullptr;
  uint32_t local_uses = 0;  // RMA operations in flight with this region as their local side
  std::string descriptor;
};

struct Request : rayaccel_request {
  Request() { helper = Hooks(); }
  enum class Kind { kTransfer, kFlush, kNotify } kind = Kind::kTransfer;
  Endpoint* endpoint = nullptr;
  Connection* connection = nullptr;  // null once the connection has gone
  uint64_t id = 0;                   // a transfer's number on its connection
  uint64_t mark = 0;                 // a flush or notification: waits for transfers below it
  uint32_t running = 0;              // operations and lookups outstanding
  bool held = false;                 // the call that made it is still issuing
  bool done = false;
  bool abandoned = false;
  rayaccel_status status = RAYACCEL_STATUS_OK;
  std::string why;
  // A batch: each entry's outcome, copied to the host's array by the poll that ends it.
  bool batch = false;
  std::vector<rayaccel_status> entry_status;
  rayaccel_status* statuses_out = nullptr;
  std::string payload;  // a notification's bytes
};

// A transfer waiting for the owner to say what a region is.
struct Pending {
  Request* request;
  uint32_t entry;
  rayaccel_transfer_op op;
  Region* local;
  uint64_t local_offset, remote_offset, length;
};

// A peer's region as its owner described it to this connection.
struct Remote {
  enum class State { kAsking, kKnown, kGone } state = State::kAsking;
  rayaccel_status gone = RAYACCEL_STATUS_STALE;  // kGone: why
  std::string why;
  uint64_t length = 0, key = 0, address = 0;
  uint32_t in_flight = 0;  // RMA operations on it
  bool confirm = false;    // revoked: tell the owner once in_flight is 0
  std::vector<Pending> waiting;
};

// The reader's side.
struct Connection : rayaccel_connection {
  Connection() { helper = Hooks(); }
  using State = peers::HandshakeState;
  State state = State::kHello;
  Endpoint* endpoint = nullptr;
  std::unique_ptr<Channel> channel;  // null once closed
  uint64_t token = 0;
  uint64_t peer_uuid = 0;
  Nonce nonce{};
  rayaccel_status failure = RAYACCEL_STATUS_OK;  // once set, the connection is dead for good
  std::string failure_text;
  Clock::time_point last_heard;
  uint64_t next_id = 1;
  std::map<uint64_t, Request*> transfers;  // in flight, by number
  std::vector<Request*> barriers;          // flushes and notifications waiting
  std::map<uint64_t, Remote> remotes;      // by the owner's region id
};

// The owner's side: one per reader that said hello.
struct Peer {
  uint64_t token = 0, uuid = 0;
  std::unique_ptr<Channel> channel;
  Nonce reader_nonce{}, owner_nonce{};
  bool admitted = false;
  Clock::time_point deadline;     // the handshake's, then the heartbeat's
  std::set<uint64_t> looked_up;   // regions it was told the key of
  std::set<uint64_t> to_confirm;  // revoked regions it has not confirmed
};

struct Endpoint : rayaccel_transport_endpoint {
  Endpoint() { helper = Hooks(); }
  std::mutex mu;  // held around this endpoint's libfabric calls
  EndpointOptions options;
  std::string key;
  uint64_t uuid = 0;
  uint32_t peer_timeout_ms = 0;
  std::shared_ptr<Domain> shared;  // info, fabric and domain below are its
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  std::unique_ptr<Channel> listener;
  std::string provider;
  bool virtual_addresses = false;               // FI_MR_VIRT_ADDR: RMA names addresses, not offsets
  bool provider_keys = false;                   // FI_MR_PROV_KEY
  uint64_t key_mask = ~0ull;                    // the provider's key size
  uint64_t max_rma = 0;                         // the most one fi_read or fi_write moves
  peers::RegionTable<Region> regions;           // the owner's live regions: what it looks up
  std::map<uint64_t, Connection*> connections;  // by token
  std::map<uint64_t, std::unique_ptr<Peer>> peers;  // by the reader's token
  std::set<Request*> requests;
  peers::NotificationQueue notifications;
  peers::EventCount refused;    // peers refused, for the log
  peers::EventCount malformed;  // messages dropped, for the log
  Clock::time_point next_heartbeat;
  uint64_t activity = 0;
  // Channels whose connection ended, drained before they close (rxm crashed closing an
  // endpoint with transfers still queued to a stopped peer); kept alive, too, while a loop
  // handling their completions may still be running.
  std::vector<std::unique_ptr<Channel>> retired;
  std::thread progress;
  std::atomic<bool> stop{false};
  int stop_fd = -1;  // eventfd that wakes the progress thread to stop
};

inline Endpoint* Of(rayaccel_transport_endpoint* h) { return static_cast<Endpoint*>(h); }
inline Region* Of(rayaccel_memory_region* h) { return static_cast<Region*>(h); }
inline Connection* Of(rayaccel_connection* h) { return static_cast<Connection*>(h); }
inline Request* Of(rayaccel_request* h) { return static_cast<Request*>(h); }

inline void LogTo(const Endpoint* ep, rayaccel_log_level level, const std::string& text) {
  Log(ep->options.host, level, "libfabric transport: " + text);
}

inline milliseconds PeerTimeout(const Endpoint* ep) { return milliseconds(ep->peer_timeout_ms); }

inline milliseconds HeartbeatInterval(const Endpoint* ep) {
  return peers::HeartbeatInterval(PeerTimeout(ep));
}

inline void NoteMalformed(Endpoint* ep, const std::string& what) {
  if (ep->malformed.Count()) {
    LogTo(ep, RAYACCEL_LOG_WARN, peers::MalformedLine(what, ep->malformed.count()));
  }
}

inline void NoteRefused(Endpoint* ep, const std::string& why) {
  if (ep->refused.Count()) {
    LogTo(ep, RAYACCEL_LOG_WARN, peers::RefusedLine(why, ep->refused.count()));
  }
}

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_HANDLES_H_
