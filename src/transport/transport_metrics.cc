#include "transport/transport_metrics.h"

#include "absl/strings/str_format.h"
#include "util/prometheus.h"

namespace rayaccel::transport {

std::string MetricsText(const TransportStats& s, const std::string& plugin) {
  PrometheusWriter w;
  const char* ops[] = {"read", "write"};
  // Every direction and path that moved or failed something, and the fabric path always.
  auto each = [&](const std::string& name, auto value) {
    for (int op = 0; op < 2; ++op) {
      for (int path = 0; path < kTransferPaths; ++path) {
        const TransportStats::Transfers& t = s.transfers[op][path];
        const auto p = static_cast<TransferPath>(path);
        if (p != TransferPath::kFabric && t.completed + t.failed == 0) continue;
        w.Sample(name, {{"plugin", plugin}, {"op", ops[op]}, {"path", TransferPathName(p)}},
                 static_cast<double>(value(t)));
      }
    }
  };
  w.Family("rayaccel_transport_transfers_total", "counter",
           "Transfers that landed, by direction and path (a batch's entries each count).");
  each("rayaccel_transport_transfers_total", [](const auto& t) { return t.completed; });
  w.Family("rayaccel_transport_transfer_errors_total", "counter",
           "Transfers that failed: refused, stale, or their peer lost.");
  each("rayaccel_transport_transfer_errors_total", [](const auto& t) { return t.failed; });
  w.Family("rayaccel_transport_bytes_total", "counter", "Bytes of the transfers that landed.");
  each("rayaccel_transport_bytes_total", [](const auto& t) { return t.bytes; });

  w.Family("rayaccel_transport_request_duration_seconds", "histogram",
           "Requests (a transfer, or a whole batch) from issue to their end.");
  for (int op = 0; op < 2; ++op) {
    const TransportStats::Latency& l = s.latency[op];
    uint64_t below = 0;
    for (size_t i = 0; i <= l.bounds.size() && i < l.counts.size(); ++i) {
      below += l.counts[i];
      w.Sample("rayaccel_transport_request_duration_seconds_bucket",
               {{"plugin", plugin},
                {"op", ops[op]},
                {"le", i < l.bounds.size() ? absl::StrFormat("%g", l.bounds[i]) : "+Inf"}},
               static_cast<double>(below));
    }
    w.Sample("rayaccel_transport_request_duration_seconds_sum",
             {{"plugin", plugin}, {"op", ops[op]}}, l.sum_seconds);
    w.Sample("rayaccel_transport_request_duration_seconds_count",
             {{"plugin", plugin}, {"op", ops[op]}}, static_cast<double>(l.count));
  }
  auto one = [&](const std::string& name, const char* type, const std::string& help,
                 uint64_t value) {
    w.Family(name, type, help);
    w.Sample(name, {{"plugin", plugin}}, static_cast<double>(value));
  };
  one("rayaccel_transport_connections", "gauge", "Connections open to peers.", s.connections);
  one("rayaccel_transport_connections_opened_total", "counter", "Connections made to peers.",
      s.connections_opened);
  one("rayaccel_transport_peers_lost_total", "counter",
      "Connections whose peer was lost (died, stopped or cut off) during a transfer.",
      s.peers_lost);
  one("rayaccel_transport_regions", "gauge", "Memory regions registered.", s.regions);
  one("rayaccel_transport_registered_bytes", "gauge", "Bytes of the registered regions.",
      s.registered_bytes);
  one("rayaccel_transport_notifications_sent_total", "counter", "Notifications sent.",
      s.notifications_sent);
  one("rayaccel_transport_notifications_received_total", "counter", "Notifications received.",
      s.notifications_received);
  return w.Take();
}

}  // namespace rayaccel::transport
