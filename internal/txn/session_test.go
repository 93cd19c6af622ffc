package txn

import "testing"

func TestMetaRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 42, 1 << 40} {
		got, ok := DecodeMeta(EncodeMeta(n))
		if !ok || got != n {
			t.Errorf("DecodeMeta(EncodeMeta(%d)) = %d, %v", n, got, ok)
		}
	}
	for _, s := range []string{"", "member-1", "v1 cl=", "v1 cl=-3", "v1 cl=12x", "v2 cl=5"} {
		if n, ok := DecodeMeta(s); ok {
			t.Errorf("DecodeMeta(%q) = %d, true; want not ok", s, n)
		}
	}
}
