#include "topology/hwloc_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/private_folder.h"

namespace rayaccel::hwloc_cache {
namespace {

// Bumped when what rayaccel asks hwloc for changes (host_topology.cc's filters and components),
// so that a cache written under other settings is not read.
constexpr int kSettings = 1;
constexpr size_t kMaxXmlBytes = size_t{32} << 20;

bool Enabled() {
  const char* v = std::getenv("RAYACCEL_HWLOC_CACHE");
  if (v == nullptr) return true;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

// A small file of /proc or /sys, whole (at most 1 MiB).
std::string ReadSmall(const char* path) {
  std::string out;
  if (FILE* f = std::fopen(path, "re")) {
    char buf[4096];
    for (size_t n; out.size() < (1 << 20) && (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) {
      out.append(buf, n);
    }
    std::fclose(f);
  }
  return out;
}

std::vector<std::string> Names(const char* dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// What the machine holds, as sysfs says it in a few directory reads, and what of it this process
// may use: a change in any of it names another cache file.
uint64_t Fingerprint() {
  std::string facts = absl::StrCat("settings ", kSettings, "\nhwloc ", hwloc_get_api_version(),
                                   "\nboot ", ReadSmall("/proc/sys/kernel/random/boot_id"),
                                   "\ncpus ", ReadSmall("/sys/devices/system/cpu/online"),
                                   "\nnodes ", ReadSmall("/sys/devices/system/node/online"));
  // What this process may use: hwloc's view is restricted to the cgroup's CPUs and nodes.
  const std::string status = ReadSmall("/proc/self/status");
  for (const char* field : {"Cpus_allowed_list:", "Mems_allowed_list:"}) {
    const size_t at = status.find(field);
    if (at != std::string::npos) {
      absl::StrAppend(&facts, "\n", status.substr(at, status.find('\n', at) - at));
    }
  }
  absl::StrAppend(&facts, "\ncgroup ", ReadSmall("/proc/self/cgroup"));
  for (const char* dir : {"/sys/bus/pci/devices", "/sys/class/net"}) {
    absl::StrAppend(&facts, "\n", dir);
    for (const std::string& n : Names(dir)) absl::StrAppend(&facts, " ", n);
  }
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : facts) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The user's and nobody else's: owned by this uid, no access for group or others.
bool Private(const struct stat& st) { return st.st_uid == geteuid() && (st.st_mode & 077) == 0; }

// The cache folder, created private when missing; empty when it exists but is not private.
std::string Folder() {
  const char* env = std::getenv("RAYACCEL_CACHE_DIR");
  std::string dir =
      env != nullptr && *env != '\0' ? std::string(env) : absl::StrCat("/tmp/rayaccel-", geteuid());
  return CheckPrivateFolder(dir, "hwloc's cache").ok() ? dir : "";
}

}  // namespace

std::string PathForThisMachine() {
  if (!Enabled()) return "";
  std::string dir = Folder();
  if (dir.empty()) return "";
  return absl::StrFormat("%s/hwloc-%016x.xml", dir, Fingerprint());
}

namespace {

// The file is a line "rayaccel-hwloc-cache <FNV-1a 64 of the rest, hex>" and hwloc's XML: a
// file cut short, damaged on disk or written by anything else is not handed to hwloc, whose
// XML import aborts its process on some malformed input. (A file forged with the right sum
// needs this user's rights, which can change the process anyway.)
constexpr absl::string_view kHeader = "rayaccel-hwloc-cache ";

uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::optional<std::string> Read(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> out;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && Private(st) && st.st_size > 0 &&
      static_cast<size_t>(st.st_size) <= kMaxXmlBytes) {
    std::string xml(static_cast<size_t>(st.st_size), '\0');
    size_t at = 0;
    while (at < xml.size()) {
      ssize_t n = read(fd, xml.data() + at, xml.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    if (at == xml.size()) out = std::move(xml);
  }
  close(fd);
  if (!out) return std::nullopt;
  // The header and its sum, then the XML it sums.
  size_t eol = out->find('\n');
  uint64_t sum = 0;
  if (eol == std::string::npos || !absl::StartsWith(*out, kHeader) ||
      !absl::SimpleHexAtoi(absl::string_view(*out).substr(kHeader.size(), eol - kHeader.size()),
                           &sum) ||
      sum != Fnv1a64(absl::string_view(*out).substr(eol + 1))) {
    return std::nullopt;
  }
  out->erase(0, eol + 1);
  return out;
}

void Write(const std::string& path, const std::string& xml) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || xml.empty() || xml.size() > kMaxXmlBytes) return;
  const std::string dir = path.substr(0, slash);
  std::string tmp = dir + "/.hwloc-XXXXXX";
  int fd = mkstemp(tmp.data());  // mode 0600
  if (fd < 0) return;
  const std::string file = absl::StrFormat("%s%016x\n%s", kHeader, Fnv1a64(xml), xml);
  size_t at = 0;
  while (at < file.size()) {
    ssize_t n = write(fd, file.data() + at, file.size() - at);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  const bool whole = at == file.size();
  if (close(fd) != 0 || !whole || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return;
  }
  const std::string mine = path.substr(slash + 1);
  for (const std::string& n : Names(dir.c_str())) {
    if (n != mine && n.rfind("hwloc-", 0) == 0 && n.size() > 4 &&
        n.compare(n.size() - 4, 4, ".xml") == 0) {
      unlink((dir + "/" + n).c_str());
    }
  }
}

}  // namespace rayaccel::hwloc_cache
