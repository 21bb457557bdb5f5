// Every message an endpoint receives, in one handler: its fields read and checked for shape, a
// malformed one dropped and counted, then applied (or queued for after progress); and the sends
// nobody waits for.
#include "common/ucx/messages.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

#include "common/ucx/links.h"
#include "common/ucx/mappings.h"
#include "common/ucx/owner.h"
#include "common/ucx/requests.h"
#include "common/ucx/ring.h"

namespace rayaccel::plugin::ucx {

// --- Sending

namespace {

// Bytes UCX may still read: freed when the send completes.
struct Send {
  std::string header, bytes;
};

}  // namespace

static void SendDone(void* request, ucs_status_t /*status*/, void* user_data) {
  delete static_cast<Send*>(user_data);
  Lib().ucp_request_free(request);
}

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

void SendMessage(ucp_ep_h uep, unsigned id, std::string header, std::string bytes, bool eager) {
  if (uep == nullptr) return;
  auto* send = new Send{std::move(header), std::move(bytes)};
  ucp_request_param_t p = SendParams(SendDone, send, eager);
  ucs_status_ptr_t r =
      Lib().ucp_am_send_nbx(uep, id, send->header.empty() ? nullptr : send->header.data(),
                            send->header.size(), send->bytes.data(), send->bytes.size(), &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete send;
}

// --- Messages

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
      if (!peers::MayAdmit(ep->peers.size() + ep->hellos.size(), handshakes, kMaxPeers)) {
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
        p->refuse = peers::kWrongKey;
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
      // An owner that copies for us may offer a request ring, and then its published regions.
      SharedFileOffer ring, published;
      const bool offered = same_host == 1 && !in.at_end();
      if (offered) ring = {in.U32(), in.U64(), in.U64(), in.U64()};
      const bool publishes = offered && !in.at_end();
      if (publishes) published = {in.U32(), in.U64(), in.U64(), in.U64()};
      if (!in.at_end() || same_host > 1) break;
      Conn* c = ConnectionByToken(ep, token);
      if (c == nullptr || c->state != Conn::State::kProven || owner != c->peer_uuid) {
        return UCS_OK;
      }
      // Another process on this host: the driver maps its memory here (not in its own process).
      c->may_map = n > 0 && pid != getpid() && !BootId().empty() &&
                   std::string_view(reinterpret_cast<const char*>(boot), n) == BootId();
      c->same_host = c->may_map && same_host == 1 && ep->same_host_copy;
      c->owner_pid = c->may_map ? pid : 0;
      if (offered) MapRing(ep, c, ring, publishes ? &published : nullptr);
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
      FailConnection(c, peers::RefusalStatus(reason), peers::RefusalText(reason));
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
      Region* r = nullptr;
      rayaccel_status status = ep->regions.Find(region, &r);
      // Host memory only to a reader proven to be on this host (same_host_copy.h), which could
      // reach this process's memory anyway.
      if (status == RAYACCEL_STATUS_OK &&
          (r->ipc_handle.empty() || (r->shared != nullptr && p->process == nullptr))) {
        status = RAYACCEL_STATUS_UNSUPPORTED;
      }
      Writer w;
      w.U64(token).U64(region).U32(static_cast<uint32_t>(status));
      if (status == RAYACCEL_STATUS_OK) {
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
      bool first_drop = false;
      if (!ep->notifications.Push(data, length, &first_drop) && first_drop) {
        LogTo(ep, RAYACCEL_LOG_WARN, peers::kNotificationsDropped);
      }
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
  if (ep->malformed.Count()) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          peers::MalformedLine("id " + std::to_string(id) + ", " + std::to_string(header_length) +
                                   "+" + std::to_string(length) + " bytes",
                               ep->malformed.count()));
  }
  return UCS_OK;
}

}  // namespace rayaccel::plugin::ucx
