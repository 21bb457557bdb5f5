// What the transport's tests share: opening a plugin's transport, a byte pattern, waiting for a
// request, and forging a descriptor.
#ifndef RAYACCEL_TESTS_SUPPORT_TRANSPORT_SUPPORT_H_
#define RAYACCEL_TESTS_SUPPORT_TRANSPORT_SUPPORT_H_

#include <cctype>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rayaccel/transport.h"
#include "support/test_support.h"
#include "transport/descriptor.h"

namespace rayaccel::testing {

// The fabric a parametrised test runs on, set in this process's environment (which the
// processes it starts inherit): a UCX_TLS value ("all", "tcp") for the UCX helper, or
// "libfabric-PROVIDER" for the libfabric helper on that provider (RAYACCEL_TRANSPORT_FABRIC
// and FI_PROVIDER).
inline bool IsLibfabric(const std::string& param) { return param.rfind("libfabric-", 0) == 0; }

class FabricEnv {
 public:
  explicit FabricEnv(const std::string& param) {
    if (IsLibfabric(param)) {
      provider_ = param.substr(10);
      fabric_ = std::make_unique<ScopedEnv>("RAYACCEL_TRANSPORT_FABRIC", "libfabric");
      setting_ = std::make_unique<ScopedEnv>("FI_PROVIDER", provider_.c_str());
    } else {
      tls_ = param;
      setting_ = std::make_unique<ScopedEnv>("UCX_TLS", tls_.c_str());
      fabric_ = std::make_unique<ScopedEnv>("RAYACCEL_TRANSPORT_FABRIC", "ucx");
    }
  }

 private:
  std::string provider_, tls_;
  std::unique_ptr<ScopedEnv> fabric_, setting_;
};

// A test name's part for a fabric parameter ("libfabric-tcp" -> "LibfabricTcp").
inline std::string FabricName(const std::string& param) {
  std::string out;
  bool upper = true;
  for (char ch : param) {
    if (ch == '-' || ch == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    upper = false;
  }
  return out;
}

// The transport of `options.plugin` (a test failure, and null, when it does not open).
inline std::unique_ptr<Transport> OpenTransport(const TransportOptions& options) {
  absl::StatusOr<std::unique_ptr<Transport>> t = Transport::Open(options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

// `size` bytes that differ with `seed` and along the buffer.
inline std::vector<char> Pattern(size_t size, char seed) {
  std::vector<char> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<char>(seed + i * 7 + (i >> 12));
  return v;
}

// The request's outcome, waiting up to `limit`.
inline absl::Status Done(absl::StatusOr<Request> r, absl::Duration limit = absl::Seconds(20)) {
  if (!r.ok()) return r.status();
  return r->Wait(absl::Now() + limit);
}

// The UCX helper's payload (docs/transport.md): magic, version, flags, owner, region, length.
struct Payload {
  std::string bytes;
  void Set64(size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
  }
  uint64_t Get64(size_t at) const {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
    return v;
  }
};

// A forgery: the envelope and the payload as the forger wants them, with a valid checksum;
// empty when not even an envelope the host would write.
inline std::string Forge(const std::string& genuine,
                         const std::function<void(DescriptorInfo&, Payload&)>& edit) {
  absl::StatusOr<transport::Envelope> e = transport::Decode(genuine);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return std::string();
  DescriptorInfo info = e->info;
  Payload p{std::string(e->payload)};
  edit(info, p);
  absl::StatusOr<std::string> forged = transport::Encode(info, p.bytes);
  return forged.ok() ? *forged : std::string();
}

}  // namespace rayaccel::testing

#endif  // RAYACCEL_TESTS_SUPPORT_TRANSPORT_SUPPORT_H_
