"""PyTorch's TCPStore driven like bench/store_bench.cpp drives ours (bench/run.py).

    store_torch.py serve                            master store on 127.0.0.1, port 0;
                                                    prints the port, serves until stdin closes
    store_torch.py run PORT CLIENTS SECONDS OP      OP: set | get | add; prints ops/s

Clients are spread over up to 8 processes, one thread per client (the store
calls release the GIL). set and get use one key per client, add one shared
counter. Note: TCPStore's set() does not wait for the server's answer, so its
set rate measures how fast clients can send, not a round trip.
"""
import datetime
import multiprocessing
import sys
import threading
import time

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=60)


def serve():
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT, wait_for_workers=False)
    print(store.port, flush=True)
    sys.stdin.read()


def worker(port, first, count, seconds, op, start_at, result):
    stores = [dist.TCPStore("127.0.0.1", port, 1, False, timeout=TIMEOUT) for _ in range(count)]
    for i, s in enumerate(stores):
        s.set(f"key{first + i}", "v" * 16)
    counts = [0] * count

    def loop(i):
        s, key, value = stores[i], f"key{first + i}", "w" * 16
        while time.time() < start_at:
            time.sleep(0.001)
        end = start_at + seconds
        n = 0
        while time.time() < end:
            if op == "set":
                s.set(key, value)
            elif op == "get":
                s.get(key)
            else:
                s.add("counter", 1)
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.put(sum(counts))


def run(port, clients, seconds, op):
    procs_n = min(clients, 8)
    start_at = time.time() + 2.0 + clients * 0.01  # time for every client to connect
    result = multiprocessing.Queue()
    procs, first = [], 0
    for p in range(procs_n):
        count = clients // procs_n + (1 if p < clients % procs_n else 0)
        procs.append(multiprocessing.Process(
            target=worker, args=(port, first, count, seconds, op, start_at, result)))
        first += count
    for p in procs:
        p.start()
    total = sum(result.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"{total / seconds:.0f}")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    elif len(sys.argv) == 6 and sys.argv[1] == "run":
        run(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)
