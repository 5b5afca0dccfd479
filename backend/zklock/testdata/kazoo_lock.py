"""A kazoo Lock client for the compat=kazoo tests: the foreign side of a
mixed fleet, using kazoo.recipe.lock.Lock exactly as an application would
(Debian's python3-kazoo).

usage: kazoo_lock.py HOSTS LOCKPATH SESSION_S MODE [ARGS...]

  count COUNTER LOG N WINDOW  N times: take the lock (blocking), read
                              COUNTER's data, sleep WINDOW s, write it + 1,
                              create a persistent sequential LOG/t- node
                              with data "kazoo", release, and pause up to
                              10ms
  hold                        take the lock, print HELD, hold until killed
  try                         one non-blocking acquire: print True or
                              False (and release if True)
"""
import random
import sys
import time

from kazoo.client import KazooClient


def main():
    hosts, path, session, mode = sys.argv[1:5]
    args = sys.argv[5:]
    zk = KazooClient(hosts=hosts, timeout=float(session))
    zk.start(timeout=60)
    lock = zk.Lock(path, "kazoo-test")
    if mode == "count":
        counter, log, n, window = args[0], args[1], int(args[2]), float(args[3])
        for _ in range(n):
            if not lock.acquire(timeout=60):
                print("NOT ACQUIRED", flush=True)
                return 2
            try:
                v = int(zk.get(counter)[0] or b"0")
                time.sleep(window)
                zk.set(counter, str(v + 1).encode())
                zk.create(log + "/t-", b"kazoo", sequence=True)
            finally:
                lock.release()
            time.sleep(random.uniform(0, 0.01))
        print("DONE", n, flush=True)
    elif mode == "hold":
        lock.acquire()
        print("HELD", flush=True)
        time.sleep(600)
    elif mode == "try":
        got = lock.acquire(blocking=False)
        print(got, flush=True)
        if got:
            lock.release()
    zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
