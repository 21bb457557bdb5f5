#include "ucx_transport.h"

#include <dlfcn.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "plugin_util.h"
#include "same_host_copy.h"
#include "transport_args.h"
#include "transport_handles.h"
#include "transport_wire.h"

namespace rayaccel::plugin::ucx {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------
// libucp, loaded when the first endpoint opens.

#define RAYACCEL_UCP_FUNCTIONS(X)                                                            \
  X(ucp_config_read)                                                                         \
  X(ucp_config_modify)                                                                       \
  X(ucp_config_release)                                                                      \
  X(ucp_init_version)                                                                        \
  X(ucp_cleanup)                                                                             \
  X(ucp_context_query)                                                                       \
  X(ucp_worker_create)                                                                       \
  X(ucp_worker_destroy)                                                                      \
  X(ucp_worker_get_address)                                                                  \
  X(ucp_worker_release_address)                                                              \
  X(ucp_worker_progress)                                                                     \
  X(ucp_worker_set_am_recv_handler)                                                          \
  X(ucp_ep_create)                                                                           \
  X(ucp_ep_close_nbx)                                                                        \
  X(ucp_ep_flush_nbx)                                                                        \
  X(ucp_mem_map)                                                                             \
  X(ucp_mem_unmap)                                                                           \
  X(ucp_am_send_nbx) X(ucp_am_recv_data_nbx) X(ucp_request_check_status) X(ucp_request_free) \
      X(ucp_worker_get_efd) X(ucp_worker_arm) X(ucp_mem_query) X(ucs_status_string)

struct Ucp {
#define RAYACCEL_UCP_MEMBER(f) decltype(&::f) f = nullptr;
  RAYACCEL_UCP_FUNCTIONS(RAYACCEL_UCP_MEMBER)
#undef RAYACCEL_UCP_MEMBER
  std::string error;  // why libucp could not be used; empty when it can
};

constexpr char kDefaultUcp[] = "libucp.so.0";

// The libucp this plugin uses: the one the first endpoint asked for. It stays loaded for the
// life of the process (UCX does not support being unloaded); the table of its functions goes
// with this plugin when the plugin is unloaded.
struct LoadedUcp {
  std::once_flag once;
  std::string name;
  void* handle = nullptr;
  Ucp ucp;
};

// A static of the plugin, not a heap object: one would be orphaned each time the plugin is
// unloaded (LeakSanitizer finds it). At process exit only its strings are destroyed, which
// nothing reads once the endpoints are open; the function table is trivially destructible.
LoadedUcp& Loaded() {
  static LoadedUcp l;
  return l;
}

// Loads `library` (empty: libucp.so.0) on the first call; later calls must name the same
// library (or none), since a process holds one UCX. Else an error says which is loaded.
const Ucp& LoadUcp(const std::string& library, std::string* mismatch) {
  LoadedUcp& l = Loaded();
  const std::string wanted = library.empty() ? kDefaultUcp : library;
  std::call_once(l.once, [&] {
    l.name = wanted;
    Ucp& u = l.ucp;
    l.handle = dlopen(wanted.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* why = dlerror();
      u.error = library.empty() ? "UCX is not installed (" : "cannot load the UCX library (";
      u.error += wanted + ": " + (why != nullptr ? why : "?") + ")";
      return;
    }
#define RAYACCEL_UCP_LOAD(f)                                   \
  u.f = reinterpret_cast<decltype(&::f)>(dlsym(l.handle, #f)); \
  if (u.f == nullptr && u.error.empty()) u.error = wanted + " lacks " #f;
    RAYACCEL_UCP_FUNCTIONS(RAYACCEL_UCP_LOAD)
#undef RAYACCEL_UCP_LOAD
  });
  if (wanted != l.name && l.handle != nullptr) {
    // Another name for the library already loaded is the same library.
    void* same = dlopen(wanted.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (same != nullptr) dlclose(same);
    if (same != l.handle) {
      *mismatch = "this process already uses the UCX library " + l.name + ", not " + wanted +
                  " (one UCX per process)";
    }
  }
  return l.ucp;
}

// After the first endpoint opened.
const Ucp& Lib() { return Loaded().ucp; }

std::string StatusText(ucs_status_t s) { return Lib().ucs_status_string(s); }

// A UCX status as the ABI's: a peer that went away is PEER_LOST, not a local fault.
rayaccel_status FromUcs(ucs_status_t s) {
  switch (s) {
    case UCS_OK:
      return RAYACCEL_STATUS_OK;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CANCELED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_IO_ERROR:
      return RAYACCEL_STATUS_PEER_LOST;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
    case UCS_ERR_UNSUPPORTED:
      return RAYACCEL_STATUS_UNSUPPORTED;
    case UCS_ERR_INVALID_PARAM:
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    default:
      return RAYACCEL_STATUS_INTERNAL;
  }
}

rayaccel_status FailUcs(rayaccel_error* error, const char* what, ucs_status_t s) {
  return Fail(error, FromUcs(s), std::string(what) + ": " + StatusText(s));
}

// ---------------------------------------------------------------------------------------
// The wire (transport_wire.h): little-endian fields, ids, and the proofs of the shared key.

using wire::Mac;
using wire::MacOf;
using wire::Nonce;
using wire::Prove;
using wire::RandomId;
using wire::RandomNonce;
using wire::Reader;
using wire::SameMac;
using wire::Writer;

constexpr uint32_t kAddressMagic = 0x41584355;     // "UCXA"
constexpr uint32_t kDescriptorMagic = 0x52584355;  // "UCXR"
constexpr uint16_t kWireVersion = 5;  // 4: batches (kGetBatch..kPutBatchAck); 5: same-host copies
constexpr size_t kDescriptorBytes = 32;
// Descriptor flags (the U16 after the version).
constexpr uint16_t kMappable = 1;       // device memory the owner maps for readers on its host
constexpr uint16_t kStagedByOwner = 2;  // device memory the owner copies through host memory
constexpr uint16_t kHostMemory = 4;     // host memory: a reader on this host may be copied to

// Active-message ids (docs/transport.md). Control messages ride the control worker, transfers
// and notifications the data worker.
enum AmId : unsigned {
  kHello = 1,           // reader -> owner: who I am, a nonce, how to reach me
  kChallenge = 2,       // owner -> reader: the owner's nonce and its proof of the key
  kProof = 3,           // reader -> owner: the reader's proof of the key
  kWelcome = 4,         // owner -> reader: admitted
  kRefused = 5,         // owner -> reader: not admitted
  kPing = 6,            // reader -> owner: still here
  kPong = 7,            // owner -> reader: still here
  kBye = 8,             // reader -> owner: the connection is closing
  kGoodbye = 14,        // either way (control): this endpoint drops the link
  kMapAsk = 15,         // reader -> owner (control): a handle to map this region with, please
  kMapReply = 16,       // owner -> reader (control): the handle, or why not
  kUnmap = 17,          // owner -> reader (control): the region is going: close your mapping
  kUnmapped = 18,       // reader -> owner (control): closed (or never opened)
  kNotify = 9,          // reader -> owner (data): an application notification
  kGet = 10,            // reader -> owner (data): send me these bytes of a region
  kGetReply = 11,       // owner -> reader (data): the bytes, or why not
  kPut = 12,            // reader -> owner (data): store these bytes in a region
  kPutAck = 13,         // owner -> reader (data): stored, or why not
  kGetBatch = 19,       // reader -> owner (data): send me these ranges (a batch's small entries)
  kGetBatchReply = 20,  // owner -> reader (data): each range's status, then the bytes of those
                        // served, in order
  kPutBatch = 21,       // reader -> owner (data): these ranges, then their bytes, in order
  kPutBatchAck = 22,    // owner -> reader (data): each range's status
  kFirstAm = kHello,
  kLastAm = kPutBatchAck,
};

// Why an owner refused a reader, as kRefused says.
enum RefusedReason : uint32_t {
  kWrongKey = 1,
  kTooMany = 2,
};

// Why an endpoint drops a link, as kGoodbye says.
enum GoodbyeReason : uint32_t {
  kClosing = 1,       // the endpoint is closing
  kDeclaredLost = 2,  // it did not hear from the other within its peer timeout
};

// The two fabrics an endpoint opens, each a UCX context with the operator's UCX_TLS split in
// two: "local" (UCX's self, within this process; shared memory only where the operator names
// it) and "network" (TCP, RDMA: every other peer, on this host or another). Shared memory and
// CMA are left out by default, because a peer that dies mid-transfer breaks the survivor:
//  - CMA: UCX 1.13 aborts the whole process when process_vm_readv finds its peer gone on an
//    endpoint without error handling (cma_ep.c, "No such process"), and it offers no error
//    handling on CMA; a reader died with the peer it read from.
//  - posix/sysv: a sender killed while writing into the receiver's shared-memory queue leaves
//    the slot it took unfinished, and the receiver's queue stops there for every peer: after a
//    peer was killed mid 256 MiB read, a new peer's 1 MiB read never completed.
// Apart, because UCX given both shared memory and TCP picks shared memory for a same-host peer's
// messages and TCP for its rendezvous, and an operator's shared memory stays confined to the
// local fabric. An empty string: no such fabric.
struct Transports {
  std::string local, network;
  bool shared_memory = false;  // the operator named posix or sysv
};

bool IsLocalTransport(const std::string& t) {
  return t == "posix" || t == "sysv" || t == "self" || t == "sm" || t == "shm" || t == "mm";
}

Transports SplitTransports(const char* configured) {
  const std::string tls = configured != nullptr ? configured : "";
  if (tls.empty() || tls == "all") return {"self", "^cma,posix,sysv,self"};
  if (tls[0] == '^') {
    std::vector<std::string> excluded = SplitList(tls.substr(1));
    const bool self = std::find(excluded.begin(), excluded.end(), "self") == excluded.end();
    return {self ? "self" : "", tls + ",cma,posix,sysv,self"};
  }
  Transports out;
  for (const std::string& t : SplitList(tls)) {
    if (t == "cma" || t == "xpmem" || t == "knem") continue;
    std::string& into = IsLocalTransport(t) ? out.local : out.network;
    const bool shm = t == "sm" || t == "shm" || t == "mm";
    out.shared_memory = out.shared_memory || shm || t == "posix" || t == "sysv";
    into += (into.empty() ? "" : ",") + (shm ? std::string("posix,sysv") : t);
  }
  return out;
}

constexpr char kOwnerRole[] = "rayaccel ucx transport v2: owner";
constexpr char kReaderRole[] = "rayaccel ucx transport v2: reader";
constexpr char kAddressLabel[] = "rayaccel ucx transport v4: address";
constexpr char kHelloLabel[] = "rayaccel ucx transport v4: hello";
constexpr char kSameHostRole[] = "rayaccel ucx transport v5: same-host reader";

}  // namespace
}  // namespace rayaccel::plugin::ucx

// ---------------------------------------------------------------------------------------
// The handles.

namespace rayaccel::plugin::ucx {
// How much of a staged transfer one piece moves: large enough that a piece costs the fabric
// what a whole transfer does, small enough that several are in flight at once.
constexpr uint64_t kStagedPiece = 4ull << 20;
// Pieces of one staged transfer in flight at a time.
constexpr uint32_t kPiecesInFlight = 4;
// A batch's small entries travel together, as chunks of at most kChunkEntries ranges and
// kChunkBytes bytes: one eager message each way per chunk instead of a request and a reply per
// entry (and no rendezvous handshake), several chunks in flight so that one side's copies
// overlap the other's. 64 KiB measured best over TCP on 4 KiB and 64 KiB entries (larger
// chunks leave fewer in flight; smaller ones cost more messages: docs/performance.md). An
// entry larger than kChunkEntryMax goes alone, zero-copy, as a transfer does.
constexpr uint32_t kChunkEntries = 256;
constexpr uint64_t kChunkBytes = 64ull << 10;
constexpr uint64_t kChunkEntryMax = kChunkBytes;
// The most a write, or a read's reply, carries eagerly on the network fabric: one message, where
// UCX's rendezvous would add a round trip (a handshake before the bytes) to save a copy. Over TCP between two
// network namespaces, 64 KiB writes took 45 us instead of 73 to 185, 256 KiB reads 1.3 GB/s
// instead of 0.7 (docs/performance.md).
constexpr uint64_t kEagerMax = 256 << 10;
// The least a transfer the owner copies between two processes of one host moves: below it, the
// copy's system calls (about 3 us here) cost more than carrying the bytes in the reply over
// loopback TCP (docs/performance.md).
constexpr uint64_t kSameHostCopyMin = 16 << 10;
constexpr size_t kRangeBytes = 24;  // region, offset, length on the wire
// A chunk the owner copies (same_host_copy.h) carries each range's address in the reader too,
// and no bytes: up to one system call's ranges, whatever their size.
constexpr size_t kCopiedRangeBytes = 32;
constexpr uint32_t kCopiedChunkEntries = 1024;
constexpr uint64_t kCopiedChunkBytes = 64ull << 20;  // what the owner's lock is held for
// A copied range costs about a microsecond of its own (the kernel pins its pages), as much as
// 512 bytes cost in a message chunk: smaller entries of a batch travel in messages.
constexpr uint64_t kCopiedEntryMin = 512;
constexpr uint32_t kCopiedChunk = 1;  // a batch message's flags (wire version 5)
// Page-locked pieces an endpoint keeps (64 MiB); pieces beyond go through pageable memory.
constexpr size_t kPinnedPieces = 16;

// Page-locked host buffers of one piece each (cuMemHostAlloc, hipHostMalloc), made on first
// use and kept for the endpoint's next pieces: a copy between the device and one runs at the
// bus's speed, and the driver stages it through no bounce buffer of its own. Thread-safe; the
// endpoint and the stagings holding a buffer share it.
class PinnedPool {
 public:
  explicit PinnedPool(DeviceMemoryOps* ops) : ops_(ops) {}
  ~PinnedPool() {
    for (auto [p, device] : free_) ops_->HostFree(p, device);
  }
  // A buffer of kStagedPiece bytes, or null (the pool is at its limit, or the plugin has no
  // page-locked memory: the caller uses pageable memory).
  char* Get(uint32_t device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      char* p = free_.back().first;
      devices_[p] = free_.back().second;
      free_.pop_back();
      return p;
    }
    if (unavailable_ || devices_.size() >= kPinnedPieces) return nullptr;
    void* p = nullptr;
    std::string why;
    if (ops_->HostAlloc(device, kStagedPiece, &p, &why) != RAYACCEL_STATUS_OK || p == nullptr) {
      unavailable_ = true;  // pageable from now on; asking the driver per piece costs more
      return nullptr;
    }
    devices_[static_cast<char*>(p)] = device;
    return static_cast<char*>(p);
  }
  void Put(char* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = devices_.find(p);
    if (it == devices_.end()) return;
    free_.emplace_back(p, it->second);
    devices_.erase(it);
  }

 private:
  DeviceMemoryOps* const ops_;
  std::mutex mu_;
  std::vector<std::pair<char*, uint32_t>> free_;  // with the device each was made on
  std::map<char*, uint32_t> devices_;             // handed out
  bool unavailable_ = false;
};

// Host memory a staged transfer passes through: a page-locked piece from the endpoint's pool
// where it fits, else pageable; uninitialized (written whole before it is read), given back
// with the transfer.
class Staging {
 public:
  Staging() = default;
  Staging(Staging&& other) noexcept { *this = std::move(other); }
  Staging& operator=(Staging&& other) noexcept {
    if (this != &other) {
      Release();
      std::swap(bytes_, other.bytes_);
      std::swap(size_, other.size_);
      std::swap(pool_, other.pool_);
    }
    return *this;
  }
  ~Staging() { Release(); }
  // `pool` may be null (no device memory on this side of the transfer).
  char* Take(uint64_t size, const std::shared_ptr<PinnedPool>& pool, uint32_t device) {
    Release();
    if (pool != nullptr && size <= kStagedPiece) bytes_ = pool->Get(device);
    if (bytes_ != nullptr) {
      pool_ = pool;
    } else {
      bytes_ = new char[size];
    }
    size_ = size;
    return bytes_;
  }
  char* data() const { return bytes_; }
  uint64_t size() const { return size_; }
  void Release() {
    if (bytes_ == nullptr) return;
    if (pool_ != nullptr) {
      pool_->Put(bytes_);
    } else {
      delete[] bytes_;
    }
    bytes_ = nullptr;
    size_ = 0;
    pool_.reset();
  }

 private:
  char* bytes_ = nullptr;
  uint64_t size_ = 0;
  std::shared_ptr<PinnedPool> pool_;  // null: bytes_ is new[]'s
};
// A peer's region as its descriptor names it.
struct RemoteRegion {
  uint64_t owner = 0, id = 0, length = 0;
  uint16_t flags = 0;
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
  bool replied = false;  // a read: the owner's reply arrived; a write: its acknowledgement
  bool same_host = false;  // the owner copies the bytes between the processes (same_host_copy.h)
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
  // What a reader on this host maps the region with (DeviceMemoryOps::Export): set for a staged
  // region that is one whole allocation; empty: the region is staged for every reader.
  std::string ipc_handle;
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
  void* base = nullptr;  // kMapped
  int users = 0;         // copies running outside the lock
  bool revoked = false;  // the owner asked for it back, or the connection failed
  bool confirm = false;  // tell the owner once closed
};

struct Connection : rayaccel_connection {
  Connection() { helper = Hooks(); }
  enum class State { kHello, kProven, kWelcomed };
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
  ucp_worker_h control = nullptr;  // handshake, heartbeats, bye: on the network fabric's
                                   // context where there is one
  uint64_t memory_types = 0;       // UCS_MEMORY_TYPE_* bits UCX can reach
  uint64_t uuid = 0;
  uint32_t peer_timeout_ms = 0;
  uint64_t next_region_id = 1;
  std::map<uint64_t, Region*> regions;
  std::map<uint64_t, uint32_t> serving;           // region id -> owner operations using its memory
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
    std::unique_ptr<PeerProcess> process;  // on this host, proven: copies go straight to it
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

  std::deque<std::string> notifications;
  uint64_t dropped_notifications = 0;
  uint64_t refused = 0;  // peers refused, for the log
  std::chrono::steady_clock::time_point refused_logged;
  uint64_t dropped_strays = 0;  // data messages from no admitted peer
  uint64_t malformed = 0;       // messages of the wrong shape, for the log
  std::chrono::steady_clock::time_point malformed_logged;
  std::chrono::steady_clock::time_point next_heartbeat;
  uint64_t activity = 0;  // bumped by every callback, so `wait` can tell something happened
  std::condition_variable progressed;  // the progress thread saw activity: `wait` looks again

  // Answers peers while the application is not calling in: handshakes, heartbeats, reads and
  // writes to serve, notifications. Asleep on UCX's event fds until something arrives.
  std::thread progress;
  int stop_fd = -1;  // eventfd that ends the progress thread
};

namespace {

using Ep = Endpoint;
using Conn = Connection;
using Peer = Ep::Peer;

// The host's handles as the helper's own (every handle the host passes came from this helper,
// or from a plugin's dispatch by its `helper`).
Ep* Of(rayaccel_transport_endpoint* h) { return static_cast<Ep*>(h); }
Region* Of(rayaccel_memory_region* h) { return static_cast<Region*>(h); }
Conn* Of(rayaccel_connection* h) { return static_cast<Conn*>(h); }
Request* Of(rayaccel_request* h) { return static_cast<Request*>(h); }

constexpr int kLocal = 0;    // ep->fabrics[kLocal]: UCX's self (and shared memory if named)
constexpr int kNetwork = 1;  // ep->fabrics[kNetwork]: TCP, RDMA, peers anywhere
constexpr size_t kMaxQueuedNotifications = 65536;
constexpr size_t kMaxPeers = 4096;     // admitted readers per endpoint
constexpr size_t kMaxHandshakes = 64;  // readers between hello and proof

void LogTo(const Ep* ep, rayaccel_log_level level, const std::string& text) {
  Log(ep->options.host, level, "ucx transport: " + text);
}

milliseconds PeerTimeout(const Ep* ep) { return milliseconds(ep->peer_timeout_ms); }
Clock::time_point PeerDeadline(const Ep* ep) { return Clock::now() + PeerTimeout(ep); }
// Heartbeats go four times per peer timeout (at most every second, at least every 10 ms).
milliseconds HeartbeatInterval(const Ep* ep) {
  return std::clamp(PeerTimeout(ep) / 4, milliseconds(10), milliseconds(1000));
}

// --- Sending

// Bytes UCX may still read: freed when the send completes.
struct Send {
  std::string header, bytes;
};

void SendDone(void* request, ucs_status_t /*status*/, void* user_data) {
  delete static_cast<Send*>(user_data);
  Lib().ucp_request_free(request);
}

// The parameters of a send whose completion `done` handles; `eager` for small messages that
// need no rendezvous.
ucp_request_param_t SendParams(ucp_send_nbx_callback_t done, void* user_data, bool eager) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = done;
  p.user_data = user_data;
  if (eager) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
  }
  return p;
}

// Sends a message that nobody waits for; its bytes live until UCX is done with them. Caller
// holds mu, outside UCX callbacks. `eager` for a small one; a large one UCX may rendezvous.
void SendMessage(ucp_ep_h uep, unsigned id, std::string header, std::string bytes,
                 bool eager = true) {
  if (uep == nullptr) return;
  auto* send = new Send{std::move(header), std::move(bytes)};
  ucp_request_param_t p = SendParams(SendDone, send, eager);
  ucs_status_ptr_t r =
      Lib().ucp_am_send_nbx(uep, id, send->header.empty() ? nullptr : send->header.data(),
                            send->header.size(), send->bytes.data(), send->bytes.size(), &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete send;
}

// --- Requests

// Frees a request once it is done, nobody will poll it, and UCX holds it no more.
void MaybeFree(Request* r) {
  if (r->done && r->abandoned && r->ucx == 0 && !r->queued) {
    r->endpoint->requests.erase(r);
    delete r;
  }
}

void CheckBarriers(Conn* c);
void PieceDone(Request* group, rayaccel_status status, const std::string& why);
void IssuePieces(Request* group);
void MaybeCompleteGroup(Request* group);
void IssueReadyGroups(Ep* ep);
void BatchPartDone(Request* batch, Request* part);

// Why an owner refused a range, in the words a reader's error gives.
const char* RefusalText(rayaccel_status status) {
  switch (status) {
    case RAYACCEL_STATUS_OK:
      return "";
    case RAYACCEL_STATUS_STALE:
      return "the peer has deregistered the region";
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
      return "the peer refused the range (not inside a region it holds)";
    default:
      return "the peer could not serve the range";
  }
}

// Only the statuses an owner gives for a range; anything else is the owner's bug.
rayaccel_status OwnerStatus(uint32_t status) {
  const auto s = static_cast<rayaccel_status>(status);
  return s == RAYACCEL_STATUS_OK || s == RAYACCEL_STATUS_STALE ||
                 s == RAYACCEL_STATUS_INVALID_ARGUMENT
             ? s
             : RAYACCEL_STATUS_INTERNAL;
}

// The request's outcome; later outcomes are ignored. Caller holds mu.
void Complete(Request* r, rayaccel_status status, std::string why = {}) {
  if (r->done) return;
  r->done = true;
  r->status = status;
  r->why = std::move(why);
  r->endpoint->activity++;
  Conn* c = r->connection;
  if (c != nullptr && !r->is_group &&
      (r->kind == Request::Kind::kRead || r->kind == Request::Kind::kWrite)) {
    c->transfers.erase(r->id);
    CheckBarriers(c);
  }
  if (r->group != nullptr) PieceDone(r->group, r->status, r->why);
  if (r->batch != nullptr) BatchPartDone(r->batch, r);
}

// --- Batches

// Entry `i` of `batch` ended; the batch keeps its first failure for the poll.
void SetEntry(Request* batch, uint32_t i, rayaccel_status status, const std::string& why) {
  batch->entry_status[i] = status;
  if (status != RAYACCEL_STATUS_OK && batch->reply == RAYACCEL_STATUS_OK) {
    batch->reply = status;
    batch->first_why = "entry " + std::to_string(i) + ": " + (why.empty() ? "failed" : why);
  }
}

// The batch ends once the call that made it returned and no part is running.
void MaybeCompleteBatch(Request* batch) {
  if (batch->held || batch->parts_running > 0 || batch->done) return;
  Complete(batch, batch->reply, batch->first_why);
  MaybeFree(batch);
}

// A part ended: its entries take its outcome (a chunk's own, per range, when it got through).
void BatchPartDone(Request* batch, Request* part) {
  part->batch = nullptr;
  if (part->chunk.empty()) {
    SetEntry(batch, part->entry, part->status, part->why);
  } else {
    for (const Request::ChunkEntry& e : part->chunk) {
      const bool whole = part->status != RAYACCEL_STATUS_OK;
      SetEntry(batch, e.entry, whole ? part->status : e.status,
               whole ? part->why : RefusalText(e.status));
    }
  }
  batch->parts_running--;
  MaybeCompleteBatch(batch);
}

// A piece of `group` ended: the next one goes out while all is well; the group ends once no
// piece is in flight and none is left to issue, failed if any piece failed.
void PieceDone(Request* group, rayaccel_status status, const std::string& why) {
  if (status != RAYACCEL_STATUS_OK && group->reply == RAYACCEL_STATUS_OK) {
    group->reply = status;
    group->first_why = why;
  }
  group->pieces_in_flight--;
  if (group->reply == RAYACCEL_STATUS_OK && group->next_piece < group->whole.length &&
      !group->issuing && !group->queued) {
    group->queued = true;
    group->endpoint->ready_groups.push_back(group);
  }
  MaybeCompleteGroup(group);
}

// The next pieces of the groups a callback queued. Caller holds mu, outside UCX callbacks.
void IssueReadyGroups(Ep* ep) {
  std::vector<Request*> ready;
  ready.swap(ep->ready_groups);
  for (Request* group : ready) {
    group->queued = false;
    if (!group->done) IssuePieces(group);
    MaybeCompleteGroup(group);
    MaybeFree(group);
  }
}

void MaybeCompleteGroup(Request* group) {
  if (group->held || group->issuing || group->pieces_in_flight > 0 || group->done) return;
  if (group->reply == RAYACCEL_STATUS_OK && group->next_piece < group->whole.length) return;
  Complete(group, group->reply, group->first_why);
  MaybeFree(group);
}

// A write lands when the owner acknowledged it and UCX has let go of the local bytes.
void MaybeCompleteWrite(Request* r) {
  if (r->kind != Request::Kind::kWrite || !r->replied || r->ucx != 0) return;
  Complete(r, r->reply,
           r->reply == RAYACCEL_STATUS_OK || r->reply == RAYACCEL_STATUS_STALE ||
                   r->reply == RAYACCEL_STATUS_INVALID_ARGUMENT
               ? RefusalText(r->reply)
               : "the peer could not store the bytes");
}

// Flushes pass, and notifications are queued to go, once every transfer numbered below their
// mark has completed.
void CheckBarriers(Conn* c) {
  const uint64_t oldest = c->transfers.empty() ? UINT64_MAX : c->transfers.begin()->first;
  auto& waiting = c->barriers;
  for (auto it = waiting.begin(); it != waiting.end();) {
    Request* r = *it;
    if (r->mark > oldest && c->failure == RAYACCEL_STATUS_OK) {
      ++it;
      continue;
    }
    it = waiting.erase(it);
    if (c->failure != RAYACCEL_STATUS_OK) {
      Complete(r, c->failure, c->failure_text);
    } else if (r->kind == Request::Kind::kFlush) {
      Complete(r, RAYACCEL_STATUS_OK);
    } else {
      c->endpoint->ready_notifications.push_back(r);
    }
    MaybeFree(r);
  }
}

void TransferSent(void* ucx_request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->endpoint->activity++;
  r->ucx--;
  if (status != UCS_OK) {
    Complete(r, FromUcs(status), "the transfer did not go out: " + StatusText(status));
  } else {
    MaybeCompleteWrite(r);
  }
  MaybeFree(r);
}

// A read's bytes have arrived at `bytes` (UCX's buffer, the request's staging, or where the read
// goes): put where the read goes (to the device, for a staged read) and the read completes.
void LandRead(Request* r, const void* bytes) {
  rayaccel_status st = RAYACCEL_STATUS_OK;
  std::string why;
  if (r->staged) {
    st = r->endpoint->options.device_ops->FromHost(r->local, bytes, r->length, r->device, &why);
  } else if (bytes != r->local) {
    std::memcpy(r->local, bytes, r->length);
  }
  r->staging.Release();
  Complete(r, st, st == RAYACCEL_STATUS_OK ? "" : "to device memory: " + why);
}

// Puts a write's bytes into `region` at `at`: a copy, or the driver's for a staged region.
// INTERNAL (logged) when the driver fails.
rayaccel_status StoreWrite(Ep* ep, const Region* region, void* at, const void* bytes, uint64_t n) {
  if (!region->staged) {
    std::memcpy(at, bytes, n);
    return RAYACCEL_STATUS_OK;
  }
  std::string why;
  if (ep->options.device_ops->FromHost(at, bytes, n, region->device, &why) == RAYACCEL_STATUS_OK) {
    return RAYACCEL_STATUS_OK;
  }
  LogTo(ep, RAYACCEL_LOG_WARN, "a write to device memory failed: " + why);
  return RAYACCEL_STATUS_INTERNAL;
}

void ReadReceived(void* ucx_request, ucs_status_t status, size_t /*length*/, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->ucx--;
  if (status == UCS_OK) {
    LandRead(r, r->staged ? r->staging.data() : r->local);
  } else {
    Complete(r, FromUcs(status), "the read's bytes did not arrive: " + StatusText(status));
  }
  MaybeFree(r);
}

// A chunk read's reply (each range's status, then the served ranges' bytes in order) lands
// where each entry goes; a reply of another shape fails the whole chunk.
void LandChunk(Request* r, const char* reply, size_t size) {
  const size_t head = r->chunk.size() * 4;
  uint64_t want = head;
  Reader in(reply, size);
  for (Request::ChunkEntry& e : r->chunk) {
    e.status = OwnerStatus(in.U32());
    if (e.status == RAYACCEL_STATUS_OK && !r->same_host) want += e.length;
  }
  if (r->same_host && size == head) {  // the owner copied the ranges into place
    Complete(r, RAYACCEL_STATUS_OK);
    return;
  }
  if (size < head || want != size) {
    Complete(r, RAYACCEL_STATUS_INTERNAL, "the peer answered a batch read with another length");
    return;
  }
  const char* at = reply + head;
  for (const Request::ChunkEntry& e : r->chunk) {
    if (e.status != RAYACCEL_STATUS_OK) continue;
    std::memcpy(e.local, at, e.length);
    at += e.length;
  }
  std::string().swap(r->scratch);
  Complete(r, RAYACCEL_STATUS_OK);
}

void ChunkReceived(void* ucx_request, ucs_status_t status, size_t /*length*/, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->ucx--;
  if (status == UCS_OK) {
    LandChunk(r, r->scratch.data(), r->scratch.size());
  } else {
    Complete(r, FromUcs(status), "the batch's bytes did not arrive: " + StatusText(status));
  }
  MaybeFree(r);
}

void NotificationSent(void* ucx_request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->ucx--;
  Complete(r, FromUcs(status), status == UCS_OK ? "" : "notify: " + StatusText(status));
  MaybeFree(r);
}

// Tracks a UCX operation `started` on behalf of `r`. Returns false when it failed to start
// (r is then completed with the reason).
bool Started(Request* r, ucs_status_ptr_t started, const char* what) {
  if (started == nullptr) return true;
  if (UCS_PTR_IS_ERR(started)) {
    Complete(r, FromUcs(UCS_PTR_STATUS(started)),
             std::string(what) + ": " + StatusText(UCS_PTR_STATUS(started)));
    return false;
  }
  r->ucx++;
  return true;
}

// --- Connections (the reader's side)

void DropMappings(Ep* ep, Conn* c);

// The connection is dead for good: every request on it fails with `status`, and its mappings
// close. Safe inside UCX callbacks. Caller holds mu.
void FailConnection(Conn* c, rayaccel_status status, std::string why) {
  if (c->failure != RAYACCEL_STATUS_OK) return;
  c->failure = status;
  c->failure_text = std::move(why);
  c->endpoint->activity++;
  std::map<uint64_t, Request*> transfers;
  transfers.swap(c->transfers);
  for (auto& [id, r] : transfers) {
    Complete(r, status, c->failure_text);
    MaybeFree(r);
  }
  CheckBarriers(c);
  DropMappings(c->endpoint, c);
}

// The remote endpoint is gone (or no longer trusted): every connection to it fails and every
// record of its readers is dropped; the link's UCX endpoints close after progress returns.
// Safe inside UCX callbacks. Caller holds mu.
void FailLink(Link* link, const std::string& why) {
  if (link->failed) return;
  Ep* ep = link->endpoint;
  link->failed = true;
  link->why = why;
  ep->activity++;
  for (auto& [token, c] : ep->connections) {
    if (c->link == link) FailConnection(c, RAYACCEL_STATUS_PEER_LOST, why);
  }
  for (auto& [token, p] : ep->peers) {
    if (p->link == link) p->failed = true;
  }
}

void LinkFailed(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* link = static_cast<Link*>(arg);
  link->ucx_failed = true;
  FailLink(link, "the peer went away: " + StatusText(status));
}

// A UCX endpoint to `worker_address`: with peer-failure handling when `on_error` is given,
// and then, where UCX_TLS leaves no transport that can handle it, without (logged once); the
// heartbeats still find a lost peer.
ucs_status_t CreateEp(Ep* ep, ucp_worker_h worker, const void* worker_address,
                      ucp_err_handler_cb_t on_error, void* arg, ucp_ep_h* out) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  p.address = static_cast<const ucp_address_t*>(worker_address);
  if (on_error != nullptr) {
    p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_error;
    p.err_handler.arg = arg;
  }
  ucs_status_t s = Lib().ucp_ep_create(worker, &p, out);
  if (s == UCS_ERR_UNREACHABLE && on_error != nullptr &&
      CreateEp(ep, worker, worker_address, nullptr, nullptr, out) == UCS_OK) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      LogTo(ep, RAYACCEL_LOG_INFO,
            "no transport in UCX_TLS reports a lost peer (UCX offers it over tcp); heartbeats "
            "alone will find one");
    });
    return UCS_OK;
  }
  return s;
}

