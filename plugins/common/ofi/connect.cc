// The reader's connections: an endpoint's address checked under the key, connect (hello,
// challenge, proof, welcome) and close.
#include "common/ofi/connect.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "common/ofi/channels.h"
#include "common/ofi/progress.h"
#include "common/ofi/reader.h"

namespace rayaccel::plugin::ofi {

namespace {
struct Address {
  uint64_t uuid = 0;
  std::string provider, fabric_address;
};
}  // namespace

// An endpoint's address, once its signature under the key holds.
static rayaccel_status ParseAddress(const Endpoint* ep, rayaccel_blob blob, Address* out,
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

rayaccel_status Close(rayaccel_connection* handle, rayaccel_error* error) {
  Connection* c = Of(handle);
  if (c == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no connection");
  return Guard(error, [&] {
    Endpoint* ep = c->endpoint;
    std::unique_lock<std::mutex> lock(ep->mu);
    // What is in flight finishes first, within the peer timeout, as the UCX helper's close: a
    // READ cut off here would leave the owner's provider sending its reply from the owner's
    // memory after both sides let go of it (found under ASan: libfabric's tcp provider read a
    // region freed after its reader closed mid-READ).
    const auto finish_by = Clock::now() + PeerTimeout(ep);
    while (c->failure == RAYACCEL_STATUS_OK && !c->transfers.empty() && Clock::now() < finish_by) {
      ProgressAll(ep);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
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

}  // namespace rayaccel::plugin::ofi
