#include "rpc/listen_address.h"

#include "gtest/gtest.h"

namespace rayaccel::rpc {
namespace {

TEST(ListenAddress, UnixSockets) {
  auto a = ParseListenAddress("unix:/run/rayaccel.sock");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->grpc_uri, "unix:/run/rayaccel.sock");
  EXPECT_EQ(a->unix_path, "/run/rayaccel.sock");
  auto bare = ParseListenAddress("/tmp/x.sock");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->grpc_uri, "unix:/tmp/x.sock");
  EXPECT_FALSE(ParseListenAddress("unix:").ok());
}

TEST(ListenAddress, TcpSaysWhetherItIsLoopback) {
  for (const char* ok : {"tcp://127.0.0.1:5000", "tcp://localhost:0", "tcp://[::1]:65535"}) {
    auto a = ParseListenAddress(ok);
    ASSERT_TRUE(a.ok()) << ok << ": " << a.status();
    EXPECT_TRUE(a->unix_path.empty());
    EXPECT_TRUE(a->loopback) << ok;
  }
  EXPECT_EQ(ParseListenAddress("tcp://127.0.0.1:5000")->grpc_uri, "127.0.0.1:5000");
  for (const char* wide : {"tcp://0.0.0.0:5000", "tcp://10.1.2.3:5000", "tcp://[::]:1",
                           "tcp://127.example.com:5000", "tcp://127.0.0.1.nip.io:1"}) {
    auto a = ParseListenAddress(wide);
    ASSERT_TRUE(a.ok()) << wide << ": " << a.status();
    EXPECT_FALSE(a->loopback) << wide;
  }
  EXPECT_FALSE(ParseListenAddress("unix:/x.sock")->loopback);
  for (const char* bad :
       {"tcp://127.0.0.1", "tcp://127.0.0.1:70000", "tcp://:5000", "http://x:1", "sink.sock"}) {
    EXPECT_FALSE(ParseListenAddress(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace rayaccel::rpc
