package window

// Advance moves the watermark to w if that is later (W never decreases)
// and closes every incident that is then due (step 7), returning the
// Closed revisions. Process moves W by itself from each event; Advance is
// for a caller whose watermark also depends on something else than the
// partition's own events (a merged stream's inputs, the end of input).
func (p *Partition) Advance(w int64) []Revision {
	if w > p.wm {
		p.wm = w
		p.dirtyMeta = true
	}
	if len(p.open) == 0 {
		return nil
	}
	return p.closeDue(nil)
}
