// Batches: small entries travel as chunks (one message each way), large ones as transfers,
// host memory of a reader on the owner's host as copied chunks.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_BATCH_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_BATCH_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* a, rayaccel_error* error);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_BATCH_H_
