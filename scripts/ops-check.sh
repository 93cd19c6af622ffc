#!/usr/bin/env bash
# scripts/ops-check.sh: checks the monitoring files under deploy/.
#
#   promtool check config deploy/prometheus/prometheus.yml (also checks the
#     rule files it names), promtool check rules deploy/prometheus/alerts.yml,
#     promtool test rules deploy/prometheus/alerts_test.yml;
#   every alert has for:, a severity label, summary, description naming a
#     docs/RUNBOOK.md section that exists, and firing and non-firing tests;
#   deploy/docker-compose.yml parses and has the prometheus and grafana
#     services, whose mounted files exist;
#   the Grafana provisioning files parse; the dashboard JSON parses, every
#     panel has a query, and every query is valid PromQL (promtool).
#
# Installs what is missing: promtool (Debian package prometheus) and PyYAML
# (python3-yaml), with apt-get, as root. Idempotent; exits non-zero on any
# failure. Works on a fresh Debian machine (CI) and where the tools exist.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
step() { echo "==> $*"; }

apt_updated=0
apt_install() { # apt_install PKG...: install Debian packages, updating the lists once
	command -v apt-get >/dev/null || fail "apt-get not found: install $* yourself"
	[ "$(id -u)" = 0 ] || fail "not root: cannot apt-get install $* (install it, or run as root)"
	export DEBIAN_FRONTEND=noninteractive
	# Explicit checks: set -e does not apply where the caller tests the result.
	if [ "$apt_updated" = 0 ]; then
		apt-get update -qq || fail "apt-get update failed"
		apt_updated=1
	fi
	local p
	for p in "$@"; do
		# Make sure the package exists before installing it, with a clear message.
		# (into a variable first: grep -q closing the pipe early would make
		# pipefail report apt-cache's SIGPIPE as a failure)
		local policy_out
		policy_out=$(LC_ALL=C apt-cache policy "$p" 2>/dev/null || true)
		if ! grep -q 'Candidate: [^(]' <<<"$policy_out"; then
			fail "no installable Debian package $p (apt-cache policy $p shows no candidate)"
		fi
	done
	apt-get install -y -qq --no-install-recommends "$@" >/dev/null || fail "apt-get install $* failed"
}

# ---- promtool ------------------------------------------------------------------

