// The owner's side: hellos answered with a challenge, readers admitted once they prove the
// key, lookups answered from the live regions, every message a reader sends an owner.
#include "common/ofi/owner.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/ofi/channels.h"
#include "common/ofi/reader.h"

namespace rayaccel::plugin::ofi {

// The owner's side.

void ClosePeer(Endpoint* ep, uint64_t token) {
  auto it = ep->peers.find(token);
  if (it == ep->peers.end()) return;
  Retire(ep, std::move(it->second->channel));
  ep->peers.erase(it);
  ++ep->activity;
}

static void Refuse(Endpoint* ep, Peer* p, peers::RefusedReason reason) {
  Writer w;
  w.Bytes(Header(kRefused, p->token).data(), 12).U32(reason);
  SendOn(ep, p->channel.get(), std::move(w.str()));
}

static size_t Handshakes(const Endpoint* ep) {
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
  if (!peers::MayAdmit(ep->peers.size(), Handshakes(ep), kMaxPeers)) {
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

static void OnLookup(Endpoint* ep, Peer* p, Reader& in) {
  const uint64_t region = in.U64();
  if (!in.at_end()) return NoteMalformed(ep, "a lookup of another length");
  Writer w;
  w.Bytes(Header(kLookupReply, p->token).data(), 12).U64(region);
  Region* r = nullptr;
  const rayaccel_status status = ep->regions.Find(region, &r);
  if (status != RAYACCEL_STATUS_OK) {
    w.U32(status).U64(0).U64(0).U64(0);
  } else {
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
      Refuse(ep, p, peers::kWrongKey);
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

}  // namespace rayaccel::plugin::ofi
