#include "ray/unit_instances.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rayaccel {
namespace {

std::vector<std::string> Entries(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (!entry.empty()) out.emplace_back(entry);
  }
  return out;
}

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A comma-separated list of resource names (letters, digits, '_'), nothing else.
bool IsNameList(absl::string_view s) {
  if (s.empty() || s.front() == ',' || s.back() == ',') return false;
  char previous = ',';
  for (char c : s) {
    if (c == ',' ? previous == ',' : !IsNameChar(c)) return false;
    previous = c;
  }
  return true;
}

}  // namespace

std::optional<std::string> UnitInstanceSetting(const std::vector<std::string>& resources,
                                               absl::string_view rays_list) {
  std::vector<std::string> entries = Entries(rays_list);
  std::set<std::string> counted(entries.begin(), entries.end());
  counted.insert(kRayPredefinedUnitInstances);
  bool added = false;
  for (const std::string& resource : resources) {
    if (resource.empty() || !counted.insert(resource).second) continue;
    entries.push_back(resource);
    added = true;
  }
  if (!added) return std::nullopt;
  return absl::StrJoin(entries, ",");
}

absl::StatusOr<std::string> ReadRayletUnitInstanceDefault(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular, non-empty file"));
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
  }
  absl::string_view bytes(static_cast<const char*>(mapped), size);
  std::set<std::string> found;
  static constexpr absl::string_view kAnchor = "neuron_cores";
  for (size_t at = bytes.find(kAnchor); at != absl::string_view::npos;
       at = bytes.find(kAnchor, at + kAnchor.size())) {
    size_t begin = at;
    while (begin > 0 && (IsNameChar(bytes[begin - 1]) || bytes[begin - 1] == ',')) --begin;
    size_t end = at + kAnchor.size();
    while (end < bytes.size() && (IsNameChar(bytes[end]) || bytes[end] == ',')) ++end;
    // A string literal of its own: NUL before (or the file's start) and after.
    if ((begin > 0 && bytes[begin - 1] != '\0') || end >= bytes.size() || bytes[end] != '\0') {
      continue;
    }
    absl::string_view candidate = bytes.substr(begin, end - begin);
    if (!IsNameList(candidate)) continue;
    std::vector<std::string> entries = Entries(candidate);
    std::set<std::string> names(entries.begin(), entries.end());
    if (names.count("neuron_cores") != 0 && names.count("TPU") != 0) {
      found.emplace(candidate);
    }
  }
  ::munmap(mapped, size);
  if (found.size() == 1) return *found.begin();
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, " holds no list of unit-instance resources (neuron_cores,TPU,...)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path, " holds ", found.size(),
                   " different lists of unit-instance resources: ", absl::StrJoin(found, " | ")));
}

}  // namespace rayaccel
