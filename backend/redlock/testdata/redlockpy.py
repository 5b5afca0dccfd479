"""A Redlock client as redlock-py writes it (SET NX PX on each node, a
majority within the validity time, an owner-checked DEL to release), on
Debian's python3-redis: the foreign side of a compat=setnx Redlock fleet.

usage: redlockpy.py NAME MODE TTL_MS HOST:PORT...

  hold   take the lock on a majority, print HELD, hold it until killed
  try    one attempt: print True or False (and release if True)
"""
import sys
import time
import uuid

import redis

UNLOCK = """
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"""


def lock(nodes, name, ttl):
    value = uuid.uuid4().hex
    start = time.monotonic()
    n = 0
    for r in nodes:
        try:
            if r.set(name, value, nx=True, px=ttl):
                n += 1
        except redis.RedisError:
            pass
    drift = int(ttl * 0.01) + 2
    validity = ttl - int((time.monotonic() - start) * 1000) - drift
    if n >= len(nodes) // 2 + 1 and validity > 0:
        return value
    unlock(nodes, name, value)
    return None


def unlock(nodes, name, value):
    for r in nodes:
        try:
            r.eval(UNLOCK, 1, name, value)
        except redis.RedisError:
            pass


def main():
    name, mode, ttl = sys.argv[1], sys.argv[2], int(sys.argv[3])
    nodes = []
    for addr in sys.argv[4:]:
        host, port = addr.rsplit(":", 1)
        nodes.append(redis.Redis(host=host, port=int(port)))
    value = lock(nodes, name, ttl)
    if mode == "hold":
        if value is None:
            print("NOT ACQUIRED", flush=True)
            return 2
        print("HELD", flush=True)
        time.sleep(600)
    elif mode == "try":
        print(value is not None, flush=True)
        if value is not None:
            unlock(nodes, name, value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
