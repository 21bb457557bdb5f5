// Copies between an owner and a reader in another process of the same host, made by the owner
// with process_vm_writev / process_vm_readv: one copy, by the kernel, with the owner choosing its
// own side of every range after checking it against its regions. The reader names only its own
// memory, and proves which process it is by holding a value derived from the shared key and the
// connection's nonces at an address it names: a pid that another process sent (a liar, a reader
// in another pid namespace or on another host) holds no such value and gets no copy.
//
// The kernel lets one process copy another's memory only where it could ptrace it (the same
// user, not setuid, not PR_SET_DUMPABLE 0): that is what the path trusts, and nothing more, since
// such a process could read and write the other's memory without rayaccel. A pid may be reused
// once its process has died: the owner holds the reader's pidfd and copies only while it says the
// process lives (checked before each copy; the kernel holds the process it found for the copy's
// length, so only a reuse of the pid between the check and the call, a whole cycle of the pid
// space within microseconds, could misdirect one).
#ifndef RAYACCEL_PLUGINS_COMMON_SAME_HOST_COPY_H_
#define RAYACCEL_PLUGINS_COMMON_SAME_HOST_COPY_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rayaccel::plugin {

// Whether the variable `name` says off: 0, off, false or no, in any case.
bool EnvironmentSaysOff(const char* name);

// Whether the operator left the same-host path on (RAYACCEL_TRANSPORT_SAME_HOST unset, or not
// one of 0, off, false, no): off makes two processes of one host talk as two hosts would, which
// a benchmark of the network path between network namespaces wants.
bool SameHostCopyEnabled();

// An address in the peer's memory, as the kernel's copy takes it: never dereferenced here.
inline void* InPeer(uint64_t address) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

// A reader's process, opened by its owner once the reader proved it is that process.
class PeerProcess {
 public:
  // `pid` if it holds the `size` bytes `expected` at `address`; null with `why` otherwise.
  static std::unique_ptr<PeerProcess> Open(pid_t pid, uint64_t address, const void* expected,
                                           size_t size, std::string* why);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // Copies this process's `local` ranges into the peer's `remote` ranges (Write) or the peer's
  // into ours (Read), each side `count` ranges of the same total. False with `why` when the
  // peer has gone or a range of its is not its memory; a range may then be partly copied.
  bool Write(const iovec* local, const iovec* remote, size_t count, std::string* why);
  bool Read(const iovec* local, const iovec* remote, size_t count, std::string* why);

  pid_t pid() const { return pid_; }

 private:
  PeerProcess(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  bool Alive() const;
  bool Copy(bool write, const iovec* local, const iovec* remote, size_t count, std::string* why);

  pid_t pid_;
  int pidfd_;
};

// Host memory an owner shares with the readers of its host: a region the helper allocates is a
// memfd of exactly its length, sealed so that it can neither shrink nor grow, mapped shared. A
// reader the owner proved to be on its host (above) maps that memfd too and moves bytes with
// memcpy: no system call and no message per transfer. The mapping reaches the region and
// nothing else of the owner's; the reader opens the memfd through /proc/<pid>/fd, which the
// kernel allows where it would allow ptrace (the trust above, no more). Once the owner has let
// the region go, a reader that kept its mapping reaches pages the owner no longer uses.
class SharedMemory {
 public:
  // `length` bytes of zeroed shared memory, or null with `why` (no memfd, no memory).
  static std::unique_ptr<SharedMemory> Create(uint64_t length, std::string* why);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const { return data_; }
  uint64_t length() const { return length_; }
  // What names it to a reader: the descriptor in this process, and the file's identity (so
  // that a reader whose pid names another process, in another pid namespace, maps nothing).
  int fd() const { return fd_; }
  uint64_t device() const { return device_; }
  uint64_t inode() const { return inode_; }

 private:
  SharedMemory() = default;
  void* data_ = nullptr;
  uint64_t length_ = 0;
  int fd_ = -1;
  uint64_t device_ = 0, inode_ = 0;
};

// A reader's mapping of an owner's SharedMemory.
class PeerMemory {
 public:
  // Maps `length` bytes of descriptor `fd` of process `pid`, if that is the sealed memfd
  // (`device`, `inode`) of exactly `length` bytes the owner named; null with `why` otherwise.
  static std::unique_ptr<PeerMemory> Map(pid_t pid, int fd, uint64_t device, uint64_t inode,
                                         uint64_t length, std::string* why);
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  char* data() const { return data_; }
  uint64_t length() const { return length_; }

 private:
  PeerMemory(char* data, uint64_t length) : data_(data), length_(length) {}
  char* data_;
  uint64_t length_;
};

// memcpy as a reader's copies to and from a mapped region make it: glibc's, in pieces where its
// choice of instruction is slow on some machines (same_host_copy.cc).
void CopyMemory(void* to, const void* from, uint64_t length);

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_SAME_HOST_COPY_H_
