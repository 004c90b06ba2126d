#include <gtest/gtest.h>

#include <csignal>

#include "cli/cli.hpp"
#include "cli/completion.hpp"
#include "cluster/precedence.hpp"
#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "config/options.hpp"

namespace ddplaunch {
namespace {

// The whole input pipeline over an empty environment: the tests never
// depend on the caller's.
Config parse(const std::vector<std::string>& args, const EnvMap& env = {}) {
  return configure(parse_command_line(args), env);
}

TEST(Config, DefaultsMatchTheDocs) {
  Config c = parse({"prog"});
  EXPECT_EQ(c.nproc_mode, NprocMode::k_fixed);
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_FALSE(c.node_rank.has_value());
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_EQ(c.rdzv_id, "none");
  EXPECT_EQ(c.term_timeout_s, 30);
  EXPECT_EQ(c.prefix, "[rank {rank}]: ");
  EXPECT_EQ(c.program, "prog");
  EXPECT_TRUE(c.program_args.empty());
}

TEST(Config, GoodCommandLines) {
  struct Case {
    std::vector<std::string> args;
    void (*check)(const Config&);
  };
  const Case cases[] = {
      {{"--nproc-per-node", "4", "train.py", "--epochs", "3"},
       [](const Config& c) {
         EXPECT_EQ(c.nproc_per_node, 4);
         EXPECT_EQ(c.program, "train.py");
         EXPECT_EQ(c.program_args, (std::vector<std::string>{"--epochs", "3"}));
       }},
      {{"--nproc_per_node=2", "--master_addr", "h0", "--master_port", "1234", "--node_rank", "1",
        "--nnodes", "2", "--", "p", "--nproc-per-node", "9"},
       [](const Config& c) {
         EXPECT_EQ(c.nproc_per_node, 2);
         EXPECT_EQ(c.master_addr, "h0");
         EXPECT_EQ(c.master_port, 1234);
         EXPECT_EQ(c.node_rank, 1);
         EXPECT_EQ(c.program_args, (std::vector<std::string>{"--nproc-per-node", "9"}));
       }},
      {{"--nproc-per-node", "gpu", "p"},
       [](const Config& c) { EXPECT_EQ(c.nproc_mode, NprocMode::k_gpu); }},
      {{"--nproc-per-node", "auto", "p"},
       [](const Config& c) { EXPECT_EQ(c.nproc_mode, NprocMode::k_auto); }},
      {{"--nproc-per-node", "cpu", "p"},
       [](const Config& c) { EXPECT_EQ(c.nproc_mode, NprocMode::k_cpu); }},
      {{"--nnodes", "3:3", "p"},
       [](const Config& c) {
         EXPECT_EQ(c.nnodes, 3);
         EXPECT_EQ(c.min_nodes(), 3) << "a fixed size...";
         EXPECT_TRUE(c.elastic()) << "...whose extra agents wait as hot spares";
       }},
      {{"--nnodes", "1:4", "p"},
       [](const Config& c) {
         EXPECT_TRUE(c.elastic());
         EXPECT_EQ(c.min_nodes(), 1);
         EXPECT_EQ(c.nnodes, 4);
         EXPECT_EQ(c.rdzv_last_call_s, 5) << "the documented default";
       }},
      {{"--nnodes", "2:4", "--nnodes", "3", "p"},
       [](const Config& c) { EXPECT_FALSE(c.elastic()) << "the last --nnodes wins, whole"; }},
      {{"--nnodes", "2:3", "--rdzv-conf", "join_timeout=9,last_call_timeout=2", "p"},
       [](const Config& c) { EXPECT_EQ(c.rdzv_last_call_s, 2) << "torchrun's key"; }},
      {{"--rdzv_endpoint", "node7:4000", "p"},
       [](const Config& c) {
         EXPECT_EQ(c.master_addr, "node7");
         EXPECT_EQ(c.master_port, 4000);
       }},
      {{"--no-prefix", "p"}, [](const Config& c) { EXPECT_EQ(c.prefix, ""); }},
      {{"-m", "pkg.mod", "a"},
       [](const Config& c) {
         EXPECT_TRUE(c.module);
         EXPECT_EQ(c.program, "pkg.mod");
       }},
      {{"--redirects", "0:1,1:3", "--tee", "2", "p"},
       [](const Config& c) {
         EXPECT_TRUE(c.redirects.selects_stdout(0));
         EXPECT_FALSE(c.redirects.selects_stderr(0));
         EXPECT_TRUE(c.redirects.selects_stderr(1));
         EXPECT_FALSE(c.redirects.selects_stdout(2));
         EXPECT_TRUE(c.tee.selects_stderr(5));
       }},
      {{"--ranks-filter", "0,3", "p"},
       [](const Config& c) {
         EXPECT_TRUE(c.console_allows(3, 0));
         EXPECT_FALSE(c.console_allows(1, 1));
       }},
      {{"--max_restarts", "3", "--worker-port", "23456", "--term-timeout", "0", "p"},
       [](const Config& c) {
         EXPECT_EQ(c.max_restarts, 3);
         EXPECT_EQ(c.worker_port, 23456);
         EXPECT_EQ(c.term_timeout_s, 0);
       }},
      {{"--standalone", "--rdzv-backend", "c10d", "--monitor-interval", "5", "p"},
       [](const Config& c) { EXPECT_EQ(c.nnodes, 1); }},
      {{"--preempt-signal", "usr1", "--restart-min-progress", "50", "--max-no-progress-restarts",
        "0", "--health-check", "nvidia-smi -L", "--health-check-timeout", "5",
        "--restart-reclaim-timeout", "0", "p"},
       [](const Config& c) {
         EXPECT_EQ(c.preempt_signal, SIGUSR1);
         EXPECT_TRUE(c.progress_restarts());
         EXPECT_EQ(c.restart_min_progress, 50);
         EXPECT_EQ(c.max_no_progress_restarts, 0);
         EXPECT_EQ(c.health_check, "nvidia-smi -L");
         EXPECT_EQ(c.health_check_timeout_s, 5);
         EXPECT_EQ(c.restart_reclaim_timeout_s, 0);
       }},
      {{"--python-stacks-signal", "usr2", "p"},
       [](const Config& c) { EXPECT_EQ(c.python_stacks_signal, SIGUSR2); }},
      {{"--python-stacks-signal", "SIGRTMIN+3", "--preempt-signal", "USR2", "p"},
       [](const Config& c) { EXPECT_EQ(c.python_stacks_signal, SIGRTMIN + 3); }},
      {{"--preempt-signal", "15", "p"},
       [](const Config& c) {
         EXPECT_EQ(c.preempt_signal, SIGTERM);
         EXPECT_FALSE(c.progress_restarts()) << "off unless asked: torchrun's restarts";
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    c.check(parse(c.args));
  }
}

TEST(Config, BadCommandLinesAreUsageErrorsNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* message_part;
  };
  const Case cases[] = {
      {{}, "no program given"},
      {{"--nproc-per-node", "2"}, "no program given"},
      {{"--bogus", "p"}, "--bogus"},
      {{"--nproc-per-node", "abc", "p"}, "--nproc-per-node"},
      {{"--nproc-per-node", "0", "p"}, "--nproc-per-node"},
      {{"--nproc-per-node", "-3", "p"}, "--nproc-per-node"},
      {{"--nnodes", "0", "p"}, "--nnodes"},
      {{"--nnodes", "4:2", "p"}, "MIN is larger than MAX"},
      {{"--nnodes", "1:", "p"}, "--nnodes"},
      {{"--rdzv-last-call", "-1", "p"}, "--rdzv-last-call"},
      {{"--preempt-signal", "KILL", "p"}, "--preempt-signal takes USR1, USR2"},
      {{"--python-stacks-signal", "TERM", "p"},
       "--python-stacks-signal takes USR1, USR2 or RTMIN+N"},
      {{"--python-stacks-signal", "RTMIN+99", "p"}, "--python-stacks-signal takes"},
      {{"--python-stacks-signal", "USR1", "--preempt-signal", "USR1", "p"}, "name the same signal"},
      {{"--restart-min-progress", "-1", "p"}, "--restart-min-progress"},
      {{"--health-check-timeout", "0", "p"}, "--health-check-timeout"},
      {{"--nnodes", "2", "--node-rank", "2", "p"}, "out of range"},
      {{"--node-rank", "x", "p"}, "--node-rank"},
      {{"--master-port", "0", "p"}, "--master-port"},
      {{"--master-port", "65536", "p"}, "--master-port"},
      {{"--worker-port", "70000", "p"}, "--worker-port"},
      {{"--rdzv-endpoint", "a:b:c", "p"}, "--rdzv-endpoint"},
      {{"--rdzv-backend", "etcd", "p"}, "--rdzv-backend"},
      {{"--term-timeout", "-1", "p"}, "--term-timeout"},
      {{"--rdzv-timeout", "0", "p"}, "--rdzv-timeout"},
      {{"--heartbeat-interval", "5", "--heartbeat-timeout", "2", "p"}, "--heartbeat-timeout"},
      {{"--redirects", "4", "p"}, "--redirects"},
      {{"--tee", "0:x", "p"}, "--tee"},
      {{"--ranks-filter", "a,b", "p"}, "--ranks-filter"},
      {{"--prefix", "{nope}", "p"}, "{nope}"},
      {{"--log-level", "loud", "p"}, "--log-level"},
      {{"-m", "--no-python", "p"}, "--no-python"},
      {{"--master-addr", "", "p"}, "--master-addr"},
      {{"--nnodes", "2", "-np", "5", "p"}, "does not split evenly"},
      {{"--nnodes", "2", "-np", "6", "--nproc-per-node", "2", "p"}, "disagrees"},
      {{"--map-by", "node", "p"}, "--nproc-per-node N"},
      {{"--map-by", "ppr:0:node", "p"}, "--map-by"},
      {{"--bind-to", "board", "p"}, "--cpu-bind"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    try {
      parse(c.args);
      ADD_FAILURE() << "accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
    }
  }
}

TEST(Config, MpirunsPlacementOptionsBecomeDdplaunchs) {
  Config c = parse({"-np", "4", "p"});
  EXPECT_EQ(c.nproc_per_node, 4);
  c = parse({"--nnodes", "2", "-np", "6", "p"});
  EXPECT_EQ(c.nproc_per_node, 3);
  c = parse({"--nnodes", "2", "-n", "6", "--nproc-per-node", "3", "p"});
  EXPECT_EQ(c.nproc_per_node, 3);
  c = parse({"--map-by", "ppr:3:node", "--bind-to", "core", "p"});
  EXPECT_EQ(c.nproc_per_node, 3);
  EXPECT_EQ(c.cpu_bind, CpuBind::k_cores);
  c = parse({"--bind-to", "socket", "--map-by", "slot", "p"});
  EXPECT_EQ(c.cpu_bind, CpuBind::k_numa);
  EXPECT_EQ(c.nproc_per_node, 1);
  // The program's own -np is its own.
  c = parse({"p", "-np", "9"});
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.program_args, (std::vector<std::string>{"-np", "9"}));
  EXPECT_FALSE(parse({"--no-pmix", "p"}).pmix);
  EXPECT_TRUE(parse({"p"}).pmix);
}

// Every mpirun spelling docs/MPI.md lists: accepted as what ddplaunch does,
// or refused with the ddplaunch form.
TEST(Config, MpirunsSpellingsAreAcceptedOrRefusedWithTheirEquivalent) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-npernode", "4", "p"}, {"--npernode", "4", "p"}, {"-N", "4", "p"}}) {
    EXPECT_EQ(parse(args).nproc_per_node, 4) << args[0];
  }
  Config c = parse({"-mca", "btl", "self,vader", "--mca", "orte_base_help_aggregate", "0", "-x",
                    "A=1", "--gmca", "pml", "ob1", "p", "--mca", "x", "y"});
  EXPECT_EQ(c.env_export, (std::vector<std::string>{"OMPI_MCA_btl=self,vader",
                                                    "OMPI_MCA_orte_base_help_aggregate=0", "A=1",
                                                    "OMPI_MCA_pml=ob1"}));
  EXPECT_EQ(c.program_args, (std::vector<std::string>{"--mca", "x", "y"})) << "the program's own";
  EXPECT_THROW(parse({"--mca", "btl"}), UsageError);
  c = parse({"-oversubscribe", "--allow-run-as-root", "-tag-output", "--use-hwthread-cpus", "p"});
  EXPECT_EQ(c.prefix, "[rank {rank}]: ");
  EXPECT_EQ(c.notes.size(), 2u)
      << "--oversubscribe and --use-hwthread-cpus say why nothing is done";
  EXPECT_EQ(parse({"--timestamp-output", "p"}).prefix, "[{time}] [rank {rank}]: ");
  EXPECT_EQ(parse({"--output-filename", "/logs", "p"}).log_dir, "/logs");
  EXPECT_TRUE(parse({"-merge-stderr-to-stdout", "p"}).merge_stderr);
  EXPECT_TRUE(parse({"--display-map", "p"}).report_bindings);
  c = parse({"-wdir", "/work", "p"});
  EXPECT_EQ(c.wdir, "/work");
  EXPECT_EQ(c.remote_cwd, "/work");
  EXPECT_EQ(parse({"--wd", "w", "--remote-cwd", "r", "p"}).remote_cwd, "r");
  EXPECT_EQ(parse({"-q", "p"}).log_level, "warn");
  // Open MPI's install prefix is never the line prefix.
  c = parse({"--prefix", "/usr", "p"});
  EXPECT_EQ(c.prefix, "[rank {rank}]: ");
  EXPECT_EQ(c.notes.size(), 1u);
  EXPECT_EQ(parse({"--prefix", "{rank}> ", "p"}).prefix, "{rank}> ");
  const std::pair<std::vector<std::string>, const char*> refused[] = {
      {{"-c", "2", "p"}, "--cpu-bind cores"},
      {{"--cpus-per-proc", "2", "p"}, "--cpu-bind cores"},
      {{"--map-by", "ppr:2:socket", "p"}, "--cpu-bind numa"},
      {{"--map-by", "core:PE=2", "p"}, "--cpu-bind cores"},
      {{"--map-by", "node", "p"}, "--nproc-per-node"},
  };
  for (const auto& [args, equivalent] : refused) {
    try {
      parse(args);
      ADD_FAILURE() << args[0] << " " << args[1] << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(equivalent), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse({"--stdout-tty", "yes", "p"}).stdout_tty, StdoutTty::k_yes);
  EXPECT_THROW(parse({"--stdout-tty", "maybe", "p"}), UsageError);
}

TEST(Config, HelpAndVersionPrintAndExit) {
  auto help = parse_command_line({"--help"});
  ASSERT_TRUE(help.print_and_exit);
  EXPECT_NE(help.print_and_exit->find("Nodes and rendezvous"), std::string::npos);
  EXPECT_NE(help.print_and_exit->find("--nproc-per-node"), std::string::npos);
  auto version = parse_command_line({"--version"});
  ASSERT_TRUE(version.print_and_exit);
  EXPECT_EQ(version.print_and_exit->rfind("ddplaunch ", 0), 0u);
}

TEST(Config, HelpShowsTheDefaultsWrittenInConfig) {
  const std::string help = *parse_command_line({"--help"}).print_and_exit;
  const Config defaults;
  for (const auto& spec : option_table()) {
    if (*spec.group == '\0') {
      EXPECT_EQ(help.find(long_name(spec)), std::string::npos) << spec.key;  // hidden
      continue;
    }
    EXPECT_NE(help.find(long_name(spec)), std::string::npos) << spec.key;
    if (!spec.is_flag && spec.show != nullptr && !spec.show(defaults).empty()) {
      EXPECT_NE(help.find("[" + spec.show(defaults) + "]"), std::string::npos) << spec.key;
    }
  }
  EXPECT_NE(help.find("[29500]"), std::string::npos);
  EXPECT_NE(help.find("[600]"), std::string::npos);
}

TEST(Config, TheCallersEnvironmentDoesNotLeakIn) {
  // The pipeline reads only the environment it is handed.
  ::setenv("PET_NNODES", "7", 1);
  ::setenv("PET_NPROC_PER_NODE", "bogus", 1);
  Config c = parse({"prog"});
  ::unsetenv("PET_NNODES");
  ::unsetenv("PET_NPROC_PER_NODE");
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.nproc_per_node, 1);
}

TEST(Config, FlagBeatsDetectorBeatsDefault) {
  const EnvMap env = {{"PET_NNODES", "2"}, {"PET_MASTER_PORT", "4000"}, {"PET_NODE_RANK", "1"}};
  Config c = parse({"--master-port", "5000", "prog"}, env);
  EXPECT_EQ(c.nnodes, 2);
  EXPECT_EQ(c.source_of("nnodes"), "PET_NNODES");
  EXPECT_EQ(c.master_port, 5000);
  EXPECT_EQ(c.source_of("master_port"), "flag");
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.source_of("master_addr"), "default");
  // An endpoint sets the address and port, and says where they came from.
  Config e = parse({"prog"}, {{"PET_RDZV_ENDPOINT", "node7:29400"}});
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.source_of("master_addr"), "PET_RDZV_ENDPOINT");
  EXPECT_EQ(e.source_of("master_port"), "PET_RDZV_ENDPOINT");
}

