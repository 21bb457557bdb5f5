// Progress: what UCX callbacks queued goes out after progress returns; the owner answers
// handshakes; heartbeats go, and silent peers are declared lost; the progress thread.
#include "common/ucx/progress.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/messages.h"
#include "common/ucx/owner.h"
#include "common/ucx/requests.h"
#include "common/ucx/ring.h"

namespace rayaccel::plugin::ucx {

// --- Progress

static void SendOutbox(Ep* ep) {
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

static void SendNotification(Request* r) {
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

void ClosePeer(Ep* ep, Peer* p) {
  if (p->refuse != 0) {
    Writer w;
    w.U64(p->token).U64(ep->uuid).U32(p->refuse);
    SendMessage(ControlOf(p->link), kRefused, {}, std::move(w.str()));
  }
  if (p->link != nullptr) p->link->users--;
  p->link = nullptr;
  StopRing(ep, p);
  // A reader gone (or declared lost) holds no mapping the owner waits for: if it lives on,
  // cut off, the driver keeps its mapping (docs/transport.md, "Threat model").
  for (auto it = ep->mapped.begin(); it != ep->mapped.end();) {
    it->second.erase(p->token);
    it = it->second.empty() ? ep->mapped.erase(it) : std::next(it);
  }
}

void DeclareLost(Ep* ep, Link* link) {
  LogTo(ep, RAYACCEL_LOG_INFO,
        "a peer was silent for " + std::to_string(ep->peer_timeout_ms) +
            " ms: declared lost (stopped, frozen or cut off)");
  link->say_goodbye = true;
  FailLink(link, "the peer was silent for " + std::to_string(ep->peer_timeout_ms) +
                     " ms (stopped, frozen or cut off)");
}

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
      OfferRing(ep, p.get(), &w);
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

bool Progress(Ep* ep) {
  bool any = false;
  DrainRings(ep);
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
    bool armed = wakeup, busy = false, ring_waiting = false, rings_stopped = false;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      const uint64_t before = ep->activity;
      if (Progress(ep)) last_moved = Clock::now();
      if (ep->activity != before) ep->progressed.notify_all();
      ring_waiting = ep->ring_waiting != 0;
      rings_stopped = !ep->stopped_rings.empty();
      // BUSY: work is pending that no event will announce, such as a large reply waiting for
      // room in a shared-memory queue. This thread is then what serves the peer, so it comes
      // back soon.
      for (size_t i = 0; wakeup && i < workers.size() && armed; ++i) {
        const ucs_status_t s = Lib().ucp_worker_arm(workers[i]);
        armed = s == UCS_OK;
        busy = s == UCS_ERR_BUSY;
      }
    }
    if (rings_stopped) JoinStoppedRings(ep);
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
    // Back at least once per heartbeat; without armed event fds, or while a request waits on an
    // owner's ring (no event fd announces its answer), in 1 ms.
    int n = poll(fds.data(), armed ? fds.size() : 1, armed && !ring_waiting ? heartbeat_ms : 1);
    if (n > 0 && (fds[0].revents & POLLIN) != 0) return;
  }
}

}  // namespace rayaccel::plugin::ucx
