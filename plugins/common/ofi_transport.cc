#include "ofi_transport.h"

#include <dlfcn.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "plugin_util.h"
#include "transport_args.h"
#include "transport_handles.h"
#include "transport_wire.h"

namespace rayaccel::plugin::ofi {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using wire::Mac;
using wire::MacOf;
using wire::Nonce;
using wire::Prove;
using wire::RandomId;
using wire::RandomNonce;
using wire::Reader;
using wire::SameMac;
using wire::Writer;

// ---------------------------------------------------------------------------------------
// libfabric, loaded when the first endpoint opens. Only these functions are exported symbols;
// the rest of its API (fi_domain, fi_read, fi_cq_read, ...) are inline calls through the
// objects' operation tables. Each is bound at the symbol version this header's structs match
// (FABRIC_1.3 for fi_info), so a newer libfabric cannot hand us a struct of another layout.

struct Fi {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**);
  void (*freeinfo)(fi_info*);
  fi_info* (*dupinfo)(const fi_info*);
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*);
  const char* (*strerror)(int);
};

struct LoadedFi {
  std::mutex mu;
  void* handle = nullptr;
  std::string library;
  std::string problem;  // why it did not load
  Fi fi{};
};

LoadedFi& Loaded() {
  // Never destroyed: endpoints' threads may outlive static destruction at exit.
  static LoadedFi* loaded = new LoadedFi;
  return *loaded;
}

template <typename F>
bool Bind(void* handle, const char* name, const char* version, F* out) {
  *out = reinterpret_cast<F>(dlvsym(handle, name, version));
  return *out != nullptr;
}

const Fi* LoadFi(const std::string& wanted, rayaccel_status* status, std::string* why) {
  LoadedFi& l = Loaded();
  std::lock_guard<std::mutex> lock(l.mu);
  const std::string name = wanted.empty() ? "libfabric.so.1" : wanted;
  if (l.handle != nullptr) {
    if (name == l.library) return &l.fi;
    *status = RAYACCEL_STATUS_INVALID_ARGUMENT;
    *why = "this process loaded " + l.library + " already; an endpoint cannot use " + name;
    return nullptr;
  }
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    const char* e = dlerror();
    *why = "libfabric is not installed (" + std::string(e != nullptr ? e : name) + ")";
    return nullptr;
  }
  Fi fi{};
  if (!Bind(handle, "fi_getinfo", "FABRIC_1.3", &fi.getinfo) ||
      !Bind(handle, "fi_freeinfo", "FABRIC_1.3", &fi.freeinfo) ||
      !Bind(handle, "fi_dupinfo", "FABRIC_1.3", &fi.dupinfo) ||
      !Bind(handle, "fi_fabric", "FABRIC_1.1", &fi.fabric) ||
      !Bind(handle, "fi_strerror", "FABRIC_1.0", &fi.strerror)) {
    dlclose(handle);
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    *why = name + " is not a libfabric of API 1.3 or later (fi_getinfo@FABRIC_1.3 is missing)";
    return nullptr;
  }
  l.handle = handle;
  l.library = name;
  l.fi = fi;
  return &l.fi;
}

const Fi& Lib() { return Loaded().fi; }

std::string ErrorText(ssize_t code) {
  const int c = static_cast<int>(code < 0 ? -code : code);
  return std::string(Lib().strerror(c)) + " (" + std::to_string(c) + ")";
}

// A libfabric error as the ABI's status: a peer that went away, or something of ours.
rayaccel_status FromFi(ssize_t code) {
  switch (static_cast<int>(code < 0 ? -code : code)) {
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_ETIMEDOUT:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_EADDRNOTAVAIL:
    case FI_ECANCELED:
    case FI_EIO:
      return RAYACCEL_STATUS_PEER_LOST;
    case FI_EACCES:
    case FI_EKEYREJECTED:
    case FI_EINVAL:
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    case FI_ENOMEM:
    case FI_ENOSPC:
      return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
      return RAYACCEL_STATUS_UNSUPPORTED;
    default:
      return RAYACCEL_STATUS_INTERNAL;
  }
}

// ---------------------------------------------------------------------------------------
// The wire (docs/transport.md, "The libfabric helper"). Little-endian.

constexpr uint32_t kAddressMagic = 0x4149464f;     // "OFIA"
constexpr uint32_t kDescriptorMagic = 0x5249464f;  // "OFIR"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kDescriptorBytes = 32;
constexpr size_t kMaxFabricAddress = 512;
constexpr size_t kMaxProviderName = 64;

enum MessageType : uint16_t {
  kHello = 1,          // reader -> owner's listener: who I am, a nonce, where to answer; signed
  kChallenge = 2,      // owner -> reader: its nonce, its proof, the channel that serves it; signed
  kProof = 3,          // reader -> owner: the reader's proof
  kWelcome = 4,        // owner -> reader: admitted
  kRefused = 5,        // owner -> reader: not admitted (a reason)
  kLookup = 6,         // reader -> owner: a region's id
  kLookupReply = 7,    // owner -> reader: the region's status, length, key and address
  kRevoke = 8,         // owner -> reader: the region is going; stop and confirm
  kRevoked = 9,        // reader -> owner: nothing of mine touches it any more
  kNotification = 10,  // either way: a notification's bytes
  kPing = 11,          // reader -> owner: heartbeat
  kPong = 12,          // owner -> reader: heartbeat
  kBye = 13,           // either way: this connection is closed (or was declared lost)
};
enum RefusedReason : uint32_t { kWrongKey = 1, kTooMany = 2 };

constexpr char kOwnerRole[] = "rayaccel libfabric transport v1: owner";
constexpr char kReaderRole[] = "rayaccel libfabric transport v1: reader";
constexpr char kAddressLabel[] = "rayaccel libfabric transport v1: address";
constexpr char kHelloLabel[] = "rayaccel libfabric transport v1: hello";
constexpr char kChallengeLabel[] = "rayaccel libfabric transport v1: challenge";

// Messages are small: the largest is a notification (RAYACCEL_TRANSPORT_MAX_NOTIFICATION)
// or a hello with its fabric address.
constexpr size_t kMessageBytes = 4096;
constexpr size_t kListenReceives = 64;   // posted on the listener (hellos)
constexpr size_t kChannelReceives = 32;  // posted on each connection's channel
constexpr size_t kMaxQueuedNotifications = 65536;
constexpr size_t kMaxPeers = 1024;     // admitted readers per endpoint (a channel each)
constexpr size_t kMaxHandshakes = 64;  // readers between hello and proof
constexpr int kCompletionsPerRead = 16;

// ---------------------------------------------------------------------------------------
// The helper's handles.

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
  enum class State { kHello, kProven, kWelcomed } state = State::kHello;
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

// A provider's fabric and domain, shared by every endpoint of the process that chose it: one
// domain per process is what providers expect (shm, for one, named endpoints of two domains
// alike), and it costs nothing.
struct Domain {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  ~Domain() {
    if (domain != nullptr) fi_close(&domain->fid);
    if (fabric != nullptr) fi_close(&fabric->fid);
    if (info != nullptr) Lib().freeinfo(info);
  }
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
  bool virtual_addresses = false;  // FI_MR_VIRT_ADDR: RMA names addresses, not offsets
  bool provider_keys = false;      // FI_MR_PROV_KEY
  uint64_t key_mask = ~0ull;       // the provider's key size
  uint64_t max_rma = 0;            // the most one fi_read or fi_write moves
  uint64_t next_region_id = 1;
  std::map<uint64_t, Region*> regions;
  std::map<uint64_t, Connection*> connections;      // by token
  std::map<uint64_t, std::unique_ptr<Peer>> peers;  // by the reader's token
  std::set<Request*> requests;
  std::deque<std::string> notifications;
  uint64_t dropped_notifications = 0;
  uint64_t refused = 0;
  uint64_t malformed = 0;
  Clock::time_point refused_logged, malformed_logged, next_heartbeat;
  uint64_t activity = 0;
  // Channels whose connection ended, drained before they close (rxm crashed closing an
  // endpoint with transfers still queued to a stopped peer); kept alive, too, while a loop
  // handling their completions may still be running.
  std::vector<std::unique_ptr<Channel>> retired;
  std::thread progress;
  std::atomic<bool> stop{false};
  int stop_fd = -1;  // eventfd that wakes the progress thread to stop
};

Endpoint* Of(rayaccel_transport_endpoint* h) { return static_cast<Endpoint*>(h); }
Region* Of(rayaccel_memory_region* h) { return static_cast<Region*>(h); }
Connection* Of(rayaccel_connection* h) { return static_cast<Connection*>(h); }
Request* Of(rayaccel_request* h) { return static_cast<Request*>(h); }

void LogTo(const Endpoint* ep, rayaccel_log_level level, const std::string& text) {
  Log(ep->options.host, level, "libfabric transport: " + text);
}

milliseconds PeerTimeout(const Endpoint* ep) { return milliseconds(ep->peer_timeout_ms); }

milliseconds HeartbeatInterval(const Endpoint* ep) {
  return std::clamp(PeerTimeout(ep) / 4, milliseconds(10), milliseconds(1000));
}

// Logs the first of a kind, then at most one line a minute with the count.
bool CountAndLog(uint64_t* count, Clock::time_point* logged) {
  ++*count;
  const auto now = Clock::now();
  if (*count > 1 && now - *logged < std::chrono::minutes(1)) return false;
  *logged = now;
  return true;
}

