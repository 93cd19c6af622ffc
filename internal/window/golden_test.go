package window

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt")

// Golden scenarios: testdata/*.txt.
//
// A file is a header, an input section and an output section:
//
//	# comments anywhere
//	config N=3 S=2m D=30s L=10m H=1h
//	-- input --
//	<key> <event_id> <ts> <value> <qualifies y|n>
//	sweep                       (run Sweep; prints the number of keys deleted)
//	-- output --
//	(generated)
//
// ts is h:mm:ss[.mmm] since the epoch, or integer milliseconds. The config
// line may omit fields (defaults: the vibration rule). Alert ids are
// "<key>/<first event id>".
//
// The output echoes every input line, its outcome and W before it, then the
// revisions it caused, one per line:
//
//	<status> <alert_id> r<revision> [into=<id>] start= end= count= evidence=[id@ts ...] wm= [late]
//
// and ends with the final watermark and state counts. Every scenario is run
// three ways — plainly, sweeping after every record, and restoring from the
// encoded state after every record — which must agree, and is checked
// against the brute-force reference after every record. Regenerate with
// go test -run TestGolden -update, then review the diff by hand against
// SPEC.md section 4.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("want at least 5 scenarios, found %d", len(files))
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			text := string(raw)
			head, rest, ok := strings.Cut(text, "-- input --\n")
			if !ok {
				t.Fatal("no -- input -- section")
			}
			input, want, _ := strings.Cut(rest, "-- output --\n")
			cfg := parseConfig(t, head)

			got := runGolden(t, cfg, input, "plain")
			// The state lines (sweep counts, final counts) legitimately
			// depend on garbage collection; the trace must not.
			if sweep := runGolden(t, cfg, input, "sweep"); trace(sweep) != trace(got) {
				t.Errorf("sweeping after every record changed the output:\n%s", sweep)
			}
			if restore := runGolden(t, cfg, input, "restore"); trace(restore) != trace(got) {
				t.Errorf("restoring after every record changed the output:\n%s", restore)
			}
			if *update {
				if err := os.WriteFile(file, []byte(head+"-- input --\n"+input+"-- output --\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("output differs from %s (rerun with -update and review the diff):\n--- got\n%s--- want\n%s", file, got, want)
			}
		})
	}
}

// trace drops the lines that report state sizes.
func trace(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "sweep ") && !strings.HasPrefix(line, "final ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func parseConfig(t *testing.T, head string) Config {
	cfg := vibration()
	for line := range strings.Lines(head) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "config" {
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			if k == "N" {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Threshold = n
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("config %s: %v", kv, err)
			}
			ms := d.Milliseconds()
			switch k {
			case "S":
				cfg.SizeMs = ms
			case "D":
				cfg.DelayMs = ms
			case "L":
				cfg.LatenessMs = ms
			case "H":
				cfg.DedupHorizonMs = ms
			default:
				t.Fatalf("config: unknown field %s", k)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func parseTS(t *testing.T, s string) int64 {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms
	}
	var h, m int64
	var sec float64
	if _, err := fmt.Sscanf(s, "%d:%d:%g", &h, &m, &sec); err != nil {
		t.Fatalf("bad ts %q: %v", s, err)
	}
	return h*3_600_000 + m*60_000 + int64(sec*1000+0.5)
}

func runGolden(t *testing.T, cfg Config, input, mode string) string {
	d := newDriver(t, cfg)
	ck := newChecker(t, cfg)
	var out strings.Builder
	offset := int64(0)
	for line := range strings.Lines(input) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if f[0] == "sweep" {
			fmt.Fprintf(&out, "sweep -> %d keys deleted\n", d.p.Sweep())
			continue
		}
		if len(f) != 5 {
			t.Fatalf("want key event_id ts value qualifies: %q", line)
		}
		value, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		r := rec{ev: Event{Key: f[0], EventID: f[1], SensorID: "s1", TS: parseTS(t, f[2]), Value: value, Offset: offset}}
		offset++
		switch f[4] {
		case "y", "true":
			r.q = true
		case "n", "false":
		default:
			t.Fatalf("qualifies must be y or n: %q", line)
		}
		p := d.p
		res := d.step(r)
		ck.observe(p, r, res)
		ck.checkState(d.p)
		fmt.Fprintf(&out, "%s %s %s %s %s -> %s W=%s", f[0], f[1], fmtTS(r.ev.TS), f[3], f[4], res.Outcome, fmtTS(res.Watermark))
		if res.LatenessMs != 0 {
			fmt.Fprintf(&out, " lateness=%dms", res.LatenessMs)
		}
		out.WriteByte('\n')
		for _, rv := range res.Revisions {
			out.WriteString("  " + fmtRevision(rv) + "\n")
		}
		switch mode {
		case "sweep":
			d.p.Sweep()
		case "restore":
			d.reload()
		}
	}
	st := d.p.Stats()
	fmt.Fprintf(&out, "final W=%s keys=%d events=%d dedup=%d open=%d\n", fmtTS(d.p.Watermark()), st.Keys, st.Events, st.Dedup, st.OpenIncidents)
	return out.String()
}
