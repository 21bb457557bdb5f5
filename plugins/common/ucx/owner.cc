// The owner's side: every range a reader names is checked against the live regions
// (CheckRange) before a byte is served or stored; reads' replies, writes' receives, batches,
// and the copies for a reader on this host.
#include "common/ucx/owner.h"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/messages.h"

namespace rayaccel::plugin::ucx {

// Puts a write's bytes into `region` at `at`: a copy, or the driver's for a staged region.
// INTERNAL (logged) when the driver fails.
static rayaccel_status StoreWrite(Ep* ep, const Region* region, void* at, const void* bytes,
                                  uint64_t n) {
  if (!region->staged) {
    std::memcpy(at, bytes, n);
    return RAYACCEL_STATUS_OK;
  }
  std::string why;
  if (ep->options.device_ops->FromHost(at, bytes, n, region->device, &why) == RAYACCEL_STATUS_OK) {
    return RAYACCEL_STATUS_OK;
  }
  LogTo(ep, RAYACCEL_LOG_WARN, "a write to device memory failed: " + why);
  return RAYACCEL_STATUS_INTERNAL;
}

// --- The owner's side

rayaccel_status CheckRange(Ep* ep, uint64_t region, uint64_t offset, uint64_t length,
                           Region** out) {
  return ep->regions.Check(region, offset, length, out);
}

std::string ReplyHeader(uint64_t token, uint64_t id, rayaccel_status status) {
  Writer w;
  w.U64(token).U64(id).U32(static_cast<uint32_t>(status));
  return std::move(w.str());
}

namespace {

// An operation the owner runs for a reader: a read's reply, a write's receive. Holds the
// region (Deregister waits for it) and the reader.
struct Serve {
  Ep* ep;
  uint64_t token, id, region;
  bool write;
  std::string header;
  // A staged device region: the bytes' host copy, and (a write) where they go. The region
  // outlives the serve (deregistration waits for it).
  Staging staging;
  const Region* staged_region = nullptr;
  void* staged_at = nullptr;
};

}  // namespace

static void EndServe(Serve* s, ucs_status_t status) {
  Ep* ep = s->ep;
  ep->activity++;
  if (auto it = ep->serving.find(s->region); it != ep->serving.end() && --it->second == 0) {
    ep->serving.erase(it);
  }
  Peer* p = PeerByToken(ep, s->token);
  if (p != nullptr && p->serving > 0) p->serving--;
  if (s->write && p != nullptr && !p->failed) {
    rayaccel_status st = status == UCS_OK ? RAYACCEL_STATUS_OK : RAYACCEL_STATUS_INTERNAL;
    ep->outbox.push_back({true, s->token, kPutAck, ReplyHeader(s->token, s->id, st)});
  }
  delete s;
}

static void ServeSent(void* request, ucs_status_t status, void* user_data) {
  Lib().ucp_request_free(request);
  EndServe(static_cast<Serve*>(user_data), status);
}

static void ServeReceived(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  Lib().ucp_request_free(request);
  auto* s = static_cast<Serve*>(user_data);
  if (status == UCS_OK && s->staged_region != nullptr &&
      StoreWrite(s->ep, s->staged_region, s->staged_at, s->staging.data(), s->staging.size()) !=
          RAYACCEL_STATUS_OK) {
    status = UCS_ERR_IO_ERROR;
  }
  EndServe(s, status);
}

static Serve* StartServe(Ep* ep, Peer* p, uint64_t token, uint64_t id, uint64_t region,
                         bool write) {
  ep->serving[region]++;
  p->serving++;
  return new Serve{ep, token, id, region, write, {}, {}, nullptr, nullptr};
}

void ServeGets(Ep* ep) {
  std::vector<Ep::GetServe> gets;
  gets.swap(ep->gets);
  for (const Ep::GetServe& g : gets) {
    Peer* p = PeerByToken(ep, g.token);
    ucp_ep_h data = p != nullptr && !p->failed ? DataOf(p->link) : nullptr;
    if (data == nullptr) continue;
    Region* region = nullptr;
    rayaccel_status status = g.status;
    if (status == RAYACCEL_STATUS_OK)
      status = CheckRange(ep, g.region, g.offset, g.length, &region);
    if (status != RAYACCEL_STATUS_OK) {
      SendMessage(data, kGetReply, ReplyHeader(g.token, g.id, status), {});
      continue;
    }
    const char* from = static_cast<char*>(region->base) + g.offset;
    if (g.to != 0 && p->process != nullptr && region->host) {
      // A reader on this host: the bytes go straight into its memory, where it asked.
      iovec local{const_cast<char*>(from), g.length};
      iovec remote{InPeer(g.to), g.length};
      std::string why;
      if (!p->process->Write(&local, &remote, 1, &why)) {
        LogTo(ep, RAYACCEL_LOG_WARN, "a copy to a reader on this host failed: " + why);
        status = RAYACCEL_STATUS_INTERNAL;
      }
      SendMessage(data, kGetReply, ReplyHeader(g.token, g.id, status), {});
      continue;
    }
    Staging staging;
    if (region->staged) {
      // Only the range asked for leaves the device, into host memory of this read's own.
      staging.Take(g.length, ep->pinned, region->device);
      std::string why;
      if (ep->options.device_ops->ToHost(staging.data(), from, g.length, region->device, &why) !=
          RAYACCEL_STATUS_OK) {
        LogTo(ep, RAYACCEL_LOG_WARN, "a read of device memory failed: " + why);
        SendMessage(data, kGetReply, ReplyHeader(g.token, g.id, RAYACCEL_STATUS_INTERNAL), {});
        continue;
      }
      from = staging.data();
    }
    Serve* s = StartServe(ep, p, g.token, g.id, g.region, /*write=*/false);
    s->header = ReplyHeader(g.token, g.id, RAYACCEL_STATUS_OK);
    s->staging = std::move(staging);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = ServeSent;
    param.user_data = s;
    if (!region->staged) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = region->memh[p->link->fabric];
    }
    if (g.length <= kEagerMax && p->link->fabric == kNetwork) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_AM_SEND_FLAG_EAGER;
    }
    ucs_status_ptr_t r = Lib().ucp_am_send_nbx(data, kGetReply, s->header.data(), s->header.size(),
                                               from, g.length, &param);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      EndServe(s, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r));
    }
  }
}

