// The reader's side of a connection: a failed connection fails everything on it; transfers
// wait for the owner's description of a region, then go as fi_read or fi_write; every message
// an owner sends a reader.
#include "common/ofi/reader.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/ofi/channels.h"
#include "common/ofi/requests.h"

namespace rayaccel::plugin::ofi {

// Connections (the reader's side).

void SendRevoked(Connection* c, uint64_t region) {
  Writer w;
  w.Bytes(Header(kRevoked, c->token).data(), 12).U64(region);
  SendOn(c->endpoint, c->channel.get(), std::move(w.str()));
}

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

static void PostRma(Connection* c, const Pending& p, Remote* remote, uint64_t region_id);

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
static void PostRma(Connection* c, const Pending& p, Remote* remote, uint64_t region_id) {
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

static void OnLookupReply(Connection* c, Reader& in) {
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

static void OnRevoke(Connection* c, Reader& in) {
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

void QueueNotification(Endpoint* ep, Reader& in) {
  const size_t n = in.left();
  if (n == 0 || n > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) {
    return NoteMalformed(ep, "a notification of " + std::to_string(n) + " bytes");
  }
  const uint8_t* bytes = in.Bytes(n);
  bool first_drop = false;
  if (!ep->notifications.Push(bytes, n, &first_drop)) {
    if (first_drop) LogTo(ep, RAYACCEL_LOG_WARN, peers::kNotificationsDropped);
    return;
  }
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
      return FailConnection(c, peers::RefusalStatus(reason), peers::RefusalText(reason));
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

}  // namespace rayaccel::plugin::ofi
