// The reader's transfers: each checked, then issued once the owner described its region;
// batches, flush and notify.
#include "common/ofi/transfer.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/ofi/channels.h"
#include "common/ofi/reader.h"
#include "common/ofi/requests.h"

namespace rayaccel::plugin::ofi {

namespace {
struct RemoteRegion {
  uint64_t owner = 0, id = 0, length = 0;
};
}  // namespace

static bool ParseDescriptor(rayaccel_blob d, RemoteRegion* r) {
  Reader in(d.data, d.size);
  const uint32_t magic = in.U32();
  const uint16_t version = in.U16();
  const uint16_t flags = in.U16();
  r->owner = in.U64();
  r->id = in.U64();
  r->length = in.U64();
  return in.at_end() && d.size == kDescriptorBytes && magic == kDescriptorMagic &&
         version == kWireVersion && flags == 0 && r->id != 0;
}

// Checks one transfer before anything starts. Caller holds mu.
static rayaccel_status CheckTransfer(Endpoint* ep, Connection* c, Region* local,
                                     uint64_t local_offset, rayaccel_blob descriptor,
                                     uint64_t length, RemoteRegion* remote, std::string* why) {
  if (!ParseDescriptor(descriptor, remote)) {
    *why = "malformed libfabric descriptor";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (remote->owner != c->peer_uuid) {
    *why = "the descriptor belongs to another peer than this connection's";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (local == nullptr || local->endpoint != ep || length == 0 || local_offset > local->length ||
      length > local->length - local_offset) {
    *why = "the local range lies outside its region";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  return RAYACCEL_STATUS_OK;
}

// Queues an entry behind the owner's description of its region, asking for it first.
static void Start(Connection* c, const Pending& p, uint64_t region) {
  auto [it, inserted] = c->remotes.try_emplace(region);
  if (inserted) {
    Writer w;
    w.Bytes(Header(kLookup, c->token).data(), 12).U64(region);
    if (!SendOn(c->endpoint, c->channel.get(), std::move(w.str()))) {
      it->second.state = Remote::State::kGone;
      it->second.gone = RAYACCEL_STATUS_PEER_LOST;
      it->second.why = "the lookup could not be sent";
    }
  }
  Issue(c, p, region);
}

static rayaccel_status StartTransfers(Connection* c, Request* r, rayaccel_transfer_op op,
                                      const std::vector<Pending>& entries,
                                      const std::vector<RemoteRegion>& remotes) {
  r->held = true;
  r->running = static_cast<uint32_t>(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    Pending p = entries[i];
    p.op = op;
    Start(c, p, remotes[i].id);
  }
  r->held = false;
  Complete(r, RAYACCEL_STATUS_OK, {});
  return RAYACCEL_STATUS_OK;
}

static Request* NewTransfer(Endpoint* ep, Connection* c) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = Request::Kind::kTransfer;
  r->id = c->next_id++;
  c->transfers[r->id] = r;
  ep->requests.insert(r);
  return r;
}

// Returns the request to the host, or completes it within the call.
static rayaccel_status Hand(Endpoint* ep, Request* r, rayaccel_request** out,
                            rayaccel_error* error) {
  if (!r->done) {
    *out = r;
    return RAYACCEL_STATUS_OK;
  }
  const rayaccel_status s = r->status;
  const std::string why = r->why;
  ep->requests.erase(r);
  delete r;
  *out = nullptr;
  return s == RAYACCEL_STATUS_OK ? s : Fail(error, s, why);
}

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckTransferArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Connection* c = Of(a->connection);
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    std::vector<RemoteRegion> remotes(1);
    std::string why;
    if (rayaccel_status s = CheckTransfer(ep, c, Of(a->local), a->local_offset,
                                          a->remote_descriptor, a->length, &remotes[0], &why);
        s != RAYACCEL_STATUS_OK) {
      return Fail(error, s, why);
    }
    if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) a->path = RAYACCEL_PATH_FABRIC;
    Request* r = NewTransfer(ep, c);
    StartTransfers(c, r, a->op,
                   {{r, 0, a->op, Of(a->local), a->local_offset, a->remote_offset, a->length}},
                   remotes);
    return Hand(ep, r, &a->request, error);
  });
}

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckBatchArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Connection* c = Of(a->connection);
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    std::vector<RemoteRegion> remotes(a->count);
    std::vector<Pending> entries(a->count);
    for (uint32_t i = 0; i < a->count; ++i) {
      const rayaccel_transfer_entry& e = a->entries[i];
      std::string why;
      if (rayaccel_status s = CheckTransfer(ep, c, Of(e.local), e.local_offset, e.remote_descriptor,
                                            e.length, &remotes[i], &why);
          s != RAYACCEL_STATUS_OK) {
        return Fail(error, s, "entry " + std::to_string(i) + ": " + why);
      }
      entries[i] = {nullptr, i, a->op, Of(e.local), e.local_offset, e.remote_offset, e.length};
    }
    Request* r = NewTransfer(ep, c);
    r->batch = true;
    r->entry_status.assign(a->count, RAYACCEL_STATUS_OK);
    r->statuses_out = a->statuses;
    for (auto& e : entries) e.request = r;
    for (uint32_t i = 0; i < a->count; ++i) a->paths[i] = RAYACCEL_PATH_FABRIC;
    StartTransfers(c, r, a->op, entries, remotes);
    if (r->done) {
      std::copy(r->entry_status.begin(), r->entry_status.end(), a->statuses);
    }
    return Hand(ep, r, &a->request, error);
  });
}

// A flush or notification: after every transfer issued on the connection so far.
static Request* NewBarrier(Endpoint* ep, Connection* c, Request::Kind kind) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = kind;
  r->mark = c->next_id;
  ep->requests.insert(r);
  c->barriers.push_back(r);
  CheckBarriers(c);
  return r;
}

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckNotifyArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Connection* c = Of(a->connection);
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    auto* r = new Request();
    r->endpoint = ep;
    r->connection = c;
    r->kind = Request::Kind::kNotify;
    r->mark = c->next_id;
    r->payload.assign(reinterpret_cast<const char*>(a->message.data), a->message.size);
    ep->requests.insert(r);
    c->barriers.push_back(r);
    CheckBarriers(c);
    return Hand(ep, r, &a->request, error);
  });
}

rayaccel_status Flush(rayaccel_connection* handle, rayaccel_request** out, rayaccel_error* error) {
  Connection* c = Of(handle);
  if (c == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "flush needs a connection");
  }
  return Guard(error, [&] {
    Endpoint* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    Request* r = NewBarrier(ep, c, Request::Kind::kFlush);
    return Hand(ep, r, out, error);
  });
}

}  // namespace rayaccel::plugin::ofi
