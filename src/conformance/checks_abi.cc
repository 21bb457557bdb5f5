// The plugin as a file and an entry point: what it exports, where it loads from, how it
// negotiates, the table it gives, and the resource its devices count toward.
#include <dlfcn.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conformance/check_support.h"
#include "conformance/checks.h"
#include "loader/elf_file.h"
#include "model/validate.h"
#include "ray/ray_mapping.h"

namespace rayaccel::conformance {

Outcome ExportsOnlyEntry(const Options& o) {
  absl::StatusOr<std::vector<std::string>> symbols = ExportedSymbols(o.plugin_path);
  if (!symbols.ok()) return Outcome::Fail(std::string(symbols.status().message()));
  std::vector<std::string> extra;
  bool entry = false;
  for (const std::string& s : *symbols) {
    if (s == RAYACCEL_PLUGIN_ENTRY_SYMBOL) {
      entry = true;
    } else {
      extra.push_back(s);
    }
  }
  if (!entry) return Outcome::Fail("rayaccel_plugin_entry is not exported");
  if (!extra.empty()) {
    size_t cxx = std::count_if(extra.begin(), extra.end(),
                               [](const std::string& s) { return s.rfind("_Z", 0) == 0; });
    if (extra.size() > 8) extra.resize(8), extra.push_back("...");
    return Outcome::Fail(
        absl::StrCat("exports more than its entry point (", cxx > 0 ? "C++ symbols included: " : "",
                     absl::StrJoin(extra, ", "), "); use hidden visibility and a version script"));
  }
  return Outcome::Pass();
}

// The registry's own rule (CheckPermissions): the file, its folder and every folder its
// RUNPATH/RPATH names must be writable only by their owner, who must be root or the user.
Outcome FilesTrusted(const Options& o) {
  absl::Status ok = CheckPermissions(o.plugin_path);
  if (ok.ok()) return Outcome::Pass();
  if (absl::IsPermissionDenied(ok)) {
    return Outcome::Fail(absl::StrCat(
        "make every folder the plugin and its libraries load from writable only by its owner "
        "(chmod go-w), or link without a RUNPATH into one that is not; the registry refuses "
        "the plugin: ",
        ok.message()));
  }
  return Outcome::Fail(std::string(ok.message()));
}

Outcome Negotiation(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    void* h = dlopen(o.plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return Outcome::Fail(absl::StrCat("dlopen: ", dlerror()));
    auto entry = reinterpret_cast<rayaccel_plugin_entry_fn>(dlsym(h, RAYACCEL_PLUGIN_ENTRY_SYMBOL));
    if (entry == nullptr) return Outcome::Fail("no entry symbol");
    ErrorBuffer err;
    auto ask = [&](uint32_t major, uint32_t minor, rayaccel_negotiation* n) {
      *n = rayaccel_negotiation{};
      n->struct_size = sizeof(*n);
      n->host_abi_major = major;
      n->host_abi_minor = minor;
      err.text[0] = '\0';
      return entry(n, &err.error);
    };
    // What the plugin answered, in the words a vendor compares with its source.
    auto answered = [&](rayaccel_status rc, const rayaccel_negotiation& n) {
      if (rc != RAYACCEL_STATUS_OK) {
        return absl::StrCat("it returned status ", rc, err.text[0] != '\0' ? " (" : "",
                            EscapeControl(err.text), err.text[0] != '\0' ? ")" : "");
      }
      return absl::StrCat("it chose ", n.chosen_abi_major, ".", n.chosen_abi_minor,
                          n.api == nullptr ? " and gave no table" : "");
    };
    rayaccel_negotiation n;
    rayaccel_status rc = ask(1, 0, &n);
    if (rc != RAYACCEL_STATUS_OK || n.chosen_abi_major != 1 || n.chosen_abi_minor != 0 ||
        n.api == nullptr) {
      const char* fix =
          rc != RAYACCEL_STATUS_OK || n.chosen_abi_major != 1
              ? "answer a 1.0 host with ABI 1.0 and a table (major 1, the same as the host's)"
          : n.chosen_abi_minor != 0
              ? "answer a 1.0 host with ABI 1.0: chosen_abi_minor = "
                "rayaccel_choose_minor(host_abi_minor, yours), not your own minor"
              : "answer a 1.0 host with a table (negotiation->api)";
      return Outcome::Fail(absl::StrCat(fix, "; ", answered(rc, n)));
    }
    rc = ask(1, 99, &n);
    if (rc != RAYACCEL_STATUS_OK || n.chosen_abi_major != 1 || n.api == nullptr ||
        n.chosen_abi_minor > 99) {
      return Outcome::Fail(absl::StrCat(
          "answer a newer 1.x host (1.99) with your own 1.x and a table: ", answered(rc, n)));
    }
    for (uint32_t major : {0u, 2u}) {
      rayaccel_status rc = ask(major, 0, &n);
      if (rc != RAYACCEL_STATUS_INCOMPATIBLE) {
        return Outcome::Fail(absl::StrCat("a major-", major,
                                          " host must be refused with RAYACCEL_STATUS_INCOMPATIBLE"
                                          " (got status ",
                                          rc, ")"));
      }
    }
    return Outcome::Pass();
  });
}

Outcome Table(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    Loaded l = Load(o, /*initialize=*/false);  // Open checks size, major, name, hooks, caps
    return l.plugin == nullptr ? Outcome::Fail(l.error)
                               : Outcome::Pass(absl::StrCat("plugin \"", l.plugin->name(), "\""));
  });
}

// The resource the plugin's devices count toward must be a name Ray takes, and not one of
// Ray's own (CPU, memory, ...): the registry refuses both, so a plugin that passed here would
// fail on every node.
Outcome ResourceName(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    if (!props.ok()) return Outcome::Fail(std::string(props.status().message()));
    const std::string& r = props->resource_name;
    if (absl::Status st = CheckResourceName(r); !st.ok()) {
      return Outcome::Fail(std::string(st.message()));
    }
    if (std::string warning = ForeignResourceWarning(r, props->vendor); !warning.empty()) {
      return Outcome::Warn(warning);
    }
    return Outcome::Pass(r);
  });
}

}  // namespace rayaccel::conformance
