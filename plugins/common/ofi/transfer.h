// The reader's transfers: each checked, then issued once the owner described its region;
// batches, flush and notify.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_TRANSFER_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_TRANSFER_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error);

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error);

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error);

rayaccel_status Flush(rayaccel_connection* handle, rayaccel_request** out, rayaccel_error* error);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_TRANSFER_H_
