package etcdlock