TEST(Config, TensorFlowRolesImplyTheStyleAndLeaveAWorker) {
  Config c = configure(
      parse_command_line({"--nproc-per-node", "4", "--tf-ps", "2", "--tf-chief", "train.py"}), {});
  EXPECT_TRUE(c.env_tf);
  EXPECT_EQ(c.tf_ps, 2);
  EXPECT_THROW(configure(parse_command_line(
                             {"--nproc-per-node", "3", "--tf-ps", "2", "--tf-chief", "train.py"}),
                         {}),
               UsageError);
}

TEST(Config, DetectorsReportTheVariableOfEachValue) {
  auto found = detect_all({{"PET_NNODES", "3"}, {"PET_STANDALONE", "0"}, {"UNRELATED", "x"}});
  ASSERT_EQ(found.size(), 5u);  // PET_*, Slurm, Open MPI, the MPI hostfile, Kubernetes/Azure
  EXPECT_TRUE(found[1].values.empty() && found[2].values.empty() && found[3].values.empty() &&
              found[4].values.empty());
  EXPECT_EQ(found[0].values.at("nnodes").value, "3");
  EXPECT_EQ(found[0].values.at("nnodes").source, "PET_NNODES");
  EXPECT_EQ(found[0].values.size(), 2u);
}

TEST(Config, BadValuesFromVariablesNameTheVariable) {
  struct Case {
    EnvMap env;
    std::vector<std::string> args;
    const char* message_part;
  };
  const Case cases[] = {
      {{{"PET_NNODES", "many"}}, {"prog"}, "got 'many' (set by $PET_NNODES; fix or unset it)"},
      {{{"PET_NNODES", "2"}, {"PET_NODE_RANK", "5"}},
       {"prog"},
       "(set by $PET_NNODES, $PET_NODE_RANK; fix or unset it)"},
      {{{"PET_NODE_RANK", "5"}}, {"--nnodes", "2", "prog"}, "(set by $PET_NODE_RANK; fix"},
      {{{"PET_MASTER_PORT", "0"}}, {"prog"}, "--master-port must be a port"},
      {{{"PET_STANDALONE", "maybe"}}, {"prog"}, "$PET_STANDALONE"},
  };
  for (const auto& c : cases) {
    try {
      parse(c.args, c.env);
      ADD_FAILURE() << "accepted " << c.message_part;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << e.what();
    }
  }
  // A flag given on the command line is not blamed on a variable.
  try {
    parse({"--nnodes", "x", "prog"}, {{"PET_NNODES", "2"}});
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).find("PET_"), std::string::npos) << e.what();
  }
}