void NoteMalformed(Endpoint* ep, const std::string& what) {
  if (CountAndLog(&ep->malformed, &ep->malformed_logged)) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          "dropped a message: " + what + " (" + std::to_string(ep->malformed) + " so far)");
  }
}

void NoteRefused(Endpoint* ep, const std::string& why) {
  if (CountAndLog(&ep->refused, &ep->refused_logged)) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          "refused a peer: " + why + " (" + std::to_string(ep->refused) + " so far)");
  }
}

// ---------------------------------------------------------------------------------------
// Channels.

void CloseFid(fid_t f) {
  if (f != nullptr) fi_close(f);
}

// Closes a channel's libfabric objects; every operation still posted on it is over, so its
// records go (an RMA's request is told by the caller, who failed the connection first).
void CloseChannel(Channel* ch) {
  if (ch == nullptr) return;
  // The peer's address goes first: rxm then closes its connection and ends what is queued on
  // it (closing an endpoint with transfers queued to a stopped peer crashed inside rxm).
  if (ch->remove_peer && ch->av != nullptr && ch->peer != FI_ADDR_UNSPEC) {
    fi_addr_t peer = ch->peer;
    fi_av_remove(ch->av, &peer, 1, 0);
    ch->peer = FI_ADDR_UNSPEC;
  }
  CloseFid(ch->ep != nullptr ? &ch->ep->fid : nullptr);
  CloseFid(ch->av != nullptr ? &ch->av->fid : nullptr);
  CloseFid(ch->cq != nullptr ? &ch->cq->fid : nullptr);
  ch->ep = nullptr, ch->av = nullptr, ch->cq = nullptr;
  ch->deferred.clear();
  for (Op* op : ch->ops) {
    if (op->kind == Op::Kind::kRma && op->local != nullptr) --op->local->local_uses;
    delete op;
  }
  ch->ops.clear();
}

// Ends a channel's connection: the peer's address goes (rxm closes its connection to it, so
// nothing more moves), its operations are no request's any more, and it closes once they
// have come back (ProgressAll).
void Retire(Endpoint* ep, std::unique_ptr<Channel> ch) {
  if (ch == nullptr) return;
  ch->connection = nullptr;
  ch->peer_record = nullptr;
  ch->retired = true;
  for (Op* op : ch->deferred) {
    if (op->local != nullptr) --op->local->local_uses;
    ch->ops.erase(op);
    delete op;
  }
  ch->deferred.clear();
  for (Op* op : ch->ops) op->request = nullptr;
  if (ch->remove_peer && ch->av != nullptr && ch->peer != FI_ADDR_UNSPEC) {
    fi_addr_t peer = ch->peer;
    fi_av_remove(ch->av, &peer, 1, 0);
    ch->peer = FI_ADDR_UNSPEC;
  }
  ep->retired.push_back(std::move(ch));
}

ssize_t PostReceive(Channel* ch) {
  auto* op = new Op;
  op->kind = Op::Kind::kReceive;
  op->channel = ch;
  op->bytes.resize(kMessageBytes);
  ssize_t rc =
      fi_recv(ch->ep, op->bytes.data(), op->bytes.size(), nullptr, FI_ADDR_UNSPEC, &op->context);
  if (rc != 0) {
    delete op;
    return rc;
  }
  ch->ops.insert(op);
  return 0;
}

std::unique_ptr<Channel> OpenChannel(Endpoint* ep, size_t receives, std::string* why) {
  auto ch = std::make_unique<Channel>();
  ch->remove_peer = ep->provider.find("ofi_rxm") != std::string::npos;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.wait_obj = FI_WAIT_FD;  // so that the progress thread can sleep until work comes
  cq_attr.size = 1024;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_MAP;
  av_attr.count = 4;
  int rc = fi_cq_open(ep->domain, &cq_attr, &ch->cq, nullptr);
  if (rc != 0) {  // a provider without wait objects: polled
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(ep->domain, &cq_attr, &ch->cq, nullptr);
  } else if (fi_control(&ch->cq->fid, FI_GETWAIT, &ch->wait_fd) != 0) {
    ch->wait_fd = -1;
  }
  if (rc == 0) rc = fi_av_open(ep->domain, &av_attr, &ch->av, nullptr);
  if (rc == 0) rc = fi_endpoint(ep->domain, ep->info, &ch->ep, nullptr);
  if (rc == 0) rc = fi_ep_bind(ch->ep, &ch->cq->fid, FI_TRANSMIT | FI_RECV);
  if (rc == 0) rc = fi_ep_bind(ch->ep, &ch->av->fid, 0);
  if (rc == 0) rc = fi_enable(ch->ep);
  if (rc == 0) {
    char name[kMaxFabricAddress];
    size_t length = sizeof(name);
    rc = fi_getname(&ch->ep->fid, name, &length);
    if (rc == 0) ch->address.assign(name, length);
  }
  for (size_t i = 0; rc == 0 && i < receives; ++i) rc = static_cast<int>(PostReceive(ch.get()));
  if (rc != 0) {
    *why = "opening a libfabric endpoint on " + ep->provider + ": " + ErrorText(rc);
    CloseChannel(ch.get());
    return nullptr;
  }
  return ch;
}

// Inserts the other side's fabric address (already verified under the key).
bool SetPeer(Channel* ch, const std::string& address, std::string* why) {
  fi_addr_t at = FI_ADDR_UNSPEC;
  int n = fi_av_insert(ch->av, address.data(), 1, &at, 0, nullptr);
  if (n != 1) {
    *why = "the peer's fabric address does not insert (" + ErrorText(n < 0 ? n : FI_EINVAL) + ")";
    return false;
  }
  ch->peer = at;
  return true;
}

void ProgressChannel(Endpoint* ep, Channel* ch);

ssize_t TryPost(Channel* ch, Op* op) {
  if (op->kind == Op::Kind::kSend) {
    return fi_send(ch->ep, op->bytes.data(), op->bytes.size(), nullptr, ch->peer, &op->context);
  }
  return op->read ? fi_read(ch->ep, op->at, op->length, op->desc, ch->peer, op->remote_address,
                            op->rkey, &op->context)
                  : fi_write(ch->ep, op->at, op->length, op->desc, ch->peer, op->remote_address,
                             op->rkey, &op->context);
}

// Posts a send or an RMA. One the provider cannot take now (FI_EAGAIN: a connection still
// being made, a full queue) waits in the channel's queue, in order, for the next progress.
// 0: the channel owns the operation; otherwise the caller still does, and the error says why.
ssize_t Post(Channel* ch, Op* op) {
  if (ch == nullptr || ch->ep == nullptr || ch->peer == FI_ADDR_UNSPEC) return -FI_ENOTCONN;
  op->channel = ch;
  if (ch->deferred.empty()) {
    const ssize_t rc = TryPost(ch, op);
    if (rc != 0 && rc != -FI_EAGAIN) return rc;
    if (rc == 0) {
      ch->ops.insert(op);
      return 0;
    }
  }
  ch->ops.insert(op);
  ch->deferred.push_back(op);
  return 0;
}

// Sends one message; its bytes live in the operation until it completes.
bool SendOn(Endpoint* /*ep*/, Channel* ch, std::string bytes) {
  auto* op = new Op;
  op->kind = Op::Kind::kSend;
  op->bytes = std::move(bytes);
  if (Post(ch, op) == 0) return true;
  delete op;
  return false;
}

std::string Header(MessageType type, uint64_t token) {
  Writer w;
  w.U16(type).U16(kWireVersion).U64(token);
  return std::move(w.str());
}

// ---------------------------------------------------------------------------------------
// Requests.

void MaybeFree(Request* r) {
  if (r->done && r->abandoned) {
    r->endpoint->requests.erase(r);
    delete r;
  }
}

void CheckBarriers(Connection* c);

void Complete(Request* r, rayaccel_status status, const std::string& why) {
  if (r->done) return;
  if (r->status == RAYACCEL_STATUS_OK && status != RAYACCEL_STATUS_OK) {
    r->status = status;
    r->why = why;
  }
  if (r->running > 0 || r->held) return;
  r->done = true;
  ++r->endpoint->activity;
  Connection* c = r->connection;
  r->connection = nullptr;
  if (c != nullptr && r->kind == Request::Kind::kTransfer) {
    c->transfers.erase(r->id);
    CheckBarriers(c);
  }
  MaybeFree(r);
}

// One entry (or the whole of a single transfer) ended.
void EntryDone(Request* r, uint32_t entry, rayaccel_status status, const std::string& why) {
  if (r->batch && entry < r->entry_status.size() && status != RAYACCEL_STATUS_OK &&
      r->entry_status[entry] == RAYACCEL_STATUS_OK) {
    r->entry_status[entry] = status;
  }
  if (r->running > 0) --r->running;
  Complete(r, status, why);
}

void SendNotification(Connection* c, Request* r) {
  Endpoint* ep = c->endpoint;
  std::string m = Header(kNotification, c->token);
  m += r->payload;
  const bool sent = c->channel != nullptr && SendOn(ep, c->channel.get(), std::move(m));
  Complete(r, sent ? RAYACCEL_STATUS_OK : RAYACCEL_STATUS_PEER_LOST,
           sent ? "" : "the notification could not be sent");
}

