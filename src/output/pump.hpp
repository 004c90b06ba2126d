// StreamPump: children's output pipes read on the caller's EventLoop, the one
// implementation of what reading them takes: one read per ready event into
// one buffer; a pipe that fills is enlarged once (a flood); a stream is
// paused while its console stream is behind and read again when there is
// room; a flooding stream goes to reader threads (StreamReaders) where the
// sink allows; each stream's end is told once. Bytes go to a Sink: the
// Agent (the workers' streams, into its router) or the launching command
// (its agents' streams, cut into lines). It owns the fds it is given. Not
// thread-safe: the loop's thread owns it (its reader threads are its own).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "output/router.hpp"
#include "output/stream_readers.hpp"
#include "posix/event_loop.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

class StreamPump : public posix::EventLoop::Owner {
 public:
  // The caller's name for a stream: small and dense (an index into a table).
  using Id = uint32_t;

  class Sink {
   public:
    virtual ~Sink() = default;
    // Bytes read from stream `id`, in order.
    virtual void on_bytes(Id id, std::string_view data) = 0;
    // Stream `id` ended (end of file, or an error reading it); its fd is closed.
    virtual void on_closed(Id id) = 0;
    // The pump stopped (true) or started again (false) reading `id`
    // because its console stream is behind: once each way.
    virtual void on_paused(Id id, bool paused) {
      (void)id;
      (void)paused;
    }
    // A stream that fills its pipe may be read on a reader thread, which
    // writes its lines into the router itself: the router's stream for
    // `id`, or nullopt to keep reading it here (the sink must see every byte).
    virtual std::optional<OutputRouter::StreamRef> reader_stream(Id id) {
      (void)id;
      return std::nullopt;
    }
  };

  // A read this large means the child filled its pipe: the pipe then gets
  // StreamReaders::k_pipe_bytes.
  static constexpr size_t k_pipe_full_at = 64 * 1024;

  // Registers its fds in `loop` under tags `tag_base | id` and its reader
  // threads' under `tag_base | k_readers_id`: `tag_base` is a multiple of
  // EventLoop::k_owner_span, the caller dispatches. `router`: where reader threads write (null: no
  // reader threads). Every reference must outlive the pump.
  StreamPump(posix::EventLoop& loop, uint64_t tag_base, ConsoleSink& console, Sink& sink,
             OutputRouter* router = nullptr);
  // The same, attached to `loop` as an owner of its own: the loop's turn()
  // hands it its ready fds.
  StreamPump(posix::EventLoop& loop, ConsoleSink& console, Sink& sink,
             OutputRouter* router = nullptr);
  ~StreamPump() override;
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  // Reads `fd` from now on as stream `id` (not open already). `console_fd`:
  // 1 or 2, the console stream its bytes go to, which may pause it; 0: it
  // never pauses nor leaves the loop (a progress pipe).
  void add(Id id, posix::Fd fd, int console_fd);
  // Whether `tag` (from the loop) is one of the pump's.
  bool owns(uint64_t tag) const {
    return (tag & ~(posix::EventLoop::k_owner_span - 1)) == m_tag_base;
  }
  // A ready tag owns() accepted: one read of its stream, or the streams
  // that ended on reader threads.
  void on_ready(uint64_t tag);
  void on_ready(uint64_t tag, uint32_t events) override {
    (void)events;
    on_ready(tag);
  }
  // One read of stream `id` now, wherever it is read (a reader thread's
  // under that thread's lock), paused or not: how a child's last bytes are
  // taken when it exits. False when nothing more is there now (or it ended).
  bool read(Id id);
  // The console has room again: paused streams whose console stream is no
  // longer behind are read again.
  void on_console_room();
  // `bounded`: the children have ended, so what is left in their pipes is
  // bounded: every stream is read to its end without waiting for the
  // console (and stays so on the reader threads).
  void set_bounded(bool bounded);
  // Closes every stream without telling the sink (a new round's children
  // take their place).
  void clear();
  bool is_open(Id id) const { return id < m_streams.size() && m_streams[id].fd.valid(); }
  bool is_paused(Id id) const { return id < m_streams.size() && m_streams[id].paused; }
  // Reader threads started so far.
  int reader_threads() const { return m_readers ? m_readers->started() : 0; }
  // Stops and joins the reader threads (before their router goes).
  void stop_readers();

  static constexpr Id k_readers_id = 0x7fffffff;

 private:
  struct Stream {
    posix::Fd fd;
    int console_fd = 0;
    bool paused = false;
    bool grown = false;
    StreamReaders::Slot* handed = nullptr;
  };
  void close(Id id);
  bool hand_over(Id id);
  void take_ended();

  posix::EventLoop& m_loop;
  const bool m_attached;
  const uint64_t m_tag_base;
  ConsoleSink& m_console;
  Sink& m_sink;
  OutputRouter* m_router;
  std::vector<Stream> m_streams;  // by Id
  std::vector<Id> m_paused;       // the paused streams, in the order they paused
  bool m_bounded = false;
  bool m_no_readers = false;  // this machine gets none (one CPU)
  std::unique_ptr<StreamReaders> m_readers;
  // One read: as large as a flooding child's pipe, so a full pipe is one
  // read and one wake-up of its writer. Heap, uninitialised: its pages cost
  // memory only once a flood fills them.
  static constexpr size_t k_read_size = StreamReaders::k_pipe_bytes;
  std::unique_ptr<char[]> m_buffer = std::make_unique_for_overwrite<char[]>(k_read_size);
};

}  // namespace ddplaunch
