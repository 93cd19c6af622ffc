// Package replay owns the reprocessing of the input after a rule change:
// it resets the consumer group's input offsets to the earliest offsets or
// to a point in time, so that the next start of the processor, with a new
// rule version, recomputes every alert from the log on fresh state.
//
// Safety rules it enforces:
//   - it refuses while the group has live members (an offset reset under a
//     running member is silently undone by the member's next commit);
//   - it refuses when the configured rule version already has state (a
//     non-empty changelog topic): the new version must start from nothing,
//     or old and new results would mix. Bump rule.version instead;
//   - the offsets it commits carry the changelog position (the new
//     changelog's end, normally 0), so the processor restores exactly that:
//     empty state.
//
// It only talks to Kafka's admin APIs; it never produces records.
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/txn"
)

// ErrLiveMembers is returned when the group still has members.
var ErrLiveMembers = errors.New("replay: the group has live members")

// ErrStateExists is returned when the rule version already has state.
var ErrStateExists = errors.New("replay: the rule version already has state")

// Options describe a replay.
type Options struct {
	Config config.Config
	// From is the event to replay from: zero means the earliest offsets;
	// otherwise the first record with a timestamp at or after From.
	From   time.Time
	DryRun bool
	// ExtraKgoOpts are appended to the client options (TLS, SASL).
	ExtraKgoOpts []kgo.Opt
}

// Move is the plan for one input partition.
type Move struct {
	Partition int32
	From      int64 // the group's committed offset now, -1 when none
	To        int64
}

// Plan is what a replay does (or did).
type Plan struct {
	Group, Input, Changelog string
	ChangelogNext           int64 // committed as the restore position
	Moves                   []Move
	Applied                 bool
}

// String renders the plan for people.
func (p Plan) String() string {
	var b strings.Builder
	verb := "would reset"
	if p.Applied {
		verb = "reset"
	}
	fmt.Fprintf(&b, "group %s, input %s: %s offsets, state from changelog %s at offset %d (empty):\n", p.Group, p.Input, verb, p.Changelog, p.ChangelogNext)
	for _, m := range p.Moves {
		from := "none"
		if m.From >= 0 {
			from = fmt.Sprint(m.From)
		}
		fmt.Fprintf(&b, "  partition %d: %s -> %d\n", m.Partition, from, m.To)
	}
	return b.String()
}

// Run checks the safety rules, computes the plan and, unless DryRun,
// commits the new offsets.
func Run(ctx context.Context, o Options) (Plan, error) {
	cfg := o.Config
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, o.ExtraKgoOpts...)...)
	if err != nil {
		return Plan{}, fmt.Errorf("replay: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	plan := Plan{Group: cfg.GroupID, Input: cfg.Topics.Input, Changelog: cfg.ChangelogTopic()}

	groups, err := adm.DescribeGroups(ctx, cfg.GroupID)
	if err != nil {
		return plan, fmt.Errorf("replay: describe group %s: %w", cfg.GroupID, err)
	}
	if g, ok := groups[cfg.GroupID]; ok && g.Err == nil && len(g.Members) > 0 {
		var who []string
		for _, m := range g.Members {
			id := m.MemberID
			if m.InstanceID != nil {
				id = *m.InstanceID
			}
			who = append(who, fmt.Sprintf("%s (client %s at %s)", id, m.ClientID, m.ClientHost))
		}
		slices.Sort(who)
		return plan, fmt.Errorf("%w: group %s has %d live members: %s; stop them first (a stopped replica's static membership expires after session_timeout)", ErrLiveMembers, cfg.GroupID, len(who), strings.Join(who, ", "))
	}

	// The new version's changelog must be empty (or not exist yet).
	ends, err := adm.ListEndOffsets(ctx, plan.Changelog)
	if err != nil {
		return plan, fmt.Errorf("replay: changelog end offsets: %w", err)
	}
	var changelogRecords int64
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Err == nil {
			changelogRecords += lo.Offset
		}
	})
	if changelogRecords > 0 {
		return plan, fmt.Errorf("%w: changelog %s holds %d records of rule %s v%d; bump rule.version to replay into a fresh version",
			ErrStateExists, plan.Changelog, changelogRecords, cfg.Rule.ID, cfg.Rule.Version)
	}

	var to kadm.ListedOffsets
	if o.From.IsZero() {
		to, err = adm.ListStartOffsets(ctx, cfg.Topics.Input)
	} else {
		to, err = adm.ListOffsetsAfterMilli(ctx, o.From.UnixMilli(), cfg.Topics.Input)
	}
	if err == nil {
		err = to.Error()
	}
	if err != nil {
		return plan, fmt.Errorf("replay: list offsets of %s: %w", cfg.Topics.Input, err)
	}
	current, err := adm.FetchOffsets(ctx, cfg.GroupID)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return plan, fmt.Errorf("replay: fetch offsets of %s: %w", cfg.GroupID, err)
	}
	meta := txn.EncodeMeta(0)
	offsets := kadm.Offsets{}
	to.Each(func(lo kadm.ListedOffset) {
		m := Move{Partition: lo.Partition, From: -1, To: lo.Offset}
		if c, ok := current.Lookup(cfg.Topics.Input, lo.Partition); ok && c.Err == nil {
			m.From = c.At
		}
		plan.Moves = append(plan.Moves, m)
		offsets.Add(kadm.Offset{Topic: cfg.Topics.Input, Partition: lo.Partition, At: lo.Offset, LeaderEpoch: -1, Metadata: meta})
	})
	slices.SortFunc(plan.Moves, func(a, b Move) int { return int(a.Partition - b.Partition) })
	if o.DryRun {
		return plan, nil
	}
	resp, err := adm.CommitOffsets(ctx, cfg.GroupID, offsets)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return plan, fmt.Errorf("replay: commit offsets of %s: %w", cfg.GroupID, err)
	}
	plan.Applied = true
	return plan, nil
}
