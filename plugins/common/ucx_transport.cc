#include "ucx_transport.h"

#include <dlfcn.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
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

// The handle types of the ABI are declared, never defined, in plugin.h; these are the
// helper's definitions of them.
struct rayaccel_transport_endpoint;
struct rayaccel_memory_region;
struct rayaccel_connection;
struct rayaccel_request;

namespace rayaccel::plugin::ucx {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------
// libucp, loaded when the first endpoint opens.

#define RAYACCEL_UCP_FUNCTIONS(X)                                                               \
  X(ucp_config_read)                                                                            \
  X(ucp_config_modify)                                                                          \
  X(ucp_config_release)                                                                         \
  X(ucp_init_version)                                                                           \
  X(ucp_cleanup) X(ucp_context_query) X(ucp_worker_create) X(ucp_worker_destroy)                \
      X(ucp_worker_get_address) X(ucp_worker_release_address) X(ucp_worker_progress)            \
          X(ucp_worker_fence) X(ucp_worker_set_am_recv_handler) X(ucp_ep_create)                \
              X(ucp_ep_close_nbx) X(ucp_ep_flush_nbx) X(ucp_mem_map) X(ucp_mem_unmap)           \
                  X(ucp_rkey_pack) X(ucp_rkey_buffer_release) X(ucp_ep_rkey_unpack)             \
                      X(ucp_rkey_destroy) X(ucp_put_nbx) X(ucp_get_nbx) X(ucp_am_send_nbx)      \
                          X(ucp_request_check_status) X(ucp_request_free) X(ucp_worker_get_efd) \
                              X(ucp_worker_arm) X(ucp_mem_query) X(ucs_status_string)

struct Ucp {
#define RAYACCEL_UCP_MEMBER(f) decltype(&::f) f = nullptr;
  RAYACCEL_UCP_FUNCTIONS(RAYACCEL_UCP_MEMBER)
#undef RAYACCEL_UCP_MEMBER
  std::string error;  // why libucp could not be used; empty when it can
};

const Ucp& Lib() {
  // libucp stays loaded for the life of the process (UCX does not support being unloaded);
  // the table of its functions goes with this plugin when the plugin is unloaded.
  static const Ucp lib = [] {
    Ucp u;
    void* h = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      u.error = std::string("UCX is not installed (libucp.so.0: ") + (why ? why : "?") + ")";
      return u;
    }
#define RAYACCEL_UCP_LOAD(f)                            \
  u.f = reinterpret_cast<decltype(&::f)>(dlsym(h, #f)); \
  if (u.f == nullptr && u.error.empty()) u.error = "libucp.so.0 lacks " #f;
    RAYACCEL_UCP_FUNCTIONS(RAYACCEL_UCP_LOAD)
#undef RAYACCEL_UCP_LOAD
    return u;
  }();
  return lib;
}

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
// Little-endian wire encoding of the address, descriptor and control messages.

class Writer {
 public:
  Writer& U16(uint16_t v) { return Int(v, 2); }
  Writer& U32(uint32_t v) { return Int(v, 4); }
  Writer& U64(uint64_t v) { return Int(v, 8); }
  Writer& Bytes(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string& str() { return out_; }

 private:
  Writer& Int(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

// Reads fields in order; any read past the end makes ok() false and returns zeros.
class Reader {
 public:
  Reader(const void* data, size_t size) : p_(static_cast<const uint8_t*>(data)), left_(size) {}
  uint16_t U16() { return static_cast<uint16_t>(Int(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Int(4)); }
  uint64_t U64() { return Int(8); }
  const uint8_t* Bytes(size_t n) {
    if (!ok_ || n > left_) return ok_ = false, nullptr;
    const uint8_t* at = p_;
    p_ += n, left_ -= n;
    return at;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && left_ == 0; }

 private:
  uint64_t Int(int bytes) {
    const uint8_t* at = Bytes(static_cast<size_t>(bytes));
    uint64_t v = 0;
    for (int i = 0; at != nullptr && i < bytes; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
    return v;
  }
  const uint8_t* p_;
  size_t left_;
  bool ok_ = true;
};

constexpr uint32_t kAddressMagic = 0x41584355;     // "UCXA"
constexpr uint32_t kDescriptorMagic = 0x52584355;  // "UCXR"
constexpr uint16_t kWireVersion = 1;

// Active-message ids of the helper's control protocol (docs/transport.md).
enum AmId : unsigned {
  kHello = 1,        // reader -> owner: who I am, how to reach me
  kWelcome = 2,      // owner -> reader: which of my regions are live
  kInvalidate = 3,   // owner -> reader: a region is gone
  kNotify = 4,       // either way: an application notification
  kBye = 5,          // reader -> owner: the connection is closing
  kInvalidated = 6,  // reader -> owner: an invalidation is applied
};

uint64_t RandomId() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
      v = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
          reinterpret_cast<uintptr_t>(&v);
    }
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The handles.

// What a reader knows about an owner's regions: those below the watermark that were live at
// connect time, and those at or above it that were invalidated since. Both sets shrink as the
// owner's lowest live region id moves up.
// Dead ids above the watermark are kept as ranges [first, last], so the common pattern of
// regions freed in about the order they were made costs one entry.
struct PeerRegions {
  uint64_t watermark = 0;
  std::set<uint64_t> live_below;
  std::map<uint64_t, uint64_t> dead_above;  // first -> last

  bool Stale(uint64_t id) const {
    if (id < watermark) return live_below.count(id) == 0;
    auto it = dead_above.upper_bound(id);
    return it != dead_above.begin() && std::prev(it)->second >= id;
  }
  void Invalidate(uint64_t id, uint64_t lowest_live) {
    if (id < watermark) {
      live_below.erase(id);
    } else if (!Stale(id)) {
      uint64_t first = id, last = id;
      auto next = dead_above.find(id + 1);
      if (next != dead_above.end()) last = next->second, dead_above.erase(next);
      auto it = dead_above.lower_bound(id);
      if (it != dead_above.begin() && std::prev(it)->second + 1 == id) {
        first = std::prev(it)->first;
      }
      dead_above[first] = last;
    }
    if (lowest_live > watermark) {
      live_below.erase(live_below.begin(), live_below.lower_bound(lowest_live));
      while (!dead_above.empty() && dead_above.begin()->first < lowest_live) {
        auto [first, last] = *dead_above.begin();
        dead_above.erase(dead_above.begin());
        if (last >= lowest_live) dead_above[lowest_live] = last;
      }
      watermark = lowest_live;
    }
  }
};

}  // namespace rayaccel::plugin::ucx

struct rayaccel_request {
  rayaccel_transport_endpoint* endpoint = nullptr;
  rayaccel_connection* connection = nullptr;  // null once the connection is closed
  bool done = false;
  bool abandoned = false;    // nobody will poll it: freed when UCX calls back
  bool detached = false;     // failed for its connection's sake while UCX still holds it
  bool ucx_done = true;      // UCX will not call back any more (false while it holds it)
  uint64_t rkey_region = 0;  // a transfer: the remote region whose key it uses
  ucs_status_t status = UCS_OK;
  std::string payload;  // a notification's bytes, alive until UCX is done with them
};

struct rayaccel_memory_region {
  rayaccel_transport_endpoint* endpoint = nullptr;
  uint64_t id = 0;
  void* base = nullptr;
  uint64_t length = 0;
  ucp_mem_h memh = nullptr;
  std::string descriptor;
};

// Two UCX endpoints per connection. Data moves on one without error handling, because UCX
// (1.13) offers peer-failure handling only on transports that are slower than shared memory
// and CMA; control messages use one with it, so a lost peer is still noticed. When the control
// endpoint fails, the data endpoint is closed and what was in flight on it fails.
struct rayaccel_connection {
  rayaccel_transport_endpoint* endpoint = nullptr;
  ucp_ep_h data = nullptr;     // transfers and notifications, in order
  ucp_ep_h control = nullptr;  // hello and bye; its failure is the peer's loss
  uint64_t token = 0;          // names this connection in the owner's bookkeeping
  uint64_t peer_uuid = 0;
  bool welcomed = false;
  ucs_status_t failure = UCS_OK;  // set by UCX's error callback
  rayaccel::plugin::ucx::PeerRegions regions;
  // Unpacked remote keys by region id. A key is destroyed once its region is invalidated and
  // no transfer uses it; the invalidation is confirmed to the owner only then.
  struct RemoteKey {
    ucp_rkey_h rkey = nullptr;
    uint32_t in_flight = 0;
    bool stale = false;
    uint64_t confirm_token = 0;  // the owner's reader token to confirm to, once drained
  };
  std::map<uint64_t, RemoteKey> rkeys;
};

struct rayaccel_transport_endpoint {
  std::mutex mu;  // held around every UCX call, so UCX callbacks run with it held
  rayaccel::plugin::ucx::EndpointOptions options;
  ucp_context_h context = nullptr;
  // Two workers: UCX (1.13) refuses endpoints of mixed error handling between one pair of
  // workers, so data endpoints (none, for shared memory and CMA) and control endpoints (peer
  // failure detection) live on workers of their own.
  ucp_worker_h worker = nullptr;   // data: transfers and notifications
  ucp_worker_h control = nullptr;  // hello, welcome, invalidate, bye
  uint64_t memory_types = 0;       // UCS_MEMORY_TYPE_* bits UCX can reach
  uint64_t uuid = 0;
  uint32_t peer_timeout_ms = 0;
  uint64_t next_region_id = 1;
  std::map<uint64_t, rayaccel_memory_region*> regions;
  std::set<rayaccel_connection*> connections;
  std::set<rayaccel_request*> requests;

  // The owner's side: one reverse endpoint per connected reader, for control messages.
  struct Reader {
    ucp_ep_h ep = nullptr;
    uint64_t uuid = 0;
    uint64_t token = 0;
    bool failed = false;
    uint64_t awaiting = 0;  // the region whose invalidation it has not confirmed yet
  };
  std::vector<std::unique_ptr<Reader>> readers;
  // The reader's side: confirmations to send once progress returns (connection token, region).
  std::vector<std::pair<uint64_t, uint64_t>> confirmations;
  struct Hello {
    uint64_t uuid, token;
    std::string address;
  };
  std::vector<Hello> hellos;  // queued by the handler, answered after progress returns

  std::deque<std::string> notifications;
  uint64_t dropped_notifications = 0;
  std::vector<rayaccel_request*> flushed_notifications;  // ready to send (see Notify)
  rayaccel_request* spare_request = nullptr;  // reused by transfers that complete in the call
  uint64_t activity = 0;  // bumped by every callback, so `wait` can tell something happened

  // Answers peers while the application is not calling in (hellos, invalidations,
  // notifications): asleep on UCX's event fd until something arrives.
  std::thread progress;
  int stop_fd = -1;  // eventfd that ends the progress thread
};

namespace rayaccel::plugin::ucx {
namespace {

using Ep = rayaccel_transport_endpoint;
using Conn = rayaccel_connection;
using Region = rayaccel_memory_region;
using Request = rayaccel_request;

constexpr size_t kMaxQueuedNotifications = 65536;
constexpr size_t kMaxReaders = 4096;

void LogTo(const Ep* ep, rayaccel_log_level level, const std::string& text) {
  Log(ep->options.host, level, "ucx transport: " + text);
}

// Requests whose only owner is UCX (control messages): freed when they complete.
struct ControlSend {
  std::string bytes;
};

void ControlDone(void* request, ucs_status_t /*status*/, void* user_data) {
  delete static_cast<ControlSend*>(user_data);
  Lib().ucp_request_free(request);
}

// Sends a control message; the bytes live until UCX is done with them. Caller holds mu.
void SendControl(ucp_ep_h ep, unsigned id, std::string bytes) {
  auto* send = new ControlSend{std::move(bytes)};
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = ControlDone;
  p.user_data = send;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t r =
      Lib().ucp_am_send_nbx(ep, id, nullptr, 0, send->bytes.data(), send->bytes.size(), &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete send;
}

void ReleaseRkey(Request* r);

void RequestDone(void* ucx_request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->endpoint->activity++;
  r->ucx_done = true;
  ReleaseRkey(r);
  if (!r->detached) {
    r->status = status;
    r->done = true;
  }
  if (r->abandoned) {
    r->endpoint->requests.erase(r);
    delete r;
  }
}

// Starts tracking the outcome of a UCX operation: `started` is what the nbx call returned.
// A notification whose flush completed: the message goes now. Caller holds mu, outside UCX
// callbacks.
void SendNotification(Request* r);
void SendNotificationOn(Conn* c, Request* r);

// The flush before a notification completed (a UCX callback): queue the send.
void NotifyFlushed(void* ucx_request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->endpoint->activity++;
  r->ucx_done = true;
  if (r->abandoned && r->detached) {
    r->endpoint->requests.erase(r);
    delete r;
  } else if (r->detached) {
    // failed with its connection: nothing to send
  } else if (status != UCS_OK) {
    r->status = status;
    r->done = true;
  } else {
    r->endpoint->flushed_notifications.push_back(r);
  }
}

Request* Track(Ep* ep, Conn* conn, Request* r, ucs_status_ptr_t started) {
  r->endpoint = ep;
  r->connection = conn;
  if (started == nullptr) {
    r->done = true;
  } else if (UCS_PTR_IS_ERR(started)) {
    r->done = true;
    r->status = UCS_PTR_STATUS(started);
  } else {
    r->ucx_done = false;
  }
  if (r->ucx_done) ReleaseRkey(r);
  ep->requests.insert(r);
  return r;
}

ucp_request_param_t RequestParams(Request* r) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = RequestDone;
  p.user_data = r;
  return p;
}

void ConnectionFailed(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* conn = static_cast<Conn*>(arg);
  if (conn->failure == UCS_OK) conn->failure = status;
  conn->endpoint->activity++;
}

void ReaderFailed(void* arg, ucp_ep_h /*ep*/, ucs_status_t /*status*/) {
  static_cast<Ep::Reader*>(arg)->failed = true;
}

// A UCX endpoint to `worker_address`: with peer-failure handling when `on_error` is given,
// and then, where UCX_TLS leaves no transport that can handle it, without (logged once).
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
      LogTo(ep, RAYACCEL_LOG_WARN,
            "no transport in UCX_TLS can detect a lost peer (UCX offers it over tcp); a peer "
            "that dies will not be noticed");
    });
    return UCS_OK;
  }
  return s;
}

unsigned ProgressWorkers(Ep* ep) {
  return Lib().ucp_worker_progress(ep->worker) + Lib().ucp_worker_progress(ep->control);
}

// Waits, making progress, until `request` (from an nbx call) completes or the deadline
// passes; frees it either way. Caller holds mu.
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

void DropRkeys(Conn* c);

Clock::time_point PeerDeadline(const Ep* ep) {
  return Clock::now() + std::chrono::milliseconds(ep->peer_timeout_ms);
}

// Closes a UCX endpoint, within the peer timeout. `force` skips the goodbye with the peer:
// only for a peer that is gone, since UCX leaves a forced close on a live peer undefined
// unless both sides handle errors. Caller holds mu.
void CloseEp(Ep* ep, ucp_ep_h uep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  WaitUcx(ep, Lib().ucp_ep_close_nbx(uep, &p), PeerDeadline(ep));
}

// Fails what is in flight on `c` with `status` (UCX completes nothing in flight on an
// endpoint without error handling, not even when it closes); UCX's late callback, if any,
// then frees the request.
void DetachRequests(Ep* ep, Conn* c, ucs_status_t status) {
  auto& queued = ep->flushed_notifications;
  queued.erase(
      std::remove_if(queued.begin(), queued.end(), [c](Request* r) { return r->connection == c; }),
      queued.end());
  for (auto it = ep->requests.begin(); it != ep->requests.end();) {
    Request* r = *it;
    if (r->connection != c) {
      ++it;
      continue;
    }
    r->rkey_region = 0;  // DropRkeys takes the keys
    if (!r->done) {
      r->done = r->detached = true;
      r->status = status;
    }
    if (r->abandoned && r->ucx_done) {  // nobody waits for it, and UCX no longer holds it
      it = ep->requests.erase(it);
      delete r;
    } else {
      ++it;
    }
  }
}

// Ends a connection: what is in flight may finish (within the peer timeout), the rest fails
// with "closed", then the keys and both endpoints go.
void EndConnection(Ep* ep, Conn* c) {
  bool gone = c->failure != UCS_OK;
  if (!gone && c->data != nullptr) {
    ucp_request_param_t p{};
    WaitUcx(ep, Lib().ucp_ep_flush_nbx(c->data, &p), PeerDeadline(ep));
  }
  DetachRequests(ep, c, UCS_ERR_CANCELED);
  for (Request* r : ep->requests) {
    if (r->connection == c) r->connection = nullptr;
  }
  DropRkeys(c);
  if (c->data != nullptr) CloseEp(ep, c->data, gone);
  CloseEp(ep, c->control, gone);
}

uint64_t LowestLiveRegion(const Ep* ep) {
  return ep->regions.empty() ? ep->next_region_id : ep->regions.begin()->first;
}

Conn* ConnectionByToken(Ep* ep, uint64_t token) {
  for (Conn* c : ep->connections) {
    if (c->token == token) return c;
  }
  return nullptr;
}

// Answers queued hellos and drops readers that went away. Runs after ucp_worker_progress
// returns, because UCX endpoints may not be created from inside its callbacks.
void ServeControl(Ep* ep) {
  for (const auto& [token, region] : ep->confirmations) {
    Conn* c = ConnectionByToken(ep, token);
    if (c == nullptr || c->failure != UCS_OK) continue;
    Writer w;
    w.U64(ep->uuid).U64(token).U64(region);
    SendControl(c->control, kInvalidated, std::move(w.str()));
  }
  ep->confirmations.clear();
  std::vector<Ep::Hello> hellos;
  hellos.swap(ep->hellos);
  for (Ep::Hello& h : hellos) {
    auto reader = std::make_unique<Ep::Reader>();
    reader->uuid = h.uuid;
    reader->token = h.token;
    ucs_status_t s =
        CreateEp(ep, ep->control, h.address.data(), ReaderFailed, reader.get(), &reader->ep);
    if (s != UCS_OK) {
      LogTo(ep, RAYACCEL_LOG_WARN, "cannot reach a connecting peer back: " + StatusText(s));
      continue;
    }
    Writer w;
    w.U64(h.token)
        .U64(ep->uuid)
        .U64(ep->next_region_id)
        .U32(static_cast<uint32_t>(ep->regions.size()));
    for (const auto& [id, region] : ep->regions) w.U64(id);
    SendControl(reader->ep, kWelcome, std::move(w.str()));
    ep->readers.push_back(std::move(reader));
  }
  for (Conn* c : ep->connections) {
    if (c->failure != UCS_OK && c->data != nullptr) {
      DetachRequests(ep, c, c->failure);
      DropRkeys(c);
      CloseEp(ep, c->data, /*force=*/true);
      c->data = nullptr;
    }
  }
  for (auto it = ep->readers.begin(); it != ep->readers.end();) {
    if ((*it)->failed) {
      CloseEp(ep, (*it)->ep, /*force=*/true);
      it = ep->readers.erase(it);
    } else {
      ++it;
    }
  }
}

// Caller holds mu. Returns whether UCX did anything.
void SendNotification(Request* r) {
  Conn* c = r->connection;
  if (c == nullptr || c->data == nullptr || c->failure != UCS_OK) {
    r->done = true;
    r->status = c == nullptr ? UCS_ERR_CANCELED : c->failure;
  } else {
    SendNotificationOn(c, r);
  }
  if (r->abandoned && r->done && r->ucx_done) {
    r->endpoint->requests.erase(r);
    delete r;
  }
}

void SendNotificationOn(Conn* c, Request* r) {
  ucp_request_param_t p = RequestParams(r);
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t sent =
      Lib().ucp_am_send_nbx(c->data, kNotify, nullptr, 0, r->payload.data(), r->payload.size(), &p);
  if (sent == nullptr) {
    r->done = true;
  } else if (UCS_PTR_IS_ERR(sent)) {
    r->done = true;
    r->status = UCS_PTR_STATUS(sent);
  } else {
    r->ucx_done = false;
  }
}

void SendFlushedNotifications(Ep* ep) {
  std::vector<Request*> ready;
  ready.swap(ep->flushed_notifications);
  for (Request* r : ready) SendNotification(r);
}

// Caller holds mu. Returns whether UCX did anything. Bounded, so that a flood of messages
// cannot keep the endpoint's lock forever.
bool Progress(Ep* ep) {
  bool any = false;
  for (int i = 0; i < 64 && ProgressWorkers(ep) != 0; ++i) any = true;
  SendFlushedNotifications(ep);
  ServeControl(ep);
  return any;
}

void ProgressThread(Ep* ep) {
  int data_fd = -1, control_fd = -1;
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    if (Lib().ucp_worker_get_efd(ep->worker, &data_fd) != UCS_OK) data_fd = -1;
    if (Lib().ucp_worker_get_efd(ep->control, &control_fd) != UCS_OK) control_fd = -1;
  }
  // While UCX is busy: passes back to back for 100 us after one that moved something (a peer
  // draining a queue frees room within microseconds), then pauses doubling from 50 us (about
  // the kernel's timer slack) to 1 ms, so that a stalled peer costs little CPU.
  using std::chrono::microseconds;
  Clock::time_point last_moved = Clock::now();
  microseconds pause(0);
  while (true) {
    bool armed = false, busy = false;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      if (Progress(ep)) last_moved = Clock::now();
      if (data_fd >= 0 && control_fd >= 0) {
        // BUSY: work is pending that no event will announce, such as replies to a peer's reads
        // waiting for room in a shared-memory queue when UCX emulates one-sided reads. This
        // thread is then what serves the peer, so it comes back soon.
        const ucs_status_t data = Lib().ucp_worker_arm(ep->worker);
        const ucs_status_t control = data == UCS_OK ? Lib().ucp_worker_arm(ep->control) : data;
        armed = data == UCS_OK && control == UCS_OK;
        busy = data == UCS_ERR_BUSY || control == UCS_ERR_BUSY;
      }
    }
    pollfd fds[3] = {{ep->stop_fd, POLLIN, 0}, {data_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
    if (busy) {
      if (poll(fds, 1, 0) > 0) return;
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
    // Without armed event fds (no wakeup support), look again in 1 ms.
    int n = poll(fds, armed ? 3 : 1, armed ? 1000 : 1);
    if (n > 0 && (fds[0].revents & POLLIN) != 0) return;
  }
}

// The invalidation of `region` by `c`'s owner: the key goes once no transfer uses it, and
// the owner hears so then (through ep->confirmations), not before.
void RetireRkey(Ep* ep, Conn* c, uint64_t region, uint64_t token) {
  auto it = c->rkeys.find(region);
  if (it == c->rkeys.end() || it->second.in_flight == 0) {
    if (it != c->rkeys.end()) {
      Lib().ucp_rkey_destroy(it->second.rkey);
      c->rkeys.erase(it);
    }
    ep->confirmations.emplace_back(token, region);
    return;
  }
  it->second.stale = true;
  it->second.confirm_token = token;
}

void ReleaseRkey(Request* r) {
  if (r->rkey_region == 0 || r->connection == nullptr) return;
  Conn* c = r->connection;
  auto it = c->rkeys.find(r->rkey_region);
  r->rkey_region = 0;
  if (it == c->rkeys.end() || --it->second.in_flight > 0 || !it->second.stale) return;
  Lib().ucp_rkey_destroy(it->second.rkey);
  c->endpoint->confirmations.emplace_back(it->second.confirm_token, it->first);
  c->rkeys.erase(it);
}

// Destroys every key of a connection whose transfers are over or detached; before its data
// endpoint closes, as UCX requires.
void DropRkeys(Conn* c) {
  for (auto& [id, key] : c->rkeys) Lib().ucp_rkey_destroy(key.rkey);
  c->rkeys.clear();
}

// One handler for every control message: checks its shape and applies it. A malformed
// message from a peer is dropped with a log line. Runs inside progress, mu held.
ucs_status_t OnMessage(Ep* ep, unsigned id, const void* data, size_t length,
                       const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) return UCS_OK;  // never sent
  ep->activity++;
  Reader in(data, length);
  switch (id) {
    case kHello: {
      uint64_t uuid = in.U64(), token = in.U64();
      uint32_t n = in.U32();
      const uint8_t* address = in.Bytes(n);
      if (!in.at_end() || n == 0 || n > RAYACCEL_TRANSPORT_MAX_BLOB) break;
      if (ep->readers.size() + ep->hellos.size() >= kMaxReaders) {
        LogTo(ep, RAYACCEL_LOG_WARN, "too many connected peers: a hello was refused");
        return UCS_OK;
      }
      ep->hellos.push_back({uuid, token, std::string(reinterpret_cast<const char*>(address), n)});
      return UCS_OK;
    }
    case kWelcome: {
      uint64_t token = in.U64(), owner = in.U64(), watermark = in.U64();
      uint32_t n = in.U32();
      if (!in.ok() || static_cast<uint64_t>(n) * 8 != length - 28) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr || c->welcomed) return UCS_OK;
      c->peer_uuid = owner;
      c->regions.watermark = watermark;
      for (uint32_t i = 0; i < n; ++i) c->regions.live_below.insert(in.U64());
      c->welcomed = true;
      return UCS_OK;
    }
    case kInvalidate: {
      uint64_t owner = in.U64(), token = in.U64(), region = in.U64(), lowest = in.U64();
      if (!in.at_end()) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr || c->peer_uuid != owner) return UCS_OK;  // closed, or not from its owner
      c->regions.Invalidate(region, lowest);
      RetireRkey(ep, c, region, token);
      return UCS_OK;
    }
    case kInvalidated: {
      uint64_t uuid = in.U64(), token = in.U64(), region = in.U64();
      if (!in.at_end()) break;
      for (auto& r : ep->readers) {
        if (r->uuid == uuid && r->token == token && r->awaiting == region) r->awaiting = 0;
      }
      return UCS_OK;
    }
    case kNotify:
      if (length == 0 || length > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) break;
      if (ep->notifications.size() >= kMaxQueuedNotifications) {
        if (ep->dropped_notifications++ == 0) {
          LogTo(ep, RAYACCEL_LOG_WARN, "notification queue full: dropping new notifications");
        }
        return UCS_OK;
      }
      ep->notifications.emplace_back(static_cast<const char*>(data), length);
      return UCS_OK;
    case kBye: {
      uint64_t uuid = in.U64(), token = in.U64();
      if (!in.at_end()) break;
      for (auto& r : ep->readers) {
        if (r->uuid == uuid && r->token == token) r->failed = true;
      }
      return UCS_OK;
    }
    default:
      break;
  }
  LogTo(ep, RAYACCEL_LOG_WARN,
        "dropped a malformed control message (id " + std::to_string(id) + ", " +
            std::to_string(length) + " bytes)");
  return UCS_OK;
}

template <unsigned kId>
ucs_status_t Handler(void* arg, const void* /*header*/, size_t /*header_length*/, void* data,
                     size_t length, const ucp_am_recv_param_t* param) {
  return OnMessage(static_cast<Ep*>(arg), kId, data, length, param);
}

// ---------------------------------------------------------------------------------------
// The hooks.

void DestroyEndpoint(Ep* ep) {
  if (ep->progress.joinable()) {
    uint64_t one = 1;
    (void)!write(ep->stop_fd, &one, sizeof(one));
    ep->progress.join();
  }
  if (ep->stop_fd >= 0) close(ep->stop_fd);
  std::lock_guard<std::mutex> lock(ep->mu);
  if (ep->worker != nullptr && ep->control != nullptr) {
    for (Conn* c : ep->connections) EndConnection(ep, c);
    for (auto& r : ep->readers) CloseEp(ep, r->ep, r->failed);
    for (int i = 0; i < 64 && ProgressWorkers(ep) != 0; ++i) {
    }
  }
  for (auto& [id, region] : ep->regions) {
    Lib().ucp_mem_unmap(ep->context, region->memh);
    delete region;
  }
  if (ep->worker != nullptr) Lib().ucp_worker_destroy(ep->worker);
  if (ep->control != nullptr) Lib().ucp_worker_destroy(ep->control);
  for (Conn* c : ep->connections) delete c;
  for (Request* r : ep->requests) delete r;
  delete ep->spare_request;
  if (ep->context != nullptr) Lib().ucp_cleanup(ep->context);
}

rayaccel_status CloseEndpointHook(rayaccel_transport_endpoint* ep, rayaccel_error* error) {
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

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error) {
  const bool allocate = args != nullptr && (args->flags & RAYACCEL_REGISTER_ALLOCATE) != 0;
  if (args == nullptr || args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_register_args, region) ||
      args->endpoint == nullptr || (args->address == nullptr) != allocate || args->length == 0 ||
      (args->flags & ~RAYACCEL_REGISTER_ALLOCATE) != 0) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "register_memory needs an endpoint, a length and an address (none to allocate)");
  }
  Ep* ep = args->endpoint;
  return Guard(error, [&] {
    ucs_memory_type_t type = UCS_MEMORY_TYPE_HOST;
    if (args->kind == RAYACCEL_MEMORY_DEVICE) {
      type = UcsType(ep->options.device_memory);
      if (type == UCS_MEMORY_TYPE_UNKNOWN) {
        return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                    "this plugin's devices have no memory the transport can reach");
      }
      if ((ep->memory_types & (uint64_t{1} << type)) == 0) {
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
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = args->address;
    mp.length = args->length;
    mp.memory_type = type;
    mp.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = Lib().ucp_mem_map(ep->context, &mp, &memh);
    if (s != UCS_OK) return FailUcs(error, "ucp_mem_map", s);
    if (allocate) {
      ucp_mem_attr_t attr{};
      attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
      s = Lib().ucp_mem_query(memh, &attr);
      if (s != UCS_OK) {
        Lib().ucp_mem_unmap(ep->context, memh);
        return FailUcs(error, "ucp_mem_query", s);
      }
      args->address = attr.address;
    }
    void* rkey = nullptr;
    size_t rkey_size = 0;
    s = Lib().ucp_rkey_pack(ep->context, memh, &rkey, &rkey_size);
    if (s != UCS_OK) {
      Lib().ucp_mem_unmap(ep->context, memh);
      return FailUcs(error, "ucp_rkey_pack", s);
    }
    auto* region = new Region();
    region->endpoint = ep;
    region->id = ep->next_region_id++;
    region->base = args->address;
    region->length = args->length;
    region->memh = memh;
    Writer w;
    w.U32(kDescriptorMagic).U16(kWireVersion).U16(static_cast<uint16_t>(rkey_size));
    w.U64(ep->uuid).U64(region->id).U64(reinterpret_cast<uintptr_t>(args->address));
    w.U64(args->length).Bytes(rkey, rkey_size);
    Lib().ucp_rkey_buffer_release(rkey);
    region->descriptor = std::move(w.str());
    ep->regions[region->id] = region;
    args->region = region;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status DeregisterMemory(rayaccel_memory_region* region, rayaccel_error* error) {
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return Guard(error, [&] {
    Ep* ep = region->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    ep->regions.erase(region->id);
    // Every connected reader applies the invalidation and confirms it before the memory goes;
    // a reader that does not confirm within the peer timeout is lost (and fails with PEER_LOST).
    for (auto& r : ep->readers) {
      if (r->failed) continue;
      Writer w;
      w.U64(ep->uuid).U64(r->token).U64(region->id).U64(LowestLiveRegion(ep));
      SendControl(r->ep, kInvalidate, std::move(w.str()));
      r->awaiting = region->id;
    }
    Clock::time_point deadline = PeerDeadline(ep);
    auto pending = [&] {
      for (auto& r : ep->readers) {
        if (!r->failed && r->awaiting != 0) return true;
      }
      return false;
    };
    while (pending() && Clock::now() < deadline) {
      if (!Progress(ep)) std::this_thread::yield();
    }
    for (auto& r : ep->readers) {
      if (r->awaiting == 0) continue;
      if (!r->failed) {
        LogTo(ep, RAYACCEL_LOG_WARN, "a reader did not confirm an invalidation in time; dropped");
      }
      r->failed = true;  // ServeControl closes it
    }
    Lib().ucp_mem_unmap(ep->context, region->memh);
    delete region;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status PackDescriptor(rayaccel_memory_region* region, const rayaccel_blob_sink* sink,
                               rayaccel_error* error) {
  if (region == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "pack_descriptor needs a region and a sink");
  }
  return Guard(error, [&] {
    const std::string& d = region->descriptor;
    if (d.size() > RAYACCEL_TRANSPORT_MAX_BLOB) {
      return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED,
                  "UCX's remote key is larger than a descriptor may be");
    }
    return sink->put(sink->host_context, {reinterpret_cast<const uint8_t*>(d.data()), d.size()});
  });
}

rayaccel_status Connect(rayaccel_transport_endpoint* ep, rayaccel_blob peer,
                        rayaccel_connection** out, rayaccel_error* error) {
  if (ep == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "connect needs an endpoint");
  }
  return Guard(error, [&] {
    Reader in(peer.data, peer.size);
    uint32_t magic = in.U32();
    uint16_t version = in.U16();
    in.U16();
    uint64_t uuid = in.U64();
    uint32_t n = in.U32();
    const uint8_t* data_address = in.Bytes(n);
    uint32_t m = in.U32();
    const uint8_t* control_address = in.Bytes(m);
    if (peer.data == nullptr || !in.at_end() || magic != kAddressMagic || n == 0 || m == 0 ||
        peer.size > RAYACCEL_TRANSPORT_MAX_BLOB) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "not a UCX transport address (truncated, corrupted or from another transport)");
    }
    if (version != kWireVersion) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "UCX transport address version " + std::to_string(version) +
                      "; this plugin reads version 1");
    }
    std::unique_lock<std::mutex> lock(ep->mu);
    auto conn = std::make_unique<Conn>();
    conn->endpoint = ep;
    conn->token = RandomId();
    ucs_status_t s =
        CreateEp(ep, ep->control, control_address, ConnectionFailed, conn.get(), &conn->control);
    if (s == UCS_OK) {
      s = CreateEp(ep, ep->worker, data_address, nullptr, nullptr, &conn->data);
      if (s != UCS_OK) CloseEp(ep, conn->control, /*force=*/false);
    }
    if (s != UCS_OK) {
      return Fail(error, RAYACCEL_STATUS_PEER_LOST, "cannot reach the peer: " + StatusText(s));
    }
    Conn* c = conn.get();
    ep->connections.insert(conn.release());
    // Hello carries our worker address, so the peer can send us invalidations.
    ucp_address_t* own = nullptr;
    size_t own_size = 0;
    s = Lib().ucp_worker_get_address(ep->control, &own, &own_size);
    if (s == UCS_OK) {
      Writer w;
      w.U64(ep->uuid).U64(c->token).U32(static_cast<uint32_t>(own_size)).Bytes(own, own_size);
      Lib().ucp_worker_release_address(ep->control, own);
      SendControl(c->control, kHello, std::move(w.str()));
    }
    Clock::time_point deadline = PeerDeadline(ep);
    while (s == UCS_OK && !c->welcomed && c->failure == UCS_OK && Clock::now() < deadline) {
      if (!Progress(ep)) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        lock.lock();
      }
    }
    if (c->welcomed && c->peer_uuid != uuid) s = UCS_ERR_INVALID_PARAM;
    if (s == UCS_OK && !c->welcomed) s = c->failure != UCS_OK ? c->failure : UCS_ERR_TIMED_OUT;
    if (s != UCS_OK) {
      ep->connections.erase(c);
      DropRkeys(c);
      bool gone = c->failure != UCS_OK || s == UCS_ERR_TIMED_OUT;
      if (c->data != nullptr) CloseEp(ep, c->data, gone);
      CloseEp(ep, c->control, gone);
      delete c;
      if (s == UCS_ERR_TIMED_OUT) {
        return Fail(
            error, RAYACCEL_STATUS_PEER_LOST,
            "the peer did not answer within " + std::to_string(ep->peer_timeout_ms) + " ms");
      }
      if (s == UCS_ERR_INVALID_PARAM) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    "the peer answered as another endpoint than the address names");
      }
      return Fail(error, RAYACCEL_STATUS_PEER_LOST, "connect: " + StatusText(s));
    }
    *out = c;
    return RAYACCEL_STATUS_OK;
  });
}

