//go:build !amd64 && !arm64

package dedup

import "unsafe"

// prefetch does nothing on architectures without an assembly prefetch here.
func prefetch(unsafe.Pointer) {}
