// The agent's end of the launcher channel (launcher/channel.hpp): an agent
// started by a launching command (--launcher-channel) reads the header from
// its stdin at start, then a thread turns every signal byte that follows
// into that signal to the agent itself, and the channel's end (the launching
// command gone, its ssh connection dropped) into SIGTERM. The signals then
// reach the agent's one signalfd like any other, so every phase handles them.
#pragma once

#include <string>

#include "launcher/channel.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

struct AgentChannel {
  ChannelHeader header;
  posix::Fd fd;         // the channel, moved off fd 0 (close-on-exec)
  std::string pending;  // signal bytes read with the header
};

// Reads the header from stdin (waiting at most `timeout_ms`), moves the
// channel to another fd and gives fd 0 /dev/null: workers never read the
// channel. Throws LaunchError (internal) when the header does not come.
AgentChannel open_agent_channel(int timeout_ms);

// Writes "ddplaunch-agent-ready NODE_RANK\n" to stdout: the launching command
// counts this node as started.
void announce_ready(int node_rank);
// Node 0 with --pick-store-port, once its store listens: writes
// "ddplaunch-agent-store-port PORT\n" to stdout, which the launching command
// hands to the other agents in their headers.
void announce_store_port(int port);

// This node's job ended because node 0 was lost: writes
// "ddplaunch-agent-node-0-lost WHY\n" to stdout (WHY on one line), which the
// launching command reports once for every node.
void announce_node_0_lost(const std::string& why);

// Starts the thread that watches the channel (see above). Call once, after
// the signals are blocked and after the job guard's fork; the thread
// inherits the blocked mask and lives until the process exits.
void watch_agent_channel(AgentChannel& channel);

// Whether the channel has ended (the launching command or its ssh is gone):
// the SIGTERM this process raised then was not a signal the command relayed.
bool agent_channel_ended();

// Whether the launching command stopped this agent for a reason of its own
// (k_channel_stop), which it says itself.
bool agent_stopped_by_command();

}  // namespace ddplaunch
