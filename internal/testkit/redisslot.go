package testkit

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"
)

// MigrateSlot moves slot from its master to the master dst as redis-cli
// --cluster reshard does: SETSLOT IMPORTING on dst and MIGRATING on the
// source, MIGRATE of batch keys at a time (calling between, if set, after
// each: clients writing meanwhile get ASK or TRYAGAIN), then SETSLOT NODE
// on both. It returns the count of keys moved.
func (c *RedisCluster) MigrateSlot(ctx context.Context, slot int, dst *Redis, batch int, between func()) (int, error) {
	src, _, err := c.MasterOf(ctx, slot)
	if err != nil {
		return 0, err
	}
	if src == dst {
		return 0, fmt.Errorf("slot %d is already on %s", slot, dst.Addr())
	}
	srcID, err := c.Do(ctx, src, "CLUSTER", "MYID")
	dstID, err2 := c.Do(ctx, dst, "CLUSTER", "MYID")
	if err := cmp.Or(err, err2); err != nil {
		return 0, err
	}
	if _, err := c.Do(ctx, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID); err != nil {
		return 0, fmt.Errorf("importing on %s: %w", dst.Addr(), err)
	}
	if _, err := c.Do(ctx, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID); err != nil {
		return 0, fmt.Errorf("migrating on %s: %w", src.Addr(), err)
	}
	moved := 0
	for {
		reply, err := c.Do(ctx, src, "CLUSTER", "GETKEYSINSLOT", slot, batch)
		if err != nil {
			return moved, err
		}
		keys, _ := reply.([]any)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", 0, (10 * time.Second).Milliseconds()}
		if pw := src.Password(); pw != "" {
			args = append(args, "AUTH", pw)
		}
		args = append(append(args, "KEYS"), keys...)
		if _, err := c.Do(ctx, src, args...); err != nil {
			return moved, fmt.Errorf("migrate %d keys: %w", len(keys), err)
		}
		moved += len(keys)
		if between != nil {
			between()
		}
	}
	for _, n := range []*Redis{dst, src} {
		if _, err := c.Do(ctx, n, "CLUSTER", "SETSLOT", slot, "NODE", dstID); err != nil {
			return moved, fmt.Errorf("assign slot %d on %s: %w", slot, n.Addr(), err)
		}
	}
	return moved, nil
}