struct RemoteRegion {
  uint64_t owner = 0, id = 0, base = 0, length = 0;
  const uint8_t* rkey = nullptr;
  size_t rkey_size = 0;
};

// The descriptor's fields, or false when it is not one of ours.
bool ParseDescriptor(rayaccel_blob d, RemoteRegion* r) {
  if (d.data == nullptr || d.size > RAYACCEL_TRANSPORT_MAX_BLOB) return false;
  Reader in(d.data, d.size);
  uint32_t magic = in.U32();
  uint16_t version = in.U16();
  r->rkey_size = in.U16();
  r->owner = in.U64();
  r->id = in.U64();
  r->base = in.U64();
  r->length = in.U64();
  r->rkey = in.Bytes(r->rkey_size);
  return in.at_end() && magic == kDescriptorMagic && version == kWireVersion && r->rkey_size > 0;
}

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error) {
  if (a == nullptr || a->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_transfer_args, request) ||
      a->connection == nullptr || a->local == nullptr || a->length == 0 ||
      (a->op != RAYACCEL_TRANSFER_READ && a->op != RAYACCEL_TRANSFER_WRITE)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "transfer needs a connection, a local region, an operation and a length");
  }
  return Guard(error, [&] {
    Conn* c = a->connection;
    Ep* ep = c->endpoint;
    RemoteRegion remote;
    if (!ParseDescriptor(a->remote_descriptor, &remote)) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "malformed UCX descriptor");
    }
    if (a->local->endpoint != ep) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "the local region belongs to another endpoint");
    }
    if (a->local_offset > a->local->length || a->length > a->local->length - a->local_offset ||
        a->remote_offset > remote.length || a->length > remote.length - a->remote_offset) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "the range lies outside a region");
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    // No progress here: invalidations were applied before their deregistration returned
    // (the owner waits for each reader's confirmation), by whichever thread progressed.
    if (c->failure != UCS_OK) return FailUcs(error, "the peer went away", c->failure);
    if (remote.owner != c->peer_uuid) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "the descriptor belongs to another peer than this connection's");
    }
    if (c->regions.Stale(remote.id)) {
      return Fail(error, RAYACCEL_STATUS_STALE,
                  "the peer has deregistered region " + std::to_string(remote.id));
    }
    auto it = c->rkeys.find(remote.id);
    if (it != c->rkeys.end() && it->second.stale) {
      return Fail(error, RAYACCEL_STATUS_STALE,
                  "the peer has deregistered region " + std::to_string(remote.id));
    }
    if (it == c->rkeys.end()) {
      ucp_rkey_h rkey = nullptr;
      ucs_status_t s = Lib().ucp_ep_rkey_unpack(c->data, remote.rkey, &rkey);
      if (s != UCS_OK) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    "the descriptor's remote key does not unpack: " + StatusText(s));
      }
      it = c->rkeys.emplace(remote.id, Conn::RemoteKey{rkey, 0, false, 0}).first;
    }
    // The request object is recycled: most small transfers complete within the call, and then
    // no request reaches the host at all.
    Request* r =
        ep->spare_request != nullptr ? std::exchange(ep->spare_request, nullptr) : new Request();
    ucp_request_param_t p = RequestParams(r);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = a->local->memh;
    void* local = static_cast<char*>(a->local->base) + a->local_offset;
    uint64_t target = remote.base + a->remote_offset;
    ucs_status_ptr_t started =
        a->op == RAYACCEL_TRANSFER_READ
            ? Lib().ucp_get_nbx(c->data, local, a->length, target, it->second.rkey, &p)
            : Lib().ucp_put_nbx(c->data, local, a->length, target, it->second.rkey, &p);
    if (started == nullptr || UCS_PTR_IS_ERR(started)) {
      ep->spare_request = r;
      a->request = nullptr;
      return started == nullptr ? RAYACCEL_STATUS_OK
                                : FailUcs(error, "transfer", UCS_PTR_STATUS(started));
    }
    it->second.in_flight++;
    r->rkey_region = remote.id;
    a->request = Track(ep, c, r, started);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error) {
  if (a == nullptr || a->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_notify_args, request) ||
      a->connection == nullptr || a->message.data == nullptr || a->message.size == 0 ||
      a->message.size > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "notify needs a connection and a message of 1 to " +
                    std::to_string(RAYACCEL_TRANSPORT_MAX_NOTIFICATION) + " bytes");
  }
  return Guard(error, [&] {
    Conn* c = a->connection;
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != UCS_OK) return FailUcs(error, "the peer went away", c->failure);
    // A flush first, the message once it completes: a fence would not order an active message
    // after RMA that UCX runs on another lane (CMA, cuda_ipc, RDMA).
    auto* r = new Request();
    r->payload.assign(reinterpret_cast<const char*>(a->message.data), a->message.size);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = NotifyFlushed;
    p.user_data = r;
    ucs_status_ptr_t flushed = Lib().ucp_ep_flush_nbx(c->data, &p);
    Track(ep, c, r, flushed);
    if (flushed == nullptr) {
      r->done = false;
      SendNotification(r);
    }
    a->request = r;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Flush(rayaccel_connection* c, rayaccel_request** out, rayaccel_error* error) {
  if (c == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "flush needs a connection");
  }
  return Guard(error, [&] {
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != UCS_OK) return FailUcs(error, "the peer went away", c->failure);
    auto* r = new Request();
    ucp_request_param_t p = RequestParams(r);
    *out = Track(ep, c, r, Lib().ucp_ep_flush_nbx(c->data, &p));
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Poll(rayaccel_request* r, rayaccel_error* error) {
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Ep* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (!r->done) {
      Lib().ucp_worker_progress(ep->worker);  // transfers ride the data worker
      if (!ep->flushed_notifications.empty()) SendFlushedNotifications(ep);
    }
    if (!r->done) return RAYACCEL_STATUS_TIMEOUT;
    ucs_status_t s = r->status;
    ucs_status_t failure = r->connection != nullptr ? r->connection->failure : UCS_OK;
    if (r->detached && !r->ucx_done) {
      r->abandoned = true;  // UCX may still call back; RequestDone frees it then
    } else {
      ep->requests.erase(r);
      delete r;
    }
    if (s == UCS_OK) return RAYACCEL_STATUS_OK;
    if (s == UCS_ERR_CANCELED) {
      return Fail(error, RAYACCEL_STATUS_PEER_LOST,
                  failure != UCS_OK ? "the peer went away: " + StatusText(failure)
                                    : std::string("the connection was closed"));
    }
    return FailUcs(error, FromUcs(s) == RAYACCEL_STATUS_PEER_LOST ? "the peer went away" : "failed",
                   s);
  });
}

