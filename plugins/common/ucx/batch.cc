// Batches: small entries travel as chunks (one message each way), large ones as transfers,
// host memory of a reader on the owner's host as copied chunks.
#include "common/ucx/batch.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/mappings.h"
#include "common/ucx/memory.h"
#include "common/ucx/messages.h"
#include "common/ucx/requests.h"
#include "common/ucx/transfer.h"

namespace rayaccel::plugin::ucx {

namespace {

// One small range of a batch, on its way into a chunk.
struct ChunkItem {
  uint32_t entry;
  char* local;
  uint64_t region, offset, length;
};

}  // namespace

// Sends `items` as one chunk of `batch`: one message with every range (and, for a write, their
// bytes), answered by one with each range's status (and, for a read, the bytes). Numbered as a
// transfer, so flushes and notifications wait for it. Caller holds mu.
static void StartChunkLocked(Ep* ep, Conn* c, Request* batch, rayaccel_transfer_op op,
                             const std::vector<ChunkItem>& items, bool copied) {
  if (c->failure != RAYACCEL_STATUS_OK || DataOf(c->link) == nullptr) {  // lost while issuing
    for (const ChunkItem& i : items) {
      SetEntry(batch, i.entry,
               c->failure != RAYACCEL_STATUS_OK ? c->failure : RAYACCEL_STATUS_PEER_LOST,
               c->failure != RAYACCEL_STATUS_OK ? c->failure_text : "the connection was lost");
    }
    return;
  }
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
  r->abandoned = true;  // the batch's: freed once it ends
  r->id = c->next_id++;
  r->same_host = copied;
  Writer w;
  w.U64(c->token).U64(r->id).U32(static_cast<uint32_t>(items.size()));
  if (copied) w.U32(kCopiedChunk);
  r->header = std::move(w.str());
  Writer body;
  for (const ChunkItem& i : items) {
    body.U64(i.region).U64(i.offset).U64(i.length);
    if (copied) body.U64(reinterpret_cast<uintptr_t>(i.local));
    r->chunk.push_back({i.entry, i.local, i.length, RAYACCEL_STATUS_OK});
    r->length += i.length;
  }
  if (r->kind == Request::Kind::kWrite && !copied) {
    for (const ChunkItem& i : items) body.Bytes(i.local, i.length);
  }
  r->payload = std::move(body.str());
  ep->requests[r] = true;
  c->transfers[r->id] = r;
  r->batch = batch;
  batch->parts_running++;
  ucp_request_param_t p = SendParams(TransferSent, r, /*eager=*/true);
  ucs_status_ptr_t started = Lib().ucp_am_send_nbx(
      DataOf(c->link), r->kind == Request::Kind::kRead ? kGetBatch : kPutBatch, r->header.data(),
      r->header.size(), r->payload.data(), r->payload.size(), &p);
  if (Started(r, started, "transfer") && started == nullptr) MaybeCompleteWrite(r);
  MaybeFree(r);
}

// A whole transfer of the batch, issued as `transfer` issues one, counted as a part of it.
static void AttachPart(Request* batch, uint32_t entry, rayaccel_status issued, const char* why,
                       rayaccel_request* handle) {
  Request* part = Of(handle);
  if (issued != RAYACCEL_STATUS_OK) {
    SetEntry(batch, entry, issued, why);
  } else if (part != nullptr && part->done) {
    SetEntry(batch, entry, part->status, part->why);
    part->abandoned = true;
    MaybeFree(part);
  } else if (part != nullptr) {
    part->batch = batch;
    part->entry = entry;
    part->abandoned = true;
    batch->parts_running++;
  }
}

// Entry `i` of a batch as the arguments of a transfer of its own.
static rayaccel_transfer_args EntryAsTransfer(const rayaccel_transfer_batch_args& a, uint32_t i) {
  const rayaccel_transfer_entry& e = a.entries[i];
  rayaccel_transfer_args t{};
  t.struct_size = sizeof(t);
  t.connection = a.connection;
  t.op = a.op;
  t.local = e.local;
  t.local_offset = e.local_offset;
  t.remote_descriptor = e.remote_descriptor;
  t.remote_offset = e.remote_offset;
  t.length = e.length;
  t.path = RAYACCEL_PATH_UNREPORTED;
  return t;
}

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckBatchArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    // Every entry is checked before any starts: a malformed batch moves nothing.
    std::vector<RemoteRegion> remotes(a->count);
    for (uint32_t i = 0; i < a->count; ++i) {
      const rayaccel_transfer_entry& e = a->entries[i];
      const std::string at = "entry " + std::to_string(i) + ": ";
      if (e.local == nullptr || e.length == 0) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, at + "no local region or no length");
      }
      if (!ParseDescriptor(e.remote_descriptor, &remotes[i])) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, at + "malformed UCX descriptor");
      }
      if (Of(e.local)->endpoint != ep) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    at + "the local region belongs to another endpoint");
      }
      if (remotes[i].owner != c->peer_uuid) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    at + "the descriptor belongs to another peer than this connection's");
      }
      if (e.local_offset > Of(e.local)->length || e.length > Of(e.local)->length - e.local_offset ||
          e.remote_offset > remotes[i].length || e.length > remotes[i].length - e.remote_offset) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    at + "the range lies outside a region");
      }
    }
    auto* batch = new Request();
    batch->endpoint = ep;
    batch->connection = c;
    batch->kind = Request::Kind::kBatch;
    batch->entry_status.assign(a->count, RAYACCEL_STATUS_OK);
    batch->statuses_out = a->statuses;
    batch->held = true;  // until this call has issued every entry
    // Device memory on either side goes as a transfer of its own does (staged or mapped).
    auto alone = [&](uint32_t i) {
      return Of(a->entries[i].local)->staged || (remotes[i].flags & kStagedByOwner) != 0 ||
             ((remotes[i].flags & kMappable) != 0 && !HostMapped(remotes[i]));
    };
    // Host memory the owner on this host shares: copied here, within the call.
    auto mapped = [&](uint32_t i) {
      return c->same_host && HostMapped(remotes[i]) &&
             MayMap(ep, Of(a->entries[i].local), remotes[i]);
    };
    std::vector<uint32_t> own;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      if (c->failure != RAYACCEL_STATUS_OK || DataOf(c->link) == nullptr) {
        rayaccel_status st =
            c->failure != RAYACCEL_STATUS_OK ? c->failure : RAYACCEL_STATUS_PEER_LOST;
        std::string why =
            c->failure != RAYACCEL_STATUS_OK ? c->failure_text : "the connection has no data path";
        delete batch;
        return Fail(error, st, why);
      }
      ep->requests[batch] = true;
      std::vector<ChunkItem> items, copied;
      uint64_t bytes = 0, copied_bytes = 0;
      auto send = [&] {
        if (!items.empty()) StartChunkLocked(ep, c, batch, a->op, items, /*copied=*/false);
        items.clear();
        bytes = 0;
      };
      auto send_copied = [&] {
        if (!copied.empty()) StartChunkLocked(ep, c, batch, a->op, copied, /*copied=*/true);
        copied.clear();
        copied_bytes = 0;
      };
      for (uint32_t i = 0; i < a->count; ++i) {
        const rayaccel_transfer_entry& e = a->entries[i];
        if (alone(i)) {
          own.push_back(i);
          continue;
        }
        if (mapped(i) && c->failure == RAYACCEL_STATUS_OK) {
          rayaccel_status st = RAYACCEL_STATUS_OK;
          std::string why;
          if (Mapping* m = MappingFor(ep, c, remotes[i], &st, &why)) {
            CopyHost(a->op, static_cast<char*>(Of(e.local)->base) + e.local_offset,
                     static_cast<char*>(m->base) + e.remote_offset, e.length);
            m->users--;
            if (m->revoked) ReleaseMapping(ep, c, remotes[i].id);
            a->paths[i] = RAYACCEL_PATH_SAME_HOST;
            continue;
          }
          if (st != RAYACCEL_STATUS_OK) {
            SetEntry(batch, i, st, why);
            continue;
          }
        }
        if (c->failure != RAYACCEL_STATUS_OK) {  // lost while mapping
          SetEntry(batch, i, c->failure, c->failure_text);
          continue;
        }
        // Host memory of a reader the owner copies for: a system call per chunk; an entry of
        // more than a chunk's bytes goes alone, a tiny one in a message chunk.
        if (OwnerCopies(c, Of(e.local), remotes[i]) && e.length >= kCopiedEntryMin &&
            e.length <= kCopiedChunkBytes) {
          a->paths[i] = RAYACCEL_PATH_SAME_HOST;
          if (copied.size() == kCopiedChunkEntries || copied_bytes + e.length > kCopiedChunkBytes)
            send_copied();
          copied.push_back({i, static_cast<char*>(Of(e.local)->base) + e.local_offset,
                            remotes[i].id, e.remote_offset, e.length});
          copied_bytes += e.length;
          continue;
        }
        a->paths[i] = RAYACCEL_PATH_FABRIC;
        if (e.length > kChunkEntryMax) {  // zero-copy, as one transfer
          rayaccel_transfer_args t = EntryAsTransfer(*a, i);
          char text[512] = {};
          rayaccel_error err{sizeof(err), text, sizeof(text)};
          rayaccel_request* part = nullptr;
          rayaccel_status st =
              StartPieceLocked(ep, c, t, remotes[i], 0, e.length, nullptr, &part, {}, &err);
          if (st == RAYACCEL_STATUS_OK && Of(part)->same_host)
            a->paths[i] = RAYACCEL_PATH_SAME_HOST;
          AttachPart(batch, i, st, text, part);
          continue;
        }
        if (items.size() == kChunkEntries || bytes + e.length > kChunkBytes) send();
        items.push_back({i, static_cast<char*>(Of(e.local)->base) + e.local_offset, remotes[i].id,
                         e.remote_offset, e.length});
        bytes += e.length;
      }
      send();
      send_copied();
    }
    for (uint32_t i : own) {
      rayaccel_transfer_args t = EntryAsTransfer(*a, i);
      char text[512] = {};
      rayaccel_error err{sizeof(err), text, sizeof(text)};
      rayaccel_status st = Transfer(&t, &err);
      a->paths[i] = t.path;
      std::lock_guard<std::mutex> lock(ep->mu);
      AttachPart(batch, i, st, text, t.request);
    }
    std::lock_guard<std::mutex> lock(ep->mu);
    batch->held = false;
    if (batch->parts_running == 0 && batch->reply == RAYACCEL_STATUS_OK) {
      // Everything landed within the call (device to device, mapped).
      std::copy(batch->entry_status.begin(), batch->entry_status.end(), a->statuses);
      ep->requests.erase(batch);
      delete batch;
      a->request = nullptr;
      return RAYACCEL_STATUS_OK;
    }
    MaybeCompleteBatch(batch);  // ended already when an entry failed in the call
    a->request = batch;
    return RAYACCEL_STATUS_OK;
  });
}

}  // namespace rayaccel::plugin::ucx
