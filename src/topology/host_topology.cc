#include "topology/host_topology.h"

#include <fcntl.h>
#include <hwloc.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "model/validate.h"
#include "topology/hwloc_cache.h"
#include "util/installed_program.h"

namespace rayaccel {
namespace {

bool IsHostBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}
bool IsPciBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

std::string BusId(hwloc_obj_t pci) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", pci->attr->pcidev.domain,
                pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return buf;
}

// The PCI device an object belongs to: itself, or an OS device's PCI parent.
hwloc_obj_t PciOf(hwloc_obj_t obj) {
  while (obj != nullptr && obj->type == HWLOC_OBJ_OS_DEVICE) obj = obj->parent;
  return obj != nullptr && obj->type == HWLOC_OBJ_PCI_DEVICE ? obj : nullptr;
}

bool IsNvswitch(hwloc_obj_t pci) {
  return pci != nullptr && pci->subtype != nullptr && std::strcmp(pci->subtype, "NVSwitch") == 0;
}

// Number of PCI bridges strictly between `obj` and its ancestor `top`.
int BridgesBelow(hwloc_obj_t obj, hwloc_obj_t top) {
  int n = 0;
  for (hwloc_obj_t p = obj->parent; p != nullptr && p != top; p = p->parent) {
    if (IsPciBridge(p)) ++n;
  }
  return n;
}

}  // namespace

struct HostTopology::Impl {
  hwloc_topology_t topo = nullptr;
  ~Impl() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }

  hwloc_obj_t Find(const std::string& bus_id) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = found.find(bus_id);
    if (it != found.end()) return it->second;
    unsigned domain = 0, bus = 0, dev = 0, func = 0;
    hwloc_obj_t obj = nullptr;
    if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &func) == 4) {
      obj = hwloc_get_pcidev_by_busid(topo, domain, bus, dev, func);
    }
    if (found.size() >= kMaxCached) found.clear();
    found.emplace(bus_id, obj);
    return obj;
  }

  // The topology never changes once loaded, and an agent asks the same questions on every
  // rescan: answers are kept (bounded; bus ids come from plugins).
  static constexpr size_t kMaxCached = 1 << 16;
  mutable std::mutex mu;
  mutable absl::flat_hash_map<std::string, hwloc_obj_t> found;
  mutable absl::flat_hash_map<std::string, Placement> placements;
  mutable absl::flat_hash_map<std::pair<hwloc_obj_t, hwloc_obj_t>, PciePath> paths;
  mutable std::once_flag nvlinks_once;
  mutable std::vector<Nvlink> nvlinks;

  // The innermost object with both `a` and `b` below it. Not hwloc's
  // hwloc_get_common_ancestor_obj(): it compares depths, which I/O objects do not have (they
  // are negative), and walks past the root when the two sit at different bridge depths.
  static hwloc_obj_t Common(hwloc_obj_t a, hwloc_obj_t b) {
    std::set<hwloc_obj_t> above_a;
    for (hwloc_obj_t p = a; p != nullptr; p = p->parent) above_a.insert(p);
    for (hwloc_obj_t p = b; p != nullptr; p = p->parent) {
      if (above_a.count(p) > 0) return p;
    }
    return nullptr;
  }

  // Network and OpenFabrics OS devices anywhere below `root`.
  void CollectNics(hwloc_obj_t root, std::set<std::string>* out) const {
    for (hwloc_obj_t os = hwloc_get_next_osdev(topo, nullptr); os != nullptr;
         os = hwloc_get_next_osdev(topo, os)) {
      if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
          os->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS) {
        continue;
      }
      for (hwloc_obj_t p = os->parent; p != nullptr; p = p->parent) {
        if (p == root) {
          out->insert(os->name != nullptr ? os->name : "?");
          break;
        }
      }
    }
  }
};

HostTopology::HostTopology(std::unique_ptr<Impl> impl, std::string source)
    : impl_(std::move(impl)), source_(std::move(source)) {}
HostTopology::~HostTopology() = default;

