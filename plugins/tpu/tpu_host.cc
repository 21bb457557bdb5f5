#include "tpu/tpu_host.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <regex>

#include "tpu/tpu_facts.h"

namespace rayaccel::tpu {
namespace {

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The Google PCI function in an IOMMU group, or nullopt when it holds none.
std::optional<plugin::PciFunction> GoogleFunctionIn(const std::string& group_dir) {
  for (const std::string& name : plugin::Entries(group_dir + "/devices")) {
    std::optional<plugin::PciFunction> f = plugin::ReadPciFunction(group_dir + "/devices/" + name);
    if (f && f->vendor == kGooglePciVendor) return f;
  }
  return std::nullopt;
}

}  // namespace

ChipScan FindChips(const std::string& dev_root, const std::string& sysfs_root) {
  ChipScan scan;
  for (const std::string& name : plugin::Entries(dev_root)) {
    if (name.rfind("accel", 0) != 0 || plugin::IsDirectory(dev_root + "/" + name)) continue;
    Chip chip;
    chip.node = dev_root + "/" + name;
    std::string number = name.substr(5);
    chip.index = AllDigits(number) ? static_cast<uint32_t>(std::stoul(number))
                                   : static_cast<uint32_t>(scan.chips.size());
    chip.pci = plugin::ReadPciFunction(sysfs_root + "/class/accel/" + name + "/device");
    scan.chips.push_back(std::move(chip));
  }
  if (!scan.chips.empty()) {
    std::sort(scan.chips.begin(), scan.chips.end(),
              [](const Chip& a, const Chip& b) { return a.index < b.index; });
    scan.source = "accel";
    return scan;
  }
  std::vector<uint32_t> groups;
  for (const std::string& name : plugin::Entries(dev_root + "/vfio")) {
    if (AllDigits(name)) groups.push_back(static_cast<uint32_t>(std::stoul(name)));
  }
  std::sort(groups.begin(), groups.end());
  size_t others = 0;
  for (uint32_t group : groups) {
    std::optional<plugin::PciFunction> f =
        GoogleFunctionIn(sysfs_root + "/kernel/iommu_groups/" + std::to_string(group));
    if (!f) {
      ++others;
      continue;
    }
    Chip chip;
    chip.index = static_cast<uint32_t>(scan.chips.size());
    chip.node = dev_root + "/vfio/" + std::to_string(group);
    chip.pci = f;
    scan.chips.push_back(std::move(chip));
  }
  if (!scan.chips.empty()) {
    scan.source = "vfio";
  } else if (others > 0) {
    scan.why_none = "no TPU chips: " + std::to_string(others) +
                    " vfio group(s), none of them a Google (0x1ae0) device";
  } else {
    scan.why_none =
        "no TPU chips: no " + dev_root + "/accel<N> and no " + dev_root + "/vfio groups";
  }
  return scan;
}

SliceIdentity ReadSliceIdentity(const EnvLookup& env, const MetadataLookup& metadata,
                                uint64_t chips_on_host) {
  SliceIdentity id;
  // Ray's precedence: the GKE variable when it is set and not empty, else the metadata key.
  auto read = [&](const char* variable, const char* key) -> std::string {
    std::optional<std::string> v = env(variable);
    if (v && !v->empty()) return *v;
    if (key == nullptr) return "";
    return metadata(key).value_or("");
  };

  std::string raw_type = read("TPU_ACCELERATOR_TYPE", "accelerator-type");
  if (!raw_type.empty()) {
    std::optional<std::string> pod = NormalizePodType(raw_type);
    if (pod) {
      id.pod_type = *pod;
      if (FindGeneration(PodGeneration(*pod)) == nullptr) {
        id.problems.push_back("TPU generation " + PodGeneration(*pod) +
                              " is not one this plugin knows; Ray's defaults apply");
      }
    } else {
      id.problems.push_back("accelerator type '" + raw_type +
                            "' is not a TPU pod type (Ray's ^(v|tpu)\\d+[a-zA-Z]*-\\d+$, as "
                            "in v4-16)");
    }
  }

  std::optional<std::string> topology = env("TPU_TOPOLOGY");
  if (topology && !topology->empty()) {
    id.topology = Lower(Trim(*topology));
  } else if (std::optional<std::string> tpu_env = metadata("tpu-env")) {
    static const std::regex kTopology(R"(TOPOLOGY:\s*'([^']+)')");
    std::smatch m;
    if (std::regex_search(*tpu_env, m, kTopology)) id.topology = Lower(m[1].str());
  }

  id.slice_name = Trim(read("TPU_NAME", "instance-id"));

  std::string worker = Trim(read("TPU_WORKER_ID", "agent-worker-number"));
  if (!worker.empty()) {
    if (AllDigits(worker)) {
      id.worker_id = static_cast<uint32_t>(std::stoul(worker));
    } else {
      id.problems.push_back("worker id '" + worker + "' is not a whole number");
    }
  }

  if (std::optional<std::string> hosts = env("TPU_WORKER_HOSTNAMES")) {
    std::string list = *hosts;
    size_t start = 0;
    while (start <= list.size() && !list.empty()) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      std::string h = Trim(list.substr(start, comma - start));
      if (!h.empty()) id.worker_hostnames.push_back(h);
      start = comma + 1;
    }
  }

  // Cross-checks: what Ray would not notice, said in the log.
  if (!id.pod_type.empty()) {
    std::string generation = PodGeneration(id.pod_type);
    uint64_t hosts = PodHosts(id.pod_type);
    if (!id.topology.empty()) {
      if (!IsValidTopology(generation, id.topology)) {
        id.problems.push_back("topology " + id.topology + " is not one Ray lists for " +
                              generation);
      } else if (TopologyChips(id.topology) != PodChips(id.pod_type)) {
        id.problems.push_back("topology " + id.topology + " has " +
                              std::to_string(TopologyChips(id.topology)) + " chips, but " +
                              id.pod_type + " has " + std::to_string(PodChips(id.pod_type)));
      }
    }
    if (id.worker_id && *id.worker_id >= hosts) {
      id.problems.push_back("worker id " + std::to_string(*id.worker_id) + " in a " + id.pod_type +
                            " slice of " + std::to_string(hosts) + " host(s)");
    }
    if (!id.worker_hostnames.empty() && id.worker_hostnames.size() != hosts) {
      id.problems.push_back(std::to_string(id.worker_hostnames.size()) +
                            " TPU_WORKER_HOSTNAMES for a " + id.pod_type + " slice of " +
                            std::to_string(hosts) + " host(s)");
    }
    if (chips_on_host != 0 && chips_on_host != ChipsPerHost(id.pod_type)) {
      id.problems.push_back(std::to_string(chips_on_host) + " chips on this host, but a " +
                            id.pod_type + " host has " + std::to_string(ChipsPerHost(id.pod_type)));
    }
  }
  return id;
}

}  // namespace rayaccel::tpu
