// `rayaccel ray-start-args --env`: the variables to start today's Ray with, so that its own
// accelerator managers learn exactly the devices rayaccel counts.
#ifndef RAYACCEL_CLI_RAY_START_ENV_H_
#define RAYACCEL_CLI_RAY_START_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rayaccel/registry.h"

namespace rayaccel::cli {

// What a family's devices set in a worker: the plugin's prepare_allocation, asked here or of
// the agent.
using PrepareAllocationFn = std::function<absl::StatusOr<std::map<std::string, std::string>>(
    const std::vector<std::string>& device_ids, uint64_t generation)>;

// `ray-start-args --env`: the variables to start Ray with so that it learns exactly the devices
// rayaccel counts (Ray reads the visible-devices variable at `ray start` as the node's device
// ids): per family, what prepare_allocation sets for the counted devices; the variable empty
// when the family counts none; nothing for a family given whole (the plugin sets nothing).
// For a family Ray does not count by device (its raylet tells such a task instance 0 whatever
// it holds: ray/unit_instances.h), RAY_custom_unit_instance_resources, `rays_list` with the
// node's new resources appended; and, since Ray has no manager of its own to set such a
// family's variable in a worker, RAYACCEL_RAY_MANAGERS=1 unless `managers_on` (the variable is
// set already). Shell-quoted NAME='value' pairs on one line, or "" when there are none.
absl::StatusOr<std::string> RayStartEnvironment(const NodeSnapshot& snapshot,
                                                const PrepareAllocationFn& prepare,
                                                absl::string_view rays_list, bool managers_on);

// The resources of the node that Ray, with `rays_list`, counts as one pool rather than by
// device: those the variable above adds.
std::vector<std::string> ResourcesRayDoesNotCountByDevice(const NodeSnapshot& snapshot,
                                                          absl::string_view rays_list);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_RAY_START_ENV_H_
