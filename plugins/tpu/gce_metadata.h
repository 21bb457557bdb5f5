// A minimal client for the GCE metadata server: one HTTP GET with the Metadata-Flavor header,
// a hard deadline, no retries. Discovery must never stall on a host that is not on GCE.
#ifndef RAYACCEL_PLUGINS_TPU_GCE_METADATA_H_
#define RAYACCEL_PLUGINS_TPU_GCE_METADATA_H_

#include <chrono>
#include <optional>
#include <string>

namespace rayaccel::tpu {

// GCE's own: the metadata server is also reachable at 169.254.169.254, which the client uses
// for this host name so that no DNS lookup can stall.
inline constexpr char kDefaultMetadataUrl[] =
    "http://metadata.google.internal/computeMetadata/v1/instance/attributes/";

struct MetadataAnswer {
  std::optional<std::string> value;  // the body of a 200 answer, when not empty
  std::string error;                 // why there is no value: "404", "timed out after 300 ms"
  int http_status = 0;  // the answer's status; 0 when no HTTP answer came (server unusable)
};

// GET base_url + key. `base_url` is http://HOST[:PORT]/PATH/ with a numeric IPv4 host, a
// bracketed IPv6 host or a name. Everything, connecting included, ends within `timeout`.
MetadataAnswer GetMetadata(const std::string& base_url, const std::string& key,
                           std::chrono::milliseconds timeout);

}  // namespace rayaccel::tpu

#endif  // RAYACCEL_PLUGINS_TPU_GCE_METADATA_H_
