// Package metrics owns the processor's Prometheus collectors and the HTTP
// endpoints that expose them (/metrics, /healthz, /readyz). Collectors are
// registered on an injected prometheus.Registerer, never the global one.
// Names follow processor_<subsystem>_<name>_<unit>.
//
// It must never import the window logic: callers report what happened.
package metrics
