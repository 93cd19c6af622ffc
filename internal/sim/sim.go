// Package sim owns the simulated production line: a deterministic stream of
// vibration events, as gateways send them, with the trouble real lines
// produce: high-vibration episodes, duplicates (redeliveries), out-of-order
// pairs, gateways that buffer while offline and replay late, poison records
// and device clocks running ahead. The demo and the load generator use it;
// the same seed always yields the same records.
//
// It must never read the wall clock: the start time is a parameter, and
// record timestamps are derived from event time.
package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Options shape the stream. The zero value of a rate means "never".
type Options struct {
	Machines          int       // default 4
	SensorsPerMachine int       // default 2
	Start             time.Time // event time of the first round; default 2026-01-01T00:00:00Z
	Seed              uint64
	// EpisodeRate is the chance per machine per second that a high-vibration
	// episode (about 20 s of values >= 7.1 mm/s) starts.
	EpisodeRate float64
	// DuplicateRate is the chance that a record is sent twice.
	DuplicateRate float64
	// SwapRate is the chance that two consecutive records swap places.
	SwapRate float64
	// PoisonRate is the chance that a record is replaced by a poison one.
	PoisonRate float64
	// ClockAheadRate is the chance that an event's ts is an hour ahead.
	ClockAheadRate float64
	// OutageRate is the chance per machine per second that its gateway goes
	// offline for OutageLength and then replays what it buffered.
	OutageRate   float64
	OutageLength time.Duration // default 90s
	// InchRate is the chance that a sensor reports in in/s.
	InchRate float64
}

// DefaultStart is the event time of the first round unless Options.Start is set.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (o *Options) ensureDefaults() {
	if o.Machines <= 0 {
		o.Machines = 4
	}
	if o.SensorsPerMachine <= 0 {
		o.SensorsPerMachine = 2
	}
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	if o.OutageLength <= 0 {
		o.OutageLength = 90 * time.Second
	}
}

// Demo returns the options of `processor demo`: every kind of trouble, often
// enough to see it within a few simulated minutes.
func Demo() Options {
	return Options{Machines: 4, SensorsPerMachine: 2, Seed: 7, Start: DefaultStart, EpisodeRate: 0.01, DuplicateRate: 0.02,
		SwapRate: 0.05, PoisonRate: 0.005, ClockAheadRate: 0.002, OutageRate: 0.0007, OutageLength: 11 * time.Minute, InchRate: 0.25}
}

// Load returns the options of the load generator: realistic trouble at low rates.
func Load(machines int) Options {
	return Options{Machines: machines, SensorsPerMachine: 1, Seed: 42, Start: DefaultStart, EpisodeRate: 0.002, DuplicateRate: 0.001,
		SwapRate: 0.01, PoisonRate: 0.0005, ClockAheadRate: 0.0002, OutageRate: 0.0002, OutageLength: 2 * time.Minute, InchRate: 0.1}
}

// Record is one record as a gateway sends it.
type Record struct {
	Key       []byte
	Value     []byte
	Timestamp time.Time // Kafka record timestamp: when the gateway sent it
	Kind      string    // normal, duplicate, poison, clock_ahead, replay
}

// Line generates the stream.
type Line struct {
	o       Options
	rng     *rand.Rand
	second  int64 // event-time seconds since Start of the current round
	episode []int // remaining seconds of each machine's episode
	offline []int // remaining seconds of each machine's outage
	held    [][]Record
	seq     []int64
	out     []Record // pending output
	nextID  int64
}

// New returns a line.
func New(o Options) *Line {
	o.ensureDefaults()
	sensors := o.Machines * o.SensorsPerMachine
	return &Line{
		o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		episode: make([]int, o.Machines), offline: make([]int, o.Machines),
		held: make([][]Record, o.Machines), seq: make([]int64, sensors),
	}
}

// MachineID names machine m.
func MachineID(m int) string { return fmt.Sprintf("M-%03d", m) }

// Next returns the next record.
func (l *Line) Next() Record {
	for len(l.out) == 0 {
		l.round()
	}
	r := l.out[0]
	l.out = l.out[1:]
	return r
}

// EventTime is the event time of the round being generated.
func (l *Line) EventTime() time.Time { return l.o.Start.Add(time.Duration(l.second) * time.Second) }

