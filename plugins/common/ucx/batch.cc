// Batches: small entries travel as chunks (one message each way), large ones as transfers,
// host memory of a reader on the owner's host as copied chunks.
#include "common/ucx/batch.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/mappings.h"
#include "common/ucx/memory.h"
#include "common/ucx/messages.h"
#include "common/ucx/requests.h"
#include "common/ucx/ring.h"
#include "common/ucx/transfer.h"

namespace rayaccel::plugin::ucx {

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

// Whether two entries name the same descriptor: the same bytes (a prepared batch's entries of
// one region share them), so the first parse serves both.
static bool SameDescriptor(rayaccel_blob x, rayaccel_blob y) {
  return x.data != nullptr && y.data != nullptr && x.size == y.size &&
         (x.data == y.data || std::memcmp(x.data, y.data, x.size) == 0);
}

// Every entry checked before any starts: a malformed batch moves nothing. The error names the
// first bad entry.
static rayaccel_status CheckEntries(const rayaccel_transfer_batch_args& a, const Conn* c,
                                    std::vector<RemoteRegion>* remotes, rayaccel_error* error) {
  auto bad = [&](uint32_t i, const char* why) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "entry " + std::to_string(i) + ": " + why);
  };
  for (uint32_t i = 0; i < a.count; ++i) {
    const rayaccel_transfer_entry& e = a.entries[i];
    RemoteRegion& remote = (*remotes)[i];
    if (e.local == nullptr || e.length == 0) return bad(i, "no local region or no length");
    if (i > 0 && SameDescriptor(e.remote_descriptor, a.entries[i - 1].remote_descriptor)) {
      remote = (*remotes)[i - 1];
    } else if (!ParseDescriptor(e.remote_descriptor, &remote)) {
      return bad(i, "malformed UCX descriptor");
    }
    const Region* local = Of(e.local);
    if (local->endpoint != c->endpoint) {
      return bad(i, "the local region belongs to another endpoint");
    }
    if (remote.owner != c->peer_uuid) {
      return bad(i, "the descriptor belongs to another peer than this connection's");
    }
    if (e.local_offset > local->length || e.length > local->length - e.local_offset ||
        e.remote_offset > remote.length || e.length > remote.length - e.remote_offset) {
      return bad(i, "the range lies outside a region");
    }
  }
  return RAYACCEL_STATUS_OK;
}

namespace {

// The owner's shared host memory a batch copies from or to: its entries' copies, made once the
// endpoint's lock is let go, and the mappings they hold (once per run of entries of a region),
// given back after.
struct MappedCopies {
  struct Copy {
    char* mine;
    char* theirs;
    uint64_t length;
  };
  std::vector<Copy> copies;
  std::vector<std::pair<uint64_t, Mapping*>> held;  // by the owner's region id, once per hold

