#include "loader/telemetry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/validate.h"

namespace rayaccel {
namespace {

constexpr size_t kMaxProblems = 16;

// Every other sink call is a plugin confusing its hooks: refused, never a crash.
template <typename... Args>
rayaccel_status NotNow(void* /*ctx*/, Args... /*args*/) noexcept {
  return RAYACCEL_STATUS_INVALID_ARGUMENT;
}

}  // namespace

std::string CheckSample(const DeviceSample& s, const std::set<uint32_t>& reported) {
  const std::string who = absl::StrCat("sample of device ", s.index, ": ");
  if (reported.count(s.index) == 0) return who + "not a device of the last discover";
  if ((s.known & ~kAllSampleFields) != 0)
    return who + absl::StrCat("unknown bits in known ", s.known);
  if ((s.known & RAYACCEL_SAMPLE_UTILIZATION) != 0 && s.utilization_percent > 100) {
    return who + absl::StrCat("utilization ", s.utilization_percent, "% is over 100");
  }
  if ((s.known & RAYACCEL_SAMPLE_MEMORY) != 0 && s.memory_used_bytes > s.memory_total_bytes) {
    return who + absl::StrCat("memory used ", s.memory_used_bytes, " is over its total ",
                              s.memory_total_bytes);
  }
  // Silicon outside -100..250 C is a misread sensor, not a reading.
  if ((s.known & RAYACCEL_SAMPLE_TEMPERATURE) != 0 &&
      (s.temperature_c < -100 || s.temperature_c > 250)) {
    return who + absl::StrCat("temperature ", s.temperature_c, " C is no reading");
  }
  // 100 kW is beyond any accelerator: a unit mistake (microwatts), not a reading.
  if ((s.known & RAYACCEL_SAMPLE_POWER) != 0 && s.power_mw > 100'000'000) {
    return who + absl::StrCat("power ", s.power_mw, " mW is no reading (milliwatts?)");
  }
  return "";
}

SampleCollector::SampleCollector(TelemetryReport* report, std::set<uint32_t> reported)
    : report_(report), reported_(std::move(reported)) {
  sink_.struct_size = sizeof(sink_);
  sink_.host_context = this;
  sink_.add_device = &NotNow<const rayaccel_device_info*>;
  sink_.add_attribute = &NotNow<const rayaccel_attribute*>;
  sink_.add_label = &NotNow<rayaccel_string, rayaccel_string>;
  sink_.add_link = &NotNow<const rayaccel_link*>;
  sink_.add_domain = &NotNow<const rayaccel_domain*>;
  sink_.set_health = &NotNow<uint32_t, rayaccel_health, rayaccel_string>;
  sink_.set_env = &NotNow<rayaccel_string, rayaccel_string>;
  sink_.last_refusal = &LastRefusal;
  sink_.explain_no_devices = &NotNow<rayaccel_string>;
  sink_.add_sample = &AddSample;
  sink_.explain_unknown = &ExplainUnknown;
}

rayaccel_string SampleCollector::LastRefusal(void* ctx) noexcept {
  const std::string& text = static_cast<SampleCollector*>(ctx)->last_refusal_;
  return rayaccel_string{text.data(), text.size()};
}

rayaccel_status SampleCollector::Refuse(std::string why) {
  last_refusal_ = why;
  if (report_->problems.size() < kMaxProblems) {
    report_->problems.push_back(std::move(why));
  } else if (report_->problems.size() == kMaxProblems) {
    report_->problems.push_back("... further problems not listed");
  }
  return RAYACCEL_STATUS_INVALID_ARGUMENT;
}

rayaccel_status SampleCollector::AddSample(void* ctx, const rayaccel_device_sample* in) noexcept {
  auto* self = static_cast<SampleCollector*>(ctx);
  try {
    self->last_refusal_.clear();
    if (in == nullptr || !RAYACCEL_HAS_FIELD(in, rayaccel_device_sample, link_errors)) {
      return self->Refuse(
          absl::StrCat("sample: set struct_size to sizeof(rayaccel_device_sample) (",
                       sizeof(rayaccel_device_sample), " bytes)"));
    }
    DeviceSample s;
    s.index = in->device_index;
    s.known = in->known;
    s.utilization_percent = in->utilization_percent;
    s.power_mw = in->power_mw;
    s.memory_used_bytes = in->memory_used_bytes;
    s.memory_total_bytes = in->memory_total_bytes;
    s.temperature_c = in->temperature_c;
    s.ecc_corrected = in->ecc_corrected;
    s.ecc_uncorrected = in->ecc_uncorrected;
    s.retired_pages = in->retired_pages;
    s.link_errors = in->link_errors;
    if (std::string why = CheckSample(s, self->reported_); !why.empty()) {
      return self->Refuse(std::move(why));
    }
    if (!self->sampled_.insert(s.index).second) {
      return self->Refuse(absl::StrCat("sample of device ", s.index, ": a second one in a call"));
    }
    self->report_->samples.push_back(s);
    return RAYACCEL_STATUS_OK;
  } catch (...) {
    return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
  }
}

rayaccel_status SampleCollector::ExplainUnknown(void* ctx, uint32_t fields,
                                                rayaccel_string reason) noexcept {
  auto* self = static_cast<SampleCollector*>(ctx);
  try {
    self->last_refusal_.clear();
    if (fields == 0 || (fields & ~kAllSampleFields) != 0) {
      return self->Refuse(
          absl::StrCat("explain_unknown: fields ", fields, " are not RAYACCEL_SAMPLE_* bits"));
    }
    if (self->report_->unknown.size() >= 32) return self->Refuse("explain_unknown: too many");
    absl::string_view text(reason.data != nullptr ? reason.data : "",
                           reason.data != nullptr ? std::min(reason.size, kMaxStringBytes) : 0);
    self->report_->unknown[fields] =
        IsValidUtf8(text) ? EscapeControl(text) : std::string("<non-UTF-8 reason>");
    return RAYACCEL_STATUS_OK;
  } catch (...) {
    return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
  }
}

}  // namespace rayaccel
