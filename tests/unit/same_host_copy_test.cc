// The owner's copies between two processes of one host (plugins/common/same_host_copy.h),
// against real processes: a pid is opened only when that process holds the proof, and a copy
// into memory the peer does not have, or into a peer that has exited, fails with the reason
// and harms neither side.
#include "same_host_copy.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rayaccel::plugin {
namespace {

// Laid out identically in this process and a forked child: the child's copy is at the same
// address in its own memory.
std::array<uint8_t, 32> proof;
char inbox[1 << 16];

// A child that keeps what it was forked with until killed; its pid, or -1.
pid_t Child() {
  pid_t pid = fork();
  if (pid == 0) {
    while (true) pause();
  }
  return pid;
}

void Reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

class SameHostCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < proof.size(); ++i) proof[i] = static_cast<uint8_t>(i * 7 + 1);
    std::memset(inbox, 0, sizeof(inbox));
  }
  uint64_t ProofAt() const { return reinterpret_cast<uintptr_t>(proof.data()); }
};

TEST_F(SameHostCopy, APeerHoldingTheProofIsOpenedAndCopiedToAndFrom) {
  pid_t child = Child();
  ASSERT_GT(child, 0);
  std::string why;
  auto p = PeerProcess::Open(child, ProofAt(), proof.data(), proof.size(), &why);
  ASSERT_NE(p, nullptr) << why;
  EXPECT_EQ(p->pid(), child);

  // Into the child's inbox, then back into ours (which the write left untouched).
  std::string sent(40000, 'x');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 26);
  iovec local{sent.data(), sent.size()};
  iovec remote{inbox, sent.size()};
  ASSERT_TRUE(p->Write(&local, &remote, 1, &why)) << why;
  EXPECT_EQ(inbox[0], 0) << "the write went into this process, not the peer";
  iovec back{inbox, sent.size()};
  ASSERT_TRUE(p->Read(&back, &remote, 1, &why)) << why;
  EXPECT_EQ(std::string(inbox, sent.size()), sent);

  // Many ranges at once, more than one system call takes.
  std::vector<iovec> locals, remotes;
  for (size_t i = 0; i < 3000; ++i) {
    locals.push_back({&sent[i % 100], 8});
    remotes.push_back({&inbox[i * 8 % sizeof(inbox)], 8});
  }
  EXPECT_TRUE(p->Write(locals.data(), remotes.data(), locals.size(), &why)) << why;
  Reap(child);
}

TEST_F(SameHostCopy, APidThatDoesNotHoldTheProofIsRefused) {
  pid_t child = Child();
  ASSERT_GT(child, 0);
  std::array<uint8_t, 32> other = proof;
  other[5] ^= 1;  // what a reader lying about its pid would have us expect there
  std::string why;
  EXPECT_EQ(PeerProcess::Open(child, ProofAt(), other.data(), other.size(), &why), nullptr);
  EXPECT_NE(why.find("does not hold the connection's proof"), std::string::npos) << why;
  // An address the child does not map: refused, the child unharmed.
  why.clear();
  EXPECT_EQ(PeerProcess::Open(child, 4096, proof.data(), proof.size(), &why), nullptr);
  EXPECT_NE(why.find("process_vm_readv"), std::string::npos) << why;
  EXPECT_EQ(kill(child, 0), 0) << "the child died";
  Reap(child);
}

