#include "ray/unit_instances.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace rayaccel {
namespace {

TEST(UnitInstanceSetting, AppendsOnlyWhatRayDoesNotCountByDevice) {
  EXPECT_EQ(UnitInstanceSetting({"zeta_z1"}, kTestedRayCustomUnitInstances),
            "neuron_cores,TPU,NPU,HPU,RBLN,FURIOSA,TTNPU,MBLT,zeta_z1");
  EXPECT_EQ(
      UnitInstanceSetting({"GPU", "TPU", "HPU", "neuron_cores"}, kTestedRayCustomUnitInstances),
      std::nullopt);
  // The user's own list is kept whole and in order, spaces and empty entries aside.
  EXPECT_EQ(UnitInstanceSetting({"b", "TPU", "a", "b"}, " TPU ,,FPGA"), "TPU,FPGA,b,a");
  EXPECT_EQ(UnitInstanceSetting({"x"}, ""), "x");
  EXPECT_EQ(UnitInstanceSetting({""}, "TPU"), std::nullopt);
}

// A file of the given bytes; removed by the caller.
std::string FileOf(const std::string& bytes) {
  char path[] = "/tmp/rayaccel-raylet-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
  return path;
}

absl::StatusOr<std::string> ReadFrom(const std::string& bytes) {
  std::string path = FileOf(bytes);
  absl::StatusOr<std::string> got = ReadRayletUnitInstanceDefault(path);
  unlink(path.c_str());
  return got;
}

TEST(ReadRayletUnitInstanceDefault, FindsTheOneListLiteral) {
  using namespace std::string_literals;
  std::string elf =
      "\x7f"
      "ELF"s +
      std::string(100, '\0');
  EXPECT_EQ(*ReadFrom(elf + "custom_unit_instance_resources\0neuron_cores,TPU,NPU,ZZ\0tail"s),
            "neuron_cores,TPU,NPU,ZZ");
  // Ray 2.7's list, at the very start of a file and twice (the same literal twice is one).
  EXPECT_EQ(*ReadFrom("neuron_cores,TPU\0x\0neuron_cores,TPU\0"s), "neuron_cores,TPU");
  // Not a literal of its own, not a list of names, or without TPU: not Ray's list.
  EXPECT_FALSE(ReadFrom(elf + "Xneuron_cores,TPU\0"s).ok());
  EXPECT_FALSE(ReadFrom(elf + "neuron_cores,TPU"s).ok());  // no NUL after, at the end
  EXPECT_FALSE(ReadFrom(elf + "\0neuron_cores,,TPU\0"s).ok());
  EXPECT_FALSE(ReadFrom(elf + "\0neuron_cores\0"s).ok());
  EXPECT_FALSE(ReadFrom(elf + "\0neuron_cores,NPU\0"s).ok());
  // Two different lists: which one Ray uses cannot be told.
  absl::StatusOr<std::string> two = ReadFrom("\0neuron_cores,TPU\0neuron_cores,TPU,NPU\0"s);
  EXPECT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("2 different lists"), std::string::npos);
  EXPECT_FALSE(ReadFrom("").ok());
  EXPECT_FALSE(ReadRayletUnitInstanceDefault("/nonexistent/_raylet.so").ok());
  EXPECT_FALSE(ReadRayletUnitInstanceDefault("/tmp").ok());
}

}  // namespace
}  // namespace rayaccel
