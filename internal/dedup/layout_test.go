package dedup

import (
	"testing"
	"unsafe"
)

// TestKeyStateSize keeps a key's state in the 112-byte allocation size
// class: a store holds one per key, and the per-event work touches it.
func TestKeyStateSize(t *testing.T) {
	if n := unsafe.Sizeof(keyState{}); n > 112 {
		t.Fatalf("keyState is %d bytes; want at most 112 (a size class)", n)
	}
}
