#!/usr/bin/env bash
# Installs the foreign lock clients that the compat-mode tests (issue 20)
# run beside dlock, from Debian's packages:
#   python3-redis            redis-py's Lock (redis://…?compat=setnx)
#   python3-kazoo            kazoo's Lock (zk://…?compat=kazoo)
#   libcurator-recipes-java  Curator's InterProcessMutex (zk://…?compat=curator)
#   etcd-client              etcdctl lock (etcd://…?compat=etcdctl)
# The Python tests run /usr/bin/python3 explicitly: a python3 earlier on
# PATH (a virtualenv, pyenv) does not see Debian's packages.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install python3-redis python3-kazoo libcurator-recipes-java etcd-client
# javac, for the small Curator program the compat=curator tests compile
# (ZooKeeper itself needs only a JRE).
apt_install default-jdk-headless
/usr/bin/python3 -c 'import redis, kazoo' >/dev/null