namespace {

// Filters and components for every load: what rayaccel reads, nothing more.
absl::Status Prepare(hwloc_topology_t* topo) {
  if (hwloc_topology_init(topo) != 0) {
    *topo = nullptr;
    return absl::InternalError("hwloc_topology_init failed");
  }
  // Keep every PCI bridge: PCIe path levels are counted from them. Caches are not needed.
  hwloc_topology_set_io_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_cache_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(*topo, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_NONE);
  // Components that only add what rayaccel does not read, at a cost: OpenGL displays (it tries
  // to connect to an X server), OpenCL, CUDA runtime, Level Zero and ROCm SMI devices (the
  // plugins report accelerators themselves). NVML stays: its NVLink matrix is used.
  for (const char* unused : {"gl", "opencl", "cuda", "levelzero", "rsmi"}) {
    hwloc_topology_set_components(*topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, unused);
  }
  return absl::OkStatus();
}

constexpr size_t kMaxXmlBytes = size_t{32} << 20;
constexpr int kChildTimeoutMs = 20000;

absl::StatusOr<std::string> ReadXmlFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read XML topology ", path, ": ", std::strerror(errno)));
  }
  std::string xml;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read XML topology ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    xml.append(buf, static_cast<size_t>(n));
    if (xml.size() > kMaxXmlBytes) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("XML topology ", path, " is over ", kMaxXmlBytes >> 20, " MiB"));
    }
  }
  close(fd);
  return xml;
}

// The last line hwloc (or the C library's assert) wrote, without the program's name.
std::string LastWords(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (size_t nl = text.rfind('\n'); nl != std::string::npos) text.erase(0, nl + 1);
  if (size_t colon = text.find(": ");
      colon != std::string::npos && text.find_first_of(" /", 0) >= colon) {
    text.erase(0, colon + 2);  // "rayaccel: bitmap.c:395: ..." -> "bitmap.c:395: ..."
  }
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return text.size() > 300 ? text.substr(0, 300) + "..." : text;
}

