// Writes the Prometheus text exposition format (version 0.0.4): a family's HELP and TYPE lines,
// then its samples, label values escaped as the format wants.
#ifndef RAYACCEL_UTIL_PROMETHEUS_H_
#define RAYACCEL_UTIL_PROMETHEUS_H_

#include <map>
#include <string>

namespace rayaccel {

class PrometheusWriter {
 public:
  void Family(const std::string& name, const char* type, const std::string& help);
  // Counts print as integers; other values with nine significant digits.
  void Sample(const std::string& name, const std::map<std::string, std::string>& labels,
              double value);
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace rayaccel

#endif  // RAYACCEL_UTIL_PROMETHEUS_H_
