#include "cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <deque>

#include "ddplaunch/error.hpp"

namespace ddplaunch {

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine result;
  CLI::App app{
      "ddplaunch: launch and supervise distributed training workers "
      "(torchrun-compatible flags)\nUsage: ddplaunch [options] [--] program [args...]",
      "ddplaunch"};
  app.footer(
      "Every option also reads torchrun's PET_<NAME> variable where torchrun has one;\n"
      "a flag wins. --dry-run shows where each value came from.\n"
      "Exit status: 0 when every rank succeeds; else the first failing rank's exit code\n"
      "(128+N if it died of signal N). 2 bad usage, 3 rendezvous failed, 4 node or store\n"
      "lost, 127 program cannot be executed, 1 internal error. See README.md.");
  app.prefix_command();
  app.set_version_flag("--version", std::string("ddplaunch ") + DDPLAUNCH_VERSION);

  const Config defaults;
  std::deque<std::string> values;  // stable addresses for CLI11's bindings
  std::vector<std::pair<const OptionSpec*, CLI::Option*>> bound;
  for (const auto& spec : option_table()) {
    std::string help = spec.help;
    if (!spec.is_flag && spec.show != nullptr && !spec.show(defaults).empty()) {
      help += " [" + spec.show(defaults) + "]";
    }
    CLI::Option* opt = nullptr;
    if (spec.is_flag) {
      // (add_flag(name, std::string&) would bind the string as the flag's result)
      opt = app.add_flag(spec.names)->description(help);
    } else {
      opt = app.add_option(spec.names, values.emplace_back(), help)
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    opt->group(spec.group);
    bound.emplace_back(&spec, opt);
  }

  std::vector<std::string> argv_rev(args.rbegin(), args.rend());
  try {
    app.parse(argv_rev);
  } catch (const CLI::CallForHelp&) {
    result.print_and_exit = app.help();
    return result;
  } catch (const CLI::CallForAllHelp&) {
    result.print_and_exit = app.help("", CLI::AppFormatMode::All);
    return result;
  } catch (const CLI::CallForVersion&) {
    result.print_and_exit = std::string("ddplaunch ") + DDPLAUNCH_VERSION + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  size_t value_index = 0;
  for (const auto& [spec, opt] : bound) {
    const std::string* value = spec->is_flag ? nullptr : &values[value_index++];
    if (opt->count() > 0) {
      result.flags[spec->key] = Setting{value != nullptr ? *value : "true", "flag"};
    }
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError("unknown option '" + rest.front() +
                     "'; see 'ddplaunch --help' (put the program after '--' if it starts "
                     "with '-')");
  }
  if (rest.empty()) {
    throw UsageError("no program given; usage: ddplaunch [options] [--] program [args...]");
  }
  result.command = std::move(rest);
  return result;
}

}  // namespace ddplaunch
