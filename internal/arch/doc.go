// Package arch holds no code: its test enforces the dependency direction of
// docs/ARCHITECTURE.md (cmd -> consume/txn -> pipeline -> window/state/event/alerts)
// by listing each package's transitive imports.
package arch
