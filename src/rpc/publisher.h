// The agent's end of publishing: keeps a raylet sink up to date with the registry's snapshots.
// One thread; it never blocks discovery, whatever the sink does.
#ifndef RAYACCEL_RPC_PUBLISHER_H_
#define RAYACCEL_RPC_PUBLISHER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rayaccel/registry.h"

namespace rayaccel::rpc {

struct PublisherOptions {
  std::string target;  // a gRPC target: "unix:/run/raylet-accel.sock", "127.0.0.1:PORT"
  // Ray's NodeID, 56 hex digits; empty: the sink names it (a raylet's sink knows its node), so
  // the agent may start before Ray.
  std::string node_id;
  std::string session;  // empty: a random one per Publisher
  std::chrono::milliseconds min_backoff{100};
  std::chrono::milliseconds max_backoff{10000};
  // How long an idle stream goes without a write; bounds how late a restarted sink is noticed.
  std::chrono::milliseconds heartbeat{2000};
  // The agent's newest telemetry sample (unix_ms 0: none yet), sent after the snapshot to a
  // sink that takes it, each new sample once; unset: no telemetry is sent.
  std::function<Telemetry()> telemetry;
  std::string token;           // sent as "authorization: Bearer <token>" when set
  std::string tls_root_certs;  // PEM: connect with TLS, trusting these CAs; empty: plain
};

// After every (re)connect it sends hello and the full current snapshot, then each newer one;
// generations only go forward. Between failed connects it waits an exponentially growing,
// jittered delay. Stopping (the destructor) cancels the stream and joins the thread.
class Publisher {
 public:
  Publisher(PublisherOptions options, Registry* registry);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // The last generation the sink acknowledged holding; 0 before the first ack.
  uint64_t acked_generation() const { return acked_.load(); }
  uint64_t connects() const { return connects_.load(); }  // streams opened
  uint64_t failures() const { return failures_.load(); }  // streams that ended in an error
  uint64_t acks() const { return acks_.load(); }          // snapshots the sink acknowledged
  const std::string& session() const { return options_.session; }
  // The node published as: PublisherOptions::node_id, or the one the sink named; empty until
  // then.
  std::string node_id() const;

 private:
  void Run();
  // One connection's life; returns when the stream breaks or the publisher stops.
  void PublishOnce();

  PublisherOptions options_;
  Registry* registry_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> acked_{0};
  std::atomic<uint64_t> connects_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> acks_{0};
  mutable std::mutex mu_;                   // guards context_ and node_id_
  grpc::ClientContext* context_ = nullptr;  // the live stream's, for cancelling on stop
  std::string node_id_;
  int64_t telemetry_sent_ = 0;  // the newest sample sent (the publishing thread's)
  std::thread thread_;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_PUBLISHER_H_