unsigned ProgressData(Ep* ep) {
  unsigned n = 0;
  for (Ep::Fabric& f : ep->fabrics) {
    if (f.worker != nullptr) n += Lib().ucp_worker_progress(f.worker);
  }
  return n;
}

unsigned ProgressWorkers(Ep* ep) {
  return ProgressData(ep) + Lib().ucp_worker_progress(ep->control);
}

// Unmaps a region from every fabric; the one that allocated its memory last, since that frees
// it.
void UnmapRegion(Ep* ep, Region* region) {
  if (region->staged) {
    if (region->owned) ep->options.device_ops->Free(region->base, region->device);
    region->owned = false;
    return;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (Ep::Fabric& f : ep->fabrics) {
      ucp_mem_h& memh = region->memh[f.index];
      if (memh == nullptr || (f.index == region->allocated_by) != (pass == 1)) continue;
      Lib().ucp_mem_unmap(f.context, memh);
      memh = nullptr;
    }
  }
}

// Waits, making progress, until `request` (from an nbx call) completes or the deadline
// passes; frees it either way. Caller holds mu, outside UCX callbacks.
ucs_status_t WaitUcx(Ep* ep, ucs_status_ptr_t request, Clock::time_point deadline) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t s;
  while ((s = Lib().ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (Clock::now() > deadline) break;
    ProgressWorkers(ep);
  }
  Lib().ucp_request_free(request);
  return s == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : s;
}

// Closes a UCX endpoint, within `limit`. `force` skips the goodbye with the peer: for a peer
// that is gone or no longer trusted; UCX then cancels what is in flight on it.
void CloseEp(Ep* ep, ucp_ep_h uep, bool force, milliseconds limit) {
  if (uep == nullptr) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  WaitUcx(ep, Lib().ucp_ep_close_nbx(uep, &p), Clock::now() + limit);
}

