// An endpoint: opening (the provider, the domain, the listener), wait and notifications,
// teardown, the helper's table of hooks.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ofi/channels.h"
#include "common/ofi/connect.h"
#include "common/ofi/fi.h"
#include "common/ofi/handles.h"
#include "common/ofi/memory.h"
#include "common/ofi/progress.h"
#include "common/ofi/reader.h"
#include "common/ofi/requests.h"
#include "common/ofi/transfer.h"

namespace rayaccel::plugin::ofi {

// The hooks.

static void DestroyEndpoint(Endpoint* ep) {
  if (ep->stop_fd >= 0) {
    ep->stop.store(true, std::memory_order_release);
    const uint64_t one = 1;
    ssize_t ignored = write(ep->stop_fd, &one, sizeof(one));
    (void)ignored;
  }
  ep->stop.store(true, std::memory_order_release);
  if (ep->progress.joinable()) ep->progress.join();
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    for (auto& [token, c] : ep->connections) {
      if (c->channel != nullptr) SendOn(ep, c->channel.get(), Header(kBye, c->token));
    }
    for (auto& [token, p] : ep->peers) {
      if (p->admitted) SendOn(ep, p->channel.get(), Header(kBye, p->token));
    }
    ProgressAll(ep);
    std::vector<Connection*> connections;
    for (auto& [token, c] : ep->connections) connections.push_back(c);
    for (Connection* c : connections) {
      FailConnection(c, RAYACCEL_STATUS_PEER_LOST, "the endpoint closed");
      delete c;
    }
    ep->connections.clear();
    for (auto& [token, p] : ep->peers) Retire(ep, std::move(p->channel));
    ep->peers.clear();
    if (ep->listener != nullptr) CloseChannel(ep->listener.get());
    // What the retired channels still have out comes back (or their peer is gone for good:
    // then the channel is left open, never closed under rxm with work queued).
    const auto deadline = Clock::now() + PeerTimeout(ep);
    while (!ep->retired.empty() && Clock::now() < deadline) {
      ProgressAll(ep);
      if (ep->retired.empty()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (auto& ch : ep->retired) {
      LogTo(ep, RAYACCEL_LOG_WARN, "a channel to a lost peer is left open at close");
      for (Op* op : ch->ops) op->local = nullptr;
      ch.release();  // deliberately leaked: closing it could crash inside the provider
    }
    ep->retired.clear();
    for (auto& [id, r] : ep->regions.TakeAll()) {
      CloseFid(r->mr != nullptr ? &r->mr->fid : nullptr);
      if (r->owned) std::free(r->base);
      delete r;
    }
    for (Request* r : ep->requests) delete r;
    ep->requests.clear();
  }
  ep->shared.reset();
  if (ep->stop_fd >= 0) close(ep->stop_fd);
  delete ep;
}

static rayaccel_status CloseEndpointHook(rayaccel_transport_endpoint* handle,
                                         rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    DestroyEndpoint(ep);
    return RAYACCEL_STATUS_OK;
  });
}

static rayaccel_status Wait(rayaccel_transport_endpoint* handle, uint32_t timeout_ms,
                            rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    const auto deadline = Clock::now() + milliseconds(timeout_ms);
    std::unique_lock<std::mutex> lock(ep->mu);
    const uint64_t seen = ep->activity;
    auto pause = std::chrono::microseconds(0);
    while (true) {
      ProgressAll(ep);
      if (ep->activity != seen) return RAYACCEL_STATUS_OK;
      const auto now = Clock::now();
      if (now >= deadline) return RAYACCEL_STATUS_TIMEOUT;
      // Asleep on the provider's wait objects, as the progress thread, once a few passes
      // found nothing: woken by the bytes themselves rather than by a timer.
      pause = std::min(pause + std::chrono::microseconds(10), std::chrono::microseconds(200));
      Sleep(ep, lock,
            std::min(std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1),
                     milliseconds(10)),
            pause);
      if (ep->activity != seen) return RAYACCEL_STATUS_OK;
    }
  });
}

