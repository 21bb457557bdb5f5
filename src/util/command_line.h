// The command line as rayaccel's commands read it, on CLI11: options in any order, as
// `--flag value` or `--flag=value`, the last of a repeated one winning unless it is a list.
// Each option that takes a value carries its usage message ("--size needs a whole number"),
// said when the value is missing and by the command when the value does not mean anything.
#ifndef RAYACCEL_UTIL_COMMAND_LINE_H_
#define RAYACCEL_UTIL_COMMAND_LINE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace rayaccel {

class CommandLine {
 public:
  CommandLine();

  // A flag (no value).
  void Flag(const std::string& name, bool* out);
  // An option with one value, and the usage message for it.
  void Value(const std::string& name, std::string* out, const std::string& needs);
  // A repeatable option: every value, in order.
  void Values(const std::string& name, std::vector<std::string>* out, const std::string& needs);
  // The arguments that are not options.
  void Positionals(std::vector<std::string>* out);

  // Reads argv[first..argc); the usage problem ("unknown option --x", an option's message
  // when its value is missing), or nullopt.
  std::optional<std::string> Parse(int argc, char** argv, int first);

  bool Given(const std::string& name) const;
  const std::string& Needs(const std::string& name) const;

  // Whether -h or --help is among argv[first..argc): help is shown whatever else is wrong.
  static bool AsksForHelp(int argc, char** argv, int first);

 private:
  CLI::App app_;
  std::map<std::string, std::string> needs_;
};

}  // namespace rayaccel

#endif  // RAYACCEL_UTIL_COMMAND_LINE_H_
