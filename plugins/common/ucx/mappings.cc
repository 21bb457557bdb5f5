// Memory mapped between two processes of one host: device memory (DeviceMemoryOps::Export and
// Import) and host memory the helper allocated (SharedMemory, same_host_copy.h). The reader's
// mappings, and the owner asking them back before a region goes.
#include "common/ucx/mappings.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/messages.h"
#include "common/ucx/progress.h"

namespace rayaccel::plugin::ucx {

// Maps the owner's shared host memory its reply names (the memfd's descriptor in the owner and
// its identity): the owner is the process of its welcome, on this host.
static rayaccel_status MapHostMemory(const Conn* c, Mapping* m, std::string* why) {
  Reader in(m->handle.data(), m->handle.size());
  const auto fd = static_cast<int>(in.U32());
  const uint64_t device = in.U64(), inode = in.U64();
  if (!in.at_end() || !c->same_host) {
    *why = "not a host memory handle of an owner on this host";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  m->host = PeerMemory::Map(c->owner_pid, fd, device, inode, m->length, why);
  if (m->host == nullptr) return RAYACCEL_STATUS_INVALID_ARGUMENT;
  m->base = m->host->data();
  return RAYACCEL_STATUS_OK;
}

void CopyHost(rayaccel_transfer_op op, char* mine, char* theirs, uint64_t length) {
  if (op == RAYACCEL_TRANSFER_READ) {
    CopyMemory(mine, theirs, length);
  } else {
    CopyMemory(theirs, mine, length);
  }
}

void ReleaseMapping(Ep* ep, Conn* c, uint64_t region) {
  auto it = c->mappings.find(region);
  if (it == c->mappings.end()) return;
  Mapping& m = it->second;
  if (m.state == Mapping::State::kAsked || m.users > 0) return;
  if (m.state == Mapping::State::kMapped && m.host != nullptr) {
    m.host.reset();
  } else if (m.state == Mapping::State::kMapped) {
    ep->options.device_ops->Unimport(m.base, m.device);
  }
  if (m.confirm) {
    Writer w;
    w.U64(ep->uuid).U64(c->token).U64(region);
    ep->outbox.push_back({false, c->token, kUnmapped, std::move(w.str())});
  }
  c->mappings.erase(it);
}

void DropMappings(Ep* ep, Conn* c) {
  std::vector<uint64_t> regions;
  for (auto& [region, m] : c->mappings) {
    m.revoked = true;
    regions.push_back(region);
  }
  for (uint64_t region : regions) ReleaseMapping(ep, c, region);
}

void UnmapPeers(Ep* ep, uint64_t id) {
  auto it = ep->mapped.find(id);
  if (it == ep->mapped.end()) return;
  for (uint64_t token : it->second) {
    Peer* p = PeerByToken(ep, token);
    if (p == nullptr || p->failed) continue;
    Writer w;
    w.U64(token).U64(id);
    SendMessage(ControlOf(p->link), kUnmap, {}, std::move(w.str()));
  }
  Clock::time_point deadline = PeerDeadline(ep);
  while (ep->mapped.count(id) != 0 && Clock::now() < deadline) {
    if (!Progress(ep)) std::this_thread::yield();
  }
  it = ep->mapped.find(id);
  if (it == ep->mapped.end()) return;
  LogTo(ep, RAYACCEL_LOG_WARN,
        "a reader did not close its mapping of a region being deregistered within the peer "
        "timeout; declared lost");
  for (uint64_t token : it->second) {
    Peer* p = PeerByToken(ep, token);
    if (p != nullptr && p->link != nullptr) DeclareLost(ep, p->link);
  }
  ep->mapped.erase(id);
  ServeControl(ep);
}

Mapping* MappingFor(Ep* ep, Conn* c, const RemoteRegion& remote, rayaccel_status* status,
                    std::string* why) {
  *status = RAYACCEL_STATUS_OK;
  auto [it, fresh] = c->mappings.try_emplace(remote.id);
  Mapping* m = &it->second;
  if (fresh) {
    Writer w;
    w.U64(ep->uuid).U64(c->token).U64(remote.id);
    SendMessage(ControlOf(c->link), kMapAsk, {}, std::move(w.str()));
    Clock::time_point deadline = PeerDeadline(ep);
    while (!m->answered && c->failure == RAYACCEL_STATUS_OK && Clock::now() < deadline) {
      if (!Progress(ep)) std::this_thread::yield();
    }
    if (c->failure == RAYACCEL_STATUS_OK && !m->answered) {
      FailLink(c->link,
               "the peer did not answer within " + std::to_string(ep->peer_timeout_ms) + " ms");
    }
    // Whatever happens next, the mapping is no longer being asked for.
    m->state = Mapping::State::kRefused;
    if (c->failure != RAYACCEL_STATUS_OK || m->revoked || m->answer == RAYACCEL_STATUS_STALE) {
      *status = c->failure != RAYACCEL_STATUS_OK ? c->failure : RAYACCEL_STATUS_STALE;
      *why = c->failure != RAYACCEL_STATUS_OK ? c->failure_text
                                              : "the peer has deregistered the region";
      ReleaseMapping(ep, c, remote.id);
      return nullptr;
    }
    if (m->answer != RAYACCEL_STATUS_OK) return nullptr;  // staged: the owner does not map it
    std::string refused;
    rayaccel_status st = RAYACCEL_STATUS_INVALID_ARGUMENT;
    if (m->length != remote.length) {
      refused = "the owner's region and descriptor differ";
    } else if ((remote.flags & kHostMemory) != 0) {
      st = MapHostMemory(c, m, &refused);
    } else {
      st = ep->options.device_ops->Import(m->handle, m->device, m->length, &m->base, &refused);
    }
    if (st != RAYACCEL_STATUS_OK) {
      LogTo(ep, RAYACCEL_LOG_INFO,
            "cannot map a peer's memory (" + refused + "); the owner serves it instead");
      // Staged from now on; the owner hears that this reader holds no mapping.
      Writer w;
      w.U64(ep->uuid).U64(c->token).U64(remote.id);
      ep->outbox.push_back({false, c->token, kUnmapped, std::move(w.str())});
      m->confirm = false;
      m->handle.clear();
      return nullptr;
    }
    m->state = Mapping::State::kMapped;
  }
  if (m->state != Mapping::State::kMapped) return nullptr;
  // A descriptor that names another length than the region mapped (forged, or a confused
  // caller's) is staged: its range is then the owner's to check, not a copy past the mapping.
  if (m->length != remote.length) return nullptr;
  if (m->revoked) {
    *status = RAYACCEL_STATUS_STALE;
    *why = "the peer has deregistered the region";
    return nullptr;
  }
  m->users++;
  return m;
}

rayaccel_status CopyMapped(Ep* ep, Conn* c, rayaccel_transfer_args* a, uint64_t region, Mapping* m,
                           rayaccel_error* error) {
  char* mine = static_cast<char*>(Of(a->local)->base) + a->local_offset;
  char* theirs = static_cast<char*>(m->base) + a->remote_offset;
  const bool host = m->host != nullptr;  // `m` may be gone once released below
  std::string why;
  rayaccel_status st = RAYACCEL_STATUS_OK;
  if (host) {
    CopyHost(a->op, mine, theirs, a->length);
  } else {
    st = a->op == RAYACCEL_TRANSFER_READ
             ? ep->options.device_ops->Copy(mine, theirs, a->length, m->device, &why)
             : ep->options.device_ops->Copy(theirs, mine, a->length, m->device, &why);
  }
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    m->users--;
    if (m->revoked) ReleaseMapping(ep, c, region);  // the owner waits for it
  }
  if (st != RAYACCEL_STATUS_OK) {
    return Fail(error, st == RAYACCEL_STATUS_UNSUPPORTED ? RAYACCEL_STATUS_INTERNAL : st,
                "device to device: " + why);
  }
  a->request = nullptr;
  if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) {
    a->path = host ? RAYACCEL_PATH_SAME_HOST : RAYACCEL_PATH_DEVICE_IPC;
  }
  return RAYACCEL_STATUS_OK;
}

}  // namespace rayaccel::plugin::ucx