// Flushes and notifications whose earlier transfers have all landed.
void CheckBarriers(Connection* c) {
  while (!c->barriers.empty()) {
    Request* b = c->barriers.front();
    if (!c->transfers.empty() && c->transfers.begin()->first < b->mark) return;
    c->barriers.erase(c->barriers.begin());
    if (b->kind == Request::Kind::kNotify && c->failure == RAYACCEL_STATUS_OK) {
      SendNotification(c, b);
    } else {
      Complete(b, c->failure, c->failure_text);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Connections (the reader's side).

void SendRevoked(Connection* c, uint64_t region) {
  Writer w;
  w.Bytes(Header(kRevoked, c->token).data(), 12).U64(region);
  SendOn(c->endpoint, c->channel.get(), std::move(w.str()));
}

// The connection is dead for good: everything on it fails with `status`; its channel closes,
// which ends every operation posted on it.
void FailConnection(Connection* c, rayaccel_status status, const std::string& why) {
  if (c->failure != RAYACCEL_STATUS_OK) return;
  Endpoint* ep = c->endpoint;
  c->failure = status;
  c->failure_text = why;
  if (c->channel != nullptr) {
    // Operations posted on the channel end with it: count them off their requests.
    std::vector<std::pair<Request*, uint32_t>> ended;
    for (Op* op : c->channel->ops) {
      if (op->kind == Op::Kind::kRma && op->request != nullptr) {
        ended.push_back({op->request, op->entry});
      }
    }
    Retire(ep, std::move(c->channel));
    for (auto [r, entry] : ended) EntryDone(r, entry, status, why);
  }
  for (auto& [id, remote] : c->remotes) {
    for (const Pending& p : remote.waiting) EntryDone(p.request, p.entry, status, why);
    remote.waiting.clear();
  }
  // Transfers not yet ended (their operations were never posted) fail too.
  std::vector<Request*> open;
  for (auto& [id, r] : c->transfers) open.push_back(r);
  for (Request* r : open) {
    r->running = 0;
    if (r->batch) {
      for (auto& s : r->entry_status) {
        if (s == RAYACCEL_STATUS_OK) s = status;
      }
    }
    Complete(r, status, why);
  }
  CheckBarriers(c);
  ++ep->activity;
}

void PostRma(Connection* c, const Pending& p, Remote* remote, uint64_t region_id);

// Starts a transfer once the owner has described its region; or fails it where the owner
// says the region is gone, or the range lies outside what the owner holds.
void Issue(Connection* c, const Pending& p, uint64_t region_id) {
  if (c->failure != RAYACCEL_STATUS_OK) {
    EntryDone(p.request, p.entry, c->failure, c->failure_text);
    return;
  }
  auto it = c->remotes.find(region_id);
  Remote& remote = it->second;
  if (remote.state == Remote::State::kGone) {
    EntryDone(p.request, p.entry, remote.gone, remote.why);
    return;
  }
  if (remote.state == Remote::State::kAsking) {
    remote.waiting.push_back(p);
    return;
  }
  if (p.remote_offset > remote.length || p.length > remote.length - p.remote_offset) {
    EntryDone(p.request, p.entry, RAYACCEL_STATUS_INVALID_ARGUMENT,
              "the range lies outside the region the owner holds (" +
                  std::to_string(remote.length) + " bytes)");
    return;
  }
  PostRma(c, p, &remote, region_id);
}

// Posts a transfer's fi_read or fi_write, in pieces of at most max_rma bytes.
void PostRma(Connection* c, const Pending& p, Remote* remote, uint64_t region_id) {
  Endpoint* ep = c->endpoint;
  Channel* ch = c->channel.get();
  Request* r = p.request;
  uint64_t done = 0;
  // The entry counts once in `running` already; each further piece adds one.
  bool first = true;
  while (done < p.length) {
    const uint64_t n = std::min<uint64_t>(p.length - done, ep->max_rma);
    auto* op = new Op;
    op->kind = Op::Kind::kRma;
    op->request = r;
    op->entry = p.entry;
    op->remote_region = region_id;
    op->local = p.local;
    op->length = n;
    op->read = p.op == RAYACCEL_TRANSFER_READ;
    op->at = static_cast<char*>(p.local->base) + p.local_offset + done;
    op->desc = p.local->desc;
    op->remote_address = remote->address + p.remote_offset + done;
    op->rkey = remote->key;
    const ssize_t rc = Post(ch, op);
    if (rc != 0) {
      delete op;
      const std::string why = std::string(p.op == RAYACCEL_TRANSFER_READ ? "fi_read" : "fi_write") +
                              ": " + ErrorText(rc);
      if (first) {
        EntryDone(r, p.entry, FromFi(rc), why);
      } else {
        FailConnection(c, FromFi(rc), why);
      }
      return;
    }
    if (!first) ++r->running;
    first = false;
    ++remote->in_flight;
    ++p.local->local_uses;
    done += n;
  }
}

void OnLookupReply(Connection* c, Reader& in) {
  const uint64_t region = in.U64();
  const uint32_t status = in.U32();
  const uint64_t length = in.U64(), key = in.U64(), address = in.U64();
  if (!in.at_end()) return NoteMalformed(c->endpoint, "a lookup reply of another length");
  auto it = c->remotes.find(region);
  if (it == c->remotes.end() || it->second.state != Remote::State::kAsking) {
    return NoteMalformed(c->endpoint, "a lookup reply nobody asked for");
  }
  Remote& remote = it->second;
  if (status == RAYACCEL_STATUS_OK) {
    remote.state = Remote::State::kKnown;
    remote.length = length, remote.key = key, remote.address = address;
  } else {
    remote.state = Remote::State::kGone;
    remote.gone =
        status == RAYACCEL_STATUS_STALE ? RAYACCEL_STATUS_STALE : RAYACCEL_STATUS_INVALID_ARGUMENT;
    remote.why = remote.gone == RAYACCEL_STATUS_STALE ? "the peer deregistered the region"
                                                      : "the owner holds no such region";
  }
  std::vector<Pending> waiting = std::move(remote.waiting);
  remote.waiting.clear();
  for (const Pending& p : waiting) Issue(c, p, region);
}

void OnRevoke(Connection* c, Reader& in) {
  const uint64_t region = in.U64();
  if (!in.at_end()) return NoteMalformed(c->endpoint, "a revoke of another length");
  Remote& remote = c->remotes[region];
  // Later transfers naming it fail STALE here; ones waiting for a lookup too.
  std::vector<Pending> waiting = std::move(remote.waiting);
  remote.waiting.clear();
  remote.state = Remote::State::kGone;
  remote.gone = RAYACCEL_STATUS_STALE;
  remote.why = "the peer deregistered the region";
  for (const Pending& p : waiting) EntryDone(p.request, p.entry, remote.gone, remote.why);
  if (remote.in_flight == 0) {
    SendRevoked(c, region);
  } else {
    remote.confirm = true;
  }
}

// A notification's bytes, for get_notifications (the newest dropped while the queue is full).
void QueueNotification(Endpoint* ep, Reader& in) {
  const size_t n = in.left();
  if (n == 0 || n > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) {
    return NoteMalformed(ep, "a notification of " + std::to_string(n) + " bytes");
  }
  const uint8_t* bytes = in.Bytes(n);
  if (ep->notifications.size() >= kMaxQueuedNotifications) {
    if (ep->dropped_notifications++ == 0) {
      LogTo(ep, RAYACCEL_LOG_WARN, "notification queue full: dropping new ones");
    }
    return;
  }
  ep->notifications.emplace_back(reinterpret_cast<const char*>(bytes), n);
  ++ep->activity;
}

void OnConnectionMessage(Connection* c, uint16_t type, Reader& in) {
  Endpoint* ep = c->endpoint;
  c->last_heard = Clock::now();
  switch (type) {
    case kChallenge: {
      if (c->state != Connection::State::kHello) return NoteMalformed(ep, "a second challenge");
      const uint64_t owner = in.U64();
      const Nonce owner_nonce = in.Array<16>();
      const Mac proof = in.Array<32>();
      const uint32_t n = in.U32();
      const uint8_t* address = in.Bytes(n <= kMaxFabricAddress ? n : SIZE_MAX);
      const Mac signature = in.Array<32>();
      if (!in.at_end()) return NoteMalformed(ep, "a challenge of another shape");
      // The bytes before the signature, as the owner signed them.
      Writer w;
      w.Bytes(Header(kChallenge, c->token).data(), 12).U64(owner);
      w.Bytes(owner_nonce.data(), owner_nonce.size()).Bytes(proof.data(), proof.size());
      w.U32(n).Bytes(address, n);
      if (owner != c->peer_uuid ||
          !SameMac(proof,
                   Prove(ep->key, kOwnerRole, c->token, ep->uuid, owner, c->nonce, owner_nonce)) ||
          !SameMac(signature, MacOf(ep->key, kChallengeLabel, w.str()))) {
        return FailConnection(c, RAYACCEL_STATUS_UNAUTHENTICATED,
                              "the peer did not prove the transport key");
      }
      std::string why;
      if (!SetPeer(c->channel.get(), std::string(reinterpret_cast<const char*>(address), n),
                   &why)) {
        return FailConnection(c, RAYACCEL_STATUS_INVALID_ARGUMENT, why);
      }
      Writer reply;
      const Mac mine =
          Prove(ep->key, kReaderRole, c->token, ep->uuid, owner, c->nonce, owner_nonce);
      reply.Bytes(Header(kProof, c->token).data(), 12).Bytes(mine.data(), mine.size());
      SendOn(ep, c->channel.get(), std::move(reply.str()));
      c->state = Connection::State::kProven;
      return;
    }
    case kWelcome:
      if (c->state != Connection::State::kProven) return NoteMalformed(ep, "an early welcome");
      c->state = Connection::State::kWelcomed;
      ++ep->activity;
      return;
    case kRefused: {
      const uint32_t reason = in.U32();
      if (c->state == Connection::State::kWelcomed) return NoteMalformed(ep, "a late refusal");
      return FailConnection(
          c,
          reason == kTooMany ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED : RAYACCEL_STATUS_UNAUTHENTICATED,
          reason == kTooMany ? "the peer admits no more readers"
                             : "the peer refused this endpoint's transport key");
    }
    default:
      break;
  }
  if (c->state != Connection::State::kWelcomed)
    return NoteMalformed(ep, "a message before welcome");
  switch (type) {
    case kLookupReply:
      return OnLookupReply(c, in);
    case kRevoke:
      return OnRevoke(c, in);
    case kPong:
      return;
    case kNotification:
      return QueueNotification(ep, in);
    case kBye:
      return FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "the peer closed the connection");
    default:
      return NoteMalformed(ep, "an unknown message type " + std::to_string(type));
  }
}

// ---------------------------------------------------------------------------------------
// The owner's side.

void ClosePeer(Endpoint* ep, uint64_t token) {
  auto it = ep->peers.find(token);
  if (it == ep->peers.end()) return;
  Retire(ep, std::move(it->second->channel));
  ep->peers.erase(it);
  ++ep->activity;
}

void Refuse(Endpoint* ep, Peer* p, RefusedReason reason) {
  Writer w;
  w.Bytes(Header(kRefused, p->token).data(), 12).U32(reason);
  SendOn(ep, p->channel.get(), std::move(w.str()));
}

size_t Handshakes(const Endpoint* ep) {
  size_t n = 0;
  for (auto& [token, p] : ep->peers) n += p->admitted ? 0 : 1;
  return n;
}

void OnHello(Endpoint* ep, Reader& in, const uint8_t* message, size_t size) {
  const uint64_t token = in.U64();
  const uint64_t reader = in.U64();
  const Nonce nonce = in.Array<16>();
  const uint32_t n = in.U32();
  const uint8_t* address = in.Bytes(n <= kMaxFabricAddress ? n : SIZE_MAX);
  const Mac signature = in.Array<32>();
  if (!in.at_end() || size < 32) return NoteRefused(ep, "a hello of another shape");
  const std::string_view signed_part(reinterpret_cast<const char*>(message), size - 32);
  if (!SameMac(signature, MacOf(ep->key, kHelloLabel, signed_part))) {
    return NoteRefused(ep, "a hello not signed with this endpoint's transport key");
  }
  if (ep->peers.count(token) != 0) return NoteRefused(ep, "a hello repeated");
  if (Handshakes(ep) >= kMaxHandshakes || ep->peers.size() >= kMaxPeers) {
    return NoteRefused(ep, "too many readers");
  }
  std::string why;
  auto p = std::make_unique<Peer>();
  p->token = token;
  p->uuid = reader;
  p->reader_nonce = nonce;
  p->owner_nonce = RandomNonce();
  p->deadline = Clock::now() + PeerTimeout(ep);
  p->channel = OpenChannel(ep, kChannelReceives, &why);
  if (p->channel == nullptr) return NoteRefused(ep, why);
  p->channel->peer_record = p.get();
  if (!SetPeer(p->channel.get(), std::string(reinterpret_cast<const char*>(address), n), &why)) {
    CloseChannel(p->channel.get());
    return NoteRefused(ep, why);
  }
  const Mac proof =
      Prove(ep->key, kOwnerRole, token, reader, ep->uuid, p->reader_nonce, p->owner_nonce);
  Writer w;
  w.Bytes(Header(kChallenge, token).data(), 12).U64(ep->uuid);
  w.Bytes(p->owner_nonce.data(), p->owner_nonce.size()).Bytes(proof.data(), proof.size());
  w.U32(static_cast<uint32_t>(p->channel->address.size()))
      .Bytes(p->channel->address.data(), p->channel->address.size());
  const Mac mac = MacOf(ep->key, kChallengeLabel, w.str());
  w.Bytes(mac.data(), mac.size());
  Peer* raw = p.get();
  ep->peers[token] = std::move(p);
  SendOn(ep, raw->channel.get(), std::move(w.str()));
}

void OnLookup(Endpoint* ep, Peer* p, Reader& in) {
  const uint64_t region = in.U64();
  if (!in.at_end()) return NoteMalformed(ep, "a lookup of another length");
  Writer w;
  w.Bytes(Header(kLookupReply, p->token).data(), 12).U64(region);
  auto it = ep->regions.find(region);
  if (it == ep->regions.end()) {
    // Ids count up from 1 and are never reused: one below the next was deregistered.
    const bool was = region > 0 && region < ep->next_region_id;
    w.U32(was ? RAYACCEL_STATUS_STALE : RAYACCEL_STATUS_INVALID_ARGUMENT).U64(0).U64(0).U64(0);
  } else {
    const Region* r = it->second;
    p->looked_up.insert(region);
    w.U32(RAYACCEL_STATUS_OK).U64(r->length).U64(r->key);
    w.U64(ep->virtual_addresses ? reinterpret_cast<uintptr_t>(r->base) : 0);
  }
  SendOn(ep, p->channel.get(), std::move(w.str()));
}

void OnPeerMessage(Endpoint* ep, Peer* p, uint16_t type, Reader& in) {
  if (!p->admitted) {
    if (type != kProof) return NoteMalformed(ep, "a message before the proof");
    const Mac proof = in.Array<32>();
    if (!in.at_end()) return NoteMalformed(ep, "a proof of another length");
    if (!SameMac(proof, Prove(ep->key, kReaderRole, p->token, p->uuid, ep->uuid, p->reader_nonce,
                              p->owner_nonce))) {
      NoteRefused(ep, "a reader that did not prove the transport key");
      Refuse(ep, p, kWrongKey);
      // Closed once the refusal had its chance to leave: at the handshake's deadline.
      p->deadline = Clock::now() + milliseconds(100);
      return;
    }
    p->admitted = true;
    p->deadline = Clock::now() + PeerTimeout(ep);
    SendOn(ep, p->channel.get(), Header(kWelcome, p->token));
    return;
  }
  p->deadline = Clock::now() + PeerTimeout(ep);
  switch (type) {
    case kLookup:
      return OnLookup(ep, p, in);
    case kRevoked: {
      const uint64_t region = in.U64();
      if (!in.at_end()) return NoteMalformed(ep, "a revoked of another length");
      p->to_confirm.erase(region);
      p->looked_up.erase(region);
      ++ep->activity;
      return;
    }
    case kPing:
      SendOn(ep, p->channel.get(), Header(kPong, p->token));
      return;
    case kNotification:
      return QueueNotification(ep, in);
    case kBye:
      return ClosePeer(ep, p->token);
    default:
      return NoteMalformed(ep, "an unknown message type " + std::to_string(type));
  }
}

// ---------------------------------------------------------------------------------------
// Progress.

void OnMessage(Endpoint* ep, Channel* ch, const Op* op, size_t received) {
  const size_t length = std::min(received, op->bytes.size());
  Reader in(op->bytes.data(), length);
  const uint16_t type = in.U16();
  const uint16_t version = in.U16();
  if (!in.ok() || version != kWireVersion) {
    return NoteMalformed(ep, "wire version " + std::to_string(version) + " (this side speaks " +
                                 std::to_string(kWireVersion) + ")");
  }
  if (ch->listener) {
    if (type != kHello) return NoteRefused(ep, "a message other than hello on the listener");
    return OnHello(ep, in, reinterpret_cast<const uint8_t*>(op->bytes.data()), length);
  }
  const uint64_t token = in.U64();
  if (ch->connection != nullptr) {
    if (token != ch->connection->token) return NoteMalformed(ep, "another connection's token");
    return OnConnectionMessage(ch->connection, type, in);
  }
  if (ch->peer_record != nullptr) {
    if (token != ch->peer_record->token) return NoteMalformed(ep, "another reader's token");
    return OnPeerMessage(ep, ch->peer_record, type, in);
  }
}

void RmaDone(Endpoint* ep, Op* op, rayaccel_status status, const std::string& why) {
  Channel* ch = op->channel;
  Connection* c = ch->connection;
  if (op->local != nullptr) --op->local->local_uses;
  if (c != nullptr) {
    auto it = c->remotes.find(op->remote_region);
    if (it != c->remotes.end()) {
      Remote& remote = it->second;
      if (remote.in_flight > 0) --remote.in_flight;
      if (remote.in_flight == 0 && remote.confirm) {
        remote.confirm = false;
        SendRevoked(c, op->remote_region);
      }
    }
  }
  if (op->request != nullptr) EntryDone(op->request, op->entry, status, why);
  ++ep->activity;
}

// An operation that ended in error: posted and failed, or refused when posted late. Returns
// false when its channel closed because of it.
bool OpFailed(Endpoint* ep, Channel* ch, Op* op, int err) {
  std::unique_ptr<Op> owned(op);
  const std::string why = "the fabric reported " + ErrorText(err);
  if (op->kind == Op::Kind::kRma) {
    // The peer went, or its provider refused a key or range (which a reader that asked the
    // owner never sends): either way the connection is over, as the provider's is.
    const rayaccel_status status = FromFi(err);
    RmaDone(ep, op, status, why);
    if (Connection* c = ch->connection; c != nullptr && ch->cq != nullptr) {
      FailConnection(c, status, "a transfer failed: " + why);
    }
    return ch->cq != nullptr;
  }
  if (op->kind == Op::Kind::kReceive) {
    if (err != FI_ECANCELED && ch->ep != nullptr && !ch->retired) PostReceive(ch);
    return true;
  }
  if (Connection* c = ch->connection) {
    FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "a message to the peer failed: " + why);
    return false;
  }
  return true;
}

// Posts what waited for the provider, in order, until it says again to wait.
bool PostDeferred(Endpoint* ep, Channel* ch) {
  while (!ch->deferred.empty() && ch->ep != nullptr) {
    Op* op = ch->deferred.front();
    const ssize_t rc = TryPost(ch, op);
    if (rc == -FI_EAGAIN) return true;
    ch->deferred.pop_front();
    if (rc != 0) {
      ch->ops.erase(op);
      if (!OpFailed(ep, ch, op, static_cast<int>(-rc))) return false;
    }
  }
  return ch->ep != nullptr;
}

// Reads the channel's completions and handles them. The channel may be closed by what it
// handles (a connection failing): then it stops.
void ProgressChannel(Endpoint* ep, Channel* ch) {
  fi_cq_msg_entry entries[kCompletionsPerRead];
  while (ch->cq != nullptr) {
    if (!PostDeferred(ep, ch)) return;
    ssize_t n = fi_cq_read(ch->cq, entries, kCompletionsPerRead);
    if (n == -FI_EAGAIN || n == 0) return;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(ch->cq, &err, 0) != 1) return;
      Op* op = static_cast<Op*>(err.op_context);
      if (op == nullptr || ch->ops.erase(op) == 0) continue;
      ++ep->activity;
      if (!OpFailed(ep, ch, op, err.err)) return;
      continue;
    }
    if (n < 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      Op* op = static_cast<Op*>(entries[i].op_context);
      if (op == nullptr || ch->ops.erase(op) == 0) continue;
      ++ep->activity;
      if (op->kind == Op::Kind::kReceive) {
        std::unique_ptr<Op> received(op);
        if (ch->retired) continue;
        // Reposted first: the message's handler may close the channel.
        if (PostReceive(ch) != 0) NoteMalformed(ep, "a receive could not be reposted");
        OnMessage(ep, ch, received.get(), entries[i].len);
        if (ch->cq == nullptr) return;
      } else if (op->kind == Op::Kind::kRma) {
        RmaDone(ep, op, RAYACCEL_STATUS_OK, {});
        delete op;
        if (ch->cq == nullptr) return;
      } else {
        delete op;
      }
    }
  }
}

