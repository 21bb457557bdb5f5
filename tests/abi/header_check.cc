// Compiled as C++17 with -pedantic -Werror; the header's static_asserts run here too.
#include "rayaccel/host.h"
#include "rayaccel/plugin.h"

static_assert(RAYACCEL_STATUS_OK == 0 && RAYACCEL_STATUS_ABORTED == 10, "pinned status values");
static_assert(RAYACCEL_LINK_PCIE == 1 && RAYACCEL_LINK_OTHER == 6, "pinned link types");
static_assert(RAYACCEL_PCIE_PATH_PIX == 1 && RAYACCEL_PCIE_PATH_SYS == 5, "pinned path levels");
static_assert(RAYACCEL_HEALTH_UNKNOWN == 0, "absent health must read as unknown");

// The host API's pinned values, and an initializer whose fields line up with the struct.
static_assert(RAYACCEL_ISOLATION_CHILD_PROCESS == 1 && RAYACCEL_PLUGIN_REFUSED == 3,
              "pinned host values");
static_assert(RAYACCEL_OBJECTIVE_REQUEST_FIRST == 1, "pinned objectives");
[[maybe_unused]] static const rayaccel_registry_options kOptions = RAYACCEL_REGISTRY_OPTIONS_INIT;
