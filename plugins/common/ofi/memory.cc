// Registration: host memory registered with the domain under a key of its own; descriptors;
// deregistration, which every reader told the key confirms.
#include "common/ofi/memory.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ofi/channels.h"
#include "common/ofi/owner.h"
#include "common/ofi/progress.h"
#include "common/ofi/reader.h"

namespace rayaccel::plugin::ofi {

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error) {
  const bool allocate = args != nullptr && (args->flags & RAYACCEL_REGISTER_ALLOCATE) != 0;
  if (args == nullptr || args->endpoint == nullptr || args->length == 0 ||
      (!allocate && args->address == nullptr)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "register_memory needs an endpoint, a length and an address (none to allocate)");
  }
  if (args->kind != RAYACCEL_MEMORY_HOST) {
    return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                "the libfabric helper moves host memory only (device memory: the UCX fabric)");
  }
  if ((args->flags & ~RAYACCEL_REGISTER_ALLOCATE) != 0) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "unknown register_memory flags");
  }
  Endpoint* ep = Of(args->endpoint);
  return Guard(error, [&] {
    auto region = std::make_unique<Region>();
    region->endpoint = ep;
    region->length = args->length;
    if (allocate) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, args->length) != 0) {
        return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED,
                    "cannot allocate " + std::to_string(args->length) + " bytes");
      }
      region->base = p;
      region->owned = true;
    } else {
      region->base = args->address;
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    int rc = -FI_ENOKEY;
    for (int attempt = 0; attempt < 8 && rc == -FI_ENOKEY; ++attempt) {
      const uint64_t requested = ep->provider_keys ? 0 : (RandomId() & ep->key_mask);
      rc = fi_mr_reg(ep->domain, region->base, region->length,
                     FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, requested, 0,
                     &region->mr, nullptr);
    }
    if (rc != 0) {
      if (region->owned) std::free(region->base);
      return Fail(error, FromFi(rc), "fi_mr_reg on " + ep->provider + ": " + ErrorText(rc));
    }
    region->key = fi_mr_key(region->mr);
    region->desc = fi_mr_desc(region->mr);
    region->id = ep->regions.Add(region.get());
    Writer d;
    d.U32(kDescriptorMagic).U16(kWireVersion).U16(0).U64(ep->uuid).U64(region->id);
    d.U64(region->length);
    region->descriptor = std::move(d.str());
    if (allocate) args->address = region->base;
    args->region = region.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status DeregisterMemory(rayaccel_memory_region* handle, rayaccel_error* error) {
  Region* region = Of(handle);
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return Guard(error, [&] {
    Endpoint* ep = region->endpoint;
    const uint64_t id = region->id;
    const auto deadline = Clock::now() + PeerTimeout(ep);
    std::unique_lock<std::mutex> lock(ep->mu);
    // Later lookups say STALE; every reader that was told the key confirms it has stopped.
    ep->regions.Remove(id);
    for (auto& [token, p] : ep->peers) {
      if (p->looked_up.count(id) == 0) continue;
      p->to_confirm.insert(id);
      Writer w;
      w.Bytes(Header(kRevoke, token).data(), 12).U64(id);
      SendOn(ep, p->channel.get(), std::move(w.str()));
    }
    auto waiting = [&] {
      for (auto& [token, p] : ep->peers) {
        if (p->to_confirm.count(id) != 0) return true;
      }
      return region->local_uses > 0;
    };
    while (waiting() && Clock::now() < deadline) {
      ProgressAll(ep);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
    // A reader that did not confirm within the peer timeout is cut off: its channel closes,
    // and with it whatever it had in flight here.
    std::vector<uint64_t> silent;
    for (auto& [token, p] : ep->peers) {
      if (p->to_confirm.count(id) != 0) silent.push_back(token);
    }
    for (uint64_t token : silent) {
      LogTo(ep, RAYACCEL_LOG_WARN,
            "a reader did not confirm a deregistration within the peer timeout: closed");
      ClosePeer(ep, token);
    }
    // Our own transfers still using it as their local memory end with their connections.
    if (region->local_uses > 0) {
      std::vector<Connection*> using_it;
      for (auto& [token, c] : ep->connections) {
        if (c->channel == nullptr) continue;
        for (Op* op : c->channel->ops) {
          if (op->local == region) {
            using_it.push_back(c);
            break;
          }
        }
      }
      for (Connection* c : using_it) {
        FailConnection(c, RAYACCEL_STATUS_PEER_LOST,
                       "a local region was deregistered while a transfer used it");
      }
    }
    CloseFid(&region->mr->fid);
    if (region->owned) std::free(region->base);
    delete region;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status PackDescriptor(rayaccel_memory_region* handle, const rayaccel_blob_sink* sink,
                               rayaccel_error* error) {
  Region* region = Of(handle);
  return PackDescriptorTo(region != nullptr ? &region->descriptor : nullptr, sink, error);
}

}  // namespace rayaccel::plugin::ofi