// Heartbeats, handshakes that took too long, readers and owners that went silent.
void Timers(Endpoint* ep) {
  const auto now = Clock::now();
  std::vector<uint64_t> gone;
  for (auto& [token, p] : ep->peers) {
    if (now > p->deadline) gone.push_back(token);
  }
  for (uint64_t token : gone) {
    Peer* p = ep->peers[token].get();
    if (p->admitted) {
      LogTo(ep, RAYACCEL_LOG_WARN,
            "a reader was silent for " + std::to_string(ep->peer_timeout_ms) + " ms: closed");
    }
    ClosePeer(ep, token);
  }
  const bool beat = now >= ep->next_heartbeat;
  if (beat) ep->next_heartbeat = now + HeartbeatInterval(ep);
  for (auto& [token, c] : ep->connections) {
    if (c->failure != RAYACCEL_STATUS_OK) continue;
    if (now - c->last_heard > PeerTimeout(ep)) {
      FailConnection(c, RAYACCEL_STATUS_PEER_LOST,
                     "the peer was silent for " + std::to_string(ep->peer_timeout_ms) + " ms");
      continue;
    }
    if (beat && c->state == Connection::State::kWelcomed) {
      SendOn(ep, c->channel.get(), Header(kPing, c->token));
    }
  }
}

