#!/bin/sh
# The foreign side of the compat=etcdctl mixed-fleet test: a shell job
# that locks with etcdctl lock, as a cron job would.
#
# usage: etcdctl_count.sh ETCDCTL ENDPOINT NAME COUNTER LOG N WINDOW
#
# N times, under "etcdctl lock NAME": read COUNTER, sleep WINDOW seconds,
# write it + 1, and append "etcdctl $ETCD_LOCK_KEY $ETCD_LOCK_REV" to LOG.
# Prints "DONE N" at the end, or "FAILED" if etcdctl failed.
set -u
etcdctl=$1 endpoint=$2 name=$3 counter=$4 log=$5 n=$6 window=$7
i=0
while [ "$i" -lt "$n" ]; do
	ETCDCTL_API=3 "$etcdctl" --endpoints="$endpoint" lock --ttl=5 "$name" -- sh -c '
		v=$(cat "$1")
		sleep "$3"
		echo $((v + 1)) >"$1"
		echo "etcdctl $ETCD_LOCK_KEY $ETCD_LOCK_REV" >>"$2"' sh "$counter" "$log" "$window" || {
		echo FAILED
		exit 1
	}
	i=$((i + 1))
done
echo DONE "$n"