// hwloc 2.9's XML import asserts on some malformed input instead of failing (a bitmap attribute
// such as complete_cpuset=",x00004000": "hwloc_bitmap_sscanf: Assertion `count > 0' failed"),
// and an assertion aborts the whole process. So XML from outside is first loaded by
// rayaccel-hwloc-check (hwloc_check_main.cc), with the same hwloc, the same settings (Prepare)
// and the same bytes: if hwloc aborts, crashes or hangs there, the caller gets an error naming
// the source and what hwloc said; if it loads there, it loads here. That program is started
// with posix_spawn, never fork: this library runs in raylets and Python processes full of
// threads, and fork() runs every library's pthread_atfork handlers (gRPC's join its threads and
// may abort the whole process), while glibc's posix_spawn runs none. It says how it ended on
// a pipe of its own (its fd 3), which no other waitpid() in the process (a raylet's) can take
// from us.
absl::Status ReadsInAChild(const std::string& xml, const std::string& source) {
  const std::string checker = InstalledProgram("rayaccel-hwloc-check");
  if (checker.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source,
                     " not used: rayaccel-hwloc-check, which reads XML from outside before this "
                     "process does, is neither next to this program nor in the bin/ beside "
                     "librayaccel's folder"));
  }
  // Every descriptor the child gets is first moved to >= 10 (close-on-exec), so that no dup2
  // into 0..3 lands on another's source.
  auto high = [](int fd) {
    if (fd < 0) return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return moved;
  };
  int result[2] = {-1, -1}, errors[2] = {-1, -1};
  int input = high(memfd_create("rayaccel-hwloc-xml", MFD_CLOEXEC));
  int failed_errno = input < 0 ? errno : 0;
  if (failed_errno == 0) {
    for (size_t done = 0; done < xml.size();) {
      ssize_t n = pwrite(input, xml.data() + done, xml.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        failed_errno = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  if (failed_errno == 0 && (pipe2(result, O_CLOEXEC) != 0 || pipe2(errors, O_CLOEXEC) != 0)) {
    failed_errno = errno;
  }
  for (int* fd : {&result[0], &result[1], &errors[0], &errors[1]}) *fd = high(*fd);
  auto close_all = [&] {
    for (int fd : {input, result[0], result[1], errors[0], errors[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (failed_errno == 0 && (result[1] < 0 || errors[1] < 0)) failed_errno = errno;
  pid_t child = -1;
  if (failed_errno == 0) {
    char* argv[] = {const_cast<char*>(checker.c_str()), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, input, 0);  // dup2 clears close-on-exec
    posix_spawn_file_actions_adddup2(&actions, errors[1], 1);
    posix_spawn_file_actions_adddup2(&actions, errors[1], 2);
    posix_spawn_file_actions_adddup2(&actions, result[1], 3);
    posix_spawn_file_actions_addclosefrom_np(&actions, 4);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    failed_errno = posix_spawn(&child, checker.c_str(), &actions, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
  }
  if (failed_errno != 0) {
    close_all();
    return absl::InternalError(
        absl::StrCat("cannot check ", source, " in ", checker, ": ", std::strerror(failed_errno)));
  }
  close(input);
  close(result[1]);
  close(errors[1]);
  char verdict = 0;
  std::string said;
  bool result_open = true, errors_open = true, timed_out = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kChildTimeoutMs);
  while (result_open || errors_open) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{result_open ? result[0] : -1, POLLIN, 0},
                     {errors_open ? errors[0] : -1, POLLIN, 0}};
    int r = poll(fds, 2, left);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    char buf[4096];
    if (fds[0].revents != 0) {
      ssize_t n = read(result[0], buf, sizeof(buf));
      if (n > 0) verdict = buf[0];
      if (n == 0 || (n < 0 && errno != EINTR)) result_open = false;
    }
    if (fds[1].revents != 0) {
      ssize_t n = read(errors[0], buf, sizeof(buf));
      if (n > 0 && said.size() < 65536) said.append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR)) errors_open = false;
    }
  }
  close(result[0]);
  close(errors[0]);
  if (timed_out) kill(child, SIGKILL);
  int status = 0;
  bool reaped = false;
  for (;;) {
    pid_t r = waitpid(child, &status, 0);
    if (r == child) reaped = true;
    if (r >= 0 || errno != EINTR) break;
  }
  if (verdict == 'O') return absl::OkStatus();
  std::string what = LastWords(said);
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("hwloc did not finish reading ", source, " in ",
                                                    kChildTimeoutMs / 1000, " s; not used"));
  }
  if (verdict == 'E') {
    return absl::InvalidArgumentError(
        absl::StrCat("hwloc cannot read ", source, what.empty() ? "" : ": ", what));
  }
  if (reaped && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return absl::InternalError(
        absl::StrCat("cannot run ", checker, " to check ", source, what.empty() ? "" : ": ", what));
  }
  std::string how = reaped && WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "it died";
  return absl::InvalidArgumentError(absl::StrCat("hwloc aborted reading ", source, " (", how,
                                                 what.empty() ? "" : ": ", what, "); not used"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostTopology>> HostTopology::LoadXml(const std::string& xml,
                                                                    std::string source) {
  if (xml.size() > kMaxXmlBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is over ", kMaxXmlBytes >> 20, " MiB"));
  }
  if (absl::Status st = ReadsInAChild(xml, source); !st.ok()) return st;
  auto impl = std::make_unique<Impl>();
  if (absl::Status st = Prepare(&impl->topo); !st.ok()) return st;
  // hwloc takes the length with the final NUL, which c_str() provides.
  if (hwloc_topology_set_xmlbuffer(impl->topo, xml.c_str(), static_cast<int>(xml.size() + 1)) !=
          0 ||
      hwloc_topology_load(impl->topo) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hwloc cannot read ", source));
  }
  return std::unique_ptr<HostTopology>(new HostTopology(std::move(impl), std::move(source)));
}

namespace host_topology_internal {

absl::Status LoadXmlHere(const std::string& xml) {
  hwloc_topology_t topo = nullptr;
  if (absl::Status st = Prepare(&topo); !st.ok()) return st;
  bool loaded =
      hwloc_topology_set_xmlbuffer(topo, xml.c_str(), static_cast<int>(xml.size() + 1)) == 0 &&
      hwloc_topology_load(topo) == 0;
  hwloc_topology_destroy(topo);
  return loaded ? absl::OkStatus() : absl::InvalidArgumentError("hwloc cannot read the XML");
}

}  // namespace host_topology_internal

std::string HostTopology::LibraryVersion() {
  const unsigned v = hwloc_get_api_version();
  return absl::StrCat(v >> 16, ".", (v >> 8) & 0xff, ".", v & 0xff);
}

absl::StatusOr<std::string> HostTopology::ExportXml() const {
  char* buffer = nullptr;
  int length = 0;
  if (hwloc_topology_export_xmlbuffer(impl_->topo, &buffer, &length, 0) != 0 || buffer == nullptr) {
    return absl::InternalError("hwloc cannot export the topology as XML");
  }
  std::string xml(buffer, length > 0 ? static_cast<size_t>(length - 1) : 0);  // no final NUL
  hwloc_free_xmlbuffer(impl_->topo, buffer);
  return xml;
}

absl::StatusOr<std::unique_ptr<HostTopology>> HostTopology::Load(const std::string& xml_path) {
  // A file from outside (--hwloc-xml, hwloc's own HWLOC_XMLFILE): read here, then as a buffer,
  // so that the bytes the child checked are the bytes loaded.
  std::string file = xml_path;
  std::string source = "XML " + xml_path;
  if (file.empty()) {
    if (const char* env = std::getenv("HWLOC_XMLFILE"); env != nullptr && *env != '\0') {
      file = env;
      source = absl::StrCat("XML ", env, " (HWLOC_XMLFILE)");
    }
  }
  if (!file.empty()) {
    absl::StatusOr<std::string> xml = ReadXmlFile(file);
    if (!xml.ok()) return xml.status();
    return LoadXml(*xml, std::move(source));
  }
  auto impl = std::make_unique<Impl>();
  if (absl::Status st = Prepare(&impl->topo); !st.ok()) return st;
  source = "this machine";
  // This machine's view, kept between processes (hwloc_cache.h). Not read in a child: only
  // this user's own file, written whole (renamed into place) from hwloc's own export, is read.
  std::string cache = hwloc_cache::PathForThisMachine();
  if (std::optional<std::string> xml = cache.empty() ? std::nullopt : hwloc_cache::Read(cache)) {
    // Read back as this system, with what it supports, so that it is the topology a live load
    // gives.
    auto cached = std::make_unique<Impl>();
    if (Prepare(&cached->topo).ok() &&
        hwloc_topology_set_flags(cached->topo, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM |
                                                   HWLOC_TOPOLOGY_FLAG_IMPORT_SUPPORT) == 0 &&
        hwloc_topology_set_xmlbuffer(cached->topo, xml->c_str(),
                                     static_cast<int>(xml->size() + 1)) == 0 &&
        hwloc_topology_load(cached->topo) == 0) {
      return std::unique_ptr<HostTopology>(new HostTopology(std::move(cached), source));
    }
    unlink(cache.c_str());  // not hwloc's XML after all: discovered afresh, and rewritten
  }
  if (hwloc_topology_load(impl->topo) != 0) {
    return absl::UnavailableError(
        absl::StrCat("hwloc could not load the topology of ", source, ": ", std::strerror(errno)));
  }
  auto host = std::unique_ptr<HostTopology>(new HostTopology(std::move(impl), source));
  if (!cache.empty()) {
    if (absl::StatusOr<std::string> xml = host->ExportXml(); xml.ok()) {
      hwloc_cache::Write(cache, *xml);
    }
  }
  return host;
}

HostTopology::Placement HostTopology::Locate(const std::string& pci_bus_id) const {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->placements.find(pci_bus_id);
    if (it != impl_->placements.end()) return it->second;
  }
  Placement out = LocateUncached(pci_bus_id);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->placements.size() >= Impl::kMaxCached) impl_->placements.clear();
  impl_->placements.emplace(pci_bus_id, out);
  return out;
}

HostTopology::Placement HostTopology::LocateUncached(const std::string& pci_bus_id) const {
  Placement out;
  hwloc_obj_t pci = impl_->Find(pci_bus_id);
  if (pci == nullptr) return out;
  out.found = true;
  hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(impl_->topo, pci);
  if (local != nullptr && local->cpuset != nullptr) {
    char* list = nullptr;
    if (hwloc_bitmap_list_asprintf(&list, local->cpuset) >= 0 && list != nullptr) {
      out.cpuset = list;
    }
    std::free(list);
  }
  if (local != nullptr && local->nodeset != nullptr && hwloc_bitmap_weight(local->nodeset) == 1) {
    out.numa_node = hwloc_bitmap_first(local->nodeset);
  }
  // Nearest NICs: walk up from the device, through its PCIe switch(es), its host bridge and
  // finally its local CPU/NUMA object; the first level holding any NIC wins.
  std::set<std::string> nics;
  for (hwloc_obj_t p = pci->parent; p != nullptr && nics.empty(); p = p->parent) {
    impl_->CollectNics(p, &nics);
    if (p == local) break;
  }
  out.nearest_nics.assign(nics.begin(), nics.end());
  return out;
}

PciePath HostTopology::PathBetween(const std::string& bus_a, const std::string& bus_b) const {
  hwloc_obj_t a = impl_->Find(bus_a);
  hwloc_obj_t b = impl_->Find(bus_b);
  if (a == nullptr || b == nullptr || a == b) return PciePath::kUnknown;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->paths.find({a, b});
    if (it != impl_->paths.end()) return it->second;
  }
  PciePath path = PathUncached(a, b);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->paths.size() >= Impl::kMaxCached) impl_->paths.clear();
  impl_->paths.emplace(std::make_pair(a, b), path);
  return path;
}

