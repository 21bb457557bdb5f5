// systemd's readiness protocol (sd_notify(3)), for `rayaccel serve` run as a Type=notify
// service: state lines sent as one datagram to $NOTIFY_SOCKET. Without that variable (not
// started by systemd, or not as a notify service) nothing is sent.
#ifndef RAYACCEL_CLI_SD_NOTIFY_H_
#define RAYACCEL_CLI_SD_NOTIFY_H_

#include <chrono>
#include <string>

namespace rayaccel::cli {

// Sends `state` ("READY=1\nSTATUS=...") to $NOTIFY_SOCKET; false when there is none or the
// send failed.
bool SdNotify(const std::string& state);

// The watchdog interval systemd asks for ($WATCHDOG_USEC, for this process per
// $WATCHDOG_PID); zero when there is none. Ping ("WATCHDOG=1") at half of it.
std::chrono::microseconds SdWatchdogInterval();

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_SD_NOTIFY_H_
