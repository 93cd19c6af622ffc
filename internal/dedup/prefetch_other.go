//go:build !amd64 && !arm64

package dedup

// prefetch does nothing on architectures without an assembly prefetch here.
func prefetch(*idxSlot) {}

// prefetchString does nothing on architectures without an assembly prefetch here.
func prefetchString(string) {}
