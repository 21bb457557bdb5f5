// Reading the report encoding of report_codec.h back into rayaccel_sink calls, with nothing
// beyond plugin.h and the standard library: the registry rebuilds a plugin host's report with
// it (through its Collector), and the replay plugin answers a captured node's hooks with it
// (through the host's sink), so both read the one format the same way.
#ifndef RAYACCEL_ISOLATION_REPORT_WALK_H_
#define RAYACCEL_ISOLATION_REPORT_WALK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rayaccel/plugin.h"

namespace rayaccel::isolation {

// Texts the host adds itself (refusals, a hook's failure with the plugin's message).
inline constexpr size_t kMaxNoteBytes = 4096;
inline constexpr size_t kMaxNotes = 256;

// Reads from untrusted bytes: every read is bounds-checked, and a failed read leaves the
// reader failed (every later read returns zero/empty), checked once per item.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t left() const { return in_.size(); }
  // Why the reader failed: "truncated", or the count that did not fit.
  const std::string& error() const { return error_; }
  uint8_t U8();
  uint32_t U32();
  uint64_t U64();
  rayaccel_string Str();
  // A count of items of at least `min_item_bytes` each, within `limit`: refused before any
  // item is read when the bytes left cannot hold that many.
  uint32_t Count(size_t limit, size_t min_item_bytes, const char* what);

 private:
  bool Need(size_t n);
  std::string_view in_;
  bool ok_ = true;
  std::string error_;
};

// Where each section of a report goes; a null sink skips that section's items (they are still
// read and checked for shape).
struct ReportSinks {
  const rayaccel_sink* devices = nullptr;   // add_device, add_attribute
  const rayaccel_sink* topology = nullptr;  // add_link, add_domain
  const rayaccel_sink* labels = nullptr;    // add_label
  const rayaccel_sink* health = nullptr;    // set_health
  const rayaccel_sink* env = nullptr;       // set_env
};

// What the report says beyond its items: the sender's notes, bounded.
struct ReportNotes {
  std::vector<std::string> problems;
  std::vector<std::string> hook_failures;
  bool over_limit = false;
};

// Replays an encoded report into `sinks`. Returns "" when the bytes are one well-formed
// report, else what is wrong with them; sink answers are the sinks' business (a refusing sink
// records its own reasons).
std::string WalkReport(std::string_view bytes, const ReportSinks& sinks, ReportNotes* notes);

}  // namespace rayaccel::isolation

#endif  // RAYACCEL_ISOLATION_REPORT_WALK_H_
