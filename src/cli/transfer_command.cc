#include "cli/transfer_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "rayaccel/transport.h"
#include "transport/transport_metrics.h"
#include "util/command_line.h"

namespace rayaccel::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitPeerLost = 3;
constexpr int kExitRefused = 4;

constexpr char kUsage[] = R"(usage: rayaccel transfer --serve [options]
       rayaccel transfer --connect TOKEN [options]

Moves bytes between two processes through a plugin's transport (UCX for the in-tree plugins)
and verifies them. --serve registers a buffer to read from and one to write to, prints a
token (or writes it to --token-file) and serves until SIGINT or SIGTERM, checking each write
its notification announces. --connect reads or writes --size bytes --iters times and prints
bandwidth and per-transfer latency.

Options:
  --plugin NAME|PATH       the plugin whose transport to use (default: sim)
  --plugin-path DIR[:DIR]  where to look for it
  --config KEY=VALUE       the plugin's configuration (repeatable)
  --size BYTES             bytes per transfer: 8, 4KiB, 64MiB, 1GiB (default 1MiB); the
                           server's buffers have this size, a client's transfers at most it
  --op read|write          a client's operation (default read: a pull, as Ray's RDT does)
  --iters N                timed transfers (default 100), after --warmup N (default 10)
  --batch N                a client's transfers per request (default 1): N entries of --size
                           each, back to back, posted as one batch (prepared once); the
                           server's --size must be at least N times the client's
  --same-range             with --batch: every entry moves the same range, the first --size
                           bytes of both buffers (as ucx_perftest -O N repeats one buffer),
                           which stays in the cache: a transfer's own cost, not memory's
  --fabric ucx|libfabric   the plugin's fabric (default: RAYACCEL_TRANSPORT_FABRIC, else ucx);
                           libfabric's provider is FI_PROVIDER's (tcp, shm, efa, ...)
  --peer-timeout-ms N      a silent peer counts as lost after this (default 10000)
  --key-file FILE          the transport key both sides prove (16 to 4096 bytes, not readable
                           by others); default: RAYACCEL_TRANSPORT_KEY_FILE, else this user's
                           key on this host (created on first use), which no other host has
  --own-memory             register memory this process allocated (a tensor in place) rather
                           than buffers the transport allocates (staging buffers)
  --memory host|device[:N] the buffers' memory (default host): device N's (default 0), which
                           the plugin allocates; each side chooses its own. This command fills
                           and checks device memory through the transport itself, from a host
                           copy on an endpoint of its own
  --token-file FILE        the server writes its token here; the client may read it from here
                           (waiting up to the peer timeout for it to appear)
  --json                   one JSON object as the client's result
  --metrics-file FILE      the transport's counters in the Prometheus text format (for
                           node_exporter's textfile collector): the server rewrites it every
                           second, the client once it is done
  UCX_TLS, UCX_NET_DEVICES and UCX's other variables choose the fabric, as for any UCX tool.

Exit status: 0 done (and verified), 1 failed, 2 usage, 3 the peer was lost (died, stopped or
cut off), 4 the peer refused our key or could not prove its own.
)";

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct Options {
  bool serve = false;
  std::string token, token_file, metrics_file;
  TransportOptions transport;
  uint64_t size = 1 << 20;
  bool write = false;
  int iters = 100, warmup = 10;
  uint32_t batch = 1;
  bool same_range = false;
  bool json = false;
  bool own_memory = false;
  MemoryKind memory = MemoryKind::kHost;
  uint32_t device = 0;
};

// Device memory, which this command cannot touch: a second endpoint of the same plugin holds
// a host copy of each device buffer and moves it there and back through the transport.
struct Mirror {
  std::unique_ptr<Transport> endpoint;
  Transport::ConnectionId connection = 0;
};

