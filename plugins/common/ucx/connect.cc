// The reader's connections: connect (hello, challenge, proof, welcome) and close.
#include "common/ucx/connect.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "common/ucx/links.h"
#include "common/ucx/messages.h"
#include "common/ucx/progress.h"

namespace rayaccel::plugin::ucx {

// ---------------------------------------------------------------------------------------
// The hooks.

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

}  // namespace rayaccel::plugin::ucx
