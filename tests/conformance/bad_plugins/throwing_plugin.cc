// A C++ plugin that lets an exception escape its discover hook: the C ABI cannot carry it, so
// the process terminates. The conformance suite must report that check as failed and survive.
#include <stdexcept>

#include "rayaccel/plugin.h"

namespace {

struct Instance {};

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error*) {
  args->instance = reinterpret_cast<rayaccel_plugin_instance*>(new Instance());
  return RAYACCEL_STATUS_OK;
}
rayaccel_status Shutdown(rayaccel_plugin_instance* i, rayaccel_error*) {
  delete reinterpret_cast<Instance*>(i);
  return RAYACCEL_STATUS_OK;
}
rayaccel_status Properties(rayaccel_plugin_instance*, rayaccel_plugin_properties* p,
                           rayaccel_error*) {
  p->vendor = {"acme", 4};
  p->resource_name = {"acme_x1", 7};
  return RAYACCEL_STATUS_OK;
}
rayaccel_status Discover(rayaccel_plugin_instance*, const rayaccel_sink*, rayaccel_error*) {
  throw std::runtime_error("vendor library exploded");
}

const rayaccel_plugin_api kApi = {sizeof(rayaccel_plugin_api),
                                  RAYACCEL_ABI_VERSION_MAJOR,
                                  RAYACCEL_ABI_VERSION_MINOR,
                                  {"throws", 6},
                                  0,
                                  &Initialize,
                                  &Shutdown,
                                  &Properties,
                                  &Discover,
                                  nullptr,
                                  nullptr,
                                  nullptr,
                                  nullptr,
                                  nullptr,
                                  nullptr,
                                  nullptr};

}  // namespace

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation* n,
                                                                        rayaccel_error*) {
  n->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  n->chosen_abi_minor = 0;
  n->api = &kApi;
  return RAYACCEL_STATUS_OK;
}
