//go:build amd64 || arm64

package dedup

// prefetch asks the CPU to start loading the cache line of p without
// waiting for it (a prefetch instruction: it never faults and changes no
// state a program can observe).
//
//go:noescape
func prefetch(p *idxSlot)

// prefetchString is prefetch for the first cache line of s's bytes (none
// for an empty s: a prefetch of any address, nil included, never faults).
//
//go:noescape
func prefetchString(s string)