// A buffer of `size` bytes registered on `t`: the transport's own, or ours with --own-memory;
// of device memory, with its host copy on the mirror.
struct Buffer {
  std::vector<char> own;
  Transport::Buffer registered;
  std::string descriptor;
  std::vector<char> copy;  // device memory: the host copy
  Transport::RegionId copy_region = 0;
  // Where this command reads and writes the bytes.
  char* data() { return copy.empty() ? static_cast<char*>(registered.data) : copy.data(); }
};

absl::Status MakeBuffer(Transport& t, const Options& o, Mirror* mirror, Buffer* b) {
  const uint64_t size = o.size;
  if (o.memory == MemoryKind::kDevice) {
    absl::StatusOr<Transport::Buffer> a = t.Allocate(size, MemoryKind::kDevice, o.device);
    if (!a.ok()) return a.status();
    b->registered = *a;
    absl::StatusOr<std::string> d = t.Describe(a->region);
    if (!d.ok()) return d.status();
    b->descriptor = *d;
    if (mirror->endpoint == nullptr) {
      absl::StatusOr<std::unique_ptr<Transport>> m = Transport::Open(o.transport);
      if (!m.ok()) return m.status();
      mirror->endpoint = *std::move(m);
      absl::StatusOr<Transport::ConnectionId> c = mirror->endpoint->Connect(t.address());
      if (!c.ok()) return c.status();
      mirror->connection = *c;
    }
    b->copy.assign(size, 0);
    absl::StatusOr<Transport::RegionId> r = mirror->endpoint->Register(b->copy.data(), size);
    if (!r.ok()) return r.status();
    b->copy_region = *r;
    return absl::OkStatus();
  }
  if (o.own_memory) {
    b->own.assign(size, 0);
    absl::StatusOr<Transport::RegionId> r = t.Register(b->own.data(), size);
    if (!r.ok()) return r.status();
    b->registered = {*r, b->own.data(), size};
    return absl::OkStatus();
  }
  absl::StatusOr<Transport::Buffer> a = t.Allocate(size);
  if (!a.ok()) return a.status();
  b->registered = *a;
  return absl::OkStatus();
}

// Device memory only: its first `n` bytes from the host copy (Push) or to it (Pull).
absl::Status Move(Mirror& mirror, Buffer& b, uint64_t n, bool push) {
  if (b.copy.empty() || n == 0) return absl::OkStatus();
  Transport& m = *mirror.endpoint;
  absl::StatusOr<Request> r = push
                                  ? m.Write(mirror.connection, b.copy_region, 0, b.descriptor, 0, n)
                                  : m.Read(mirror.connection, b.copy_region, 0, b.descriptor, 0, n);
  if (!r.ok()) return r.status();
  return r->Wait(absl::Now() + absl::Seconds(60));
}
absl::Status Push(Mirror& m, Buffer& b, uint64_t n) { return Move(m, b, n, true); }
absl::Status Pull(Mirror& m, Buffer& b, uint64_t n) { return Move(m, b, n, false); }

int Usage(const std::string& problem) {
  std::fprintf(stderr, "rayaccel transfer: %s\n\n%s", problem.c_str(), kUsage);
  return kExitUsage;
}

// "64MiB" -> 67108864; also K/M/G (powers of 1000), KiB/MiB/GiB and plain bytes.
bool ParseSize(absl::string_view text, uint64_t* out) {
  static const std::pair<const char*, uint64_t> kUnits[] = {{"KiB", 1ull << 10},
                                                            {"MiB", 1ull << 20},
                                                            {"GiB", 1ull << 30},
                                                            {"K", 1000},
                                                            {"M", 1000000},
                                                            {"G", 1000000000},
                                                            {"B", 1}};
  uint64_t unit = 1;
  for (const auto& [suffix, factor] : kUnits) {
    if (absl::EndsWith(text, suffix)) {
      text.remove_suffix(std::strlen(suffix));
      unit = factor;
      break;
    }
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n == 0 || n > (uint64_t{1} << 40) / unit) return false;
  *out = n * unit;
  return true;
}

