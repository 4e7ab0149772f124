#!/bin/sh
# check_prometheus_rules.sh DIR: deploy/prometheus's alert rules are valid
# (promtool check rules) and each alert's unit test passes (promtool test
# rules feedd-rules.test.yaml: quiet while healthy, firing after its for:).
# promtool comes with Debian's prometheus package (scripts/setup.sh).
set -eu
dir=$1
if ! command -v promtool >/dev/null; then
  echo "promtool not found: install Debian's prometheus package (scripts/setup.sh does)" >&2
  exit 1
fi
cd "$dir"
promtool check rules feedd-rules.yaml
# every alert of the rules has a test of its own
for a in $(sed -n 's/^ *- alert: *//p' feedd-rules.yaml); do
  grep -q "^  - name: $a\$" feedd-rules.test.yaml || { echo "no test for alert $a" >&2; exit 1; }
  grep -q "alertname: $a\$" feedd-rules.test.yaml || { echo "no alert_rule_test for $a" >&2; exit 1; }
done
# and a runbook line
n_alerts=$(grep -c '^ *- alert:' feedd-rules.yaml)
n_runbooks=$(grep -c '^ *runbook: ' feedd-rules.yaml)
[ "$n_alerts" -eq "$n_runbooks" ] || { echo "$n_alerts alerts, $n_runbooks runbook lines" >&2; exit 1; }
promtool test rules feedd-rules.test.yaml
