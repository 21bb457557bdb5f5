// libfabric, loaded with dlopen when the first endpoint opens, and the provider and domain an
// endpoint uses.
#include "common/ofi/fi.h"

#include <dlfcn.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/plugin_util.h"

namespace rayaccel::plugin::ofi {
namespace {

struct LoadedFi {
  std::mutex mu;
  void* handle = nullptr;
  std::string library;
  std::string problem;  // why it did not load
  Fi fi{};
};

LoadedFi& Loaded() {
  // Never destroyed: endpoints' threads may outlive static destruction at exit.
  static LoadedFi* loaded = new LoadedFi;
  return *loaded;
}

template <typename F>
bool Bind(void* handle, const char* name, const char* version, F* out) {
  *out = reinterpret_cast<F>(dlvsym(handle, name, version));
  return *out != nullptr;
}

}  // namespace

const Fi* LoadFi(const std::string& wanted, rayaccel_status* status, std::string* why) {
  LoadedFi& l = Loaded();
  std::lock_guard<std::mutex> lock(l.mu);
  const std::string name = wanted.empty() ? "libfabric.so.1" : wanted;
  if (l.handle != nullptr) {
    if (name == l.library) return &l.fi;
    *status = RAYACCEL_STATUS_INVALID_ARGUMENT;
    *why = "this process loaded " + l.library + " already; an endpoint cannot use " + name;
    return nullptr;
  }
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    const char* e = dlerror();
    *why = "libfabric is not installed (" + std::string(e != nullptr ? e : name) + ")";
    return nullptr;
  }
  Fi fi{};
  if (!Bind(handle, "fi_getinfo", "FABRIC_1.3", &fi.getinfo) ||
      !Bind(handle, "fi_freeinfo", "FABRIC_1.3", &fi.freeinfo) ||
      !Bind(handle, "fi_dupinfo", "FABRIC_1.3", &fi.dupinfo) ||
      !Bind(handle, "fi_fabric", "FABRIC_1.1", &fi.fabric) ||
      !Bind(handle, "fi_strerror", "FABRIC_1.0", &fi.strerror)) {
    dlclose(handle);
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    *why = name + " is not a libfabric of API 1.3 or later (fi_getinfo@FABRIC_1.3 is missing)";
    return nullptr;
  }
  l.handle = handle;
  l.library = name;
  l.fi = fi;
  return &l.fi;
}

const Fi& Lib() { return Loaded().fi; }

std::string ErrorText(ssize_t code) {
  const int c = static_cast<int>(code < 0 ? -code : code);
  return std::string(Lib().strerror(c)) + " (" + std::to_string(c) + ")";
}

rayaccel_status FromFi(ssize_t code) {
  switch (static_cast<int>(code < 0 ? -code : code)) {
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_ETIMEDOUT:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_EADDRNOTAVAIL:
    case FI_ECANCELED:
    case FI_EIO:
      return RAYACCEL_STATUS_PEER_LOST;
    case FI_EACCES:
    case FI_EKEYREJECTED:
    case FI_EINVAL:
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    case FI_ENOMEM:
    case FI_ENOSPC:
      return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
      return RAYACCEL_STATUS_UNSUPPORTED;
    default:
      return RAYACCEL_STATUS_INTERNAL;
  }
}

// Why the shm provider is never used (found by the transport tests, libfabric 1.17): a sender
// takes a spinlock in the receiver's shared segment, so a peer killed or stopped while it
// holds its own lock (as it does while serving a transfer) stops every sender to it forever,
// inside libfabric, past any peer timeout; and two endpoints of one process crashed it.
constexpr char kShmRefused[] =
    "libfabric's shm provider is not used: a peer killed or stopped while holding its queue's "
    "lock hangs every sender to it (libfabric 1.17); use FI_PROVIDER=tcp, or the UCX fabric";

// The first provider libfabric offers for one-sided RMA and messages on a reliable
// datagram endpoint. Registrations are offsets into the region (no FI_MR_VIRT_ADDR) where the
// provider allows it; providers that require virtual addresses (verbs, efa) check the range
// in the NIC, software ones (tcp) against the registration.
static fi_info* ChooseProvider(const Fi& fi, std::string* why) {
  fi_info* hints = fi.dupinfo(nullptr);
  if (hints == nullptr) {
    *why = "fi_dupinfo failed";
    return nullptr;
  }
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE;  // endpoints of a process share it
  hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  // FI_PROVIDER as each endpoint opens: libfabric reads it once, when the process first calls
  // it, to decide which providers load at all; here it picks among those.
  // A list or an exclusion ("tcp,shm", "^psm2") is libfabric's filter alone.
  if (const char* named = std::getenv("FI_PROVIDER");
      named != nullptr && named[0] != '\0' && std::strpbrk(named, ",^") == nullptr) {
    hints->fabric_attr->prov_name = strdup(named);
  }
  fi_info* info = nullptr;
  int rc = fi.getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  if (rc != 0 || info == nullptr) {
    // Hardware providers: their registrations name virtual addresses, checked by the NIC.
    hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    rc = fi.getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    if (rc == 0 && info != nullptr) {
      const std::string name = info->fabric_attr->prov_name;
      if (name.find("shm") != std::string::npos || name.find("tcp") != std::string::npos ||
          name.find("sockets") != std::string::npos || name.find("udp") != std::string::npos) {
        fi.freeinfo(info);
        info = nullptr;
        rc = -FI_ENODATA;
      }
    }
  }
  fi.freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    const char* chosen = std::getenv("FI_PROVIDER");
    *why = "libfabric offers no provider with reliable one-sided RMA and messages" +
           std::string(chosen != nullptr ? std::string(" among FI_PROVIDER=") + chosen : "") +
           " (" + ErrorText(rc != 0 ? rc : FI_ENODATA) + ")";
    return nullptr;
  }
  // libfabric's preference, first, but never shm (kShmRefused).
  const fi_info* chosen = info;
  while (chosen != nullptr && std::strcmp(chosen->fabric_attr->prov_name, "shm") == 0) {
    chosen = chosen->next;
  }
  if (chosen == nullptr) {
    fi.freeinfo(info);
    *why = kShmRefused;
    return nullptr;
  }
  fi_info* first = fi.dupinfo(chosen);
  fi.freeinfo(info);
  return first;
}

std::shared_ptr<Domain> OpenDomain(const Fi& fi, rayaccel_status* status, std::string* why) {
  static std::mutex mu;
  static auto* open = new std::map<std::string, std::weak_ptr<Domain>>;
  fi_info* info = ChooseProvider(fi, why);
  if (info == nullptr) {
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    return nullptr;
  }
  const std::string name = std::string(info->fabric_attr->prov_name) + "/" +
                           (info->fabric_attr->name != nullptr ? info->fabric_attr->name : "") +
                           "/" +
                           (info->domain_attr->name != nullptr ? info->domain_attr->name : "");
  std::lock_guard<std::mutex> lock(mu);
  if (std::shared_ptr<Domain> d = (*open)[name].lock()) {
    fi.freeinfo(info);
    return d;
  }
  auto d = std::make_shared<Domain>();
  d->info = info;
  int rc = fi.fabric(info->fabric_attr, &d->fabric, nullptr);
  if (rc == 0) rc = fi_domain(d->fabric, info, &d->domain, nullptr);
  if (rc != 0) {
    *status = RAYACCEL_STATUS_UNAVAILABLE;
    *why =
        "opening libfabric's " + std::string(info->fabric_attr->prov_name) + ": " + ErrorText(rc);
    return nullptr;
  }
  (*open)[name] = d;
  return d;
}

}  // namespace rayaccel::plugin::ofi
