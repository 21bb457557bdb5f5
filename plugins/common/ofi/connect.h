// The reader's connections: an endpoint's address checked under the key, connect (hello,
// challenge, proof, welcome) and close.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_CONNECT_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_CONNECT_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

rayaccel_status Connect(rayaccel_transport_endpoint* handle, rayaccel_blob peer,
                        rayaccel_connection** out, rayaccel_error* error);

rayaccel_status Close(rayaccel_connection* handle, rayaccel_error* error);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_CONNECT_H_
