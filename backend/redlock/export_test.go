package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// CompleteSeeding runs the last step of a seeding on the node rdb: mark
// it complete if its fence state is still from.
func CompleteSeeding(ctx context.Context, rdb redis.UniversalClient, prefix, from string) error {
	d, err := New([]redis.UniversalClient{rdb}, WithPrefix(prefix))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.copyCounters(ctx, []int{0}, nil, from)
}
