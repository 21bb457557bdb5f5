// hwloc's view of this machine, kept as XML between processes: hwloc's own discovery reads every
// PCI device's configuration space (on a virtual machine each read traps to the hypervisor: most
// of `rayaccel discover`'s time), while reading its XML back costs almost nothing. The cache is
// one file per boot and per what sysfs says the machine holds (the PCI devices, the online CPUs
// and NUMA nodes, the network interfaces, hwloc's version) and what of it this process may use
// (its cgroup, its allowed CPUs and memory nodes): any of those changing names another file, so
// a device plugged, a CPU taken offline, another container's limits or a reboot is discovered
// afresh.
//
// The file lives in a folder private to the user ($RAYACCEL_CACHE_DIR, else
// /tmp/rayaccel-<uid>), and is read only when it and its folder belong to the user and nobody
// else may read or write them; anything else is ignored and discovered live.
// RAYACCEL_HWLOC_CACHE=0 (or off, false, no) turns the cache off.
#ifndef RAYACCEL_TOPOLOGY_HWLOC_CACHE_H_
#define RAYACCEL_TOPOLOGY_HWLOC_CACHE_H_

#include <optional>
#include <string>

namespace rayaccel::hwloc_cache {

// Where this machine's XML would be, now; empty when the cache is off or has no usable folder.
std::string PathForThisMachine();

// The XML at `path`, if it is a regular file of the user's that only the user may access.
std::optional<std::string> Read(const std::string& path);

// Stores `xml` at `path` (atomically, mode 0600) and removes the folder's other hwloc XML
// files (older fingerprints). Failures are ignored: the next process discovers live.
void Write(const std::string& path, const std::string& xml);

}  // namespace rayaccel::hwloc_cache

#endif  // RAYACCEL_TOPOLOGY_HWLOC_CACHE_H_