if ! command -v promtool >/dev/null; then
	step "installing promtool (Debian package prometheus)"
	# The package also ships the Prometheus server, whose postinst would start
	# it (on :9090) where an init system runs. Only promtool is wanted here:
	# forbid service starts during the install (policy-rc.d, honoured by
	# invoke-rc.d and deb-systemd-invoke) unless a policy already exists.
	policy=/usr/sbin/policy-rc.d
	own_policy=0
	if [ ! -e "$policy" ] && [ "$(id -u)" = 0 ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		own_policy=1
	fi
	rc=0
	(apt_install prometheus) || rc=$?
	if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
	[ "$rc" = 0 ] || fail "could not install the prometheus package (promtool)"
	apt_updated=1
	command -v promtool >/dev/null || fail "promtool still not found after installing prometheus"
fi
promtool --version 2>&1 | sed -n 1p

# ---- a python3 with PyYAML -------------------------------------------------------

py=""
for cand in python3 /usr/bin/python3; do
	if command -v "$cand" >/dev/null && "$cand" -c 'import yaml' 2>/dev/null; then
		py=$cand
		break
	fi
done
if [ -z "$py" ]; then
	step "installing python3-yaml"
	apt_install python3 python3-yaml
	/usr/bin/python3 -c 'import yaml' || fail "python3 cannot import yaml after installing python3-yaml"
	py=/usr/bin/python3
fi

# ---- Prometheus --------------------------------------------------------------------

step "promtool check config deploy/prometheus/prometheus.yml"
promtool check config deploy/prometheus/prometheus.yml

step "promtool check rules deploy/prometheus/alerts.yml"
promtool check rules deploy/prometheus/alerts.yml

step "promtool test rules deploy/prometheus/alerts_test.yml"
promtool test rules deploy/prometheus/alerts_test.yml

# ---- structure: alerts, compose, Grafana -------------------------------------------

step "alerts, tests, compose file, Grafana provisioning and dashboard"
"$py" - <<'PY'
import json, os, re, sys
import yaml

errors = []
def err(msg):
    errors.append(msg)

def load_yaml(path):
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except Exception as e:  # noqa: BLE001 - report any parse problem
        err(f"{path}: does not parse: {e}")
        return None

# Runbook sections, as GitHub anchors and as titles.
titles = []
with open("docs/RUNBOOK.md") as f:
    for line in f:
        m = re.match(r"^##+\s+(.*?)\s*$", line)
        if m:
            titles.append(m.group(1))
def anchor(title):
    a = title.strip().lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")
anchors = {anchor(t) for t in titles}

# Alerts.
rules = load_yaml("deploy/prometheus/alerts.yml") or {}
alerts = {}
for g in rules.get("groups", []):
    for r in g.get("rules", []):
        if "alert" not in r:
            continue
        name = r["alert"]
        if name in alerts:
            err(f"alerts.yml: alert {name} defined twice")
        alerts[name] = r
        if not r.get("for"):
            err(f"alerts.yml: {name} has no for:")
        sev = (r.get("labels") or {}).get("severity")
        if sev not in ("critical", "warning", "info"):
            err(f"alerts.yml: {name}: severity label {sev!r}, want critical, warning or info")
        ann = r.get("annotations") or {}
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                err(f"alerts.yml: {name} has no {key} annotation")
        desc = ann.get("description", "")
        named = [t for t in titles if f'"{t}"' in desc]
        if "docs/RUNBOOK.md" not in desc or not named:
            err(f'alerts.yml: {name}: description names no docs/RUNBOOK.md section (want: Runbook: docs/RUNBOOK.md, section "<heading>")')
        url = ann.get("runbook_url", "")
        m = re.match(r"^docs/RUNBOOK\.md#(.+)$", url)
        if not m or m.group(1) not in anchors:
            err(f"alerts.yml: {name}: runbook_url {url!r} is not a docs/RUNBOOK.md heading anchor {sorted(anchors)}")
if len(alerts) < 8:
    err(f"alerts.yml: only {len(alerts)} alerts")

# Every alert is tested firing and not firing.
tests = load_yaml("deploy/prometheus/alerts_test.yml") or {}
firing, quiet = set(), set()
for t in tests.get("tests", []):
    for a in t.get("alert_rule_test", []) or []:
        (firing if a.get("exp_alerts") else quiet).add(a.get("alertname"))
for name in sorted(alerts):
    if name not in firing:
        err(f"alerts_test.yml: no test where {name} fires")
    if name not in quiet:
        err(f"alerts_test.yml: no test where {name} does not fire")
for name in sorted((firing | quiet) - set(alerts)):
    err(f"alerts_test.yml: tests an alert alerts.yml does not define: {name}")

# Compose file.
compose = load_yaml("deploy/docker-compose.yml") or {}
services = compose.get("services") or {}
for s in ("kafka", "processor-0", "processor-1", "prometheus", "grafana"):
    if s not in services:
        err(f"docker-compose.yml: no service {s}")
for s in ("prometheus", "grafana"):
    svc = services.get(s) or {}
    if not svc.get("image"):
        err(f"docker-compose.yml: service {s} has no image")
    for v in svc.get("volumes") or []:
        src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
        if src.startswith("."):
            p = os.path.normpath(os.path.join("deploy", src))
            if not os.path.exists(p):
                err(f"docker-compose.yml: service {s} mounts {src}, which does not exist ({p})")

# Prometheus scrapes the two replicas of the compose file.
prom = load_yaml("deploy/prometheus/prometheus.yml") or {}
targets = [t for sc in prom.get("scrape_configs", []) for c in sc.get("static_configs", []) for t in c.get("targets", [])]
for s in ("processor-0", "processor-1"):
    if not any(t.split(":")[0] == s for t in targets):
        err(f"prometheus.yml: does not scrape {s}")

# Grafana provisioning.
ds = load_yaml("deploy/grafana/provisioning/datasources/prometheus.yml") or {}
uids = {d.get("uid") for d in ds.get("datasources", [])}
if not uids - {None}:
    err("grafana datasources: no datasource with a uid")
dp = load_yaml("deploy/grafana/provisioning/dashboards/dashboards.yml") or {}
if not dp.get("providers"):
    err("grafana dashboards.yml: no providers")

# Dashboard.
path = "deploy/grafana/dashboards/processor.json"
try:
    with open(path) as f:
        dash = json.load(f)
except Exception as e:  # noqa: BLE001
    err(f"{path}: does not parse: {e}")
    dash = {}
if dash:
    for key in ("uid", "title", "panels"):
        if not dash.get(key):
            err(f"{path}: no {key}")
    ids = set()
    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))
    n = 0
    for p in walk(dash.get("panels", [])):
        if p.get("type") == "row":
            continue
        n += 1
        pid = p.get("id")
        if pid in ids:
            err(f"{path}: panel id {pid} used twice")
        ids.add(pid)
        targets = p.get("targets") or []
        if not targets or not all(t.get("expr") for t in targets):
            err(f"{path}: panel {p.get('title')!r} has a target without expr")
        dsu = (p.get("datasource") or {}).get("uid")
        if dsu not in uids and dsu != "${datasource}":
            err(f"{path}: panel {p.get('title')!r} uses datasource uid {dsu!r}, not a provisioned one {sorted(u for u in uids if u)}")
    if n < 10:
        err(f"{path}: only {n} panels")

for e in errors:
    print("FAIL: " + e, file=sys.stderr)
if errors:
    sys.exit(1)
print(f"ok: {len(alerts)} alerts, each tested firing and not firing; compose services {sorted(services)}; dashboard {dash.get('title')!r}")
PY

# PromQL syntax of the dashboard's queries: promtool checks them as recording
# rules, with Grafana's variables replaced by values.
step "promtool check rules: the dashboard's queries"
dash_rules=$(mktemp --suffix=.yml)
trap 'rm -f "$dash_rules"' EXIT
"$py" - "$dash_rules" <<'PY'
import json, sys
import yaml
dash = json.load(open("deploy/grafana/dashboards/processor.json"))
def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))
rules = []
for p in walk(dash["panels"]):
    for t in p.get("targets") or []:
        expr = t["expr"].replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$instance", ".*")
        rules.append({"record": f"dashboard:panel{p['id']}:{t['refId']}", "expr": expr})
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[1], "w"), sort_keys=False)
print(f"{len(rules)} queries")
PY
promtool check rules "$dash_rules"

echo
echo "scripts/ops-check.sh: all checks passed"
