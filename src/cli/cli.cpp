#include "cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

// --help's layout: one usage line (CLI11's own would add a second); each
// option's dash names (torchrun's underscore spellings are accepted, not
// listed) and its value's name, then its description wrapped to 100
// columns under a column of its own.
class Help : public CLI::Formatter {
 public:
  static constexpr size_t k_width = 100;
  static constexpr size_t k_indent = 32;

  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: ddplaunch [options] [--] program [args...]\n";
  }

  std::string make_option(const CLI::Option* opt, bool) const override {
    std::string names;
    for (const auto& s : opt->get_snames()) {
      names += (names.empty() ? "-" : ", -") + s;
    }
    for (const auto& l : opt->get_lnames()) {
      if (l.find('_') == std::string::npos) {
        names += (names.empty() ? "--" : ", --") + l;
      }
    }
    std::string left = "  " + names;
    if (opt->get_type_size() != 0 && !opt->get_type_name().empty()) {
      left += " " + opt->get_type_name();
    }
    std::string out = left;
    if (left.size() + 2 > k_indent) {
      out += "\n" + std::string(k_indent, ' ');
    } else {
      out += std::string(k_indent - left.size(), ' ');
    }
    out += wrap(opt->get_description());
    return out + "\n";
  }

 private:
  // Words to lines of at most k_width - k_indent columns, each continuation
  // line indented to the description's column. No line starts with a dash
  // (an option's name there would read as an option of its own): a word
  // that starts with one stays with the word before it.
  static std::string wrap(const std::string& text) {
    const size_t room = k_width - k_indent;
    std::vector<std::string_view> words;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find(' ', at), text.size());
      if (end > at && text[at] == '-' && !words.empty()) {
        const char* first = words.back().data();
        words.back() = std::string_view(first, static_cast<size_t>(text.data() + end - first));
      } else if (end > at) {
        words.emplace_back(text.data() + at, end - at);
      }
      at = end + 1;
    }
    std::string out;
    size_t line = 0;
    for (const std::string_view word : words) {
      if (line > 0 && line + 1 + word.size() > room) {
        out += "\n" + std::string(k_indent, ' ');
        line = 0;
      } else if (line > 0) {
        out += ' ';
        ++line;
      }
      out += word;
      line += word.size();
    }
    return out;
  }
};

// The name --help gives an option's value: what it takes, not its type.
std::string value_name(const OptionSpec& spec) {
  static const std::pair<const char*, const char*> k_names[] = {
      {"nproc_per_node", "N|auto|gpu|cpu"},
      {"python", "PATH"},
      {"role", "NAME"},
      {"env_style", "STYLES"},
      {"local_rank_arg", "FORM"},
      {"gpus_per_proc", "K"},
      {"cpu_bind", "HOW"},
      {"map_by", "POLICY"},
      {"bind_to", "WHAT"},
      {"numa_binding", "HOW"},
      {"nnodes", "N|MIN:MAX"},
      {"node_rank", "N|auto"},
      {"master_addr", "HOST"},
      {"master_port", "PORT"},
      {"rdzv_endpoint", "HOST[:PORT]"},
      {"rdzv_id", "ID"},
      {"rdzv_backend", "NAME"},
      {"rdzv_conf", "KEY=VALUE,..."},
      {"worker_port", "PORT"},
      {"local_addr", "ADDR"},
      {"store_bind", "ADDR"},
      {"rdzv_token_file", "FILE"},
      {"preempt_signal", "SIG"},
      {"python_stacks_signal", "SIG"},
      {"event_log", "FILE|-"},
      {"metrics_bind", "ADDR"},
      {"metrics_port", "PORT"},
      {"health_check", "CMD|builtin"},
      {"summary_json", "FILE"},
      {"start_method", "METHOD"},
      {"event_log_handler", "NAME"},
      {"signals_to_handle", "SIGS"},
      {"prefix", "TEMPLATE"},
      {"stdout_tty", "auto|yes|no"},
      {"log_dir", "DIR"},
      {"redirects", "STREAMS"},
      {"tee", "STREAMS"},
      {"ranks_filter", "RANKS"},
      {"local_ranks_filter", "RANKS"},
      {"duplicate_stdout_filters", "STRINGS"},
      {"duplicate_stderr_filters", "STRINGS"},
      {"logs_specs", "NAME"},
      {"hosts", "HOST[:N],..."},
      {"hostfile", "FILE"},
      {"launcher", "ssh|srun|local"},
      {"env_export", "VAR[=VALUE]"},
      {"env_forward", "PATTERNS"},
      {"ssh_args", "ARGS"},
      {"ssh_port", "PORT"},
      {"remote_cwd", "DIR"},
      {"remote_ddplaunch", "PATH"},
      {"output_filename", "DIR"},
      {"wdir", "DIR"},
      {"log_level", "LEVEL"},
  };
  for (const auto& [key, name] : k_names) {
    if (std::string_view(spec.key) == key) {
      return name;
    }
  }
  const std::string_view key = spec.key;
  if (key.ends_with("timeout") || key.ends_with("interval") || key.ends_with("last_call")) {
    return "SECONDS";
  }
  return "N";
}

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
    "Commands (each has its own --help):\n"
    "  ddplaunch check [disk] [gpu] [strays]   this node's built-in health checks\n"
    "  ddplaunch status [--json] [--watch]     what a running job's nodes and ranks do now\n"
    "  ddplaunch stacks [--ranks R]            its ranks' stacks now (the job goes on)\n"
    "  ddplaunch store get|set|add|wait|...    the job's store, from a worker\n"
    "  ddplaunch token init|path               the job token your multi-node jobs use\n"
    "\n"
    "Every option also reads torchrun's PET_<NAME> variable where torchrun has one;\n"
    "a flag wins. --dry-run shows where each value came from.\n"
    "\n"
    "Exit status:\n"
    "  0      every rank on every node succeeded\n"
    "  N      the first failing rank's exit code (the same on every node)\n"
    "  128+N  that rank died of signal N, or ddplaunch was stopped by signal N\n"
    "  1      internal error\n"
    "  2      bad command line or environment value\n"
    "  3      rendezvous failed (a timeout, nodes that disagree, a node not admitted)\n"
    "  4      a node or the store was lost during the job\n"
    "  5      this node failed its health check (--health-check)\n"
    "  75     the job was preempted (--preempt-signal): requeue it\n"
    "  93     retrying cannot help (--max-no-progress-restarts): do not requeue\n"
    "  127    the program cannot be executed\n"
    "See /usr/share/doc/ddplaunch/README.md (README.md in the source).";

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

