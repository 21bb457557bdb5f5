#include "loader/transport_table.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rayaccel {

absl::StatusOr<rayaccel_transport_api> CheckTransportTable(const rayaccel_transport_api* t) {
  if (t == nullptr) return absl::InvalidArgumentError("no transport table");
  if (t->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_transport_api, close)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transport table of ", t->struct_size, " bytes, smaller than ABI 1.1's ",
                     RAYACCEL_STRUCT_SIZE(rayaccel_transport_api, close)));
  }
  rayaccel_transport_api copy{};
  std::memcpy(&copy, t, std::min(t->struct_size, sizeof(copy)));
  copy.struct_size = sizeof(copy);
  std::vector<std::string> missing;
#define RAYACCEL_REQUIRE_HOOK(h) \
  if (copy.h == nullptr) missing.push_back(#h);
  RAYACCEL_REQUIRE_HOOK(open_endpoint)
  RAYACCEL_REQUIRE_HOOK(close_endpoint)
  RAYACCEL_REQUIRE_HOOK(register_memory)
  RAYACCEL_REQUIRE_HOOK(deregister_memory)
  RAYACCEL_REQUIRE_HOOK(pack_descriptor)
  RAYACCEL_REQUIRE_HOOK(connect)
  RAYACCEL_REQUIRE_HOOK(transfer)
  RAYACCEL_REQUIRE_HOOK(notify)
  RAYACCEL_REQUIRE_HOOK(flush)
  RAYACCEL_REQUIRE_HOOK(poll)
  RAYACCEL_REQUIRE_HOOK(abandon)
  RAYACCEL_REQUIRE_HOOK(wait)
  RAYACCEL_REQUIRE_HOOK(get_notifications)
  RAYACCEL_REQUIRE_HOOK(close)
#undef RAYACCEL_REQUIRE_HOOK
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transport hooks left NULL: ", absl::StrJoin(missing, ", ")));
  }
  return copy;
}

}  // namespace rayaccel