// A worker's UCX address; empty for no worker.
ucs_status_t WorkerAddress(ucp_worker_h worker, std::string* out) {
  out->clear();
  if (worker == nullptr) return UCS_OK;
  ucp_address_t* address = nullptr;
  size_t size = 0;
  ucs_status_t s = Lib().ucp_worker_get_address(worker, &address, &size);
  if (s != UCS_OK) return s;
  out->assign(reinterpret_cast<const char*>(address), size);
  Lib().ucp_worker_release_address(worker, address);
  return UCS_OK;
}

Link* LinkTo(Ep* ep, uint64_t uuid) {
  auto it = ep->links.find(uuid);
  return it == ep->links.end() || it->second->failed ? nullptr : it->second.get();
}

// A new link to the endpoint `uuid`, with its control endpoint; its data endpoint comes when
// needed (EnsureData). Null when UCX cannot reach the address. Caller holds mu, outside UCX
// callbacks.
Link* OpenLink(Ep* ep, uint64_t uuid, const void* control_address, ucs_status_t* status) {
  auto link = std::make_unique<Link>();
  link->endpoint = ep;
  link->uuid = uuid;
  *status = CreateEp(ep, ep->control, control_address, LinkFailed, link.get(), &link->control);
  if (*status != UCS_OK) return nullptr;
  // A failed link of the same remote endpoint still closing is replaced: its users have failed.
  auto& slot = ep->links[uuid];
  if (slot != nullptr) {
    CloseEp(ep, slot->data, /*force=*/true, PeerTimeout(ep));
    CloseEp(ep, slot->control, /*force=*/true, PeerTimeout(ep));
    for (auto& [token, c] : ep->connections) {
      if (c->link == slot.get()) c->link = nullptr;
    }
    for (auto& [token, p] : ep->peers) {
      if (p->link == slot.get()) p->link = nullptr;
    }
  }
  slot = std::move(link);
  return slot.get();
}

// The link's data endpoint: on the local fabric when UCX reaches the peer's local worker (its
// own worker through self, or a same-host peer over shared memory where the operator named
// it), else on the network fabric. An empty address: the peer has no such fabric.
ucs_status_t EnsureData(Ep* ep, Link* link, const std::string& local, const std::string& network) {
  if (link->data != nullptr) return UCS_OK;
  ucs_status_t s = UCS_ERR_UNREACHABLE;
  const std::string* addresses[2] = {&local, &network};
  // UCX's self reaches only this endpoint's own worker: the local fabric is tried for a
  // connection to itself, or where the operator named shared memory (UCX logs an error for a
  // worker it cannot reach, so it is not tried on every peer).
  const bool local_may_reach = link->uuid == ep->uuid || ep->shared_memory;
  for (int i : {kLocal, kNetwork}) {
    if (ep->fabrics[i].worker == nullptr || addresses[i]->empty()) continue;
    if (i == kLocal && !local_may_reach) continue;
    s = CreateEp(ep, ep->fabrics[i].worker, addresses[i]->data(), nullptr, nullptr, &link->data);
    if (s == UCS_OK) {
      link->fabric = i;
      return s;
    }
  }
  return s;
}

// Closes links that failed (forcibly: UCX cancels what is in flight on them) and links no
// handshake succeeded over that nobody uses (with UCX's goodbye, bounded). Caller holds mu,
// outside UCX callbacks.
void CloseLinks(Ep* ep) {
  for (auto it = ep->links.begin(); it != ep->links.end();) {
    Link* link = it->second.get();
    if (!link->failed && (link->trusted || link->users > 0)) {
      ++it;
      continue;
    }
    if (link->say_goodbye && !link->ucx_failed) {
      Writer w;
      w.U64(ep->uuid).U32(kDeclaredLost);
      SendMessage(link->control, kGoodbye, {}, std::move(w.str()));
    }
    const bool force = link->failed && !link->say_goodbye;
    const milliseconds limit = std::min(PeerTimeout(ep), milliseconds(200));
    CloseEp(ep, link->data, force, limit);
    CloseEp(ep, link->control, force, limit);
    for (auto& [token, c] : ep->connections) {
      if (c->link == link) c->link = nullptr;
    }
    for (auto& [token, p] : ep->peers) {
      if (p->link == link) p->link = nullptr;
    }
    it = ep->links.erase(it);
  }
}

ucp_ep_h ControlOf(const Link* link) {
  return link != nullptr && !link->failed ? link->control : nullptr;
}
ucp_ep_h DataOf(const Link* link) {
  return link != nullptr && !link->failed ? link->data : nullptr;
}

Conn* ConnectionByToken(Ep* ep, uint64_t token) {
  auto it = ep->connections.find(token);
  return it == ep->connections.end() ? nullptr : it->second;
}

Peer* PeerByToken(Ep* ep, uint64_t token) {
  auto it = ep->peers.find(token);
  return it == ep->peers.end() ? nullptr : it->second.get();
}

// An admitted reader, or null (with the stray counted and logged once).
Peer* AdmittedPeer(Ep* ep, uint64_t token) {
  Peer* p = PeerByToken(ep, token);
  if (p != nullptr && p->authenticated && !p->failed) return p;
  if (ep->dropped_strays++ == 0) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          "dropped a transfer from a peer that is not admitted (no handshake, or declared lost)");
  }
  return nullptr;
}

// Counts an event a peer can provoke at will, and says whether to log it: the first, then at
// most one a minute, so that a peer cannot flood the log.
bool CountAndLog(uint64_t* count, Clock::time_point* logged) {
  ++*count;
  const Clock::time_point now = Clock::now();
  if (*count > 1 && now - *logged < std::chrono::minutes(1)) return false;
  *logged = now;
  return true;
}

void NoteRefused(Ep* ep, const std::string& why) {
  if (CountAndLog(&ep->refused, &ep->refused_logged)) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          "refused a connecting peer: " + why + " (" + std::to_string(ep->refused) +
              " refused so far)");
  }
}

// --- The owner's side

rayaccel_status CheckRange(Ep* ep, uint64_t region, uint64_t offset, uint64_t length,
                           Region** out) {
  auto it = ep->regions.find(region);
  if (it == ep->regions.end()) {
    return region != 0 && region < ep->next_region_id ? RAYACCEL_STATUS_STALE
                                                      : RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (length == 0 || offset > it->second->length || length > it->second->length - offset) {
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  *out = it->second;
  return RAYACCEL_STATUS_OK;
}

// This host, as an owner and a reader compare it: the kernel's boot id ("" where /proc has
// none, and nothing is mapped). Kept in a plain array: a progress thread may read it while the
// process exits, and a heap string would be orphaned when the plugin is unloaded.
std::string_view BootId() {
  static char id[64];
  static std::once_flag once;
  std::call_once(once, [] {
    if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re")) {
      if (std::fgets(id, sizeof(id), f) == nullptr) id[0] = '\0';
      std::fclose(f);
      for (size_t n = std::strlen(id); n > 0 && (id[n - 1] == '\n' || id[n - 1] == ' ');)
        id[--n] = '\0';
    }
  });
  return id;
}

// Closes the reader's mapping of `region` on `c` once no copy uses it, telling the owner
// where it asked. A mapping still being asked for is left to the asker. Caller holds mu.
void ReleaseMapping(Ep* ep, Conn* c, uint64_t region) {
  auto it = c->mappings.find(region);
  if (it == c->mappings.end()) return;
  Mapping& m = it->second;
  if (m.state == Mapping::State::kAsked || m.users > 0) return;
  if (m.state == Mapping::State::kMapped) ep->options.device_ops->Unimport(m.base, m.device);
  if (m.confirm) {
    Writer w;
    w.U64(ep->uuid).U64(c->token).U64(region);
    ep->outbox.push_back({false, c->token, kUnmapped, std::move(w.str())});
  }
  c->mappings.erase(it);
}

// The connection failed or closes: every mapping goes, now or when its last copy ends.
void DropMappings(Ep* ep, Conn* c) {
  std::vector<uint64_t> regions;
  for (auto& [region, m] : c->mappings) {
    m.revoked = true;
    regions.push_back(region);
  }
  for (uint64_t region : regions) ReleaseMapping(ep, c, region);
}

std::string ReplyHeader(uint64_t token, uint64_t id, rayaccel_status status) {
  Writer w;
  w.U64(token).U64(id).U32(static_cast<uint32_t>(status));
  return std::move(w.str());
}

// An operation the owner runs for a reader: a read's reply, a write's receive. Holds the
// region (Deregister waits for it) and the reader.
struct Serve {
  Ep* ep;
  uint64_t token, id, region;
  bool write;
  std::string header;
  // A staged device region: the bytes' host copy, and (a write) where they go. The region
  // outlives the serve (deregistration waits for it).
  Staging staging;
  const Region* staged_region = nullptr;
  void* staged_at = nullptr;
};

void EndServe(Serve* s, ucs_status_t status) {
  Ep* ep = s->ep;
  ep->activity++;
  if (auto it = ep->serving.find(s->region); it != ep->serving.end() && --it->second == 0) {
    ep->serving.erase(it);
  }
  Peer* p = PeerByToken(ep, s->token);
  if (p != nullptr && p->serving > 0) p->serving--;
  if (s->write && p != nullptr && !p->failed) {
    rayaccel_status st = status == UCS_OK ? RAYACCEL_STATUS_OK : RAYACCEL_STATUS_INTERNAL;
    ep->outbox.push_back({true, s->token, kPutAck, ReplyHeader(s->token, s->id, st)});
  }
  delete s;
}

void ServeSent(void* request, ucs_status_t status, void* user_data) {
  Lib().ucp_request_free(request);
  EndServe(static_cast<Serve*>(user_data), status);
}

void ServeReceived(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  Lib().ucp_request_free(request);
  auto* s = static_cast<Serve*>(user_data);
  if (status == UCS_OK && s->staged_region != nullptr &&
      StoreWrite(s->ep, s->staged_region, s->staged_at, s->staging.data(), s->staging.size()) !=
          RAYACCEL_STATUS_OK) {
    status = UCS_ERR_IO_ERROR;
  }
  EndServe(s, status);
}

Serve* StartServe(Ep* ep, Peer* p, uint64_t token, uint64_t id, uint64_t region, bool write) {
  ep->serving[region]++;
  p->serving++;
  return new Serve{ep, token, id, region, write, {}, {}, nullptr, nullptr};
}

// Sends the reads validated in the handler: the region's bytes, or the status alone.
void ServeGets(Ep* ep) {
  std::vector<Ep::GetServe> gets;
  gets.swap(ep->gets);
  for (const Ep::GetServe& g : gets) {
    Peer* p = PeerByToken(ep, g.token);
    ucp_ep_h data = p != nullptr && !p->failed ? DataOf(p->link) : nullptr;
    if (data == nullptr) continue;
    Region* region = nullptr;
    rayaccel_status status = g.status;
    if (status == RAYACCEL_STATUS_OK)
      status = CheckRange(ep, g.region, g.offset, g.length, &region);
    if (status != RAYACCEL_STATUS_OK) {
      SendMessage(data, kGetReply, ReplyHeader(g.token, g.id, status), {});
      continue;
    }
    const char* from = static_cast<char*>(region->base) + g.offset;
    if (g.to != 0 && p->process != nullptr && region->host) {
      // A reader on this host: the bytes go straight into its memory, where it asked.
      iovec local{const_cast<char*>(from), g.length};
      iovec remote{InPeer(g.to), g.length};
      std::string why;
      if (!p->process->Write(&local, &remote, 1, &why)) {
        LogTo(ep, RAYACCEL_LOG_WARN, "a copy to a reader on this host failed: " + why);
        status = RAYACCEL_STATUS_INTERNAL;
      }
      SendMessage(data, kGetReply, ReplyHeader(g.token, g.id, status), {});
      continue;
    }
    Staging staging;
    if (region->staged) {
      // Only the range asked for leaves the device, into host memory of this read's own.
      staging.Take(g.length, ep->pinned, region->device);
      std::string why;
      if (ep->options.device_ops->ToHost(staging.data(), from, g.length, region->device, &why) !=
          RAYACCEL_STATUS_OK) {
        LogTo(ep, RAYACCEL_LOG_WARN, "a read of device memory failed: " + why);
        SendMessage(data, kGetReply, ReplyHeader(g.token, g.id, RAYACCEL_STATUS_INTERNAL), {});
        continue;
      }
      from = staging.data();
    }
    Serve* s = StartServe(ep, p, g.token, g.id, g.region, /*write=*/false);
    s->header = ReplyHeader(g.token, g.id, RAYACCEL_STATUS_OK);
    s->staging = std::move(staging);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = ServeSent;
    param.user_data = s;
    if (!region->staged) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = region->memh[p->link->fabric];
    }
    if (g.length <= kEagerMax && p->link->fabric == kNetwork) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_AM_SEND_FLAG_EAGER;
    }
    ucs_status_ptr_t r = Lib().ucp_am_send_nbx(data, kGetReply, s->header.data(), s->header.size(),
                                               from, g.length, &param);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      EndServe(s, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r));
    }
  }
}

// A copied chunk's ranges, each checked against the live regions (and host memory, as the
// reader's flag says it is), moved in one system call into the reader's addresses (`write`) or
// out of them: each range's status, INTERNAL for all that were to move if the copy failed.
std::string CopyRanges(Ep* ep, Peer* p, bool write,
                       const std::vector<std::array<uint64_t, 3>>& ranges, const uint64_t* to) {
  std::vector<rayaccel_status> st(ranges.size());
  std::vector<iovec> local, remote;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto& [id, offset, length] = ranges[i];
    Region* region = nullptr;
    st[i] = CheckRange(ep, id, offset, length, &region);
    if (st[i] == RAYACCEL_STATUS_OK && !region->host) st[i] = RAYACCEL_STATUS_INVALID_ARGUMENT;
    if (st[i] != RAYACCEL_STATUS_OK) continue;
    local.push_back({static_cast<char*>(region->base) + offset, length});
    remote.push_back({InPeer(to[i]), length});
  }
  std::string why;
  if (!local.empty() && !(write ? p->process->Write(local.data(), remote.data(), local.size(), &why)
                                : p->process->Read(local.data(), remote.data(), local.size(), &why))) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          std::string("a batch copy ") + (write ? "to" : "from") + " a reader on this host failed: " +
              why);
    for (rayaccel_status& s : st) {
      if (s == RAYACCEL_STATUS_OK) s = RAYACCEL_STATUS_INTERNAL;
    }
  }
  Writer w;
  for (rayaccel_status s : st) w.U32(static_cast<uint32_t>(s));
  return std::move(w.str());
}

// A reader on this host's copied batch write (the ranges with their addresses in the reader,
// no bytes): each range's status goes back. Inside a UCX callback.
void CopyPutBatch(Ep* ep, Peer* p, uint64_t id, uint32_t n, const char* bytes, size_t size) {
  if (n == 0 || n > kCopiedChunkEntries || size != n * kCopiedRangeBytes ||
      p->process == nullptr) {
    ep->outbox.push_back(
        {true, p->token, kPutBatchAck, ReplyHeader(p->token, id, RAYACCEL_STATUS_INVALID_ARGUMENT)});
    return;
  }
  Reader in(bytes, size);
  std::vector<std::array<uint64_t, 3>> ranges(n);
  std::vector<uint64_t> from(n);
  for (uint32_t i = 0; i < n; ++i) {
    ranges[i] = {in.U64(), in.U64(), in.U64()};
    from[i] = in.U64();
  }
  ep->outbox.push_back({true, p->token, kPutBatchAck,
                        ReplyHeader(p->token, id, RAYACCEL_STATUS_OK),
                        CopyRanges(ep, p, /*write=*/false, ranges, from.data())});
}

// Sends the batched reads validated in the handler: each range's status, then the bytes of
// those served, copied out of the regions now (a range is checked again: a region may have
// gone since), so no region is held while the reply travels.
void ServeBatchGets(Ep* ep) {
  std::vector<Ep::BatchServe> batches;
  batches.swap(ep->batch_gets);
  for (const Ep::BatchServe& b : batches) {
    Peer* p = PeerByToken(ep, b.token);
    ucp_ep_h data = p != nullptr && !p->failed ? DataOf(p->link) : nullptr;
    if (data == nullptr) continue;
    if (b.status != RAYACCEL_STATUS_OK) {
      SendMessage(data, kGetBatchReply, ReplyHeader(b.token, b.id, b.status), {});
      continue;
    }
    if (!b.to.empty()) {
      SendMessage(data, kGetBatchReply, ReplyHeader(b.token, b.id, RAYACCEL_STATUS_OK),
                  CopyRanges(ep, p, /*write=*/true, b.ranges, b.to.data()), /*eager=*/true);
      continue;
    }
    std::string reply(b.ranges.size() * 4, '\0');
    Writer statuses;
    for (const auto& [id, offset, length] : b.ranges) {
      Region* region = nullptr;
      rayaccel_status st = CheckRange(ep, id, offset, length, &region);
      if (st == RAYACCEL_STATUS_OK) {
        const char* from = static_cast<const char*>(region->base) + offset;
        const size_t at = reply.size();
        reply.resize(at + length);
        std::string why;
        if (!region->staged) {
          std::memcpy(&reply[at], from, length);
        } else if (ep->options.device_ops->ToHost(&reply[at], from, length, region->device, &why) !=
                   RAYACCEL_STATUS_OK) {
          LogTo(ep, RAYACCEL_LOG_WARN, "a read of device memory failed: " + why);
          reply.resize(at);
          st = RAYACCEL_STATUS_INTERNAL;
        }
      }
      statuses.U32(static_cast<uint32_t>(st));
    }
    std::memcpy(&reply[0], statuses.str().data(), statuses.str().size());
    SendMessage(data, kGetBatchReply, ReplyHeader(b.token, b.id, RAYACCEL_STATUS_OK),
                std::move(reply), /*eager=*/true);
  }
}

