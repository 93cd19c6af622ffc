package consume

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Chunked changelog values (docs/ARCHITECTURE.md, "Changelog topic"). A
// Kafka record holds about 1 MB (the producer's and the broker's limits),
// but nothing bounds one state entry: a sliding key remembers every event
// id of its dedup horizon. A value longer than chunkBytes is therefore
// written as its chunks, each under its own record key, plus a small
// manifest under the entry's own key, all in the same transaction (one
// batch of changelogEntries), so a read_committed restore sees them
// together. Loading resolves a manifest to the concatenated chunks; the
// chunks themselves are never state entries.
//
//	chunk key:  'c' | entry key | u32be index    (index 0 .. count-1)
//	manifest:   u8 0xff | u8 version=1 | uvarint count | uvarint total length | u32be CRC-32C of the whole value
//
// No entry key starts with 'c' (they are "k" + name, "s" + name, "m", "a",
// "h", "x"),
// so chunk keys never collide with entries, and the fixed-width index
// makes the chunk key of (entry, index) unique. No value format starts
// with 0xff (window, aggwindow, dedup and extra encodings start with a
// small format version, accounting with '{', the hash is hex), so a
// manifest is never confused with a value.
const (
	changelogChunkPrefix = 'c'
	chunkManifestMarker  = 0xff
	chunkManifestVersion = 1
	// chunkBytes bounds a changelog value, leaving room under the
	// producer's 1,000,012-byte batches for the record key (an entry name
	// up to a few KB) and headers.
	chunkBytes = 512 << 10
	// maxChunks bounds a manifest's count on load (16 GiB of chunks): a
	// larger count is corruption, not state.
	maxChunks = 1 << 15
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// errCorruptChunks is wrapped by resolveChunks when a manifest and the
// chunks it names disagree.
var errCorruptChunks = errors.New("consume: corrupt chunked state entry")

// chunkKey is the record key of chunk i of the entry with record key name.
func chunkKey(name []byte, i int) []byte {
	k := make([]byte, 0, 1+len(name)+4)
	k = append(k, changelogChunkPrefix)
	k = append(k, name...)
	return binary.BigEndian.AppendUint32(k, uint32(i))
}

// isChunkKey reports whether a record key is a chunk's.
func isChunkKey(key []byte) bool {
	return len(key) >= 5 && key[0] == changelogChunkPrefix
}

// splitChunks cuts value into chunks of at most size bytes and returns
// them with the manifest that names them.
func splitChunks(value []byte, size int) (manifest []byte, chunks [][]byte) {
	for off := 0; off < len(value); off += size {
		chunks = append(chunks, value[off:min(off+size, len(value))])
	}
	m := []byte{chunkManifestMarker, chunkManifestVersion}
	m = binary.AppendUvarint(m, uint64(len(chunks)))
	m = binary.AppendUvarint(m, uint64(len(value)))
	m = binary.BigEndian.AppendUint32(m, crc32.Checksum(value, crc32c))
	return m, chunks
}

// chunkManifest is a decoded manifest.
type chunkManifest struct {
	count int
	total uint64
	crc   uint32
}

// isManifest reports whether an entry's value is a chunk manifest.
func isManifest(value []byte) bool {
	return len(value) > 0 && value[0] == chunkManifestMarker
}

// decodeManifest parses a manifest (isManifest).
func decodeManifest(v []byte) (chunkManifest, error) {
	var m chunkManifest
	if len(v) < 2 || v[0] != chunkManifestMarker {
		return m, fmt.Errorf("%w: not a manifest", errCorruptChunks)
	}
	if v[1] != chunkManifestVersion {
		return m, fmt.Errorf("%w: manifest version %d, want %d", errCorruptChunks, v[1], chunkManifestVersion)
	}
	v = v[2:]
	n, k := binary.Uvarint(v)
	if k <= 0 || n == 0 || n > maxChunks {
		return m, fmt.Errorf("%w: bad chunk count", errCorruptChunks)
	}
	v = v[k:]
	total, k := binary.Uvarint(v)
	if k <= 0 || total == 0 {
		return m, fmt.Errorf("%w: bad total length", errCorruptChunks)
	}
	v = v[k:]
	if len(v) != 4 {
		return m, fmt.Errorf("%w: manifest of the wrong length", errCorruptChunks)
	}
	m.count, m.total, m.crc = int(n), total, binary.BigEndian.Uint32(v)
	return m, nil
}

// joinChunks resolves a manifest: it reads chunks 0..count-1 of the entry
// name through get (nil: absent) and checks them against the manifest.
func joinChunks(name, manifest []byte, get func(key []byte) ([]byte, error)) ([]byte, chunkManifest, error) {
	m, err := decodeManifest(manifest)
	if err != nil {
		return nil, m, fmt.Errorf("entry %q: %w", name, err)
	}
	var b bytes.Buffer
	for i := range m.count {
		c, err := get(chunkKey(name, i))
		if err != nil {
			return nil, m, err
		}
		if len(c) == 0 {
			return nil, m, fmt.Errorf("entry %q: %w: chunk %d of %d missing", name, errCorruptChunks, i, m.count)
		}
		if uint64(b.Len())+uint64(len(c)) > m.total {
			return nil, m, fmt.Errorf("entry %q: %w: chunks longer than the manifest's %d bytes", name, errCorruptChunks, m.total)
		}
		b.Write(c)
	}
	v := b.Bytes()
	if uint64(len(v)) != m.total {
		return nil, m, fmt.Errorf("entry %q: %w: %d bytes of chunks, the manifest says %d", name, errCorruptChunks, len(v), m.total)
	}
	if crc32.Checksum(v, crc32c) != m.crc {
		return nil, m, fmt.Errorf("entry %q: %w: checksum mismatch", name, errCorruptChunks)
	}
	return v, m, nil
}

// chunkedEntries appends the changelog records of one entry (record key
// name, value nil for a tombstone) to out: the value itself when it fits
// in size bytes, else its chunks and then its manifest; followed by
// tombstones of the chunks of the entry's previous value (had: its chunk
// count as committed) that the new value no longer uses. It returns the
// entry's new chunk count.
func chunkedEntries(out []clEntry, rp *rulePart, name, value []byte, had, size int) ([]clEntry, int) {
	n := 0
	if len(value) > size {
		manifest, chunks := splitChunks(value, size)
		for i, c := range chunks {
			out = append(out, clEntry{rp, chunkKey(name, i), c})
		}
		out = append(out, clEntry{rp, name, manifest})
		n = len(chunks)
	} else {
		out = append(out, clEntry{rp, name, value})
	}
	for i := n; i < had; i++ {
		out = append(out, clEntry{rp, chunkKey(name, i), nil})
	}
	return out, n
}
