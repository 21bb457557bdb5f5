#include "util/command_line.h"

#include <algorithm>
#include <cstring>

namespace rayaccel {

CommandLine::CommandLine() {
  app_.set_help_flag();  // each command prints its own usage text, the one its docs show
  app_.allow_extras();   // unknown options are reported as ours, below
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void CommandLine::Flag(const std::string& name, bool* out) { app_.add_flag(name, *out); }

void CommandLine::Value(const std::string& name, std::string* out, const std::string& needs) {
  needs_[name] = needs;
  app_.add_option(name, *out);
}

void CommandLine::Values(const std::string& name, std::vector<std::string>* out,
                         const std::string& needs) {
  needs_[name] = needs;
  app_.add_option(name, *out)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);  // one value per occurrence: the next word is no value of it
}

void CommandLine::Positionals(std::vector<std::string>* out) { app_.add_option("arguments", *out); }

std::optional<std::string> CommandLine::Parse(int argc, char** argv, int first) {
  std::vector<std::string> args(argv + first, argv + argc);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app_.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {  // a value missing: "--size: 1 required TEXT missing"
    const std::string what = e.what();
    auto known = needs_.find(what.substr(0, what.find(':')));
    return known != needs_.end() ? known->second : what;
  } catch (const CLI::ParseError& e) {
    return std::string(e.what());
  }
  for (const std::string& extra : app_.remaining()) {
    return (!extra.empty() && extra[0] == '-' ? "unknown option " : "unexpected argument ") + extra;
  }
  return std::nullopt;
}

bool CommandLine::Given(const std::string& name) const { return app_.count(name) > 0; }

const std::string& CommandLine::Needs(const std::string& name) const { return needs_.at(name); }

bool CommandLine::AsksForHelp(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

}  // namespace rayaccel
