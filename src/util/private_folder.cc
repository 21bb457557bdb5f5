#include "util/private_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rayaccel {

absl::Status CheckPrivateFolder(const std::string& dir, absl::string_view use) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(dir, " is not a folder (a link?): refused"));
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, " belongs to another user or others may enter it: refused as ", use));
  }
  return absl::OkStatus();
}

}  // namespace rayaccel