// A reader's batched write, whole in `bytes` (the ranges, then their bytes in order): each
// range is checked against the live regions and stored, and the reader hears each one's status.
void ApplyPutBatch(Ep* ep, uint64_t token, uint64_t id, uint32_t n, const char* bytes,
                   size_t size) {
  Reader in(bytes, size);
  std::vector<std::array<uint64_t, 3>> ranges(n);
  uint64_t total = 0;
  bool ok = true;
  for (auto& r : ranges) {
    r = {in.U64(), in.U64(), in.U64()};
    ok = ok && r[2] <= kChunkBytes;
    total += std::min(r[2], kChunkBytes + 1);
  }
  if (!ok || !in.ok() || total != size - n * kRangeBytes) {
    ep->outbox.push_back(
        {true, token, kPutBatchAck, ReplyHeader(token, id, RAYACCEL_STATUS_INVALID_ARGUMENT)});
    return;
  }
  Writer statuses;
  const char* at = bytes + n * kRangeBytes;
  for (const auto& [region_id, offset, length] : ranges) {
    Region* region = nullptr;
    rayaccel_status st = CheckRange(ep, region_id, offset, length, &region);
    if (st == RAYACCEL_STATUS_OK) {
      st = StoreWrite(ep, region, static_cast<char*>(region->base) + offset, at, length);
    }
    at += length;
    statuses.U32(static_cast<uint32_t>(st));
  }
  ep->outbox.push_back({true, token, kPutBatchAck, ReplyHeader(token, id, RAYACCEL_STATUS_OK),
                        std::move(statuses.str())});
}

// A batched write too large for one eager message, received whole before it is applied.
struct BatchPut {
  Ep* ep;
  uint64_t token, id;
  uint32_t n;
  std::string bytes;
};

void BatchPutReceived(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  Lib().ucp_request_free(request);
  auto* b = static_cast<BatchPut*>(user_data);
  b->ep->activity++;
  if (status == UCS_OK) {
    ApplyPutBatch(b->ep, b->token, b->id, b->n, b->bytes.data(), b->bytes.size());
  } else {  // the writer hears it (if it is still there), rather than waiting in vain
    b->ep->outbox.push_back(
        {true, b->token, kPutBatchAck, ReplyHeader(b->token, b->id, RAYACCEL_STATUS_INTERNAL)});
  }
  delete b;
}

// A reader's write: checked against the owner's live regions before a byte lands. Inside a
// UCX callback.
void OnPut(Ep* ep, Ep::Fabric* fabric, uint64_t token, uint64_t id, uint64_t region,
           uint64_t offset, uint64_t length, void* data, size_t data_length, bool rndv) {
  Peer* p = AdmittedPeer(ep, token);
  Region* target = nullptr;
  rayaccel_status status = p == nullptr ? RAYACCEL_STATUS_INVALID_ARGUMENT
                                        : CheckRange(ep, region, offset, length, &target);
  if (status == RAYACCEL_STATUS_OK && data_length != length) {
    status = RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (status != RAYACCEL_STATUS_OK) {
    // A large one is left unread: returning from the callback without receiving it tells
    // the sender UCX is done with its bytes (UCX sends the acknowledgement itself).
    if (p != nullptr) ep->outbox.push_back({true, token, kPutAck, ReplyHeader(token, id, status)});
    return;
  }
  void* at = static_cast<char*>(target->base) + offset;
  if (!rndv) {
    status = StoreWrite(ep, target, at, data, length);
    ep->outbox.push_back({true, token, kPutAck, ReplyHeader(token, id, status)});
    return;
  }
  Serve* s = StartServe(ep, p, token, id, region, /*write=*/true);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = ServeReceived;
  param.user_data = s;
  if (target->staged) {
    // Lands in host memory first; ServeReceived copies it to the device.
    s->staged_region = target;
    s->staged_at = at;
    at = s->staging.Take(length, ep->pinned, target->device);
  } else {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = target->memh[fabric->index];
  }
  ucs_status_ptr_t r = Lib().ucp_am_recv_data_nbx(fabric->worker, data, at, length, &param);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) EndServe(s, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r));
}

// A reader on this host asks its owner to copy its bytes at `from` (in the reader's memory)
// into a region: checked against the owner's live regions as a write by message is. Inside a
// UCX callback.
void CopyPut(Ep* ep, uint64_t token, uint64_t id, uint64_t region, uint64_t offset, uint64_t length,
             uint64_t from, size_t data_length) {
  Peer* p = AdmittedPeer(ep, token);
  if (p == nullptr) return;
  Region* target = nullptr;
  rayaccel_status status = CheckRange(ep, region, offset, length, &target);
  if (status == RAYACCEL_STATUS_OK &&
      (data_length != 0 || p->process == nullptr || !target->host)) {
    status = RAYACCEL_STATUS_INVALID_ARGUMENT;  // not a reader this owner copies for
  }
  if (status == RAYACCEL_STATUS_OK) {
    iovec local{static_cast<char*>(target->base) + offset, length};
    iovec remote{InPeer(from), length};
    std::string why;
    if (!p->process->Read(&local, &remote, 1, &why)) {
      LogTo(ep, RAYACCEL_LOG_WARN, "a copy from a reader on this host failed: " + why);
      status = RAYACCEL_STATUS_INTERNAL;
    }
  }
  ep->outbox.push_back({true, token, kPutAck, ReplyHeader(token, id, status)});
}

// --- Messages

// One handler for every message: checks its shape and applies it. A malformed message from a
// peer is dropped with a log line; a large one a peer pushed at us is released unread. Runs
// inside progress, mu held.
ucs_status_t OnMessage(Ep* ep, Ep::Fabric* fabric, unsigned id, const void* header,
                       size_t header_length, void* data, size_t length,
                       const ucp_am_recv_param_t* param) {
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  ep->activity++;
  Reader h(header, header_length);
  Reader in(rndv ? nullptr : data, rndv ? 0 : length);
  // A large message the handler does not receive is dropped by returning: UCX then tells the
  // sender it is done with the bytes (ucp_am_data_release here would tell it twice).
  if (rndv && id != kPut && id != kGetReply && id != kPutBatch && id != kGetBatchReply) {
    return UCS_OK;
  }
  switch (id) {
    case kHello: {
      uint64_t uuid = in.U64(), token = in.U64();
      Nonce nonce = in.Array<16>();
      uint32_t n = in.U32();
      const uint8_t* control = in.Bytes(n);
      uint32_t l = in.U32();
      const uint8_t* local = in.Bytes(l);
      uint32_t m = in.U32();
      const uint8_t* network = in.Bytes(m);
      const Mac signature = in.Array<32>();
      if (!in.at_end() || header_length != 0 || n == 0 || l + m == 0 ||
          n > RAYACCEL_TRANSPORT_MAX_BLOB || l > RAYACCEL_TRANSPORT_MAX_BLOB ||
          m > RAYACCEL_TRANSPORT_MAX_BLOB) {
        break;
      }
      // Its worker addresses go to UCX only when a holder of the key made them.
      if (!SameMac(signature, MacOf(ep->key, kHelloLabel,
                                    std::string_view(static_cast<const char*>(data),
                                                     length - signature.size())))) {
        NoteRefused(ep, "its hello was not made with the shared key");
        return UCS_OK;
      }
      size_t handshakes = ep->hellos.size();
      for (const auto& [t, p] : ep->peers) handshakes += p->authenticated ? 0 : 1;
      if (ep->peers.size() + ep->hellos.size() >= kMaxPeers || handshakes >= kMaxHandshakes) {
        NoteRefused(ep, "too many connected or connecting peers");
        return UCS_OK;
      }
      if (ep->peers.count(token) != 0) return UCS_OK;  // a duplicate
      auto text = [](const uint8_t* p, uint32_t size) {
        return size == 0 ? std::string() : std::string(reinterpret_cast<const char*>(p), size);
      };
      ep->hellos.push_back(
          {uuid, token, nonce, text(control, n), text(local, l), text(network, m)});
      return UCS_OK;
    }
    case kChallenge: {
      uint64_t token = in.U64(), owner = in.U64();
      Nonce owner_nonce = in.Array<16>();
      Mac mac = in.Array<32>();
      if (!in.at_end()) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr || c->state != Conn::State::kHello || c->failure != RAYACCEL_STATUS_OK) {
        return UCS_OK;
      }
      if (owner != c->peer_uuid) {
        FailConnection(c, RAYACCEL_STATUS_INVALID_ARGUMENT,
                       "the peer answered as another endpoint than the address names");
        return UCS_OK;
      }
      if (!SameMac(mac,
                   Prove(ep->key, kOwnerRole, token, ep->uuid, owner, c->nonce, owner_nonce))) {
        FailConnection(c, RAYACCEL_STATUS_UNAUTHENTICATED,
                       "the peer could not prove the shared transport key (its key differs)");
        return UCS_OK;
      }
      c->state = Conn::State::kProven;
      c->last_heard = Clock::now();
      Mac proof = Prove(ep->key, kReaderRole, token, ep->uuid, owner, c->nonce, owner_nonce);
      Writer w;
      w.U64(ep->uuid).U64(token).Bytes(proof.data(), proof.size());
      // An owner on this host may copy straight into this process once it read this proof here.
      uint64_t proof_at = 0;
      if (ep->same_host_copy && !BootId().empty()) {
        c->same_host_proof =
            Prove(ep->key, kSameHostRole, token, ep->uuid, owner, c->nonce, owner_nonce);
        proof_at = reinterpret_cast<uintptr_t>(c->same_host_proof.data());
      }
      w.U32(static_cast<uint32_t>(BootId().size())).Bytes(BootId().data(), BootId().size());
      w.U32(static_cast<uint32_t>(getpid())).U64(proof_at);
      ep->outbox.push_back({false, token, kProof, std::move(w.str())});
      return UCS_OK;
    }
    case kProof: {
      uint64_t uuid = in.U64(), token = in.U64();
      Mac mac = in.Array<32>();
      const uint32_t n = in.U32();
      const uint8_t* boot = in.Bytes(n);
      const auto pid = static_cast<pid_t>(in.U32());
      const uint64_t proof_at = in.U64();
      if (!in.at_end() || n > 64) break;
      Peer* p = PeerByToken(ep, token);
      if (p == nullptr || p->authenticated || p->failed || p->uuid != uuid) return UCS_OK;
      if (!SameMac(mac, Prove(ep->key, kReaderRole, token, uuid, ep->uuid, p->reader_nonce,
                              p->owner_nonce))) {
        NoteRefused(ep, "it could not prove the shared transport key");
        p->failed = true;
        p->refuse = kWrongKey;
        return UCS_OK;
      }
      p->authenticated = true;  // its data endpoint and welcome follow, after progress
      p->deadline = PeerDeadline(ep);
      if (ep->same_host_copy && proof_at != 0 && n > 0 && !BootId().empty() &&
          std::string_view(reinterpret_cast<const char*>(boot), n) == BootId()) {
        const Mac expected =
            Prove(ep->key, kSameHostRole, token, uuid, ep->uuid, p->reader_nonce, p->owner_nonce);
        std::string why;
        p->process = PeerProcess::Open(pid, proof_at, expected.data(), expected.size(), &why);
        if (p->process == nullptr) {
          LogTo(ep, RAYACCEL_LOG_DEBUG,
                "a reader on this host is served by message, not copied to: " + why);
        }
      }
      return UCS_OK;
    }
    case kWelcome: {
      uint64_t token = in.U64(), owner = in.U64();
      const auto pid = static_cast<pid_t>(in.U32());
      const uint32_t n = in.U32();
      const uint8_t* boot = in.Bytes(n);
      const uint32_t same_host = in.U32();
      if (!in.at_end() || same_host > 1) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr || c->state != Conn::State::kProven || owner != c->peer_uuid) {
        return UCS_OK;
      }
      // Another process on this host: the driver maps its memory here (not in its own process).
      c->may_map = n > 0 && pid != getpid() && !BootId().empty() &&
                   std::string_view(reinterpret_cast<const char*>(boot), n) == BootId();
      c->same_host = c->may_map && same_host == 1 && ep->same_host_copy;
      c->state = Conn::State::kWelcomed;
      c->last_heard = Clock::now();
      return UCS_OK;
    }
    case kRefused: {
      uint64_t token = in.U64(), owner = in.U64();
      uint32_t reason = in.U32();
      if (!in.at_end()) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr || owner != c->peer_uuid) return UCS_OK;
      if (reason == kTooMany) {
        FailConnection(c, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "the peer has too many connections");
      } else {
        FailConnection(c, RAYACCEL_STATUS_UNAUTHENTICATED,
                       "the peer refused our transport key (the two keys differ)");
      }
      return UCS_OK;
    }
    case kPing: {
      uint64_t uuid = in.U64(), token = in.U64();
      if (!in.at_end()) break;
      Peer* p = PeerByToken(ep, token);
      if (p != nullptr && p->authenticated && p->uuid == uuid) p->deadline = PeerDeadline(ep);
      return UCS_OK;
    }
    case kPong: {
      uint64_t owner = in.U64(), token = in.U64();
      if (!in.at_end()) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c != nullptr && c->peer_uuid == owner) c->last_heard = Clock::now();
      return UCS_OK;
    }
    case kBye: {
      uint64_t uuid = in.U64(), token = in.U64();
      if (!in.at_end()) break;
      Peer* p = PeerByToken(ep, token);
      if (p != nullptr && p->uuid == uuid) p->failed = true;
      return UCS_OK;
    }
    case kGoodbye: {
      uint64_t uuid = in.U64();
      uint32_t reason = in.U32();
      if (!in.at_end()) break;
      if (Link* link = LinkTo(ep, uuid)) {
        FailLink(link, reason == kDeclaredLost
                           ? "the peer declared us lost (it did not hear from us within its peer "
                             "timeout)"
                           : "the peer closed its endpoint");
      }
      return UCS_OK;
    }
    case kMapAsk: {
      uint64_t uuid = in.U64(), token = in.U64(), region = in.U64();
      if (!in.at_end()) break;
      Peer* p = AdmittedPeer(ep, token);
      if (p == nullptr || p->uuid != uuid) return UCS_OK;
      p->deadline = PeerDeadline(ep);
      auto it = ep->regions.find(region);
      rayaccel_status status = RAYACCEL_STATUS_OK;
      if (it == ep->regions.end()) {  // as a transfer is answered (CheckRange)
        status = region != 0 && region < ep->next_region_id ? RAYACCEL_STATUS_STALE
                                                            : RAYACCEL_STATUS_INVALID_ARGUMENT;
      } else if (it->second->ipc_handle.empty()) {
        status = RAYACCEL_STATUS_UNSUPPORTED;
      }
      Writer w;
      w.U64(token).U64(region).U32(static_cast<uint32_t>(status));
      if (status == RAYACCEL_STATUS_OK) {
        const Region* r = it->second;
        w.U32(r->device).U64(r->length).U32(static_cast<uint32_t>(r->ipc_handle.size()));
        w.Bytes(r->ipc_handle.data(), r->ipc_handle.size());
        ep->mapped[region].insert(token);  // until it says it closed the mapping
      } else {
        w.U32(0).U64(0).U32(0);
      }
      ep->outbox.push_back({true, token, kMapReply, std::move(w.str())});
      return UCS_OK;
    }
    case kMapReply: {
      uint64_t token = in.U64(), region = in.U64();
      auto status = static_cast<rayaccel_status>(in.U32());
      uint32_t device = in.U32();
      uint64_t size = in.U64();
      uint32_t n = in.U32();
      const uint8_t* handle = in.Bytes(n);
      if (!in.at_end() || n > RAYACCEL_TRANSPORT_MAX_BLOB) break;
      Conn* c = ConnectionByToken(ep, token);
      auto it = c != nullptr ? c->mappings.find(region) : decltype(c->mappings)::iterator();
      if (c == nullptr || it == c->mappings.end() || it->second.state != Mapping::State::kAsked ||
          it->second.answered) {
        return UCS_OK;  // late, or not asked
      }
      c->last_heard = Clock::now();
      Mapping& m = it->second;
      m.answered = true;
      m.answer = status == RAYACCEL_STATUS_OK || status == RAYACCEL_STATUS_STALE
                     ? status
                     : RAYACCEL_STATUS_UNSUPPORTED;
      if (m.answer == RAYACCEL_STATUS_OK) {
        m.handle.assign(reinterpret_cast<const char*>(handle), n);
        m.device = device;
        m.length = size;
        m.confirm = true;  // the owner now counts us among its region's mappers
      }
      return UCS_OK;
    }
    case kUnmap: {
      uint64_t token = in.U64(), region = in.U64();
      if (!in.at_end()) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr) return UCS_OK;
      auto it = c->mappings.find(region);
      if (it == c->mappings.end()) {  // never mapped, or closed already: say so
        Writer w;
        w.U64(ep->uuid).U64(token).U64(region);
        ep->outbox.push_back({false, token, kUnmapped, std::move(w.str())});
        return UCS_OK;
      }
      it->second.revoked = true;
      it->second.confirm = true;
      ReleaseMapping(ep, c, region);  // or when the last copy ends, or the asker gives up
      return UCS_OK;
    }
    case kUnmapped: {
      uint64_t uuid = in.U64(), token = in.U64(), region = in.U64();
      if (!in.at_end()) break;
      Peer* p = PeerByToken(ep, token);
      if (p == nullptr || p->uuid != uuid) return UCS_OK;
      if (auto it = ep->mapped.find(region); it != ep->mapped.end()) {
        it->second.erase(token);
        if (it->second.empty()) ep->mapped.erase(it);
      }
      return UCS_OK;
    }
    case kNotify: {
      uint64_t token = h.U64();
      if (!h.at_end() || length == 0 || length > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) break;
      if (AdmittedPeer(ep, token) == nullptr) return UCS_OK;
      if (ep->notifications.size() >= kMaxQueuedNotifications) {
        if (ep->dropped_notifications++ == 0) {
          LogTo(ep, RAYACCEL_LOG_WARN, "notification queue full: dropping new notifications");
        }
        return UCS_OK;
      }
      ep->notifications.emplace_back(static_cast<const char*>(data), length);
      return UCS_OK;
    }
    case kGet: {
      uint64_t token = h.U64(), req = h.U64(), region = h.U64(), offset = h.U64(), size = h.U64();
      const uint64_t to = h.left() == 8 ? h.U64() : 0;  // a reader on this host: where, in it
      if (!h.at_end() || length != 0) break;
      Peer* p = AdmittedPeer(ep, token);
      if (p == nullptr) return UCS_OK;
      p->deadline = PeerDeadline(ep);
      Region* unused = nullptr;
      ep->gets.push_back(
          {token, req, region, offset, size, CheckRange(ep, region, offset, size, &unused), to});
      return UCS_OK;
    }
    case kPut: {
      uint64_t token = h.U64(), req = h.U64(), region = h.U64(), offset = h.U64(), size = h.U64();
      const uint64_t from = h.left() == 8 ? h.U64() : 0;  // a reader on this host: where, in it
      if (!h.at_end()) break;
      if (Peer* p = PeerByToken(ep, token); p != nullptr && p->authenticated) {
        p->deadline = PeerDeadline(ep);
      }
      if (from != 0) {
        CopyPut(ep, token, req, region, offset, size, from, length);
        return UCS_OK;
      }
      OnPut(ep, fabric, token, req, region, offset, size, data, length, rndv);
      return UCS_OK;
    }
    case kGetReply:
    case kPutAck: {
      uint64_t token = h.U64(), req = h.U64();
      auto status = static_cast<rayaccel_status>(h.U32());
      Conn* c = h.at_end() ? ConnectionByToken(ep, token) : nullptr;
      auto it = c != nullptr ? c->transfers.find(req) : decltype(c->transfers)::iterator();
      const Request::Kind kind = id == kGetReply ? Request::Kind::kRead : Request::Kind::kWrite;
      if (c == nullptr || it == c->transfers.end() || it->second->kind != kind ||
          it->second->replied || c->failure != RAYACCEL_STATUS_OK) {
        if (!h.at_end()) break;  // else late (failed or closed), or not ours
        return UCS_OK;
      }
      Request* r = it->second;
      c->last_heard = Clock::now();
      r->replied = true;
      // Only the statuses an owner gives; anything else is the owner's bug.
      if (status != RAYACCEL_STATUS_OK && status != RAYACCEL_STATUS_STALE &&
          status != RAYACCEL_STATUS_INVALID_ARGUMENT) {
        status = RAYACCEL_STATUS_INTERNAL;
      }
      if (kind == Request::Kind::kWrite) {
        if (length != 0) break;
        r->reply = status;
        MaybeCompleteWrite(r);  // or once UCX lets go of the local bytes
        MaybeFree(r);
        return UCS_OK;
      }
      if (status == RAYACCEL_STATUS_OK && r->same_host && length == 0 && !rndv) {
        Complete(r, RAYACCEL_STATUS_OK);  // the owner copied the bytes into place
        MaybeFree(r);
        return UCS_OK;
      }
      if (status != RAYACCEL_STATUS_OK || length != r->length) {
        Complete(r, status != RAYACCEL_STATUS_OK ? status : RAYACCEL_STATUS_INTERNAL,
                 status == RAYACCEL_STATUS_STALE ? "the peer has deregistered the region"
                 : status == RAYACCEL_STATUS_INVALID_ARGUMENT
                     ? "the peer refused the range (not inside a region it holds)"
                     : "the peer answered a read with another length or status");
        MaybeFree(r);
        return UCS_OK;
      }
      if (!rndv) {
        LandRead(r, data);
        MaybeFree(r);
        return UCS_OK;
      }
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = ReadReceived;
      p.user_data = r;
      void* into = r->local;
      if (r->staged) {
        into = r->staging.Take(length, ep->pinned, r->device);
      } else {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p.memh = r->memh;
      }
      ucs_status_ptr_t got = Lib().ucp_am_recv_data_nbx(fabric->worker, data, into, length, &p);
      if (got == nullptr) {
        LandRead(r, into);
      } else if (UCS_PTR_IS_ERR(got)) {
        Complete(r, FromUcs(UCS_PTR_STATUS(got)),
                 "the read's bytes did not arrive: " + StatusText(UCS_PTR_STATUS(got)));
      } else {
        r->ucx++;
      }
      MaybeFree(r);
      return UCS_OK;
    }
    case kGetBatch: {
      uint64_t token = h.U64(), req = h.U64();
      uint32_t n = h.U32();
      const uint32_t flags = h.left() == 4 ? h.U32() : 0;
      if (!h.at_end()) break;
      Peer* p = AdmittedPeer(ep, token);
      if (p == nullptr) return UCS_OK;
      p->deadline = PeerDeadline(ep);
      Ep::BatchServe b{token, req, RAYACCEL_STATUS_OK, {}, {}};
      if (flags == kCopiedChunk) {
        if (n == 0 || n > kCopiedChunkEntries || length != n * kCopiedRangeBytes ||
            p->process == nullptr) {
          b.status = RAYACCEL_STATUS_INVALID_ARGUMENT;
        } else {
          b.ranges.resize(n);
          b.to.resize(n);
          for (uint32_t i = 0; i < n; ++i) {
            b.ranges[i] = {in.U64(), in.U64(), in.U64()};
            b.to[i] = in.U64();
          }
        }
      } else if (flags != 0 || n == 0 || n > kChunkEntries || length != n * kRangeBytes) {
        b.status = RAYACCEL_STATUS_INVALID_ARGUMENT;
      } else {
        b.ranges.resize(n);
        uint64_t total = 0;
        for (auto& r : b.ranges) {
          r = {in.U64(), in.U64(), in.U64()};
          total += std::min(r[2], kChunkBytes + 1);
        }
        if (total > kChunkBytes) {
          b.status = RAYACCEL_STATUS_INVALID_ARGUMENT;
          b.ranges.clear();
        }
      }
      ep->batch_gets.push_back(std::move(b));
      return UCS_OK;
    }
    case kPutBatch: {
      uint64_t token = h.U64(), req = h.U64();
      uint32_t n = h.U32();
      const uint32_t flags = h.left() == 4 ? h.U32() : 0;
      if (!h.at_end()) break;
      Peer* p = AdmittedPeer(ep, token);
      if (p == nullptr) return UCS_OK;  // a large one is released unread
      p->deadline = PeerDeadline(ep);
      if (flags == kCopiedChunk && !rndv) {
        CopyPutBatch(ep, p, req, n, static_cast<const char*>(data), length);
        return UCS_OK;
      }
      if (flags != 0 || n == 0 || n > kChunkEntries || length < n * kRangeBytes ||
          length > n * kRangeBytes + kChunkBytes) {
        ep->outbox.push_back(
            {true, token, kPutBatchAck, ReplyHeader(token, req, RAYACCEL_STATUS_INVALID_ARGUMENT)});
        return UCS_OK;
      }
      if (!rndv) {
        ApplyPutBatch(ep, token, req, n, static_cast<const char*>(data), length);
        return UCS_OK;
      }
      auto* b = new BatchPut{ep, token, req, n, std::string(length, '\0')};
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = BatchPutReceived;
      param.user_data = b;
      ucs_status_ptr_t r =
          Lib().ucp_am_recv_data_nbx(fabric->worker, data, b->bytes.data(), length, &param);
      if (r == nullptr) ApplyPutBatch(ep, token, req, n, b->bytes.data(), b->bytes.size());
      if (r != nullptr && UCS_PTR_IS_ERR(r)) {
        ep->outbox.push_back(
            {true, token, kPutBatchAck, ReplyHeader(token, req, RAYACCEL_STATUS_INTERNAL)});
      }
      if (r == nullptr || UCS_PTR_IS_ERR(r)) delete b;
      return UCS_OK;
    }
    case kGetBatchReply:
    case kPutBatchAck: {
      uint64_t token = h.U64(), req = h.U64();
      rayaccel_status status = OwnerStatus(h.U32());
      Conn* c = h.at_end() ? ConnectionByToken(ep, token) : nullptr;
      auto it = c != nullptr ? c->transfers.find(req) : decltype(c->transfers)::iterator();
      const Request::Kind kind =
          id == kGetBatchReply ? Request::Kind::kRead : Request::Kind::kWrite;
      if (c == nullptr || it == c->transfers.end() || it->second->kind != kind ||
          it->second->chunk.empty() || it->second->replied || c->failure != RAYACCEL_STATUS_OK) {
        if (!h.at_end()) break;  // else late (failed or closed), or not ours
        return UCS_OK;
      }
      Request* r = it->second;
      c->last_heard = Clock::now();
      r->replied = true;
      if (kind == Request::Kind::kWrite) {
        if (status == RAYACCEL_STATUS_OK) {
          for (Request::ChunkEntry& e : r->chunk) e.status = OwnerStatus(in.U32());
          if (!in.at_end()) status = RAYACCEL_STATUS_INTERNAL;  // another shape
        }
        r->reply = status;
        MaybeCompleteWrite(r);  // or once UCX lets go of the local bytes
        MaybeFree(r);
        return UCS_OK;
      }
      const uint64_t head = r->chunk.size() * 4;
      if (status != RAYACCEL_STATUS_OK || length < head ||
          length > head + (r->same_host ? 0 : r->length)) {
        Complete(r, status != RAYACCEL_STATUS_OK ? status : RAYACCEL_STATUS_INTERNAL,
                 status != RAYACCEL_STATUS_OK
                     ? "the peer refused the batch"
                     : "the peer answered a batch read with another length");
        MaybeFree(r);
        return UCS_OK;
      }
      if (!rndv) {
        LandChunk(r, static_cast<const char*>(data), length);
        MaybeFree(r);
        return UCS_OK;
      }
      r->scratch.resize(length);
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = ChunkReceived;
      p.user_data = r;
      ucs_status_ptr_t got =
          Lib().ucp_am_recv_data_nbx(fabric->worker, data, r->scratch.data(), length, &p);
      if (got == nullptr) {
        LandChunk(r, r->scratch.data(), r->scratch.size());
      } else if (UCS_PTR_IS_ERR(got)) {
        Complete(r, FromUcs(UCS_PTR_STATUS(got)),
                 "the batch's bytes did not arrive: " + StatusText(UCS_PTR_STATUS(got)));
      } else {
        r->ucx++;
      }
      MaybeFree(r);
      return UCS_OK;
    }
    default:
      break;
  }
  if (CountAndLog(&ep->malformed, &ep->malformed_logged)) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          "dropped a malformed message (id " + std::to_string(id) + ", " +
              std::to_string(header_length) + "+" + std::to_string(length) + " bytes; " +
              std::to_string(ep->malformed) + " so far)");
  }
  return UCS_OK;
}

