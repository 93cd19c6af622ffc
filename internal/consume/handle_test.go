package consume

import "testing"

// TestChunkReleaseKeepsBoundedRoom: release keeps the room of a chunk's
// usual outputs for the next handleRecords, and drops a buffer that one
// unusual chunk (a marker closing every window of a partition) grew past
// maxKeptOut, so that an idle partition does not hold it.
func TestChunkReleaseKeepsBoundedRoom(t *testing.T) {
	var c chunk
	c.size(chunkRecords, 1, 1)
	c.out = make([]pendingOut, 0, maxKeptOut)
	c.release()
	if cap(c.out) != maxKeptOut {
		t.Fatalf("room for %d outputs after release, want the %d it had", cap(c.out), maxKeptOut)
	}
	c.size(chunkRecords, 1, 1)
	c.out = make([]pendingOut, 0, maxKeptOut+1)
	c.release()
	if c.out != nil {
		t.Fatalf("room for %d outputs kept after release, want none above %d", cap(c.out), maxKeptOut)
	}
}
