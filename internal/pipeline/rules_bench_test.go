package pipeline

import (
	"fmt"
	"hash/fnv"
	"os"
	"testing"

	"github.com/vibeline/processor/internal/dedup"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/rules"
	"github.com/vibeline/processor/internal/sim"
	"github.com/vibeline/processor/test/benchrules"
)

// benchStages compiles rs over the topic "in" and returns their stages.
func benchStages(b *testing.B, rs []benchrules.Rule) []*Stage {
	b.Helper()
	y := benchrules.YAML("in", rs, func(id string) string {
		return fmt.Sprintf("alerts: %s.alerts, dlq: in.dlq, late: in.late", id)
	})
	parsed, err := rules.Parse("bench.yaml", []byte(y))
	if err == nil {
		err = rules.Validate(parsed)
	}
	if err != nil {
		b.Fatal(err)
	}
	stages := make([]*Stage, len(parsed))
	for i, r := range parsed {
		c, err := rules.Compile(r)
		if err != nil {
			b.Fatal(err)
		}
		if stages[i], err = NewRuleStage(c, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	return stages
}

// benchInputs is the load generator's stream (sim.Load(200), as loadgen and
// BenchmarkStage), 100,000 records of partition 0. With BENCH_PARTITION_OF_6
// set it is instead a share of that stream like one partition's of the
// 6-partition input topic of test/bench's BenchmarkRules: the records of
// the machines whose key's FNV-1a hash is 0 mod 6 (about a sixth of them;
// not Kafka's partitioner, so not the same machines), 200,000 records (about
// 6,000 s of event time, so that the dedup stores also reach their steady
// state, which the default stream, 500 s, does not). Its shape (how many
// keys a worker's rules touch, how full the dedup index gets) is the
// processor's, which is what a cache simulation of the benchmark needs
// (docs/BENCHMARKS.md, fourteenth round).
func benchInputs() []Input {
	line := sim.New(sim.Load(200))
	if os.Getenv("BENCH_PARTITION_OF_6") != "" {
		recs := make([]Input, 0, 200_000)
		for len(recs) < cap(recs) {
			r := line.Next()
			h := fnv.New32a()
			h.Write(r.Key)
			if h.Sum32()%6 == 0 {
				recs = append(recs, input(0, int64(len(recs)), r))
			}
		}
		return recs
	}
	recs := make([]Input, 100_000)
	for i := range recs {
		recs[i] = input(0, int64(i), line.Next())
	}
	return recs
}

// BenchmarkRuleStages is the per-record CPU cost of n rules over one topic,
// as consume.(*Processor).handleRecords spends it: records go through the
// rules in chunks of stageChunk, each record decoded and validated once
// (Stage.Check of the topic's first rule) and every rule's filter
// evaluated on it (Partition.Match), then the chunk applied to every rule's
// state (Stage.ApplyRec), rule after rule; a record that fails
// validation is counted by every rule and dead-lettered once. Emitting an
// output only counts it here (no Kafka record is built). check_only is
// Check alone: rules_n ≈ check_only + the sum of the rules' Apply. One op
// is one record; rules_10 reports x_1_rule, its ns/record over rules_1's
// of the same invocation. rules_*_record_major are the loop consume ran
// before (docs/BENCHMARKS.md, thirteenth round): each record through
// every rule before the next (chunks of one record).
//
//	go test -run x -bench BenchmarkRuleStages -count 3 ./internal/pipeline/
func BenchmarkRuleStages(b *testing.B) {
	recs := benchInputs()
	all := benchStages(b, benchrules.Ten)
	var base float64
	b.Run("check_only", func(b *testing.B) {
		check := all[0]
		bad := 0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, verr := check.Check(&recs[i%len(recs)]); verr != nil {
				bad++
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
	})
	run := func(name string, n int, recordMajor bool) {
		b.Run(name, func(b *testing.B) {
			stages := all[:n]
			check := stages[0]
			parts := make([]*Partition, n)
			accts := make([]Accounting, n)
			fresh := func() {
				share := DedupShare{} // as consume: the rules of a partition share dedup stores
				for j, s := range stages {
					parts[j] = s.NewPartitionShared(share)
				}
			}
			fresh()
			groups := DedupGroups(stages)
			for j := range accts {
				accts[j].Version = 1
			}
			outputs := 0
			emit := func(Output) { outputs++ }
			chunk := stageChunk
			if recordMajor {
				chunk = 1
			}
			ins := make([]Input, chunk)
			// As consume: per record its Rec and the rules' filter
			// verdicts, taken when it is decoded; the decoded event and
			// the filters' view of it are scratch.
			recRecs := make([]Rec, chunk)
			quals := make([]bool, chunk*n)
			var ev event.Event
			var env rules.Event
			// As consume: one dedup.Pair per record and shared store.
			pairs := make([]dedup.Pair, chunk*len(groups))
			ddIdx := make([]int, n)
			for j := range ddIdx {
				ddIdx[j] = -1
			}
			for g, gr := range groups {
				for _, j := range gr.Members {
					ddIdx[j] = g
				}
			}
			apply := func(m int) {
				for j, s := range stages {
					for q := range m {
						if g := ddIdx[j]; g >= 0 {
							parts[j].UseDedupPair(&pairs[q*len(groups)+g])
						}
						s.ApplyRec(parts[j], &recRecs[q], quals[q*n+j], &ins[q], &accts[j], emit)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += chunk {
				m := 0 // valid records of the chunk
				for k := 0; k < chunk && i+k < b.N; k++ {
					if (i+k)%len(recs) == 0 && i+k > 0 {
						// The stream restarts in event time: the rules
						// take what they have, then start afresh.
						apply(m)
						m = 0
						fresh()
					}
					ins[m] = recs[(i+k)%len(recs)]
					var verr *event.Error
					ev, verr = check.Check(&ins[m])
					if verr != nil {
						for j := range accts {
							accts[j].Records++
							accts[j].NextOffset = ins[m].Offset + 1
							accts[j].DeadLettered++
						}
						emit(check.DeadLetter(ins[m], verr))
						continue
					}
					recRecs[m] = RecOf(&ev, &ins[m])
					env = EnvOf(&ev) // once per record, as consume does
					for j := range stages {
						quals[m*n+j] = parts[j].Match(&env)
					}
					for g, gr := range groups {
						j := gr.Members[0]
						parts[j].PrepareDedupPair(&pairs[m*len(groups)+g], stages[j].KeyOf(&ev), ev.EventID)
					}
					m++
				}
				apply(m)
			}
			nsPer := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(nsPer, "ns/record")
			b.ReportMetric(float64(outputs)/float64(b.N), "outputs/record")
			if name == "rules_1" {
				base = nsPer
			} else if n > 1 && base > 0 {
				b.ReportMetric(nsPer/base, "x_1_rule")
			}
		})
	}
	run("rules_1", 1, false)
	run("rules_10", 10, false)
	run("rules_1_record_major", 1, true)
	run("rules_10_record_major", 10, true)
}

// stageChunk is consume's chunkRecords (handle.go), which this package
// cannot import.
const stageChunk = 256

// BenchmarkRuleApply is Stage.Apply of each rule of the 10-rule mix alone,
// on events decoded before the timer starts: where the rules' share of
// BenchmarkRuleStages/rules_10 goes.
func BenchmarkRuleApply(b *testing.B) {
	recs := benchInputs()
	all := benchStages(b, benchrules.Ten)
	type decoded struct {
		in Input
		ev event.Event
	}
	var evs []decoded
	for i := range recs {
		if ev, verr := all[0].Check(&recs[i]); verr == nil {
			evs = append(evs, decoded{recs[i], ev})
		}
	}
	for _, s := range all {
		b.Run(s.Rule().Rule.ID, func(b *testing.B) {
			w := s.NewPartition()
			acct := Accounting{Version: 1}
			outputs := 0
			emit := func(Output) { outputs++ }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%len(evs) == 0 && i > 0 {
					w = s.NewPartition()
				}
				d := &evs[i%len(evs)]
				s.Apply(w, &d.ev, d.in, &acct, emit)
			}
			b.ReportMetric(float64(outputs)/float64(b.N), "outputs/event")
		})
	}
}

// BenchmarkRuleChangelog is the other per-rule cost of a batch: at each
// commit consume writes every key a batch changed, for every rule, to the
// rule's changelog (Sweep, Dirty, EncodeKey of each dirty name,
// DirtyBuckets, EncodeBucket of each, EncodeMeta, ClearDirty). One op is one batch of 2,000 records (about
// 100 ms of the 10-rule processor's throughput) after an hour and a half of
// the stream warmed the state up (dedup sets full: H = 1h); Apply is not
// timed. bytes/batch is what the batch writes to the changelog.
//
//	go test -run x -bench BenchmarkRuleChangelog -benchtime 100x ./internal/pipeline/
func BenchmarkRuleChangelog(b *testing.B) {
	const batch, warm = 2_000, 1_080_000 // 200 machines x 5400 s
	line := sim.New(sim.Load(200))
	recs := make([]Input, warm+batch*200)
	for i := range recs {
		recs[i] = input(0, int64(i), line.Next())
	}
	all := benchStages(b, benchrules.Ten)
	evs := make([]event.Event, len(recs))
	ok := make([]bool, len(recs))
	for i := range recs {
		var verr *event.Error
		evs[i], verr = all[0].Check(&recs[i])
		ok[i] = verr == nil
	}
	for _, s := range all {
		b.Run(s.Rule().Rule.ID, func(b *testing.B) {
			w := s.NewPartition()
			acct := Accounting{Version: 1}
			emit := func(Output) {}
			next := 0
			apply := func(n int) {
				for ; n > 0 && next < len(recs); n-- {
					if ok[next] {
						s.Apply(w, &evs[next], recs[next], &acct, emit)
					}
					next++
				}
			}
			apply(warm)
			w.Dirty()
			w.ClearDirty()
			benchCommits(b, func() bool { return next+batch <= len(recs) }, func() { apply(batch) }, func() (int, int) {
				defer w.ClearDirty()
				return encodeCommit(w)
			})
		})
	}
	// The ten rules together, their dedup sets sharing one store as in
	// consume: each aggregating rule writing its own dedup entries (as
	// before dedup keepers), or one DedupKeeper writing them for all.
	for _, kept := range []bool{false, true} {
		b.Run(map[bool]string{false: "ten_own_dedup", true: "ten_keeper"}[kept], func(b *testing.B) {
			share := DedupShare{}
			ws := make([]*Partition, len(all))
			for i, s := range all {
				ws[i] = s.NewPartitionShared(share)
			}
			var keepers []*DedupKeeper
			if kept {
				for _, g := range DedupGroups(all) {
					var members []*Partition
					var names []string
					for _, i := range g.Members {
						members = append(members, ws[i])
						names = append(names, all[i].Rule().Rule.ID)
					}
					k, err := NewDedupKeeper(members, names)
					if err != nil {
						b.Fatal(err)
					}
					keepers = append(keepers, k)
				}
			}
			accts := make([]Accounting, len(all))
			emit := func(Output) {}
			next := 0
			apply := func(n int) {
				for ; n > 0 && next < len(recs); n-- {
					if ok[next] {
						for i, s := range all {
							s.Apply(ws[i], &evs[next], recs[next], &accts[i], emit)
						}
					}
					next++
				}
			}
			commit := func() (bytes, names int) {
				for _, w := range ws {
					n, k := encodeCommit(w)
					bytes, names = bytes+n, names+k
				}
				for _, k := range keepers {
					ns := k.Dirty()
					for _, n := range ns {
						bytes += len(k.Encode(n))
					}
					names += len(ns)
					k.ClearDirty()
				}
				for _, w := range ws {
					w.ClearDirty()
				}
				return bytes, names
			}
			apply(warm)
			commit()
			benchCommits(b, func() bool { return next+batch <= len(recs) }, func() { apply(batch) }, commit)
		})
	}
}

// encodeCommit encodes what a commit writes of w's state (as consume's
// changelogEntries): the bytes and the number of entries.
func encodeCommit(w *Partition) (bytes, names int) {
	w.Sweep()
	ns, meta := w.Dirty()
	for _, k := range ns {
		bytes += len(w.EncodeKey(k))
	}
	bs := w.DirtyBuckets()
	for _, k := range bs {
		bytes += len(w.EncodeBucket(k))
	}
	if meta {
		bytes += len(w.EncodeMeta())
	}
	return bytes, len(ns) + len(bs)
}

// benchCommits runs b.N times a batch (untimed, while more records last)
// and a commit (timed), and reports what the commits wrote per batch.
func benchCommits(b *testing.B, more func() bool, batch func(), commit func() (bytes, names int)) {
	var bytes, names int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if !more() {
			b.Fatalf("only %d batches: run it with -benchtime 100x", i)
		}
		batch()
		b.StartTimer()
		n, k := commit()
		bytes, names = bytes+n, names+k
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/batch")
	b.ReportMetric(float64(names)/float64(b.N), "keys/batch")
}