TEST_F(SameHostCopy, ThisProcessNoProcessAndAnExitedOneAreRefused) {
  std::string why;
  EXPECT_EQ(PeerProcess::Open(getpid(), ProofAt(), proof.data(), proof.size(), &why), nullptr);
  EXPECT_EQ(PeerProcess::Open(0, ProofAt(), proof.data(), proof.size(), &why), nullptr);
  EXPECT_EQ(PeerProcess::Open(-1, ProofAt(), proof.data(), proof.size(), &why), nullptr);
  pid_t child = Child();
  ASSERT_GT(child, 0);
  Reap(child);
  why.clear();
  EXPECT_EQ(PeerProcess::Open(child, ProofAt(), proof.data(), proof.size(), &why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST_F(SameHostCopy, MemoryThePeerDoesNotHaveOrAPeerThatExitedFailsTheCopy) {
  // The child's page at `guard` is PROT_NONE: a reader naming it (its own mistake, or a lie)
  // gets an error, not a copy into some other memory.
  void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(guard, MAP_FAILED);
  pid_t child = Child();
  ASSERT_GT(child, 0);
  std::string why;
  auto p = PeerProcess::Open(child, ProofAt(), proof.data(), proof.size(), &why);
  ASSERT_NE(p, nullptr) << why;
  char bytes[64] = {1, 2, 3};
  iovec local{bytes, sizeof(bytes)};
  iovec remote{guard, sizeof(bytes)};
  EXPECT_FALSE(p->Write(&local, &remote, 1, &why));
  EXPECT_NE(why.find("process_vm_writev"), std::string::npos) << why;
  // Partly before the guard page, partly in it.
  iovec straddling{static_cast<char*>(guard) - 32, sizeof(bytes)};
  EXPECT_FALSE(p->Write(&local, &straddling, 1, &why));

  // The peer exits: the next copy says so rather than finding whoever has its pid.
  Reap(child);
  iovec into{inbox, sizeof(bytes)};
  EXPECT_FALSE(p->Write(&local, &into, 1, &why));
  EXPECT_NE(why.find("exited"), std::string::npos) << why;
  munmap(guard, 4096);
}

TEST(SameHostCopyEnabled, OnUnlessTheOperatorSaysOff) {
  unsetenv("RAYACCEL_TRANSPORT_SAME_HOST");
  EXPECT_TRUE(SameHostCopyEnabled());
  for (const char* off : {"0", "off", "OFF", "false", "no"}) {
    setenv("RAYACCEL_TRANSPORT_SAME_HOST", off, 1);
    EXPECT_FALSE(SameHostCopyEnabled()) << off;
  }
  for (const char* on : {"1", "on", "yes", ""}) {
    setenv("RAYACCEL_TRANSPORT_SAME_HOST", on, 1);
    EXPECT_TRUE(SameHostCopyEnabled()) << on;
  }
  unsetenv("RAYACCEL_TRANSPORT_SAME_HOST");
}

// A child that makes shared memory (or, `kind`, something posing as it), writes a pattern
// into it, and tells the parent its descriptor and identity through a pipe; then waits.
struct Offer {
  pid_t pid = -1;
  int fd = -1;
  uint64_t device = 0, inode = 0, length = 0;
  void* data = nullptr;  // in the child
};

enum class Kind { kShared, kUnsealed, kRegularFile };

Offer OfferFromChild(Kind kind, uint64_t length) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    Offer o;
    std::unique_ptr<SharedMemory> shared;
    if (kind == Kind::kShared) {
      std::string why;
      shared = SharedMemory::Create(length, &why);
      if (shared == nullptr) _exit(1);
      o.fd = shared->fd();
      o.data = shared->data();
    } else {
      char path[] = "/tmp/rayaccel-shared-XXXXXX";
      o.fd = kind == Kind::kUnsealed ? memfd_create("unsealed", MFD_CLOEXEC) : mkstemp(path);
      if (o.fd < 0 || ftruncate(o.fd, static_cast<off_t>(length)) != 0) _exit(1);
      if (kind == Kind::kRegularFile) unlink(path);
      o.data = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, o.fd, 0);
    }
    struct stat st {};
    fstat(o.fd, &st);
    o.pid = getpid();
    o.device = st.st_dev;
    o.inode = st.st_ino;
    o.length = length;
    std::memset(o.data, 'o', length);
    (void)!write(pipefd[1], &o, sizeof(o));
    while (true) pause();
  }
  close(pipefd[1]);
  Offer o;
  if (pid < 0 || read(pipefd[0], &o, sizeof(o)) != sizeof(o)) o.pid = -1;
  close(pipefd[0]);
  if (o.pid < 0 && pid > 0) Reap(pid);
  return o;
}