  // The mapping of `remote` if the batch's last hold is of it (entries of one region come in
  // runs; a region met again after another is held again, and given back as often).
  Mapping* Held(const RemoteRegion& remote) const {
    if (held.empty() || held.back().first != remote.id) return nullptr;
    Mapping* m = held.back().second;
    // Revoked while the batch asked for another (STALE from MappingFor), or a descriptor of
    // another length (the owner's to check).
    return m->length == remote.length && !m->revoked ? m : nullptr;
  }
  void Run(rayaccel_transfer_op op) const {
    for (const Copy& x : copies) CopyHost(op, x.mine, x.theirs, x.length);
  }
  // Caller holds mu.
  void Release(Ep* ep, Conn* c) {
    for (auto& [region, m] : held) {
      m->users--;
      if (m->revoked) ReleaseMapping(ep, c, region);  // the owner waits for it
    }
    held.clear();
  }
};

}  // namespace

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckBatchArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    std::vector<RemoteRegion> remotes(a->count);
    if (rayaccel_status s = CheckEntries(*a, c, &remotes, error); s != RAYACCEL_STATUS_OK) {
      return s;
    }
    // The request for what does not end within this call, made when first needed: a batch
    // that is all copies from mapped memory needs none. Caller holds mu.
    Request* batch = nullptr;
    auto tracked = [&] {
      if (batch == nullptr) {
        batch = new Request();
        batch->endpoint = ep;
        batch->connection = c;
        batch->kind = Request::Kind::kBatch;
        batch->entry_status.assign(a->count, RAYACCEL_STATUS_OK);
        batch->statuses_out = a->statuses;
        batch->held = true;  // until this call has issued every entry
        ep->requests[batch] = true;
      }
      return batch;
    };
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
    MappedCopies mapped_copies;
    // READs this process makes itself from the owner's published regions (ring.h), and the
    // entries they are.
    std::shared_ptr<PublishedRegionsReader> published;
    std::vector<DirectRead> direct;
    std::vector<ChunkItem> direct_items;
    uint64_t total = 0;
    for (uint32_t i = 0; i < a->count; ++i) total += a->entries[i].length;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      if (a->op == RAYACCEL_TRANSFER_READ) published = ReadsDirectly(c, total);
      if (c->failure != RAYACCEL_STATUS_OK || DataOf(c->link) == nullptr) {
        rayaccel_status st =
            c->failure != RAYACCEL_STATUS_OK ? c->failure : RAYACCEL_STATUS_PEER_LOST;
        std::string why =
            c->failure != RAYACCEL_STATUS_OK ? c->failure_text : "the connection has no data path";
        return Fail(error, st, why);
      }
      std::vector<ChunkItem> items, copied;
      uint64_t bytes = 0, copied_bytes = 0;
      auto send = [&] {
        if (!items.empty()) StartChunkLocked(ep, c, tracked(), a->op, items, /*copied=*/false);
        items.clear();
        bytes = 0;
      };
      auto send_copied = [&] {
        if (!copied.empty() && !StartRingChunkLocked(ep, c, tracked(), a->op, copied)) {
          StartChunkLocked(ep, c, tracked(), a->op, copied, /*copied=*/true);
        }
        copied.clear();
        copied_bytes = 0;
      };
      std::string why;  // a mapping's refusal
      for (uint32_t i = 0; i < a->count; ++i) {
        const rayaccel_transfer_entry& e = a->entries[i];
        if (alone(i)) {
          own.push_back(i);
          continue;
        }
        if (mapped(i) && c->failure == RAYACCEL_STATUS_OK) {
          rayaccel_status st = RAYACCEL_STATUS_OK;
          Mapping* m = mapped_copies.Held(remotes[i]);
          if (m == nullptr && (m = MappingFor(ep, c, remotes[i], &st, &why)) != nullptr) {
            mapped_copies.held.emplace_back(remotes[i].id, m);
          }
          if (m != nullptr) {
            if (mapped_copies.copies.empty()) mapped_copies.copies.reserve(a->count - i);
            mapped_copies.copies.push_back({static_cast<char*>(Of(e.local)->base) + e.local_offset,
                                            static_cast<char*>(m->base) + e.remote_offset,
                                            e.length});
            a->paths[i] = RAYACCEL_PATH_SAME_HOST;
            continue;
          }
          if (st != RAYACCEL_STATUS_OK) {
            SetEntry(tracked(), i, st, why);
            continue;
          }
        }
        if (c->failure != RAYACCEL_STATUS_OK) {  // lost while mapping
          SetEntry(tracked(), i, c->failure, c->failure_text);
          continue;
        }
        if (published != nullptr && OwnerCopies(c, Of(e.local), remotes[i])) {
          a->paths[i] = RAYACCEL_PATH_SAME_HOST;
          char* mine = static_cast<char*>(Of(e.local)->base) + e.local_offset;
          direct.push_back({remotes[i].id, e.remote_offset, e.length, mine, false});
          direct_items.push_back({i, mine, remotes[i].id, e.remote_offset, e.length});
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
          AttachPart(tracked(), i, st, text, part);
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
    // The mappings are held: the owner's memory stays until they are given back below.
    mapped_copies.Run(a->op);
    if (!direct.empty()) ReadDirectly(*published, &direct);
    for (uint32_t i : own) {
      rayaccel_transfer_args t = EntryAsTransfer(*a, i);
      char text[512] = {};
      rayaccel_error err{sizeof(err), text, sizeof(text)};
      rayaccel_status st = Transfer(&t, &err);
      a->paths[i] = t.path;
      std::lock_guard<std::mutex> lock(ep->mu);
      AttachPart(tracked(), i, st, text, t.request);
    }
    std::unique_lock<std::mutex> lock(ep->mu);
    mapped_copies.Release(ep, c);
    // What the published regions did not give goes to the owner, as copied chunks.
    std::vector<ChunkItem> to_owner;
    for (size_t j = 0; j < direct.size(); ++j) {
      if (!direct[j].done) to_owner.push_back(direct_items[j]);
    }
    for (size_t at = 0; at < to_owner.size(); at += kCopiedChunkEntries) {
      std::vector<ChunkItem> chunk(
          to_owner.begin() + at,
          to_owner.begin() + std::min<size_t>(to_owner.size(), at + kCopiedChunkEntries));
      if (!StartRingChunkLocked(ep, c, tracked(), a->op, chunk)) {
        StartChunkLocked(ep, c, tracked(), a->op, chunk, /*copied=*/true);
      }
    }
    if (batch != nullptr) AwaitRingChunks(ep, c, lock);  // most end within microseconds
    if (batch == nullptr) {                              // every entry was copied within the call
      std::fill_n(a->statuses, a->count, RAYACCEL_STATUS_OK);
      a->request = nullptr;
      return RAYACCEL_STATUS_OK;
    }
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
