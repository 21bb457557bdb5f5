// Registration: host memory mapped on each fabric, device memory staged through host memory
// where UCX cannot reach it; descriptors; deregistration.
#include "common/ucx/memory.h"

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/ucx/links.h"
#include "common/ucx/mappings.h"
#include "common/ucx/progress.h"
#include "common/ucx/ring.h"

namespace rayaccel::plugin::ucx {

void UnmapRegion(Ep* ep, Region* region) {
  if (region->staged) {
    if (region->owned) ep->options.device_ops->Free(region->base, region->device);
    region->owned = false;
    return;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (Ep::Fabric& f : ep->fabrics) {
      ucp_mem_h& memh = region->memh[f.index];
      if (memh == nullptr || (f.index == region->allocated_by) != (pass == 1)) continue;
      Lib().ucp_mem_unmap(f.context, memh);
      memh = nullptr;
    }
  }
  region->shared.reset();  // readers on this host that still map it keep only its pages
}

static ucs_memory_type_t UcsType(DeviceMemory m) {
  switch (m) {
    case DeviceMemory::kCuda:
      return UCS_MEMORY_TYPE_CUDA;
    case DeviceMemory::kRocm:
      return UCS_MEMORY_TYPE_ROCM;
    case DeviceMemory::kNone:
      break;
  }
  return UCS_MEMORY_TYPE_UNKNOWN;
}

static const char* DeviceMemoryName(DeviceMemory m) {
  return m == DeviceMemory::kCuda ? "CUDA" : m == DeviceMemory::kRocm ? "ROCm" : "device";
}

// Gives `region` its id and descriptor and puts it among the endpoint's live regions. mu held.
static void Publish(Ep* ep, rayaccel_register_args* args, std::unique_ptr<Region> region) {
  region->base = args->address;
  region->length = args->length;
  region->id = ep->regions.Add(region.get());
  PublishRegion(ep, region.get());
  // Names the region, nothing more: the owner checks every transfer against its own record
  // of the region, so the bytes grant nothing a forger could widen.
  Writer w;
  const uint16_t flags = static_cast<uint16_t>((region->ipc_handle.empty() ? 0 : kMappable) |
                                               (region->staged ? kStagedByOwner : 0) |
                                               (region->host ? kHostMemory : 0));
  w.U32(kDescriptorMagic).U16(kWireVersion).U16(flags);
  w.U64(ep->uuid).U64(region->id).U64(args->length);
  region->descriptor = std::move(w.str());
  args->region = region.release();
}

// Host memory the helper allocates comes from a sealed memfd that readers on this host map
// (same_host_copy.h): a transfer between them is then a memcpy. Where there is no memfd, UCX
// allocates it as before.
static void ShareWithThisHost(Ep* ep, Region* region, rayaccel_register_args* args) {
  std::string why;
  region->shared = SharedMemory::Create(args->length, &why);
  if (region->shared == nullptr) {
    LogTo(ep, RAYACCEL_LOG_DEBUG, "host memory not shared with readers on this host: " + why);
    return;
  }
  args->address = region->shared->data();
  Writer w;
  w.U32(static_cast<uint32_t>(region->shared->fd()))
      .U64(region->shared->device())
      .U64(region->shared->inode());
  region->ipc_handle = std::move(w.str());
}

// Device memory UCX cannot reach, which the plugin's driver copies through host memory: the
// driver checks (or allocates) it; transfers stage it (docs/transport.md, "Device memory").
static rayaccel_status RegisterStaged(Ep* ep, rayaccel_register_args* args, bool allocate,
                                      rayaccel_error* error) {
  DeviceMemoryOps* ops = ep->options.device_ops;
  std::string why;
  rayaccel_status st = allocate
                           ? ops->Allocate(args->device_index, args->length, &args->address, &why)
                           : ops->Check(args->address, args->length, args->device_index, &why);
  if (st != RAYACCEL_STATUS_OK) {
    if (allocate) args->address = nullptr;
    return Fail(error, st, why);
  }
  auto region = std::make_unique<Region>();
  region->endpoint = ep;
  region->staged = true;
  region->owned = allocate;
  region->device = args->device_index;
  // Readers on this host map a whole allocation rather than stage it; the handle goes only
  // to admitted readers that ask (kMapAsk), never in the descriptor.
  if (ops->Export(args->address, args->length, args->device_index, &region->ipc_handle, &why) !=
      RAYACCEL_STATUS_OK) {
    region->ipc_handle.clear();
    LogTo(ep, RAYACCEL_LOG_DEBUG, "device region staged for every reader: " + why);
  }
  std::lock_guard<std::mutex> lock(ep->mu);
  Publish(ep, args, std::move(region));
  return RAYACCEL_STATUS_OK;
}

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error) {
  const bool allocate = args != nullptr && (args->flags & RAYACCEL_REGISTER_ALLOCATE) != 0;
  if (args == nullptr || args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_register_args, region) ||
      args->endpoint == nullptr || (args->address == nullptr) != allocate || args->length == 0 ||
      (args->flags & ~RAYACCEL_REGISTER_ALLOCATE) != 0) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "register_memory needs an endpoint, a length and an address (none to allocate)");
  }
  Ep* ep = Of(args->endpoint);
  return Guard(error, [&] {
    ucs_memory_type_t type = UCS_MEMORY_TYPE_HOST;
    if (args->kind == RAYACCEL_MEMORY_DEVICE) {
      type = UcsType(ep->options.device_memory);
      if (type == UCS_MEMORY_TYPE_UNKNOWN) {
        return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                    "this plugin's devices have no memory the transport can reach");
      }
      if ((ep->memory_types & (uint64_t{1} << type)) == 0) {
        if (ep->options.device_ops != nullptr) return RegisterStaged(ep, args, allocate, error);
        return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                    std::string("UCX on this host was built without ") +
                        DeviceMemoryName(ep->options.device_memory) +
                        " memory support (ucx_info -d lists no such transport); register host "
                        "memory instead");
      }
    } else if (args->kind != RAYACCEL_MEMORY_HOST) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "unknown memory kind");
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    auto region = std::make_unique<Region>();
    region->endpoint = ep;
    region->host = type == UCS_MEMORY_TYPE_HOST;
    if (region->host && allocate && ep->same_host_copy) ShareWithThisHost(ep, region.get(), args);
    // Mapped on each fabric; with ALLOCATE, the first fabric allocates and the other maps that.
    for (Ep::Fabric& f : ep->fabrics) {
      if (f.context == nullptr) continue;
      ucp_mem_map_params_t mp{};
      mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
      mp.address = args->address;
      mp.length = args->length;
      mp.memory_type = type;
      const bool allocates = allocate && args->address == nullptr;
      mp.flags = allocates ? UCP_MEM_MAP_ALLOCATE : 0;
      ucs_status_t s = Lib().ucp_mem_map(f.context, &mp, &region->memh[f.index]);
      if (s == UCS_OK && allocates) {
        ucp_mem_attr_t attr{};
        attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
        s = Lib().ucp_mem_query(region->memh[f.index], &attr);
        if (s == UCS_OK) args->address = attr.address;
        region->allocated_by = f.index;
      }
      if (s != UCS_OK) {
        UnmapRegion(ep, region.get());
        if (allocate) args->address = nullptr;
        return FailUcs(error, "ucp_mem_map", s);
      }
    }
    Publish(ep, args, std::move(region));
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status DeregisterMemory(rayaccel_memory_region* handle, rayaccel_error* error) {
  Region* region = Of(handle);
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return Guard(error, [&] {
    Ep* ep = region->endpoint;
    std::unique_lock<std::mutex> lock(ep->mu);
    // From here every new transfer naming the region is refused as stale; the ones the owner
    // is serving finish first (a reader that does not let them finish within the peer timeout
    // is dropped, which cancels them).
    ep->regions.Remove(region->id);
    const uint64_t id = region->id;
    if (ep->published != nullptr) ep->published->Withdraw(id);  // before any wait: READs stop
    // A request ring's copy (ring.cc) runs outside the lock and ends on its own: a copy by the
    // kernel cannot be called back, so the memory stays until it has, however long it takes
    // (it waits only on the reader's memory, which a reader backed by a file system that does
    // not answer could hold up).
    bool warned = false;
    for (Clock::time_point deadline = PeerDeadline(ep); ep->ring_holds.count(id) != 0;) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      if (!warned && Clock::now() > deadline) {
        warned = true;
        LogTo(ep, RAYACCEL_LOG_WARN,
              "a copy into or out of a reader's memory outlasts the peer timeout; the region "
              "being deregistered stays until it ends");
      }
    }
    Clock::time_point deadline = PeerDeadline(ep);
    while (ep->serving.count(id) != 0 && Clock::now() < deadline) {
      if (!Progress(ep)) std::this_thread::yield();
    }
    if (ep->serving.count(id) != 0) {
      LogTo(ep, RAYACCEL_LOG_WARN,
            "a reader held a transfer of a region being deregistered past the peer timeout; "
            "dropped");
      for (auto& [token, p] : ep->peers) {
        if (p->serving > 0 && p->link != nullptr) DeclareLost(ep, p->link);
      }
      ServeControl(ep);
      for (int i = 0; i < 64 && ep->serving.count(id) != 0 && ProgressWorkers(ep) != 0; ++i) {
      }
    }
    UnmapPeers(ep, id);
    UnmapRegion(ep, region);
    delete region;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status PackDescriptor(rayaccel_memory_region* handle, const rayaccel_blob_sink* sink,
                               rayaccel_error* error) {
  Region* region = Of(handle);
  return PackDescriptorTo(region != nullptr ? &region->descriptor : nullptr, sink, error);
}

bool ParseDescriptor(rayaccel_blob d, RemoteRegion* r) {
  if (d.data == nullptr || d.size != kDescriptorBytes) return false;
  Reader in(d.data, d.size);
  uint32_t magic = in.U32();
  uint16_t version = in.U16();
  r->flags = in.U16();
  r->owner = in.U64();
  r->id = in.U64();
  r->length = in.U64();
  return in.at_end() && magic == kDescriptorMagic && version == kWireVersion &&
         (r->flags & ~(kMappable | kStagedByOwner | kHostMemory)) == 0;
}

rayaccel_status StageOutgoing(Ep* ep, const rayaccel_transfer_args& a, uint64_t skip,
                              uint64_t length, Staging* outgoing, rayaccel_error* error) {
  if (!Of(a.local)->staged || a.op != RAYACCEL_TRANSFER_WRITE) return RAYACCEL_STATUS_OK;
  std::string why;
  rayaccel_status st =
      ep->options.device_ops->ToHost(outgoing->Take(length, ep->pinned, Of(a.local)->device),
                                     static_cast<char*>(Of(a.local)->base) + a.local_offset + skip,
                                     length, Of(a.local)->device, &why);
  return st == RAYACCEL_STATUS_OK ? st : Fail(error, st, "from device memory: " + why);
}

}  // namespace rayaccel::plugin::ucx
