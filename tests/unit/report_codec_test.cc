// The plugin host's report encoding: what the registry rebuilds from bytes a (possibly
// corrupted) host sends. Every item passes the registry's own Collector again; malformed or
// lying bytes are refused before anything of their claimed size is built.
#include "isolation/report_codec.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>
#include <thread>

#include "gtest/gtest.h"
#include "isolation/wire.h"

namespace rayaccel::isolation {
namespace {

PluginReport Sample() {
  PluginReport r;
  for (uint32_t i = 0; i < 3; ++i) {
    Device d;
    d.index = i;
    d.id = "GPU-" + std::to_string(i);
    d.name = "NVIDIA H100 80GB HBM3";
    d.architecture = "hopper";
    d.memory_bytes = uint64_t{80} << 30;
    d.pci_bus_id = "0000:1" + std::to_string(i) + ":00.0";
    d.pci_vendor_id = 0x10de;
    d.pci_device_id = 0x2330;
    d.numa_node = static_cast<int>(i % 2);
    d.driver_version = "550.54.15";
    d.health = Health::kHealthy;
    d.attributes.push_back({"example.com/sm-count", Attribute::Kind::kInt, "", 132});
    d.attributes.push_back({"example.com/mig", Attribute::Kind::kBool, "", 1});
    r.devices.push_back(d);
  }
  r.links.push_back({0, 1, LinkType::kNvlink, 18, 450000, PciePath::kUnknown, 0, 1, 0});
  r.links.push_back({1, 2, LinkType::kPcie, 1, 0, PciePath::kPxb, 0, 0, 0});
  r.links.push_back({0, 2, LinkType::kOther, 4, 392000, PciePath::kUnknown, 0, 1, 0, "UB"});
  r.domains.push_back({"nvlink", "clique-1", {0, 1, 2}});
  r.labels["example.com/rack"] = "r12";
  r.health[2] = {Health::kUnhealthy, "XID 79"};
  r.env.emplace_back("CUDA_VISIBLE_DEVICES", "0,1");
  r.problems.push_back("device 7: id is required");
  r.hook_failures.push_back("get_health failed: NVML_ERROR_GPU_IS_LOST");
  return r;
}

std::string Encode(const PluginReport& r) {
  std::string out;
  EncodeReport(r, &out);
  return out;
}

TEST(ReportCodec, RoundTripsEveryPart) {
  PluginReport in = Sample();
  PluginReport out;
  ASSERT_TRUE(DecodeReport(Encode(in), &out).ok());
  ASSERT_EQ(out.devices.size(), 3u);
  EXPECT_EQ(out.devices[1].id, "GPU-1");
  EXPECT_EQ(out.devices[1].pci_bus_id, "0000:11:00.0");
  EXPECT_EQ(out.devices[1].memory_bytes, uint64_t{80} << 30);
  EXPECT_EQ(out.devices[1].numa_node, 1);
  EXPECT_EQ(out.devices[1].health, Health::kHealthy);
  ASSERT_EQ(out.devices[0].attributes.size(), 2u);
  EXPECT_EQ(out.devices[0].attributes[0].int_value, 132);
  ASSERT_EQ(out.links.size(), 3u);
  EXPECT_EQ(out.links[0].bandwidth_mbps, 450000u);
  EXPECT_EQ(out.links[1].pcie_path, PciePath::kPxb);
  EXPECT_EQ(out.links[2].type_name, "UB");
  ASSERT_EQ(out.domains.size(), 1u);
  EXPECT_EQ(out.domains[0].devices, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(out.labels.at("example.com/rack"), "r12");
  EXPECT_EQ(out.health.at(2).first, Health::kUnhealthy);
  EXPECT_EQ(out.env, in.env);
  EXPECT_EQ(out.problems, in.problems);  // the host's notes, and none of this side's
  EXPECT_EQ(out.hook_failures, in.hook_failures);
  EXPECT_FALSE(out.over_limit);
  // Encoding the decoded report gives the same bytes: what "unchanged" compares.
  EXPECT_EQ(Encode(out), Encode(in));
  EXPECT_TRUE(EncodesAs(out, Encode(in)));
  out.devices[2].health_reason = "XID 48";
  EXPECT_FALSE(EncodesAs(out, Encode(in)));
  EXPECT_FALSE(EncodesAs(in, Encode(in) + "x"));
  EXPECT_FALSE(EncodesAs(in, Encode(in).substr(1)));
}

// The bound on counts is the fewest bytes an item can take: a report of the smallest legal
// devices (one-byte id and name, nothing else) passes it.
TEST(ReportCodec, TheSmallestItemsFitTheBound) {
  PluginReport in;
  for (uint32_t i = 0; i < 64; ++i) {
    Device d;
    d.index = i;
    d.id = std::string(1, static_cast<char>('!' + i));
    d.name = "x";
    in.devices.push_back(d);
  }
  PluginReport out;
  ASSERT_TRUE(DecodeReport(Encode(in), &out).ok());
  EXPECT_EQ(out.devices.size(), 64u);
}

TEST(ReportCodec, EveryTruncationIsRefused) {
  std::string bytes = Encode(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    PluginReport out;
    absl::Status st = DecodeReport(bytes.substr(0, n), &out);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << n;
  }
  PluginReport out;
  EXPECT_EQ(DecodeReport(bytes + "x", &out).code(), absl::StatusCode::kDataLoss);
}

// Counts are checked against the bytes that follow before anything is built: a few bytes
// that claim the limits' worth of items cost nothing.
TEST(ReportCodec, CountsThatCannotFitAreRefusedFirst) {
  std::string bytes = Encode(PluginReport{});
  // magic, then the device count: claim 4096 devices with no bytes behind them.
  uint32_t many = 4096;
  std::memcpy(bytes.data() + 4, &many, 4);
  PluginReport out;
  absl::Status st = DecodeReport(bytes, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("4096 devices"), std::string::npos) << st;
  uint32_t over = 4097;  // over the limit, whatever follows
  std::memcpy(bytes.data() + 4, &over, 4);
  EXPECT_EQ(DecodeReport(bytes, &out).code(), absl::StatusCode::kDataLoss);
}

// Enum fields travel as raw integers; an out-of-range one is refused by the Collector like
// any bad item, never loaded into an enum first (UBSan checks that under the asan preset).
TEST(ReportCodec, OutOfRangeEnumsAreRefusedItems) {
  PluginReport in = Sample();
  in.devices[0].health = static_cast<Health>(7);
  in.devices[1].attributes[0].kind = static_cast<Attribute::Kind>(6);
  in.links[0].type = static_cast<LinkType>(99);
  in.links[1].pcie_path = static_cast<PciePath>(42);
  in.health[1] = {static_cast<Health>(9), ""};
  PluginReport out;
  ASSERT_TRUE(DecodeReport(Encode(in), &out).ok());
  EXPECT_EQ(out.devices.size(), 2u);   // device 0 refused...
  EXPECT_TRUE(out.links.empty());      // ...so both links lose an endpoint or a type
  EXPECT_EQ(out.health.count(1), 0u);  // health 9 refused
  std::string all;
  for (const std::string& p : out.problems) all += p + "\n";
  EXPECT_NE(all.find("health 7 is not a rayaccel_health value"), std::string::npos) << all;
  EXPECT_NE(all.find("unknown kind 6"), std::string::npos) << all;
  EXPECT_NE(all.find("unknown state 9"), std::string::npos) << all;
}

TEST(ReportCodec, ItemsTheCollectorRefusesAreRefusedHereToo) {
  PluginReport in = Sample();
  in.devices[2].id = "GPU-0";                 // duplicate id
  in.devices[1].name = "line\nbreak";         // control character
  in.labels["ray.io/node-id"] = "stolen";     // reserved
  in.env.emplace_back("LD PRELOAD", "x.so");  // not a variable name
  PluginReport out;
  ASSERT_TRUE(DecodeReport(Encode(in), &out).ok());
  EXPECT_EQ(out.devices.size(), 1u);
  EXPECT_EQ(out.labels.count("ray.io/node-id"), 0u);
  EXPECT_EQ(out.env.size(), 1u);
  EXPECT_GE(out.problems.size(), in.problems.size() + 4);
}

TEST(ReportReply, HeadRoundTripsAndRefusesGarbage) {
  std::string report = Encode(Sample());
  ReportReply head;
  head.answer_id = (uint64_t{1} << 40) + 5;
  head.discover_error = "";
  head.zero_devices_reason = "no NVIDIA driver";
  head.report = report;
  std::string frame = EncodeReportReply(head);
  absl::StatusOr<ReportReply> back = DecodeReportReply(frame);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->answer_id, head.answer_id);
  EXPECT_FALSE(back->unchanged);
  EXPECT_EQ(back->zero_devices_reason, "no NVIDIA driver");
  EXPECT_EQ(back->report, report);
  for (size_t n = 0; n < 18; ++n) {
    EXPECT_FALSE(DecodeReportReply(frame.substr(0, n)).ok()) << n;
  }
  head.unchanged = true;
  EXPECT_FALSE(DecodeReportReply(EncodeReportReply(head)).ok());  // and a report?
  head.report = {};
  EXPECT_TRUE(DecodeReportReply(EncodeReportReply(head)).ok());
}

// A frame whose length claims the maximum and then stops: the reader allocates as bytes
// arrive, and reports the peer gone.
TEST(Wire, ALyingLengthCostsNothingAndFails) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  uint32_t n = static_cast<uint32_t>(wire::kMaxFrameBytes);
  ASSERT_EQ(write(sv[1], &n, 4), 4);
  ASSERT_EQ(write(sv[1], "R", 1), 1);
  close(sv[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  absl::StatusOr<std::string> frame = wire::ReadFrame(sv[0], deadline, wire::kMaxFrameBytes);
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kUnavailable);
  close(sv[0]);

  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  n = wire::kMaxJsonReplyBytes + 1;
  ASSERT_EQ(write(sv[1], &n, 4), 4);
  frame = wire::ReadFrame(sv[0], deadline, wire::kMaxJsonReplyBytes);
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kDataLoss);
  close(sv[0]);
  close(sv[1]);
}

// Frames in both directions at once, larger than the socket's buffer (so sent in pieces),
// empty, and read both while waiting and while looking without sleeping; a peer that goes
// while the reader looks is reported gone, and one that never answers times out.
TEST(Wire, FramesOfEverySizeArriveWholeAndAGonePeerIsSaid) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<std::string> sent;
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{3} << 20, size_t{16} << 20}) {
    std::string payload(size, '\0');
    for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>(i * 131 + size);
    sent.push_back(std::move(payload));
  }
  std::thread writer([&] {
    for (const std::string& p : sent) EXPECT_TRUE(wire::WriteFrame(sv[1], p).ok());
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (size_t i = 0; i < sent.size(); ++i) {
    auto spin = std::chrono::microseconds(i % 2 == 0 ? 1000 : 0);
    absl::StatusOr<std::string> got = wire::ReadFrame(sv[0], deadline, wire::kMaxFrameBytes, spin);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == sent[i]) << "frame " << i << " of " << sent[i].size() << " bytes";
  }
  writer.join();

  auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  EXPECT_EQ(wire::ReadFrame(sv[0], soon, 16, std::chrono::microseconds(1000)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  close(sv[1]);
  EXPECT_EQ(wire::ReadFrame(sv[0], deadline, 16, std::chrono::microseconds(1000)).status().code(),
            absl::StatusCode::kUnavailable);
  close(sv[0]);
}

// All the text of one answer is bounded (64 MiB), in every mode: the Collector says
// RESOURCE_EXHAUSTED to the plugin past it, and the answer is refused as absurd.
TEST(Collector, TheTextOfOneAnswerIsBounded) {
  PluginReport report;
  Collector collector(&report);
  const rayaccel_sink* sink = collector.sink();
  const std::string text(1000, 'v');
  rayaccel_status rc = RAYACCEL_STATUS_OK;
  for (uint32_t d = 0; d < 4096 && rc == RAYACCEL_STATUS_OK; ++d) {
    std::string id = "GPU-" + std::to_string(d);
    rayaccel_device_info info{};
    info.struct_size = sizeof(info);
    info.index = d;
    info.id = {id.data(), id.size()};
    info.name = {"x", 1};
    rc = sink->add_device(sink->host_context, &info);
    for (uint32_t a = 0; a < 64 && rc == RAYACCEL_STATUS_OK; ++a) {
      std::string name = "example.com/a" + std::to_string(a);
      rayaccel_attribute attr{};
      attr.struct_size = sizeof(attr);
      attr.device_index = d;
      attr.name = {name.data(), name.size()};
      attr.kind = RAYACCEL_ATTRIBUTE_STRING;
      attr.string_value = {text.data(), text.size()};
      rc = sink->add_attribute(sink->host_context, &attr);
    }
  }
  EXPECT_EQ(rc, RAYACCEL_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_TRUE(report.over_limit);
  ASSERT_FALSE(report.problems.empty());
  EXPECT_NE(report.problems.back().find("more than 67108864 bytes of text"), std::string::npos)
      << report.problems.back();
  std::string encoded;
  EncodeReport(report, &encoded);
  EXPECT_LT(encoded.size(), wire::kMaxFrameBytes);
}

// The wire carries every report the limits allow: the frame cap is derived from them.
TEST(Wire, TheFrameCapCoversTheLimits) {
  static_assert(wire::kMaxFrameBytes > kMaxTextBytesPerReport + kMaxLinksPerPlugin * 48);
  static_assert(wire::kMaxFrameBytes < (size_t{1} << 32), "lengths are 32-bit");
  PluginReport big;
  for (uint32_t i = 0; i < 512; ++i) {
    Device d;
    d.index = i;
    d.id = "GPU-" + std::to_string(i);
    d.name = "x";
    big.devices.push_back(d);
  }
  for (uint32_t a = 0; a < 512; ++a) {
    for (uint32_t b = a + 1; b < 512; ++b) big.links.push_back({a, b, LinkType::kNvlink});
  }
  std::string bytes = Encode(big);
  EXPECT_LT(bytes.size(), wire::kMaxFrameBytes);
  PluginReport out;
  ASSERT_TRUE(DecodeReport(bytes, &out).ok());
  EXPECT_EQ(out.links.size(), 130816u);
}

// A plugin learns why the host refused an item (ABI 1.2, rayaccel_sink.last_refusal): the
// reason of the last refused call, empty once a call is taken.
TEST(Collector, TellsThePluginWhyAnItemWasRefused) {
  PluginReport report;
  Collector collector(&report);
  const rayaccel_sink* sink = collector.sink();
  ASSERT_TRUE(RAYACCEL_HAS_FIELD(sink, rayaccel_sink, last_refusal));
  auto why = [&] {
    rayaccel_string s = sink->last_refusal(sink->host_context);
    return std::string(s.data, s.size);
  };
  EXPECT_EQ(why(), "");
  rayaccel_device_info d{};
  d.struct_size = sizeof(d);
  d.index = 0;
  d.id = {"GPU-0", 5};
  d.name = {"Acme X1", 7};
  ASSERT_EQ(sink->add_device(sink->host_context, &d), RAYACCEL_STATUS_OK);
  rayaccel_link l{};
  l.struct_size = sizeof(l);
  l.device_a = 0;
  l.device_b = 7;
  l.type = RAYACCEL_LINK_OTHER;
  EXPECT_EQ(sink->add_link(sink->host_context, &l), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(why(), "link 0-7: endpoint is not a reported device");
  d.index = 1;
  d.id = {"GPU-1", 5};
  ASSERT_EQ(sink->add_device(sink->host_context, &d), RAYACCEL_STATUS_OK);
  EXPECT_EQ(why(), "");
  // A named interconnect is checked: 1-16 of [A-Za-z0-9-].
  l.device_b = 1;
  l.type_name = {"U B", 3};
  EXPECT_EQ(sink->add_link(sink->host_context, &l), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(why(), "link 0-1: type_name is not 1-16 of [A-Za-z0-9-]");
  l.type_name = {"UB", 2};
  EXPECT_EQ(sink->add_link(sink->host_context, &l), RAYACCEL_STATUS_OK);
  ASSERT_EQ(report.links.size(), 1u);
  EXPECT_EQ(report.links[0].type_name, "UB");
}

}  // namespace
}  // namespace rayaccel::isolation
