// Package ops checks the processor's operational surface against the
// monitoring files that depend on it, using the built binary's demo
// (`processor demo --http`: franz-go's in-process kfake cluster and a
// simulated production line, no broker needed):
//
//   - every processor_* metric named in deploy/grafana/dashboards/processor.json
//     and deploy/prometheus/alerts.yml exists in the live /metrics output;
//   - the metrics move while the demo runs and add up when it is done
//     (records, dead letters, alert revisions against what the demo's
//     read_committed reader saw; lag ends at 0);
//   - the status page at "/" shows, in headless Chromium (/usr/bin/chromium,
//     Debian package chromium; the test fails without it), the instance,
//     readiness, the three partitions with offsets, lag and watermarks, and
//     alerts with their evidence.
//
// The rule syntax and unit tests of deploy/prometheus are checked by
// scripts/ops-check.sh (promtool).
package ops
