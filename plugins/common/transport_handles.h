// The ABI's transport handles (declared, never defined, in plugin.h), as every transport helper
// of plugins/common defines them: each handle starts with the table of the helper that made it,
// so that one plugin can offer several fabrics (transport_fabric.h) and send each call to the
// helper that owns its handle. A helper's own types derive from these.
#ifndef RAYACCEL_PLUGINS_COMMON_TRANSPORT_HANDLES_H_
#define RAYACCEL_PLUGINS_COMMON_TRANSPORT_HANDLES_H_

#include "rayaccel/plugin.h"

struct rayaccel_transport_endpoint {
  const rayaccel_transport_api* helper = nullptr;
};
struct rayaccel_memory_region {
  const rayaccel_transport_api* helper = nullptr;
};
struct rayaccel_connection {
  const rayaccel_transport_api* helper = nullptr;
};
struct rayaccel_request {
  const rayaccel_transport_api* helper = nullptr;
};

#endif  // RAYACCEL_PLUGINS_COMMON_TRANSPORT_HANDLES_H_