// Control messages' handlers take the endpoint; data messages' the fabric they arrived on.
template <unsigned kId>
ucs_status_t ControlHandler(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param) {
  return OnMessage(static_cast<Ep*>(arg), nullptr, kId, header, header_length, data, length, param);
}

template <unsigned kId>
ucs_status_t DataHandler(void* arg, const void* header, size_t header_length, void* data,
                         size_t length, const ucp_am_recv_param_t* param) {
  auto* fabric = static_cast<Ep::Fabric*>(arg);
  return OnMessage(fabric->endpoint, fabric, kId, header, header_length, data, length, param);
}

// --- Progress

void SendOutbox(Ep* ep) {
  std::vector<Ep::Outgoing> out;
  out.swap(ep->outbox);
  for (Ep::Outgoing& o : out) {
    ucp_ep_h uep = nullptr;
    if (o.to_peer) {
      Peer* p = PeerByToken(ep, o.token);
      if (p != nullptr && !p->failed) {
        uep = o.id == kPutAck || o.id == kPutBatchAck ? DataOf(p->link) : ControlOf(p->link);
      }
    } else {
      Conn* c = ConnectionByToken(ep, o.token);
      if (c != nullptr && c->failure == RAYACCEL_STATUS_OK) uep = ControlOf(c->link);
    }
    if (o.id == kPutAck || o.id == kPutBatchAck) {
      SendMessage(uep, o.id, std::move(o.bytes), std::move(o.payload));
    } else {
      SendMessage(uep, o.id, {}, std::move(o.bytes));
    }
  }
}

void SendNotification(Request* r) {
  Conn* c = r->connection;
  if (c == nullptr || c->failure != RAYACCEL_STATUS_OK || DataOf(c->link) == nullptr) {
    Complete(r, c == nullptr ? RAYACCEL_STATUS_PEER_LOST : c->failure,
             c == nullptr ? "the connection was closed" : c->failure_text);
    return;
  }
  Writer w;
  w.U64(c->token);
  r->header = std::move(w.str());
  ucp_request_param_t p = SendParams(NotificationSent, r, /*eager=*/true);
  ucs_status_ptr_t sent =
      Lib().ucp_am_send_nbx(DataOf(c->link), kNotify, r->header.data(), r->header.size(),
                            r->payload.data(), r->payload.size(), &p);
  if (Started(r, sent, "notify") && sent == nullptr) Complete(r, RAYACCEL_STATUS_OK);
}

void SendReadyNotifications(Ep* ep) {
  std::vector<Request*> ready;
  ready.swap(ep->ready_notifications);
  for (Request* r : ready) {
    SendNotification(r);
    MaybeFree(r);
  }
}

// Drops an owner's record of a reader; a refusal is said first. The link stays.
void ClosePeer(Ep* ep, Peer* p) {
  if (p->refuse != 0) {
    Writer w;
    w.U64(p->token).U64(ep->uuid).U32(p->refuse);
    SendMessage(ControlOf(p->link), kRefused, {}, std::move(w.str()));
  }
  if (p->link != nullptr) p->link->users--;
  p->link = nullptr;
  // A reader gone (or declared lost) holds no mapping the owner waits for: if it lives on,
  // cut off, the driver keeps its mapping (docs/transport.md, "Threat model").
  for (auto it = ep->mapped.begin(); it != ep->mapped.end();) {
    it->second.erase(p->token);
    it = it->second.empty() ? ep->mapped.erase(it) : std::next(it);
  }
}

// Declares the remote endpoint of `link` lost: it was silent for the peer timeout.
void DeclareLost(Ep* ep, Link* link) {
  LogTo(ep, RAYACCEL_LOG_INFO,
        "a peer was silent for " + std::to_string(ep->peer_timeout_ms) +
            " ms: declared lost (stopped, frozen or cut off)");
  link->say_goodbye = true;
  FailLink(link, "the peer was silent for " + std::to_string(ep->peer_timeout_ms) +
                     " ms (stopped, frozen or cut off)");
}

// Answers queued hellos, admits readers that proved the key, sends heartbeats and declares
// silent peers lost, and closes what failed. Runs after ucp_worker_progress returns, because
// UCX endpoints may not be created or closed inside its callbacks.
void ServeControl(Ep* ep) {
  Clock::time_point now = Clock::now();
  std::vector<Ep::Hello> hellos;
  hellos.swap(ep->hellos);
  for (Ep::Hello& hello : hellos) {
    if (ep->peers.count(hello.token) != 0) continue;
    Link* link = LinkTo(ep, hello.uuid);
    ucs_status_t s = UCS_OK;
    if (link == nullptr) link = OpenLink(ep, hello.uuid, hello.control.data(), &s);
    if (link == nullptr) {
      NoteRefused(ep, "cannot reach it back: " + StatusText(s));
      continue;
    }
    auto p = std::make_unique<Peer>();
    p->endpoint = ep;
    p->uuid = hello.uuid;
    p->token = hello.token;
    p->link = link;
    link->users++;
    p->reader_nonce = hello.nonce;
    p->owner_nonce = RandomNonce();
    p->local_address = std::move(hello.local);
    p->network_address = std::move(hello.network);
    p->deadline = PeerDeadline(ep);
    Mac mac =
        Prove(ep->key, kOwnerRole, p->token, p->uuid, ep->uuid, p->reader_nonce, p->owner_nonce);
    Writer w;
    w.U64(p->token).U64(ep->uuid).Bytes(p->owner_nonce.data(), p->owner_nonce.size());
    w.Bytes(mac.data(), mac.size());
    SendMessage(link->control, kChallenge, {}, std::move(w.str()));
    ep->peers[p->token] = std::move(p);
  }
  const bool beat = now >= ep->next_heartbeat;
  if (beat) ep->next_heartbeat = now + HeartbeatInterval(ep);
  for (auto& [token, p] : ep->peers) {
    if (p->failed || p->link == nullptr || p->link->failed) {
      p->failed = true;
      continue;
    }
    if (p->authenticated && !p->link->trusted) {
      p->link->trusted = true;
    }
    if (p->authenticated && !p->welcomed) {
      p->welcomed = true;
      ucs_status_t s = EnsureData(ep, p->link, p->local_address, p->network_address);
      if (s != UCS_OK) {
        LogTo(ep, RAYACCEL_LOG_WARN,
              "cannot reach an admitted reader's data worker: " + StatusText(s));
        p->failed = true;
        continue;
      }
      Writer w;
      w.U64(token).U64(ep->uuid).U32(static_cast<uint32_t>(getpid()));
      w.U32(static_cast<uint32_t>(BootId().size())).Bytes(BootId().data(), BootId().size());
      w.U32(p->process != nullptr ? 1 : 0);
      SendMessage(p->link->control, kWelcome, {}, std::move(w.str()));
    }
    if (now > p->deadline) {
      if (p->authenticated) {
        DeclareLost(ep, p->link);
      } else {
        NoteRefused(ep, "it did not finish the handshake within the peer timeout");
        p->failed = true;
      }
    } else if (beat && p->authenticated) {
      Writer w;
      w.U64(ep->uuid).U64(token);
      SendMessage(p->link->control, kPong, {}, std::move(w.str()));
    }
  }
  for (auto& [token, c] : ep->connections) {
    if (c->failure != RAYACCEL_STATUS_OK || c->state != Conn::State::kWelcomed ||
        ControlOf(c->link) == nullptr) {
      continue;
    }
    if (now - c->last_heard > PeerTimeout(ep)) {
      DeclareLost(ep, c->link);
    } else if (beat) {
      Writer w;
      w.U64(ep->uuid).U64(token);
      SendMessage(c->link->control, kPing, {}, std::move(w.str()));
    }
  }
  for (auto it = ep->peers.begin(); it != ep->peers.end();) {
    if (!it->second->failed) {
      ++it;
      continue;
    }
    ClosePeer(ep, it->second.get());
    it = ep->peers.erase(it);
  }
  CloseLinks(ep);
}

