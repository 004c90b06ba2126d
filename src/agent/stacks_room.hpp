// StacksRoom: this node's side of `ddplaunch stacks` (docs/STATUS.md,
// "Stacks on demand"). It answers the store's stacks requests through its
// StatusResponder once the node's rank is known: the ranks asked about
// here, as the RoundView shows them, have their stacks taken by its
// StackCapture, and the node's record is given once the debuggers are done
// or a little before the command stops waiting. On the loop as a
// TimedOwner (deadline(), on_time()); the Driver hands it the debuggers it
// reaps. Not thread-safe: the agent's thread.
#pragma once

#include <optional>
#include <string>

#include "agent/round_view.hpp"
#include "agent/stack_capture.hpp"
#include "config/config.hpp"
#include "node/identity.hpp"
#include "rendezvous/status_responder.hpp"

namespace ddplaunch {

class StacksRoom : public RoundObserver {
 public:
  // All must outlive it.
  StacksRoom(const RoundView& view, const Config& config, const NodeIdentity& self,
             Spawner& spawner, const Clock& clock);
  // The store's requests come through `responder`, started once the node's
  // rank is known.
  void answer_through(StatusResponder* responder) { m_responder = responder; }
  // A request's text: the stacks of the ranks it asks about here, given to
  // `reply` once taken (not at all when its filter leaves this node out).
  void answer(const std::string& request, StatusResponder::Reply reply);
  // A debugger the Driver reaped: true when it was one of this room's.
  bool on_debugger_ended(pid_t pid) { return m_capture.on_debugger_ended(pid); }
  std::optional<Clock::TimePoint> deadline() const { return m_capture.next_deadline(); }
  void on_time(Clock::TimePoint now) {
    (void)now;
    m_capture.on_time();
  }

  // RoundObserver
  void on_round_start() override;

 private:
  const RoundView& m_view;
  const NodeIdentity& m_self;
  const Clock& m_clock;
  StackCapture m_capture;
  StatusResponder* m_responder = nullptr;
};

}  // namespace ddplaunch
