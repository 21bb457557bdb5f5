// The reader's side of a connection: a failed connection fails everything on it; transfers
// wait for the owner's description of a region, then go as fi_read or fi_write; every message
// an owner sends a reader.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_READER_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_READER_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

void SendRevoked(Connection* c, uint64_t region);

// The connection is dead for good: everything on it fails with `status`; its channel closes,
// which ends every operation posted on it.
void FailConnection(Connection* c, rayaccel_status status, const std::string& why);

// Starts a transfer once the owner has described its region; or fails it where the owner
// says the region is gone, or the range lies outside what the owner holds.
void Issue(Connection* c, const Pending& p, uint64_t region_id);

// A notification's bytes, for get_notifications (the newest dropped while the queue is full).
void QueueNotification(Endpoint* ep, Reader& in);

void OnConnectionMessage(Connection* c, uint16_t type, Reader& in);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_READER_H_