// A copied chunk's ranges, each checked against the live regions (and host memory, as the
// reader's flag says it is), moved in one system call into the reader's addresses (`write`) or
// out of them: each range's status, INTERNAL for all that were to move if the copy failed.
static std::string CopyRanges(Ep* ep, Peer* p, bool write,
                              const std::vector<std::array<uint64_t, 3>>& ranges,
                              const uint64_t* to) {
  std::vector<rayaccel_status> st(ranges.size());
  std::vector<iovec> local, remote;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto& [id, offset, length] = ranges[i];
    Region* region = nullptr;
    st[i] = CheckRange(ep, id, offset, length, &region);
    if (st[i] == RAYACCEL_STATUS_OK && !region->host) st[i] = RAYACCEL_STATUS_INVALID_ARGUMENT;
    if (st[i] != RAYACCEL_STATUS_OK) continue;
    local.push_back({static_cast<char*>(region->base) + offset, length});
    remote.push_back({InPeer(to[i]), length});
  }
  std::string why;
  if (!local.empty() &&
      !(write ? p->process->Write(local.data(), remote.data(), local.size(), &why)
              : p->process->Read(local.data(), remote.data(), local.size(), &why))) {
    LogTo(ep, RAYACCEL_LOG_WARN,
          std::string("a batch copy ") + (write ? "to" : "from") +
              " a reader on this host failed: " + why);
    for (rayaccel_status& s : st) {
      if (s == RAYACCEL_STATUS_OK) s = RAYACCEL_STATUS_INTERNAL;
    }
  }
  Writer w;
  for (rayaccel_status s : st) w.U32(static_cast<uint32_t>(s));
  return std::move(w.str());
}

