// The launcher channel: what a launching command (ddplaunch --hosts) says to
// each agent it starts, on the agent's stdin (through ssh's, for a remote
// one), and what the agent answers first on its stdout. Nothing secret
// appears in a process list: the job token and the forwarded environment
// travel here. Pure: encoding and decoding only (docs/PROTOCOL.md,
// "Launcher channel").
//
//   launcher -> agent: "ddplaunch-channel 1\n", then NAME=VALUE entries,
//     each ended by a NUL byte, then one more NUL. Entries: "token=SECRET"
//     (at most one), "env=VAR=VALUE" (any number). After that, one byte per
//     signal to act on (its number: 2 SIGINT, 15 SIGTERM, ...), or
//     k_channel_stop: the command stops the job for a reason of its own (a
//     host could not be started) and says why itself. End of file: the
//     launching command is gone, and the agent stops its workers.
//   agent -> launcher: "ddplaunch-agent-ready <node rank>\n" once the
//     header is read, then the agent's own output; node 0's
//     "ddplaunch-agent-store-port <port>\n" with --pick-store-port; another
//     node's "ddplaunch-agent-node-0-lost <why>\n" when node 0 was lost.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddplaunch {

struct ChannelHeader {
  std::string token;                                     // empty: none
  std::vector<std::pair<std::string, std::string>> env;  // set for the agent and its workers
  int store_port = 0;  // node 0's store port, where it picked one (--pick-store-port); 0: argv's

  bool operator==(const ChannelHeader&) const = default;
};

// The largest header an agent reads (the environment is the bulk of it).
inline constexpr size_t k_max_channel_header = 1 << 20;
inline constexpr std::string_view k_channel_magic = "ddplaunch-channel 1\n";
// The byte that stops an agent for the command's own reason (not a signal
// number).
inline constexpr char k_channel_stop = 0x7f;
inline constexpr std::string_view k_agent_ready = "ddplaunch-agent-ready ";
// Node 0's agent, with --pick-store-port, once its store listens: "<prefix><port>\n".
inline constexpr std::string_view k_agent_store_port = "ddplaunch-agent-store-port ";
// Another node's agent whose job ended because node 0 was lost (node 0
// cannot say so itself): "<prefix><why>\n", in place of a report of its own;
// the launching command reports it once, naming node 0's host.
inline constexpr std::string_view k_agent_node_0_lost = "ddplaunch-agent-node-0-lost ";

std::string encode_channel_header(const ChannelHeader& header);

// Decodes the header at the start of `bytes`. nullopt: more bytes are
// needed; `consumed` is then 0. Otherwise `consumed` is the header's length
// (what follows it is signal bytes). Throws std::runtime_error on a header
// that is not one (a wrong magic, an entry without '=', over the size limit).
std::optional<ChannelHeader> decode_channel_header(std::string_view bytes, size_t& consumed);

}  // namespace ddplaunch
