package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// maxApplyAttempts bounds how often a batch's optimistic transaction runs:
// again after a watched key changed under it (a new claim, a dropped
// partition), or after a transport error that left the outcome unknown.
const maxApplyAttempts = 4

// errWrongType marks a key of the store that another program gave another
// type (a plain string where the stream lives, say).
var errWrongType = errors.New("wrong key type")

// fencedError is the refusal of a batch; it wraps engine.ErrFenced.
type fencedError struct {
	partition int32
	reason    string
}

func (e *fencedError) Error() string {
	return fmt.Sprintf("redisstore: apply partition %d refused: %s: %v", e.partition, e.reason, engine.ErrFenced)
}

func (e *fencedError) Unwrap() error { return engine.ErrFenced }

// typedKey is a key a batch writes and the type it must have, if it exists.
type typedKey struct{ key, typ string }

// batchTx is one batch of one partition, written atomically by an
// optimistic transaction (runBatch). The table's Apply fills in the
// documents' part: read queues the reads of the stored documents, plan
// checks what they found (a *fencedError refuses the batch) and returns
// the writes. Both are called once per attempt, read before plan.
type batchTx struct {
	op        string // for errors: "apply partition 3"
	subject   string // for refusals: "" or "table orders: "
	partition int32
	epoch     int64
	cpValue   string
	token     string // random: recognises this batch's own earlier attempt

	epochKey, cpKey, tokenKey string
	typed                     []typedKey

	read func(ctx context.Context, pipe redis.Pipeliner)
	plan func() (write func(ctx context.Context, pipe redis.Pipeliner), err error)
}

func newBatchTx(op, subject string, partition int32, epoch, checkpoint int64, epochKey, cpKey, tokenKey string) *batchTx {
	return &batchTx{op: op, subject: subject, partition: partition, epoch: epoch, cpValue: formatInt(checkpoint),
		token: rand.Text(), epochKey: epochKey, cpKey: cpKey, tokenKey: tokenKey,
		typed: []typedKey{{cpKey, "string"}, {tokenKey, "string"}}}
}

// runBatch writes b or nothing. Each attempt WATCHes the partition's epoch,
// checkpoint and batch token; reads (pipelined) the token, the epoch, the
// types of the keys it writes and the stored documents; checks them in Go;
// and then writes in MULTI/EXEC, with the checkpoint and the token. A
// claim, an apply or a drop of the partition between the read and EXEC
// makes EXEC write nothing, and the next attempt reads again (and is then
// refused). An attempt that finds its own token applied is a retry of an
// attempt whose reply was lost, and succeeds without writing. Another
// client changing the type of a shared key (an index, the stream) between
// the read and EXEC is not detected.
func (s *Store) runBatch(ctx context.Context, b *batchTx) error {
	var last error
	for range maxApplyAttempts {
		err := s.attempt(ctx, b)
		var fenced *fencedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &fenced), errors.Is(err, errCorrupt), errors.Is(err, errWrongType):
			return err
		case errors.Is(err, redis.TxFailedErr):
			s.log.Debug("batch raced a change of its partition; reading again", "op", b.op)
		case !transient(err) || ctx.Err() != nil:
			return wrap(b.op, err)
		}
		last = err
	}
	return wrap(b.op, last)
}

// attempt runs one optimistic transaction of b on a connection of its own.
// It returns redis.TxFailedErr when a watched key changed before EXEC,
// which then wrote nothing.
func (s *Store) attempt(ctx context.Context, b *batchTx) error {
	return s.client.Watch(ctx, func(tx *redis.Tx) error { return s.attemptOn(ctx, tx, b) },
		b.epochKey, b.cpKey, b.tokenKey)
}

func (s *Store) attemptOn(ctx context.Context, tx *redis.Tx, b *batchTx) error {
	var token, epoch *redis.StringCmd
	types := make([]*redis.StatusCmd, len(b.typed))
	reads, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		token, epoch = pipe.Get(ctx, b.tokenKey), pipe.Get(ctx, b.epochKey)
		for i, k := range b.typed {
			types[i] = pipe.Type(ctx, k.key)
		}
		b.read(ctx, pipe)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	// Pipelined reports only the first failed command, and an absent token
	// or epoch (redis.Nil) comes first: a document read that failed (a key
	// another program gave another type) must not pass as an empty one.
	for _, c := range reads {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return e
		}
	}
	if token.Val() == b.token {
		s.log.Debug("batch applied by an earlier attempt", "op", b.op)
		return nil
	}
	if cur, err := epoch.Result(); err != nil || cur != formatInt(b.epoch) {
		if err != nil {
			cur = "none"
		}
		s.log.Debug("batch fenced by epoch", "op", b.op, "epoch", b.epoch, "current", cur)
		return &fencedError{partition: b.partition, reason: fmt.Sprintf(
			"%sepoch %d is not the claimed epoch %s (claimed since by another writer, or Redis lost its data)",
			b.subject, b.epoch, cur)}
	}
	if stored := token.Val(); s.written.lost(b, stored) {
		s.log.Warn("redis lost acknowledged writes: the partition's batch token is not the last one written",
			"op", b.op, "epoch", b.epoch)
		return &fencedError{partition: b.partition, reason: fmt.Sprintf(
			"%sRedis lost acknowledged writes of epoch %d (its last batch is not there: a failover to a replica that lacked them, or a restart that did not persist them); restore the partition from the store's checkpoint",
			b.subject, b.epoch)}
	}
	for i, k := range b.typed {
		if t := types[i].Val(); t != "none" && t != k.typ {
			return fmt.Errorf("redisstore: %s: key %s holds a %s, want a %s: %w", b.op, k.key, t, k.typ, errWrongType)
		}
	}
	write, err := b.plan()
	if err != nil {
		return err
	}
	if s.beforeExec != nil {
		s.beforeExec()
	}
	s.written.sending(b)
	cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		write(ctx, pipe)
		pipe.Set(ctx, b.cpKey, b.cpValue, 0)
		pipe.Set(ctx, b.tokenKey, b.token, 0)
		return nil
	})
	if err != nil {
		return queuedError(cmds, err)
	}
	s.written.applied(b)
	s.log.Debug("batch applied", "op", b.op, "checkpoint", b.cpValue)
	return nil
}

// queuedError is the error of a failed MULTI/EXEC: when Redis refused to
// queue a command (out of memory, a disk it cannot persist to), EXEC only
// says EXECABORT, and the refusal that says whether to wait and retry is
// the command's own error.
func queuedError(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		if e := c.Err(); e != nil && e != err && transient(e) {
			return e
		}
	}
	return err
}

// storedVersion parses the version field of a stored document; ok is false
// when the document (or its version) is absent.
func storedVersion(v any, what string) (version int64, ok bool, err error) {
	str, isStr := v.(string)
	if !isStr {
		return 0, false, nil
	}
	n, perr := strconv.ParseInt(str, 10, 64)
	if perr != nil {
		return 0, false, fmt.Errorf("redisstore: %s version %q: %w", what, str, errCorrupt)
	}
	return n, true, nil
}