void CopyPutBatch(Ep* ep, Peer* p, uint64_t id, uint32_t n, const char* bytes, size_t size) {
  if (n == 0 || n > kCopiedChunkEntries || size != n * kCopiedRangeBytes || p->process == nullptr) {
    ep->outbox.push_back({true, p->token, kPutBatchAck,
                          ReplyHeader(p->token, id, RAYACCEL_STATUS_INVALID_ARGUMENT)});
    return;
  }
  Reader in(bytes, size);
  std::vector<std::array<uint64_t, 3>> ranges(n);
  std::vector<uint64_t> from(n);
  for (uint32_t i = 0; i < n; ++i) {
    ranges[i] = {in.U64(), in.U64(), in.U64()};
    from[i] = in.U64();
  }
  ep->outbox.push_back({true, p->token, kPutBatchAck, ReplyHeader(p->token, id, RAYACCEL_STATUS_OK),
                        CopyRanges(ep, p, /*write=*/false, ranges, from.data())});
}

void ServeBatchGets(Ep* ep) {
  std::vector<Ep::BatchServe> batches;
  batches.swap(ep->batch_gets);
  for (const Ep::BatchServe& b : batches) {
    Peer* p = PeerByToken(ep, b.token);
    ucp_ep_h data = p != nullptr && !p->failed ? DataOf(p->link) : nullptr;
    if (data == nullptr) continue;
    if (b.status != RAYACCEL_STATUS_OK) {
      SendMessage(data, kGetBatchReply, ReplyHeader(b.token, b.id, b.status), {});
      continue;
    }
    if (!b.to.empty()) {
      SendMessage(data, kGetBatchReply, ReplyHeader(b.token, b.id, RAYACCEL_STATUS_OK),
                  CopyRanges(ep, p, /*write=*/true, b.ranges, b.to.data()), /*eager=*/true);
      continue;
    }
    std::string reply(b.ranges.size() * 4, '\0');
    Writer statuses;
    for (const auto& [id, offset, length] : b.ranges) {
      Region* region = nullptr;
      rayaccel_status st = CheckRange(ep, id, offset, length, &region);
      if (st == RAYACCEL_STATUS_OK) {
        const char* from = static_cast<const char*>(region->base) + offset;
        const size_t at = reply.size();
        reply.resize(at + length);
        std::string why;
        if (!region->staged) {
          std::memcpy(&reply[at], from, length);
        } else if (ep->options.device_ops->ToHost(&reply[at], from, length, region->device, &why) !=
                   RAYACCEL_STATUS_OK) {
          LogTo(ep, RAYACCEL_LOG_WARN, "a read of device memory failed: " + why);
          reply.resize(at);
          st = RAYACCEL_STATUS_INTERNAL;
        }
      }
      statuses.U32(static_cast<uint32_t>(st));
    }
    std::memcpy(&reply[0], statuses.str().data(), statuses.str().size());
    SendMessage(data, kGetBatchReply, ReplyHeader(b.token, b.id, RAYACCEL_STATUS_OK),
                std::move(reply), /*eager=*/true);
  }
}

void ApplyPutBatch(Ep* ep, uint64_t token, uint64_t id, uint32_t n, const char* bytes,
                   size_t size) {
  Reader in(bytes, size);
  std::vector<std::array<uint64_t, 3>> ranges(n);
  uint64_t total = 0;
  bool ok = true;
  for (auto& r : ranges) {
    r = {in.U64(), in.U64(), in.U64()};
    ok = ok && r[2] <= kChunkBytes;
    total += std::min(r[2], kChunkBytes + 1);
  }
  if (!ok || !in.ok() || total != size - n * kRangeBytes) {
    ep->outbox.push_back(
        {true, token, kPutBatchAck, ReplyHeader(token, id, RAYACCEL_STATUS_INVALID_ARGUMENT)});
    return;
  }
  Writer statuses;
  const char* at = bytes + n * kRangeBytes;
  for (const auto& [region_id, offset, length] : ranges) {
    Region* region = nullptr;
    rayaccel_status st = CheckRange(ep, region_id, offset, length, &region);
    if (st == RAYACCEL_STATUS_OK) {
      st = StoreWrite(ep, region, static_cast<char*>(region->base) + offset, at, length);
    }
    at += length;
    statuses.U32(static_cast<uint32_t>(st));
  }
  ep->outbox.push_back({true, token, kPutBatchAck, ReplyHeader(token, id, RAYACCEL_STATUS_OK),
                        std::move(statuses.str())});
}

