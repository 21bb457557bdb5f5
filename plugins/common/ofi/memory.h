// Registration: host memory registered with the domain under a key of its own; descriptors;
// deregistration, which every reader told the key confirms.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_MEMORY_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_MEMORY_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error);

rayaccel_status DeregisterMemory(rayaccel_memory_region* handle, rayaccel_error* error);

rayaccel_status PackDescriptor(rayaccel_memory_region* handle, const rayaccel_blob_sink* sink,
                               rayaccel_error* error);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_MEMORY_H_
