// The owner's copies between two processes of one host (plugins/common/same_host_copy.h),
// against real processes: a pid is opened only when that process holds the proof, and a copy
// into memory the peer does not have, or into a peer that has exited, fails with the reason
// and harms neither side.
#include "same_host_copy.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

}  // namespace
}  // namespace rayaccel::plugin
