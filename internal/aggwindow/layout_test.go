package aggwindow

import (
	"testing"
	"unsafe"
)

// TestHotLayout: win and pane keep the fields an event reads in their
// first 64 bytes, and are 128 bytes long, a size class whose objects Go
// aligns to 128 bytes: one cache line per window or pane and event (see
// their doc). A field added in the wrong place fails this, not a result.
func TestHotLayout(t *testing.T) {
	var w win
	var p pane
	for _, c := range []struct {
		name      string
		size, hot uintptr
	}{
		{"win", unsafe.Sizeof(w), unsafe.Offsetof(w.ks) + unsafe.Sizeof(w.ks)},
		{"pane", unsafe.Sizeof(p), unsafe.Offsetof(p.dirty) + unsafe.Sizeof(p.dirty)},
	} {
		if c.size != 128 || c.hot > 64 {
			t.Errorf("%s: %d bytes, the fields an event reads end at byte %d; want 128 and at most 64", c.name, c.size, c.hot)
		}
	}
}
