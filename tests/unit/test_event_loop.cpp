// EventLoop: fds whose numbers are reused. A closed fd leaves the epoll by
// itself, and the next fd opened often takes its number: the loop must watch
// that one when told the old one was closed, and keep what another caller
// registered under that number since.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

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