int Parse(int argc, char** argv, Options* o) {
  if (CommandLine::AsksForHelp(argc, argv, 2)) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  CommandLine line;
  std::string memory, size, op, batch, iters, warmup, peer_timeout;
  std::vector<std::string> configs, positionals;
  o->transport.plugin = "sim";
  line.Flag("--serve", &o->serve);
  line.Flag("--json", &o->json);
  line.Flag("--same-range", &o->same_range);
  line.Flag("--own-memory", &o->own_memory);
  line.Value("--memory", &memory, "--memory is host or device[:N]");
  line.Value("--connect", &o->token, "--connect needs a token");
  line.Value("--metrics-file", &o->metrics_file, "--metrics-file needs a file");
  line.Value("--token-file", &o->token_file, "--token-file needs a file");
  line.Value("--plugin", &o->transport.plugin, "--plugin needs a name or path");
  std::vector<std::string> plugin_paths;
  line.Values("--plugin-path", &plugin_paths, "--plugin-path needs folders");
  line.Values("--config", &configs, "--config needs KEY=VALUE");
  line.Value("--size", &size, "--size needs a size such as 8, 4KiB or 64MiB (at most 1 TiB)");
  line.Value("--op", &op, "--op is read or write");
  line.Value("--batch", &batch, "--batch needs a count from 1 to 1000000");
  line.Value("--iters", &iters, "--iters needs a whole number");
  line.Value("--warmup", &warmup, "--warmup needs a whole number");
  line.Value("--key-file", &o->transport.key_file, "--key-file needs a file");
  line.Value("--fabric", &o->transport.fabric, "--fabric is ucx or libfabric");
  line.Value("--peer-timeout-ms", &peer_timeout, "--peer-timeout-ms needs a positive whole number");
  line.Positionals(&positionals);
  if (std::optional<std::string> problem = line.Parse(argc, argv, 2)) return Usage(*problem);
  if (!positionals.empty()) return Usage("unexpected argument " + positionals[0]);

  const std::pair<const char*, const std::string*> not_empty[] = {
      {"--connect", &o->token},
      {"--metrics-file", &o->metrics_file},
      {"--token-file", &o->token_file},
      {"--plugin", &o->transport.plugin},
      {"--key-file", &o->transport.key_file},
  };
  for (const auto& [name, value] : not_empty) {
    if (line.Given(name) && value->empty()) return Usage(line.Needs(name));
  }
  if (line.Given("--fabric") && o->transport.fabric != "ucx" &&
      o->transport.fabric != "libfabric") {
    return Usage(line.Needs("--fabric"));
  }
  if (line.Given("--memory")) {
    if (memory == "host") {
      o->memory = MemoryKind::kHost;
    } else if (memory == "device" || memory.rfind("device:", 0) == 0) {
      o->memory = MemoryKind::kDevice;
      if (memory.size() > 6 && !absl::SimpleAtoi(memory.substr(7), &o->device)) {
        return Usage("--memory device:N needs a device index");
      }
    } else {
      return Usage(line.Needs("--memory"));
    }
  }
  for (const std::string& v : plugin_paths) {
    for (absl::string_view dir : absl::StrSplit(v, ':', absl::SkipEmpty())) {
      o->transport.search_path.emplace_back(dir);
    }
  }
  for (const std::string& v : configs) {
    if (v.find('=') == std::string::npos) return Usage(line.Needs("--config"));
    o->transport.config[v.substr(0, v.find('='))] = v.substr(v.find('=') + 1);
  }
  if (line.Given("--size") && !ParseSize(size, &o->size)) return Usage(line.Needs("--size"));
  if (line.Given("--op")) {
    if (op != "read" && op != "write") return Usage(line.Needs("--op"));
    o->write = op == "write";
  }
  if (line.Given("--batch") &&
      (!absl::SimpleAtoi(batch, &o->batch) || o->batch < 1 || o->batch > 1000000)) {
    return Usage(line.Needs("--batch"));
  }
  if (o->same_range && !line.Given("--batch")) return Usage("--same-range needs --batch N");
  if (line.Given("--iters") && (!absl::SimpleAtoi(iters, &o->iters) || o->iters < 1)) {
    return Usage(line.Needs("--iters"));
  }
  if (line.Given("--warmup") && (!absl::SimpleAtoi(warmup, &o->warmup) || o->warmup < 0)) {
    return Usage(line.Needs("--warmup"));
  }
  if (line.Given("--peer-timeout-ms")) {
    int ms = 0;
    if (!absl::SimpleAtoi(peer_timeout, &ms) || ms <= 0) {
      return Usage(line.Needs("--peer-timeout-ms"));
    }
    o->transport.peer_timeout = absl::Milliseconds(ms);
  }
  if (o->serve && !o->token.empty()) return Usage("--serve and --connect exclude each other");
  if (o->own_memory && o->memory == MemoryKind::kDevice) {
    return Usage(
        "--own-memory is host memory this command allocates; device memory the plugin "
        "allocates");
  }
  if (!o->serve && o->token.empty() && o->token_file.empty()) {
    return Usage("give --serve, or --connect TOKEN (or --token-file FILE)");
  }
  return -1;
}