// round generates one second of events for every sensor.
func (l *Line) round() {
	o := l.o
	now := l.EventTime()
	var batch []Record
	for m := 0; m < o.Machines; m++ {
		if l.episode[m] == 0 && l.rng.Float64() < o.EpisodeRate {
			l.episode[m] = 15 + l.rng.IntN(15)
		}
		if l.offline[m] == 0 && len(l.held[m]) == 0 && l.rng.Float64() < o.OutageRate {
			l.offline[m] = int(o.OutageLength / time.Second)
		}
		for s := 0; s < o.SensorsPerMachine; s++ {
			sensor := m*o.SensorsPerMachine + s
			ts := now.Add(time.Duration(l.rng.IntN(1000)) * time.Millisecond)
			value := 1.5 + 3*l.rng.Float64()
			if l.episode[m] > 0 && l.rng.Float64() < 0.4 {
				value = 7.1 + 6*l.rng.Float64()
			}
			rec := l.event(m, sensor, ts, value)
			if l.offline[m] > 0 {
				rec.Kind = "replay"
				l.held[m] = append(l.held[m], rec)
				continue
			}
			batch = append(batch, rec)
		}
		if l.episode[m] > 0 {
			l.episode[m]--
		}
		if l.offline[m] > 0 {
			l.offline[m]--
			if l.offline[m] == 0 {
				// Back online: the buffer is replayed, stamped now.
				for _, h := range l.held[m] {
					h.Timestamp = now.Add(time.Duration(len(batch)) * time.Millisecond)
					batch = append(batch, h)
				}
				l.held[m] = nil
			}
		}
	}
	for i := 0; i+1 < len(batch); i++ {
		if l.rng.Float64() < o.SwapRate {
			batch[i], batch[i+1] = batch[i+1], batch[i]
		}
	}
	for _, r := range batch {
		if l.rng.Float64() < o.PoisonRate {
			r = l.poison(r)
		}
		l.out = append(l.out, r)
		if l.rng.Float64() < o.DuplicateRate {
			d := r
			d.Kind = "duplicate"
			l.out = append(l.out, d)
		}
	}
	l.second++
}

func (l *Line) event(m, sensor int, ts time.Time, value float64) Record {
	machine := MachineID(m)
	unit := "mm/s"
	if l.rng.Float64() < l.o.InchRate {
		unit, value = "in/s", value/25.4
	}
	quality := "good"
	if l.rng.Float64() < 0.02 {
		quality = "uncertain"
	}
	kind := "normal"
	recordTS := ts.Add(50 * time.Millisecond)
	evTS := ts
	if l.rng.Float64() < l.o.ClockAheadRate {
		evTS = ts.Add(time.Hour)
		kind = "clock_ahead"
	}
	l.nextID++
	seq := l.seq[sensor]
	l.seq[sensor]++
	v := make([]byte, 0, 256)
	v = append(v, `{"event_id":"ev-`...)
	v = strconv.AppendInt(v, l.nextID, 10)
	v = append(v, `","machine_id":"`...)
	v = append(v, machine...)
	v = append(v, `","sensor_id":"S-`...)
	v = strconv.AppendInt(v, int64(sensor), 10)
	v = append(v, `","ts":`...)
	v = strconv.AppendInt(v, evTS.UnixMilli(), 10)
	v = append(v, `,"seq":`...)
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, `,"value":`...)
	v = strconv.AppendFloat(v, round3(value), 'f', -1, 64)
	v = append(v, `,"unit":"`...)
	v = append(v, unit...)
	v = append(v, `","schema_version":1,"quality":"`...)
	v = append(v, quality...)
	v = append(v, `"}`...)
	return Record{Key: []byte(machine), Value: v, Timestamp: recordTS, Kind: kind}
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

var poisons = []string{
	`not json at all`,
	`{"event_id":"p","machine_id":"%s","sensor_id":"S","ts":"yesterday","seq":1,"value":9,"unit":"mm/s","schema_version":1,"quality":"good"}`,
	`{"event_id":"p","machine_id":"%s","sensor_id":"S","ts":1,"seq":1,"value":9,"unit":"mm/s","schema_version":7,"quality":"good"}`,
	`{"event_id":"p","machine_id":"%s","sensor_id":"S","ts":1,"seq":-4,"value":9,"unit":"furlongs","schema_version":1,"quality":"good"}`,
	`{"event_id":"p","machine_id":"OTHER-%s","sensor_id":"S","ts":1,"seq":1,"value":9,"unit":"mm/s","schema_version":1,"quality":"good"}`,
}

func (l *Line) poison(r Record) Record {
	p := poisons[l.rng.IntN(len(poisons))]
	if p[0] == '{' {
		p = fmt.Sprintf(p, r.Key)
	}
	return Record{Key: r.Key, Value: []byte(p), Timestamp: r.Timestamp, Kind: "poison"}
}
