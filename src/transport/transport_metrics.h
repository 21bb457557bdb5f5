// A transport's counters (Transport::Stats) in the Prometheus text format, as the agent's
// /metrics and `rayaccel transfer --serve --metrics-file` give them (docs/web.md lists them).
#ifndef RAYACCEL_TRANSPORT_TRANSPORT_METRICS_H_
#define RAYACCEL_TRANSPORT_TRANSPORT_METRICS_H_

#include <string>

#include "rayaccel/transport.h"

namespace rayaccel::transport {

std::string MetricsText(const TransportStats& stats, const std::string& plugin);

}  // namespace rayaccel::transport

#endif  // RAYACCEL_TRANSPORT_TRANSPORT_METRICS_H_
