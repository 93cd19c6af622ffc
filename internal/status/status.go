// Package status owns the operator's status page: one server-rendered HTML
// page at "/" showing each owned partition (committed offset, lag,
// watermark, restore state, state size) and the last alerts with their
// evidence. It refreshes itself; there is no front-end build and no script.
//
// It renders a snapshot it is given and never touches processor state.
package status

import (
	"html/template"
	"net/http"
	"time"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/consume"
	"github.com/vibeline/processor/internal/window"
)

// Source provides the snapshot to render.
type Source interface {
	Status() consume.Status
}

// Handler serves the status page of src. now is the clock used only to show
// ages.
func Handler(src Source, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		st := src.Status()
		v := view{Status: st, Now: now().UTC().Format(time.RFC3339)}
		for _, ps := range st.Partitions {
			pv := partView{PartitionStatus: ps, Watermark: "none yet", LastRecord: "none yet"}
			if ps.Watermark != window.NoWatermark {
				pv.Watermark = alerts.FormatTime(ps.Watermark)
			}
			if !ps.LastRecord.IsZero() {
				pv.LastRecord = alerts.FormatTime(ps.LastRecord.UnixMilli())
			}
			v.Parts = append(v.Parts, pv)
		}
		for _, raw := range st.RecentAlerts {
			a, err := alerts.Decode(raw)
			if err != nil {
				continue
			}
			av := alertView{Alert: a, Start: alerts.FormatTime(a.Start), End: alerts.FormatTime(a.End)}
			for _, e := range a.Evidence {
				av.Evidence = append(av.Evidence, evView{Evidence: e, TS: alerts.FormatTime(e.TS)})
			}
			v.Alerts = append(v.Alerts, av)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := page.Execute(w, v); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

type view struct {
	consume.Status
	Now    string
	Parts  []partView
	Alerts []alertView
}

type partView struct {
	consume.PartitionStatus
	Watermark  string
	LastRecord string
}

type alertView struct {
	alerts.Alert
	Start, End string
	Evidence   []evView
}

type evView struct {
	alerts.Evidence
	TS string
}

var page = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<title>processor {{.Instance}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
.bad{color:#b00;font-weight:bold} .ok{color:#070;font-weight:bold}
.alert{border:1px solid #ccc;padding:.5em 1em;margin:.5em 0}
</style></head><body>
<h1>processor <span id="instance">{{.Instance}}</span></h1>
<p>group <b>{{.Group}}</b> · rule <b id="rule">{{.Rule}}</b> · mode {{.Mode}} ·
{{if .Ready}}<span class="ok" id="ready">ready</span>{{else}}<span class="bad" id="ready">not ready</span>{{end}} ·
{{.Commits}} transactions committed, {{.Aborts}} aborted · page at {{.Now}} (refreshes every 5 s)</p>
<h2>Partitions</h2>
<table id="partitions"><tr><th class="l">topic</th><th>partition</th><th>owner</th><th>committed offset</th><th>end offset</th><th>lag</th>
<th class="l">watermark</th><th class="l">last record</th><th>keys</th><th>events</th><th>open incidents</th><th class="l">restore</th></tr>
{{range .Parts}}<tr class="partition" data-partition="{{.Partition}}" data-topic="{{.Topic}}"><td class="l">{{.Topic}}</td><td>{{.Partition}}</td><td>{{$.Instance}}</td>
<td class="committed">{{.CommittedOffset}}</td><td>{{.EndOffset}}</td><td class="lag">{{.Lag}}</td>
<td class="l watermark">{{.Watermark}}</td><td class="l">{{.LastRecord}}</td><td>{{.Keys}}</td><td>{{.Events}}</td>
<td>{{.OpenIncidents}}</td><td class="l">{{.Restore}}</td></tr>
{{else}}<tr><td colspan="12" class="l">no partition assigned</td></tr>{{end}}
</table>
<h2>Last alerts</h2>
{{range .Alerts}}<div class="alert" data-alert="{{.AlertID}}" data-revision="{{.Revision}}">
<b class="status">{{.Status}}</b> rev {{.Revision}} · machine <b class="machine">{{.MachineID}}</b> · {{.Start}} .. {{.End}} · count {{.Count}}{{if .Late}} · late{{end}}{{if .MergedInto}} · merged into {{.MergedInto}}{{end}}<br>
<small>{{.Reason}} · alert {{.AlertID}}</small>
<table class="evidence"><tr><th class="l">event</th><th class="l">sensor</th><th class="l">ts</th><th>value (mm/s)</th><th>partition</th><th>offset</th></tr>
{{range .Evidence}}<tr><td class="l">{{.EventID}}</td><td class="l">{{.SensorID}}</td><td class="l">{{.TS}}</td><td>{{.Value}}</td><td>{{.Partition}}</td><td>{{.Offset}}</td></tr>{{end}}
{{if .EvidenceOmitted}}<tr><td colspan="6" class="l omitted">and {{.EvidenceOmitted}} more, left out of the alert to fit the record limit</td></tr>{{end}}
</table></div>
{{else}}<p id="no-alerts">no alert yet</p>{{end}}
</body></html>
`))
