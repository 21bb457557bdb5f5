// The owner's side: hellos answered with a challenge, readers admitted once they prove the
// key, lookups answered from the live regions, every message a reader sends an owner.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_OWNER_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_OWNER_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

void ClosePeer(Endpoint* ep, uint64_t token);

void OnHello(Endpoint* ep, Reader& in, const uint8_t* message, size_t size);

void OnPeerMessage(Endpoint* ep, Peer* p, uint16_t type, Reader& in);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_OWNER_H_