// One pass over every channel. Caller holds mu.
// Whether a retired channel still has sends or transfers out.
bool Draining(const Channel* ch) {
  for (const Op* op : ch->ops) {
    if (op->kind != Op::Kind::kReceive) return true;
  }
  return false;
}

void ProgressAll(Endpoint* ep) {
  for (size_t i = 0; i < ep->retired.size();) {
    Channel* ch = ep->retired[i].get();
    ProgressChannel(ep, ch);
    if (Draining(ch)) {
      ++i;
      continue;
    }
    CloseChannel(ch);
    ep->retired.erase(ep->retired.begin() + static_cast<long>(i));
  }
  if (ep->listener != nullptr) ProgressChannel(ep, ep->listener.get());
  std::vector<uint64_t> peers;
  for (auto& [token, p] : ep->peers) peers.push_back(token);
  for (uint64_t token : peers) {
    // A channel's handler may close another peer: look it up again.
    auto it = ep->peers.find(token);
    if (it != ep->peers.end()) ProgressChannel(ep, it->second->channel.get());
  }
  std::vector<Connection*> connections;
  for (auto& [token, c] : ep->connections) connections.push_back(c);
  for (Connection* c : connections) {
    if (c->channel != nullptr) ProgressChannel(ep, c->channel.get());
  }
  Timers(ep);
}

// Sleeps until a channel's provider has work, the endpoint stops, or `limit` passes. With a
// channel that has no wait object, sleeps for `fallback` instead. Caller holds the lock; it
// is released while asleep.
void Sleep(Endpoint* ep, std::unique_lock<std::mutex>& lock, milliseconds limit,
           std::chrono::microseconds fallback) {
  std::vector<fid*> fids;
  std::vector<pollfd> fds{{ep->stop_fd, POLLIN, 0}};
  bool waitable = ep->stop_fd >= 0;
  auto add = [&](Channel* ch) {
    if (ch == nullptr || ch->cq == nullptr) return;
    if (ch->wait_fd < 0) waitable = false;
    fids.push_back(&ch->cq->fid);
    fds.push_back({ch->wait_fd, POLLIN, 0});
  };
  add(ep->listener.get());
  for (auto& [token, p] : ep->peers) add(p->channel.get());
  for (auto& [token, c] : ep->connections) add(c->channel.get());
  for (auto& ch : ep->retired) add(ch.get());
  // fi_trywait: nothing is pending that the fds would not announce (else: progress now).
  if (waitable && fi_trywait(ep->fabric, fids.data(), static_cast<int>(fids.size())) != 0) {
    return;
  }
  lock.unlock();
  if (waitable) {
    poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(1, limit.count())));
  } else {
    std::this_thread::sleep_for(fallback);
  }
  lock.lock();
}

// Answers peers while the application is not calling in. libfabric's software providers make
// progress only when called (FI_PROGRESS_MANUAL), the owner's side of a one-sided transfer
// included: back to back for a while after something happened, then asleep on the completion
// queues' wait objects (their providers' sockets) until there is work, a heartbeat is due, or
// 5 ms have passed.
void ProgressThread(Endpoint* ep) {
  auto pause = std::chrono::microseconds(0);
  auto busy_until = Clock::now();
  std::unique_lock<std::mutex> lock(ep->mu);
  while (!ep->stop.load(std::memory_order_acquire)) {
    const uint64_t before = ep->activity;
    ProgressAll(ep);
    const auto now = Clock::now();
    if (ep->activity != before) {
      busy_until = now + std::chrono::microseconds(200);
      pause = std::chrono::microseconds(0);
    } else if (now >= busy_until) {
      pause = std::min(std::max(pause * 2, std::chrono::microseconds(20)),
                       std::chrono::microseconds(1000));
    }
    if (pause.count() == 0) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    const auto beat = std::chrono::duration_cast<milliseconds>(ep->next_heartbeat - now);
    // At most 5 ms: rxm accepts a new peer's connection on an event the queues' wait objects
    // do not announce, and a handshake waited 100 ms a step for it.
    Sleep(ep, lock, std::min(std::max(beat, milliseconds(1)), milliseconds(5)), pause);
  }
}

// ---------------------------------------------------------------------------------------
// The hooks.

void DestroyEndpoint(Endpoint* ep) {
  if (ep->stop_fd >= 0) {
    ep->stop.store(true, std::memory_order_release);
    const uint64_t one = 1;
    ssize_t ignored = write(ep->stop_fd, &one, sizeof(one));
    (void)ignored;
  }
  ep->stop.store(true, std::memory_order_release);
  if (ep->progress.joinable()) ep->progress.join();
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    for (auto& [token, c] : ep->connections) {
      if (c->channel != nullptr) SendOn(ep, c->channel.get(), Header(kBye, c->token));
    }
    for (auto& [token, p] : ep->peers) {
      if (p->admitted) SendOn(ep, p->channel.get(), Header(kBye, p->token));
    }
    ProgressAll(ep);
    std::vector<Connection*> connections;
    for (auto& [token, c] : ep->connections) connections.push_back(c);
    for (Connection* c : connections) {
      FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "the endpoint closed");
      delete c;
    }
    ep->connections.clear();
    for (auto& [token, p] : ep->peers) Retire(ep, std::move(p->channel));
    ep->peers.clear();
    if (ep->listener != nullptr) CloseChannel(ep->listener.get());
    // What the retired channels still have out comes back (or their peer is gone for good:
    // then the channel is left open, never closed under rxm with work queued).
    const auto deadline = Clock::now() + PeerTimeout(ep);
    while (!ep->retired.empty() && Clock::now() < deadline) {
      ProgressAll(ep);
      if (ep->retired.empty()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (auto& ch : ep->retired) {
      LogTo(ep, RAYACCEL_LOG_WARN, "a channel to a lost peer is left open at close");
      for (Op* op : ch->ops) op->local = nullptr;
      ch.release();  // deliberately leaked: closing it could crash inside the provider
    }
    ep->retired.clear();
    for (auto& [id, r] : ep->regions) {
      CloseFid(r->mr != nullptr ? &r->mr->fid : nullptr);
      if (r->owned) std::free(r->base);
      delete r;
    }
    ep->regions.clear();
    for (Request* r : ep->requests) delete r;
    ep->requests.clear();
  }
  ep->shared.reset();
  if (ep->stop_fd >= 0) close(ep->stop_fd);
  delete ep;
}

