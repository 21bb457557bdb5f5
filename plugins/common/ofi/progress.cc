// Progress: each channel's completions, messages routed to the reader's or the owner's side,
// heartbeats and silent peers, the progress thread.
#include "common/ofi/progress.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/ofi/channels.h"
#include "common/ofi/owner.h"
#include "common/ofi/reader.h"
#include "common/ofi/requests.h"

namespace rayaccel::plugin::ofi {

// Progress.

static void OnMessage(Endpoint* ep, Channel* ch, const Op* op, size_t received) {
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

static void RmaDone(Endpoint* ep, Op* op, rayaccel_status status, const std::string& why) {
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
static bool OpFailed(Endpoint* ep, Channel* ch, Op* op, int err) {
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
static bool PostDeferred(Endpoint* ep, Channel* ch) {
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
static void Timers(Endpoint* ep) {
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

}  // namespace rayaccel::plugin::ofi
