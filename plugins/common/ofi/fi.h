// libfabric, loaded with dlopen when the first endpoint opens, and the provider and domain an
// endpoint uses.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_FI_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_FI_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <memory>
#include <string>

#include "rayaccel/plugin.h"

namespace rayaccel::plugin::ofi {

// libfabric, loaded when the first endpoint opens. Only these functions are exported symbols;
// the rest of its API (fi_domain, fi_read, fi_cq_read, ...) are inline calls through the
// objects' operation tables. Each is bound at the symbol version this header's structs match
// (FABRIC_1.3 for fi_info), so a newer libfabric cannot hand us a struct of another layout.
struct Fi {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**);
  void (*freeinfo)(fi_info*);
  fi_info* (*dupinfo)(const fi_info*);
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*);
  const char* (*strerror)(int);
};

// Loads `wanted` (empty: libfabric.so.1) on the first call; later calls must name the same
// library, since a process holds one libfabric.
const Fi* LoadFi(const std::string& wanted, rayaccel_status* status, std::string* why);

// After the first endpoint opened.
const Fi& Lib();

std::string ErrorText(ssize_t code);

// A libfabric error as the ABI's status: a peer that went away, or something of ours.
rayaccel_status FromFi(ssize_t code);

// A provider's fabric and domain, shared by every endpoint of the process that chose it: one
// domain per process is what providers expect (shm, for one, named endpoints of two domains
// alike), and it costs nothing.
struct Domain {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  ~Domain() {
    if (domain != nullptr) fi_close(&domain->fid);
    if (fabric != nullptr) fi_close(&fabric->fid);
    if (info != nullptr) Lib().freeinfo(info);
  }
};

// The process's domain on the provider ChooseProvider picks now, opened by the first endpoint
// on it and closed with the last.
std::shared_ptr<Domain> OpenDomain(const Fi& fi, rayaccel_status* status, std::string* why);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_FI_H_