rayaccel_status CloseEndpointHook(rayaccel_transport_endpoint* handle, rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    DestroyEndpoint(ep);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error) {
  const bool allocate = args != nullptr && (args->flags & RAYACCEL_REGISTER_ALLOCATE) != 0;
  if (args == nullptr || args->endpoint == nullptr || args->length == 0 ||
      (!allocate && args->address == nullptr)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "register_memory needs an endpoint, a length and an address (none to allocate)");
  }
  if (args->kind != RAYACCEL_MEMORY_HOST) {
    return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                "the libfabric helper moves host memory only (device memory: the UCX fabric)");
  }
  if ((args->flags & ~RAYACCEL_REGISTER_ALLOCATE) != 0) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "unknown register_memory flags");
  }
  Endpoint* ep = Of(args->endpoint);
  return Guard(error, [&] {
    auto region = std::make_unique<Region>();
    region->endpoint = ep;
    region->length = args->length;
    if (allocate) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, args->length) != 0) {
        return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED,
                    "cannot allocate " + std::to_string(args->length) + " bytes");
      }
      region->base = p;
      region->owned = true;
    } else {
      region->base = args->address;
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    region->id = ep->next_region_id++;
    int rc = -FI_ENOKEY;
    for (int attempt = 0; attempt < 8 && rc == -FI_ENOKEY; ++attempt) {
      const uint64_t requested = ep->provider_keys ? 0 : (RandomId() & ep->key_mask);
      rc = fi_mr_reg(ep->domain, region->base, region->length,
                     FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, requested, 0,
                     &region->mr, nullptr);
    }
    if (rc != 0) {
      if (region->owned) std::free(region->base);
      return Fail(error, FromFi(rc), "fi_mr_reg on " + ep->provider + ": " + ErrorText(rc));
    }
    region->key = fi_mr_key(region->mr);
    region->desc = fi_mr_desc(region->mr);
    Writer d;
    d.U32(kDescriptorMagic).U16(kWireVersion).U16(0).U64(ep->uuid).U64(region->id);
    d.U64(region->length);
    region->descriptor = std::move(d.str());
    if (allocate) args->address = region->base;
    args->region = region.get();
    const uint64_t id = region->id;
    ep->regions.emplace(id, region.release());
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status DeregisterMemory(rayaccel_memory_region* handle, rayaccel_error* error) {
  Region* region = Of(handle);
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return Guard(error, [&] {
    Endpoint* ep = region->endpoint;
    const uint64_t id = region->id;
    const auto deadline = Clock::now() + PeerTimeout(ep);
    std::unique_lock<std::mutex> lock(ep->mu);
    // Later lookups say STALE; every reader that was told the key confirms it has stopped.
    ep->regions.erase(id);
    for (auto& [token, p] : ep->peers) {
      if (p->looked_up.count(id) == 0) continue;
      p->to_confirm.insert(id);
      Writer w;
      w.Bytes(Header(kRevoke, token).data(), 12).U64(id);
      SendOn(ep, p->channel.get(), std::move(w.str()));
    }
    auto waiting = [&] {
      for (auto& [token, p] : ep->peers) {
        if (p->to_confirm.count(id) != 0) return true;
      }
      return region->local_uses > 0;
    };
    while (waiting() && Clock::now() < deadline) {
      ProgressAll(ep);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
    // A reader that did not confirm within the peer timeout is cut off: its channel closes,
    // and with it whatever it had in flight here.
    std::vector<uint64_t> silent;
    for (auto& [token, p] : ep->peers) {
      if (p->to_confirm.count(id) != 0) silent.push_back(token);
    }
    for (uint64_t token : silent) {
      LogTo(ep, RAYACCEL_LOG_WARN,
            "a reader did not confirm a deregistration within the peer timeout: closed");
      ClosePeer(ep, token);
    }
    // Our own transfers still using it as their local memory end with their connections.
    if (region->local_uses > 0) {
      std::vector<Connection*> using_it;
      for (auto& [token, c] : ep->connections) {
        if (c->channel == nullptr) continue;
        for (Op* op : c->channel->ops) {
          if (op->local == region) {
            using_it.push_back(c);
            break;
          }
        }
      }
      for (Connection* c : using_it) {
        FailConnection(c, RAYACCEL_STATUS_PEER_LOST,
                       "a local region was deregistered while a transfer used it");
      }
    }
    CloseFid(&region->mr->fid);
    if (region->owned) std::free(region->base);
    delete region;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status PackDescriptor(rayaccel_memory_region* handle, const rayaccel_blob_sink* sink,
                               rayaccel_error* error) {
  Region* region = Of(handle);
  if (region == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "pack_descriptor needs a region and a sink");
  }
  return Guard(error, [&] {
    const std::string& d = region->descriptor;
    return sink->put(sink->host_context, {reinterpret_cast<const uint8_t*>(d.data()), d.size()});
  });
}

struct Address {
  uint64_t uuid = 0;
  std::string provider, fabric_address;
};

// An endpoint's address, once its signature under the key holds.
rayaccel_status ParseAddress(const Endpoint* ep, rayaccel_blob blob, Address* out,
                             std::string* why) {
  Reader in(blob.data, blob.size);
  const uint32_t magic = in.U32();
  const uint16_t version = in.U16();
  in.U16();
  out->uuid = in.U64();
  const uint16_t pn = in.U16();
  const uint8_t* provider = in.Bytes(pn <= kMaxProviderName ? pn : SIZE_MAX);
  const uint16_t an = in.U16();
  const uint8_t* address = in.Bytes(an <= kMaxFabricAddress ? an : SIZE_MAX);
  const Mac signature = in.Array<32>();
  if (magic != kAddressMagic) {
    *why = "not a libfabric endpoint's address (the peer may use another fabric)";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (version != kWireVersion) {
    *why = "the address is of libfabric wire version " + std::to_string(version) +
           "; this side speaks " + std::to_string(kWireVersion);
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (!in.at_end()) {
    *why = "malformed libfabric address";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  const std::string_view signed_part(reinterpret_cast<const char*>(blob.data), blob.size - 32);
  if (!SameMac(signature, MacOf(ep->key, kAddressLabel, signed_part))) {
    *why = "the address was not made with this endpoint's transport key";
    return RAYACCEL_STATUS_UNAUTHENTICATED;
  }
  out->provider.assign(reinterpret_cast<const char*>(provider), pn);
  out->fabric_address.assign(reinterpret_cast<const char*>(address), an);
  if (out->provider != ep->provider) {
    *why = "the peer's endpoint uses libfabric's " + out->provider + " provider, this one " +
           ep->provider + " (set FI_PROVIDER alike on both)";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Connect(rayaccel_transport_endpoint* handle, rayaccel_blob peer,
                        rayaccel_connection** out, rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr || out == nullptr || (peer.data == nullptr && peer.size > 0)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "connect needs an endpoint and an address");
  }
  return Guard(error, [&] {
    Address address;
    std::string why;
    if (rayaccel_status s = ParseAddress(ep, peer, &address, &why); s != RAYACCEL_STATUS_OK) {
      return Fail(error, s, why);
    }
    const auto deadline = Clock::now() + PeerTimeout(ep);
    std::unique_lock<std::mutex> lock(ep->mu);
    auto conn = std::make_unique<Connection>();
    conn->endpoint = ep;
    conn->token = RandomId();
    conn->peer_uuid = address.uuid;
    conn->nonce = RandomNonce();
    conn->last_heard = Clock::now();
    conn->channel = OpenChannel(ep, kChannelReceives, &why);
    if (conn->channel == nullptr) return Fail(error, RAYACCEL_STATUS_UNAVAILABLE, why);
    conn->channel->connection = conn.get();
    if (!SetPeer(conn->channel.get(), address.fabric_address, &why)) {
      CloseChannel(conn->channel.get());
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, why);
    }
    Writer hello;
    hello.Bytes(Header(kHello, conn->token).data(), 12).U64(ep->uuid);
    hello.Bytes(conn->nonce.data(), conn->nonce.size());
    hello.U32(static_cast<uint32_t>(conn->channel->address.size()))
        .Bytes(conn->channel->address.data(), conn->channel->address.size());
    const Mac mac = MacOf(ep->key, kHelloLabel, hello.str());
    hello.Bytes(mac.data(), mac.size());
    Connection* c = conn.get();
    ep->connections[c->token] = conn.release();
    if (!SendOn(ep, c->channel.get(), std::move(hello.str()))) {
      FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "the hello could not be sent");
    }
    while (c->failure == RAYACCEL_STATUS_OK && c->state != Connection::State::kWelcomed &&
           Clock::now() < deadline) {
      ProgressAll(ep);
      if (c->failure != RAYACCEL_STATUS_OK || c->state == Connection::State::kWelcomed) break;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
    if (c->failure == RAYACCEL_STATUS_OK && c->state != Connection::State::kWelcomed) {
      FailConnection(
          c, RAYACCEL_STATUS_PEER_LOST,
          "the peer did not answer within " + std::to_string(ep->peer_timeout_ms) + " ms");
    }
    if (c->failure != RAYACCEL_STATUS_OK) {
      const rayaccel_status s = c->failure;
      const std::string text = c->failure_text;
      ep->connections.erase(c->token);
      delete c;
      return Fail(error, s, text);
    }
    *out = c;
    return RAYACCEL_STATUS_OK;
  });
}

struct RemoteRegion {
  uint64_t owner = 0, id = 0, length = 0;
};

bool ParseDescriptor(rayaccel_blob d, RemoteRegion* r) {
  Reader in(d.data, d.size);
  const uint32_t magic = in.U32();
  const uint16_t version = in.U16();
  const uint16_t flags = in.U16();
  r->owner = in.U64();
  r->id = in.U64();
  r->length = in.U64();
  return in.at_end() && d.size == kDescriptorBytes && magic == kDescriptorMagic &&
         version == kWireVersion && flags == 0 && r->id != 0;
}

// Checks one transfer before anything starts. Caller holds mu.
rayaccel_status CheckTransfer(Endpoint* ep, Connection* c, Region* local, uint64_t local_offset,
                              rayaccel_blob descriptor, uint64_t length, RemoteRegion* remote,
                              std::string* why) {
  if (!ParseDescriptor(descriptor, remote)) {
    *why = "malformed libfabric descriptor";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (remote->owner != c->peer_uuid) {
    *why = "the descriptor belongs to another peer than this connection's";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (local == nullptr || local->endpoint != ep || length == 0 || local_offset > local->length ||
      length > local->length - local_offset) {
    *why = "the local range lies outside its region";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  return RAYACCEL_STATUS_OK;
}

// Queues an entry behind the owner's description of its region, asking for it first.
void Start(Connection* c, const Pending& p, uint64_t region) {
  auto [it, inserted] = c->remotes.try_emplace(region);
  if (inserted) {
    Writer w;
    w.Bytes(Header(kLookup, c->token).data(), 12).U64(region);
    if (!SendOn(c->endpoint, c->channel.get(), std::move(w.str()))) {
      it->second.state = Remote::State::kGone;
      it->second.gone = RAYACCEL_STATUS_PEER_LOST;
      it->second.why = "the lookup could not be sent";
    }
  }
  Issue(c, p, region);
}

rayaccel_status StartTransfers(Connection* c, Request* r, rayaccel_transfer_op op,
                               const std::vector<Pending>& entries,
                               const std::vector<RemoteRegion>& remotes) {
  r->held = true;
  r->running = static_cast<uint32_t>(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    Pending p = entries[i];
    p.op = op;
    Start(c, p, remotes[i].id);
  }
  r->held = false;
  Complete(r, RAYACCEL_STATUS_OK, {});
  return RAYACCEL_STATUS_OK;
}

Request* NewTransfer(Endpoint* ep, Connection* c) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = Request::Kind::kTransfer;
  r->id = c->next_id++;
  c->transfers[r->id] = r;
  ep->requests.insert(r);
  return r;
}

// Returns the request to the host, or completes it within the call.
rayaccel_status Hand(Endpoint* ep, Request* r, rayaccel_request** out, rayaccel_error* error) {
  if (!r->done) {
    *out = r;
    return RAYACCEL_STATUS_OK;
  }
  const rayaccel_status s = r->status;
  const std::string why = r->why;
  ep->requests.erase(r);
  delete r;
  *out = nullptr;
  return s == RAYACCEL_STATUS_OK ? s : Fail(error, s, why);
}

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckTransferArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Connection* c = Of(a->connection);
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    std::vector<RemoteRegion> remotes(1);
    std::string why;
    if (rayaccel_status s = CheckTransfer(ep, c, Of(a->local), a->local_offset,
                                          a->remote_descriptor, a->length, &remotes[0], &why);
        s != RAYACCEL_STATUS_OK) {
      return Fail(error, s, why);
    }
    if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) a->path = RAYACCEL_PATH_FABRIC;
    Request* r = NewTransfer(ep, c);
    StartTransfers(c, r, a->op,
                   {{r, 0, a->op, Of(a->local), a->local_offset, a->remote_offset, a->length}},
                   remotes);
    return Hand(ep, r, &a->request, error);
  });
}

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckBatchArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Connection* c = Of(a->connection);
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    std::vector<RemoteRegion> remotes(a->count);
    std::vector<Pending> entries(a->count);
    for (uint32_t i = 0; i < a->count; ++i) {
      const rayaccel_transfer_entry& e = a->entries[i];
      std::string why;
      if (rayaccel_status s = CheckTransfer(ep, c, Of(e.local), e.local_offset, e.remote_descriptor,
                                            e.length, &remotes[i], &why);
          s != RAYACCEL_STATUS_OK) {
        return Fail(error, s, "entry " + std::to_string(i) + ": " + why);
      }
      entries[i] = {nullptr, i, a->op, Of(e.local), e.local_offset, e.remote_offset, e.length};
    }
    Request* r = NewTransfer(ep, c);
    r->batch = true;
    r->entry_status.assign(a->count, RAYACCEL_STATUS_OK);
    r->statuses_out = a->statuses;
    for (auto& e : entries) e.request = r;
    for (uint32_t i = 0; i < a->count; ++i) a->paths[i] = RAYACCEL_PATH_FABRIC;
    StartTransfers(c, r, a->op, entries, remotes);
    if (r->done) {
      std::copy(r->entry_status.begin(), r->entry_status.end(), a->statuses);
    }
    return Hand(ep, r, &a->request, error);
  });
}

// A flush or notification: after every transfer issued on the connection so far.
Request* NewBarrier(Endpoint* ep, Connection* c, Request::Kind kind) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = kind;
  r->mark = c->next_id;
  ep->requests.insert(r);
  c->barriers.push_back(r);
  CheckBarriers(c);
  return r;
}

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckNotifyArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Connection* c = Of(a->connection);
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    auto* r = new Request();
    r->endpoint = ep;
    r->connection = c;
    r->kind = Request::Kind::kNotify;
    r->mark = c->next_id;
    r->payload.assign(reinterpret_cast<const char*>(a->message.data), a->message.size);
    ep->requests.insert(r);
    c->barriers.push_back(r);
    CheckBarriers(c);
    return Hand(ep, r, &a->request, error);
  });
}

