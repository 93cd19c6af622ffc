//go:build amd64 || arm64

package dedup

// prefetch asks the CPU to start loading the cache line of p without
// waiting for it (a prefetch instruction: it never faults and changes no
// state a program can observe).
//
//go:noescape
func prefetch(p *idxSlot)
