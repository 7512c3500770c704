"""A rank of a fault scenario: logs ``<tag>-<i>`` records through the real front ends.

    python -m tests.faults.rank TAG COUNT MODE [ARG]

MODE:
  burst      log COUNT records (a short pause every ARG records, default none), exit.
  kill       log COUNT records, then SIGKILL itself (the kill lands right after the last
             log call returned, in the middle of the burst the process would go on with).
  pause      log COUNT records, print "paused", wait for a line on stdin, log ARG more.
  alarm      log COUNT records while SIGALRM every 0.3 ms logs ``<tag>h-<i>`` from its
             handler; prints the handler's count at the end: COUNT + that emitted.
  exit       log COUNT records, then leave with os._exit(0) (a multiprocessing child).
  kill_span  inside an ft span (spans spooled too) log COUNT records, then SIGKILL itself.
  torn       log COUNT records with a SpoolWriter, then append the first half of one more
             record to its file and leave with os._exit: COUNT + 1 emitted.
  big        log one record of ARG MiB, then COUNT small ones, then os._exit(0):
             COUNT + 1 emitted.
  forks      a thread logs COUNT records while the main thread forks ARG children, each
             logging 50 records ``<tag>c<j>-<i>`` and leaving with os._exit(0).
  seps       log COUNT records whose messages hold the line and paragraph separators
             U+2028 and U+2029 (and a newline), then exit.

The spool root is $NVRX_NODE_LOCAL_TMPDIR, given to ``setup_logger(node_local_tmp_dir=)``.
Every mode emits an exact, known number of records, so the ledger needs no estimate.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from nvrx_otel import record as rec

CHILD_RECORDS = 50


def _logger() -> logging.Logger:
    from nvrx_otel.logging import setup_logger

    return setup_logger(node_local_tmp_dir=os.environ["NVRX_NODE_LOCAL_TMPDIR"])


def burst(tag: str, count: int, pace: int) -> None:
    log = _logger()
    for i in range(count):
        log.info("%s-%d payload", tag, i)
        if pace and i % pace == pace - 1:
            time.sleep(0.005)


def kill(tag: str, count: int) -> None:
    burst(tag, count, 0)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_span(tag: str, count: int) -> None:
    from nvrx_otel.semconv import FtSpanKind
    from nvrx_otel.tracing import ft_span, setup_tracing

    log = _logger()
    setup_tracing()
    with ft_span(FtSpanKind.CYCLE, cycle=0), ft_span(FtSpanKind.FAULT, cycle=0):
        for i in range(count):
            log.info("%s-%d in span", tag, i)
        os.kill(os.getpid(), signal.SIGKILL)


def torn(tag: str, count: int) -> None:
    from pathlib import Path

    from nvrx_otel.spool.registry import writer_for_root

    w = writer_for_root(os.environ["NVRX_NODE_LOCAL_TMPDIR"])
    for i in range(count):
        w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
                "msg": f"{tag}-{i} whole", "file": "rank.py", "line": 1})  # fmt: skip
    path = w.current_path
    assert path is not None
    line = rec.encode({"v": 1, "k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO",
                       "msg": f"{tag}-{count} torn", "key": "x"})  # fmt: skip
    fd = os.open(Path(path), os.O_WRONLY | os.O_APPEND)
    os.write(fd, line[: len(line) // 2])
    os._exit(0)


def alarm(tag: str, count: int) -> None:
    log = _logger()
    fired = 0

    busy = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired, busy
        if busy:  # a signal during the handler: no nesting (only the library's lock matters)
            return
        busy = True
        log.info("%sh-%d from a signal handler", tag, fired)
        fired += 1
        busy = False

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    for i in range(count):
        log.info("%s-%d payload", tag, i)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    print(f"handler {fired}", flush=True)


def big(tag: str, count: int, mib: int) -> None:
    log = _logger()
    log.info("%s-0 %s", tag, "x" * (mib << 20))
    for i in range(1, count + 1):
        log.info("%s-%d after the big one", tag, i)
    os._exit(0)  # a short-lived writer: gone as soon as its records are in the kernel


def forks(tag: str, count: int, children: int) -> None:
    log = _logger()

    def steady() -> None:
        for i in range(count):
            log.info("%s-%d from the thread", tag, i)
            if i % 20 == 19:
                time.sleep(0.001)

    t = threading.Thread(target=steady)
    t.start()
    pids = []
    for j in range(children):
        pid = os.fork()
        if pid == 0:
            for i in range(CHILD_RECORDS):
                log.info("%sc%d-%d from a child", tag, j, i)
            os._exit(0)
        pids.append(pid)
    failed = sum(1 for pid in pids if os.waitpid(pid, 0)[1] != 0)
    t.join()
    if failed:
        sys.exit(f"{failed} children failed")


def seps(tag: str, count: int) -> None:
    log = _logger()
    for i in range(count):
        log.info("%s-%d one\u2028two\u2029three\nfour", tag, i)


def main() -> None:
    tag, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    arg = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if mode == "burst":
        burst(tag, count, arg)
    elif mode == "kill":
        kill(tag, count)
    elif mode == "pause":
        burst(tag, count, 0)
        print("paused", flush=True)
        sys.stdin.readline()
        log = _logger()
        for i in range(count, count + arg):
            log.info("%s-%d after the pause", tag, i)
    elif mode == "alarm":
        alarm(tag, count)
    elif mode == "exit":
        burst(tag, count, 0)
        os._exit(0)
    elif mode == "kill_span":
        kill_span(tag, count)
    elif mode == "torn":
        torn(tag, count)
    elif mode == "big":
        big(tag, count, arg)
    elif mode == "forks":
        forks(tag, count, arg)
    elif mode == "seps":
        seps(tag, count)
    else:
        sys.exit(f"unknown mode {mode}")
    print("done", flush=True)


if __name__ == "__main__":
    main()
