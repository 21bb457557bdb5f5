// The checks every transport helper of plugins/common makes of the host's arguments before it
// touches a handle: sizes a host of this ABI passes, the fields each call needs, the ABI's
// limits. Each returns OK, or INVALID_ARGUMENT with what the call needs.
#ifndef RAYACCEL_PLUGINS_COMMON_TRANSPORT_ARGS_H_
#define RAYACCEL_PLUGINS_COMMON_TRANSPORT_ARGS_H_

#include <string>

#include "plugin_util.h"
#include "rayaccel/plugin.h"

namespace rayaccel::plugin {

inline rayaccel_status CheckOpenArgs(const rayaccel_endpoint_args* args, rayaccel_error* error) {
  if (args == nullptr ||
      args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_endpoint_args, endpoint) ||
      args->address == nullptr || args->address->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "open_endpoint needs an address sink");
  }
  // No key, no endpoint: a transport that admits whoever connects is never the default.
  if (!RAYACCEL_HAS_FIELD(args, rayaccel_endpoint_args, key) || args->key.data == nullptr ||
      args->key.size < RAYACCEL_TRANSPORT_MIN_KEY || args->key.size > RAYACCEL_TRANSPORT_MAX_BLOB) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "open_endpoint needs a shared key of " +
                    std::to_string(RAYACCEL_TRANSPORT_MIN_KEY) + " to " +
                    std::to_string(RAYACCEL_TRANSPORT_MAX_BLOB) +
                    " bytes (a host of ABI 1.3 or later passes one)");
  }
  return RAYACCEL_STATUS_OK;
}

inline rayaccel_status CheckTransferArgs(const rayaccel_transfer_args* a, rayaccel_error* error) {
  if (a == nullptr || a->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_transfer_args, request) ||
      a->connection == nullptr || a->local == nullptr || a->length == 0 ||
      (a->op != RAYACCEL_TRANSFER_READ && a->op != RAYACCEL_TRANSFER_WRITE)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "transfer needs a connection, a local region, an operation and a length");
  }
  return RAYACCEL_STATUS_OK;
}

inline rayaccel_status CheckBatchArgs(const rayaccel_transfer_batch_args* a,
                                      rayaccel_error* error) {
  if (a == nullptr ||
      a->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_transfer_batch_args, request) ||
      a->connection == nullptr || a->entries == nullptr || a->statuses == nullptr ||
      a->paths == nullptr || a->count == 0 || a->count > RAYACCEL_TRANSPORT_MAX_BATCH ||
      (a->op != RAYACCEL_TRANSFER_READ && a->op != RAYACCEL_TRANSFER_WRITE)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "transfer_batch needs a connection, an operation, 1 to " +
                    std::to_string(RAYACCEL_TRANSPORT_MAX_BATCH) +
                    " entries, and their statuses and paths");
  }
  return RAYACCEL_STATUS_OK;
}

inline rayaccel_status CheckNotifyArgs(const rayaccel_notify_args* a, rayaccel_error* error) {
  if (a == nullptr || a->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_notify_args, request) ||
      a->connection == nullptr || a->message.data == nullptr || a->message.size == 0 ||
      a->message.size > RAYACCEL_TRANSPORT_MAX_NOTIFICATION) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "notify needs a connection and a message of 1 to " +
                    std::to_string(RAYACCEL_TRANSPORT_MAX_NOTIFICATION) + " bytes");
  }
  return RAYACCEL_STATUS_OK;
}

// pack_descriptor, the same in every helper: the region's descriptor (null: no region) to the
// host's sink.
inline rayaccel_status PackDescriptorTo(const std::string* descriptor,
                                        const rayaccel_blob_sink* sink, rayaccel_error* error) {
  if (descriptor == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "pack_descriptor needs a region and a sink");
  }
  return Guard(error, [&] {
    return sink->put(sink->host_context,
                     {reinterpret_cast<const uint8_t*>(descriptor->data()), descriptor->size()});
  });
}

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_TRANSPORT_ARGS_H_
