//go:build race

package delivery

// raceEnabled: the race detector slows the processor about tenfold, so
// measurements use fewer records.
const raceEnabled = true