rayaccel_status Flush(rayaccel_connection* handle, rayaccel_request** out, rayaccel_error* error) {
  Connection* c = Of(handle);
  if (c == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "flush needs a connection");
  }
  return Guard(error, [&] {
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    Request* r = NewBarrier(ep, c, Request::Kind::kFlush);
    return Hand(ep, r, out, error);
  });
}

rayaccel_status Poll(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Endpoint* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (!r->done) {
      if (Connection* c = r->connection; c != nullptr && c->channel != nullptr) {
        ProgressChannel(ep, c->channel.get());
      }
      if (!r->done) return RAYACCEL_STATUS_TIMEOUT;
    }
    if (r->batch && r->statuses_out != nullptr) {
      std::copy(r->entry_status.begin(), r->entry_status.end(), r->statuses_out);
    }
    const rayaccel_status s = r->status;
    const std::string why = r->why;
    ep->requests.erase(r);
    delete r;
    return s == RAYACCEL_STATUS_OK ? s : Fail(error, s, why);
  });
}

rayaccel_status Abandon(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    std::lock_guard<std::mutex> lock(r->endpoint->mu);
    r->abandoned = true;
    r->statuses_out = nullptr;
    MaybeFree(r);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Wait(rayaccel_transport_endpoint* handle, uint32_t timeout_ms,
                     rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    const auto deadline = Clock::now() + milliseconds(timeout_ms);
    std::unique_lock<std::mutex> lock(ep->mu);
    const uint64_t seen = ep->activity;
    auto pause = std::chrono::microseconds(0);
    while (true) {
      ProgressAll(ep);
      if (ep->activity != seen) return RAYACCEL_STATUS_OK;
      const auto now = Clock::now();
      if (now >= deadline) return RAYACCEL_STATUS_TIMEOUT;
      // Asleep on the provider's wait objects, as the progress thread, once a few passes
      // found nothing: woken by the bytes themselves rather than by a timer.
      pause = std::min(pause + std::chrono::microseconds(10), std::chrono::microseconds(200));
      Sleep(ep, lock,
            std::min(std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1),
                     milliseconds(10)),
            pause);
      if (ep->activity != seen) return RAYACCEL_STATUS_OK;
    }
  });
}

