// Inside a check's child: the plugin loaded as the registry loads it, and its answers read
// through the registry's own Collector, with the raw strings the Collector normalises kept.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conformance/check_support.h"
#include "model/validate.h"

namespace rayaccel::conformance {
namespace {

// Forwards every sink call to a Collector, recording the raw strings of add_device first (the
// collector stores them normalised).
class Recorder {
 public:
  explicit Recorder(const Collector& collector) : inner_(*collector.sink()) {
    sink.struct_size = sizeof(sink);
    sink.host_context = this;
    sink.add_device = [](void* ctx, const rayaccel_device_info* d) {
      auto* self = static_cast<Recorder*>(ctx);
      self->Record(d);
      return self->inner_.add_device(self->inner_.host_context, d);
    };
    sink.add_attribute = [](void* ctx, const rayaccel_attribute* a) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_attribute(self->inner_.host_context, a);
    };
    sink.add_label = [](void* ctx, rayaccel_string k, rayaccel_string v) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_label(self->inner_.host_context, k, v);
    };
    sink.add_link = [](void* ctx, const rayaccel_link* l) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_link(self->inner_.host_context, l);
    };
    sink.add_domain = [](void* ctx, const rayaccel_domain* d) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_domain(self->inner_.host_context, d);
    };
    sink.set_health = [](void* ctx, uint32_t i, rayaccel_health h, rayaccel_string r) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.set_health(self->inner_.host_context, i, h, r);
    };
    sink.set_env = [](void* ctx, rayaccel_string n, rayaccel_string v) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.set_env(self->inner_.host_context, n, v);
    };
    sink.last_refusal = [](void* ctx) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.last_refusal(self->inner_.host_context);
    };
    sink.explain_no_devices = [](void* ctx, rayaccel_string why) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.explain_no_devices(self->inner_.host_context, why);
    };
  }
  rayaccel_sink sink{};
  std::vector<std::string> pci_bus_ids;               // one per add_device call
  std::map<uint32_t, std::string> accelerator_types;  // by device index, as sent

 private:
  static std::string Text(rayaccel_string s) {
    return s.data != nullptr && s.size <= kMaxStringBytes ? std::string(s.data, s.size) : "";
  }
  void Record(const rayaccel_device_info* d) {
    bool pci = d != nullptr && RAYACCEL_HAS_FIELD(d, rayaccel_device_info, pci_bus_id);
    bool type = d != nullptr && RAYACCEL_HAS_FIELD(d, rayaccel_device_info, accelerator_type);
    pci_bus_ids.push_back(pci ? Text(d->pci_bus_id) : "");
    if (type) accelerator_types.emplace(d->index, Text(d->accelerator_type));
  }
  rayaccel_sink inner_;
};

using Hook = rayaccel_status (*)(rayaccel_plugin_instance*, const rayaccel_sink*, rayaccel_error*);

// Calls a query hook; a non-OK status is a problem unless it passes a refusal back.
std::string Call(const LoadedPlugin& p, Hook hook, const rayaccel_sink* sink, const char* what,
                 const Collector& collector) {
  ErrorBuffer err;
  rayaccel_status rc = hook(p.instance(), sink, &err.error);  // exceptions: see Isolated
  if (rc == RAYACCEL_STATUS_OK) return "";
  if (rc == RAYACCEL_STATUS_INVALID_ARGUMENT && collector.refused_any() && err.text[0] == '\0') {
    return "";
  }
  return std::string(FromPluginStatus(rc, err.text, absl::StrCat(what, " failed")).message());
}

}  // namespace

Loaded Load(const Options& options, bool initialize) {
  Loaded l;
  absl::StatusOr<std::unique_ptr<LoadedPlugin>> p = LoadedPlugin::Open(options.plugin_path);
  if (!p.ok()) {
    l.error = absl::StrCat("does not load: ", p.status().message());
    return l;
  }
  if (initialize) {
    if (absl::Status st = (*p)->Initialize(options.config); !st.ok()) {
      l.error = std::string(st.message());
      return l;
    }
  }
  l.plugin = *std::move(p);
  return l;
}

Discovery Discover(const LoadedPlugin& p, bool labels, bool topology, bool health) {
  Discovery d;
  Collector collector(&d.report);
  Recorder recorder(collector);
  const rayaccel_plugin_api& api = p.api();
  d.error = Call(p, api.discover, &recorder.sink, "discover", collector);
  d.discover_problems = d.report.problems.size();
  if (d.error.empty() && labels && api.get_labels != nullptr) {
    d.error = Call(p, api.get_labels, &recorder.sink, "get_labels", collector);
  }
  if (d.error.empty() && topology && api.get_topology != nullptr) {
    d.error = Call(p, api.get_topology, &recorder.sink, "get_topology", collector);
  }
  if (d.error.empty() && health && api.get_health != nullptr) {
    d.error = Call(p, api.get_health, &recorder.sink, "get_health", collector);
  }
  d.raw_pci = recorder.pci_bus_ids;
  d.raw_types = recorder.accelerator_types;
  return d;
}

std::string Problems(const PluginReport& r) { return absl::StrJoin(r.problems, "; "); }

std::string ProblemsAfterDiscover(const Discovery& d) {
  std::vector<std::string> own(
      d.report.problems.begin() + static_cast<std::ptrdiff_t>(d.discover_problems),
      d.report.problems.end());
  std::string text = absl::StrJoin(own, "; ");
  if (d.discover_problems > 0) {
    text = absl::StrCat(text, text.empty() ? "" : " ",
                        "(discover's own answers were refused too: discovery.answers_valid says "
                        "why)");
  }
  return text;
}

Outcome WithPlugin(const Options& o, const std::function<Outcome(const LoadedPlugin&)>& fn) {
  Loaded l = Load(o);
  if (l.plugin == nullptr) return Outcome::Fail(l.error);
  Outcome outcome = fn(*l.plugin);
  std::shared_ptr<LoadedPlugin> plugin = std::move(l.plugin);
  g_after_verdict = [plugin]() mutable { plugin.reset(); };
  return outcome;
}

Outcome RunIn(const Options& o, const std::function<Outcome(const LoadedPlugin&)>& fn,
              bool quiet_stdout) {
  return Isolated(o, quiet_stdout, [&] { return WithPlugin(o, fn); });
}

}  // namespace rayaccel::conformance
