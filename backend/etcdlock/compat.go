package etcdlock

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// CompatEtcdctl is the layout of compat=etcdctl: the keys of etcd's
// concurrency.Mutex, which "etcdctl lock" uses. A lock named NAME is the
// keys NAME/<lease ID in hex>, one per contender, each attached to that
// contender's lease; the lowest create revision holds.
const CompatEtcdctl = "etcdctl"

// Layouts are the values of the compat URL parameter (and of WithCompat).
var Layouts = []string{CompatEtcdctl}

// WithCompat selects a compatible layout (URL: compat=etcdctl): "etcdctl"
// puts the lock's keys where concurrency.NewMutex(session, name) and
// "etcdctl lock name" put theirs, named as they name them, so that their
// locks and dlock's exclude each other and wait in one queue. The prefix
// does not apply. See the package documentation, "Compat mode".
func WithCompat(layout string) Option {
	return func(d *Driver) error {
		if err := driver.ChoiceParam(&d.compat, Layouts...)(layout); err != nil {
			return fmt.Errorf("%w: etcdlock: WithCompat(%q): %v", driver.ErrInvalidOption, layout, err)
		}
		return nil
	}
}

// mutexKey is concurrency.Mutex's key of the contender holding lease in
// the queue pfx: pfx, then the lease ID in lower-case hex without leading
// zeros, exactly as its tryAcquire writes it: fmt.Sprintf("%s%x", pfx,
// s.Lease()).
func mutexKey(pfx string, lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s%x", pfx, lease)
}

// mutexName returns the lock name of a key of concurrency.Mutex's layout
// (NAME/<hex of the key's own lease>); ok is false for any other key.
func mutexName(kv *mvccpb.KeyValue) (name string, ok bool) {
	key := string(kv.Key)
	i := strings.LastIndexByte(key, '/')
	if i <= 0 || kv.Lease == 0 {
		return "", false
	}
	return key[:i], key[i+1:] == mutexKey("", clientv3.LeaseID(kv.Lease))
}

// holderOf returns the holder metadata of a queue key: dlock's own, as
// its acquire wrote it, or, for a key with no value (concurrency.Mutex and
// etcdctl lock write none), a note naming the foreign contender by its
// lease and key, the only identity it has.
func holderOf(kv *mvccpb.KeyValue) []byte {
	if len(kv.Value) > 0 {
		return kv.Value
	}
	b, _ := json.Marshal(struct {
		Note string `json:"note"`
	}{fmt.Sprintf("not dlock (etcdctl lock or concurrency.Mutex): lease %x, key %s", kv.Lease, kv.Key)})
	return b
}