rayaccel_status GetNotifications(rayaccel_transport_endpoint* handle,
                                 const rayaccel_blob_sink* sink, rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "get_notifications needs a sink");
  }
  return Guard(error, [&] {
    std::deque<std::string> got;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      got.swap(ep->notifications);
    }
    for (const std::string& n : got) {
      rayaccel_status s =
          sink->put(sink->host_context, {reinterpret_cast<const uint8_t*>(n.data()), n.size()});
      if (s != RAYACCEL_STATUS_OK) return s;
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Close(rayaccel_connection* handle, rayaccel_error* error) {
  Connection* c = Of(handle);
  if (c == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no connection");
  return Guard(error, [&] {
    Endpoint* ep = c->endpoint;
    std::unique_lock<std::mutex> lock(ep->mu);
    if (c->channel != nullptr && c->state == Connection::State::kWelcomed) {
      SendOn(ep, c->channel.get(), Header(kBye, c->token));
      ProgressChannel(ep, c->channel.get());
    }
    Channel* ch = c->channel.get();
    FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "the connection was closed");
    // What was in flight comes back before this returns, so that the caller may free the
    // memory (a READ still lands, or is cut off with the connection): up to the peer timeout.
    const auto deadline = Clock::now() + PeerTimeout(ep);
    auto retired = [&] {
      for (auto& r : ep->retired) {
        if (r.get() == ch) return true;
      }
      return false;
    };
    while (ch != nullptr && retired() && Draining(ch) && Clock::now() < deadline) {
      ProgressChannel(ep, ch);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
    // Requests the host still holds stay valid, detached from the connection.
    for (Request* r : ep->requests) {
      if (r->connection == c) r->connection = nullptr;
    }
    ep->connections.erase(c->token);
    delete c;
    return RAYACCEL_STATUS_OK;
  });
}

// Why the shm provider is never used (found by the transport tests, libfabric 1.17): a sender
// takes a spinlock in the receiver's shared segment, so a peer killed or stopped while it
// holds its own lock (as it does while serving a transfer) stops every sender to it forever,
// inside libfabric, past any peer timeout; and two endpoints of one process crashed it.
constexpr char kShmRefused[] =
    "libfabric's shm provider is not used: a peer killed or stopped while holding its queue's "
    "lock hangs every sender to it (libfabric 1.17); use FI_PROVIDER=tcp, or the UCX fabric";

// The first provider libfabric offers for one-sided RMA and messages on a reliable
// datagram endpoint. Registrations are offsets into the region (no FI_MR_VIRT_ADDR) where the
// provider allows it; providers that require virtual addresses (verbs, efa) check the range
// in the NIC, software ones (tcp) against the registration.
fi_info* ChooseProvider(const Fi& fi, std::string* why) {
  fi_info* hints = fi.dupinfo(nullptr);
  if (hints == nullptr) {
    *why = "fi_dupinfo failed";
    return nullptr;
  }
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE;  // endpoints of a process share it
  hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  // FI_PROVIDER as each endpoint opens: libfabric reads it once, when the process first calls
  // it, to decide which providers load at all; here it picks among those.
  // A list or an exclusion ("tcp,shm", "^psm2") is libfabric's filter alone.
  if (const char* named = std::getenv("FI_PROVIDER");
      named != nullptr && named[0] != '\0' && std::strpbrk(named, ",^") == nullptr) {
    hints->fabric_attr->prov_name = strdup(named);
  }
  fi_info* info = nullptr;
  int rc = fi.getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  if (rc != 0 || info == nullptr) {
    // Hardware providers: their registrations name virtual addresses, checked by the NIC.
    hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    rc = fi.getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    if (rc == 0 && info != nullptr) {
      const std::string name = info->fabric_attr->prov_name;
      if (name.find("shm") != std::string::npos || name.find("tcp") != std::string::npos ||
          name.find("sockets") != std::string::npos || name.find("udp") != std::string::npos) {
        fi.freeinfo(info);
        info = nullptr;
        rc = -FI_ENODATA;
      }
    }
  }
  fi.freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    const char* chosen = std::getenv("FI_PROVIDER");
    *why = "libfabric offers no provider with reliable one-sided RMA and messages" +
           std::string(chosen != nullptr ? std::string(" among FI_PROVIDER=") + chosen : "") +
           " (" + ErrorText(rc != 0 ? rc : FI_ENODATA) + ")";
    return nullptr;
  }
  // libfabric's preference, first, but never shm (kShmRefused).
  const fi_info* chosen = info;
  while (chosen != nullptr && std::strcmp(chosen->fabric_attr->prov_name, "shm") == 0) {
    chosen = chosen->next;
  }
  if (chosen == nullptr) {
    fi.freeinfo(info);
    *why = kShmRefused;
    return nullptr;
  }
  fi_info* first = fi.dupinfo(chosen);
  fi.freeinfo(info);
  return first;
}

// The process's domain on the provider ChooseProvider picks now, opened by the first endpoint
// on it and closed with the last.
std::shared_ptr<Domain> OpenDomain(const Fi& fi, rayaccel_status* status, std::string* why) {
  static std::mutex mu;
  static auto* open = new std::map<std::string, std::weak_ptr<Domain>>;
  fi_info* info = ChooseProvider(fi, why);
  if (info == nullptr) {
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    return nullptr;
  }
  const std::string name = std::string(info->fabric_attr->prov_name) + "/" +
                           (info->fabric_attr->name != nullptr ? info->fabric_attr->name : "") +
                           "/" +
                           (info->domain_attr->name != nullptr ? info->domain_attr->name : "");
  std::lock_guard<std::mutex> lock(mu);
  if (std::shared_ptr<Domain> d = (*open)[name].lock()) {
    fi.freeinfo(info);
    return d;
  }
  auto d = std::make_shared<Domain>();
  d->info = info;
  int rc = fi.fabric(info->fabric_attr, &d->fabric, nullptr);
  if (rc == 0) rc = fi_domain(d->fabric, info, &d->domain, nullptr);
  if (rc != 0) {
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    *why =
        "opening libfabric's " + std::string(info->fabric_attr->prov_name) + ": " + ErrorText(rc);
    return nullptr;
  }
  (*open)[name] = d;
  return d;
}

}  // namespace

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error) {
  if (rayaccel_status s = CheckOpenArgs(args, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    rayaccel_status status = RAYACCEL_STATUS_OK;
    std::string why;
    const Fi* fi = LoadFi(options.library, &status, &why);
    if (fi == nullptr) return Fail(error, status, why);
    auto ep = std::make_unique<Endpoint>();
    ep->options = options;
    ep->key.assign(reinterpret_cast<const char*>(args->key.data), args->key.size);
    ep->uuid = RandomId();
    ep->peer_timeout_ms = args->peer_timeout_ms != 0 ? args->peer_timeout_ms : 10000;
    auto fail = [&](rayaccel_status s, const std::string& text) {
      Endpoint* raw = ep.release();
      DestroyEndpoint(raw);
      return Fail(error, s, text);
    };
    rayaccel_status opened = RAYACCEL_STATUS_OK;
    ep->shared = OpenDomain(*fi, &opened, &why);
    if (ep->shared == nullptr) return fail(opened, why);
    ep->info = ep->shared->info;
    ep->fabric = ep->shared->fabric;
    ep->domain = ep->shared->domain;
    ep->provider =
        ep->info->fabric_attr->prov_name != nullptr ? ep->info->fabric_attr->prov_name : "";
    const uint64_t mr_mode = static_cast<uint64_t>(ep->info->domain_attr->mr_mode);
    ep->virtual_addresses = (mr_mode & FI_MR_VIRT_ADDR) != 0;
    ep->provider_keys = (mr_mode & FI_MR_PROV_KEY) != 0;
    const size_t key_size = ep->info->domain_attr->mr_key_size;
    ep->key_mask = key_size >= 8 ? ~0ull : ((1ull << (8 * key_size)) - 1);
    ep->max_rma = std::max<uint64_t>(ep->info->ep_attr->max_msg_size, 4096);
    ep->listener = OpenChannel(ep.get(), kListenReceives, &why);
    if (ep->listener == nullptr) return fail(RAYACCEL_STATUS_UNAVAILABLE, why);
    ep->listener->listener = true;
    if (key_size < 8 && !ep->provider_keys) {
      LogTo(ep.get(), RAYACCEL_LOG_WARN,
            ep->provider + "'s registration keys are " + std::to_string(key_size) +
                " bytes: a peer without the transport key could guess one");
    }
    Writer w;
    w.U32(kAddressMagic).U16(kWireVersion).U16(0).U64(ep->uuid);
    w.U16(static_cast<uint16_t>(ep->provider.size()))
        .Bytes(ep->provider.data(), ep->provider.size());
    w.U16(static_cast<uint16_t>(ep->listener->address.size()))
        .Bytes(ep->listener->address.data(), ep->listener->address.size());
    const Mac mac = MacOf(ep->key, kAddressLabel, w.str());
    w.Bytes(mac.data(), mac.size());
    rayaccel_status s =
        args->address->put(args->address->host_context,
                           {reinterpret_cast<const uint8_t*>(w.str().data()), w.str().size()});
    if (s != RAYACCEL_STATUS_OK) return fail(s, "the host refused the endpoint's address");
    ep->next_heartbeat = Clock::now();
    Endpoint* raw = ep.release();
    raw->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    raw->progress = std::thread(ProgressThread, raw);
    args->endpoint = raw;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*)) {
  rayaccel_transport_api t{};
  t.struct_size = sizeof(t);
  t.open_endpoint = open_endpoint;
  t.close_endpoint = CloseEndpointHook;
  t.register_memory = RegisterMemory;
  t.deregister_memory = DeregisterMemory;
  t.pack_descriptor = PackDescriptor;
  t.connect = Connect;
  t.transfer = Transfer;
  t.notify = Notify;
  t.flush = Flush;
  t.poll = Poll;
  t.abandon = Abandon;
  t.wait = Wait;
  t.get_notifications = GetNotifications;
  t.close = Close;
  t.transfer_batch = TransferBatch;
  return t;
}

namespace {
const rayaccel_transport_api* Hooks() {
  static const rayaccel_transport_api hooks = Table(nullptr);
  return &hooks;
}
}  // namespace

}  // namespace rayaccel::plugin::ofi
