#include "same_host_copy.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

bool EnvironmentSaysOff(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "0" || s == "off" || s == "false" || s == "no";
}

bool SameHostCopyEnabled() { return !EnvironmentSaysOff("RAYACCEL_TRANSPORT_SAME_HOST"); }

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

// The seals every shared region carries: a reader's mapping never faults for a file the owner
// shrank under it, and nobody can take the seals off.
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

std::unique_ptr<SharedMemory> SharedMemory::Create(uint64_t length, std::string* why) {
  if (length == 0) {
    *why = "no length";
    return nullptr;
  }
  std::unique_ptr<SharedMemory> s(new SharedMemory());
  s->fd_ = memfd_create("rayaccel-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s->fd_ < 0) {
    *why = Errno("memfd_create", errno);
    return nullptr;
  }
  struct stat st {};
  if (ftruncate(s->fd_, static_cast<off_t>(length)) != 0 ||
      fcntl(s->fd_, F_ADD_SEALS, kSeals) != 0 || fstat(s->fd_, &st) != 0) {
    *why = Errno("sizing and sealing a memfd", errno);
    return nullptr;
  }
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd_, 0);
  if (p == MAP_FAILED) {
    *why = Errno("mmap", errno);
    return nullptr;
  }
  s->data_ = p;
  s->length_ = length;
  s->device_ = st.st_dev;
  s->inode_ = st.st_ino;
  return s;
}

SharedMemory::~SharedMemory() {
  if (data_ != nullptr) munmap(data_, length_);
  if (fd_ >= 0) close(fd_);
}

std::unique_ptr<PeerMemory> PeerMemory::Map(pid_t pid, int fd, uint64_t device, uint64_t inode,
                                            uint64_t length, std::string* why) {
  if (pid <= 0 || fd < 0 || length == 0) {
    *why = "no process, descriptor or length named";
    return nullptr;
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (mine < 0) {
    *why = Errno(("open " + path).c_str(), errno);
    return nullptr;
  }
  struct stat st {};
  const int seals = fcntl(mine, F_GET_SEALS);
  if (fstat(mine, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != device || st.st_ino != inode) {
    close(mine);
    *why = "the owner's descriptor is not the memory it named";
    return nullptr;
  }
  if (seals < 0 || (seals & kSeals) != kSeals || static_cast<uint64_t>(st.st_size) != length) {
    close(mine);
    *why = "the owner's memory is not sealed at the region's length";
    return nullptr;
  }
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
  close(mine);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    *why = Errno("mmap", errno);
    return nullptr;
  }
  return std::unique_ptr<PeerMemory>(new PeerMemory(static_cast<char*>(p), length));
}

PeerMemory::~PeerMemory() { munmap(data_, length_); }

// glibc (2.36) copies from about 2 KiB up with `rep movsb`, which this project's machine (AMD
// EPYC, virtualised) runs at a fraction of its vector speed for some distances between source
// and destination: 16 bytes apart modulo a page, 4 KiB moved at 1.5 GB/s and 64 KiB at 2.0,
// against 60 and 47 GB/s in pieces of 2 KiB, which take glibc's vector loop; a transfer's
// offsets are the caller's, so any distance occurs. Page-aligned pairs lose nothing to the
// pieces (74 against 77 GB/s at 4 KiB, 45 against 42 at 64 KiB). From 1 MiB glibc's own path
// (non-temporal stores) is as fast or faster, so it is left to it.
constexpr uint64_t kCopyPiece = 2048;
constexpr uint64_t kCopyInPiecesBelow = 1 << 20;

void CopyMemory(void* to, const void* from, uint64_t length) {
  if (length <= kCopyPiece || length >= kCopyInPiecesBelow) {
    std::memcpy(to, from, length);
    return;
  }
  // Called through a pointer: the compiler would otherwise inline a copy of at most 2 KiB as
  // `rep movsq`, which is as slow here.
  static void* (*const volatile copy)(void*, const void*, size_t) = std::memcpy;
  auto* out = static_cast<char*>(to);
  const auto* in = static_cast<const char*>(from);
  for (uint64_t at = 0; at < length; at += kCopyPiece) {
    copy(out + at, in + at, std::min(kCopyPiece, length - at));
  }
}

}  // namespace rayaccel::plugin
