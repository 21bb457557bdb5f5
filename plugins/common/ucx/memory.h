// Registration: host memory mapped on each fabric, device memory staged through host memory
// where UCX cannot reach it; descriptors; deregistration.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_MEMORY_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_MEMORY_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// Unmaps a region from every fabric; the one that allocated its memory last, since that frees
// it.
void UnmapRegion(Ep* ep, Region* region);

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error);

rayaccel_status DeregisterMemory(rayaccel_memory_region* handle, rayaccel_error* error);

rayaccel_status PackDescriptor(rayaccel_memory_region* handle, const rayaccel_blob_sink* sink,
                               rayaccel_error* error);

// The descriptor's fields, or false when it is not one of ours.
bool ParseDescriptor(rayaccel_blob d, RemoteRegion* r);

// A staged write's bytes, out of the device into host memory of their own before they go.
rayaccel_status StageOutgoing(Ep* ep, const rayaccel_transfer_args& a, uint64_t skip,
                              uint64_t length, Staging* outgoing, rayaccel_error* error);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_MEMORY_H_
