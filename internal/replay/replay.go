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
	Topic     string
	Partition int32
	From      int64 // the group's committed offset now, -1 when none
	To        int64
}

// Plan is what a replay does (or did).
type Plan struct {
	Group, Input, Changelog string
	ChangelogNext           int64 // committed as the restore position
	// Changelogs and Repartitions are every rule's (a rules file may hold
	// several rules, over several inputs: Input then lists them).
	Changelogs, Repartitions []string
	Moves                    []Move
	Applied                  bool
}

// emptyState is the commit metadata of empty state for the rules (by
// namespace) that read a topic in place: as the processor writes it (v2,
// also for one rule).
func emptyState(ns []string) string {
	pos := make(map[string]int64, len(ns))
	for _, n := range ns {
		pos[n] = 0
	}
	return txn.EncodePositions(pos)
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
		fmt.Fprintf(&b, "  %s partition %d: %s -> %d\n", m.Topic, m.Partition, from, m.To)
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
	rs, err := cfg.Rules()
	if err != nil {
		return Plan{}, fmt.Errorf("replay: %w", err)
	}
	// The input topics, and the rules whose state each one feeds in place
	// (their changelog positions go into the offsets' metadata).
	var inputs []string
	inPlace := map[string][]string{}
	plan := Plan{Group: cfg.GroupID}
	for _, r := range rs {
		src := r.Rule.Source
		if !slices.Contains(inputs, src) {
			inputs = append(inputs, src)
		}
		plan.Changelogs = append(plan.Changelogs, cfg.ChangelogFor(r))
		if r.Rule.Repartitioned() {
			plan.Repartitions = append(plan.Repartitions, cfg.RepartitionFor(r))
			continue
		}
		inPlace[src] = append(inPlace[src], fmt.Sprintf("%s.v%d", r.Rule.ID, r.Rule.Version))
	}
	plan.Input, plan.Changelog = strings.Join(inputs, ","), plan.Changelogs[0]

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

	// Every rule version's changelog (and repartition topic) must be empty
	// (or not exist yet).
	for i, topic := range append(slices.Clone(plan.Changelogs), plan.Repartitions...) {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return plan, fmt.Errorf("replay: end offsets of %s: %w", topic, err)
		}
		var n int64
		ends.Each(func(lo kadm.ListedOffset) {
			if lo.Err == nil {
				n += lo.Offset
			}
		})
		if n > 0 {
			what := "a repartitioned rule"
			if i < len(rs) { // changelogs come first, one per rule in order
				what = fmt.Sprintf("rule %s v%d", rs[i].Rule.ID, rs[i].Rule.Version)
			}
			hint := "bump the rule's version to replay into a fresh version"
			if i == 0 && cfg.RulesFile == "" && cfg.Topics.Changelog != "" {
				// The override does not follow the version.
				hint = "topics.changelog is set: give the new rule version a new changelog topic there (it does not follow rule.version), or delete this one"
			} else if len(rs) > 1 {
				hint = "bump the version of every rule of the file (replay reprocesses the source for all of them) to replay into fresh versions"
			}
			return plan, fmt.Errorf("%w: %s holds %d records of %s; %s",
				ErrStateExists, topic, n, what, hint)
		}
	}

	var to kadm.ListedOffsets
	if o.From.IsZero() {
		to, err = adm.ListStartOffsets(ctx, inputs...)
	} else {
		to, err = adm.ListOffsetsAfterMilli(ctx, o.From.UnixMilli(), inputs...)
	}
	if err == nil {
		err = to.Error()
	}
	if err != nil {
		return plan, fmt.Errorf("replay: list offsets of %s: %w", plan.Input, err)
	}
	current, err := adm.FetchOffsets(ctx, cfg.GroupID)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return plan, fmt.Errorf("replay: fetch offsets of %s: %w", cfg.GroupID, err)
	}
	offsets := kadm.Offsets{}
	to.Each(func(lo kadm.ListedOffset) {
		m := Move{Topic: lo.Topic, Partition: lo.Partition, From: -1, To: lo.Offset}
		if c, ok := current.Lookup(lo.Topic, lo.Partition); ok && c.Err == nil {
			m.From = c.At
		}
		plan.Moves = append(plan.Moves, m)
		offsets.Add(kadm.Offset{Topic: lo.Topic, Partition: lo.Partition, At: lo.Offset, LeaderEpoch: -1, Metadata: emptyState(inPlace[lo.Topic])})
	})
	slices.SortFunc(plan.Moves, func(a, b Move) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
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
