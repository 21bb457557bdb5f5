// A folder only this user may enter and change: the transport's default key and hwloc's cached
// view of the machine live in one.
#ifndef RAYACCEL_UTIL_PRIVATE_FOLDER_H_
#define RAYACCEL_UTIL_PRIVATE_FOLDER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rayaccel {

// Creates `dir` (mode 0700) when missing; OK once it is a folder, not a link, that this user
// owns and nobody else may enter. Otherwise PermissionDenied saying why, the refusal naming
// `use` ("the key's folder").
absl::Status CheckPrivateFolder(const std::string& dir, absl::string_view use);

}  // namespace rayaccel

#endif  // RAYACCEL_UTIL_PRIVATE_FOLDER_H_
