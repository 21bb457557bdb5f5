/* Compiled as strict C99 (-std=c99 -pedantic -Werror): the ABI headers must stay plain C. */
#include "rayaccel/host.h"
#include "rayaccel/plugin.h"

/* Uses the macros and helper so that they are compiled, not only parsed. */
size_t rayaccel_abi_c99_check(rayaccel_device_info *info, rayaccel_error *error);
size_t rayaccel_abi_c99_check(rayaccel_device_info *info, rayaccel_error *error) {
  rayaccel_error_set(error, RAYACCEL_STATUS_OK, "ok");
  if (rayaccel_choose_minor(RAYACCEL_ABI_VERSION_MINOR, 0) != 0) return 0; /* a 1.0 plugin */
  return RAYACCEL_HAS_FIELD(info, rayaccel_device_info, health_reason)
             ? RAYACCEL_STRUCT_SIZE(rayaccel_device_info, health_reason)
             : 0;
}

/* The host API's initializer compiles as C99 and sets the struct's size. */
size_t rayaccel_host_c99_check(void);
size_t rayaccel_host_c99_check(void) {
  rayaccel_registry_options options = RAYACCEL_REGISTRY_OPTIONS_INIT;
  return options.struct_size;
}
