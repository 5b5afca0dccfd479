"""A redis-py Lock client for the compat=setnx tests: the foreign side of
a mixed fleet, using redis.lock.Lock exactly as an application would.

usage: redispy_lock.py HOST PORT NAME MODE [ARGS...]

  count COUNTER LOG N WINDOW TTL  N times: take the lock (blocking), read
                                  COUNTER, sleep WINDOW s, write it + 1,
                                  RPUSH "py" on LOG, release, and pause
                                  up to 10ms
  hold TTL                        take the lock with timeout TTL s, print
                                  HELD, and hold it until killed
  release TTL                     take the lock with timeout TTL s, print
                                  HELD, and release it when a line comes
                                  on stdin, then print RELEASED
  try TTL                         one non-blocking acquire: print True or
                                  False (and release if True)
"""
import random
import sys
import time

import redis
from redis.lock import Lock


def main():
    host, port, name, mode = sys.argv[1:5]
    args = sys.argv[5:]
    r = redis.Redis(host=host, port=int(port))
    if mode == "count":
        counter, log, n, window, ttl = args[0], args[1], int(args[2]), float(args[3]), float(args[4])
        # sleep: the pause between attempts of a blocked acquire.
        lock = Lock(r, name, timeout=ttl, sleep=0.001, blocking_timeout=60)
        for _ in range(n):
            if not lock.acquire():
                print("NOT ACQUIRED", flush=True)
                return 2
            try:
                v = int(r.get(counter) or 0)
                time.sleep(window)
                r.set(counter, v + 1)
                r.rpush(log, "py")
            finally:
                lock.release()
            time.sleep(random.uniform(0, 0.01))
        print("DONE", n, flush=True)
    elif mode in ("hold", "release"):
        lock = Lock(r, name, timeout=float(args[0]))
        if not lock.acquire(blocking=False):
            print("NOT ACQUIRED", flush=True)
            return 2
        print("HELD", flush=True)
        if mode == "hold":
            time.sleep(600)
        sys.stdin.readline()
        lock.release()
        print("RELEASED", flush=True)
    elif mode == "try":
        lock = Lock(r, name, timeout=float(args[0]))
        got = lock.acquire(blocking=False)
        print(got, flush=True)
        if got:
            lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