// The command line, reversed (as CLI11 takes it) with mpirun's spellings
// rewritten, and which options it names.
struct Prescan {
  std::vector<std::string> argv_rev;
  std::vector<bool> named;
  bool help = false;
};

// mpirun's -np, which CLI11 cannot name (one dash, two letters), is --np
// among the options; the program's own arguments are left alone. On the
// way, the options this command line names are noted: only those are built
// (with the short ones, whose letters may be packed in one argument), since
// building all of them cost every launch 0.4 ms, most of it CLI11 checking
// each new name against every other. --help builds all of them.
Prescan prescan(const std::vector<std::string>& args, std::span<const OptionSpec> table) {
  Prescan out{std::vector<std::string>(args.rbegin(), args.rend()),
              std::vector<bool>(table.size(), false)};
  auto& argv_rev = out.argv_rev;
  auto names_of = [](const OptionSpec& o) { return std::string(",") + o.names + ","; };
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
    out.help = out.help || arg == "-h" || arg == "--help";
    const std::string name = "," + arg.substr(0, arg.find('=')) + ",";
    const bool packed = !arg.starts_with("--");
    const OptionSpec* exact = nullptr;
    for (size_t k = 0; k < table.size(); ++k) {
      const std::string names = names_of(table[k]);
      if (names.find(name) != std::string::npos) {
        out.named[k] = true;
        exact = names.find("," + arg + ",") != std::string::npos ? &table[k] : exact;
      } else if (packed && names.size() > 2 && names[1] == '-' && names[2] != '-') {
        out.named[k] = true;  // "-r3", "-mx": CLI11 splits them
      }
    }
    if (exact != nullptr && !exact->is_flag && i > 0) {
      --i;  // its value
    }
  }
  return out;
}

using BoundOptions = std::vector<std::pair<const OptionSpec*, CLI::Option*>>;

// The options the prescan found named (every one for --help), bound to
// VALUES (a deque: stable addresses for CLI11's bindings).
BoundOptions bind_options(CLI::App& app, std::span<const OptionSpec> table, const Prescan& scan,
                          std::deque<std::string>& values) {
  const Config defaults;
  BoundOptions bound;
  for (size_t k = 0; k < table.size(); ++k) {
    if (!scan.help && !scan.named[k]) {
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
    if (!spec.is_flag) {
      opt->type_name(value_name(spec));
    }
    bound.emplace_back(&spec, opt);
  }
  return bound;
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine result;
  CLI::App app{
      "ddplaunch: launch and supervise distributed training workers "
      "(torchrun-compatible flags)",
      "ddplaunch"};
  auto help_layout = std::make_shared<Help>();
  help_layout->column_width(Help::k_indent);
  app.formatter(help_layout);
  app.footer(k_help_footer);
  app.prefix_command();
  app.set_version_flag("--version", std::string("ddplaunch ") + DDPLAUNCH_VERSION);

  const auto table = option_table();
  Prescan scan = prescan(args, table);
  std::deque<std::string> values;
  const BoundOptions bound = bind_options(app, table, scan, values);
  try {
    app.parse(scan.argv_rev);
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