TEST(Config, RendezvousEndpointForms) {
  struct Case {
    std::vector<std::string> args;
    const char* addr;
    int port;
  };
  const Case cases[] = {
      {{"--rdzv-endpoint", "node7:4000", "p"}, "node7", 4000},
      {{"--rdzv-endpoint", "node7", "p"}, "node7", 29400},
      {{"--rdzv-endpoint", "[::1]:4000", "p"}, "::1", 4000},
      {{"--rdzv-endpoint", "[fe80::2]", "p"}, "fe80::2", 29400},
      {{"--rdzv-endpoint", "localhost:0", "p"}, "localhost", 0},
  };
  for (const auto& c : cases) {
    Config cfg = parse(c.args);
    EXPECT_EQ(cfg.master_addr, c.addr);
    EXPECT_EQ(cfg.master_port, c.port);
  }
  for (const char* bad : {"::1:4000", "[::1", "[]:5", ":5", "h:x", "[::1]x"}) {
    EXPECT_THROW(parse({"--rdzv-endpoint", bad, "p"}), UsageError) << bad;
  }
  EXPECT_THROW(parse({"--rdzv-endpoint", "h:0", "--nnodes", "2", "p"}), UsageError);
}

TEST(Config, TheLastOfARepeatedOptionWins) {
  Config c = parse({"--nproc-per-node", "2", "--nproc-per-node", "3", "prog"});
  EXPECT_EQ(c.nproc_per_node, 3);
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(Cli, AMistypedOptionSuggestsTheClosestOne) {
  EXPECT_EQ(closest_option("--nproc-per-nod"), "--nproc-per-node");
  EXPECT_EQ(closest_option("--nnode=2"), "--nnodes");
  EXPECT_EQ(closest_option("--max-restart"), "--max-restarts");
  EXPECT_EQ(closest_option("--rdzv-endpiont"), "--rdzv-endpoint") << "two letters swapped";
  EXPECT_FALSE(closest_option("--bogus"));
  EXPECT_FALSE(closest_option("--frobnicate"));
}

TEST(Cli, CompletionsListEveryOptionOfTheTable) {
  const auto bash = completion_script("bash");
  const auto zsh = completion_script("zsh");
  ASSERT_TRUE(bash && zsh);
  EXPECT_FALSE(completion_script("fish"));
  for (const auto& spec : option_table()) {
    if (*spec.group == '\0') {
      continue;  // set by ddplaunch for the agents it starts
    }
    const std::string names = spec.names;
    const std::string first = names.substr(0, names.find(','));
    EXPECT_NE(bash->find(" " + first), std::string::npos) << first;
    EXPECT_NE(zsh->find(first + "["), std::string::npos) << first;
  }
  EXPECT_NE(bash->find("num-keys"), std::string::npos) << "the store's subcommands";
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

// The one integer parser every flag, record and environment value goes through.
TEST(Integer, StrictWholeTextOnly) {
  struct Case {
    const char* text;
    std::optional<long long> value;
  };
  const Case cases[] = {
      {"0", 0},
      {"42", 42},
      {"-7", -7},
      {"", std::nullopt},
      {" 1", std::nullopt},
      {"1 ", std::nullopt},
      {"+1", std::nullopt},
      {"0x10", std::nullopt},
      {"1.5", std::nullopt},
      {"1e3", std::nullopt},
      {"12abc", std::nullopt},
      {"99999999999999999999", std::nullopt},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(parse_integer(c.text), c.value) << '"' << c.text << '"';
  }
  EXPECT_EQ(parse_integer_in("65535", 1, 65535), 65535);
  EXPECT_FALSE(parse_integer_in("65536", 1, 65535));
  EXPECT_FALSE(parse_integer_in("0", 1, 65535));
}

}  // namespace
}  // namespace ddplaunch
