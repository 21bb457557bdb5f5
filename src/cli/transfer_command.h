// `rayaccel transfer`: checks the fabric between two processes or nodes through a plugin's
// transport, in the spirit of ib_write_bw and ucx_perftest. One side serves two registered
// buffers and prints a token; the other connects with the token, moves bytes, verifies them
// and prints bandwidth and latency.
#ifndef RAYACCEL_CLI_TRANSFER_COMMAND_H_
#define RAYACCEL_CLI_TRANSFER_COMMAND_H_

namespace rayaccel::cli {

// argv as given to `rayaccel` (argv[1] == "transfer"); returns the process exit code:
// 0 done and verified, 1 a transfer failed or did not verify, 2 usage, 3 the peer was lost.
int RunTransfer(int argc, char** argv);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_TRANSFER_COMMAND_H_