static rayaccel_status GetNotifications(rayaccel_transport_endpoint* handle,
                                        const rayaccel_blob_sink* sink, rayaccel_error* error) {
  Endpoint* ep = Of(handle);
  if (ep == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "get_notifications needs a sink");
  }
  return Guard(error, [&] {
    std::deque<std::string> got;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      got = ep->notifications.TakeAll();
    }
    for (const std::string& n : got) {
      rayaccel_status s =
          sink->put(sink->host_context, {reinterpret_cast<const uint8_t*>(n.data()), n.size()});
      if (s != RAYACCEL_STATUS_OK) return s;
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error) {
  if (rayaccel_status s = CheckOpenArgs(args, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    rayaccel_status status = RAYACCEL_STATUS_OK;
    std::string why;
    const Fi* fi = LoadFi(options.library, &status, &why);
    if (fi == nullptr) return Fail(error, status, why);
    auto ep = std::make_unique<Endpoint>();
    ep->options = options;
    ep->key.assign(reinterpret_cast<const char*>(args->key.data), args->key.size);
    ep->uuid = RandomId();
    ep->peer_timeout_ms = args->peer_timeout_ms != 0 ? args->peer_timeout_ms : 10000;
    auto fail = [&](rayaccel_status s, const std::string& text) {
      Endpoint* raw = ep.release();
      DestroyEndpoint(raw);
      return Fail(error, s, text);
    };
    rayaccel_status opened = RAYACCEL_STATUS_OK;
    ep->shared = OpenDomain(*fi, &opened, &why);
    if (ep->shared == nullptr) return fail(opened, why);
    ep->info = ep->shared->info;
    ep->fabric = ep->shared->fabric;
    ep->domain = ep->shared->domain;
    ep->provider =
        ep->info->fabric_attr->prov_name != nullptr ? ep->info->fabric_attr->prov_name : "";
    const uint64_t mr_mode = static_cast<uint64_t>(ep->info->domain_attr->mr_mode);
    ep->virtual_addresses = (mr_mode & FI_MR_VIRT_ADDR) != 0;
    ep->provider_keys = (mr_mode & FI_MR_PROV_KEY) != 0;
    const size_t key_size = ep->info->domain_attr->mr_key_size;
    ep->key_mask = key_size >= 8 ? ~0ull : ((1ull << (8 * key_size)) - 1);
    ep->max_rma = std::max<uint64_t>(ep->info->ep_attr->max_msg_size, 4096);
    ep->listener = OpenChannel(ep.get(), kListenReceives, &why);
    if (ep->listener == nullptr) return fail(RAYACCEL_STATUS_UNAVAILABLE, why);
    ep->listener->listener = true;
    if (key_size < 8 && !ep->provider_keys) {
      LogTo(ep.get(), RAYACCEL_LOG_WARN,
            ep->provider + "'s registration keys are " + std::to_string(key_size) +
                " bytes: a peer without the transport key could guess one");
    }
    Writer w;
    w.U32(kAddressMagic).U16(kWireVersion).U16(0).U64(ep->uuid);
    w.U16(static_cast<uint16_t>(ep->provider.size()))
        .Bytes(ep->provider.data(), ep->provider.size());
    w.U16(static_cast<uint16_t>(ep->listener->address.size()))
        .Bytes(ep->listener->address.data(), ep->listener->address.size());
    const Mac mac = MacOf(ep->key, kAddressLabel, w.str());
    w.Bytes(mac.data(), mac.size());
    rayaccel_status s =
        args->address->put(args->address->host_context,
                           {reinterpret_cast<const uint8_t*>(w.str().data()), w.str().size()});
    if (s != RAYACCEL_STATUS_OK) return fail(s, "the host refused the endpoint's address");
    ep->next_heartbeat = Clock::now();
    Endpoint* raw = ep.release();
    raw->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    raw->progress = std::thread(ProgressThread, raw);
    args->endpoint = raw;
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

}  // namespace rayaccel::plugin::ofi
