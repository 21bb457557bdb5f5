// What a Neuron host has, as the AWS Neuron driver shows it in sysfs: its devices
// (/sys/class/neuron_device/neuron<N>), the NeuronCores of each, the devices each is wired to,
// and the chip's architecture. A pure function over a /sys and /dev root, so tests run it on
// fixture trees (tests/fixtures/neuron).
#ifndef RAYACCEL_PLUGINS_NEURON_NEURON_HOST_H_
#define RAYACCEL_PLUGINS_NEURON_NEURON_HOST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rayaccel::neuron {

struct NeuronDevice {
  uint32_t index = 0;       // N of neuron<N> and /dev/neuron<N>
  uint32_t core_count = 0;  // NeuronCores on it
  // The Neuron devices it is wired to (the driver's connected_devices); empty when none or
  // when the file cannot be read (it is root's only).
  std::vector<uint32_t> connected;
  bool connected_known = false;
  std::string arch_type;      // info/architecture/arch_type: "NDv2"
  std::string instance_type;  // info/architecture/instance_type: "Trn1"
  std::string device_name;    // info/architecture/device_name: "Trainium1"
  std::string device_node;    // "/dev/neuron3", empty when it is not there
};

struct NeuronScan {
  std::vector<NeuronDevice> devices;  // by index
  std::string why_none;               // with no devices: what was looked at
  std::vector<std::string> problems;  // what did not read right, for the log
};

// The devices under <sysfs_root>/class/neuron_device. A device's cores come from its
// core_count file, else (that file is readable by root only) from its neuron_core<k> metrics
// folders, else from its architecture (2 for NDv1 and NDv2).
NeuronScan FindNeuronDevices(const std::string& sysfs_root, const std::string& dev_root);

// The device memory a NeuronCore's runtime holds now: the driver's per-core counters
// neuron_core<k>/stats/memory_usage/device_mem/<category>/total (bytes in use, one per
// category: tensors, model_code, runtime_memory, ...) summed. nullopt, with why, when the
// folder is absent (a driver without metrics) or a counter is not a number.
std::optional<uint64_t> CoreDeviceMemoryUsed(const std::string& sysfs_root, uint32_t device,
                                             uint32_t core, std::string* why);

// A Neuron device's HBM from its name (info/architecture/device_name), as AWS documents each
// chip: Trainium1 and Inferentia2 32 GiB, Trainium2 96 GiB; 0 when unknown.
uint64_t DeviceHbmBytes(const std::string& device_name);

// "12, 3, 4, 1\n" -> {12, 3, 4, 1}; a malformed entry makes it nullopt-like: `ok` false.
std::vector<uint32_t> ParseConnectedDevices(const std::string& text, bool* ok);

}  // namespace rayaccel::neuron

#endif  // RAYACCEL_PLUGINS_NEURON_NEURON_HOST_H_
