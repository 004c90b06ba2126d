#include "agent/stacks_room.hpp"

#include <algorithm>

#include "agent/python_stacks.hpp"
#include "log.hpp"
#include "node/process_usage.hpp"
#include "status/stacks_codec.hpp"
#include "status/status_codec.hpp"

namespace ddplaunch {

StacksRoom::StacksRoom(const RoundView& view, const Config& config, const NodeIdentity& self,
                       Spawner& spawner, const Clock& clock)
    : m_view(view), m_self(self), m_clock(clock), m_capture(spawner, clock) {
  if (config.python_stacks_signal && !self.job_dir.empty()) {
    m_capture.use_python_signal(*config.python_stacks_signal, python_stacks_dir(self.job_dir));
  }
}

void StacksRoom::on_round_start() {
  if (m_responder != nullptr) {
    m_responder->start(m_view.round().node_rank);
  }
}

void StacksRoom::answer(const std::string& text, StatusResponder::Reply reply) {
  const std::optional<StatusRequest> request = decode_status_request(text);
  if (!request) {
    log::debug("a stacks request that is not one: {}", text);
    return;
  }
  const RoundView::Round round = m_view.round();
  const bool shown = !request->nodes || request->nodes->contains(round.node_rank);
  if (!shown && round.node_rank != 0) {
    return;  // node 0 always answers: it alone knows the job's size
  }
  NodeStacks head;
  head.node_rank = round.node_rank;
  head.host = m_self.host;
  head.round = round.round;
  if (round.speaks_for_job) {
    head.job_nnodes = round.nnodes;
  }
  std::vector<StackCapture::Target> targets;
  const std::vector<ProcessUsage> usage =
      shown ? tree_usage(m_view.pids()) : std::vector<ProcessUsage>();
  for (size_t i = 0; i < usage.size(); ++i) {
    const RoundView::Rank rank = m_view.rank(i);
    if (request->ranks && !request->ranks->contains(rank.rank)) {
      continue;
    }
    StackCapture::Target t{rank.rank, rank.local_rank, rank.pid, "", usage[i].pids};
    if (rank.exit) {
      t.ended = rank.exit->describe();
    }
    targets.push_back(std::move(t));
  }
  // The command waits --timeout for the answers: this node gives its own a
  // little before, with what it has by then.
  const auto margin = std::chrono::milliseconds(500);
  const auto wait =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::duration<double>(std::clamp(request->timeout_s, 0.1, 86400.0))) -
                   margin,
               std::chrono::milliseconds(100));
  // The nodes asked share node 0's store: those named, or those holding
  // the ranks named, or every node of the round.
  size_t asked = static_cast<size_t>(std::max(1, round.nnodes));
  if (request->nodes) {
    asked = std::min(asked, request->nodes->size());
  }
  if (request->ranks) {
    asked = std::min(asked, request->ranks->size());
  }
  m_capture.capture(
      std::move(head), std::move(targets), m_clock.now() + wait,
      [reply = std::move(reply)](const NodeStacks& record) { reply(encode_node_stacks(record)); },
      StackCapture::bytes_for_node(asked));
}

}  // namespace ddplaunch