rayaccel_status Abandon(rayaccel_request* r, rayaccel_error* error) {
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Ep* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (r->done && r->ucx_done) {
      ep->requests.erase(r);
      delete r;
    } else {
      r->abandoned = true;  // RequestDone or NotifyFlushed frees it
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Wait(rayaccel_transport_endpoint* ep, uint32_t timeout_ms, rayaccel_error* error) {
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    Clock::time_point start = Clock::now();
    Clock::time_point deadline = start + std::chrono::milliseconds(timeout_ms);
    auto pause = std::chrono::microseconds(0);
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      seen = ep->activity;
    }
    while (true) {
      {
        // Activity since the call began counts, also what the progress thread handled.
        std::lock_guard<std::mutex> lock(ep->mu);
        if (Progress(ep) || ep->activity != seen) return RAYACCEL_STATUS_OK;
      }
      Clock::time_point now = Clock::now();
      if (now >= deadline) return RAYACCEL_STATUS_TIMEOUT;
      // Spin briefly (a transfer usually ends within microseconds), then back off to 1 ms.
      if (now - start > std::chrono::microseconds(50)) {
        pause = std::min(std::chrono::microseconds(1000),
                         std::max(std::chrono::microseconds(20), pause * 2));
        std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      }
    }
  });
}

rayaccel_status GetNotifications(rayaccel_transport_endpoint* ep, const rayaccel_blob_sink* sink,
                                 rayaccel_error* error) {
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

rayaccel_status Close(rayaccel_connection* c, rayaccel_error* error) {
  if (c == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no connection");
  return Guard(error, [&] {
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure == UCS_OK) {
      Writer w;
      w.U64(ep->uuid).U64(c->token);
      SendControl(c->control, kBye, std::move(w.str()));
      ucp_request_param_t p{};
      WaitUcx(ep, Lib().ucp_ep_flush_nbx(c->control, &p),
              Clock::now() + std::chrono::milliseconds(200));
    }
    EndConnection(ep, c);
    ep->connections.erase(c);
    delete c;
    return RAYACCEL_STATUS_OK;
  });
}

}  // namespace

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error) {
  if (args == nullptr ||
      args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_endpoint_args, endpoint) ||
      args->address == nullptr || args->address->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "open_endpoint needs an address sink");
  }
  return Guard(error, [&] {
    const Ucp& ucp = Lib();
    if (!ucp.error.empty()) return Fail(error, RAYACCEL_STATUS_UNAVAILABLE, ucp.error);
    auto ep = std::make_unique<Ep>();
    ep->options = options;
    ep->uuid = RandomId();
    ep->peer_timeout_ms =
        args->peer_timeout_ms != 0 ? args->peer_timeout_ms : kDefaultPeerTimeoutMs;
    auto fail = [&](const char* what, ucs_status_t s) {
      DestroyEndpoint(ep.get());
      return FailUcs(error, what, s);
    };

    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp.ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return fail("ucp_config_read", s);
    // The peer timeout sets UCX's keepalive, unless the operator set UCX_KEEPALIVE_INTERVAL.
    if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
      uint32_t interval = std::max<uint32_t>(100, ep->peer_timeout_ms / 3);
      ucp.ucp_config_modify(config, "KEEPALIVE_INTERVAL",
                            (std::to_string(interval) + "ms").c_str());
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = "rayaccel";
    s = ucp.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &ep->context);
    ucp.ucp_config_release(config);
    if (s != UCS_OK) return fail("ucp_init", s);
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp.ucp_context_query(ep->context, &attr) == UCS_OK) ep->memory_types = attr.memory_types;

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call runs under ep->mu
    s = ucp.ucp_worker_create(ep->context, &wp, &ep->worker);
    if (s != UCS_OK) return fail("ucp_worker_create", s);
    s = ucp.ucp_worker_create(ep->context, &wp, &ep->control);
    if (s != UCS_OK) return fail("ucp_worker_create", s);
    ucp_am_recv_callback_t handlers[] = {Handler<kHello>,      Handler<kWelcome>,
                                         Handler<kInvalidate>, Handler<kNotify>,
                                         Handler<kBye>,        Handler<kInvalidated>};
    for (unsigned id = kHello; id <= kInvalidated; ++id) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
      hp.id = id;
      hp.flags = UCP_AM_FLAG_WHOLE_MSG;
      hp.cb = handlers[id - kHello];
      hp.arg = ep.get();
      s = ucp.ucp_worker_set_am_recv_handler(id == kNotify ? ep->worker : ep->control, &hp);
      if (s != UCS_OK) return fail("ucp_worker_set_am_recv_handler", s);
    }
    Writer w;
    w.U32(kAddressMagic).U16(kWireVersion).U16(0).U64(ep->uuid);
    for (ucp_worker_h worker : {ep->worker, ep->control}) {
      ucp_address_t* address = nullptr;
      size_t size = 0;
      s = ucp.ucp_worker_get_address(worker, &address, &size);
      if (s != UCS_OK) return fail("ucp_worker_get_address", s);
      w.U32(static_cast<uint32_t>(size)).Bytes(address, size);
      ucp.ucp_worker_release_address(worker, address);
    }
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
  return t;
}

}  // namespace rayaccel::plugin::ucx
