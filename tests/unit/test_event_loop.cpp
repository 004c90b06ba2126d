// EventLoop: fds whose numbers are reused, and owners that get their own
// events and deadlines. A closed fd leaves the epoll by
// itself, and the next fd opened often takes its number: the loop must watch
// that one when told the old one was closed, and keep what another caller
// registered under that number since.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "posix/event_loop.hpp"

namespace {

using ddplaunch::posix::EventLoop;

struct TestPipe {
  int read = -1, write = -1;
  TestPipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    read = fds[0];
    write = fds[1];
  }
  // The read end moved to `number` (which must be free).
  void move_read_to(int number) {
    if (read == number) {
      return;
    }
    ASSERT_EQ(::dup3(read, number, O_CLOEXEC), number);
    ::close(read);
    read = number;
  }
  ~TestPipe() {
    ::close(read);
    ::close(write);
  }
};

// The number of a pipe's read end registered under `tag`, then closed: the
// epoll dropped it, the loop's table did not.
int registered_then_closed(EventLoop& loop, uint64_t tag) {
  TestPipe old;
  loop.set(old.read, EPOLLIN, tag);
  return old.read;
}

bool ready_with(EventLoop& loop, uint64_t tag) {
  for (const auto& r : loop.wait(std::chrono::steady_clock::now() + std::chrono::seconds(5))) {
    if (r.tag == tag) {
      return true;
    }
  }
  return false;
}

TEST(EventLoop, AFdUnderAClosedOnesNumberAndTagIsWatchedOnceTheOldOneIsForgotten) {
  EventLoop loop;
  const int number = registered_then_closed(loop, 7);
  TestPipe fresh;
  fresh.move_read_to(number);
  // The same number, events and tag: only the forgetting makes this a new
  // registration (a store socket from a new connect attempt).
  loop.forget_closed(number, 7);
  loop.set(number, EPOLLIN, 7);
  ASSERT_EQ(::write(fresh.write, "x", 1), 1);
  EXPECT_TRUE(ready_with(loop, 7));
}

TEST(EventLoop, ForgettingAClosedFdKeepsWhatAnotherTagRegisteredUnderItsNumberSince) {
  EventLoop loop;
  const int number = registered_then_closed(loop, 1);
  TestPipe other;  // a worker's pipe, say, that took the number first
  other.move_read_to(number);
  loop.set(number, EPOLLIN, 2);
  loop.forget_closed(number, 1);  // the closed one's owner catches up
  EXPECT_TRUE(loop.contains(number));
  ASSERT_EQ(::write(other.write, "x", 1), 1);
  EXPECT_TRUE(ready_with(loop, 2));
}

TEST(EventLoop, AnOpenFdForgottenAsClosedIsRegisteredAgainWithoutAnError) {
  EventLoop loop;
  TestPipe pipe;
  loop.set(pipe.read, EPOLLIN, 1);
  loop.forget_closed(pipe.read);  // wrongly: it is open, and still in the epoll
  EXPECT_NO_THROW(loop.set(pipe.read, EPOLLIN, 3));
  ASSERT_EQ(::write(pipe.write, "x", 1), 1);
  EXPECT_TRUE(ready_with(loop, 3));
}

}  // namespace

namespace {

using ddplaunch::posix::TimedOwner;
using ddplaunch::posix::Watch;

// An owner that records what the loop told it.
struct Recorder : EventLoop::Owner {
  std::vector<std::string>* log;
  std::optional<TimePoint> due;
  std::string name;
  Recorder(std::vector<std::string>& l, std::string n) : log(&l), name(std::move(n)) {}
  void prepare() override { log->push_back(name + " prepare"); }
  void on_ready(uint64_t tag, uint32_t) override {
    log->push_back(name + " ready " + std::to_string(tag % EventLoop::k_owner_span));
  }
  std::optional<TimePoint> deadline() const override { return due; }
  void on_time(TimePoint now) override {
    if (due && now >= *due) {
      log->push_back(name + " due");
      due.reset();
    }
  }
};

// Each owner gets its own fds' events, is prepared before the wait and told
// the time after it; a tag no owner has goes to the caller.
TEST(EventLoopOwners, EachReadyFdGoesToItsOwnerAndEveryOwnerIsPreparedThenTimed) {
  EventLoop loop;
  std::vector<std::string> log;
  Recorder a(log, "a"), b(log, "b");
  const uint64_t base_a = loop.attach(a);
  const uint64_t base_b = loop.attach(b);
  EXPECT_NE(base_a, base_b);
  EXPECT_EQ(loop.owner_of(base_b | 5), &b);
  TestPipe pa, pb, bare;
  loop.set(pa.read, EPOLLIN, base_a | 1);
  loop.set(pb.read, EPOLLIN, base_b | 2);
  loop.set(bare.read, EPOLLIN, 7);  // a tag picked by hand: no owner's
  ASSERT_EQ(::write(pb.write, "x", 1), 1);
  ASSERT_EQ(::write(bare.write, "y", 1), 1);
  std::vector<uint64_t> others;
  loop.turn(std::nullopt, [&others](const EventLoop::Ready& r) { others.push_back(r.tag); });
  EXPECT_EQ(others, std::vector<uint64_t>{7});
  ASSERT_GE(log.size(), 3u);
  EXPECT_EQ(log[0], "a prepare");
  EXPECT_EQ(log[1], "b prepare");
  EXPECT_EQ(log[2], "b ready 2");
  loop.detach(a);
  EXPECT_EQ(loop.owner_of(base_a | 1), nullptr);
  Recorder c(log, "c");
  const uint64_t base_c = loop.attach(c);
  EXPECT_NE(base_c, base_a) << "a detached owner's tags go to nobody else";
  EXPECT_EQ(loop.owner_of(base_a | 1), nullptr);
  loop.remove(pa.read);
  loop.remove(pb.read);
  loop.remove(bare.read);
}

// With nothing ready, the wait ends at the first owner's deadline, and that
// owner is told.
TEST(EventLoopOwners, TheFirstDeadlineEndsTheWaitAndItsOwnerIsTold) {
  EventLoop loop;
  std::vector<std::string> log;
  Recorder a(log, "a");
  loop.attach(a);
  const auto start = std::chrono::steady_clock::now();
  a.due = start + std::chrono::milliseconds(20);
  loop.turn(start + std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(log.back(), "a due");
}

// A Watch calls its function while its fd is readable and leaves the loop
// with itself; a TimedOwner passes deadlines through.
TEST(EventLoopOwners, AWatchAndATimedOwnerRideTheLoopWhileTheyLive) {
  EventLoop loop;
  TestPipe p;
  int calls = 0;
  {
    Watch watch(loop, p.read, [&calls] { ++calls; });
    ASSERT_EQ(::write(p.write, "z", 1), 1);
    loop.turn(std::nullopt);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(loop.contains(p.read));
  }
  EXPECT_FALSE(loop.contains(p.read));
  struct Timed {
    std::optional<EventLoop::TimePoint> d;
    int told = 0;
    std::optional<EventLoop::TimePoint> deadline() const { return d; }
    void on_time(EventLoop::TimePoint) { ++told; }
  } timed;
  timed.d = std::chrono::steady_clock::now();
  {
    TimedOwner<Timed> owner(loop, timed);
    loop.turn(std::nullopt);
    EXPECT_EQ(timed.told, 1);
  }
  loop.turn(std::chrono::steady_clock::now());
  EXPECT_EQ(timed.told, 1) << "detached with the owner";
}

}  // namespace
