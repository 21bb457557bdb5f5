#include "registry/config.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace rayaccel {
namespace {

TEST(Config, Assignments) {
  PluginConfig config;
  ASSERT_TRUE(AddConfigAssignment("sim.spec=a.json", &config).ok());
  ASSERT_TRUE(AddConfigAssignment("sim.spec = b=c.json", &config).ok());  // value keeps '='
  EXPECT_EQ(config["sim"]["spec"], "b=c.json");
  EXPECT_FALSE(AddConfigAssignment("spec=a.json", &config).ok());
  EXPECT_FALSE(AddConfigAssignment("sim.spec", &config).ok());
  EXPECT_FALSE(AddConfigAssignment(".spec=x", &config).ok());
}

TEST(Config, FileErrorsNameFileAndLine) {
  std::string path = ::testing::TempDir() + "/rayaccel-config-test.conf";
  std::ofstream(path) << "# comment\n\nsim.spec = x.json\ncuda.nvml_library=/opt/lib.so\nbroken\n";
  absl::StatusOr<PluginConfig> config = ReadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(path + ":5:"), absl::string_view::npos)
      << config.status();
  std::ofstream(path) << "# comment\n\nsim.spec = x.json\ncuda.nvml_library=/opt/lib.so\n";
  config = ReadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*config)["sim"]["spec"], "x.json");
  EXPECT_EQ((*config)["cuda"]["nvml_library"], "/opt/lib.so");
  EXPECT_FALSE(ReadConfigFile(path + ".missing").ok());
}

TEST(Config, Environment) {
  setenv("RAYACCEL_SIM_SPEC", "/tmp/x.json", 1);
  setenv("RAYACCEL_MY_PLUGIN_SOME_KEY", "v", 1);
  setenv("RAYACCEL_SIMX_SPEC", "no", 1);
  std::vector<std::string> env = RayaccelEnvironment();
  EXPECT_EQ(EnvironmentConfig("sim", env),
            (std::map<std::string, std::string>{{"spec", "/tmp/x.json"}}));
  EXPECT_EQ(EnvironmentConfig("my-plugin", env)["some_key"], "v");
  // A copy: later changes to the environment do not reach it.
  setenv("RAYACCEL_SIM_SPEC", "/elsewhere.json", 1);
  EXPECT_EQ(EnvironmentConfig("sim", env)["spec"], "/tmp/x.json");
  unsetenv("RAYACCEL_SIM_SPEC");
  unsetenv("RAYACCEL_MY_PLUGIN_SOME_KEY");
  unsetenv("RAYACCEL_SIMX_SPEC");
}

}  // namespace
}  // namespace rayaccel
