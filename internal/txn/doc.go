// Package txn owns the commit protocol: the one place that decides whether a
// batch of work commits or aborts. It wraps franz-go's GroupTransactSession
// (exactly-once, EOS v2 / KIP-447) and a plain group client (at-least-once)
// behind one Session interface, so the processing loop is the same in both
// modes.
//
// The rules it enforces (docs/ARCHITECTURE.md, "Exactly-once rules"):
//   - one transactional producer per instance, with a stable transactional ID;
//   - the producer ID is fetched eagerly at start so a previous incarnation
//     is fenced before the first poll;
//   - a batch commits only if every produce succeeded (Flush before the
//     promise's error is read) and the group did not rebalance;
//   - the committed offsets carry each partition's changelog position in
//     their metadata, so a restore knows exactly what was committed;
//   - an ordinary abort (committed=false, err=nil) is not an error: the
//     client has rewound to the committed offsets and the caller drops its
//     uncommitted state; an error means the session is unusable (fenced or
//     fatal) and the caller must stop.
//
// It must never import the window logic.
package txn
