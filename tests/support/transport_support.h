// What the transport's tests share: opening a plugin's transport, a byte pattern, and waiting
// for a request.
#ifndef RAYACCEL_TESTS_SUPPORT_TRANSPORT_SUPPORT_H_
#define RAYACCEL_TESTS_SUPPORT_TRANSPORT_SUPPORT_H_

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rayaccel/transport.h"

namespace rayaccel::testing {

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

}  // namespace rayaccel::testing

#endif  // RAYACCEL_TESTS_SUPPORT_TRANSPORT_SUPPORT_H_