void BatchPutReceived(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  Lib().ucp_request_free(request);
  auto* b = static_cast<BatchPut*>(user_data);
  b->ep->activity++;
  if (status == UCS_OK) {
    ApplyPutBatch(b->ep, b->token, b->id, b->n, b->bytes.data(), b->bytes.size());
  } else {  // the writer hears it (if it is still there), rather than waiting in vain
    b->ep->outbox.push_back(
        {true, b->token, kPutBatchAck, ReplyHeader(b->token, b->id, RAYACCEL_STATUS_INTERNAL)});
  }
  delete b;
}

void OnPut(Ep* ep, Ep::Fabric* fabric, uint64_t token, uint64_t id, uint64_t region,
           uint64_t offset, uint64_t length, void* data, size_t data_length, bool rndv) {
  Peer* p = AdmittedPeer(ep, token);
  Region* target = nullptr;
  rayaccel_status status = p == nullptr ? RAYACCEL_STATUS_INVALID_ARGUMENT
                                        : CheckRange(ep, region, offset, length, &target);
  if (status == RAYACCEL_STATUS_OK && data_length != length) {
    status = RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (status != RAYACCEL_STATUS_OK) {
    // A large one is left unread: returning from the callback without receiving it tells
    // the sender UCX is done with its bytes (UCX sends the acknowledgement itself).
    if (p != nullptr) ep->outbox.push_back({true, token, kPutAck, ReplyHeader(token, id, status)});
    return;
  }
  void* at = static_cast<char*>(target->base) + offset;
  if (!rndv) {
    status = StoreWrite(ep, target, at, data, length);
    ep->outbox.push_back({true, token, kPutAck, ReplyHeader(token, id, status)});
    return;
  }
  Serve* s = StartServe(ep, p, token, id, region, /*write=*/true);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = ServeReceived;
  param.user_data = s;
  if (target->staged) {
    // Lands in host memory first; ServeReceived copies it to the device.
    s->staged_region = target;
    s->staged_at = at;
    at = s->staging.Take(length, ep->pinned, target->device);
  } else {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = target->memh[fabric->index];
  }
  ucs_status_ptr_t r = Lib().ucp_am_recv_data_nbx(fabric->worker, data, at, length, &param);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) EndServe(s, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r));
}

void CopyPut(Ep* ep, uint64_t token, uint64_t id, uint64_t region, uint64_t offset, uint64_t length,
             uint64_t from, size_t data_length) {
  Peer* p = AdmittedPeer(ep, token);
  if (p == nullptr) return;
  Region* target = nullptr;
  rayaccel_status status = CheckRange(ep, region, offset, length, &target);
  if (status == RAYACCEL_STATUS_OK &&
      (data_length != 0 || p->process == nullptr || !target->host)) {
    status = RAYACCEL_STATUS_INVALID_ARGUMENT;  // not a reader this owner copies for
  }
  if (status == RAYACCEL_STATUS_OK) {
    iovec local{static_cast<char*>(target->base) + offset, length};
    iovec remote{InPeer(from), length};
    std::string why;
    if (!p->process->Read(&local, &remote, 1, &why)) {
      LogTo(ep, RAYACCEL_LOG_WARN, "a copy from a reader on this host failed: " + why);
      status = RAYACCEL_STATUS_INTERNAL;
    }
  }
  ep->outbox.push_back({true, token, kPutAck, ReplyHeader(token, id, status)});
}

}  // namespace rayaccel::plugin::ucx