PciePath HostTopology::PathUncached(hwloc_obj_t a, hwloc_obj_t b) const {
  hwloc_obj_t common = impl_->Common(a, b);
  if (common == nullptr) return PciePath::kUnknown;
  if (IsPciBridge(common)) {
    // One switch: each device sits at most one bridge (its downstream port) below the
    // switch's upstream port. More bridges on either side: several switches.
    return BridgesBelow(a, common) <= 1 && BridgesBelow(b, common) <= 1 ? PciePath::kPix
                                                                        : PciePath::kPxb;
  }
  if (IsHostBridge(common)) return PciePath::kPhb;
  if (common->type == HWLOC_OBJ_PCI_DEVICE) return PciePath::kPix;  // functions of one device
  // Above the I/O tree: same NUMA node across host bridges, or across the SMP interconnect.
  hwloc_obj_t la = hwloc_get_non_io_ancestor_obj(impl_->topo, a);
  hwloc_obj_t lb = hwloc_get_non_io_ancestor_obj(impl_->topo, b);
  if (la != nullptr && lb != nullptr && la->nodeset != nullptr && lb->nodeset != nullptr &&
      hwloc_bitmap_weight(la->nodeset) == 1 && hwloc_bitmap_isequal(la->nodeset, lb->nodeset)) {
    return PciePath::kNode;
  }
  return PciePath::kSys;
}

