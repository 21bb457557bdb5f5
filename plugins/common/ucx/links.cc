// Links: this endpoint's UCX endpoints to a remote endpoint, shared by every connection and
// peer record between the two; a failed link fails its users. Lookups and refusal logging.
#include "common/ucx/links.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "common/ucx/mappings.h"
#include "common/ucx/messages.h"
#include "common/ucx/requests.h"
#include "common/ucx/ring.h"

namespace rayaccel::plugin::ucx {

// --- Connections (the reader's side)

void FailConnection(Conn* c, rayaccel_status status, std::string why) {
  if (c->failure != RAYACCEL_STATUS_OK) return;
  c->failure = status;
  c->failure_text = std::move(why);
  c->endpoint->activity++;
  DropRing(c->endpoint, c);  // its requests are among the transfers failed below
  std::map<uint64_t, Request*> transfers;
  transfers.swap(c->transfers);
  for (auto& [id, r] : transfers) {
    Complete(r, status, c->failure_text);
    MaybeFree(r);
  }
  CheckBarriers(c);
  DropMappings(c->endpoint, c);
}

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

static void LinkFailed(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* link = static_cast<Link*>(arg);
  link->ucx_failed = true;
  FailLink(link, "the peer went away: " + StatusText(status));
}

// A UCX endpoint to `worker_address`: with peer-failure handling when `on_error` is given,
// and then, where UCX_TLS leaves no transport that can handle it, without (logged once); the
// heartbeats still find a lost peer.
static ucs_status_t CreateEp(Ep* ep, ucp_worker_h worker, const void* worker_address,
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

// Waits, making progress, until `request` (from an nbx call) completes or the deadline
// passes; frees it either way. Caller holds mu, outside UCX callbacks.
static ucs_status_t WaitUcx(Ep* ep, ucs_status_ptr_t request, Clock::time_point deadline) {
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
static void CloseEp(Ep* ep, ucp_ep_h uep, bool force, milliseconds limit) {
  if (uep == nullptr) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  WaitUcx(ep, Lib().ucp_ep_close_nbx(uep, &p), Clock::now() + limit);
}

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

Peer* AdmittedPeer(Ep* ep, uint64_t token) {
  Peer* p = PeerByToken(ep, token);
  if (p != nullptr && p->authenticated && !p->failed) return p;
  if (ep->dropped_strays++ == 0) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          "dropped a transfer from a peer that is not admitted (no handshake, or declared lost)");
  }
  return nullptr;
}

void NoteRefused(Ep* ep, const std::string& why) {
  if (ep->refused.Count()) {
    LogTo(ep, RAYACCEL_LOG_WARN, peers::RefusedLine(why, ep->refused.count()));
  }
}

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

}  // namespace rayaccel::plugin::ucx
