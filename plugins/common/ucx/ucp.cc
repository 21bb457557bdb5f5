// libucp, loaded with dlopen when the first endpoint opens, and the operator's UCX_TLS split
// into the two fabrics an endpoint opens.
#include "common/ucx/ucp.h"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "common/plugin_util.h"

namespace rayaccel::plugin::ucx {
namespace {

constexpr char kDefaultUcp[] = "libucp.so.0";

// The libucp this plugin uses: the one the first endpoint asked for. It stays loaded for the
// life of the process (UCX does not support being unloaded); the table of its functions goes
// with this plugin when the plugin is unloaded.
struct LoadedUcp {
  std::once_flag once;
  std::string name;
  void* handle = nullptr;
  Ucp ucp;
};

// A static of the plugin, not a heap object: one would be orphaned each time the plugin is
// unloaded (LeakSanitizer finds it). At process exit only its strings are destroyed, which
// nothing reads once the endpoints are open; the function table is trivially destructible.
LoadedUcp& Loaded() {
  static LoadedUcp l;
  return l;
}

}  // namespace

const Ucp& LoadUcp(const std::string& library, std::string* mismatch) {
  LoadedUcp& l = Loaded();
  const std::string wanted = library.empty() ? kDefaultUcp : library;
  std::call_once(l.once, [&] {
    l.name = wanted;
    Ucp& u = l.ucp;
    l.handle = dlopen(wanted.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* why = dlerror();
      u.error = library.empty() ? "UCX is not installed (" : "cannot load the UCX library (";
      u.error += wanted + ": " + (why != nullptr ? why : "?") + ")";
      return;
    }
#define RAYACCEL_UCP_LOAD(f)                                   \
  u.f = reinterpret_cast<decltype(&::f)>(dlsym(l.handle, #f)); \
  if (u.f == nullptr && u.error.empty()) u.error = wanted + " lacks " #f;
    RAYACCEL_UCP_FUNCTIONS(RAYACCEL_UCP_LOAD)
#undef RAYACCEL_UCP_LOAD
  });
  if (wanted != l.name && l.handle != nullptr) {
    // Another name for the library already loaded is the same library.
    void* same = dlopen(wanted.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (same != nullptr) dlclose(same);
    if (same != l.handle) {
      *mismatch = "this process already uses the UCX library " + l.name + ", not " + wanted +
                  " (one UCX per process)";
    }
  }
  return l.ucp;
}

const Ucp& Lib() { return Loaded().ucp; }

std::string StatusText(ucs_status_t s) { return Lib().ucs_status_string(s); }

rayaccel_status FromUcs(ucs_status_t s) {
  switch (s) {
    case UCS_OK:
      return RAYACCEL_STATUS_OK;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CANCELED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_IO_ERROR:
      return RAYACCEL_STATUS_PEER_LOST;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
    case UCS_ERR_UNSUPPORTED:
      return RAYACCEL_STATUS_UNSUPPORTED;
    case UCS_ERR_INVALID_PARAM:
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    default:
      return RAYACCEL_STATUS_INTERNAL;
  }
}

rayaccel_status FailUcs(rayaccel_error* error, const char* what, ucs_status_t s) {
  return Fail(error, FromUcs(s), std::string(what) + ": " + StatusText(s));
}

namespace {

bool IsLocalTransport(const std::string& t) {
  return t == "posix" || t == "sysv" || t == "self" || t == "sm" || t == "shm" || t == "mm";
}

}  // namespace

Transports SplitTransports(const char* configured) {
  const std::string tls = configured != nullptr ? configured : "";
  if (tls.empty() || tls == "all") return {"self", "^cma,posix,sysv,self"};
  if (tls[0] == '^') {
    std::vector<std::string> excluded = SplitList(tls.substr(1));
    const bool self = std::find(excluded.begin(), excluded.end(), "self") == excluded.end();
    return {self ? "self" : "", tls + ",cma,posix,sysv,self"};
  }
  Transports out;
  for (const std::string& t : SplitList(tls)) {
    if (t == "cma" || t == "xpmem" || t == "knem") continue;
    std::string& into = IsLocalTransport(t) ? out.local : out.network;
    const bool shm = t == "sm" || t == "shm" || t == "mm";
    out.shared_memory = out.shared_memory || shm || t == "posix" || t == "sysv";
    into += (into.empty() ? "" : ",") + (shm ? std::string("posix,sysv") : t);
  }
  return out;
}

}  // namespace rayaccel::plugin::ucx
