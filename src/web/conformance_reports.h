// The conformance suite's maturity reports a node keeps (`rayaccel-conformance --report DIR`
// writes DIR/report.json), for the node's page: the agent reads the newest report of each
// plugin from a folder the operator names (`rayaccel serve --conformance-reports DIR`).
#ifndef RAYACCEL_WEB_CONFORMANCE_REPORTS_H_
#define RAYACCEL_WEB_CONFORMANCE_REPORTS_H_

#include <string>

namespace rayaccel::web {

// `{"reports": [{"plugin", "file", "tier", "tier_name", "date", "ray", "rayaccel", "failed":
// [check names]}]}`: for each plugin name, the newest (by its date) of DIR/report.json and
// DIR/*/report.json. A file that is not such a report (malformed, over 4 MiB, a link) is left
// out; an empty or missing folder gives an empty list.
std::string ConformanceReportsJson(const std::string& dir);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_CONFORMANCE_REPORTS_H_
