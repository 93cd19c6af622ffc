package state

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkBatchCommit is the commit of one transaction's state: 200 changed
// keys of ~2 KB plus the checkpoint, in one atomic batch.
func BenchmarkBatchCommit(b *testing.B) {
	s, err := Open(b.TempDir(), testLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 2048)
	keys := make([][]byte, 200)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("kM-%05d", i))
	}
	b.SetBytes(int64(len(keys) * len(val)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt := s.NewBatch()
		for _, k := range keys {
			if err := bt.Put(int32(i%3), k, val); err != nil {
				b.Fatal(err)
			}
		}
		if err := bt.SetCheckpoint(int32(i%3), int64(i)); err != nil {
			b.Fatal(err)
		}
		if err := bt.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestore is a full restore of a partition from a changelog of
// 100k records over 5k keys.
func BenchmarkRestore(b *testing.B) {
	log := memLog{}
	var target int64
	val := make([]byte, 512)
	for i := 0; i < 100_000; i++ {
		target = log.append(0, fmt.Sprintf("k%05d", i%5000), val) + 1
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := Open(b.TempDir(), testLogger())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Restore(context.Background(), 0, target, log); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(100_000*b.N)/b.Elapsed().Seconds(), "records/s")
}
