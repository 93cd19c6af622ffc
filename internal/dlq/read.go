package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrLiveMembers is returned by Replay when its group has members: another
// replay is running, or a crashed one's session has not expired yet.
var ErrLiveMembers = errors.New("dlq: the replay group has live members")

// bounds lists, per partition of topic, the log start offset and the last
// stable offset (the end a read_committed reader can reach now, never
// waiting on an open transaction).
func bounds(ctx context.Context, adm *kadm.Client, topic string) (start, end map[int32]int64, err error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: end offsets of %s: %w", topic, err)
	}
	start, end = map[int32]int64{}, map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { start[o.Partition] = o.Offset })
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	if len(end) == 0 {
		return nil, nil, fmt.Errorf("dlq: topic %s has no partitions", topic)
	}
	return start, end, nil
}

// groupPositions returns the committed offsets of group on topic, raised to
// the log start offset (where a consumer without a valid offset starts).
func groupPositions(ctx context.Context, adm *kadm.Client, group, topic string, start map[int32]int64) (map[int32]int64, error) {
	pos := maps.Clone(start)
	offs, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return pos, nil
	}
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: committed offsets of group %s: %w", group, err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.At > pos[o.Partition] {
			pos[o.Partition] = o.At
		}
	})
	return pos, nil
}

// liveMembers fails with ErrLiveMembers when group has members.
func liveMembers(ctx context.Context, adm *kadm.Client, group string) error {
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("dlq: describe group %s: %w", group, err)
	}
	g, ok := groups[group]
	if !ok || g.Err != nil || len(g.Members) == 0 {
		return nil
	}
	var who []string
	for _, m := range g.Members {
		who = append(who, fmt.Sprintf("%s (client %s at %s)", m.MemberID, m.ClientID, m.ClientHost))
	}
	slices.Sort(who)
	return fmt.Errorf("%w: group %s has %d members: %s; wait for the other replay to finish, or for a crashed one's session to expire",
		ErrLiveMembers, group, len(who), strings.Join(who, ", "))
}

// fetchMaxWait bounds how long the broker holds a fetch that has no data for
// some partition (franz-go's default is 5s). A tool that reads up to an end
// has partitions at their end early, and a held fetch delays the others on
// the same broker.
const fetchMaxWait = 500 * time.Millisecond

// done reports whether every partition's position reached its end.
func done(pos, end map[int32]int64) bool {
	for p, e := range end {
		if pos[p] < e {
			return false
		}
	}
	return true
}

// behind names the partitions whose position has not reached the end.
func behind(pos, end map[int32]int64) string {
	var out []string
	for p, e := range end {
		if pos[p] < e {
			out = append(out, fmt.Sprintf("%d (at %d of %d)", p, pos[p], e))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// scan reads topic read_committed from pos up to end, without a group, and
// calls fn with every committed data record below the end, in offset order
// within a partition. It fails when no record arrives for idle while some
// partition is behind.
func scan(ctx context.Context, opts []kgo.Opt, topic string, pos, end map[int32]int64, idle time.Duration, fn func(*kgo.Record)) error {
	next := maps.Clone(pos)
	if done(next, end) {
		return nil
	}
	from := map[int32]kgo.Offset{}
	for p, e := range end {
		if next[p] < e {
			from[p] = kgo.NewOffset().At(next[p])
		}
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.KeepControlRecords())...)
	if err != nil {
		return fmt.Errorf("dlq: client: %w", err)
	}
	defer cl.Close()
	last := time.Now()
	for !done(next, end) {
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pollCtx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchErr(fs); err != nil {
			return fmt.Errorf("dlq: fetch %s: %w", topic, err)
		}
		progressed := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end[r.Partition] || r.Offset < next[r.Partition] {
				return
			}
			next[r.Partition] = r.Offset + 1
			progressed = true
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
		if progressed {
			last = time.Now()
		} else if time.Since(last) > idle {
			return fmt.Errorf("dlq: reading %s made no progress for %s; partitions behind: %s", topic, idle, behind(next, end))
		}
	}
	return nil
}

// fetchErr returns the first fetch error that is not the poll's own timeout.
func fetchErr(fs kgo.Fetches) error {
	var first error
	fs.EachError(func(_ string, _ int32, err error) {
		if first == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			first = err
		}
	})
	return first
}
