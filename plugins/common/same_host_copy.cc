#include "same_host_copy.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace rayaccel::plugin {
namespace {

// At most this many ranges per system call (the kernel's UIO_MAXIOV).
constexpr size_t kMaxRanges = 1024;

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

std::string Errno(const char* what, int e) { return std::string(what) + ": " + std::strerror(e); }

}  // namespace

bool SameHostCopyEnabled() {
  const char* v = std::getenv("RAYACCEL_TRANSPORT_SAME_HOST");
  if (v == nullptr) return true;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

std::unique_ptr<PeerProcess> PeerProcess::Open(pid_t pid, uint64_t address, const void* expected,
                                               size_t size, std::string* why) {
  if (pid <= 0 || pid == getpid() || address == 0 || size == 0) {
    *why = "no other process named";
    return nullptr;
  }
  const int pidfd = PidfdOpen(pid);
  if (pidfd < 0) {
    *why = Errno("pidfd_open", errno);
    return nullptr;
  }
  // The pidfd first: if the pid named another process by the time of the read below, the
  // process it named at pidfd_open has died, which Alive() then says.
  std::unique_ptr<PeerProcess> p(new PeerProcess(pid, pidfd));
  std::vector<char> held(size);
  iovec local{held.data(), size};
  iovec remote{InPeer(address), size};
  if (!p->Copy(/*write=*/false, &local, &remote, 1, why)) return nullptr;
  if (std::memcmp(held.data(), expected, size) != 0) {
    *why = "the process does not hold the connection's proof";
    return nullptr;
  }
  return p;
}

PeerProcess::~PeerProcess() { close(pidfd_); }

bool PeerProcess::Alive() const {
  pollfd p{pidfd_, POLLIN, 0};
  return poll(&p, 1, 0) == 0;  // readable once the process has exited
}

bool PeerProcess::Write(const iovec* local, const iovec* remote, size_t count, std::string* why) {
  return Copy(/*write=*/true, local, remote, count, why);
}

bool PeerProcess::Read(const iovec* local, const iovec* remote, size_t count, std::string* why) {
  return Copy(/*write=*/false, local, remote, count, why);
}

bool PeerProcess::Copy(bool write, const iovec* local, const iovec* remote, size_t count,
                       std::string* why) {
  for (size_t at = 0; at < count; at += kMaxRanges) {
    const size_t n = std::min(kMaxRanges, count - at);
    size_t total = 0;
    for (size_t i = at; i < at + n; ++i) total += local[i].iov_len;
    if (!Alive()) {
      *why = "the peer's process has exited";
      return false;
    }
    const ssize_t done = write ? process_vm_writev(pid_, local + at, n, remote + at, n, 0)
                               : process_vm_readv(pid_, local + at, n, remote + at, n, 0);
    if (done < 0) {
      *why = Errno(write ? "process_vm_writev" : "process_vm_readv", errno);
      return false;
    }
    // The kernel stops short only where a page of either side is not there.
    if (static_cast<size_t>(done) != total) {
      *why = "a range is not all mapped in the peer's memory";
      return false;
    }
  }
  return true;
}

}  // namespace rayaccel::plugin
