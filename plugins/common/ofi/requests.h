// Requests: their completion, batches' entries, flushes' and notifications' barriers, and
// the host's poll and abandon.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_REQUESTS_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_REQUESTS_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

void Complete(Request* r, rayaccel_status status, const std::string& why);

// One entry (or the whole of a single transfer) ended.
void EntryDone(Request* r, uint32_t entry, rayaccel_status status, const std::string& why);

// Flushes and notifications whose earlier transfers have all landed.
void CheckBarriers(Connection* c);

rayaccel_status Poll(rayaccel_request* handle, rayaccel_error* error);

rayaccel_status Abandon(rayaccel_request* handle, rayaccel_error* error);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_REQUESTS_H_
