// The option table: every ddplaunch option once, with its flag names, help,
// torchrun's PET_* variable, how its text value is parsed into a Config and
// how a Config's value is shown. The command line (cli/), the detectors
// (cluster/), --help, --dry-run and the docs all read this table, so a default
// is written only in Config. Pure: no system calls.
#pragma once

#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace ddplaunch {

// One option's value as text, and where it came from: "flag" for the command
// line, else the variable that held it ("PET_NNODES").
struct Setting {
  std::string value;
  std::string source;
};
using Settings = std::map<std::string, Setting>;  // by option key

struct OptionSpec {
  const char* key;    // "nnodes": the Settings and --dry-run name
  const char* names;  // CLI11 names: "--nnodes" or "-r,--redirects"
  const char* group;  // --help section
  const char* help;   // without the default, which show() adds
  bool is_flag;       // takes no value ("true" when given)
  const char* pet;    // torchrun's environment default (PET_<NAME>), or nullptr
  const char* also;   // other keys this option sets ("master_addr,master_port"), or nullptr
  // Parses `value` into `config`; `flag` names the option in errors. Throws UsageError.
  void (*apply)(Config& config, const std::string& value, const std::string& flag);
  // The value as --help and --dry-run show it; nullptr: nothing to show.
  std::string (*show)(const Config& config);
  // May be given many times; apply() then sees every value, one a line.
  bool repeatable = false;
};

// Every option, in the order they are applied (later ones may refine earlier ones).
std::span<const OptionSpec> option_table();
const OptionSpec* find_option(std::string_view key);
// The long name ("--nnodes") of an option, for messages.
std::string long_name(const OptionSpec& spec);

// Value parsers shared with the tests.
// torchrun's -r/--redirects and -t/--tee value: "3" or "0:1,1:2".
StreamSelection parse_stream_selection(std::string_view value, std::string_view flag);
// A comma-separated list of non-negative ranks and ranges: "0,3,5" or
// "0-7,9" (at most 1,000,000 of them).
std::set<int> parse_rank_list(std::string_view value, std::string_view flag);
// torchrun's comma-separated filter list: "a,b" is two filters, ",," a comma
// inside one; empty items are dropped.
std::vector<std::string> parse_filter_list(std::string_view value);
// Checks a --prefix template: only {rank} {local_rank} {node_rank} {host} {time}.
void validate_prefix_template(std::string_view tmpl);

}  // namespace ddplaunch
