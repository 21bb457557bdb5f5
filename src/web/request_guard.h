// The web front's decisions about what a client names, before any route runs: whether a Host
// header is a loopback name (the DNS-rebinding guard) and where a browser goes after
// ?token= (never another site). Pure functions of their input, so a fuzz target checks them.
#ifndef RAYACCEL_WEB_REQUEST_GUARD_H_
#define RAYACCEL_WEB_REQUEST_GUARD_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rayaccel::web {

// True when `host_header` (a Host header: host, optional ":port") names what a browser resolves
// to loopback by itself, without asking DNS: `localhost`, an IPv6 literal of ::1 (or of an
// IPv4-mapped 127/8 address), or an IPv4 address in 127/8 in any form the WHATWG URL parser
// reads as one (dotted, fewer parts, octal, hex, a trailing dot). Everything else, names that
// merely begin with "127." included, is a name DNS answers, which a rebinding attacker controls.
bool IsLoopbackHost(absl::string_view host_header);

// The Location for a browser sent on after ?token=, from the request's decoded path: the same
// path on this server, percent-encoded so that no byte a browser drops or rewrites (tab,
// newline, backslash, space, controls) can turn it into another site; "/" when the path is not
// one of this server's (it does not start with exactly one '/').
std::string SameSiteRedirect(absl::string_view decoded_path);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_REQUEST_GUARD_H_
