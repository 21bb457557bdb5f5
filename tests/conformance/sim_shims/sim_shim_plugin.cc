// The sim plugin with one thing changed, for tests of the suite that need a working transport
// (everything else is the sim plugin's, loaded from RAYACCEL_SIM_PLUGIN, its table copied
// under SHIM_NAME):
//   SHIM_SLOW          every discover, transfer and batch first sleeps 20 ms (the performance
//                      gate's test: a baseline recorded from the sim plugin must fail it);
//   SHIM_MINOR_ZERO    negotiates ABI 1.0 whatever the host speaks, with a table built for
//                      today's (a vendor's slip: the host then does not use its transport).
// and, for tier 5 (a plugin that tells Ray one thing and does another):
//   SHIM_WRONG_DEVICE  prepare_allocation names the device after each one it is given (GPU 0
//                      is told CUDA_VISIBLE_DEVICES=1), the last one's next being the first;
//   SHIM_STALLS_BIG    a transfer of 4 MiB or more never returns (what the suite's own
//                      transport checks move is smaller: only Ray's ring meets it).
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "rayaccel/plugin.h"

namespace {

void Pause() {
#ifdef SHIM_SLOW
  timespec wait{0, 20 * 1000 * 1000};
  while (nanosleep(&wait, &wait) != 0) {
  }
#endif
}

const rayaccel_plugin_api* g_sim = nullptr;
rayaccel_plugin_api g_api{};
rayaccel_transport_api g_transport{};

rayaccel_status Discover(rayaccel_plugin_instance* instance, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  Pause();
  return g_sim->discover(instance, sink, error);
}

rayaccel_status Transfer(rayaccel_transfer_args* args, rayaccel_error* error) {
  Pause();
#ifdef SHIM_STALLS_BIG
  while (args->length >= (uint64_t{4} << 20)) pause();
#endif
  return g_sim->transport->transfer(args, error);
}

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* args, rayaccel_error* error) {
  Pause();
#ifdef SHIM_STALLS_BIG
  for (uint32_t i = 0; i < args->count; ++i) {
    while (args->entries[i].length >= (uint64_t{4} << 20)) pause();
  }
#endif
  return g_sim->transport->transfer_batch(args, error);
}

#ifdef SHIM_WRONG_DEVICE
rayaccel_status PrepareAllocation(rayaccel_plugin_instance* instance,
                                  rayaccel_allocation_args* args, rayaccel_error* error) {
  (void)instance;
  // The sim plugin's devices are 0..7 in its specs here: the next one, wrapping at 8.
  std::string value;
  for (size_t i = 0; i < args->device_count; ++i) {
    if (args->device_indices[i] >= 8) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no such device");
    }
    value += (i ? "," : "") + std::to_string((args->device_indices[i] + 1) % 8);
  }
  static const char kName[] = "CUDA_VISIBLE_DEVICES";
  return args->sink->set_env(args->sink->host_context, {kName, sizeof(kName) - 1},
                             {value.data(), value.size()});
}
#endif

// The sim plugin's table, negotiated at this header's version; null when it does not load.
const rayaccel_plugin_api* LoadSim(rayaccel_error* error) {
  void* sim = dlopen(RAYACCEL_SIM_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  auto* entry =
      sim != nullptr
          ? reinterpret_cast<rayaccel_plugin_entry_fn>(dlsym(sim, RAYACCEL_PLUGIN_ENTRY_SYMBOL))
          : nullptr;
  rayaccel_negotiation n{};
  n.struct_size = sizeof(n);
  n.host_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  n.host_abi_minor = RAYACCEL_ABI_VERSION_MINOR;
  if (entry == nullptr || entry(&n, error) != RAYACCEL_STATUS_OK || n.api == nullptr ||
      n.chosen_abi_minor != RAYACCEL_ABI_VERSION_MINOR) {
    return nullptr;
  }
  return n.api;
}

}  // namespace

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  if (negotiation->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "built for ABI major 1");
  }
  if (g_sim == nullptr) {
    g_sim = LoadSim(error);
    if (g_sim == nullptr) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_UNAVAILABLE,
                                "cannot load the sim plugin " RAYACCEL_SIM_PLUGIN);
    }
    g_api = *g_sim;
    g_api.name = {SHIM_NAME, sizeof(SHIM_NAME) - 1};
    g_api.discover = Discover;
    g_transport = *g_sim->transport;
    g_transport.transfer = Transfer;
    g_transport.transfer_batch = TransferBatch;
    g_api.transport = &g_transport;
#ifdef SHIM_WRONG_DEVICE
    g_api.prepare_allocation = PrepareAllocation;
#endif
  }
  negotiation->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
#ifdef SHIM_MINOR_ZERO
  negotiation->chosen_abi_minor = 0;
#else
  negotiation->chosen_abi_minor =
      rayaccel_choose_minor(negotiation->host_abi_minor, RAYACCEL_ABI_VERSION_MINOR);
#endif
  negotiation->api = &g_api;
  return RAYACCEL_STATUS_OK;
}