// Caller holds mu. Returns whether UCX did anything. Bounded, so that a flood of messages
// cannot keep the endpoint's lock forever.
bool Progress(Ep* ep) {
  bool any = false;
  for (int i = 0; i < 64 && ProgressWorkers(ep) != 0; ++i) any = true;
  SendOutbox(ep);
  ServeGets(ep);
  ServeBatchGets(ep);
  SendReadyNotifications(ep);
  IssueReadyGroups(ep);
  ServeControl(ep);
  SendOutbox(ep);
  return any;
}

void ProgressThread(Ep* ep) {
  // The workers' event fds: the control worker's, then each fabric's.
  std::vector<ucp_worker_h> workers = {ep->control};
  for (Ep::Fabric& f : ep->fabrics) {
    if (f.worker != nullptr) workers.push_back(f.worker);
  }
  std::vector<pollfd> fds = {{ep->stop_fd, POLLIN, 0}};
  bool wakeup = true;
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    for (ucp_worker_h w : workers) {
      int fd = -1;
      wakeup = wakeup && Lib().ucp_worker_get_efd(w, &fd) == UCS_OK;
      fds.push_back({fd, POLLIN, 0});
    }
  }
  // While UCX is busy: passes back to back for 100 us after one that moved something (a peer
  // draining a queue frees room within microseconds), then pauses doubling from 50 us (about
  // the kernel's timer slack) to 1 ms, so that a stalled peer costs little CPU.
  using std::chrono::microseconds;
  Clock::time_point last_moved = Clock::now();
  microseconds pause(0);
  const int heartbeat_ms = static_cast<int>(HeartbeatInterval(ep).count());
  while (true) {
    bool armed = wakeup, busy = false;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      const uint64_t before = ep->activity;
      if (Progress(ep)) last_moved = Clock::now();
      if (ep->activity != before) ep->progressed.notify_all();
      // BUSY: work is pending that no event will announce, such as a large reply waiting for
      // room in a shared-memory queue. This thread is then what serves the peer, so it comes
      // back soon.
      for (size_t i = 0; wakeup && i < workers.size() && armed; ++i) {
        const ucs_status_t s = Lib().ucp_worker_arm(workers[i]);
        armed = s == UCS_OK;
        busy = s == UCS_ERR_BUSY;
      }
    }
    if (busy) {
      if (poll(fds.data(), 1, 0) > 0) return;
      if (Clock::now() - last_moved < microseconds(100)) {
        pause = microseconds(0);
        std::this_thread::yield();  // the application's calls get the lock too
      } else {
        pause = std::min(microseconds(1000), std::max(microseconds(50), pause * 2));
        std::this_thread::sleep_for(pause);
      }
      continue;
    }
    pause = microseconds(0);
    // Back at least once per heartbeat; without armed event fds, in 1 ms.
    int n = poll(fds.data(), armed ? fds.size() : 1, armed ? heartbeat_ms : 1);
    if (n > 0 && (fds[0].revents & POLLIN) != 0) return;
  }
}

// ---------------------------------------------------------------------------------------
// The hooks.

// Ends a connection of ours: what is in flight may finish (within the peer timeout), the rest
// fails, then both endpoints go. Caller holds mu.
void EndConnection(Ep* ep, Conn* c, bool say_bye) {
  if (c->failure == RAYACCEL_STATUS_OK) {
    Clock::time_point deadline = PeerDeadline(ep);
    while (!c->transfers.empty() && c->failure == RAYACCEL_STATUS_OK && Clock::now() < deadline) {
      if (!Progress(ep)) std::this_thread::yield();
    }
    if (say_bye && c->failure == RAYACCEL_STATUS_OK) {
      Writer w;
      w.U64(ep->uuid).U64(c->token);
      SendMessage(ControlOf(c->link), kBye, {}, std::move(w.str()));
    }
    FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "the connection was closed");
  }
  for (auto& [r, unused] : ep->requests) {
    if (r->connection == c) r->connection = nullptr;
  }
  if (c->link != nullptr) c->link->users--;
  c->link = nullptr;
}

void DestroyEndpoint(Ep* ep) {
  if (ep->progress.joinable()) {
    uint64_t one = 1;
    (void)!write(ep->stop_fd, &one, sizeof(one));
    ep->progress.join();
  }
  if (ep->stop_fd >= 0) close(ep->stop_fd);
  std::lock_guard<std::mutex> lock(ep->mu);
  if (ep->control != nullptr) {
    for (auto& [token, c] : ep->connections) EndConnection(ep, c, /*say_bye=*/false);
    for (auto& [token, p] : ep->peers) ClosePeer(ep, p.get());
    ep->peers.clear();
    // Every remote endpoint hears that this one is gone, so its connections fail at once.
    for (auto& [uuid, link] : ep->links) {
      if (link->failed) continue;
      Writer w;
      w.U64(ep->uuid).U32(kClosing);
      SendMessage(link->control, kGoodbye, {}, std::move(w.str()));
      link->failed = true;
    }
    CloseLinks(ep);
    for (int i = 0; i < 64 && ProgressWorkers(ep) != 0; ++i) {
    }
  }
  ep->peers.clear();
  for (auto& [id, region] : ep->regions) {
    UnmapRegion(ep, region);
    delete region;
  }
  for (Ep::Fabric& f : ep->fabrics) {
    if (f.worker != nullptr) Lib().ucp_worker_destroy(f.worker);
  }
  if (ep->control != nullptr) Lib().ucp_worker_destroy(ep->control);
  for (auto& [token, c] : ep->connections) delete c;
  for (auto& [r, unused] : ep->requests) delete r;
  for (Ep::Fabric& f : ep->fabrics) {
    if (f.context != nullptr) Lib().ucp_cleanup(f.context);
  }
}

rayaccel_status CloseEndpointHook(rayaccel_transport_endpoint* handle, rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    DestroyEndpoint(ep);
    delete ep;
    return RAYACCEL_STATUS_OK;
  });
}

ucs_memory_type_t UcsType(DeviceMemory m) {
  switch (m) {
    case DeviceMemory::kCuda:
      return UCS_MEMORY_TYPE_CUDA;
    case DeviceMemory::kRocm:
      return UCS_MEMORY_TYPE_ROCM;
    case DeviceMemory::kNone:
      break;
  }
  return UCS_MEMORY_TYPE_UNKNOWN;
}

const char* DeviceMemoryName(DeviceMemory m) {
  return m == DeviceMemory::kCuda ? "CUDA" : m == DeviceMemory::kRocm ? "ROCm" : "device";
}

// Gives `region` its id and descriptor and puts it among the endpoint's live regions. mu held.
void Publish(Ep* ep, rayaccel_register_args* args, std::unique_ptr<Region> region) {
  region->id = ep->next_region_id++;
  region->base = args->address;
  region->length = args->length;
  // Names the region, nothing more: the owner checks every transfer against its own record
  // of the region, so the bytes grant nothing a forger could widen.
  Writer w;
  const uint16_t flags = static_cast<uint16_t>((region->ipc_handle.empty() ? 0 : kMappable) |
                                               (region->staged ? kStagedByOwner : 0) |
                                               (region->host ? kHostMemory : 0));
  w.U32(kDescriptorMagic).U16(kWireVersion).U16(flags);
  w.U64(ep->uuid).U64(region->id).U64(args->length);
  region->descriptor = std::move(w.str());
  ep->regions[region->id] = region.get();
  args->region = region.release();
}

// Device memory UCX cannot reach, which the plugin's driver copies through host memory: the
// driver checks (or allocates) it; transfers stage it (docs/transport.md, "Device memory").
rayaccel_status RegisterStaged(Ep* ep, rayaccel_register_args* args, bool allocate,
                               rayaccel_error* error) {
  DeviceMemoryOps* ops = ep->options.device_ops;
  std::string why;
  rayaccel_status st = allocate
                           ? ops->Allocate(args->device_index, args->length, &args->address, &why)
                           : ops->Check(args->address, args->length, args->device_index, &why);
  if (st != RAYACCEL_STATUS_OK) {
    if (allocate) args->address = nullptr;
    return Fail(error, st, why);
  }
  auto region = std::make_unique<Region>();
  region->endpoint = ep;
  region->staged = true;
  region->owned = allocate;
  region->device = args->device_index;
  // Readers on this host map a whole allocation rather than stage it; the handle goes only
  // to admitted readers that ask (kMapAsk), never in the descriptor.
  if (ops->Export(args->address, args->length, args->device_index, &region->ipc_handle, &why) !=
      RAYACCEL_STATUS_OK) {
    region->ipc_handle.clear();
    LogTo(ep, RAYACCEL_LOG_DEBUG, "device region staged for every reader: " + why);
  }
  std::lock_guard<std::mutex> lock(ep->mu);
  Publish(ep, args, std::move(region));
  return RAYACCEL_STATUS_OK;
}

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error) {
  const bool allocate = args != nullptr && (args->flags & RAYACCEL_REGISTER_ALLOCATE) != 0;
  if (args == nullptr || args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_register_args, region) ||
      args->endpoint == nullptr || (args->address == nullptr) != allocate || args->length == 0 ||
      (args->flags & ~RAYACCEL_REGISTER_ALLOCATE) != 0) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "register_memory needs an endpoint, a length and an address (none to allocate)");
  }
  Ep* ep = Of(args->endpoint);
  return Guard(error, [&] {
    ucs_memory_type_t type = UCS_MEMORY_TYPE_HOST;
    if (args->kind == RAYACCEL_MEMORY_DEVICE) {
      type = UcsType(ep->options.device_memory);
      if (type == UCS_MEMORY_TYPE_UNKNOWN) {
        return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                    "this plugin's devices have no memory the transport can reach");
      }
      if ((ep->memory_types & (uint64_t{1} << type)) == 0) {
        if (ep->options.device_ops != nullptr) return RegisterStaged(ep, args, allocate, error);
        return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                    std::string("UCX on this host was built without ") +
                        DeviceMemoryName(ep->options.device_memory) +
                        " memory support (ucx_info -d lists no such transport); register host "
                        "memory instead");
      }
    } else if (args->kind != RAYACCEL_MEMORY_HOST) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "unknown memory kind");
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    auto region = std::make_unique<Region>();
    region->endpoint = ep;
    region->host = type == UCS_MEMORY_TYPE_HOST;
    // Mapped on each fabric; with ALLOCATE, the first fabric allocates and the other maps that.
    for (Ep::Fabric& f : ep->fabrics) {
      if (f.context == nullptr) continue;
      ucp_mem_map_params_t mp{};
      mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
      mp.address = args->address;
      mp.length = args->length;
      mp.memory_type = type;
      const bool allocates = allocate && args->address == nullptr;
      mp.flags = allocates ? UCP_MEM_MAP_ALLOCATE : 0;
      ucs_status_t s = Lib().ucp_mem_map(f.context, &mp, &region->memh[f.index]);
      if (s == UCS_OK && allocates) {
        ucp_mem_attr_t attr{};
        attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
        s = Lib().ucp_mem_query(region->memh[f.index], &attr);
        if (s == UCS_OK) args->address = attr.address;
        region->allocated_by = f.index;
      }
      if (s != UCS_OK) {
        UnmapRegion(ep, region.get());
        if (allocate) args->address = nullptr;
        return FailUcs(error, "ucp_mem_map", s);
      }
    }
    Publish(ep, args, std::move(region));
    return RAYACCEL_STATUS_OK;
  });
}

// Readers that map region `id` close their mappings before its memory may go: each is asked,
// and one that has not said it closed within the peer timeout is declared lost. Caller holds
// mu; the region is out of ep->regions, so no reader gets a new handle.
void UnmapPeers(Ep* ep, uint64_t id) {
  auto it = ep->mapped.find(id);
  if (it == ep->mapped.end()) return;
  for (uint64_t token : it->second) {
    Peer* p = PeerByToken(ep, token);
    if (p == nullptr || p->failed) continue;
    Writer w;
    w.U64(token).U64(id);
    SendMessage(ControlOf(p->link), kUnmap, {}, std::move(w.str()));
  }
  Clock::time_point deadline = PeerDeadline(ep);
  while (ep->mapped.count(id) != 0 && Clock::now() < deadline) {
    if (!Progress(ep)) std::this_thread::yield();
  }
  it = ep->mapped.find(id);
  if (it == ep->mapped.end()) return;
  LogTo(ep, RAYACCEL_LOG_WARN,
        "a reader did not close its mapping of a region being deregistered within the peer "
        "timeout; declared lost");
  for (uint64_t token : it->second) {
    Peer* p = PeerByToken(ep, token);
    if (p != nullptr && p->link != nullptr) DeclareLost(ep, p->link);
  }
  ep->mapped.erase(id);
  ServeControl(ep);
}

rayaccel_status DeregisterMemory(rayaccel_memory_region* handle, rayaccel_error* error) {
  Region* region = Of(handle);
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return Guard(error, [&] {
    Ep* ep = region->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    // From here every new transfer naming the region is refused as stale; the ones the owner
    // is serving finish first (a reader that does not let them finish within the peer timeout
    // is dropped, which cancels them).
    ep->regions.erase(region->id);
    const uint64_t id = region->id;
    Clock::time_point deadline = PeerDeadline(ep);
    while (ep->serving.count(id) != 0 && Clock::now() < deadline) {
      if (!Progress(ep)) std::this_thread::yield();
    }
    if (ep->serving.count(id) != 0) {
      LogTo(ep, RAYACCEL_LOG_WARN,
            "a reader held a transfer of a region being deregistered past the peer timeout; "
            "dropped");
      for (auto& [token, p] : ep->peers) {
        if (p->serving > 0 && p->link != nullptr) DeclareLost(ep, p->link);
      }
      ServeControl(ep);
      for (int i = 0; i < 64 && ep->serving.count(id) != 0 && ProgressWorkers(ep) != 0; ++i) {
      }
    }
    UnmapPeers(ep, id);
    UnmapRegion(ep, region);
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

rayaccel_status Connect(rayaccel_transport_endpoint* handle, rayaccel_blob peer,
                        rayaccel_connection** out, rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "connect needs an endpoint");
  }
  return Guard(error, [&] {
    Reader in(peer.data, peer.size);
    uint32_t magic = in.U32();
    uint16_t version = in.U16();
    in.U16();
    uint64_t uuid = in.U64();
    std::string addresses[3];  // local data, network data, control
    for (std::string& a : addresses) {
      const uint32_t n = in.U32();
      const uint8_t* at = in.Bytes(n);
      if (at != nullptr && n > 0) a.assign(reinterpret_cast<const char*>(at), n);
    }
    const Mac signature = in.Array<32>();
    const std::string &local = addresses[0], &network = addresses[1], &control = addresses[2];
    if (peer.data == nullptr || magic != kAddressMagic || peer.size > RAYACCEL_TRANSPORT_MAX_BLOB ||
        (version == kWireVersion &&
         (!in.at_end() || control.empty() || (local.empty() && network.empty())))) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "not a UCX transport address (truncated, corrupted or from another transport)");
    }
    if (version != kWireVersion) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "UCX transport address version " + std::to_string(version) +
                      "; this plugin reads version " + std::to_string(kWireVersion));
    }
    const std::string_view signed_part(reinterpret_cast<const char*>(peer.data),
                                       peer.size - signature.size());
    if (!SameMac(signature, MacOf(ep->key, kAddressLabel, signed_part))) {
      return Fail(error, RAYACCEL_STATUS_UNAUTHENTICATED,
                  "the address was not made with this endpoint's transport key (the two keys "
                  "differ, or the address was altered)");
    }
    std::unique_lock<std::mutex> lock(ep->mu);
    auto conn = std::make_unique<Conn>();
    Conn* c = conn.get();
    c->endpoint = ep;
    c->peer_uuid = uuid;
    c->nonce = RandomNonce();
    do c->token = RandomId();
    while (ep->connections.count(c->token) != 0);
    ucs_status_t s = UCS_OK;
    Link* link = LinkTo(ep, uuid);
    if (link == nullptr) link = OpenLink(ep, uuid, control.data(), &s);
    if (link != nullptr) s = EnsureData(ep, link, local, network);
    if (s != UCS_OK) {
      if (link != nullptr && link->users == 0 && !link->trusted) link->failed = true;
      CloseLinks(ep);
      return Fail(error, RAYACCEL_STATUS_PEER_LOST, "cannot reach the peer: " + StatusText(s));
    }
    c->link = link;
    link->users++;
    ep->connections[c->token] = conn.release();
    // Hello carries our worker addresses: the owner answers on the control one and, once we
    // proved the key, serves transfers to a data one.
    Writer w;
    w.U64(ep->uuid).U64(c->token).Bytes(c->nonce.data(), c->nonce.size());
    for (ucp_worker_h worker :
         {ep->control, ep->fabrics[kLocal].worker, ep->fabrics[kNetwork].worker}) {
      std::string own;
      s = WorkerAddress(worker, &own);
      if (s != UCS_OK) break;
      w.U32(static_cast<uint32_t>(own.size())).Bytes(own.data(), own.size());
    }
    if (s == UCS_OK) {
      const Mac signature = MacOf(ep->key, kHelloLabel, w.str());
      w.Bytes(signature.data(), signature.size());
      SendMessage(link->control, kHello, {}, std::move(w.str()));
    }
    Clock::time_point deadline = PeerDeadline(ep);
    while (s == UCS_OK && c->state != Conn::State::kWelcomed && c->failure == RAYACCEL_STATUS_OK &&
           Clock::now() < deadline) {
      if (!Progress(ep)) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        lock.lock();
      }
    }
    if (s == UCS_OK && c->state == Conn::State::kWelcomed && c->failure == RAYACCEL_STATUS_OK) {
      c->last_heard = Clock::now();
      if (c->link != nullptr) c->link->trusted = true;
      *out = c;
      return RAYACCEL_STATUS_OK;
    }
    rayaccel_status code = RAYACCEL_STATUS_PEER_LOST;
    std::string why;
    if (s != UCS_OK) {
      why = "connect: " + StatusText(s);
    } else if (c->failure != RAYACCEL_STATUS_OK) {
      code = c->failure;
      why = c->failure_text;
    } else {
      why = "the peer did not answer within " + std::to_string(ep->peer_timeout_ms) + " ms";
      // Whatever the link's UCX endpoints reach does not answer: the next try starts afresh.
      if (c->link != nullptr) FailLink(c->link, why);
    }
    FailConnection(c, code, why);
    if (c->link != nullptr) c->link->users--;
    ep->connections.erase(c->token);
    delete c;
    CloseLinks(ep);
    return Fail(error, code, why);
  });
}

