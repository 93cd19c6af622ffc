//go:build amd64 || arm64

package dedup

import "unsafe"

// prefetch asks the CPU to start loading the cache line at p without
// waiting for it (a prefetch instruction: it never faults and changes no
// state a program can observe).
//
//go:noescape
func prefetch(p unsafe.Pointer)