const std::vector<HostTopology::Nvlink>& HostTopology::NvlinkBandwidth() const {
  std::call_once(impl_->nvlinks_once, [this] { impl_->nvlinks = NvlinkUncached(); });
  return impl_->nvlinks;
}

std::vector<HostTopology::Nvlink> HostTopology::NvlinkUncached() const {
  std::vector<Nvlink> out;
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(impl_->topo, "NVLinkBandwidth", &nr, &dist, 0) != 0 || nr == 0) {
    return out;
  }
  const unsigned n = dist->nbobjs;
  std::vector<hwloc_obj_t> pci(n);
  for (unsigned i = 0; i < n; ++i) pci[i] = PciOf(dist->objs[i]);
  auto value = [&](unsigned i, unsigned j) { return dist->values[i * n + j]; };
  auto is_gpu = [&](unsigned i) { return pci[i] != nullptr && !IsNvswitch(pci[i]); };

  // Switch fabrics: NVSwitches joined by NVLink form one component.
  std::vector<int> component(n, -1);
  int components = 0;
  for (unsigned s = 0; s < n; ++s) {
    if (!IsNvswitch(pci[s]) || component[s] >= 0) continue;
    std::vector<unsigned> stack = {s};
    component[s] = components;
    while (!stack.empty()) {
      unsigned x = stack.back();
      stack.pop_back();
      for (unsigned y = 0; y < n; ++y) {
        if (IsNvswitch(pci[y]) && component[y] < 0 && (value(x, y) > 0 || value(y, x) > 0)) {
          component[y] = components;
          stack.push_back(y);
        }
      }
    }
    ++components;
  }
  // Per GPU: bandwidth and link count into each fabric.
  std::vector<std::map<int, std::pair<uint64_t, uint32_t>>> to_fabric(n);
  for (unsigned g = 0; g < n; ++g) {
    if (!is_gpu(g)) continue;
    for (unsigned s = 0; s < n; ++s) {
      if (component[s] >= 0 && value(g, s) > 0) {
        auto& entry = to_fabric[g][component[s]];
        entry.first += std::min<uint64_t>(value(g, s), kMaxLinkBandwidthMbps);
        entry.second += 1;
      }
    }
  }
  for (unsigned i = 0; i < n; ++i) {
    for (unsigned j = i + 1; j < n; ++j) {
      if (!is_gpu(i) || !is_gpu(j) || pci[i] == pci[j]) continue;
      Nvlink link{BusId(pci[i]), BusId(pci[j]),
                  std::min<uint64_t>(std::max(value(i, j), value(j, i)), kMaxLinkBandwidthMbps), 0};
      for (const auto& [fabric, bw_count] : to_fabric[i]) {
        auto other = to_fabric[j].find(fabric);
        if (other == to_fabric[j].end()) continue;
        link.bandwidth_mbps += std::min(bw_count.first, other->second.first);
        // hwloc sums every link to one switch into one value, so links cannot be counted
        // through a fabric (a DGX H100 GPU has 18 links to 4 switches): count stays unknown.
      }
      link.bandwidth_mbps = std::min(link.bandwidth_mbps, kMaxLinkBandwidthMbps);
      if (link.bandwidth_mbps > 0) out.push_back(link);
    }
  }
  hwloc_distances_release(impl_->topo, dist);
  return out;
}

}  // namespace rayaccel