// The bytes a server's read buffer holds, and what a client writes: distinct patterns, so a
// write that never landed cannot pass for one that did. `offset` is where `p` starts.
void Fill(char* p, uint64_t size, uint64_t seed, uint64_t offset = 0) {
  for (uint64_t i = 0; i < size; i += 8) {
    uint64_t v = (((offset + i) / 8) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    std::memcpy(p + i, &v, std::min<uint64_t>(8, size - i));
  }
}

// The first offset at which `p` differs from the pattern, or size when it matches.
uint64_t FirstMismatch(const char* p, uint64_t size, uint64_t seed) {
  std::vector<char> want(std::min<uint64_t>(size, 1 << 20));
  for (uint64_t at = 0; at < size; at += want.size()) {
    uint64_t n = std::min<uint64_t>(want.size(), size - at);
    Fill(want.data(), n, seed, at);
    if (std::memcmp(p + at, want.data(), n) == 0) continue;
    for (uint64_t i = 0; i < n; ++i) {
      if (p[at + i] != want[i]) return at + i;
    }
  }
  return size;
}

constexpr uint64_t kReadSeed = 0x5241594143434531ull;   // the server's read buffer
constexpr uint64_t kWriteSeed = 0x7772697465737631ull;  // what a client writes

std::string Token(const Transport& t, const std::string& read_desc, const std::string& write_desc) {
  return absl::StrCat("rxt1.", absl::WebSafeBase64Escape(t.address()), ".",
                      absl::WebSafeBase64Escape(read_desc), ".",
                      absl::WebSafeBase64Escape(write_desc));
}

bool ParseToken(const std::string& token, std::string* address, std::string* read_desc,
                std::string* write_desc) {
  std::vector<std::string> parts = absl::StrSplit(token, '.');
  return parts.size() == 4 && parts[0] == "rxt1" &&
         absl::WebSafeBase64Unescape(parts[1], address) &&
         absl::WebSafeBase64Unescape(parts[2], read_desc) &&
         absl::WebSafeBase64Unescape(parts[3], write_desc);
}

// Replaces `file` (whole, by rename) with the transport's counters; no file, nothing.
void WriteMetrics(const Transport& t, const std::string& file) {
  if (file.empty()) return;
  const std::string tmp = file + ".tmp";
  std::ofstream(tmp) << transport::MetricsText(t.Stats(), t.plugin_name());
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::fprintf(stderr, "rayaccel transfer: cannot write %s\n", file.c_str());
  }
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "rayaccel transfer: %s\n", std::string(s.message()).c_str());
  return IsPeerLost(s) ? kExitPeerLost : IsUnauthenticatedPeer(s) ? kExitRefused : kExitFailure;
}