// The descriptor's fields, or false when it is not one of ours.
bool ParseDescriptor(rayaccel_blob d, RemoteRegion* r) {
  if (d.data == nullptr || d.size != kDescriptorBytes) return false;
  Reader in(d.data, d.size);
  uint32_t magic = in.U32();
  uint16_t version = in.U16();
  r->flags = in.U16();
  r->owner = in.U64();
  r->id = in.U64();
  r->length = in.U64();
  return in.at_end() && magic == kDescriptorMagic && version == kWireVersion &&
         (r->flags & ~(kMappable | kStagedByOwner | kHostMemory)) == 0;
}

// The reader's mapping of `remote` for a transfer on `c`, with a user counted; null when the
// transfer is staged instead (the owner or this host's driver said no) or fails (`status`).
// The first transfer of a region asks its owner (kMapAsk) and waits for the answer with mu
// held, as deregistration waits: one round trip per region. Caller holds mu.
Mapping* MappingFor(Ep* ep, Conn* c, const RemoteRegion& remote, rayaccel_status* status,
                    std::string* why) {
  *status = RAYACCEL_STATUS_OK;
  auto [it, fresh] = c->mappings.try_emplace(remote.id);
  Mapping* m = &it->second;
  if (fresh) {
    Writer w;
    w.U64(ep->uuid).U64(c->token).U64(remote.id);
    SendMessage(ControlOf(c->link), kMapAsk, {}, std::move(w.str()));
    Clock::time_point deadline = PeerDeadline(ep);
    while (!m->answered && c->failure == RAYACCEL_STATUS_OK && Clock::now() < deadline) {
      if (!Progress(ep)) std::this_thread::yield();
    }
    if (c->failure == RAYACCEL_STATUS_OK && !m->answered) {
      FailLink(c->link,
               "the peer did not answer within " + std::to_string(ep->peer_timeout_ms) + " ms");
    }
    // Whatever happens next, the mapping is no longer being asked for.
    m->state = Mapping::State::kRefused;
    if (c->failure != RAYACCEL_STATUS_OK || m->revoked || m->answer == RAYACCEL_STATUS_STALE) {
      *status = c->failure != RAYACCEL_STATUS_OK ? c->failure : RAYACCEL_STATUS_STALE;
      *why = c->failure != RAYACCEL_STATUS_OK ? c->failure_text
                                              : "the peer has deregistered the region";
      ReleaseMapping(ep, c, remote.id);
      return nullptr;
    }
    if (m->answer != RAYACCEL_STATUS_OK) return nullptr;  // staged: the owner does not map it
    std::string refused;
    rayaccel_status st =
        m->length == remote.length
            ? ep->options.device_ops->Import(m->handle, m->device, m->length, &m->base, &refused)
            : RAYACCEL_STATUS_INVALID_ARGUMENT;
    if (st != RAYACCEL_STATUS_OK) {
      if (m->length != remote.length) refused = "the owner's region and descriptor differ";
      LogTo(ep, RAYACCEL_LOG_INFO,
            "cannot map a peer's device memory (" + refused + "); staging it instead");
      // Staged from now on; the owner hears that this reader holds no mapping.
      Writer w;
      w.U64(ep->uuid).U64(c->token).U64(remote.id);
      ep->outbox.push_back({false, c->token, kUnmapped, std::move(w.str())});
      m->confirm = false;
      m->handle.clear();
      return nullptr;
    }
    m->state = Mapping::State::kMapped;
  }
  if (m->state != Mapping::State::kMapped) return nullptr;
  // A descriptor that names another length than the region mapped (forged, or a confused
  // caller's) is staged: its range is then the owner's to check, not a copy past the mapping.
  if (m->length != remote.length) return nullptr;
  if (m->revoked) {
    *status = RAYACCEL_STATUS_STALE;
    *why = "the peer has deregistered the region";
    return nullptr;
  }
  m->users++;
  return m;
}

// A transfer between the local region and the owner's device memory, mapped: a copy on this
// host's device, complete when it returns.
rayaccel_status CopyMapped(Ep* ep, Conn* c, rayaccel_transfer_args* a, uint64_t region, Mapping* m,
                           rayaccel_error* error) {
  char* mine = static_cast<char*>(Of(a->local)->base) + a->local_offset;
  char* theirs = static_cast<char*>(m->base) + a->remote_offset;
  std::string why;
  rayaccel_status st = a->op == RAYACCEL_TRANSFER_READ
                           ? ep->options.device_ops->Copy(mine, theirs, a->length, m->device, &why)
                           : ep->options.device_ops->Copy(theirs, mine, a->length, m->device, &why);
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    m->users--;
    if (m->revoked) ReleaseMapping(ep, c, region);  // the owner waits for it
  }
  if (st != RAYACCEL_STATUS_OK) {
    return Fail(error, st == RAYACCEL_STATUS_UNSUPPORTED ? RAYACCEL_STATUS_INTERNAL : st,
                "device to device: " + why);
  }
  a->request = nullptr;
  if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) a->path = RAYACCEL_PATH_DEVICE_IPC;
  return RAYACCEL_STATUS_OK;
}

// A staged write's bytes, out of the device into host memory of their own before they go.
rayaccel_status StageOutgoing(Ep* ep, const rayaccel_transfer_args& a, uint64_t skip,
                              uint64_t length, Staging* outgoing, rayaccel_error* error) {
  if (!Of(a.local)->staged || a.op != RAYACCEL_TRANSFER_WRITE) return RAYACCEL_STATUS_OK;
  std::string why;
  rayaccel_status st =
      ep->options.device_ops->ToHost(outgoing->Take(length, ep->pinned, Of(a.local)->device),
                                     static_cast<char*>(Of(a.local)->base) + a.local_offset + skip,
                                     length, Of(a.local)->device, &why);
  return st == RAYACCEL_STATUS_OK ? st : Fail(error, st, "from device memory: " + why);
}

// Whether the owner copies between `local` and `remote` itself, told where in this process
// (same_host_copy.h; CopyPut, ServeGets, CopyRanges): host memory on both sides, the owner on
// this host and able to reach this process (its welcome says), over the network fabric (UCX's
// shared memory carries messages as fast as the kernel copies); for a transfer of its own,
// `length` enough that a system call costs less than carrying the bytes in messages (a
// batch's chunk is one system call for all its ranges). Caller holds mu.
bool OwnerCopies(const Conn* c, const Region* local, const RemoteRegion& remote) {
  return c->same_host && c->link != nullptr && local->host && (remote.flags & kHostMemory) != 0;
}
bool CopiedOnHost(const Conn* c, const Region* local, const RemoteRegion& remote, uint64_t length) {
  return OwnerCopies(c, local, remote) && c->link->fabric == kNetwork &&
         length >= kSameHostCopyMin;
}

// Starts bytes [skip, skip + length) of transfer `a` on `c`: the whole transfer (group null,
// its request in *out) or one piece of `group`, with `outgoing` a staged write's bytes.
// Caller holds mu.
rayaccel_status StartPieceLocked(Ep* ep, Conn* c, const rayaccel_transfer_args& a,
                                 const RemoteRegion& remote, uint64_t skip, uint64_t length,
                                 Request* group, rayaccel_request** out, Staging outgoing,
                                 rayaccel_error* error) {
  char* local = static_cast<char*>(Of(a.local)->base) + a.local_offset + skip;
  if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
  if (remote.owner != c->peer_uuid) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "the descriptor belongs to another peer than this connection's");
  }
  if (DataOf(c->link) == nullptr) {
    return Fail(error, RAYACCEL_STATUS_PEER_LOST, "the connection has no data path");
  }
  const int fabric = c->link->fabric;
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = a.op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
  r->local = local;
  r->length = length;
  r->memh = Of(a.local)->memh[fabric];
  r->staged = Of(a.local)->staged;
  r->device = Of(a.local)->device;
  r->staging = std::move(outgoing);
  r->abandoned = group != nullptr;  // a piece: freed once it ends
  const void* send_from =
      r->staged && r->kind == Request::Kind::kWrite ? r->staging.data() : r->local;
  r->id = c->next_id++;
  r->same_host = CopiedOnHost(c, Of(a.local), remote, length);
  Writer w;
  w.U64(c->token).U64(r->id).U64(remote.id).U64(a.remote_offset + skip).U64(length);
  if (r->same_host) w.U64(reinterpret_cast<uintptr_t>(r->local));
  r->header = std::move(w.str());
  ep->requests[r] = true;
  c->transfers[r->id] = r;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = TransferSent;
  p.user_data = r;
  ucs_status_ptr_t started;
  if (r->kind == Request::Kind::kRead || r->same_host) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    started = Lib().ucp_am_send_nbx(DataOf(c->link), r->kind == Request::Kind::kRead ? kGet : kPut,
                                    r->header.data(), r->header.size(), nullptr, 0, &p);
  } else {
    if (!r->staged) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = Of(a.local)->memh[fabric];
    }
    if (r->length <= kEagerMax && fabric == kNetwork) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_EAGER;
    }
    started = Lib().ucp_am_send_nbx(DataOf(c->link), kPut, r->header.data(), r->header.size(),
                                    send_from, r->length, &p);
  }
  if (!Started(r, started, "transfer")) {
    rayaccel_status s = r->status;
    std::string why = r->why;
    ep->requests.erase(r);
    delete r;
    return Fail(error, s, why);
  }
  if (group != nullptr) {  // counted only once it went out
    r->group = group;
    group->pieces_in_flight++;
  } else {
    *out = r;
  }
  if (started == nullptr) MaybeCompleteWrite(r);
  return RAYACCEL_STATUS_OK;
}

// A whole transfer (no group): a staged write's copy outside the endpoint's lock, so that it
// holds up no peer the endpoint serves, then the transfer under it.
rayaccel_status StartPiece(Ep* ep, Conn* c, const rayaccel_transfer_args& a,
                           const RemoteRegion& remote, rayaccel_request** out,
                           rayaccel_error* error) {
  Staging outgoing;
  if (rayaccel_status st = StageOutgoing(ep, a, 0, a.length, &outgoing, error);
      st != RAYACCEL_STATUS_OK) {
    return st;
  }
  std::lock_guard<std::mutex> lock(ep->mu);
  return StartPieceLocked(ep, c, a, remote, 0, a.length, nullptr, out, std::move(outgoing), error);
}

// Issues `group`'s next pieces, up to kPiecesInFlight, while all is well. Caller holds mu. A
// staged write's next piece leaves the device here, with the lock held: 4 MiB at the bus's
// speed, the price of keeping only a few pieces' host memory in use.
void IssuePieces(Request* group) {
  if (group->issuing) return;  // a piece that ended while its group issues
  group->issuing = true;
  Ep* ep = group->endpoint;
  const rayaccel_transfer_args& a = group->whole;
  while (group->reply == RAYACCEL_STATUS_OK && group->next_piece < a.length &&
         group->pieces_in_flight < kPiecesInFlight) {
    Conn* c = group->connection;
    if (c == nullptr) {
      group->reply = RAYACCEL_STATUS_PEER_LOST;
      group->first_why = "the connection was closed";
      break;
    }
    const uint64_t at = group->next_piece, n = std::min(kStagedPiece, a.length - at);
    char text[512] = {};
    rayaccel_error e{sizeof(e), text, sizeof(text)};
    Staging outgoing;
    rayaccel_status st = StageOutgoing(ep, a, at, n, &outgoing, &e);
    if (st == RAYACCEL_STATUS_OK) {
      st =
          StartPieceLocked(ep, c, a, group->remote, at, n, group, nullptr, std::move(outgoing), &e);
    }
    if (st != RAYACCEL_STATUS_OK) {
      group->reply = st;
      group->first_why = text;
      break;
    }
    group->next_piece = at + n;
  }
  group->issuing = false;
}

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckTransferArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    RemoteRegion remote;
    if (!ParseDescriptor(a->remote_descriptor, &remote)) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "malformed UCX descriptor");
    }
    if (Of(a->local)->endpoint != ep) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "the local region belongs to another endpoint");
    }
    // The reader's own checks catch mistakes early; the owner's decide.
    if (a->local_offset > Of(a->local)->length ||
        a->length > Of(a->local)->length - a->local_offset || a->remote_offset > remote.length ||
        a->length > remote.length - a->remote_offset) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "the range lies outside a region");
    }
    // The owner's device memory, on this host: mapped and copied on the device.
    if ((remote.flags & kMappable) != 0 && ep->options.device_ops != nullptr) {
      Mapping* m = nullptr;
      rayaccel_status st = RAYACCEL_STATUS_OK;
      std::string why;
      {
        std::lock_guard<std::mutex> lock(ep->mu);
        // What the owner already sent is read first: a mapping it revoked is not used.
        Progress(ep);
        if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
        if (remote.owner != c->peer_uuid) {
          return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                      "the descriptor belongs to another peer than this connection's");
        }
        if (c->may_map) m = MappingFor(ep, c, remote, &st, &why);
      }
      if (st != RAYACCEL_STATUS_OK) return Fail(error, st, why);
      if (m != nullptr) return CopyMapped(ep, c, a, remote.id, m, error);
    }
    const bool staged = Of(a->local)->staged || (remote.flags & kStagedByOwner) != 0;
    if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) {
      // The owner's side as its descriptor says: a forged flag misreports only the forger's own.
      a->path = staged ? RAYACCEL_PATH_STAGED : RAYACCEL_PATH_FABRIC;
    }
    if (!staged || a->length <= kStagedPiece) {
      rayaccel_status st = StartPiece(ep, c, *a, remote, &a->request, error);
      if (st == RAYACCEL_STATUS_OK && Of(a->request)->same_host &&
          RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) {
        a->path = RAYACCEL_PATH_SAME_HOST;
      }
      return st;
    }
    // Staged and large: pieces, a few in flight at a time, so that one piece's copy to or from
    // the device overlaps the others' time on the fabric, in both processes, and only those
    // few pieces' host memory is in use. The group completes when its last piece has, with
    // the first failure.
    auto* group = new Request();
    group->endpoint = ep;
    group->connection = c;
    group->kind = a->op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
    group->is_group = true;
    group->whole = *a;
    group->whole.struct_size = sizeof(group->whole);
    group->remote = remote;
    group->held = true;  // until this call returns it
    std::lock_guard<std::mutex> lock(ep->mu);
    ep->requests[group] = true;
    IssuePieces(group);
    if (group->next_piece == 0) {  // nothing went out
      rayaccel_status st = group->reply;
      std::string why = group->first_why;
      ep->requests.erase(group);
      delete group;
      return Fail(error, st, why);
    }
    group->held = false;
    MaybeCompleteGroup(group);
    a->request = group;
    return RAYACCEL_STATUS_OK;
  });
}

// One small range of a batch, on its way into a chunk.
struct ChunkItem {
  uint32_t entry;
  char* local;
  uint64_t region, offset, length;
};

// Sends `items` as one chunk of `batch`: one message with every range (and, for a write, their
// bytes), answered by one with each range's status (and, for a read, the bytes). Numbered as a
// transfer, so flushes and notifications wait for it. Caller holds mu.
void StartChunkLocked(Ep* ep, Conn* c, Request* batch, rayaccel_transfer_op op,
                      const std::vector<ChunkItem>& items, bool copied) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
  r->abandoned = true;  // the batch's: freed once it ends
  r->id = c->next_id++;
  r->same_host = copied;
  Writer w;
  w.U64(c->token).U64(r->id).U32(static_cast<uint32_t>(items.size()));
  if (copied) w.U32(kCopiedChunk);
  r->header = std::move(w.str());
  Writer body;
  for (const ChunkItem& i : items) {
    body.U64(i.region).U64(i.offset).U64(i.length);
    if (copied) body.U64(reinterpret_cast<uintptr_t>(i.local));
    r->chunk.push_back({i.entry, i.local, i.length, RAYACCEL_STATUS_OK});
    r->length += i.length;
  }
  if (r->kind == Request::Kind::kWrite && !copied) {
    for (const ChunkItem& i : items) body.Bytes(i.local, i.length);
  }
  r->payload = std::move(body.str());
  ep->requests[r] = true;
  c->transfers[r->id] = r;
  r->batch = batch;
  batch->parts_running++;
  ucp_request_param_t p = SendParams(TransferSent, r, /*eager=*/true);
  ucs_status_ptr_t started = Lib().ucp_am_send_nbx(
      DataOf(c->link), r->kind == Request::Kind::kRead ? kGetBatch : kPutBatch, r->header.data(),
      r->header.size(), r->payload.data(), r->payload.size(), &p);
  if (Started(r, started, "transfer") && started == nullptr) MaybeCompleteWrite(r);
  MaybeFree(r);
}

// A whole transfer of the batch, issued as `transfer` issues one, counted as a part of it.
void AttachPart(Request* batch, uint32_t entry, rayaccel_status issued, const char* why,
                rayaccel_request* handle) {
  Request* part = Of(handle);
  if (issued != RAYACCEL_STATUS_OK) {
    SetEntry(batch, entry, issued, why);
  } else if (part != nullptr && part->done) {
    SetEntry(batch, entry, part->status, part->why);
    part->abandoned = true;
    MaybeFree(part);
  } else if (part != nullptr) {
    part->batch = batch;
    part->entry = entry;
    part->abandoned = true;
    batch->parts_running++;
  }
}

