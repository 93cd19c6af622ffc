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

func TestPositionsRoundTrip(t *testing.T) {
	in := map[string]int64{"b.v1": 7, "a.v2": 0, "c-x.v10": 123456789}
	s := EncodePositions(in)
	if s != "v2 a.v2=0 b.v1=7 c-x.v10=123456789" {
		t.Fatalf("encoded %q", s)
	}
	out, ok := DecodePositions(s)
	if !ok || len(out) != 3 || out["b.v1"] != 7 || out["c-x.v10"] != 123456789 {
		t.Fatalf("decoded %v %v", out, ok)
	}
	if p, ok := DecodePositions("v2"); !ok || len(p) != 0 {
		t.Fatalf("empty v2: %v %v", p, ok)
	}
	for _, bad := range []string{"v1 cl=3", "v2x", "v2 a", "v2 a=-1", "v2 =3", "v2 a=x"} {
		if _, ok := DecodePositions(bad); ok {
			t.Errorf("%q decoded", bad)
		}
	}
	if _, ok := DecodeMeta("v2 a.v1=3"); ok {
		t.Error("v1 decoder read v2")
	}
}