TEST(SharedHostMemory, AReaderMapsTheOwnersSealedRegionAndSeesItsBytesBothWays) {
  const uint64_t length = 1 << 20;
  Offer o = OfferFromChild(Kind::kShared, length);
  ASSERT_GT(o.pid, 0);
  std::string why;
  auto m = PeerMemory::Map(o.pid, o.fd, o.device, o.inode, length, &why);
  ASSERT_NE(m, nullptr) << why;
  ASSERT_EQ(m->length(), length);
  EXPECT_EQ(std::string(m->data(), 16), std::string(16, 'o'));
  EXPECT_EQ(m->data()[length - 1], 'o');
  std::memset(m->data(), 'r', 8);  // the owner's memory: another mapping sees it
  auto again = PeerMemory::Map(o.pid, o.fd, o.device, o.inode, length, &why);
  ASSERT_NE(again, nullptr) << why;
  EXPECT_EQ(std::string(again->data(), 9), "rrrrrrrro");
  // The owner gone, the mapping still holds the pages: no fault in the reader.
  Reap(o.pid);
  EXPECT_EQ(m->data()[length - 1], 'o');
  EXPECT_EQ(PeerMemory::Map(o.pid, o.fd, o.device, o.inode, length, &why), nullptr);
}

TEST(SharedHostMemory, ANamedFileThatIsNotTheSealedRegionIsNotMapped) {
  const uint64_t length = 64 << 10;
  Offer o = OfferFromChild(Kind::kShared, length);
  ASSERT_GT(o.pid, 0);
  std::string why;
  // Another identity (a pid that names another process's descriptor), another length, a
  // descriptor the owner does not have, no process at all.
  EXPECT_EQ(PeerMemory::Map(o.pid, o.fd, o.device, o.inode + 1, length, &why), nullptr);
  EXPECT_NE(why.find("not the memory it named"), std::string::npos) << why;
  EXPECT_EQ(PeerMemory::Map(o.pid, o.fd, o.device + 1, o.inode, length, &why), nullptr);
  EXPECT_EQ(PeerMemory::Map(o.pid, o.fd, o.device, o.inode, length * 2, &why), nullptr);
  EXPECT_NE(why.find("not sealed at the region's length"), std::string::npos) << why;
  EXPECT_EQ(PeerMemory::Map(o.pid, o.fd, o.device, o.inode, length / 2, &why), nullptr);
  EXPECT_EQ(PeerMemory::Map(o.pid, 999, o.device, o.inode, length, &why), nullptr);
  EXPECT_EQ(PeerMemory::Map(0, o.fd, o.device, o.inode, length, &why), nullptr);
  EXPECT_EQ(PeerMemory::Map(o.pid, o.fd, o.device, o.inode, 0, &why), nullptr);
  Reap(o.pid);

  // Memory an owner could shrink under the reader's mapping (a fault there would kill the
  // reader): an unsealed memfd, a plain file.
  for (Kind kind : {Kind::kUnsealed, Kind::kRegularFile}) {
    Offer u = OfferFromChild(kind, length);
    ASSERT_GT(u.pid, 0);
    EXPECT_EQ(PeerMemory::Map(u.pid, u.fd, u.device, u.inode, length, &why), nullptr);
    EXPECT_NE(why.find("not sealed"), std::string::npos) << why;
    Reap(u.pid);
  }
}

TEST(SharedHostMemory, TheOwnersRegionCanNeitherShrinkNorGrow) {
  std::string why;
  auto s = SharedMemory::Create(8192, &why);
  ASSERT_NE(s, nullptr) << why;
  EXPECT_NE(ftruncate(s->fd(), 4096), 0);
  EXPECT_NE(ftruncate(s->fd(), 16384), 0);
  EXPECT_NE(fcntl(s->fd(), F_ADD_SEALS, 0), 0) << "the seals are sealed";
  static_cast<char*>(s->data())[8191] = 1;
  EXPECT_EQ(SharedMemory::Create(0, &why), nullptr);
}

}  // namespace
}  // namespace rayaccel::plugin