// Entry `i` of a batch as the arguments of a transfer of its own.
rayaccel_transfer_args EntryAsTransfer(const rayaccel_transfer_batch_args& a, uint32_t i) {
  const rayaccel_transfer_entry& e = a.entries[i];
  rayaccel_transfer_args t{};
  t.struct_size = sizeof(t);
  t.connection = a.connection;
  t.op = a.op;
  t.local = e.local;
  t.local_offset = e.local_offset;
  t.remote_descriptor = e.remote_descriptor;
  t.remote_offset = e.remote_offset;
  t.length = e.length;
  t.path = RAYACCEL_PATH_UNREPORTED;
  return t;
}

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckBatchArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    // Every entry is checked before any starts: a malformed batch moves nothing.
    std::vector<RemoteRegion> remotes(a->count);
    for (uint32_t i = 0; i < a->count; ++i) {
      const rayaccel_transfer_entry& e = a->entries[i];
      const std::string at = "entry " + std::to_string(i) + ": ";
      if (e.local == nullptr || e.length == 0) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, at + "no local region or no length");
      }
      if (!ParseDescriptor(e.remote_descriptor, &remotes[i])) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, at + "malformed UCX descriptor");
      }
      if (Of(e.local)->endpoint != ep) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    at + "the local region belongs to another endpoint");
      }
      if (remotes[i].owner != c->peer_uuid) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    at + "the descriptor belongs to another peer than this connection's");
      }
      if (e.local_offset > Of(e.local)->length || e.length > Of(e.local)->length - e.local_offset ||
          e.remote_offset > remotes[i].length || e.length > remotes[i].length - e.remote_offset) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    at + "the range lies outside a region");
      }
    }
    auto* batch = new Request();
    batch->endpoint = ep;
    batch->connection = c;
    batch->kind = Request::Kind::kBatch;
    batch->entry_status.assign(a->count, RAYACCEL_STATUS_OK);
    batch->statuses_out = a->statuses;
    batch->held = true;  // until this call has issued every entry
    // Device memory on either side goes as a transfer of its own does (staged or mapped).
    auto alone = [&](uint32_t i) {
      return Of(a->entries[i].local)->staged ||
             (remotes[i].flags & (kMappable | kStagedByOwner)) != 0;
    };
    std::vector<uint32_t> own;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      if (c->failure != RAYACCEL_STATUS_OK || DataOf(c->link) == nullptr) {
        rayaccel_status st =
            c->failure != RAYACCEL_STATUS_OK ? c->failure : RAYACCEL_STATUS_PEER_LOST;
        std::string why =
            c->failure != RAYACCEL_STATUS_OK ? c->failure_text : "the connection has no data path";
        delete batch;
        return Fail(error, st, why);
      }
      ep->requests[batch] = true;
      std::vector<ChunkItem> items, copied;
      uint64_t bytes = 0, copied_bytes = 0;
      auto send = [&] {
        if (!items.empty()) StartChunkLocked(ep, c, batch, a->op, items, /*copied=*/false);
        items.clear();
        bytes = 0;
      };
      auto send_copied = [&] {
        if (!copied.empty()) StartChunkLocked(ep, c, batch, a->op, copied, /*copied=*/true);
        copied.clear();
        copied_bytes = 0;
      };
      for (uint32_t i = 0; i < a->count; ++i) {
        const rayaccel_transfer_entry& e = a->entries[i];
        if (alone(i)) {
          own.push_back(i);
          continue;
        }
        // Host memory of a reader the owner copies for: a system call per chunk; an entry of
        // more than a chunk's bytes goes alone, a tiny one in a message chunk.
        if (OwnerCopies(c, Of(e.local), remotes[i]) && e.length >= kCopiedEntryMin &&
            e.length <= kCopiedChunkBytes) {
          a->paths[i] = RAYACCEL_PATH_SAME_HOST;
          if (copied.size() == kCopiedChunkEntries || copied_bytes + e.length > kCopiedChunkBytes)
            send_copied();
          copied.push_back({i, static_cast<char*>(Of(e.local)->base) + e.local_offset,
                            remotes[i].id, e.remote_offset, e.length});
          copied_bytes += e.length;
          continue;
        }
        a->paths[i] = RAYACCEL_PATH_FABRIC;
        if (e.length > kChunkEntryMax) {  // zero-copy, as one transfer
          rayaccel_transfer_args t = EntryAsTransfer(*a, i);
          char text[512] = {};
          rayaccel_error err{sizeof(err), text, sizeof(text)};
          rayaccel_request* part = nullptr;
          rayaccel_status st =
              StartPieceLocked(ep, c, t, remotes[i], 0, e.length, nullptr, &part, {}, &err);
          if (st == RAYACCEL_STATUS_OK && Of(part)->same_host)
            a->paths[i] = RAYACCEL_PATH_SAME_HOST;
          AttachPart(batch, i, st, text, part);
          continue;
        }
        if (items.size() == kChunkEntries || bytes + e.length > kChunkBytes) send();
        items.push_back({i, static_cast<char*>(Of(e.local)->base) + e.local_offset, remotes[i].id,
                         e.remote_offset, e.length});
        bytes += e.length;
      }
      send();
      send_copied();
    }
    for (uint32_t i : own) {
      rayaccel_transfer_args t = EntryAsTransfer(*a, i);
      char text[512] = {};
      rayaccel_error err{sizeof(err), text, sizeof(text)};
      rayaccel_status st = Transfer(&t, &err);
      a->paths[i] = t.path;
      std::lock_guard<std::mutex> lock(ep->mu);
      AttachPart(batch, i, st, text, t.request);
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    batch->held = false;
    if (batch->parts_running == 0 && batch->reply == RAYACCEL_STATUS_OK) {
      // Everything landed within the call (device to device, mapped).
      std::copy(batch->entry_status.begin(), batch->entry_status.end(), a->statuses);
      ep->requests.erase(batch);
      delete batch;
      a->request = nullptr;
      return RAYACCEL_STATUS_OK;
    }
    MaybeCompleteBatch(batch);  // ended already when an entry failed in the call
    a->request = batch;
    return RAYACCEL_STATUS_OK;
  });
}

// A flush or a notification: waits for the connection's transfers issued before it.
Request* Barrier(Ep* ep, Conn* c, Request::Kind kind) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = kind;
  r->mark = c->next_id;
  ep->requests[r] = true;
  c->barriers.push_back(r);
  CheckBarriers(c);
  return r;
}

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckNotifyArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    // The message goes once every transfer issued before it has completed: the owner
    // acknowledged each write after it landed, and each read's bytes are here.
    Request* r = Barrier(ep, c, Request::Kind::kNotify);
    r->payload.assign(reinterpret_cast<const char*>(a->message.data), a->message.size);
    SendReadyNotifications(ep);
    a->request = r;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Flush(rayaccel_connection* handle, rayaccel_request** out, rayaccel_error* error) {
  Conn* c = Of(handle);
  if (c == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "flush needs a connection");
  }
  return Guard(error, [&] {
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    if (c->transfers.empty()) {
      *out = nullptr;
      return RAYACCEL_STATUS_OK;
    }
    *out = Barrier(ep, c, Request::Kind::kFlush);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Poll(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Ep* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (!r->done) {
      ProgressData(ep);  // transfers ride the data workers
      if (!ep->ready_notifications.empty()) SendReadyNotifications(ep);
      if (!ep->ready_groups.empty()) IssueReadyGroups(ep);
    }
    if (!r->done) return RAYACCEL_STATUS_TIMEOUT;
    if (r->kind == Request::Kind::kBatch && r->statuses_out != nullptr) {
      std::copy(r->entry_status.begin(), r->entry_status.end(), r->statuses_out);
    }
    rayaccel_status s = r->status;
    std::string why = r->why;
    r->abandoned = true;  // the host is done with it
    MaybeFree(r);
    if (s == RAYACCEL_STATUS_OK) return s;
    return Fail(error, s, why.empty() ? "failed" : why);
  });
}

rayaccel_status Abandon(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Ep* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    r->abandoned = true;
    r->statuses_out = nullptr;  // the host's array may go now
    MaybeFree(r);               // or when it ends
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Wait(rayaccel_transport_endpoint* handle, uint32_t timeout_ms,
                     rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    Clock::time_point start = Clock::now();
    Clock::time_point deadline = start + milliseconds(timeout_ms);
    auto pause = std::chrono::microseconds(0);
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      seen = ep->activity;
    }
    while (true) {
      // Activity since the call began counts, also what the progress thread handled.
      std::unique_lock<std::mutex> lock(ep->mu);
      if (Progress(ep) || ep->activity != seen) return RAYACCEL_STATUS_OK;
      Clock::time_point now = Clock::now();
      if (now >= deadline) return RAYACCEL_STATUS_TIMEOUT;
      // Spin briefly (a transfer usually ends within microseconds), then back off to 1 ms,
      // woken early when the progress thread handles something (a reply it took first).
      if (now - start > std::chrono::microseconds(50)) {
        pause = std::min(std::chrono::microseconds(1000),
                         std::max(std::chrono::microseconds(20), pause * 2));
        ep->progressed.wait_for(lock, std::min<Clock::duration>(pause, deadline - now));
        if (ep->activity != seen) return RAYACCEL_STATUS_OK;
      }
    }
  });
}

rayaccel_status GetNotifications(rayaccel_transport_endpoint* handle,
                                 const rayaccel_blob_sink* sink, rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "get_notifications needs a sink");
  }
  return Guard(error, [&] {
    std::deque<std::string> got;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      Progress(ep);
      got.swap(ep->notifications);
    }
    for (const std::string& n : got) {
      rayaccel_status s =
          sink->put(sink->host_context, {reinterpret_cast<const uint8_t*>(n.data()), n.size()});
      if (s == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || s == RAYACCEL_STATUS_ABORTED) return s;
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Close(rayaccel_connection* handle, rayaccel_error* error) {
  Conn* c = Of(handle);
  if (c == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no connection");
  return Guard(error, [&] {
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    EndConnection(ep, c, /*say_bye=*/true);
    ep->connections.erase(c->token);
    delete c;
    return RAYACCEL_STATUS_OK;
  });
}

}  // namespace

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error) {
  if (rayaccel_status s = CheckOpenArgs(args, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    std::string mismatch;
    const Ucp& ucp = LoadUcp(options.ucx_library, &mismatch);
    if (!ucp.error.empty()) return Fail(error, RAYACCEL_STATUS_UNAVAILABLE, ucp.error);
    if (!mismatch.empty()) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, mismatch);
    auto ep = std::make_unique<Ep>();
    ep->options = options;
    if (options.device_ops != nullptr) {
      ep->pinned = std::make_shared<rayaccel::plugin::ucx::PinnedPool>(options.device_ops);
    }
    ep->key.assign(reinterpret_cast<const char*>(args->key.data), args->key.size);
    ep->uuid = RandomId();
    ep->peer_timeout_ms =
        args->peer_timeout_ms != 0 ? args->peer_timeout_ms : kDefaultPeerTimeoutMs;
    auto fail = [&](const char* what, ucs_status_t s) {
      DestroyEndpoint(ep.get());
      return FailUcs(error, what, s);
    };

    const Transports tls = SplitTransports(std::getenv("UCX_TLS"));
    if (tls.local.empty() && tls.network.empty()) {
      DestroyEndpoint(ep.get());
      return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                  "UCX_TLS leaves no transport but cma, which aborts the process when a peer dies "
                  "mid-transfer (UCX 1.13); add posix,sysv or tcp");
    }
    ep->shared_memory = tls.shared_memory;
    ep->same_host_copy = SameHostCopyEnabled();
    if (tls.shared_memory) {
      static std::once_flag warned;
      std::call_once(warned, [&] {
        LogTo(ep.get(), RAYACCEL_LOG_WARN,
              "UCX_TLS names shared memory (posix, sysv): a peer on this host that dies "
              "mid-transfer can leave this endpoint's shared-memory queue stuck "
              "(docs/transport.md); TCP is used otherwise");
      });
    }
    ucs_status_t s = UCS_OK;
    const std::string* fabric_tls[2] = {&tls.local, &tls.network};
    for (Ep::Fabric& f : ep->fabrics) {
      f.endpoint = ep.get();
      f.index = static_cast<int>(&f - ep->fabrics);
      if (fabric_tls[f.index]->empty()) continue;
      ucp_config_t* config = nullptr;
      s = ucp.ucp_config_read(nullptr, nullptr, &config);
      if (s != UCS_OK) return fail("ucp_config_read", s);
      ucp.ucp_config_modify(config, "TLS", fabric_tls[f.index]->c_str());
      // The peer timeout sets UCX's keepalive, unless the operator set UCX_KEEPALIVE_INTERVAL.
      if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
        uint32_t interval = std::max<uint32_t>(100, ep->peer_timeout_ms / 3);
        ucp.ucp_config_modify(config, "KEEPALIVE_INTERVAL",
                              (std::to_string(interval) + "ms").c_str());
      }
      ucp_params_t params{};
      params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
      // Active messages only. UCX's RMA feature would let any connected worker read and write
      // anywhere in this process over its software-emulated get and put (TCP, shared memory
      // without CMA): UCX checks no bounds there. Without it, the only bytes a peer reaches
      // are the ones this endpoint's handlers choose to send or receive, inside a live region.
      params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
      params.name = "rayaccel";
      s = ucp.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &f.context);
      ucp.ucp_config_release(config);
      if (s != UCS_OK) return fail("ucp_init", s);
      ucp_context_attr_t attr{};
      attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
      if (ucp.ucp_context_query(f.context, &attr) == UCS_OK) ep->memory_types |= attr.memory_types;
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call runs under ep->mu
    for (Ep::Fabric& f : ep->fabrics) {
      if (f.context == nullptr) continue;
      s = ucp.ucp_worker_create(f.context, &wp, &f.worker);
      if (s != UCS_OK) return fail("ucp_worker_create", s);
    }
    // Control on the network fabric's context (TCP offers UCX's peer-failure handling), else on
    // shared memory's.
    ucp_context_h control = ep->fabrics[kNetwork].context != nullptr ? ep->fabrics[kNetwork].context
                                                                     : ep->fabrics[kLocal].context;
    s = ucp.ucp_worker_create(control, &wp, &ep->control);
    if (s != UCS_OK) return fail("ucp_worker_create", s);
    ucp_am_recv_callback_t control_handlers[] = {
        ControlHandler<kHello>,   ControlHandler<kChallenge>, ControlHandler<kProof>,
        ControlHandler<kWelcome>, ControlHandler<kRefused>,   ControlHandler<kPing>,
        ControlHandler<kPong>,    ControlHandler<kBye>};
    ucp_am_recv_callback_t data_handlers[] = {DataHandler<kNotify>, DataHandler<kGet>,
                                              DataHandler<kGetReply>, DataHandler<kPut>,
                                              DataHandler<kPutAck>};
    static_assert(sizeof(control_handlers) / sizeof(control_handlers[0]) == kNotify - kHello);
    static_assert(sizeof(data_handlers) / sizeof(data_handlers[0]) == kPutAck - kNotify + 1);
    auto set_handler = [&](ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void* arg) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
      hp.id = id;
      hp.flags = UCP_AM_FLAG_WHOLE_MSG;
      hp.cb = cb;
      hp.arg = arg;
      return ucp.ucp_worker_set_am_recv_handler(worker, &hp);
    };
    for (unsigned id = kHello; id < kNotify && s == UCS_OK; ++id) {
      s = set_handler(ep->control, id, control_handlers[id - kHello], ep.get());
    }
    if (s == UCS_OK) s = set_handler(ep->control, kGoodbye, ControlHandler<kGoodbye>, ep.get());
    ucp_am_recv_callback_t mapping_handlers[] = {ControlHandler<kMapAsk>, ControlHandler<kMapReply>,
                                                 ControlHandler<kUnmap>, ControlHandler<kUnmapped>};
    static_assert(sizeof(mapping_handlers) / sizeof(mapping_handlers[0]) ==
                  kUnmapped - kMapAsk + 1);
    for (unsigned id = kMapAsk; id <= kUnmapped && s == UCS_OK; ++id) {
      s = set_handler(ep->control, id, mapping_handlers[id - kMapAsk], ep.get());
    }
    ucp_am_recv_callback_t batch_handlers[] = {DataHandler<kGetBatch>, DataHandler<kGetBatchReply>,
                                               DataHandler<kPutBatch>, DataHandler<kPutBatchAck>};
    static_assert(sizeof(batch_handlers) / sizeof(batch_handlers[0]) ==
                  kPutBatchAck - kGetBatch + 1);
    for (Ep::Fabric& f : ep->fabrics) {
      for (unsigned id = kGetBatch; f.worker != nullptr && id <= kPutBatchAck && s == UCS_OK;
           ++id) {
        s = set_handler(f.worker, id, batch_handlers[id - kGetBatch], &f);
      }
    }
    for (Ep::Fabric& f : ep->fabrics) {
      for (unsigned id = kNotify; f.worker != nullptr && id <= kPutAck && s == UCS_OK; ++id) {
        s = set_handler(f.worker, id, data_handlers[id - kNotify], &f);
      }
    }
    if (s != UCS_OK) return fail("ucp_worker_set_am_recv_handler", s);
    // The address: both data workers' (either may be missing), then the control worker's.
    Writer w;
    w.U32(kAddressMagic).U16(kWireVersion).U16(0).U64(ep->uuid);
    for (ucp_worker_h worker :
         {ep->fabrics[kLocal].worker, ep->fabrics[kNetwork].worker, ep->control}) {
      std::string address;
      s = WorkerAddress(worker, &address);
      if (s != UCS_OK) return fail("ucp_worker_get_address", s);
      w.U32(static_cast<uint32_t>(address.size())).Bytes(address.data(), address.size());
    }
    // Signed with the key: a reader parses the worker addresses only of an endpoint that has it.
    const Mac signature = MacOf(ep->key, kAddressLabel, w.str());
    w.Bytes(signature.data(), signature.size());
    if (w.str().size() > RAYACCEL_TRANSPORT_MAX_BLOB) {
      DestroyEndpoint(ep.get());
      return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED,
                  "UCX's worker address is larger than an address may be (narrow UCX_TLS)");
    }
    rayaccel_status put =
        args->address->put(args->address->host_context,
                           {reinterpret_cast<const uint8_t*>(w.str().data()), w.str().size()});
    if (put != RAYACCEL_STATUS_OK) {
      DestroyEndpoint(ep.get());
      return Fail(error, put, "the host refused the endpoint's address");
    }
    ep->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (ep->stop_fd < 0) {
      DestroyEndpoint(ep.get());
      return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "eventfd failed");
    }
    ep->next_heartbeat = Clock::now();
    ep->progress = std::thread(ProgressThread, ep.get());
    args->endpoint = ep.release();
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

const rayaccel_transport_api* Hooks() {
  static const rayaccel_transport_api hooks = Table(nullptr);
  return &hooks;
}

}  // namespace rayaccel::plugin::ucx
