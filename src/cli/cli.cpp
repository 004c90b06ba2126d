#include "cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddplaunch/error.hpp"

namespace ddplaunch {

namespace {

// One usage line, ours (CLI11's own would add a second).
class Usage : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: ddplaunch [options] [--] program [args...]\n";
  }
};

// The edit distance (insertions, deletions, substitutions, swaps of two
// neighbours) between a and b.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closest_option(const std::string& given) {
  const std::string name = given.substr(0, given.find('='));
  std::vector<std::string> names = {"--help", "--version"};
  for (const auto& spec : option_table()) {
    std::string all = spec.names;
    size_t start = 0;
    while (start < all.size()) {
      size_t end = all.find(',', start);
      end = end == std::string::npos ? all.size() : end;
      if (all.compare(start, 2, "--") == 0) {
        names.push_back(all.substr(start, end - start));
      }
      start = end + 1;
    }
  }
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
  for (const auto& candidate : names) {
    const size_t d = distance(name, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

namespace {

constexpr const char* k_help_footer =
    "Examples:\n"
    "  One node, 4 workers:\n"
    "    ddplaunch --nproc-per-node 4 -- train.py --epochs 3\n"
    "  Two nodes (the same command on each; node 0 hosts the store):\n"
    "    ddplaunch --nnodes 2 --nproc-per-node 4 --master-addr node0 -- train.py\n"
    "  Under Slurm (one task per node; the job's shape comes from srun):\n"
    "    srun -N 2 --ntasks-per-node=1 ddplaunch --nproc-per-node gpu -- train.py\n"
    "  Every host from this one, over ssh (or in a Slurm allocation, through srun):\n"
    "    ddplaunch --hosts node0:4,node1:4 -- train.py\n"
    "  Under mpirun (one launcher per host):\n"
    "    mpirun -N 1 ddplaunch --nproc-per-node 4 -- train.py\n"
    "  The job's store from a worker's shell (see ddplaunch store --help):\n"
    "    ddplaunch store set KEY VALUE; ddplaunch store get KEY\n"
    "  A job token every multi-node job of yours then uses (docs/SECURITY.md):\n"
    "    ddplaunch token init\n"
    "\n"
    "Every option also reads torchrun's PET_<NAME> variable where torchrun has one;\n"
    "a flag wins. --dry-run shows where each value came from.\n"
    "Exit status: 0 when every rank succeeds; else the first failing rank's exit code\n"
    "(128+N if it died of signal N). 2 bad usage, 3 rendezvous failed, 4 node or store\n"
    "lost, 127 program cannot be executed, 1 internal error. See README.md.";

// What follows the options: the program and its arguments, after an
// optional "--". An unknown option before it is a usage error.
std::vector<std::string> program_of(std::vector<std::string> rest) {
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    if (auto near = closest_option(rest.front())) {
      throw UsageError("unknown option '" + rest.front() + "'; did you mean " + *near + "?");
    }
    throw UsageError("unknown option '" + rest.front() +
                     "'; see 'ddplaunch --help' (put the program after '--' if it starts "
                     "with '-')");
  }
  if (rest.empty()) {
    throw UsageError("no program given; usage: ddplaunch [options] [--] program [args...]");
  }
  return rest;
}

// mpirun spells its long options with one dash too ("-npernode 4",
// "-oversubscribe"); CLI11 would read "-n pernode". Their two-dash form.
std::optional<std::string> mpirun_long_option(const std::string& arg) {
  static const char* const k_names[] = {"npernode",
                                        "mca",
                                        "gmca",
                                        "wdir",
                                        "wd",
                                        "oversubscribe",
                                        "tag-output",
                                        "timestamp-output",
                                        "output-filename",
                                        "display-map",
                                        "map-by",
                                        "bind-to",
                                        "host",
                                        "hostfile",
                                        "cpus-per-proc",
                                        "cpus-per-rank",
                                        "report-bindings",
                                        "prefix",
                                        "quiet",
                                        "allow-run-as-root",
                                        "use-hwthread-cpus",
                                        "merge-stderr-to-stdout"};
  if (arg.size() < 3 || arg[0] != '-' || arg[1] == '-') {
    return std::nullopt;
  }
  for (const char* name : k_names) {
    if (arg.compare(1, std::string::npos, name) == 0) {
      return "--" + arg.substr(1);
    }
  }
  return std::nullopt;
}

// mpirun's "--mca KEY VALUE" (two values, which CLI11 options do not take)
// at argv_rev[i] (argv reversed: its values at i - 1 and i - 2) becomes
// "-x OMPI_MCA_KEY=VALUE"; i is left on the "-x".
void rewrite_mca(std::vector<std::string>& argv_rev, size_t& i) {
  const std::string flag = argv_rev[i];
  if (i < 2 || argv_rev[i - 1] == "--" || argv_rev[i - 2] == "--" || argv_rev[i - 1].empty()) {
    throw UsageError(flag + " takes a parameter and its value, as mpirun's does: " + flag +
                     " btl self,vader");
  }
  const std::string setting = "OMPI_MCA_" + argv_rev[i - 1] + "=" + argv_rev[i - 2];
  argv_rev.erase(argv_rev.begin() + static_cast<std::ptrdiff_t>(i - 2));
  --i;
  argv_rev[i] = "-x";
  argv_rev[i - 1] = setting;
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine result;
  CLI::App app{
      "ddplaunch: launch and supervise distributed training workers "
      "(torchrun-compatible flags)",
      "ddplaunch"};
  app.formatter(std::make_shared<Usage>());
  app.footer(k_help_footer);
  app.prefix_command();
  app.set_version_flag("--version", std::string("ddplaunch ") + DDPLAUNCH_VERSION);

  // mpirun's -np, which CLI11 cannot name (one dash, two letters), is --np
  // among the options; the program's own arguments are left alone. On the
  // way, the options this command line names are noted: only those are built
  // (with the short ones, whose letters may be packed in one argument), since
  // building all of them cost every launch 0.4 ms, most of it CLI11 checking
  // each new name against every other. --help builds all of them.
  const auto table = option_table();
  std::vector<bool> named(table.size(), false);
  bool help = false;
  auto names_of = [](const OptionSpec& o) { return std::string(",") + o.names + ","; };
  std::vector<std::string> argv_rev(args.rbegin(), args.rend());
  for (size_t i = argv_rev.size(); i-- > 0;) {
    if (argv_rev[i] == "--" || !argv_rev[i].starts_with("-")) {
      break;
    }
    if (auto long_form = mpirun_long_option(argv_rev[i])) {
      argv_rev[i] = *long_form;
    }
    if (argv_rev[i] == "--mca" || argv_rev[i] == "--gmca") {
      rewrite_mca(argv_rev, i);
    }
    std::string& arg = argv_rev[i];
    if (arg == "-np" || arg.starts_with("-np=")) {
      arg.insert(0, "-");
    }
    help = help || arg == "-h" || arg == "--help";
    const std::string name = "," + arg.substr(0, arg.find('=')) + ",";
    const bool packed = !arg.starts_with("--");
    const OptionSpec* exact = nullptr;
    for (size_t k = 0; k < table.size(); ++k) {
      const std::string names = names_of(table[k]);
      if (names.find(name) != std::string::npos) {
        named[k] = true;
        exact = names.find("," + arg + ",") != std::string::npos ? &table[k] : exact;
      } else if (packed && names.size() > 2 && names[1] == '-' && names[2] != '-') {
        named[k] = true;  // "-r3", "-mx": CLI11 splits them
      }
    }
    if (exact != nullptr && !exact->is_flag && i > 0) {
      --i;  // its value
    }
  }

  const Config defaults;
  std::deque<std::string> values;  // stable addresses for CLI11's bindings
  std::vector<std::pair<const OptionSpec*, CLI::Option*>> bound;
  for (size_t k = 0; k < table.size(); ++k) {
    if (!help && !named[k]) {
      continue;
    }
    const OptionSpec& spec = table[k];
    std::string help_text = spec.help;
    if (!spec.is_flag && spec.show != nullptr && !spec.show(defaults).empty()) {
      help_text += " [" + spec.show(defaults) + "]";
    }
    CLI::Option* opt = nullptr;
    if (spec.is_flag) {
      // (add_flag(name, std::string&) would bind the string as the flag's result)
      opt = app.add_flag(spec.names)->description(help_text);
    } else {
      // A repeatable option's values arrive one a line (its apply() splits them).
      opt = app.add_option(spec.names, values.emplace_back(), help_text)
                ->multi_option_policy(spec.repeatable ? CLI::MultiOptionPolicy::Join
                                                      : CLI::MultiOptionPolicy::TakeLast);
    }
    opt->group(spec.group);
    bound.emplace_back(&spec, opt);
  }
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

  result.command = program_of(app.remaining());
  return result;
}

}  // namespace ddplaunch
