package deliver

import (
	"context"
	"sync"
)

// partition holds the buffered records of one assigned alerts-topic
// partition and runs one lane per sink over them. A lane hands its records
// to its sink strictly in offset order, one at a time; a record leaves the
// buffer once every lane has finished it, and the partition's commit
// position is one past the last record that left.
type partition struct {
	topic   string
	id      int32
	runners []*sinkRunner
	dlq     DeadLetterFunc
	// onProgress, if set, is called by a lane after records left the
	// buffer (lag metric, resuming a paused fetch). It runs outside mu.
	onProgress func(*partition)
	wake       []chan struct{} // per lane, capacity 1

	mu struct {
		sync.Mutex
		buf    []Record // records not finished by every lane, in offset order
		pos    []int    // per lane: index in buf of its next record
		done   int64    // offset one past the last record every lane finished; -1: none yet
		epoch  int32    // leader epoch of that record
		hwm    int64    // last stable offset seen; -1 unknown
		paused bool     // fetching paused (owned by the Service)
	}
}

func newPartition(topic string, id int32, runners []*sinkRunner, dlq DeadLetterFunc, onProgress func(*partition)) *partition {
	p := &partition{topic: topic, id: id, runners: runners, dlq: dlq, onProgress: onProgress}
	p.wake = make([]chan struct{}, len(runners))
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
	}
	p.mu.pos = make([]int, len(runners))
	p.mu.done = -1
	p.mu.epoch = -1
	p.mu.hwm = -1
	return p
}

// push appends records (in offset order, after every buffered one) and
// returns how many records are buffered now.
func (p *partition) push(recs ...Record) int {
	p.mu.Lock()
	p.mu.buf = append(p.mu.buf, recs...)
	n := len(p.mu.buf)
	p.mu.Unlock()
	for _, w := range p.wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	return n
}

// setHWM records the partition's end (last stable offset) if it moved on.
func (p *partition) setHWM(o int64) {
	p.mu.Lock()
	p.mu.hwm = max(p.mu.hwm, o)
	p.mu.Unlock()
}

// startAt records off, where consuming starts, as the finished position
// of a partition that has finished nothing yet (pinStart).
func (p *partition) startAt(off int64) {
	p.mu.Lock()
	if p.mu.done < 0 && len(p.mu.buf) == 0 {
		p.mu.done = off
	}
	p.mu.Unlock()
}

// commitPos returns the offset to commit (one past the last record every
// lane finished) and its leader epoch; ok is false when nothing finished.
func (p *partition) commitPos() (offset int64, epoch int32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.done, p.mu.epoch, p.mu.done >= 0
}

// lag is the offsets between the last stable offset and the oldest record
// not finished by every lane; ok is false while either is unknown.
func (p *partition) lag() (n int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.hwm < 0 {
		return 0, false
	}
	switch {
	case len(p.mu.buf) > 0:
		return max(0, p.mu.hwm-p.mu.buf[0].Offset), true
	case p.mu.done >= 0:
		return max(0, p.mu.hwm-p.mu.done), true
	}
	return 0, false
}

// buffered is the number of records held.
func (p *partition) buffered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.buf)
}

// run runs the lanes until ctx ends and returns once all of them stopped.
// A lane stops between records, or after its in-flight attempt answered.
func (p *partition) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range p.runners {
		wg.Go(func() { p.lane(ctx, i) })
	}
	wg.Wait()
}

func (p *partition) lane(ctx context.Context, i int) {
	for {
		rec, ok := p.next(ctx, i)
		if !ok {
			return
		}
		if err := p.runners[i].handle(ctx, rec, p.dlq); err != nil {
			return // stopped: rec stays unfinished
		}
		if p.advance(i) && p.onProgress != nil {
			p.onProgress(p)
		}
	}
}

// next waits for lane i's next record.
func (p *partition) next(ctx context.Context, i int) (Record, bool) {
	for {
		if ctx.Err() != nil {
			return Record{}, false
		}
		p.mu.Lock()
		if p.mu.pos[i] < len(p.mu.buf) {
			r := p.mu.buf[p.mu.pos[i]]
			p.mu.Unlock()
			return r, true
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return Record{}, false
		case <-p.wake[i]:
		}
	}
}

// advance marks lane i's current record finished and drops the records
// every lane finished; it reports whether any were dropped.
func (p *partition) advance(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.pos[i]++
	m := p.mu.pos[0]
	for _, x := range p.mu.pos[1:] {
		m = min(m, x)
	}
	if m == 0 {
		return false
	}
	last := p.mu.buf[m-1]
	p.mu.done, p.mu.epoch = last.Offset+1, last.LeaderEpoch
	clear(p.mu.buf[:m]) // drop references for the collector
	p.mu.buf = p.mu.buf[m:]
	for j := range p.mu.pos {
		p.mu.pos[j] -= m
	}
	return true
}
