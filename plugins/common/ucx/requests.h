// Requests: their completion, batches' and staged groups' parts, and the host's poll and
// abandon.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_REQUESTS_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_REQUESTS_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// Frees a request once it is done, nobody will poll it, and UCX holds it no more.
void MaybeFree(Request* r);

// Why an owner refused a range, in the words a reader's error gives.
const char* RefusalText(rayaccel_status status);

// Only the statuses an owner gives for a range; anything else is the owner's bug.
rayaccel_status OwnerStatus(uint32_t status);

// The request's outcome; later outcomes are ignored. Caller holds mu.
void Complete(Request* r, rayaccel_status status, std::string why = {});

// Entry `i` of `batch` ended; the batch keeps its first failure for the poll.
void SetEntry(Request* batch, uint32_t i, rayaccel_status status, const std::string& why);

// The batch ends once the call that made it returned and no part is running.
void MaybeCompleteBatch(Request* batch);

// The next pieces of the groups a callback queued. Caller holds mu, outside UCX callbacks.
void IssueReadyGroups(Ep* ep);

void MaybeCompleteGroup(Request* group);

// A write lands when the owner acknowledged it and UCX has let go of the local bytes.
void MaybeCompleteWrite(Request* r);

// Flushes pass, and notifications are queued to go, once every transfer numbered below their
// mark has completed.
void CheckBarriers(Conn* c);

void TransferSent(void* ucx_request, ucs_status_t status, void* user_data);

// A read's bytes have arrived at `bytes` (UCX's buffer, the request's staging, or where the read
// goes): put where the read goes (to the device, for a staged read) and the read completes.
void LandRead(Request* r, const void* bytes);

void ReadReceived(void* ucx_request, ucs_status_t status, size_t length, void* user_data);

// A chunk read's reply (each range's status, then the served ranges' bytes in order) lands
// where each entry goes; a reply of another shape fails the whole chunk.
void LandChunk(Request* r, const char* reply, size_t size);

void ChunkReceived(void* ucx_request, ucs_status_t status, size_t length, void* user_data);

void NotificationSent(void* ucx_request, ucs_status_t status, void* user_data);

// Tracks a UCX operation `started` on behalf of `r`. Returns false when it failed to start
// (r is then completed with the reason).
bool Started(Request* r, ucs_status_ptr_t started, const char* what);

rayaccel_status Poll(rayaccel_request* handle, rayaccel_error* error);

rayaccel_status Abandon(rayaccel_request* handle, rayaccel_error* error);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_REQUESTS_H_
