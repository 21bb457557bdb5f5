// Requests: their completion, batches' and staged groups' parts, and the host's poll and
// abandon.
#include "common/ucx/requests.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/progress.h"
#include "common/ucx/ring.h"
#include "common/ucx/transfer.h"

namespace rayaccel::plugin::ucx {

// --- Requests

void MaybeFree(Request* r) {
  if (r->done && r->abandoned && r->ucx == 0 && !r->queued) {
    r->endpoint->requests.erase(r);
    delete r;
  }
}

static void PieceDone(Request* group, rayaccel_status status, const std::string& why);
static void BatchPartDone(Request* batch, Request* part);

const char* RefusalText(rayaccel_status status) {
  switch (status) {
    case RAYACCEL_STATUS_OK:
      return "";
    case RAYACCEL_STATUS_STALE:
      return "the peer has deregistered the region";
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
      return "the peer refused the range (not inside a region it holds)";
    default:
      return "the peer could not serve the range";
  }
}

rayaccel_status OwnerStatus(uint32_t status) {
  const auto s = static_cast<rayaccel_status>(status);
  return s == RAYACCEL_STATUS_OK || s == RAYACCEL_STATUS_STALE ||
                 s == RAYACCEL_STATUS_INVALID_ARGUMENT
             ? s
             : RAYACCEL_STATUS_INTERNAL;
}

void Complete(Request* r, rayaccel_status status, std::string why) {
  if (r->done) return;
  r->done = true;
  r->status = status;
  r->why = std::move(why);
  r->endpoint->activity++;
  Conn* c = r->connection;
  if (c != nullptr && !r->is_group &&
      (r->kind == Request::Kind::kRead || r->kind == Request::Kind::kWrite)) {
    c->transfers.erase(r->id);
    CheckBarriers(c);
  }
  if (r->group != nullptr) PieceDone(r->group, r->status, r->why);
  if (r->batch != nullptr) BatchPartDone(r->batch, r);
}

// --- Batches

void SetEntry(Request* batch, uint32_t i, rayaccel_status status, const std::string& why) {
  batch->entry_status[i] = status;
  if (status != RAYACCEL_STATUS_OK && batch->reply == RAYACCEL_STATUS_OK) {
    batch->reply = status;
    batch->first_why = "entry " + std::to_string(i) + ": " + (why.empty() ? "failed" : why);
  }
}

void MaybeCompleteBatch(Request* batch) {
  if (batch->held || batch->parts_running > 0 || batch->done) return;
  Complete(batch, batch->reply, batch->first_why);
  MaybeFree(batch);
}

// A part ended: its entries take its outcome (a chunk's own, per range, when it got through).
static void BatchPartDone(Request* batch, Request* part) {
  part->batch = nullptr;
  if (part->chunk.empty()) {
    SetEntry(batch, part->entry, part->status, part->why);
  } else {
    for (const Request::ChunkEntry& e : part->chunk) {
      const bool whole = part->status != RAYACCEL_STATUS_OK;
      SetEntry(batch, e.entry, whole ? part->status : e.status,
               whole ? part->why : RefusalText(e.status));
    }
  }
  batch->parts_running--;
  MaybeCompleteBatch(batch);
}

// A piece of `group` ended: the next one goes out while all is well; the group ends once no
// piece is in flight and none is left to issue, failed if any piece failed.
static void PieceDone(Request* group, rayaccel_status status, const std::string& why) {
  if (status != RAYACCEL_STATUS_OK && group->reply == RAYACCEL_STATUS_OK) {
    group->reply = status;
    group->first_why = why;
  }
  group->pieces_in_flight--;
  if (group->reply == RAYACCEL_STATUS_OK && group->next_piece < group->whole.length &&
      !group->issuing && !group->queued) {
    group->queued = true;
    group->endpoint->ready_groups.push_back(group);
  }
  MaybeCompleteGroup(group);
}

void IssueReadyGroups(Ep* ep) {
  std::vector<Request*> ready;
  ready.swap(ep->ready_groups);
  for (Request* group : ready) {
    group->queued = false;
    if (!group->done) IssuePieces(group);
    MaybeCompleteGroup(group);
    MaybeFree(group);
  }
}

void MaybeCompleteGroup(Request* group) {
  if (group->held || group->issuing || group->pieces_in_flight > 0 || group->done) return;
  if (group->reply == RAYACCEL_STATUS_OK && group->next_piece < group->whole.length) return;
  Complete(group, group->reply, group->first_why);
  MaybeFree(group);
}

void MaybeCompleteWrite(Request* r) {
  if (r->kind != Request::Kind::kWrite || !r->replied || r->ucx != 0) return;
  Complete(r, r->reply,
           r->reply == RAYACCEL_STATUS_OK || r->reply == RAYACCEL_STATUS_STALE ||
                   r->reply == RAYACCEL_STATUS_INVALID_ARGUMENT
               ? RefusalText(r->reply)
               : "the peer could not store the bytes");
}

void CheckBarriers(Conn* c) {
  const uint64_t oldest = c->transfers.empty() ? UINT64_MAX : c->transfers.begin()->first;
  auto& waiting = c->barriers;
  for (auto it = waiting.begin(); it != waiting.end();) {
    Request* r = *it;
    if (r->mark > oldest && c->failure == RAYACCEL_STATUS_OK) {
      ++it;
      continue;
    }
    it = waiting.erase(it);
    if (c->failure != RAYACCEL_STATUS_OK) {
      Complete(r, c->failure, c->failure_text);
    } else if (r->kind == Request::Kind::kFlush) {
      Complete(r, RAYACCEL_STATUS_OK);
    } else {
      c->endpoint->ready_notifications.push_back(r);
    }
    MaybeFree(r);
  }
}

void TransferSent(void* ucx_request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->endpoint->activity++;
  r->ucx--;
  if (status != UCS_OK) {
    Complete(r, FromUcs(status), "the transfer did not go out: " + StatusText(status));
  } else {
    MaybeCompleteWrite(r);
  }
  MaybeFree(r);
}

void LandRead(Request* r, const void* bytes) {
  rayaccel_status st = RAYACCEL_STATUS_OK;
  std::string why;
  if (r->staged) {
    st = r->endpoint->options.device_ops->FromHost(r->local, bytes, r->length, r->device, &why);
  } else if (bytes != r->local) {
    std::memcpy(r->local, bytes, r->length);
  }
  r->staging.Release();
  Complete(r, st, st == RAYACCEL_STATUS_OK ? "" : "to device memory: " + why);
}

void ReadReceived(void* ucx_request, ucs_status_t status, size_t /*length*/, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->ucx--;
  if (status == UCS_OK) {
    LandRead(r, r->staged ? r->staging.data() : r->local);
  } else {
    Complete(r, FromUcs(status), "the read's bytes did not arrive: " + StatusText(status));
  }
  MaybeFree(r);
}

void LandChunk(Request* r, const char* reply, size_t size) {
  const size_t head = r->chunk.size() * 4;
  uint64_t want = head;
  Reader in(reply, size);
  for (Request::ChunkEntry& e : r->chunk) {
    e.status = OwnerStatus(in.U32());
    if (e.status == RAYACCEL_STATUS_OK && !r->same_host) want += e.length;
  }
  if (r->same_host && size == head) {  // the owner copied the ranges into place
    Complete(r, RAYACCEL_STATUS_OK);
    return;
  }
  if (size < head || want != size) {
    Complete(r, RAYACCEL_STATUS_INTERNAL, "the peer answered a batch read with another length");
    return;
  }
  const char* at = reply + head;
  for (const Request::ChunkEntry& e : r->chunk) {
    if (e.status != RAYACCEL_STATUS_OK) continue;
    std::memcpy(e.local, at, e.length);
    at += e.length;
  }
  std::string().swap(r->scratch);
  Complete(r, RAYACCEL_STATUS_OK);
}

void ChunkReceived(void* ucx_request, ucs_status_t status, size_t /*length*/, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->ucx--;
  if (status == UCS_OK) {
    LandChunk(r, r->scratch.data(), r->scratch.size());
  } else {
    Complete(r, FromUcs(status), "the batch's bytes did not arrive: " + StatusText(status));
  }
  MaybeFree(r);
}

void NotificationSent(void* ucx_request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  Lib().ucp_request_free(ucx_request);
  r->ucx--;
  Complete(r, FromUcs(status), status == UCS_OK ? "" : "notify: " + StatusText(status));
  MaybeFree(r);
}

bool Started(Request* r, ucs_status_ptr_t started, const char* what) {
  if (started == nullptr) return true;
  if (UCS_PTR_IS_ERR(started)) {
    Complete(r, FromUcs(UCS_PTR_STATUS(started)),
             std::string(what) + ": " + StatusText(UCS_PTR_STATUS(started)));
    return false;
  }
  r->ucx++;
  return true;
}

rayaccel_status Poll(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Ep* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (!r->done) {
      DrainRings(ep);
      ProgressData(ep);  // transfers ride the data workers
      if (!ep->ready_notifications.empty()) SendReadyNotifications(ep);
      if (!ep->ready_groups.empty()) IssueReadyGroups(ep);
    }
    if (!r->done) return RAYACCEL_STATUS_TIMEOUT;
    if (r->kind == Request::Kind::kBatch && r->statuses_out != nullptr) {
      std::copy(r->entry_status.begin(), r->entry_status.end(), r->statuses_out);
    }
    rayaccel_status s = r->status;
    std::string why = r->why;
    r->abandoned = true;  // the host is done with it
    MaybeFree(r);
    if (s == RAYACCEL_STATUS_OK) return s;
    return Fail(error, s, why.empty() ? "failed" : why);
  });
}

rayaccel_status Abandon(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Ep* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    r->abandoned = true;
    r->statuses_out = nullptr;  // the host's array may go now
    MaybeFree(r);               // or when it ends
    return RAYACCEL_STATUS_OK;
  });
}

}  // namespace rayaccel::plugin::ucx