int Serve(const Options& o) {
  absl::StatusOr<std::unique_ptr<Transport>> t = Transport::Open(o.transport);
  if (!t.ok()) return Fail(t.status());
  Mirror mirror;
  Buffer read_buf, write_buf;
  if (absl::Status s = MakeBuffer(**t, o, &mirror, &read_buf); !s.ok()) return Fail(s);
  if (absl::Status s = MakeBuffer(**t, o, &mirror, &write_buf); !s.ok()) return Fail(s);
  Fill(read_buf.data(), o.size, kReadSeed);
  std::memset(write_buf.data(), 0, o.size);
  for (Buffer* b : {&read_buf, &write_buf}) {
    if (absl::Status s = Push(mirror, *b, o.size); !s.ok()) return Fail(s);
  }
  std::string token = Token(**t, *(*t)->Describe(read_buf.registered.region),
                            *(*t)->Describe(write_buf.registered.region));
  if (!o.token_file.empty()) {
    std::string tmp = o.token_file + ".tmp";
    std::ofstream(tmp) << token << "\n";
    if (std::rename(tmp.c_str(), o.token_file.c_str()) != 0) {
      return Fail(absl::InternalError("cannot write " + o.token_file));
    }
  }
  // The token alone on stdout (for `$(...)`), labelled on stderr for whoever reads the screen.
  const std::string label = absl::StrCat(
      "rayaccel transfer: serving ", o.size, " bytes; the token for `rayaccel transfer --connect ",
      "TOKEN` on the reader", o.token_file.empty() ? "" : " (also in " + o.token_file + ")", ":\n");
  std::fputs(label.c_str(), stderr);
  std::printf("%s\n", token.c_str());
  std::fflush(stdout);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  int bad = 0;
  absl::Time metrics_due = absl::InfinitePast();
  while (!g_stop) {
    if (absl::Now() >= metrics_due) {
      WriteMetrics(**t, o.metrics_file);
      metrics_due = absl::Now() + absl::Seconds(1);
    }
    absl::StatusOr<std::vector<std::string>> got =
        (*t)->TakeNotifications(1, absl::Now() + absl::Milliseconds(200));
    if (!got.ok()) return Fail(got.status());
    for (const std::string& n : *got) {
      // "write LENGTH": the client wrote its pattern to [0, LENGTH) of the write buffer.
      uint64_t length = 0;
      if (n.rfind("write ", 0) != 0 || !absl::SimpleAtoi(n.substr(6), &length) || length > o.size) {
        std::printf("{\"notification\": %zu, \"verified\": false}\n", n.size());
        ++bad;
        continue;
      }
      if (absl::Status s = Pull(mirror, write_buf, length); !s.ok()) return Fail(s);
      uint64_t at = FirstMismatch(write_buf.data(), length, kWriteSeed);
      std::printf("{\"write\": %llu, \"verified\": %s}\n", static_cast<unsigned long long>(length),
                  at == length ? "true" : "false");
      if (at != length) ++bad;
      std::memset(write_buf.data(), 0, length);  // the next write must land again
      if (absl::Status s = Push(mirror, write_buf, length); !s.ok()) return Fail(s);
    }
    std::fflush(stdout);
  }
  WriteMetrics(**t, o.metrics_file);
  return bad == 0 ? kExitOk : kExitFailure;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// How long one operation may take before the client gives up: the peer timeout, plus the
// time the size would take at a slow 100 MB/s.
absl::Time Deadline(const Options& o, uint64_t size) {
  return absl::Now() + o.transport.peer_timeout +
         absl::Seconds(1 + static_cast<double>(size) / 1e8);
}

int Connect(const Options& o) {
  std::string token = o.token;
  if (token.empty()) {
    // The server writes the file once it serves (by rename: whole or not at all); the client
    // waits for it up to the peer timeout, so the two sides may start in either order.
    const absl::Time give_up = absl::Now() + o.transport.peer_timeout;
    while (access(o.token_file.c_str(), F_OK) != 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    std::ifstream in(o.token_file);
    if (!in) {
      return Fail(absl::NotFoundError(absl::StrCat("no token file ", o.token_file, " after ",
                                                   absl::FormatDuration(o.transport.peer_timeout),
                                                   " (is the --serve side running?)")));
    }
    std::getline(in, token);
  }
  std::string address, read_desc, write_desc;
  if (!ParseToken(token, &address, &read_desc, &write_desc)) {
    return Usage("not a transfer token (rxt1.ADDRESS.READ.WRITE, as --serve prints)");
  }
  absl::StatusOr<DescriptorInfo> remote = Transport::Inspect(read_desc);
  if (!remote.ok()) return Fail(remote.status());
  uint64_t size = std::min(o.size, remote->length);
  // A batch moves N entries of `size` bytes, back to back in both buffers (or all the same).
  const uint64_t per_batch = size * o.batch;
  const uint64_t span = o.same_range ? size : per_batch;
  if (o.batch > 1 && (per_batch / o.batch != size || span > remote->length)) {
    return Usage(absl::StrCat("--batch ", o.batch, " of ", size, " bytes needs a server buffer of ",
                              "at least their product (the server's is ", remote->length,
                              " bytes: raise its --size)"));
  }
  absl::StatusOr<std::unique_ptr<Transport>> t = Transport::Open(o.transport);
  if (!t.ok()) return Fail(t.status());
  Transport& tr = **t;
  Options sized = o;
  sized.size = span;
  Mirror mirror;
  Buffer buf, check;
  if (absl::Status s = MakeBuffer(tr, sized, &mirror, &buf); !s.ok()) return Fail(s);
  if (absl::Status s = MakeBuffer(tr, sized, &mirror, &check); !s.ok()) return Fail(s);
  if (o.write) {
    Fill(buf.data(), span, kWriteSeed);
    if (absl::Status s = Push(mirror, buf, span); !s.ok()) return Fail(s);
  }
  const Transport::RegionId local = buf.registered.region;
  const Transport::RegionId check_region = check.registered.region;
  absl::StatusOr<Transport::ConnectionId> conn = tr.Connect(address);
  if (!conn.ok()) return Fail(conn.status());
  const std::string& target = o.write ? write_desc : read_desc;

  TransferPath path = TransferPath::kUnreported;
  PreparedBatch batch;
  if (o.batch > 1) {
    std::vector<TransferEntry> entries;
    for (uint64_t i = 0; i < o.batch; ++i) {
      const uint64_t at = o.same_range ? 0 : i * size;
      entries.push_back({local, at, target, at, size});
    }
    absl::StatusOr<PreparedBatch> b =
        tr.PrepareBatch(o.write ? TransferOp::kWrite : TransferOp::kRead, *conn, entries);
    if (!b.ok()) return Fail(b.status());
    batch = *std::move(b);
  }
  auto once = [&]() -> absl::Status {
    if (o.batch > 1) {
      absl::StatusOr<BatchRequest> r = tr.Post(batch);
      if (!r.ok()) return r.status();
      return r->Wait(Deadline(o, span));
    }
    absl::StatusOr<Request> r = o.write ? tr.Write(*conn, local, 0, target, 0, size)
                                        : tr.Read(*conn, local, 0, target, 0, size);
    if (!r.ok()) return r.status();
    path = r->path();
    return r->Wait(Deadline(o, size));
  };
  for (int i = 0; i < o.warmup; ++i) {
    if (absl::Status s = once(); !s.ok()) return Fail(s);
  }
  std::vector<double> latencies;
  latencies.reserve(static_cast<size_t>(o.iters));
  absl::Time start = absl::Now();
  for (int i = 0; i < o.iters; ++i) {
    absl::Time t0 = absl::Now();
    if (absl::Status s = once(); !s.ok()) return Fail(s);
    latencies.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  if (o.write) {
    absl::StatusOr<Request> f = tr.Flush(*conn);
    if (!f.ok()) return Fail(f.status());
    if (absl::Status s = f->Wait(Deadline(o, size)); !s.ok()) return Fail(s);
  }
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const unsigned long long moved = size;  // per entry; verified over the whole span
  size = span;

  // Verify: a read must hold the server's pattern; a write is read back, and announced to
  // the server, which checks its own copy when the notification arrives.
  uint64_t mismatch = size;
  if (o.write) {
    absl::StatusOr<Request> back = tr.Read(*conn, check_region, 0, write_desc, 0, size);
    if (!back.ok()) return Fail(back.status());
    if (absl::Status s = back->Wait(Deadline(o, size)); !s.ok()) return Fail(s);
    if (absl::Status s = Pull(mirror, check, size); !s.ok()) return Fail(s);
    mismatch = FirstMismatch(check.data(), size, kWriteSeed);
    absl::StatusOr<Request> n = tr.Notify(*conn, absl::StrCat("write ", size));
    if (!n.ok()) return Fail(n.status());
    if (absl::Status s = n->Wait(Deadline(o, size)); !s.ok()) return Fail(s);
  } else {
    if (absl::Status s = Pull(mirror, buf, size); !s.ok()) return Fail(s);
    mismatch = FirstMismatch(buf.data(), size, kReadSeed);
  }
  double bandwidth = static_cast<double>(per_batch) * o.iters / seconds;
  double rate = static_cast<double>(o.batch) * o.iters / seconds;
  double p50 = Percentile(latencies, 0.5), p99 = Percentile(latencies, 0.99);
  bool verified = mismatch == size;
  const std::string memory =
      o.memory == MemoryKind::kDevice ? absl::StrCat("device:", o.device) : "host";
  if (o.json) {
    std::printf(
        "{\"op\": \"%s\", \"bytes\": %llu, \"batch\": %u, \"iters\": %d, "
        "\"bandwidth_bytes_per_s\": %.0f, \"transfers_per_s\": %.0f, "
        "\"latency_us_p50\": %.2f, \"latency_us_p99\": %.2f, \"memory\": \"%s\", "
        "\"path\": \"%s\", \"verified\": %s}\n",
        o.write ? "write" : "read", moved, o.batch, o.iters, bandwidth, rate, p50, p99,
        memory.c_str(), TransferPathName(path), verified ? "true" : "false");
  } else {
    const std::string what =
        o.batch > 1 ? absl::StrFormat("%llu bytes x %u per batch x %d", moved, o.batch, o.iters)
                    : absl::StrFormat("%llu bytes x %d", moved, o.iters);
    const std::string rate_text =
        o.batch > 1 ? absl::StrFormat(", %.0f transfers/s", rate) : std::string();
    std::printf("%s %s: %.2f GB/s%s, latency p50 %.2f us, p99 %.2f us, %s%s, path %s\n",
                o.write ? "write" : "read", what.c_str(), bandwidth / 1e9, rate_text.c_str(), p50,
                p99, verified ? "verified" : absl::StrCat("MISMATCH at byte ", mismatch).c_str(),
                memory == "host" ? "" : absl::StrCat(" (", memory, " memory)").c_str(),
                TransferPathName(path));
  }
  std::fflush(stdout);
  WriteMetrics(tr, o.metrics_file);
  tr.Close(*conn).IgnoreError();
  return verified ? kExitOk : kExitFailure;
}

}  // namespace

int RunTransfer(int argc, char** argv) {
  Options o;
  if (int code = Parse(argc, argv, &o); code >= 0) return code;
  return o.serve ? Serve(o) : Connect(o);
}

}  // namespace rayaccel::cli
