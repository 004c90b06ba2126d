#include "cli/store_cli.hpp"

#include <CLI/CLI.hpp>
#include <stdexcept>

#include "config/integer.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

struct Shape {
  const char* name;
  const char* help;
  const char* args;  // for the usage line
  size_t min_args;
  size_t max_args;  // 0: any number
  bool timeout;     // takes --timeout
};

constexpr Shape k_shapes[] = {
    {"set", "Set KEY to VALUE (or to standard input's bytes, without VALUE or with -)",
     "KEY [VALUE|-]", 1, 2, false},
    {"get", "Print KEY's value once it exists (exit 1 after --timeout)", "KEY", 1, 1, true},
    {"wait", "Wait until every KEY exists (exit 1 after --timeout)", "KEY...", 1, 0, true},
    {"add", "Add N to the integer at KEY (absent: 0) and print the result", "KEY N", 2, 2, false},
    {"cas", "Set KEY to NEW if it holds OLD (exit 1 if not); print what it holds", "KEY OLD NEW", 3,
     3, false},
    {"delete", "Delete KEY (exit 1 if it did not exist)", "KEY", 1, 1, false},
    {"check", "Exit 0 if every KEY exists, else 1", "KEY...", 1, 0, false},
    {"keys", "Print every key, one a line", "", 0, 0, false},
    {"num-keys", "Print how many keys there are", "", 0, 0, false},
};

// The first word that is not an option (nor an option's value) names the
// subcommand: one that is none is named, with the list.
void check_subcommand(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.starts_with("-")) {
      const bool takes_value = a == "--addr" || a == "--port" || a == "--token-file" ||
                               a == "--prefix" || a == "--timeout";
      i += takes_value ? 1 : 0;
      continue;
    }
    std::string names;
    bool known = false;
    for (const auto& s : k_shapes) {
      names += (names.empty() ? "" : ", ") + std::string(s.name);
      known = known || a == s.name;
    }
    if (!known) {
      throw UsageError("store: '" + a + "' is not a subcommand; the subcommands are " + names);
    }
    return;
  }
}

void check_arguments(const std::string& op, const std::vector<std::string>& positional) {
  for (const auto& s : k_shapes) {
    if (op != s.name) {
      continue;
    }
    if (positional.size() < s.min_args || (s.max_args != 0 && positional.size() > s.max_args)) {
      throw UsageError(std::string("store ") + s.name + " takes " +
                       (s.args[0] != 0 ? s.args : "no arguments") + "; got " +
                       std::to_string(positional.size()) + " argument(s)");
    }
  }
}

// --timeout's seconds and --port's number, checked.
void parse_numbers(StoreCommand& cmd, const std::string& timeout_text,
                   const std::string& port_text) {
  if (!timeout_text.empty()) {
    const auto seconds = parse_seconds_in(timeout_text, 0, 1e6);
    if (!seconds) {
      throw UsageError("store " + cmd.op + " --timeout " + timeout_text +
                       ": give seconds, 0 or more (0: no limit)");
    }
    cmd.timeout_s = *seconds;
  }
  if (!port_text.empty()) {
    const auto port = parse_integer_in(port_text, 1, 65535);
    if (!port) {
      throw UsageError("store --port " + port_text + ": give a port from 1 to 65535");
    }
    cmd.port = static_cast<int>(*port);
  }
}

}  // namespace

StoreCommand parse_store_command(const std::vector<std::string>& args) {
  StoreCommand cmd;
  CLI::App app{
      "ddplaunch store: the job's key-value store, from a worker's shell.\n"
      "Inside a job the store's address, port and credential come from the environment\n"
      "ddplaunch gives every worker; keys live under the job's prefix for its workers.",
      "ddplaunch store"};
  app.footer(
      "Exit status: 0 done; 1 not found, not swapped or timed out; 2 bad usage;\n"
      "3 the store cannot be reached or refused the credential.");
  app.require_subcommand(1);
  app.fallthrough();  // --addr and the like after the subcommand too
  std::string port_text;
  app.add_option("--addr", cmd.addr, "The store's host (default: $DDPLAUNCH_STORE_ADDR)");
  app.add_option("--port", port_text, "The store's port (default: $DDPLAUNCH_STORE_PORT)");
  app.add_option("--token-file", cmd.token_file,
                 "File holding the job's secret (default: the credential itself, in "
                 "$DDPLAUNCH_STORE_TOKEN)");
  app.add_flag("--strict-token", cmd.strict_token,
               "Refuse a token file that other users may read or write (default: warn)");
  std::string prefix;
  auto* prefix_opt = app.add_option(
      "--prefix", prefix, "Prefix of every key (default: $DDPLAUNCH_STORE_PREFIX, else user/)");
  std::vector<std::string> positional;
  std::string timeout_text;
  for (const auto& s : k_shapes) {
    auto* sub = app.add_subcommand(s.name, s.help);
    sub->add_option("args", positional, s.args)->expected(0, -1);
    if (s.timeout) {
      sub->add_option("--timeout", timeout_text, "Seconds to wait; 0: no limit [300]");
    }
    sub->callback([&cmd, &s] { cmd.op = s.name; });
  }
  check_subcommand(args);
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    cmd.print_and_exit = app.help();
    return cmd;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string("store: ") + e.what() +
                     "; run 'ddplaunch store --help' for the subcommands");
  }
  check_arguments(cmd.op, positional);
  cmd.args = positional;
  if (cmd.op == "set" && (cmd.args.size() == 1 || cmd.args[1] == "-")) {
    cmd.value_from_stdin = true;
    cmd.args.resize(1);
  }
  parse_numbers(cmd, timeout_text, port_text);
  if (prefix_opt->count() > 0) {
    cmd.prefix = prefix;
  }
  return cmd;
}

}  // namespace ddplaunch
