package sim

import (
	"bytes"
	"testing"
)

func TestDeterministicAndTroubled(t *testing.T) {
	a, b := New(Demo()), New(Demo())
	kinds := map[string]int{}
	for i := 0; i < 20_000; i++ {
		ra, rb := a.Next(), b.Next()
		if !bytes.Equal(ra.Key, rb.Key) || !bytes.Equal(ra.Value, rb.Value) || !ra.Timestamp.Equal(rb.Timestamp) || ra.Kind != rb.Kind {
			t.Fatalf("record %d differs between two lines with the same seed", i)
		}
		kinds[ra.Kind]++
	}
	for _, k := range []string{"normal", "duplicate", "poison", "clock_ahead", "replay"} {
		if kinds[k] == 0 {
			t.Errorf("no %s record in 20000: %v", k, kinds)
		}
	}
	o := Demo()
	o.Seed = 8
	c := New(o)
	same := 0
	a = New(Demo())
	for i := 0; i < 100; i++ {
		if bytes.Equal(a.Next().Value, c.Next().Value) {
			same++
		}
	}
	if same == 100 {
		t.Error("a different seed gives the same stream")
	}
}
